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
 * a Retry-After window it had already announced to a worker of that fleet, once the
 * 429 had reached the fleet (as the demo counts them: see `TOLD_UNTIL_HEADER` in
 * `../demo/storm.ts`).
 *
 * {@link runFleets} runs both and says whether sharing held; the `format*` functions
 * print them. `main.ts` is the entry.
 */

import { definePolicy, type FetchLike, memoryStore, type PolicyConfig, type Store } from 'breakwater';
import { rateLimit } from 'breakwater/hono';
import { Hono } from 'hono';
import { wire } from '../demo/clients.ts';
import { epochMs, SENT_AT_HEADER, TOLD_UNTIL_HEADER, WINDOW_UNTIL_HEADER } from '../demo/storm.ts';
import { listen } from '../loopback.ts';

/** Workers in the fleet, and the calls each makes, one after another. */
export const DEFAULT_WORKERS: number = 8;
export const DEFAULT_CALLS: number = 3;
/** The quota everyone shares: this many requests per window of {@link WINDOW_MS}. */
const QUOTA = 6;
/** `rateLimit()` windows are whole seconds (`Retry-After` is delay-seconds). */
const WINDOW_MS = 1000;
/**
 * What one call takes the server once admitted: fixed, so runs repeat. Longer than the
 * 100 ms a 429 is given to reach the fleet before it counts against it (the demo's
 * `RETRY_AFTER_GRACE_MS`): alone, the workers whose calls were admitted send their next
 * ones this long after the others were refused, into the window those were told of,
 * and at 50 ms that fell inside the grace.
 */
const WORK_MS = 150;
/**
 * How many times fewer requests the shared fleet must send inside announced windows
 * than the fleet alone (about 25) for the example to pass: it sends none in every run
 * measured (see README.md, "Reading it").
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
  /**
   * Requests sent inside a Retry-After window the server had announced to any worker, and
   * the fleet had read at least 100 ms before (or, for the call that got the 429, at all).
   */
  insideWindow: number;
  /** Of those, the ones answered 429: refusals a worker earned by not knowing of the pause. */
  insideRefused: number;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The upstream: a ledger in front, then one global quota, then the work. Its quota
 * windows start at its first request (`rateLimit()`'s `now`), so every run meets the
 * same windows whatever the wall clock reads.
 */
export function upstream(ledger: Ledger): Hono {
  /** The latest end of any window announced so far: no worker can have been told of a later one. */
  let latestEnd = 0;
  /** Per call: when the window its own last 429 named ends. */
  const ownEnd = new Map<string, number>();
  let startedAt: number | undefined;
  const app = new Hono();
  app.use('*', async function count(c, next) {
    const arrived = Date.now();
    const call = c.req.query('call') ?? '';
    ledger.requests++;
    // Judged as the demo judges: by when the request left, against the windows its fleet
    // had read by then (a call's own resend follows its 429, so it counts without grace).
    const stamped = epochMs(c.req.header(SENT_AT_HEADER));
    const sentAt = stamped !== undefined && stamped <= arrived ? stamped : arrived;
    const told = Math.min(epochMs(c.req.header(TOLD_UNTIL_HEADER)) ?? 0, latestEnd);
    const inside = sentAt < told || sentAt < (ownEnd.get(call) ?? 0);
    if (inside) ledger.insideWindow++;
    await next();
    if (c.res.status !== 429) return;
    ledger.answered429++;
    if (inside) ledger.insideRefused++;
    const end = Date.now() + Number(c.res.headers.get('retry-after')) * 1000;
    latestEnd = Math.max(latestEnd, end);
    ownEnd.set(call, end);
    c.res.headers.set(WINDOW_UNTIL_HEADER, String(end));
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
  /**
   * The wire under every worker of this fleet (the demo's): it stamps each request with
   * when it left and the windows the fleet had read, so the server counts against the
   * fleet only the pauses one of its workers had been told of.
   */
  const fleetWire: FetchLike = wire();
  async function worker(w: number): Promise<void> {
    // Its own policy, so its own breaker: what a separate process would have.
    const fetch = definePolicy(CONFIG, { store }).fetch(fleetWire);
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
