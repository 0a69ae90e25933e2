/**
 * @module
 * A child program for timeout.test.ts: makes calls through long deadlines (a minute
 * each, a caller's signal too) to the server at `process.argv[2]`, reads the answers,
 * prints `done` and returns, leaving the process to exit once nothing keeps it alive.
 * A deadline's timer left running would hold it for that minute.
 */

import process from 'node:process';
import { createFetch } from '../../src/chain.ts';
import { retry } from '../../src/retry.ts';
import { timeout } from '../../src/timeout.ts';

const origin = process.argv[process.argv.length - 1] as string;
const fetch = createFetch({
  use: [
    timeout({ totalMs: 60_000 }),
    retry({ backoff: { initialMs: 1, jitter: 'none' } }),
    timeout({ attemptMs: 60_000 }),
  ],
});
// A success, a 503 retried once, and a call with a caller's signal that never aborts.
const signal = new AbortController().signal;
for (const [path, init] of [
  ['/ok', undefined],
  ['/retry', undefined],
  ['/ok', { signal }],
] as const) {
  const res = await fetch(`${origin}${path}`, init);
  await res.text();
}
console.log('done');
