/**
 * @module
 * Deno's own `node:test` runs tests with its sanitizers off. The Deno suite maps
 * `node:test` to this file (see `test/deno-import-map.json`), so the very same test
 * files run as `Deno.test` with the op, resource and exit sanitizers on: a leaked
 * timer, socket or pending promise fails the test that leaked it.
 *
 * Only the form the suite uses is supported: flat `test(name, fn)` calls (no
 * `describe`, no subtests), which is also what keeps the test counts equal on
 * Node, Deno and Bun.
 */

declare const Deno: {
  test(definition: {
    name: string;
    fn: () => Promise<void>;
    sanitizeOps: boolean;
    sanitizeResources: boolean;
    sanitizeExit: boolean;
  }): void;
};

/** A test body, as `node:test` takes it (the context argument is not provided here). */
type TestFn = () => unknown;

/** Registers one test with every Deno sanitizer on. */
export function test(name: string, fn: TestFn): void {
  if (typeof name !== 'string' || typeof fn !== 'function') {
    throw new TypeError('the Deno node:test shim supports only test(name, fn); keep tests flat');
  }
  Deno.test({
    name,
    async fn() {
      await fn();
    },
    sanitizeOps: true,
    sanitizeResources: true,
    sanitizeExit: true,
  });
}

export default test;
