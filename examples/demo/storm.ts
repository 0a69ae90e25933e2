/**
 * @module
 * The stormy upstream: a Hono app on 127.0.0.1 that behaves like a real overloaded
 * API for a few seconds, then recovers, and counts everything that reaches it.
 *
 * The fault script is a list of phases over the time since the client's run began
 * (healthy → overloaded → rate-limited → flaky → recovered); the seed fixes where the
 * phases start and every per-request draw: each call's first request, second request
 * and so on (the workload names the call in {@link CALL_HEADER}) meet the same draws
 * (shed, reset, slowed) in every run and for every client, whatever order requests
 * arrive in. Which phase a request lands in still depends on when it arrives, so the
 * figures vary a little from run to run. Each client gets a fresh server, so every
 * run starts from the same clock and empty counters.
 *
 * Every figure the report prints about load, Retry-After windows and order executions
 * is counted here, at the server, as requests arrive: never derived from what a client
 * believes it sent.
 */

import type { HttpBindings } from '@hono/node-server';
import { idempotency, problemResponse } from 'breakwater/hono';
import { Hono } from 'hono';
import { listen } from '../loopback.ts';

/**
 * Every client sends through the demo's wire layer (`wire()` in clients.ts), which
 * stamps this header with the epoch ms at which the request was handed to the
 * runtime's fetch: below every retry loop and middleware, the same for all clients.
 * The server judges "sent inside a Retry-After window" by that send time, not by when
 * its handler got to run: client and server share one process here, and on a starved
 * machine a handler can run hundreds of ms after the request left the client, which
 * would blame a client for requests it sent long before the server asked it to wait.
 */
export const SENT_AT_HEADER = 'x-demo-sent-at';
/**
 * The workload names each call (its index in the plan) in this header, on every
 * attempt. The server draws a request's faults from the seed, the call and how many
 * requests of that call came before: keyed by arrival order instead, one client's
 * resends (or a request that arrives a little earlier) would shift every later
 * request's draws, and each client would meet a different storm.
 */
export const CALL_HEADER = 'x-demo-call';
/**
 * Every 503 / 429 with a delay carries this header: the epoch ms at which the window it
 * opens ends (when the server produced it, plus the delay it names).
 */
export const WINDOW_UNTIL_HEADER = 'x-demo-window-until';
/**
 * The wire layer stamps each request with the latest end ({@link WINDOW_UNTIL_HEADER})
 * of the windows its client had been told of, by answers it had read at least
 * {@link RETRY_AFTER_GRACE_MS} before sending: below every retry loop and middleware,
 * the same for all clients, as {@link SENT_AT_HEADER} is. The server counts a request
 * as sent inside a window when it was sent before that end: a client is blamed for
 * what it had been told, not for what was still on its way to it. Judged from when the
 * server produced the answer instead (with a fixed 100 ms of grace), a starved machine
 * blamed breakwater: in 2 of 12 default runs on a 2-core machine at load 11-12, an
 * overloaded 503 took 400 ms from the server's handler to the client's fetch, and
 * requests of other calls sent before it arrived were counted (5 and 17; the demo
 * exited 1).
 */
export const TOLD_UNTIL_HEADER = 'x-demo-told-until';
/**
 * A window counts against a client from this long after its wire read the answer:
 * requests that had already passed the client's own checks (its pacing, its retry
 * loop) on their way to the wire when the answer came in could not be held back.
 * In-process that takes well under a millisecond; 100 ms is generous on purpose, so
 * that a count above zero means a client ignored what it had been told. A resend of
 * the very call that got the 503 / 429 has no grace: it was sent after that answer
 * was read.
 */
export const RETRY_AFTER_GRACE_MS = 100;
/** The wait an overloaded server asks for: `Retry-After: 1` (RFC 9110 §10.2.3 delay-seconds). */
export const OVERLOADED_RETRY_AFTER_MS = 1000;
/** Share of requests an overloaded server sheds with a 503. */
const OVERLOADED_SHED_RATIO = 0.9;
/** The rate-limited phase admits this many requests per fixed window ... */
const RATE_LIMIT_QUOTA = 20;
/** ... of this many ms (100 requests/s), and answers the rest 429 with `retry-after-ms`. */
const RATE_LIMIT_WINDOW_MS = 200;
/** In the flaky phase: share of requests whose connection is reset before the handler runs. */
const RESET_BEFORE_RATIO = 0.1;
/** In the flaky phase: share of order requests reset *after* the order ran (the response is lost). */
const RESET_AFTER_ORDER_RATIO = 0.25;
/** In the flaky phase: share of requests that are slow, and how slow. */
const SLOW_RATIO = 0.25;
const SLOW_MIN_MS = 300;
const SLOW_MAX_MS = 900;
/** Every answered request takes this long to compute, slow or not (a real handler does work). */
const WORK_MIN_MS = 5;
const WORK_MAX_MS = 25;
/** Phase boundaries move by up to this share of the storm's length, by seed. */
const BOUNDARY_JITTER = 0.03;

/** What the upstream is going through. */
export type PhaseName = 'healthy' | 'overloaded' | 'rate-limited' | 'flaky' | 'recovered';

/** One phase of the fault script, in ms since the run began; the last one never ends. */
export interface Phase {
  name: PhaseName;
  fromMs: number;
  toMs: number;
  /** What a person sees, for the script summary and the chart. */
  what: string;
}

/** The fault script: the same seed and length give the same phases and draws. */
export interface StormScript {
  seed: number;
  /** The scripted part's length in ms: the phases fill it, calls are spread over it. */
  stormMs: number;
  phases: Phase[];
}

/** The shares of the storm's length each phase starts at (before the seed's jitter). */
const PHASE_STARTS: readonly [PhaseName, number, string][] = [
  ['healthy', 0, 'healthy'],
  ['overloaded', 0.12, `overloaded: ${OVERLOADED_SHED_RATIO * 100}% shed with 503 + Retry-After: 1`],
  [
    'rate-limited',
    0.35,
    `rate-limited: ${RATE_LIMIT_QUOTA} requests per ${RATE_LIMIT_WINDOW_MS} ms, the rest 429 + retry-after-ms`,
  ],
  [
    'flaky',
    0.58,
    `flaky: ${RESET_BEFORE_RATIO * 100}% reset before running, ${RESET_AFTER_ORDER_RATIO * 100}% of orders reset after running, ${SLOW_RATIO * 100}% slow (${SLOW_MIN_MS}-${SLOW_MAX_MS} ms)`,
  ],
  ['recovered', 0.85, 'recovered'],
];

/**
 * mulberry32: a tiny, fast, well-mixed 32-bit PRNG. Deterministic per seed, which is
 * all a fault script needs (not for anything secret).
 */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** FNV-1a: a 32-bit hash of a short string, to mix a call's name into the seed. */
function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return hash >>> 0;
}

/** The fault script for a seed: the phases, their boundaries moved a little by the seed. */
export function stormScript(seed: number, stormMs: number): StormScript {
  const random = mulberry32(seed);
  const starts = PHASE_STARTS.map(([, share], i) =>
    i === 0 ? 0 : Math.round(stormMs * (share + (random() * 2 - 1) * BOUNDARY_JITTER)),
  );
  const phases = PHASE_STARTS.map(([name, , what], i): Phase => {
    const next = starts[i + 1];
    return { name, what, fromMs: starts[i] ?? 0, toMs: next ?? Number.POSITIVE_INFINITY };
  });
  return { seed, stormMs, phases };
}

/** The phase at `elapsedMs` into the run. */
export function phaseAt(script: StormScript, elapsedMs: number): Phase {
  let current = script.phases[0] as Phase;
  for (const phase of script.phases) if (elapsedMs >= phase.fromMs) current = phase;
  return current;
}

/** How the server answered the requests of one run (counted by the storm middleware). */
export interface Answers {
  /** Passed to the handlers (an order reset after running included). */
  handled: number;
  /** Shed with 503 + `Retry-After`. */
  shed503: number;
  /** Refused with 429 + `retry-after-ms`. */
  limited429: number;
  /** Connection reset before any handler ran. */
  resetBefore: number;
  /** Order run, then its connection reset: the response was lost. */
  resetAfterOrder: number;
  /** Of the handled ones: held back for hundreds of ms first. */
  slow: number;
}

/** What the server counted during one client's run. */
export interface Ledger {
  /** Arrival time of every request, in ms since the run began (chart and load). */
  arrivals: number[];
  /**
   * Requests sent inside a Retry-After window the server had opened and the client had
   * been told of: its wire had read the 503 / 429 {@link RETRY_AFTER_GRACE_MS} before
   * (see {@link TOLD_UNTIL_HEADER}), or it is a resend of the call that got it; and
   * before the delay it named ran out.
   */
  inWindow: number;
  /** How requests were answered. */
  answers: Answers;
  /** Executions of `POST /orders`, per order id (counted by the handler itself). */
  executions: Map<string, number>;
}

/** Order executions beyond the first, per order id. */
export function duplicateExecutions(ledger: Ledger): number {
  let duplicates = 0;
  for (const runs of ledger.executions.values()) duplicates += Math.max(0, runs - 1);
  return duplicates;
}

/** A running storm server for one client's run. */
export interface StormServer {
  origin: string;
  ledger: Ledger;
  /** Starts the script's clock (call right before the client's first request); returns it, epoch ms. */
  begin(): number;
  close(): Promise<void>;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A stamp of epoch ms from the wire layer, or undefined when absent or malformed. */
export function epochMs(stamp: string | null | undefined): number | undefined {
  if (stamp === null || stamp === undefined || stamp === '') return undefined;
  const ms = Number(stamp);
  return Number.isSafeInteger(ms) ? ms : undefined;
}

/**
 * The upstream as a Hono app, writing into `ledger`. `startedAt()` is the epoch ms the
 * client's run began. Order of middleware: the storm (faults, outermost, as a load
 * balancer or an overloaded runtime would be), then `idempotency()` on `POST /orders`
 * (for every client: plain and naive clients send no key, so it passes them through),
 * then the handlers.
 */
export function stormApp(
  script: StormScript,
  ledger: Ledger,
  startedAt: () => number,
): Hono<{ Bindings: HttpBindings }> {
  /** Requests seen per call (by {@link CALL_HEADER}). */
  const requestsOf = new Map<string, number>();
  /** The latest end of any window opened so far: no client can have been told of a later one. */
  let latestEnd = 0;
  /** Per call: when the window its own last 503 / 429 named ends. */
  const ownWindowEnd = new Map<string, number>();
  let limitWindow = -1;
  let limitUsed = 0;

  /**
   * Counts an arrival of `call`; the send time comes from the wire layer's stamp (else
   * the arrival), and so does what the client had been told (else nothing). A call's
   * next request follows its previous answer, so it is inside the window that answer
   * named whenever it was sent before its end, grace or not.
   */
  function arrive(t: number, sent: string | undefined, told: string | undefined, call: string): void {
    ledger.arrivals.push(t - startedAt());
    const stamped = epochMs(sent);
    const sentAt = stamped !== undefined && stamped <= t ? stamped : t;
    // Never past a window this server opened: a client cannot have been told of more.
    const toldUntil = Math.min(epochMs(told) ?? 0, latestEnd);
    if (sentAt < toldUntil || sentAt < (ownWindowEnd.get(call) ?? 0)) ledger.inWindow++;
  }

  /** Opens a window of `delayMs` for `call`'s answer; returns the header that announces its end. */
  function openWindow(delayMs: number, call: string): Record<string, string> {
    const end = Date.now() + delayMs;
    latestEnd = Math.max(latestEnd, end);
    ownWindowEnd.set(call, end);
    return { [WINDOW_UNTIL_HEADER]: String(end) };
  }

  const app = new Hono<{ Bindings: HttpBindings }>();

  app.use(async function storm(c, next) {
    const t = Date.now();
    const call = c.req.header(CALL_HEADER) ?? `arrival ${ledger.arrivals.length + 1}`;
    arrive(t, c.req.header(SENT_AT_HEADER), c.req.header(TOLD_UNTIL_HEADER), call);
    const phase = phaseAt(script, t - startedAt()).name;
    // This request's draws: the same for the same call's n-th request in every run.
    const nth = (requestsOf.get(call) ?? 0) + 1;
    requestsOf.set(call, nth);
    const random = mulberry32(script.seed ^ fnv1a(`${call} ${nth}`));
    const between = (min: number, max: number): number => min + Math.floor(random() * (max - min + 1));
    const draw = random();
    const isOrder = c.req.method === 'POST' && c.req.path === '/orders';

    if (phase === 'overloaded' && draw < OVERLOADED_SHED_RATIO) {
      ledger.answers.shed503++;
      return problemResponse(
        { status: 503, title: 'Service Unavailable', detail: 'overloaded, shedding load' },
        OVERLOADED_RETRY_AFTER_MS,
        openWindow(OVERLOADED_RETRY_AFTER_MS, call),
      );
    }
    if (phase === 'rate-limited') {
      const window = Math.floor(t / RATE_LIMIT_WINDOW_MS);
      if (window !== limitWindow) {
        limitWindow = window;
        limitUsed = 0;
      }
      if (++limitUsed > RATE_LIMIT_QUOTA) {
        const waitMs = (window + 1) * RATE_LIMIT_WINDOW_MS - t;
        ledger.answers.limited429++;
        // retry-after-ms: the millisecond form OpenAI and Anthropic send.
        return problemResponse({ status: 429, title: 'Too Many Requests' }, undefined, {
          'retry-after-ms': String(waitMs),
          ...openWindow(waitMs, call),
        });
      }
    }
    if (phase === 'flaky') {
      if (draw < RESET_BEFORE_RATIO) {
        // TCP RST before anything ran: the client sees ECONNRESET.
        ledger.answers.resetBefore++;
        c.env.incoming.socket.resetAndDestroy();
        return c.body(null, 500); // never written: the socket is gone
      }
      if (random() < SLOW_RATIO) {
        ledger.answers.slow++;
        await sleep(between(SLOW_MIN_MS, SLOW_MAX_MS));
      }
      if (isOrder && random() < RESET_AFTER_ORDER_RATIO) {
        await sleep(between(WORK_MIN_MS, WORK_MAX_MS));
        ledger.answers.handled++;
        await next(); // the order runs (and idempotency() stores its response) ...
        ledger.answers.resetAfterOrder++;
        c.env.incoming.socket.resetAndDestroy(); // ... and the response is lost on the wire
        return;
      }
    }
    await sleep(between(WORK_MIN_MS, WORK_MAX_MS));
    ledger.answers.handled++;
    await next();
  });

  // Server-side Idempotency-Key replay for the one non-idempotent operation.
  app.use('/orders', idempotency());

  app.get('/items/:id', (c) => c.json({ id: c.req.param('id'), name: `item ${c.req.param('id')}` }));

  app.post('/orders', async (c) => {
    const order = (await c.req.json()) as { orderId?: unknown };
    if (typeof order.orderId !== 'string') return c.json({ error: 'orderId is required' }, 400);
    const runs = (ledger.executions.get(order.orderId) ?? 0) + 1;
    ledger.executions.set(order.orderId, runs);
    return c.json({ orderId: order.orderId, execution: runs }, 201);
  });

  return app;
}

function emptyLedger(): Ledger {
  return {
    arrivals: [],
    inWindow: 0,
    answers: { handled: 0, shed503: 0, limited429: 0, resetBefore: 0, resetAfterOrder: 0, slow: 0 },
    executions: new Map(),
  };
}

/** Serves a fresh storm on 127.0.0.1, port 0 (through `@hono/node-server`, node:http underneath). */
export async function startStorm(script: StormScript): Promise<StormServer> {
  const ledger = emptyLedger();
  let startedAt = Date.now();
  const app = stormApp(script, ledger, () => startedAt);
  const server = await listen(app);
  return {
    origin: server.origin,
    ledger,
    begin() {
      startedAt = Date.now();
      return startedAt;
    },
    close: server.close,
  };
}
