/**
 * @module
 * Shared pacing (`definePolicy(config, { store })`) for a fleet, with nothing outside
 * this machine. A local upstream (a Hono app on 127.0.0.1) serves one quota for
 * everyone, `rateLimit()` from `breakwater/hono` keyed globally: a few requests per
 * 1 s window, the rest 429 with `Retry-After` to the window's end. A fleet of workers,
 * each with its own `definePolicy(config)` (its own breaker, as separate processes
 * have), runs its calls one after another against it, twice, each time against a fresh
 * server:
 *
 * 1. **alone**: no store, each worker paces itself on what the server told *it*;
 * 2. **shared**: every worker given one `memoryStore()` (standing in for a Redis-backed
 *    `Store` that separate processes share), so a pause the server asks of one worker
 *    holds them all.
 *
 * The server counts what each fleet did to it: requests, 429s, and requests sent inside
 * a Retry-After window it had already announced to any worker.
 *
 * {@link runFleets} runs both and says whether sharing held; the `format*` functions
 * print them. `main.ts` is the entry.
 */

import { definePolicy, type FetchLike, memoryStore, type PolicyConfig, type Store } from 'breakwater';
import { rateLimit } from 'breakwater/hono';
import { Hono } from 'hono';
import { listen, stampedFetch } from '../loopback.ts';

/** Workers in the fleet, and the calls each makes, one after another. */
export const DEFAULT_WORKERS: number = 8;
export const DEFAULT_CALLS: number = 3;
/** The quota everyone shares: this many requests per window of {@link WINDOW_MS}. */
const QUOTA = 6;
/** `rateLimit()` windows are whole seconds (`Retry-After` is delay-seconds). */
const WINDOW_MS = 1000;
/** What one call takes the server once admitted: fixed, so runs repeat. */
const WORK_MS = 50;
/**
 * A request sent this soon after the server announced a window is not counted as inside
 * it: the 429 was on its way, not yet read, and no client could have held the request
 * back. Loopback takes well under a millisecond; the margin is generous on purpose.
 */
const GRACE_MS = 15;
/**
 * The wire under every worker stamps each request with the epoch ms at which it was
 * handed to the runtime's fetch (below breakwater's retry loop, so every attempt gets
 * its own). The server judges "inside a window" by that send time, not by when its
 * handler got to run: the fleet and the server share one process here, and on a busy
 * machine a handler can run well after the request left.
 */
const SENT_AT_HEADER = 'x-example-sent-at';
/**
 * How many times fewer requests the shared fleet must send inside announced windows
 * than the fleet alone (about 30) for the example to pass: usually it sends none, but a
 * few can race a 429 (see README.md, "Reading it").
 */
const FAR_FEWER = 4;
/**
 * Each worker's policy: one server, named, every default but retry's attempts: 6, not
 * 3. At each window's reset the whole fleet comes back at once and the quota cannot
 * take them all, so a worker can lose a few resets in a row, store or no store (a
 * store shares when to come back, not an order). With 6 attempts every call gets
 * through in both fleets, and what differs is what each fleet cost the server.
 * The store is not part of the config: `definePolicy(CONFIG, { store })`.
 */
const ATTEMPTS = 6;
const CONFIG = { name: 'upstream', retry: { attempts: ATTEMPTS } } satisfies PolicyConfig;

/** What the server counted during one fleet's run. */
export interface Ledger {
  requests: number;
  answered429: number;
  /** Requests sent inside a Retry-After window the server had announced to any worker. */
  insideWindow: number;
  /** Of those, the ones answered 429: refusals a worker earned by not knowing of the pause. */
  insideRefused: number;
}

/** A Retry-After window the server announced: from the 429's answer to the end it named (epoch ms). */
interface Announced {
  at: number;
  until: number;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The upstream: a ledger in front, then one global quota, then the work. Its quota
 * windows start at its first request (`rateLimit()`'s `now`), so every run meets the
 * same windows whatever the wall clock reads.
 */
function upstream(ledger: Ledger): Hono {
  const announced: Announced[] = [];
  let startedAt: number | undefined;
  const app = new Hono();
  app.use('*', async function count(c, next) {
    const arrived = Date.now();
    ledger.requests++;
    const stamp = Number(c.req.header(SENT_AT_HEADER));
    const sentAt = Number.isSafeInteger(stamp) && stamp <= arrived ? stamp : arrived;
    const inside = announced.some((w) => w.at + GRACE_MS <= sentAt && sentAt < w.until);
    if (inside) ledger.insideWindow++;
    await next();
    if (c.res.status !== 429) return;
    ledger.answered429++;
    if (inside) ledger.insideRefused++;
    const at = Date.now();
    announced.push({ at, until: at + Number(c.res.headers.get('retry-after')) * 1000 });
  });
  app.use(
    '*',
    rateLimit({
      limit: QUOTA,
      windowMs: WINDOW_MS,
      // One bucket for everyone: the quota is the server's, not a client's.
      key: () => 'everyone',
      now: () => {
        const t = Date.now();
        startedAt ??= t;
        return t - startedAt;
      },
    }),
  );
  app.get('/work', async (c) => {
    await sleep(WORK_MS);
    return c.json({ done: c.req.query('call') });
  });
  return app;
}

/** The runtime's fetch, with the send time stamped in {@link SENT_AT_HEADER}. */
const wire: FetchLike = stampedFetch(SENT_AT_HEADER);

/** One fleet's run: the server's ledger and what the workers saw. */
export interface FleetRun {
  ledger: Ledger;
  calls: number;
  ok: number;
  wallMs: number;
}

/** Runs `workers` workers of `calls` calls each, every worker on its own policy (sharing `store` if given), against a fresh server. */
async function runFleet(workers: number, calls: number, store: Store | undefined): Promise<FleetRun> {
  const ledger: Ledger = { requests: 0, answered429: 0, insideWindow: 0, insideRefused: 0 };
  const server = await listen(upstream(ledger));
  const run: FleetRun = { ledger, calls: workers * calls, ok: 0, wallMs: 0 };
  async function worker(w: number): Promise<void> {
    // Its own policy, so its own breaker: what a separate process would have.
    const fetch = definePolicy(CONFIG, { store }).fetch(wire);
    for (let i = 0; i < calls; i++) {
      try {
        const res = await fetch(`${server.origin}/work?call=${w}.${i}`);
        await res.text();
        if (res.ok) run.ok++;
      } catch {
        // A call that failed fast (CircuitOpenError, RetryAfterTooLongError): not ok.
      }
    }
  }
  const started = performance.now();
  try {
    await Promise.all(Array.from({ length: workers }, (_, w) => worker(w)));
  } finally {
    run.wallMs = performance.now() - started;
    await server.close();
  }
  return run;
}

// --- The comparison ----------------------------------------------------------------

/** Both fleets, and what sharing failed to do. */
export interface FleetComparison {
  workers: number;
  callsPerWorker: number;
  alone: FleetRun;
  shared: FleetRun;
  /**
   * Empty when the shared fleet sent at most a quarter as many requests inside an
   * announced window as the fleet alone, earned fewer 429s (if that one earned any)
   * and got as many calls through; otherwise what broke.
   */
  problems: string[];
}

/**
 * Runs the fleet without a store, then with one shared `memoryStore()`, each against a
 * fresh server. `sideBySide` runs the two at once instead (in half the time: each has
 * its own server, quota and ledger, and the work is waiting), for the example's test.
 */
export async function runFleets(
  workers: number = DEFAULT_WORKERS,
  callsPerWorker: number = DEFAULT_CALLS,
  sideBySide = false,
): Promise<FleetComparison> {
  const [alone, shared] = sideBySide
    ? await Promise.all([
        runFleet(workers, callsPerWorker, undefined),
        runFleet(workers, callsPerWorker, memoryStore()),
      ])
    : [
        await runFleet(workers, callsPerWorker, undefined),
        await runFleet(workers, callsPerWorker, memoryStore()),
      ];
  // The direction, not exact figures: how many requests race a 429 depends on timing.
  const problems = [
    shared.ledger.insideWindow * FAR_FEWER > alone.ledger.insideWindow &&
      `${shared.ledger.insideWindow} request(s) inside an announced window (alone ${alone.ledger.insideWindow})`,
    alone.ledger.answered429 > 0 &&
      shared.ledger.answered429 >= alone.ledger.answered429 &&
      `as many 429s as alone (${shared.ledger.answered429}, alone ${alone.ledger.answered429})`,
    shared.ok < alone.ok && `fewer calls ok than alone (${shared.ok}, alone ${alone.ok})`,
  ].filter((problem) => typeof problem === 'string');
  return { workers, callsPerWorker, alone, shared, problems };
}

// --- What it prints -----------------------------------------------------------------

const row = (label: string, a: string | number, b: string | number): string =>
  `${label.padEnd(46)}${String(a).padEnd(16)}${b}`.trimEnd();

/** The setting, for a reader who sees only the output. */
export function formatScript({ workers, callsPerWorker }: FleetComparison): string[] {
  return [
    `${workers} workers, ${callsPerWorker} calls each, one after another; each worker has its own`,
    `definePolicy({ name: '${CONFIG.name}', retry: { attempts: ${ATTEMPTS} } }), as separate processes would.`,
    'One local server (127.0.0.1, a fresh one per fleet), one quota for everyone: rateLimit()',
    `from breakwater/hono, ${QUOTA} requests per ${WINDOW_MS / 1000} s window, the rest 429 with Retry-After to`,
    `the window's end. Each admitted call takes the server ${WORK_MS} ms.`,
    '  alone:   no store; each worker paces on what the server told it',
    '  shared:  definePolicy(config, { store }), one memoryStore() for all (Redis across processes)',
  ];
}

/** The figures, both fleets side by side. */
export function formatTable({ alone, shared }: FleetComparison): string[] {
  const both = (f: (r: FleetRun) => string | number): [string | number, string | number] => [
    f(alone),
    f(shared),
  ];
  const load = (r: FleetRun): string => `${r.ledger.requests} (${(r.ledger.requests / r.calls).toFixed(2)}x)`;
  return [
    row('counted by the server', 'alone', 'shared'),
    row('requests received', ...both(load)),
    row('answered 429', ...both((r) => r.ledger.answered429)),
    row('sent inside an announced Retry-After window', ...both((r) => r.ledger.insideWindow)),
    row('  of them answered 429', ...both((r) => r.ledger.insideRefused)),
    '',
    row('seen by the workers', '', ''),
    row('calls ok', ...both((r) => `${r.ok}/${r.calls}`)),
    row('wall time', ...both((r) => `${Math.round(r.wallMs)} ms`)),
  ];
}
