/**
 * @module
 * Bun stops any test after 5 s by default; Node and Deno set no per-test limit. Test
 * files with tests slow by design (an example run as a child process, a million calls
 * through a registry) call {@link allowSlowTests} at their top level, so a loaded
 * machine makes them slower, not failed. A limit still holds, so a hang still fails.
 */

import process from 'node:process';

/** How long one test in such a file may take under Bun (its default is 5 s). */
const SLOW_TEST_TIMEOUT_MS = 60_000;

/**
 * Raises Bun's per-test timeout for the calling test file. Call it at the file's top
 * level: Bun applies it to the file being loaded, and this module is evaluated only
 * once per process, so a call made here on import would reach only the first file.
 */
export async function allowSlowTests(): Promise<void> {
  if (process.versions.bun === undefined) return;
  // A variable specifier: 'bun:test' exists only under Bun (and has no types elsewhere).
  const bunTest = 'bun:test';
  const { setDefaultTimeout } = (await import(bunTest)) as { setDefaultTimeout(ms: number): void };
  setDefaultTimeout(SLOW_TEST_TIMEOUT_MS);
}
