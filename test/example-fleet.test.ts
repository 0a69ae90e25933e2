/**
 * Smoke test for examples/fleet/: a fleet of workers, each on its own policy, against
 * one global `rateLimit()` quota, pacing alone vs sharing one store
 * (`definePolicy(config, { store })`). The example serves through @hono/node-server and
 * runs under Node through tsx, so it is started as a child process
 * (`node --import tsx examples/fleet/main.ts`), which works the same from Node, Deno
 * and Bun.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SENT_AT_HEADER, TOLD_UNTIL_HEADER, WINDOW_UNTIL_HEADER } from '../examples/demo/storm.ts';
import { type Ledger, upstream } from '../examples/fleet/fleet.ts';
import { runExample } from './helpers/example.ts';
import { allowSlowTests } from './helpers/slow-tests.ts';

await allowSlowTests();

/** Calls per fleet in the example's default run: 8 workers, 3 calls each. */
const CALLS = 24;

/** A table row's two figures (alone, shared): the cells after the label. */
function row(stdout: string, label: string): [string, string] {
  const line = stdout.split('\n').find((l) => l.startsWith(`${label}  `));
  assert.ok(line, `no row "${label}" in:\n${stdout}`);
  const cells = line.slice(label.length).trim().split(/ {2,}/);
  assert.equal(cells.length, 2, line);
  return cells as [string, string];
}

/** The leading integer of a cell: `43 (1.79x)` → 43, `24/24` → 24. */
const int = (cell: string): number => Number.parseInt(cell, 10);

test('the fleet example: sharing a store, the fleet sends far fewer requests inside a Retry-After window the server announced to any worker, and earns fewer 429s, for the same calls ok', async () => {
  // The default run's fleets, side by side: each has its own server, quota and ledger,
  // and waiting is all they do, so about 4 s instead of 8.
  const run = await runExample('fleet/main.ts', ['--side-by-side']);
  assert.equal(run.code, 0, `${run.stderr}\n${run.stdout}`);
  const out = run.stdout;
  assert.match(out, /^counted by the server +alone +shared$/m);

  const [aloneRequests, sharedRequests] = row(out, 'requests received').map(int);
  const [alone429, shared429] = row(out, 'answered 429').map(int);
  const [aloneInside, sharedInside] = row(out, 'sent inside an announced Retry-After window').map(int);
  const [aloneRefused, sharedRefused] = row(out, '  of them answered 429').map(int);
  const [aloneOk, sharedOk] = row(out, 'calls ok').map(int);

  // Shared: what the store is for. Every worker learns of a pause any of them is told
  // of, and waits it out: none is sent inside a window the fleet had read (a worker that
  // read the store just before another's pause was written sent before that 429 reached it).
  assert.ok(
    (sharedInside ?? 0) * 4 <= (aloneInside ?? 0),
    `shared: ${sharedInside} requests inside an announced window, alone ${aloneInside}`,
  );
  assert.equal(sharedOk, CALLS, 'shared: every call got through');
  // Some 429s are unavoidable either way: at each window's reset the whole fleet (8
  // workers) comes back at once against a quota of 6.
  assert.ok((shared429 ?? 0) > 0, `the server rate-limited the shared fleet: ${shared429}`);

  // Alone: a worker knows only its own 429s, so the others keep sending into the window
  // one of them was just told of. How many varies with timing; the direction does not.
  assert.ok((aloneInside ?? 0) > 0, `alone: nothing sent inside an announced window (${aloneInside})`);
  assert.ok(
    (sharedRefused ?? 0) < (aloneRefused ?? 0),
    `429s earned inside an announced window: shared ${sharedRefused}, alone ${aloneRefused}`,
  );
  assert.ok(
    (shared429 ?? 0) < (alone429 ?? 0),
    `shared earned as many 429s as alone: ${shared429} vs ${alone429}`,
  );
  assert.ok(
    (sharedRequests ?? 0) < (aloneRequests ?? 0),
    `shared sent as many requests as alone: ${sharedRequests} vs ${aloneRequests}`,
  );
  assert.ok((sharedRequests ?? 0) >= CALLS && (aloneRequests ?? 0) >= CALLS, 'every call was sent');
  assert.ok((aloneOk ?? 0) <= (sharedOk ?? 0), `alone got more calls through: ${aloneOk} vs ${sharedOk}`);
});

test("the fleet example counts a request inside a window only once its fleet had read the 429: one sent after the server answered it, before it reached the fleet, is not counted; one sent after, and the refused call's own resend, are", async () => {
  const ledger: Ledger = { requests: 0, answered429: 0, insideWindow: 0, insideRefused: 0 };
  const app = upstream(ledger);
  /** A request for `call`, stamped as the wire stamps it: sent now, told of windows until `toldUntil`. */
  const send = async (call: string, toldUntil = 0): Promise<Response> => {
    const response = await app.request(`/work?call=${call}`, {
      headers: { [SENT_AT_HEADER]: String(Date.now()), [TOLD_UNTIL_HEADER]: String(toldUntil) },
    });
    await response.text();
    return response;
  };
  // The quota's 6 go through; the 7th call is refused and told until when.
  await Promise.all(Array.from({ length: 6 }, (_, i) => send(`0.${i}`)));
  const refused = await send('1.0');
  assert.equal(refused.status, 429, 'the quota is used up');
  const until = Number(refused.headers.get(WINDOW_UNTIL_HEADER));
  assert.ok(until > Date.now(), `the 429 names its window's end: ${until}`);
  assert.equal(ledger.insideWindow, 0, 'nothing was sent inside a window before the 429');

  // 20 ms after the server answered (the old measure's grace was 15 ms from then), from a
  // worker of a fleet the 429 had not reached yet: on a loaded machine it can take
  // hundreds of ms, and the shared fleet was blamed for requests it could not hold back.
  await new Promise((resolve) => setTimeout(resolve, 20));
  await send('2.0');
  assert.equal(ledger.insideWindow, 0, 'a request sent before its fleet read the 429 is not counted');
  // Once the fleet had read it (its wire says so), and the refused call's own resend.
  await send('2.1', until);
  await send('1.0');
  assert.equal(ledger.insideWindow, 2, 'sent after the fleet was told, or a resend of the refused call');
});

test('the fleet example: --help prints the options, and a bad value exits 2 naming it (the demo’s test covers unknown flags; each run here is a process start)', async () => {
  // Both at once: each is mostly a process loading tsx.
  const [help, bad] = await Promise.all([
    runExample('fleet/main.ts', ['--help']),
    runExample('fleet/main.ts', ['--workers', '0']),
  ]);
  assert.equal(help.code, 0, help.stderr);
  assert.match(help.stdout, /--workers N/);
  assert.match(help.stdout, /--calls N/);
  assert.match(help.stdout, /--side-by-side/);

  assert.equal(bad.code, 2, bad.stderr);
  assert.match(bad.stderr, /--workers must be a whole number from 1 to 32, got "0"/);
  assert.equal(bad.stdout, '');
});
