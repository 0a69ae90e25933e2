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

/**
 * How much `heapUsed` grew over `calls` sequential runs of `call`, after `warm` runs to
 * warm up (default 500), each measure taken after `rounds` collections a task apart
 * (default 4): a WeakRef keeps its target to the end of the task that made it, and a
 * FinalizationRegistry callback runs only after a collection found its target dead, so
 * what it frees goes at a later one.
 */
export async function heapGrowth(
  call: () => Promise<unknown>,
  calls: number,
  { warm = 500, rounds = 4 }: { warm?: number; rounds?: number } = {},
): Promise<number> {
  const collect = collector();
  const settle = async (): Promise<void> => {
    for (let i = 0; i < rounds; i++) {
      collect();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };
  for (let i = 0; i < warm; i++) await call();
  await settle();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < calls; i++) await call();
  await settle();
  return process.memoryUsage().heapUsed - before;
}
