/**
 * @module
 * For the tests that memory stays flat: a full garbage collection before `heapUsed` is
 * read, so only what is still held is counted.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * A full garbage collection, where the runtime offers one: Bun's `Bun.gc`, V8's `gc`
 * exposed at run time on Node. Deno has neither (without `--v8-flags`): there `heapUsed`
 * is read as it is, garbage included, which only makes a check for growth stricter.
 */
export function collector(): () => void {
  const bun = (globalThis as { Bun?: { gc(force: boolean): void } }).Bun;
  if (bun !== undefined) return () => bun.gc(true);
  try {
    setFlagsFromString('--expose-gc');
    return runInNewContext('gc') as () => void;
  } catch {
    return () => {};
  }
}
