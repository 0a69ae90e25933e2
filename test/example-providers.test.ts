/**
 * Smoke test for examples/providers/: the openai SDK as shipped vs on
 * `openaiOptions(policy)`, against a local rate-limiting provider. The example serves
 * its fake provider through @hono/node-server and runs under Node through tsx, so it
 * is started as a child process (`node --import tsx examples/providers/main.ts`),
 * which works the same from Node, Deno and Bun.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runExample } from './helpers/example.ts';
import { allowSlowTests } from './helpers/slow-tests.ts';

await allowSlowTests();

/** Calls per client in the example. */
const CALLS = 40;

/** A table row's two figures (openai SDK defaults, openaiOptions(policy)): the cells after the label. */
function row(stdout: string, label: string): [string, string] {
  const line = stdout.split('\n').find((l) => l.startsWith(label));
  assert.ok(line, `no row "${label}" in:\n${stdout}`);
  const cells = line.slice(label.length).trim().split(/ {2,}/);
  assert.equal(cells.length, 2, line);
  return cells as [string, string];
}

/** The leading integer of a cell: `84 (2.10x)` → 84, `31/40` → 31. */
const int = (cell: string): number => Number.parseInt(cell, 10);

test('the providers example: on openaiOptions(policy) nothing is sent inside an announced Retry-After window, no 429 is earned after the first burst and no 500’d POST is resent; the SDK as shipped does one or both', async () => {
  const run = await runExample('providers/main.ts');
  assert.equal(run.code, 0, `${run.stderr}\n${run.stdout}`);
  const out = run.stdout;
  assert.ok(out.split('\n').length < 40, 'the story stays under 40 lines');
  assert.match(out, /^counted by the server +openai SDK defaults +openaiOptions\(policy\)$/m);

  const [sdkRequests, bwRequests] = row(out, `requests received (${CALLS} calls)`).map(int);
  const [sdkInside, bwInside] = row(out, 'inside an announced Retry-After window').map(int);
  const [sdkTwice, bwTwice] = row(out, "completions run twice (500'd POST resent)").map(int);
  const [sdkAnswered, bwAnswered] = row(out, 'answered 429 / 500');
  const [sdkOk, bwOk] = row(out, 'calls succeeded').map(int);

  // breakwater: the figures the example exists for, counted by the server.
  assert.equal(bwInside, 0, 'breakwater requests inside an announced Retry-After window');
  assert.equal(bwTwice, 0, 'breakwater completions run twice');
  const [bw429, bw500] = (bwAnswered ?? '').split(' / ').map(int);
  assert.ok((bw429 ?? 0) > 0, `the server rate-limited the breakwater client: ${bwAnswered}`);
  // The first 8 calls go out together before any answer, and 5 of them exceed the
  // quota of 3. After that, quota pacing (a 200 with remaining 0 pauses the key; a
  // pause's probe lets only as many go as its answer says are left) earns no 429.
  assert.ok((bw429 ?? 0) <= 5, `breakwater earned 429s after the first burst: ${bwAnswered}`);
  assert.equal(bw500, 4, 'the four failing completions reached the breakwater client too');
  assert.ok((bwRequests ?? 0) >= CALLS, 'every call was sent');
  // The four 500'd calls are surfaced, not resent, and toHttpStatusError names them.
  assert.match(out, /^ {2}openaiOptions\(policy\): .*\b500 x4 \(retryAfterMs none\)/m);
  assert.ok((bwOk ?? 0) <= CALLS - 4, 'the 500’d calls failed');

  // The SDK as shipped: it retried, and showed at least one of the two harms. How
  // many, and its load, vary with timing (ms-scale windows on one machine: on a loaded
  // one it can even send fewer requests than breakwater) and with its jittered
  // backoff, so only their presence is checked.
  assert.ok((sdkRequests ?? 0) > CALLS, `the SDK retried: ${sdkRequests} requests`);
  assert.ok(
    (sdkInside ?? 0) > 0 || (sdkTwice ?? 0) > 0,
    `the SDK as shipped showed neither harm: inside ${sdkInside}, twice ${sdkTwice}`,
  );
  assert.match(sdkAnswered ?? '', /^\d+ \/ 4$/);
  assert.ok((sdkOk ?? 0) > 0 && (sdkOk ?? 0) <= CALLS, '(sdkOk ?? 0) > 0 && (sdkOk ?? 0) <= CALLS');

  // readRateLimits() of a real response: the Go-duration reset and the request id.
  assert.match(out, /\{"requests":\{"limit":3,"remaining":2,"resetMs":\d+\},"requestId":"req_\d+"\}/);
});

test('the providers example takes no options: --help prints its usage and exits 0, anything else is refused with exit code 2 before it runs', async () => {
  const [help, bad] = await Promise.all([
    runExample('providers/main.ts', ['--help']),
    runExample('providers/main.ts', ['--bogus']),
  ]);
  assert.equal(help.code, 0, help.stderr);
  assert.match(help.stdout, /^usage: node --import tsx examples\/providers\/main\.ts$/m);
  assert.doesNotMatch(help.stdout, /^counted by the server/m, '--help ran the example');
  assert.equal(bad.code, 2, `${bad.stderr}\n${bad.stdout}`);
  assert.match(bad.stderr, /--bogus/);
  assert.match(bad.stderr, /--help/);
  assert.equal(bad.stdout, '', 'a refused command line ran the example');
});
