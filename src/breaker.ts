/**
 * @module
 * `circuitBreaker()`: per server (key), stop sending to a server that is down, and
 * hold every caller of a server that asked for quiet (pacing).
 *
 * Why: in production, MCP tool calls retried after a reconnect kept hammering a dead
 * server. The fix was a breaker per server that opens after repeated failures, waits
 * 500 ms doubling to about 32 s (with jitter, so restarted agents do not probe
 * together), lets exactly one probe through, and meanwhile fails fast with a message
 * naming the server. Only failures that say something about the server's health
 * count; a 429 never opens the circuit (the server is up and asked us to slow down):
 * it pauses the whole key instead, for every caller.
 *
 * Cost matters: the happy path (closed, not paused, 2xx) is one Map lookup with an
 * LRU touch and a few field updates. Per-key state is a fixed-size record (the
 * sliding window is a ring of {@link WINDOW_BUCKETS} counters), and the registry is
 * bounded, so a flood of distinct keys cannot grow memory.
 */

import * as z from 'zod/mini';
import {
  type BackoffOptions,
  backoff,
  backoffSchema,
  DEFAULT_FACTOR,
  DEFAULT_INITIAL_MS,
  DEFAULT_MAX_MS,
  type Jitter,
} from './backoff.ts';
import type { Call, Middleware, Next } from './call.ts';
import { isAbort } from './chain.ts';
import { isRetryableStatus } from './classify.ts';
import { CircuitOpenError, HttpStatusError, NetworkError, requestSummary, TimeoutError } from './errors.ts';
import { validate } from './options.ts';
import { MAX_DELAY_MS, retryDelay } from './timing.ts';

/** Consecutive failures that open a circuit, by default: a blip is not an outage. */
const DEFAULT_CONSECUTIVE_FAILURES = 5;
/** Failed share of the window's calls that opens a circuit, by default. */
const DEFAULT_FAILURE_RATIO = 0.5;
/** Calls the window must hold before the ratio may open a circuit, by default: 1 of 2 is not a trend. */
const DEFAULT_MINIMUM_THROUGHPUT = 20;
/** Length of the sliding window, in ms, by default. */
const DEFAULT_WINDOW_MS = 30_000;
/**
 * Spread of the open time, by default (DESIGN.md §6): +30% keeps agents restarted
 * together from probing together, and never shortens the open time.
 */
const DEFAULT_OPEN_JITTER: Jitter = '+30%';
/** Servers remembered at once, by default (least recently used dropped first). */
const DEFAULT_MAX_KEYS = 1000;
/** The longest wait, in ms, a server may impose on its word alone, by default (as `retry()`). */
const DEFAULT_MAX_RETRY_AFTER_MS = 60_000;
/**
 * The sliding window is this many fixed time buckets: a call costs one counter
 * bump, and per-key memory stays constant however many calls a window holds.
 * The window covers between 9/10 and all of `windowMs`.
 */
const WINDOW_BUCKETS = 10;
/** A registry bigger than this is a configuration mistake, not a need. */
const MAX_MAX_KEYS = 10_000_000;

/** A circuit's state. */
export type BreakerState = 'closed' | 'open' | 'half-open';

/**
 * The JSON-serialisable part of {@link CircuitBreakerOptions}: what a policy file
 * (`definePolicy({ breaker })`) may hold.
 */
export interface BreakerConfig {
  /**
   * Failures in a row (no success in between) that open the circuit. Default 5.
   * A whole number, at least 1.
   */
  consecutiveFailures?: number | undefined;
  /**
   * The share of failed calls in the sliding window, from 0 (exclusive) to 1, that
   * opens the circuit once the window holds `minimumThroughput` calls. Default 0.5:
   * catches a server failing every other call, which never makes 5 in a row.
   */
  failureRatio?: number | undefined;
  /**
   * Calls the sliding window must hold before `failureRatio` applies. Default 20, so
   * that 1 failure out of 2 calls does not open the circuit. A whole number, at least 1.
   */
  minimumThroughput?: number | undefined;
  /**
   * The sliding window's length, in ms. Default 30,000. It is kept as 10 buckets of
   * `windowMs / 10`, so it covers the last 27 to 30 s by default.
   */
  windowMs?: number | undefined;
  /**
   * The open time after the n-th consecutive opening is `backoff(open)(n)`: a failed
   * probe doubles it. Default `{ initialMs: 500, factor: 2, maxMs: 32_000, jitter: '+30%' }`;
   * fields given here replace those defaults one by one. Also the pause after a 429
   * that names no delay.
   */
  open?: BackoffOptions | undefined;
  /**
   * How many servers (keys) are remembered; the least recently used is forgotten
   * first. Default 1000: bounds memory when keys come from URLs. A whole number, at least 1.
   */
  maxKeys?: number | undefined;
  /**
   * The cap, in ms, on a server-requested stretch of the open time or pause (a
   * `Retry-After` of a day must not silence a client for a day on its word alone),
   * and the longest pause a call waits out instead of failing fast. Default 60,000.
   */
  maxRetryAfterMs?: number | undefined;
}

/** Options for {@link circuitBreaker}. */
export interface CircuitBreakerOptions extends BreakerConfig {
  /** The clock, epoch ms. Default `Date.now`; inject one in tests. Not part of a policy file. */
  now?: (() => number) | undefined;
  /** A source of numbers in `[0, 1)` for jitter. Default `Math.random`; inject one in tests. */
  random?: (() => number) | undefined;
}

/** A snapshot of one key's circuit, for logs, health checks and tests. */
export interface BreakerStats {
  /** `'open'` until a call arrives after `retryAt` and becomes the probe (`'half-open'`). */
  readonly state: BreakerState;
  /** Failures in a row since the last success. */
  readonly consecutiveFailures: number;
  /** Failures in the sliding window (counted only while closed). */
  readonly windowFailures: number;
  /** Calls in the sliding window (counted only while closed). */
  readonly windowTotal: number;
  /** Openings since the circuit was last closed: the step of the open-time schedule in use. */
  readonly opens: number;
  /** While open or half-open: when the (next) probe may go. */
  readonly retryAt?: Date;
  /** While the key is paced: when calls may go again. */
  readonly pausedUntil?: Date;
}

/** The `circuitBreaker()` middleware, with its readers. */
export interface CircuitBreaker extends Middleware {
  /** One key's state, or undefined for a key never seen (or forgotten). Does not count as a use. */
  stats(key: string): BreakerStats | undefined;
  /** Forgets one key's state (closed, no counts, no pause), or every key's. */
  reset(key?: string): void;
  /** How many keys the registry holds (at most `maxKeys`). */
  size(): number;
}

const ms = (what: string) =>
  z
    .number(`must be a finite number of ms${what}`)
    .check(
      z.minimum(0, 'must be at least 0'),
      z.maximum(MAX_DELAY_MS, `must be at most ${MAX_DELAY_MS} (2^31 − 1, setTimeout's limit)`),
    );

const count = (max: number) =>
  z
    .number('must be a whole number')
    .check(
      z.int('must be a whole number'),
      z.minimum(1, 'must be at least 1'),
      z.maximum(max, `must be at most ${max}`),
    );

const configShape = {
  consecutiveFailures: z.optional(count(Number.MAX_SAFE_INTEGER)),
  failureRatio: z.optional(
    z
      .number('must be a number in (0, 1]')
      .check(z.gt(0, 'must be more than 0'), z.maximum(1, 'must be at most 1')),
  ),
  minimumThroughput: z.optional(count(Number.MAX_SAFE_INTEGER)),
  windowMs: z.optional(ms('').check(z.gt(0, 'must be more than 0'))),
  open: z.optional(backoffSchema),
  maxKeys: z.optional(count(MAX_MAX_KEYS)),
  maxRetryAfterMs: z.optional(ms('')),
};

/**
 * The schema of {@link BreakerConfig}: unknown keys are rejected. Exported so
 * `definePolicy()` validates `breaker` with the very same rules.
 */
export const breakerSchema: z.ZodMiniType<BreakerConfig> = z.strictObject(
  configShape,
  'must be an options object',
);

const isFunction = (value: unknown): boolean => typeof value === 'function';

const optionsSchema = z.optional(
  z.strictObject(
    {
      ...configShape,
      now: z.optional(z.custom<() => number>(isFunction, 'must be a function returning epoch ms')),
      random: z.optional(z.custom<() => number>(isFunction, 'must be a function returning [0, 1)')),
    },
    'must be an options object',
  ),
);

/** The last counted failure, kept cheap: an `HttpStatusError` is built only if the circuit opens. */
interface Failure {
  /** `HTTP 503 Service Unavailable`, `network error ECONNREFUSED`, `attempt timeout after 100 ms`. */
  readonly label: string;
  /** The thrown error; undefined for a failure response. */
  readonly error: unknown;
  readonly status: number;
  readonly statusText: string;
  readonly headers: Headers | undefined;
  readonly retryAfterMs: number | undefined;
  readonly call: Call;
}

/** One key's state. A fixed-shape record: no per-request arrays. */
interface Circuit {
  state: BreakerState;
  consecutive: number;
  /** Openings since last closed (the backoff step). */
  opens: number;
  /** The last open-time step, for decorrelated jitter. */
  lastOpenMs: number | undefined;
  /** While open / half-open: when the next probe may go, epoch ms. */
  retryAtMs: number;
  /** The call that is the half-open probe (the Call itself is the token: no allocation). */
  probe: Call | undefined;
  /** What opened it, without the leading "after ": `5 consecutive failures (last: HTTP 503)`. */
  openReason: string;
  /** The failure that opened it, as an error (`CircuitOpenError.cause`). */
  cause: unknown;
  last: Failure | undefined;
  /** Absolute index (`floor(t / bucketMs)`) of the newest window bucket. */
  head: number;
  windowFailures: number;
  windowTotal: number;
  /** `[failures × WINDOW_BUCKETS, totals × WINDOW_BUCKETS]`. */
  readonly buckets: Uint32Array;
  /** When the pause ends, epoch ms; 0 when not paused. */
  pausedUntilMs: number;
  /** Whether a call may wait the pause out (the server asked for no more than the cap). */
  pauseWaitable: boolean;
  pauseReason: string;
  pauseCause: unknown;
  /** 429s without a delay in a row: the step of the pause schedule. */
  pauseSteps: number;
  lastPauseMs: number | undefined;
}

function newCircuit(): Circuit {
  return {
    state: 'closed',
    consecutive: 0,
    opens: 0,
    lastOpenMs: undefined,
    retryAtMs: 0,
    probe: undefined,
    openReason: '',
    cause: undefined,
    last: undefined,
    head: Number.NEGATIVE_INFINITY,
    windowFailures: 0,
    windowTotal: 0,
    buckets: new Uint32Array(2 * WINDOW_BUCKETS),
    pausedUntilMs: 0,
    pauseWaitable: false,
    pauseReason: '',
    pauseCause: undefined,
    pauseSteps: 0,
    lastPauseMs: undefined,
  };
}

/** The ring slot of an absolute bucket index (safe for negative indexes too). */
function slotOf(index: number): number {
  return ((index % WINDOW_BUCKETS) + WINDOW_BUCKETS) % WINDOW_BUCKETS;
}

/** Only what says something about the server's health: 408 and every 5xx (529 included). */
function isFailureStatus(status: number): boolean {
  return status === 408 || status >= 500;
}

function statusLabel(status: number, statusText: string): string {
  return `HTTP ${status}${statusText ? ` ${statusText}` : ''}`;
}

/**
 * Waits `delayMs`, or rejects at once with the signal's reason when it aborts; the
 * timer and the listener are removed either way.
 */
function sleep(delayMs: number, signal: AbortSignal | undefined): Promise<void> {
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise<void>((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, delayMs);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * The user's open-time schedule over the breaker's defaults, field by field. As in
 * `backoff()`, an `initialMs` above the default cap raises the cap with it when
 * `maxMs` is not given.
 */
function openSchedule(given: BackoffOptions | undefined): BackoffOptions {
  const initialMs = given?.initialMs ?? DEFAULT_INITIAL_MS;
  return {
    initialMs,
    factor: given?.factor ?? DEFAULT_FACTOR,
    maxMs: given?.maxMs ?? Math.max(DEFAULT_MAX_MS, initialMs),
    jitter: given?.jitter ?? DEFAULT_OPEN_JITTER,
  };
}

/**
 * A circuit breaker and pacer per server (`call.key`), in a bounded LRU registry.
 *
 * - **Counts** only failures that say something about the server's health: 408 and
 *   5xx responses (529 included), `NetworkError`, `TimeoutError`. Never other 4xx,
 *   401/403/407, user aborts or `CircuitOpenError`. Any other response (429 included:
 *   the server is up) is a success and ends a run of failures; other thrown errors
 *   count as nothing.
 * - **Opens** after `consecutiveFailures` in a row, or when failures make up at least
 *   `failureRatio` of the sliding window's calls (once it holds `minimumThroughput`).
 *   The n-th opening in a row lasts `backoff(open)(n)`, stretched to the failure's own
 *   `Retry-After` (capped at `maxRetryAfterMs`).
 * - **While open**, calls fail fast with `CircuitOpenError` (nothing is sent): its
 *   `retryAt` says when the next probe may go, its `cause` is the failure that opened it.
 * - **Half-open**: after the open time exactly one call goes through as a probe, however
 *   many arrive together; the others fail fast. Its success closes the circuit and
 *   resets every count; its failure opens it again for the next (longer) step. A probe
 *   that ends in neither (a user abort) frees the slot for the next caller. Pair the
 *   breaker with an attempt timeout, or a hung probe keeps the key half-open.
 * - **Pacing**: a 429 or 503 naming a delay (`Retry-After` and friends), or a 429 naming
 *   none (then the next step of `open`), pauses the whole key. A later call waits the
 *   pause out (abortably) when `maxRetryAfterMs` and its remaining deadline cover it,
 *   else fails fast with `CircuitOpenError` (`retryAt` = the pause's end). A server
 *   delay above `maxRetryAfterMs` pauses the key for `maxRetryAfterMs` only, and calls
 *   fail fast meanwhile (waiting would only meet another 429). A 503 with a delay both
 *   pauses the key and counts as a failure.
 *
 * Events (`onEvent`): `breaker` on every state change, `paced` when a pause starts
 * (`phase: 'start'`) and when a call waits one out (`phase: 'wait'`).
 *
 * @example
 * ```ts
 * import { circuitBreaker, CircuitOpenError, createFetch } from 'breakwater';
 *
 * const breaker = circuitBreaker({ consecutiveFailures: 5 });
 * const fetch = createFetch({ use: [breaker], key: 'github-mcp' });
 * try {
 *   await fetch('https://mcp.example.com/mcp', { method: 'POST', body: '{}' });
 * } catch (error) {
 *   if (error instanceof CircuitOpenError) {
 *     // circuit "github-mcp" is open after 5 consecutive failures (last: HTTP 503 Service Unavailable); ...
 *     console.warn(error.message, error.retryAt);
 *   }
 * }
 * breaker.stats('github-mcp'); // { state: 'open', consecutiveFailures: 5, opens: 1, retryAt, ... }
 * ```
 */
export function circuitBreaker(options?: CircuitBreakerOptions): CircuitBreaker {
  const valid = validate(optionsSchema, options, 'circuitBreaker()');
  const threshold = valid?.consecutiveFailures ?? DEFAULT_CONSECUTIVE_FAILURES;
  const failureRatio = valid?.failureRatio ?? DEFAULT_FAILURE_RATIO;
  const minimumThroughput = valid?.minimumThroughput ?? DEFAULT_MINIMUM_THROUGHPUT;
  const bucketMs = (valid?.windowMs ?? DEFAULT_WINDOW_MS) / WINDOW_BUCKETS;
  const maxKeys = valid?.maxKeys ?? DEFAULT_MAX_KEYS;
  const maxRetryAfterMs = valid?.maxRetryAfterMs ?? DEFAULT_MAX_RETRY_AFTER_MS;
  const now = valid?.now ?? Date.now;
  const schedule = backoff(openSchedule(valid?.open), valid?.random ?? Math.random);
  /** Insertion order is recency order: a use moves the key to the end (delete + set). */
  const circuits = new Map<string, Circuit>();

  function lookup(key: string): Circuit {
    let circuit = circuits.get(key);
    if (circuit === undefined) {
      if (circuits.size >= maxKeys) circuits.delete(circuits.keys().next().value as string);
      circuit = newCircuit();
    } else {
      circuits.delete(key);
    }
    circuits.set(key, circuit);
    return circuit;
  }

  // -- the sliding window ---------------------------------------------------------

  /** Drops the buckets that have slid out of the window by time `t`. */
  function advance(c: Circuit, t: number): void {
    const index = Math.floor(t / bucketMs);
    if (index <= c.head) return; // same bucket, or the clock stepped back: keep the newest
    const b = c.buckets;
    if (index - c.head >= WINDOW_BUCKETS) {
      b.fill(0);
      c.windowFailures = 0;
      c.windowTotal = 0;
    } else {
      for (let i = c.head + 1; i <= index; i++) {
        const slot = slotOf(i);
        c.windowFailures -= b[slot] ?? 0;
        c.windowTotal -= b[WINDOW_BUCKETS + slot] ?? 0;
        b[slot] = 0;
        b[WINDOW_BUCKETS + slot] = 0;
      }
    }
    c.head = index;
  }

  function record(c: Circuit, t: number, failed: boolean): void {
    advance(c, t);
    const slot = slotOf(c.head);
    const b = c.buckets;
    b[WINDOW_BUCKETS + slot] = (b[WINDOW_BUCKETS + slot] ?? 0) + 1;
    c.windowTotal++;
    if (failed) {
      b[slot] = (b[slot] ?? 0) + 1;
      c.windowFailures++;
    }
  }

  // -- transitions ----------------------------------------------------------------

  function causeOf(failure: Failure | undefined): unknown {
    if (failure === undefined || failure.error !== undefined) return failure?.error;
    const { call } = failure;
    return new HttpStatusError({
      status: failure.status,
      statusText: failure.statusText,
      retryable: isRetryableStatus(failure.status, failure.headers),
      ...(failure.retryAfterMs === undefined ? {} : { retryAfterMs: failure.retryAfterMs }),
      ...(failure.headers === undefined ? {} : { headers: failure.headers }),
      request: requestSummary(call.key, call.method, call.href),
    });
  }

  function open(c: Circuit, call: Call, t: number, reason: string, serverDelayMs: number | undefined): void {
    c.opens++;
    const stepMs = schedule(c.opens, c.lastOpenMs);
    c.lastOpenMs = stepMs;
    // The server's delay may lengthen the open time, never shorten it, and only up to the cap.
    const openMs = Math.max(stepMs, Math.min(serverDelayMs ?? 0, maxRetryAfterMs));
    c.state = 'open';
    c.retryAtMs = t + openMs;
    c.probe = undefined;
    c.openReason = reason;
    c.cause = causeOf(c.last);
    call.emit({ type: 'breaker', key: call.key, state: 'open', retryAt: new Date(c.retryAtMs), reason });
  }

  function close(c: Circuit, call: Call): void {
    c.state = 'closed';
    c.consecutive = 0;
    c.opens = 0;
    c.lastOpenMs = undefined;
    c.retryAtMs = 0;
    c.probe = undefined;
    c.openReason = '';
    c.cause = undefined;
    c.last = undefined;
    c.buckets.fill(0);
    c.windowFailures = 0;
    c.windowTotal = 0;
    call.emit({ type: 'breaker', key: call.key, state: 'closed', reason: 'probe succeeded' });
  }

  // -- outcomes -------------------------------------------------------------------
  // Only outcomes of calls admitted while closed, and the probe's own, change state:
  // a call sent before the circuit opened and ending after must not open it again
  // (50 of them would otherwise push the open time 50 steps up).

  function succeed(c: Circuit, call: Call): void {
    if (c.state === 'closed') {
      record(c, now(), false);
      c.consecutive = 0;
    } else if (c.probe === call) {
      close(c, call);
    }
  }

  function fail(c: Circuit, call: Call, failure: Failure, serverDelayMs: number | undefined): void {
    if (c.state === 'closed') {
      const t = now();
      record(c, t, true);
      c.consecutive++;
      c.last = failure;
      if (c.consecutive >= threshold) {
        open(c, call, t, `${c.consecutive} consecutive failures (last: ${failure.label})`, serverDelayMs);
      } else if (c.windowTotal >= minimumThroughput && c.windowFailures / c.windowTotal >= failureRatio) {
        const reason = `${c.windowFailures} of the last ${c.windowTotal} calls failed (last: ${failure.label})`;
        open(c, call, t, reason, serverDelayMs);
      }
    } else if (c.probe === call) {
      c.consecutive++;
      c.last = failure;
      open(c, call, now(), `a failed probe (last: ${failure.label})`, serverDelayMs);
    }
  }

  /** An outcome that says nothing about the server (a user abort): a probe frees its slot. */
  function neutral(c: Circuit, call: Call): void {
    if (c.probe === call) c.probe = undefined;
  }

  /**
   * Pauses the key. A server's delay is applied up to the cap; a longer one still
   * pauses for the cap, but calls fail fast meanwhile instead of waiting. A pause only
   * ever grows: a shorter delay from a concurrent response never ends it early.
   */
  function pace(
    c: Circuit,
    call: Call,
    t: number,
    askedMs: number,
    fromServer: boolean,
    status: number,
    statusText: string,
    headers: Headers | undefined,
  ): void {
    const delayMs = fromServer ? Math.min(askedMs, maxRetryAfterMs) : askedMs;
    if (!(delayMs > 0)) return;
    const until = t + delayMs;
    if (until <= c.pausedUntilMs) return;
    const label = statusLabel(status, statusText);
    c.pausedUntilMs = until;
    c.pauseWaitable = askedMs <= maxRetryAfterMs;
    c.pauseReason = c.pauseWaitable
      ? `paced: the server asked to ${fromServer ? 'wait' : 'slow down'} (${label})`
      : `paced: the server asked to wait ${askedMs} ms (${label}), longer than the ${maxRetryAfterMs} ms allowed`;
    c.pauseCause = new HttpStatusError({
      status,
      statusText,
      retryable: isRetryableStatus(status, headers),
      ...(fromServer ? { retryAfterMs: askedMs } : {}),
      ...(headers === undefined ? {} : { headers }),
      request: requestSummary(call.key, call.method, call.href),
    });
    call.emit({ type: 'paced', key: call.key, until: new Date(until), phase: 'start', delayMs });
  }

  /** Judges a status (from a response, or an `HttpStatusError` thrown inside the breaker). */
  function judgeStatus(
    c: Circuit,
    call: Call,
    status: number,
    statusText: string,
    headers: Headers | undefined,
    readDelay: () => number | undefined,
    error: unknown,
  ): void {
    if (status === 429) {
      // The server is up and asks us to slow down: pace the key, never count it against it.
      const t = now();
      const asked = readDelay();
      if (asked === undefined) {
        c.pauseSteps++;
        const stepMs = schedule(c.pauseSteps, c.lastPauseMs);
        c.lastPauseMs = stepMs;
        pace(c, call, t, stepMs, false, status, statusText, headers);
      } else {
        pace(c, call, t, asked, true, status, statusText, headers);
      }
      succeed(c, call);
      return;
    }
    c.pauseSteps = 0;
    c.lastPauseMs = undefined;
    if (!isFailureStatus(status)) {
      succeed(c, call);
      return;
    }
    const asked = readDelay();
    const failure: Failure = {
      label: statusLabel(status, statusText),
      error,
      status,
      statusText,
      headers,
      retryAfterMs: asked,
      call,
    };
    fail(c, call, failure, asked);
    if (status === 503 && asked !== undefined) pace(c, call, now(), asked, true, status, statusText, headers);
  }

  function settleResponse(c: Circuit, call: Call, response: Response): void {
    const status = response.status;
    if (status < 400) {
      // The happy path: a window bump and two field writes.
      c.pauseSteps = 0;
      succeed(c, call);
      return;
    }
    const headers = response.headers;
    judgeStatus(c, call, status, response.statusText, headers, () => retryDelay(headers, now()), undefined);
  }

  function settleError(c: Circuit, call: Call, error: unknown): void {
    // Our own deadline firing means the server was slow, even when a timeout
    // middleware inside the breaker aborted the call's signal with it.
    if (error instanceof TimeoutError) {
      const label = `${error.scope} timeout after ${error.ms} ms`;
      fail(
        c,
        call,
        { label, error, status: 0, statusText: '', headers: undefined, retryAfterMs: undefined, call },
        undefined,
      );
    } else if (isAbort(error, call.signal)) {
      neutral(c, call);
    } else if (error instanceof NetworkError) {
      const label = `network error ${error.code}`;
      fail(
        c,
        call,
        { label, error, status: 0, statusText: '', headers: undefined, retryAfterMs: undefined, call },
        undefined,
      );
    } else if (error instanceof HttpStatusError) {
      // `throwOnStatus()` inside the breaker: judge the status it carries.
      const headers = new Headers(error.headers);
      judgeStatus(c, call, error.status, error.statusText, headers, () => error.retryAfterMs, error);
    } else {
      neutral(c, call); // CircuitOpenError from an inner breaker, a bug in a middleware, ...
    }
  }

  // -- admission ------------------------------------------------------------------

  function fastFail(
    call: Call,
    t: number,
    retryAtMs: number,
    reason: string,
    cause: unknown,
  ): CircuitOpenError {
    return new CircuitOpenError({
      key: call.key,
      retryAt: new Date(retryAtMs),
      reason,
      cause,
      now: t,
      request: requestSummary(call.key, call.method, call.href),
    });
  }

  /**
   * The slow path, for a key that is open, half-open or paced: fails fast, waits out
   * a pause, or lets the call through (as the probe, when half-open). Returns the
   * circuit to report to (the key's state may have been reset during a wait).
   */
  async function admit(first: Circuit, call: Call): Promise<Circuit> {
    let c = first;
    /** The clock reading before the last wait: a clock that did not move (a test's) ends the wait. */
    let sleptAt: number | undefined;
    for (;;) {
      const t = now();
      if (c.state === 'open' && t < c.retryAtMs) {
        throw fastFail(call, t, c.retryAtMs, `after ${c.openReason}`, c.cause);
      }
      if (c.state === 'half-open' && c.probe !== undefined) {
        throw fastFail(call, t, t, `while its probe is in flight, after ${c.openReason}`, c.cause);
      }
      if (c.pausedUntilMs !== 0) {
        const leftMs = c.pausedUntilMs - t;
        if (leftMs <= 0) {
          c.pausedUntilMs = 0;
        } else if (t !== sleptAt) {
          if (!c.pauseWaitable) throw fastFail(call, t, c.pausedUntilMs, c.pauseReason, c.pauseCause);
          if (leftMs >= call.remainingMs()) {
            const reason = `${c.pauseReason}, past this call's deadline`;
            throw fastFail(call, t, c.pausedUntilMs, reason, c.pauseCause);
          }
          call.emit({
            type: 'paced',
            key: call.key,
            until: new Date(c.pausedUntilMs),
            phase: 'wait',
            delayMs: leftMs,
          });
          sleptAt = t;
          await sleep(leftMs, call.signal);
          // Timers may fire a little early against the wall clock, and another
          // response may have stretched the pause meanwhile: look again.
          c = lookup(call.key);
          continue;
        }
      }
      if (c.state === 'open') {
        c.state = 'half-open';
        call.emit({
          type: 'breaker',
          key: call.key,
          state: 'half-open',
          reason: 'open time passed; letting one probe through',
        });
      }
      if (c.state === 'half-open') c.probe = call;
      return c;
    }
  }

  const breaker = async function circuitBreaker(call: Call, next: Next): Promise<Response> {
    let c = lookup(call.key);
    if (c.state !== 'closed' || c.pausedUntilMs !== 0) c = await admit(c, call);
    let response: Response;
    try {
      response = await next(call);
    } catch (error) {
      settleError(c, call, error);
      throw error;
    }
    settleResponse(c, call, response);
    return response;
  } as CircuitBreaker;

  breaker.stats = (key: string): BreakerStats | undefined => {
    const c = circuits.get(key);
    if (c === undefined) return undefined;
    const t = now();
    advance(c, t);
    return {
      state: c.state,
      consecutiveFailures: c.consecutive,
      windowFailures: c.windowFailures,
      windowTotal: c.windowTotal,
      opens: c.opens,
      ...(c.state === 'closed' ? {} : { retryAt: new Date(c.retryAtMs) }),
      ...(c.pausedUntilMs > t ? { pausedUntil: new Date(c.pausedUntilMs) } : {}),
    };
  };
  breaker.reset = (key?: string): void => {
    if (key === undefined) circuits.clear();
    else circuits.delete(key);
  };
  breaker.size = (): number => circuits.size;
  return breaker;
}
