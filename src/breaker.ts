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
 * it pauses the whole key instead, for every caller. When the pause ends, one call
 * goes first (the pace probe) and the rest follow only once it is answered, so a
 * server that is still overloaded meets one request, not every waiting caller at once;
 * then, when it answered faster than the pause lasted, in doubling steps (slow start); and
 * no more of them than its answer says its quota has left. A success that says the
 * quota is used up (`remaining: 0` and a reset) pauses the key too: model providers
 * send that on the last allowed request, and the next one would only earn a 429.
 *
 * Cost matters: the happy path (closed, not paused, 2xx) is one Map lookup, a few
 * pointer writes to mark the key most recently used, and a few field updates. Per-key
 * state is one fixed-shape record (the sliding window is a ring of
 * {@link WINDOW_BUCKETS} counters, allocated only once a key's calls span two
 * buckets), and the registry is bounded, so a flood of distinct keys cannot grow memory.
 */

import * as z from 'zod/mini';
import {
  type BackoffOptions,
  backoff,
  backoffSchema,
  delayMsSchema,
  type Jitter,
  withDefaults,
} from './backoff.ts';
import {
  abortReason,
  type Call,
  ENDED,
  type Ended,
  type MarkedCall,
  type Middleware,
  type Next,
} from './call.ts';
import { waitLeft } from './capture.ts';
import { isRetryableStatus } from './classify.ts';
import {
  CircuitOpenError,
  HttpStatusError,
  isAbort,
  NetworkError,
  requestSummary,
  statusLine,
  TimeoutError,
} from './errors.ts';
import type { PacedEvent } from './events.ts';
import { functionOption, validate } from './options.ts';
import { redactText, safeHeaders } from './redact.ts';
// The longest wait, in ms, a server may impose on its word alone, by default: the same as retry()'s.
import { DEFAULT_MAX_RETRY_AFTER_MS } from './retry.ts';
import { hideSent, sentHider } from './status.ts';
import { type JsonValue, type Store, storeSchema } from './store.ts';
import { MAX_DELAY_MS, quotaLeft, readHeader } from './timing.ts';

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
/**
 * The sliding window is this many fixed time buckets: a call costs one counter
 * bump, and per-key memory stays constant however many calls a window holds.
 * The window covers between 9/10 and all of `windowMs`.
 */
const WINDOW_BUCKETS = 10;
/** A registry bigger than this is a configuration mistake, not a need. */
const MAX_MAX_KEYS = 10_000_000;
/**
 * How long a probe (half-open, or the first call after a pause) may hold its slot
 * without settling, in ms. A probe that never answers (no attempt timeout inside the
 * breaker, a server that accepts and never replies) must not hold its key forever:
 * after this long the next call probes instead (as Polly's half-open state does after
 * the break duration). Twice the default attempt timeout, so that under a policy's
 * default timeouts the attempt timeout ends a probe first. With `attemptMs` over
 * 60 s (slow non-streaming model calls), a healthy probe may be joined by a second.
 */
export const PROBE_LEASE_MS: number = 60_000;

/**
 * The bag of a call whose redirects `auth()` follows itself (a token in a header fetch
 * would carry to another origin), and of each hop it sends, holds this key: a redirect
 * answering it is a step on the way, not the server's answer, and counts for nothing,
 * as fetch's own redirects (never seen here) do. Else an endpoint that always redirects
 * to a 503 had a success between every two failures, and never opened by their run.
 * 1 on the call, 2 on each hop: a hop is no new call, and a slow start does not hold it
 * behind the calls waiting. Internal (`src/auth.ts` sets it).
 */
export const FOLLOWS: unique symbol = Symbol('breakwater.follows');

/**
 * Calls waiting on a key that one answer lets go after a pace probe answered faster than
 * the pause lasted (slow start, as TCP's): the probe's answer lets 2 go, and each answer
 * to a call on the released key 2 more, so the calls in flight double every round trip
 * until none waits, or a 429 pauses the key again.
 */
const SLOW_START_WAKES = 2;
/**
 * Past its ceiling a slow start grows only once this many of the longest pause its
 * waiters were held for (`heldForMs`) have gone since its pace probe: a probe past a
 * server's fixed limit costs a whole pause for every caller, so probing once every ten
 * pauses keeps that under about a tenth of the time, and a server that recovered still
 * gets its callers back. Not the last pause's: a 1 ms one (a probe sent just before a
 * quota window ended) after a 200 ms one let it grow 10 ms after the probe.
 */
const GROW_AFTER_PAUSES = 10;

/** Where a pause is kept in a shared store: this prefix, then the key. */
const SHARED_PAUSE = 'breakwater:pause:';

/**
 * How long a call waits for the store's word on its key, in ms (1 s, as long as the
 * server adapters wait for theirs). A store answers in a millisecond or so; one that
 * hangs (a Redis failing over) must not hold every call: past this the call goes on the
 * breaker's own state, and the late answer applies to the calls after it.
 */
const STORE_WAIT_MS = 1000;

/**
 * After a read of a key went unanswered past {@link STORE_WAIT_MS}, how long (ms) its
 * calls go without waiting for the store, before the next call reads it again (10 s).
 * One read that never settled (a Redis client whose command was lost) kept the key
 * unshared for the life of the process; a fresh read per call held every call 1 s.
 */
const STORE_RETRY_MS = 10_000;

/** Of another client's reason for opening its circuit, read from a shared store, the characters shown. */
const SHARED_REASON_CHARS = 200;

/** Writes of one pause to a shared store, each after another client's write won the race. */
const PUBLISH_TRIES = 3;

/**
 * Store calls a breaker leaves unanswered at once, at most; past it the store is passed
 * over (calls go on the breaker's own state) until some are answered. A store that never
 * settles (a client queueing commands while its server is gone) kept one promise per
 * pause offered to it, and per key read, for good.
 */
const STORE_CALLS = 1000;

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
   * that names no delay (the next step for each such 429 that meets the key unpaused, or
   * answers the pace probe; 429s to calls sent before the pause step nothing up).
   */
  open?: BackoffOptions | undefined;
  /**
   * How many servers (keys) are remembered; the least recently used is forgotten
   * first, but never one that calls are waiting on (a pause, a pace probe). Default
   * 1000: bounds memory when keys come from URLs. A whole number, at least 1.
   */
  maxKeys?: number | undefined;
  /**
   * The cap, in ms, on a server-requested stretch of the open time or pause (a
   * `Retry-After` of a day must not silence a client for a day on its word alone),
   * and the longest pause a call waits out instead of failing fast. Default 60,000.
   */
  maxRetryAfterMs?: number | undefined;
  /**
   * Whether rate-limit headers that say a quota is used up (`remaining: 0` beside its
   * reset) pause the key on any answer, a 200 included, and whether a pace probe's
   * answer releases only as many waiters as its quota has left. Default `true`. Turn it
   * off for a server whose rate-limit headers are wrong: one that reports 0 yet keeps
   * serving would get one call per reset. 429s and 503s pace the key either way.
   */
  quotaPacing?: boolean | undefined;
}

/** Options for {@link circuitBreaker}. */
export interface CircuitBreakerOptions extends BreakerConfig {
  /** The clock, epoch ms. Default `Date.now`; inject one in tests. Not part of a policy file. */
  now?: (() => number) | undefined;
  /** A source of numbers in `[0, 1)` for jitter. Default `Math.random`; inject one in tests. */
  random?: (() => number) | undefined;
  /**
   * Shares pauses with every breaker that uses the same store: a fleet of agent workers
   * behind one Redis-backed `Store` holds off together when the server asks one of them
   * to, instead of each worker earning its own 429 (a retry storm times the fleet).
   * A pause this breaker sets (a 429, a 503 or 529 naming a delay, a used-up quota) is
   * written under `breakwater:pause:<key>` until it ends, unless a later one is there;
   * and each call first reads its key's entry, and waits out a pause found there as if
   * it were its own (each breaker then sends its own pace probe). One read per key at a
   * time, shared by the calls that arrive meanwhile, and waited for at most 1 s: a store
   * that fails or hangs is passed over, and calls go on this breaker's own state.
   * `reset(key)` deletes the key's entry too. An open circuit is shared the same way: a
   * closed breaker that reads one opens until the same end, then sends its own probe. An end
   * is written in epoch ms, so the fleet's clocks must agree (NTP keeps them within
   * milliseconds). Default: none, each breaker paces alone. Not part of a policy file:
   * `definePolicy(config, { store })` takes it.
   */
  store?: Store | undefined;
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
  /** How many keys the registry holds (at most `maxKeys`; more only while calls wait on each of them, until the next new key). */
  size(): number;
}

// Messages come from options.ts's formatter ("must be at least 1", "must be a number"):
// they name the bound and the value found, which is what a user needs to fix it.

/** A whole number, at least 1 (`z.int()` also keeps it below 2^53; the formatter says "must be an integer"). */
const count = () => z.int().check(z.minimum(1));

// Every field is optional: `z.partial()` below says so once. Built in `/* @__PURE__ */`
// closures, as backoff.ts's schemas are: a bundle that imports only a constant from
// this file (the start gate takes PROBE_LEASE_MS) drops them.
const configShape = /* @__PURE__ */ (() => ({
  consecutiveFailures: count(),
  failureRatio: z.number().check(z.gt(0), z.maximum(1)),
  minimumThroughput: count(),
  windowMs: z.number().check(z.gt(0), z.maximum(MAX_DELAY_MS)),
  open: backoffSchema,
  maxKeys: count().check(z.maximum(MAX_MAX_KEYS)),
  maxRetryAfterMs: delayMsSchema,
  quotaPacing: z.boolean(),
}))();

/**
 * The schema of {@link BreakerConfig}: unknown keys are rejected. Exported so
 * `definePolicy()` validates `breaker` with the very same rules.
 */
export const breakerSchema: z.ZodMiniType<BreakerConfig> = /* @__PURE__ */ (() =>
  z.partial(z.strictObject(configShape)))();

const optionsSchema = /* @__PURE__ */ (() =>
  z.optional(
    z.partial(
      z.strictObject({
        ...configShape,
        now: functionOption<() => number>(),
        random: functionOption<() => number>(),
        store: storeSchema,
      }),
    ),
  ))();

/**
 * A counted failure: a response (408, 5xx), an `HttpStatusError` thrown inside the
 * breaker, a `NetworkError` or a `TimeoutError`. Kept as is: its label and, for a
 * response, the `HttpStatusError` for `CircuitOpenError.cause` are built only if the
 * circuit opens.
 */
type Failure = Answer | NetworkError | TimeoutError;

/** What the server answered: a response, or an `HttpStatusError` thrown inside the breaker. */
type Answer = Response | HttpStatusError;

/**
 * One key's state, one fixed-shape record (a million keys may pass through a
 * registry of a thousand, each allocating one): the recency links and the counts the
 * happy path touches, then what only failures, openings and pauses use.
 */
interface Circuit {
  readonly key: string;
  /** Neighbours in the registry's recency list (the sentinel at the ends). */
  newer: Circuit;
  older: Circuit;
  state: BreakerState;
  /**
   * Bumped when the circuit opens or closes. A call remembers the epoch it was sent in:
   * only calls sent since the last change count toward opening (a call sent before the
   * circuit opened, failing after it closed again, says nothing about the server now),
   * and only probes of this opening close it.
   */
  epoch: number;
  /** Failures in a row since the last success. */
  streak: number;
  /** Absolute index (`floor(t / bucketMs)`) of the newest window bucket. */
  head: number;
  /** Failures in the sliding window. */
  failed: number;
  /** Calls in the sliding window. */
  total: number;
  /**
   * Each bucket's failures and calls, side by side (see `slotOf`), allocated only once the
   * window spans two buckets: until then the sums are the newest bucket's counts,
   * so a key used in one burst (or once) never pays for the ring.
   */
  ring: number[] | undefined;
  /**
   * When the pause ends, epoch ms; 0 when not paced. It stays set after the pause
   * ends, until the pace probe's response releases the key: the happy path's one
   * check (`!pausedUntilMs`) sends every call during the probe down the slow path.
   */
  pausedUntilMs: number;
  /** How long the pause was set for: a clock that steps back never makes it longer. */
  pausedForMs: number;
  /**
   * The longest pause since the key was last released: what a pace probe's round trip is
   * weighed against (a 1 ms pause, for a probe sent just before a quota window ended,
   * made any probe after it look slow, and let every waiter go at once).
   */
  heldForMs: number;
  /**
   * Pauses set so far (each start or stretch). A call remembers the count it was sent at:
   * an answer to a call sent before the latest pause began is the refusal that pause
   * already acts on, told again (see `settle()`).
   */
  pauses: number;
  /** Openings since last closed (the backoff step). */
  opens: number;
  /** The last open-time step, for decorrelated jitter. */
  lastOpenMs: number | undefined;
  /** While open: when the next probe may go; while half-open: when the probe's lease ends. Epoch ms. */
  retryAtMs: number;
  /** How far ahead of the clock `retryAtMs` was set: a clock that steps back never makes the wait longer. */
  retryInMs: number;
  /** The call that is the half-open probe (the Call itself is the token: no allocation). */
  probe: Call | undefined;
  /** What opened it, without the leading "after ": `5 consecutive failures (last: HTTP 503)`. */
  openReason: string;
  /** The failure that opened it, as an error (`CircuitOpenError.cause`). */
  cause: unknown;
  /** Whether a call may wait the pause out (the server asked for no more than the cap). */
  waitable: boolean;
  pauseReason: string;
  pauseCause: unknown;
  /** 429s without a delay in a row: the step of the pause schedule. */
  pauseSteps: number;
  lastPauseMs: number | undefined;
  /** The first call let through after a pause ended, until its outcome (the Call itself is the token). */
  paceProbe: Call | undefined;
  /** When the pace probe's lease ends, epoch ms: then the next call may be the pace probe instead. */
  paceProbeUntilMs: number;
  /**
   * Calls that may still go during the pause: the quota the pace probe's answer said
   * was left, when fewer than the calls waiting. 0 for every other pause.
   */
  allowance: number;
  /**
   * Slow start's count of the calls out since its pace probe's answer released the key
   * (each answer lets 2 go and takes 1 off); 0 when no slow start runs.
   */
  flying: number;
  /**
   * Where slow start stops doubling (TCP's ssthresh): half the calls out when a slow start
   * last met a refusal (a 429, 503 or 529 with a delay) while doubling, 1 fewer when it
   * met one past its ceiling. Past it, once GROW_AFTER_PAUSES times `heldForMs` have gone
   * since the pace probe, each answer raises it by 1/flying (so the calls out grow by 1 a
   * round trip), and the answer that lifts it above the calls out lets 2 go.
   */
  ceiling: number;
  /**
   * Wakers of the calls waiting on the key (a pause out, or the pace probe's outcome),
   * in arrival order, each with its call's deadline by the breaker's clock and its place
   * (see {@link waitOn}); a waker makes its call look at the key again.
   * Undefined until the first waiter.
   */
  waiters: Map<() => void, [deadline: number, place: number]> | undefined;
  /** The shared store's read of this key in flight (see `look()`), which the calls arriving meanwhile wait for. */
  reading: Promise<void> | undefined;
  /** When that read was given up on, unanswered after STORE_WAIT_MS (epoch ms); 0 while it is waited for, or none is out. */
  lateSince: number;
  /**
   * The end (epoch ms) of the pause this key last offered to the shared store or took
   * from it: the same entry read again is no news (see `look()`).
   */
  sharedMs: number;
}

/** A closed, unpaused circuit; `list` fills its neighbours until it is linked in. */
function newCircuit(key: string, list?: Circuit): Circuit {
  return {
    key,
    newer: list as Circuit,
    older: list as Circuit,
    state: 'closed',
    epoch: 0,
    streak: 0,
    head: -Infinity,
    failed: 0,
    total: 0,
    ring: undefined,
    pausedUntilMs: 0,
    pausedForMs: 0,
    heldForMs: 0,
    pauses: 0,
    opens: 0,
    lastOpenMs: undefined,
    retryAtMs: 0,
    retryInMs: 0,
    probe: undefined,
    openReason: '',
    cause: undefined,
    waitable: false,
    pauseReason: '',
    pauseCause: undefined,
    pauseSteps: 0,
    lastPauseMs: undefined,
    paceProbe: undefined,
    paceProbeUntilMs: 0,
    allowance: 0,
    flying: 0,
    ceiling: Infinity,
    waiters: undefined,
    reading: undefined,
    lateSince: 0,
    sharedMs: 0,
  };
}

/**
 * Where an absolute bucket index's failures sit in the ring; its calls sit in the next
 * slot. Safe for negative indexes too.
 */
function slotOf(index: number): number {
  return 2 * (((index % WINDOW_BUCKETS) + WINDOW_BUCKETS) % WINDOW_BUCKETS);
}

/** Empties the sliding window (and drops its ring: a quiet key goes back to costing nothing). */
function clearWindow(c: Circuit): void {
  c.ring = undefined;
  c.failed = 0;
  c.total = 0;
}

/**
 * Wakes the `first` calls waiting on the key (a pause out, or for the pace probe's
 * outcome), and any other whose deadline is not after `untilMs` (epoch ms): each looks
 * at the key again (it goes, waits for a new pause or probe, or fails fast). Every
 * waiter (the default) when what they wait for is gone: the circuit opened, the key was
 * reset or forgotten. Only a few when one must act, so that a key's 1,000 waiters are
 * not all woken by each of 1,000 pauses (quadratic: 11.6 s of CPU): the first of them,
 * to wait out the new pause and probe it, or as many as may go now.
 */
function wakeWaiters(c: Circuit, first = Infinity, untilMs = -Infinity): void {
  for (const [wake, [deadline]] of c.waiters ?? []) if (first-- > 0 || untilMs >= deadline) wake();
}

/**
 * The end of a pause kept in a shared store (see `publish()`), epoch ms; -Infinity for
 * any other value (none, garbage, another program's entry).
 */
function sharedEnd(value: unknown): number {
  const untilMs = (value as { untilMs?: unknown } | null | undefined)?.untilMs;
  return typeof untilMs === 'number' ? untilMs : -Infinity;
}

/** Each signal's abort handlers here, and its one listener (see {@link onAbort}). */
const ABORTS = new WeakMap<AbortSignal, [handlers: Set<() => void>, listener: () => void]>();

/**
 * Calls `handler` when `signal` aborts, until the function returned is called. One
 * listener on a signal however many calls wait here on it: an SDK reuses one signal for
 * every request (the MCP SDK's transport), and a listener a wait made Node warn of a leak
 * ("MaxListenersExceededWarning") at 11 calls waiting together out a pause or for the
 * store's read. A function, not an object with handleEvent: a polyfill's signal
 * (abortcontroller-polyfill) calls every listener as a function.
 */
function onAbort(signal: AbortSignal | undefined, handler: () => void): () => void {
  if (!signal) return () => {};
  let entry = ABORTS.get(signal);
  if (!entry) {
    const handlers = new Set<() => void>();
    entry = [
      handlers,
      () => {
        for (const h of handlers) h();
      },
    ];
    ABORTS.set(signal, entry);
    signal.addEventListener('abort', entry[1]);
  }
  const [handlers, listener] = entry;
  handlers.add(handler);
  return () => {
    if (handlers.delete(handler) && !handlers.size) {
      signal.removeEventListener('abort', listener);
      ABORTS.delete(signal);
    }
  };
}

/**
 * Waits on the key (a pause out, or the pace probe's outcome) for a call whose deadline
 * is `deadline` (epoch ms, by the breaker's clock): resolves `true` when
 * woken ({@link wakeWaiters}), `false` when `ms` pass first, and rejects with the
 * signal's reason ({@link abortReason}) on abort (at once if already aborted). The timer
 * and the listener are removed either way, and the waiter leaves the list. `place` is the
 * call's first arrival on a waiting list; a call let go before, whose resend waits again
 * (shed: a 503 or 429 with a delay), takes its place by it, ahead of the calls that came
 * later (else slow start's overshoot shed the same calls at the back each time, and they
 * ran out of attempts having waited out every Retry-After).
 */
function waitOn(
  c: Circuit,
  ms: number,
  deadline: number,
  signal: AbortSignal | undefined,
  place: number,
  front: boolean,
): Promise<boolean> {
  return new Promise<boolean>((resolve, reject) => {
    /** `true`: woken; `false`: timed out; undefined: aborted. */
    const settle = (woken?: boolean): void => {
      clearTimeout(timer);
      off();
      c.waiters?.delete(wake);
      if (woken === undefined) reject(abortReason(signal));
      else resolve(woken);
    };
    const wake = (): void => settle(true);
    const timer = setTimeout(settle, ms, false);
    const off = onAbort(signal, settle);
    c.waiters ??= new Map();
    const waiters = c.waiters.set(wake, [deadline, place]);
    // A resend goes ahead of the calls that came later: from the first of them on, each
    // moves behind it, in its order (a sort of the whole list on each resend's wait cost
    // n log n and a new Map, about n² log n for n waiters that each resend).
    if (front) {
      let behind = false;
      for (const [other, entry] of waiters) {
        if (other === wake) break;
        if (entry[1] > place) behind = true;
        if (behind) {
          waiters.delete(other);
          waiters.set(other, entry);
        }
      }
    }
    if (signal?.aborted) settle();
  });
}

/**
 * When a call refused at `t` (epoch ms) while a probe holds its key should come back,
 * epoch ms: the breaker's half-open probe, its pace probe, or a start gate's probe
 * (src/gate.ts shares this, as it does {@link PROBE_LEASE_MS}; not in the package's
 * index). The probe's settling time is unknown, and a `retryAt` of now had a client
 * that sleeps until it spin, refused at once, until the probe settled (up to
 * {@link PROBE_LEASE_MS}). So: `stepMs` on (the quiet just given the server: the open
 * step, the pause, or the gate's window; Polly's `RetryAfter` counts a break duration
 * from its probe too), or as long again as the probe has been in flight if that is
 * longer (a client waking at each `retryAt` backs off exponentially against a hung
 * probe), and never past the lease's end (`leaseEndsMs`, epoch ms), when the next call
 * probes anyway.
 */
export function comeBack(t: number, leaseEndsMs: number, stepMs: number): number {
  return Math.min(leaseEndsMs, t + Math.max(stepMs, t + PROBE_LEASE_MS - leaseEndsMs));
}

/** `HTTP 503 Service Unavailable`, `network error ECONNREFUSED`, `attempt timeout after 100 ms`. */
function failureLabel(call: Call, failure: Failure): string {
  if (failure instanceof TimeoutError) return `${failure.scope} timeout after ${failure.ms} ms`;
  if (failure instanceof NetworkError) return `network error ${failure.code}`;
  // Hidden and redacted: Node's and Bun's fetch keep a reason phrase as written (a URL, or
  // the credential the call sent: `401 Invalid token Bearer eyJ…`).
  return statusLine(failure.status, redactText(hideSent(call, failure.statusText)));
}

/**
 * Whether `answer` is a stored one replayed to a repeat of a keyed request
 * (`Idempotent-Replayed: true`: Stripe, breakwater/hono's idempotency()): it says
 * nothing about the server now, neither a failure nor a quota used up.
 */
function replayed(answer: Answer): boolean {
  return readHeader(answer.headers, 'idempotent-replayed')?.toLowerCase() === 'true';
}

/**
 * What a failure or pause reports as its cause: an error as is, a response as a new
 * `HttpStatusError` (built only now, when a circuit opens or a key is paced).
 */
function causeOf(call: Call, failure: Failure, retryAfterMs: number | undefined): Error {
  if (failure instanceof Error) return failure;
  const { status, headers } = failure;
  const hide = sentHider(call);
  return new HttpStatusError({
    status,
    statusText: hide(failure.statusText), // and redacted by HttpStatusError
    retryable: isRetryableStatus(status, headers),
    retryAfterMs,
    // The kept headers without what the call sent, should the server echo it (a request
    // id or WWW-Authenticate quoting the token); HttpStatusError redacts them again.
    headers: new Headers(safeHeaders(headers, hide)),
    request: requestSummary(call.key, call.method, call.href),
  });
}
/**
 * A circuit breaker and pacer per server (`call.key`), in a bounded LRU registry.
 *
 * - **Counts** only failures that say something about the server's health: 408 and
 *   5xx responses (529 included), `NetworkError`, `TimeoutError`. Never other 4xx,
 *   401/403/407, user aborts or `CircuitOpenError`. Any other response (429 included:
 *   the server is up) is a success and ends a run of failures; other thrown errors
 *   count as nothing. A 503 or 529 naming a delay, answered to a call sent before the
 *   key's latest pause began, counts for nothing: a server that starts shedding with 32
 *   calls on the wire tells one refusal 32 times, and that pause already acts on it
 *   (each pace probe's shed counts, so a server that keeps shedding still opens it).
 * - **Opens** after `consecutiveFailures` in a row, or when failures make up at least
 *   `failureRatio` of the sliding window's calls (once it holds `minimumThroughput`).
 *   The n-th opening in a row lasts `backoff(open)(n)`, stretched to the failure's own
 *   `Retry-After` (capped at `maxRetryAfterMs`).
 * - **While open**, calls fail fast with `CircuitOpenError` (nothing is sent): its
 *   `retryAt` says when the next probe may go, its `cause` is the failure that opened it.
 * - **Half-open**: after the open time exactly one call goes through as a probe, however
 *   many arrive together; the others fail fast, with a `retryAt` one open step on (the
 *   step the circuit just served), or as far on as the probe has been in flight if that
 *   is longer, and never past the end of the probe's lease. Its success closes the circuit and
 *   resets every count; its failure opens it again for the next (longer) step. A probe
 *   that ends in neither (a user abort) frees the slot for the next caller. A probe
 *   that has not settled after 60 s (`PROBE_LEASE_MS`) gives up its slot: the next call
 *   probes instead, and whichever probe succeeds first closes the circuit. Pair the
 *   breaker with an attempt timeout, so that a hung probe counts as a failure sooner.
 *   Outcomes of calls sent before the circuit last opened or closed count for nothing.
 *   A call whose signal has aborted (before or while it waits here) takes no slot,
 *   reports no wait and changes no state: it is refused with its abort reason.
 * - **Pacing**: a 429, 503 or 529 naming a delay (`Retry-After` and friends), or a 429 naming
 *   none (then the next step of `open`, only for one meeting a key unpaused or
 *   answering the pace probe: not for the calls in flight together when the key was
 *   paused, however late they answer), pauses the whole key. A later call waits the
 *   pause out (abortably) when `maxRetryAfterMs` and its remaining deadline cover it,
 *   else fails fast with `CircuitOpenError` (`retryAt` = the pause's end). A call
 *   waiting looks again at once when the key is reset, the circuit opens or a response
 *   stretches the pause (past what it may wait: it fails fast then). A server
 *   delay above `maxRetryAfterMs` pauses the key for `maxRetryAfterMs` only, and calls
 *   fail fast meanwhile (waiting would only meet another 429). A 503 or 529 with a delay
 *   both pauses the key and counts as a failure. An answer to a call sent before a pause
 *   that its pace probe's answer has since ended pauses nothing: the probe's is newer.
 *   Any answer that is not a failure (a 200
 *   included; 408 and 5xx are judged by their `retryDelay()`, as retry() does) whose
 *   rate-limit headers say a quota is used up (`remaining: 0` beside a reset: OpenAI's,
 *   Anthropic's, `RateLimit`, `X-RateLimit-*`) pauses the key until the reset, so the
 *   call after the last allowed one waits instead of earning a 429. Only a reset within
 *   `maxRetryAfterMs`: a success is a forecast, not a refusal, so a longer limit is left
 *   to the server's own 429 (a server that reports 0 yet keeps serving costs nothing),
 *   and is passed over: another quota at 0 that resets in time still pauses the key.
 * - **Paced release**: when a pause ends, the first call through is the pace probe;
 *   the calls waiting (or arriving) meanwhile wait for its outcome, abortably, for at
 *   most `maxRetryAfterMs` and never past their deadline (then they fail fast with
 *   `CircuitOpenError`, its `retryAt` one pause on, later the longer the probe hangs,
 *   never past its lease). A response that is no failure and starts no new pause
 *   releases them: all at once when it came slower than the pause lasted (a slow server),
 *   else in doubling steps (slow start: 2 go, and each answer on the key lets 2 more go,
 *   1 for a failure or an abort, until none waits or a 429 pauses the key again; a call
 *   arriving meanwhile goes at once, as on any key not paused), so a server with room
 *   for a few meets a few, not every waiter. Unless its rate-limit
 *   headers leave fewer requests in the quota than calls are waiting and the quota
 *   resets within `maxRetryAfterMs`: then that many go, and the rest wait for the
 *   quota's reset (a new pause; a later 429 ends what is left of that allowance). A
 *   429 / 503 with a delay pauses the key again and they wait that pause out (or fail
 *   fast, as above); any other failure (a 408 or 5xx, network, timeout) or an abort
 *   makes the first of them the next probe. An open circuit fails them fast, as it
 *   fails every call.
 *   As with half-open, pair the breaker with an attempt timeout: a hung pace probe holds
 *   its waiters until their own limits, and the key for 60 s, after which the next call
 *   (or a waiter whose wait ends) is the pace probe.
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
 *     // error.message: POST https://mcp.example.com/mcp (server "github-mcp") not sent,
 *     // circuit open after 5 consecutive failures (last: HTTP 503 Service Unavailable);
 *     // next attempt at ... (in 4.2 s)
 *     return { unavailableUntil: error.retryAt };
 *   }
 * }
 * breaker.stats('github-mcp'); // { state: 'open', consecutiveFailures: 5, opens: 1, retryAt, ... }
 * ```
 */
export function circuitBreaker(options?: CircuitBreakerOptions): CircuitBreaker {
  // The schema admits no null, so a default here stands for exactly what `??` would.
  const {
    consecutiveFailures: threshold = DEFAULT_CONSECUTIVE_FAILURES,
    failureRatio = DEFAULT_FAILURE_RATIO,
    minimumThroughput = DEFAULT_MINIMUM_THROUGHPUT,
    windowMs = DEFAULT_WINDOW_MS,
    maxKeys = DEFAULT_MAX_KEYS,
    maxRetryAfterMs = DEFAULT_MAX_RETRY_AFTER_MS,
    quotaPacing = true,
    now = Date.now,
    open,
    random = Math.random,
    store,
  } = validate(optionsSchema, options, 'circuitBreaker()') ?? {};
  const bucketMs = windowMs / WINDOW_BUCKETS;
  const schedule = backoff(withDefaults(open, DEFAULT_OPEN_JITTER), random);
  /** Every known key's circuit; recency is kept by the list below, not by Map order. */
  const circuits = new Map<string, Circuit>();

  /**
   * The recency list: a ring through every circuit and this sentinel, so no end needs
   * a special case. `list.older` is the newest circuit, `list.newer` the oldest.
   */
  const list = newCircuit('');
  list.newer = list;
  list.older = list;

  function unlink(c: Circuit): void {
    c.newer.older = c.older;
    c.older.newer = c.newer;
  }

  /**
   * The key's circuit, made the most recently used; created when new, evicting the
   * least recently used when the registry is full.
   *
   * Recency is a linked list through the circuits rather than Map order (delete +
   * set on every use): in V8, re-inserting the same key into a Map of 1,000
   * entries costs about 2 µs, and finding the oldest entry after many deletions
   * means skipping their holes, which would make the happy path of a busy key the
   * slowest one. Here a use is a few pointer writes, and none for the newest key.
   */
  function lookup(key: string): Circuit {
    let c = circuits.get(key);
    if (c === list.older) return c;
    if (c) {
      unlink(c);
    } else {
      // Not a key calls wait on (a pause, a pace probe, the shared store's read): they
      // use it, though they touch nothing, and forgetting it sent them all at once into
      // the server that asked for quiet (the pause read for a forgotten key was dropped).
      // The registry outgrows maxKeys only by keys with waiters (reads: at most
      // STORE_CALLS), and sheds that excess at the next new key once they are gone (one
      // eviction a key kept it).
      for (let oldest = list.newer; circuits.size >= maxKeys && oldest !== list; oldest = oldest.newer)
        if (!oldest.waiters?.size && (!oldest.reading || oldest.lateSince)) forget(oldest);
      c = newCircuit(key, list);
      circuits.set(key, c);
    }
    c.older = list.older;
    c.newer = list;
    list.older.newer = c;
    list.older = c;
    return c;
  }

  /**
   * Drops a key; calls waiting on it look again, and find it fresh. Calls still in
   * flight on it were sent before it was forgotten: their outcomes count for nothing
   * and report nothing (no `breaker` or `paced` event for a circuit nobody uses any
   * more, while the key's new circuit is closed and unpaused). NaN is an epoch no call
   * holds, so `succeed()` and `fail()` drop them; `pace()` checks the registry.
   */
  function forget(c: Circuit): void {
    unlink(c);
    circuits.delete(c.key);
    c.epoch = Number.NaN;
    wakeWaiters(c);
  }

  // -- the sliding window ---------------------------------------------------------

  /** Drops the buckets that have slid out of the window by time `t`. */
  function advance(c: Circuit, t: number): void {
    const index = Math.floor(t / bucketMs);
    const head = c.head;
    // The same bucket, or a clock that stepped back a little: keep the newest.
    if (index <= head && head - index < WINDOW_BUCKETS) return;
    if (Math.abs(index - head) >= WINDOW_BUCKETS || !c.total) {
      // Everything slid out (or there was nothing): an empty window needs no ring. Or
      // the clock stepped back by a whole window or more (NTP correcting a clock that
      // ran fast, a VM resumed): the counts are from what is now the future, and would
      // stay in the window until the clock caught up with them. Start the window over.
      clearWindow(c);
    } else {
      let ring = c.ring;
      if (!ring) {
        // Until now every count was in the newest bucket.
        ring = c.ring = new Array<number>(2 * WINDOW_BUCKETS).fill(0);
        ring[slotOf(head)] = c.failed;
        ring[slotOf(head) + 1] = c.total;
      }
      // Counted down from the gap, not up through the indexes: past 2^53 (buckets of a
      // nanosecond or less on an epoch clock with fractions) `i + 1` rounds back to `i`,
      // and a loop up to `index` never ended. The gap is 1 to 9 here.
      for (let n = index - head; n > 0; n--) {
        const slot = slotOf(head + n);
        c.failed -= ring[slot] as number;
        c.total -= ring[slot + 1] as number;
        ring[slot] = ring[slot + 1] = 0;
      }
    }
    c.head = index;
  }

  /** Counts one call in the window; `failed` is 1 for a failure, else 0. */
  function record(c: Circuit, failed: 0 | 1): void {
    advance(c, now());
    c.total++;
    c.failed += failed;
    const ring = c.ring;
    if (ring) {
      const slot = slotOf(c.head);
      (ring[slot] as number) += failed;
      (ring[slot + 1] as number)++;
    }
  }

  // -- outcomes -------------------------------------------------------------------

  /**
   * What is left of the server's requested delay, counted from when the answer's headers
   * arrived, as retry() counts it (a captureStatus() or a throwOnStatus() below may have
   * read the body's start since): read from a response's headers, or the one an
   * `HttpStatusError` carries. An error built by hand may carry anything: NaN or a negative
   * wait names none (NaN made the open time NaN: open, yet letting every call through).
   * Infinity is kept: every use caps it at `maxRetryAfterMs`.
   */
  function delayOf(answer: Answer): number | undefined {
    return waitLeft(answer, now());
  }

  /**
   * Reads the clock, and returns it. A clock that stepped back (NTP correcting a clock
   * that ran fast, a VM resumed) must not stretch an open time, a probe's lease or a
   * pause by the step: what is left of each is never more than its length.
   */
  function rebase(c: Circuit): number {
    const t = now();
    if (c.retryAtMs - t > c.retryInMs) c.retryAtMs = t + c.retryInMs;
    if (c.pausedUntilMs - t > c.pausedForMs) c.pausedUntilMs = t + c.pausedForMs;
    if (c.paceProbeUntilMs - t > PROBE_LEASE_MS) c.paceProbeUntilMs = t + PROBE_LEASE_MS;
    return t;
  }

  /** Tells `onEvent` that the key is paused (`start`), or that a call waits the pause out (`wait`). */
  function paced(c: Circuit, call: Call, phase: PacedEvent['phase'], delayMs: number): void {
    call.emit({
      type: 'paced',
      key: call.key,
      until: new Date(c.pausedUntilMs),
      phase,
      delayMs,
      reason: c.pauseReason,
    });
  }

  /** Moves the circuit to `state`, and tells `onEvent` why. */
  function become(c: Circuit, call: Call, state: BreakerState, reason: string, retryAt?: Date): void {
    c.state = state;
    call.emit({ type: 'breaker', key: call.key, state, reason, ...(retryAt && { retryAt }) });
  }
  // Only outcomes of calls sent in the circuit's current epoch change its state: a call
  // sent before the circuit opened and ending after must not open it again (50 of them
  // would otherwise push the open time 50 steps up), nor open it once a probe has
  // closed it. While open or half-open every call sent is a probe: the current probe's
  // failure opens the circuit again, and any probe's success closes it (one whose lease
  // ran out may still answer: a slow server that is up).

  function succeed(c: Circuit, call: Call, epoch: number): void {
    if (epoch !== c.epoch) return;
    c.streak = 0;
    if (c.state === 'closed') {
      record(c, 0);
    } else {
      // A probe succeeded: close, and start every count and the schedule over.
      c.epoch++;
      clearWindow(c);
      c.opens = 0;
      c.lastOpenMs = c.probe = c.cause = undefined;
      become(c, call, 'closed', 'probe succeeded');
    }
  }

  function fail(
    c: Circuit,
    call: Call,
    epoch: number,
    failure: Failure,
    serverDelayMs?: number,
    told?: boolean,
  ): void {
    // Sent before the circuit last opened or closed: says nothing about it now.
    if (epoch !== c.epoch) return;
    let reason = '';
    if (c.state === 'closed') {
      // A shed (503, 529 with a delay) of a call sent before the key's latest pause began:
      // the storm that pause acts on, told again, counts once. 32 calls on the wire when a
      // server starts shedding made 32 failures in a row (and 32 of 32 in the window), and
      // opened the circuit: the calls that would have waited the pause out failed fast.
      if (told) return;
      record(c, 1);
      if (++c.streak >= threshold) reason = `${c.streak} consecutive failures`;
      else if (c.total >= minimumThroughput && c.failed / c.total >= failureRatio)
        reason = `${c.failed} of the last ${c.total} calls failed`;
    } else if (c.probe === call) {
      c.streak++;
      reason = 'a failed probe';
    }
    if (!reason) return;
    // Open, for the next step of the schedule.
    c.lastOpenMs = schedule(++c.opens, c.lastOpenMs);
    // The server's delay may lengthen the open time, never shorten it, and only up to the cap.
    openFor(
      c,
      call,
      Math.max(c.lastOpenMs, Math.min(serverDelayMs ?? 0, maxRetryAfterMs)),
      `${reason} (last: ${failureLabel(call, failure)})`,
      causeOf(call, failure, serverDelayMs),
    );
    // The fleet sharing the store fails fast too, until the same end (see adopt()).
    c.sharedMs = c.retryAtMs;
    if (store) publish(store, c, c.retryAtMs, false, c.openReason);
  }

  /** Opens the circuit for `ms`: calls fail fast until then, and one probe goes after. */
  function openFor(c: Circuit, call: Call, ms: number, reason: string, cause: unknown): void {
    c.epoch++;
    c.retryInMs = ms;
    c.retryAtMs = new Date(now() + ms).getTime();
    c.probe = undefined;
    // A pace probe out now was sent before the circuit opened: past the open time it must
    // not hold the key (a hung one held every call up to maxRetryAfterMs), the half-open
    // probe is the key's next probe, and of the pause too.
    c.paceProbe = undefined;
    c.openReason = reason;
    c.cause = cause;
    // When the next probe may go: a pause that ends later holds it (as fastFail() says).
    become(c, call, 'open', reason, new Date(Math.max(c.retryAtMs, c.pausedUntilMs)));
    // Calls waiting on the key (a pause, a pace probe) fail fast now, as every caller of
    // an open circuit does.
    wakeWaiters(c);
  }

  /**
   * Pauses the key. A server's delay is applied up to the cap; a longer one still
   * pauses for the cap, but calls fail fast meanwhile instead of waiting. A pause only
   * ever grows: a shorter delay from a concurrent response never ends it early.
   * `quota` is set when the pause is the server's quota until its reset: the calls
   * that may still go before it (0: the quota is used up). `t`: when the pause starts,
   * epoch ms (now unless given).
   */
  function pace(
    c: Circuit,
    call: Call,
    answer: Answer,
    askedMs: number,
    fromServer: boolean,
    quota?: number,
    t?: number,
  ): void {
    // Whatever the pause, the server just said stop: an allowance left from a quota pause
    // (its takers failed fast on an open circuit) ends, even when this pause is the shorter.
    c.allowance = quota ?? 0;
    const until = hold(
      c,
      call,
      fromServer ? Math.min(askedMs, maxRetryAfterMs) : askedMs,
      askedMs <= maxRetryAfterMs,
      quota === undefined,
      t,
    );
    if (!until) return;
    const asked =
      quota === undefined ? `asked to ${fromServer ? 'wait' : 'slow down'}` : 'said its quota is used up';
    // A success that used up the quota failed nothing: there is no error to show as the cause.
    held(
      c,
      call,
      `paced: the server ${asked} (${failureLabel(call, answer)})${c.waitable ? '' : `: ${askedMs} ms is longer than the ${maxRetryAfterMs} ms allowed`}`,
      answer.status < 400 ? undefined : causeOf(call, answer, fromServer ? askedMs : undefined),
    );
    c.sharedMs = until;
    if (store) publish(store, c, until, c.waitable);
  }

  /**
   * Sets the key's pause to end `delayMs` from now, unless it already ends as late (see
   * {@link pace}). `refused`: the server refused a call of this breaker's (a 429, 503 or
   * 529), which says how many calls at once it has room for. `t`: now, epoch ms (read
   * here unless given). Returns the pause's end, epoch ms, or 0 when it set nothing.
   */
  function hold(
    c: Circuit,
    call: Call,
    delayMs: number,
    waitable: boolean,
    refused?: boolean,
    t = rebase(c),
  ): number {
    // A forgotten key's answers pause nothing (see forget()).
    if (circuits.get(c.key) !== c) return 0;
    const until = t + delayMs;
    // The pace probe's answer sets the pause whatever the old one's end: that pause is
    // over (the probe went after it), though a clock stepped back puts it ahead again,
    // where a shorter new one paused nothing and the probe's 429 released every waiter.
    if (!(delayMs > 0) || (until <= c.pausedUntilMs && c.paceProbe !== call)) return 0;
    // Still held (not released since the last pause): the waiters have waited that one out too.
    c.heldForMs = c.pausedUntilMs ? Math.max(c.heldForMs, delayMs) : delayMs;
    c.pausedUntilMs = until;
    c.pausedForMs = delayMs;
    c.pauses++;
    // A slow start that overshot while doubling: the next one doubles only up to half of
    // what was out. One that had grown past its ceiling 1 call at a time found the
    // server's limit: the next one doubles up to 1 call short of it (the pause the server
    // asked for already took every call out; halving too held a server with room for 8
    // at 4 between probes). Only for a refusal: a quota used up (a 200 saying so) or
    // another client's pause says nothing about calls at once, and halving at each
    // quota's end held the calls out at half for ten pauses after its reset.
    if (c.flying && refused) c.ceiling = c.flying > c.ceiling ? c.flying - 1 : c.flying >> 1 || 1;
    c.flying = 0;
    // A new pause supersedes the pace probe in flight (the pause's end gets its own),
    // and the calls waiting for that probe look again: wait this pause out, or fail fast.
    c.paceProbe = undefined;
    c.waitable = waitable;
    return until;
  }

  /**
   * Tells of the pause {@link hold} just set, and why: calls that may not wait it out fail
   * fast now; of the others, as many as may go, and one to wait out its end and be its
   * probe. The rest wait on, for that probe.
   */
  function held(c: Circuit, call: Call, reason: string, cause: unknown): void {
    c.pauseReason = reason;
    c.pauseCause = cause;
    paced(c, call, 'start', c.pausedForMs);
    wakeWaiters(c, c.waitable ? c.allowance + 1 : Infinity, c.pausedUntilMs);
  }

  // -- a pause shared through a store (see CircuitBreakerOptions.store) ---------------

  /**
   * Writes the key's pause (its end, epoch ms, and whether calls may wait it out) to the
   * store until it ends, unless a pause that ends as late is there already. A
   * compare-and-set, so that a shorter pause never overwrites a longer one another
   * client wrote meanwhile. Nothing waits for it, and a store that fails loses nothing
   * here: this breaker's own pause stands.
   */
  function publish(store: Store, c: Circuit, untilMs: number, waitable: boolean, opened?: string): void {
    const id = SHARED_PAUSE + c.key;
    const entry: JsonValue = opened === undefined ? { untilMs, waitable } : { untilMs, waitable, opened };
    (async () => {
      for (let n = 0; n < PUBLISH_TRIES; n++) {
        const old = await ask(() => store.get(id));
        // A key reset (or forgotten) meanwhile: its pause is gone, and reset() deleted the
        // entry; writing it now put the pause back for the whole fleet.
        if (sharedEnd(old) >= untilMs || circuits.get(c.key) !== c) return;
        // The TTL is at least 1 ms (a store refuses 0), and past the pause's end.
        if (await ask(() => store.compareAndSet(id, old, entry, Math.ceil(untilMs - now()) || 1))) return;
      }
    })().catch(() => {});
  }

  /** Store calls made and not yet answered (see {@link STORE_CALLS}). */
  let asking = 0;

  /**
   * Calls the store (`op`), counted until it settles: rejects at once when
   * {@link STORE_CALLS} are unanswered, and when `op` throws or its answer does.
   */
  function ask<T>(op: () => T | PromiseLike<T>): Promise<T> {
    if (asking >= STORE_CALLS) return Promise.reject();
    asking++;
    return new Promise<T>((read) => read(op())).finally(() => asking--);
  }

  /**
   * Reads the key's entry in the store, for the calls that arrive until it is answered:
   * a pause another client of the store was asked for becomes this key's too. The call
   * goes on when the read is answered, after {@link STORE_WAIT_MS}, or at once when its
   * signal aborts (rejecting with its reason, as any wait here does); a store that fails
   * is passed over. `call` is told of a pause found there, as the call that met it.
   */
  function look(store: Store, c: Circuit, call: Call): Promise<void> {
    if (c.lateSince) {
      // A clock stepped back reads again at once: the 10 s are not counted from the future.
      const sinceMs = now() - c.lateSince;
      if (!(sinceMs >= 0 && sinceMs < STORE_RETRY_MS)) c.reading = undefined;
    }
    c.reading ??= new Promise<void>((resolve) => {
      c.lateSince = 0;
      const timer = setTimeout(() => {
        c.lateSince = now();
        resolve();
      }, STORE_WAIT_MS);
      ask(() => store.get(SHARED_PAUSE + c.key))
        // Read in here: a value whose fields throw (a getter, a proxy) is passed over too.
        .then((value) => {
          const { waitable, opened } = (value ?? {}) as { waitable?: unknown; opened?: unknown };
          adopt(c, call, sharedEnd(value), waitable !== false, opened);
        })
        .catch(() => {})
        .then(() => {
          clearTimeout(timer);
          // Unless a newer read took its place, or this one was given up on: answered late,
          // it is the key's read until STORE_RETRY_MS have passed (a store answering every read
          // in 1.05 s held a call for 1 s after each late answer).
          if (c.reading === reading && !c.lateSince) c.reading = undefined;
          resolve();
        });
    });
    const reading = c.reading;
    const signal = call.signal;
    return new Promise<void>((resolve, reject) => {
      const aborted = (): void => reject(abortReason(signal));
      const off = onAbort(signal, aborted);
      if (signal?.aborted) aborted();
      reading.then(() => {
        off();
        resolve();
      });
    });
  }

  /**
   * Takes a pause another client of the store wrote (its end, epoch ms) as this key's
   * own: up to `maxRetryAfterMs` from now, and waited out only when that covers it, as a
   * server's own delay is. The end this key offered or took last is passed over: reading
   * one's own pause back stretched it by a clock tick between two reads (a new pause:
   * the pace probe out superseded, every answer in flight judged late), and a pause
   * longer than allowed, read again, was stretched by each read.
   */
  function adopt(c: Circuit, call: Call, endMs: number, waitable: boolean, opened: unknown): void {
    if (endMs === c.sharedMs) return;
    const t = rebase(c);
    const untilMs = Math.min(endMs, t + maxRetryAfterMs);
    if (typeof opened === 'string') {
      // Another client's circuit opened: this one opens until the same end (a closed one,
      // not forgotten meanwhile), so the fleet stops sending to a server that is down
      // after one client's failures, not after each client's. Its own probe goes then.
      if (c.state !== 'closed' || untilMs <= t || circuits.get(c.key) !== c) return;
      c.sharedMs = endMs;
      c.opens++;
      c.lastOpenMs = untilMs - t;
      openFor(
        c,
        call,
        untilMs - t,
        `a client sharing its store opened its circuit: ${opened.slice(0, SHARED_REASON_CHARS)}`,
        undefined,
      );
    } else if (hold(c, call, untilMs - t, waitable && endMs - t <= maxRetryAfterMs, false, t)) {
      c.sharedMs = endMs;
      // The server said stop, if to another client: a quota's allowance ends too.
      c.allowance = 0;
      held(
        c,
        call,
        `paced: a client sharing its store was asked to wait (until ${new Date(untilMs).toISOString()})`,
        undefined,
      );
    }
  }

  /**
   * Judges what the server answered. A 429 paces the key and counts as a success (the
   * server is up); 408 and 5xx count as failures, and a 503 or 529 naming a delay also paces.
   * Any other answer that is not a failure and says a quota is used up (a 200 with
   * `remaining: 0` and a reset within `maxRetryAfterMs`) paces the key until the reset:
   * the next call would only earn a 429. Then, if this call was the pace probe, its
   * answer releases the key.
   */
  function settle(c: Circuit, call: Call, epoch: number, sent: number, answer: Answer): void {
    const status = answer.status;
    // A pause began after this call was sent (`sent`: the count of pauses then).
    const late = sent !== c.pauses;
    // ... and is over, released by its pace probe's answer: newer news than this answer,
    // which pauses nothing (a 429 of a call sent before that pause, read after the probe's
    // 200, paused every caller again).
    const paces = !late || !!c.pausedUntilMs;
    if (status === 429) {
      let askedMs = delayOf(answer);
      const fromServer = askedMs !== undefined;
      // No delay named: the next step of the open schedule, growing over a run of 429s.
      // Not for a 429 meeting a key still paused: that call went before the pause began
      // (the calls it holds are not sent), so it is the same refusal told again, as 20
      // calls in flight together are told 20 times; 20 steps up was a 32 s pause for
      // a server that asked for none. As with failures of calls sent before a circuit
      // opened, it moves nothing: 0, and the pause stands as it is. Nor once that pause
      // has ended: until the pace probe is answered (pausedUntilMs stays set), only the
      // probe (and a quota's allowance) went after it, so a slow server's 429s to a burst,
      // arriving over more than a step, stepped up again each time a step had passed. Nor
      // once the pace probe's answer has released the key (`late`, not paused): see `paces`.
      if (askedMs === undefined) {
        askedMs = 0;
        if (!late && (!c.pausedUntilMs || c.paceProbe === call)) {
          askedMs = c.lastPauseMs = schedule(++c.pauseSteps, c.lastPauseMs);
        }
      }
      if (paces) pace(c, call, answer, askedMs, fromServer);
      succeed(c, call, epoch);
    } else if (
      ((status === 408 || status >= 500) && replayed(answer)) ||
      (status > 300 && status < 309 && status !== 304 && call.bag.has(FOLLOWS))
    ) {
      // A stored failure replayed to a repeat of a keyed request (`Idempotent-Replayed:
      // true`: Stripe, breakwater/hono's idempotency()) says nothing about the server's
      // health now: no failure (retry's resend of a POST answered 500 got that 500 again,
      // so each failing call counted twice and the circuit opened after 3 calls, not 5), no
      // pause. It is judged as an error that says nothing (a user abort) is. Only failures
      // are looked at: the header read stays off the path of answers that succeed. So is
      // a redirect auth() follows (see FOLLOWS): a probe's frees the slot for its hop. For
      // pacing it is an answer, no 429: it releases the key for its hop, else each waiter
      // was sent alone in turn (the probe handed on), its hop queued behind the rest.
      settleError(c, call, epoch, sent, undefined, status < 400);
      return;
    } else {
      // Any answer but a 429 ends a run of 429s: the next one starts the pause schedule over.
      c.pauseSteps = 0;
      c.lastPauseMs = undefined;
      if (status === 408 || status >= 500) {
        const askedMs = delayOf(answer);
        // A 529 (Anthropic's "overloaded") with a delay asks for quiet as a 503 does.
        const shed = (status === 503 || status === 529) && askedMs !== undefined;
        const was = c.epoch;
        fail(c, call, epoch, answer, askedMs, shed && late);
        // A shed that opened the circuit pauses the key from the same instant (the open's
        // start), so the pause ends no later than the open time it stretched: a listener
        // that let the clock tick in between made the pause end a ms later, and its entry
        // replaced the open's in a shared store, where the fleet then waited instead of
        // failing fast, and sent its own 5 failures.
        if (shed && paces)
          pace(
            c,
            call,
            answer,
            askedMs,
            true,
            undefined,
            c.epoch === was ? undefined : c.retryAtMs - c.retryInMs,
          );
      } else {
        succeed(c, call, epoch);
        // A quota used up pauses the key until its reset. So does one with fewer requests
        // left than calls waiting for this pace probe: that many of them go (the
        // allowance), the rest wait for the reset instead of all going and most earning
        // a 429. Only a reset within maxRetryAfterMs: this answer is a forecast, not a
        // refusal, and a server that reports 0 yet keeps serving must not cost its
        // callers minutes of failing fast. A quota that resets later is passed over, so it
        // cannot hide one at 0 that resets in time. Only on answers that are not failures:
        // on a 408 or 5xx the server's delay is retryDelay()'s, as retry() reads it. Not
        // on a replay: its quota is the first answer's, perhaps a day old.
        const probe = c.paceProbe === call;
        const quota = quotaPacing && quotaLeft(answer.headers, now(), !probe, maxRetryAfterMs);
        if (
          paces &&
          quota &&
          (!quota.remaining || (probe && quota.remaining < (c.waiters?.size ?? 0))) &&
          !replayed(answer)
        ) {
          pace(c, call, answer, quota.resetMs, true, quota.remaining);
        }
      }
    }
    // A failure (408, 5xx) is no green light: the server still struggles, so it hands
    // the probe on as an error does, rather than send every waiter into it at once.
    paceSettled(c, call, sent, !(status === 408 || status >= 500));
  }

  function settleError(
    c: Circuit,
    call: Call,
    epoch: number,
    sent: number,
    error: unknown,
    release = false,
  ): void {
    // `throwOnStatus()` inside the breaker: judge the status it carries (the server answered).
    if (error instanceof HttpStatusError) {
      settle(c, call, epoch, sent, error);
      return;
    }
    // Our own deadline firing means the server was slow, even when a timeout
    // middleware inside the breaker aborted the call's signal with it.
    if (error instanceof TimeoutError || (error instanceof NetworkError && !isAbort(error, call.signal))) {
      fail(c, call, epoch, error);
    } else if (c.probe === call) {
      // Says nothing about the server (a user abort, a CircuitOpenError from an inner
      // breaker, a bug in a middleware): the probe frees its slot, for the next call now.
      c.probe = undefined;
      c.retryAtMs = now();
    }
    // No answer: a pace probe hands its role on to the next waiter.
    paceSettled(c, call, sent, release);
  }

  /**
   * The pace probe's outcome, or another call's on a key it released while waiters
   * are still held (slow start). A response that is no failure and started no new pause
   * (a new one would have superseded the probe already) releases the key (`release`):
   * 2 waiters go, or every one (see below). A failure (408, 5xx, network, timeout) or an
   * abort does not: the first waiter looks again and becomes the next probe; the rest wait on.
   * `sent`: the key's count of pauses when the call was sent (see `settle()`).
   */
  function paceSettled(c: Circuit, call: Call, sent: number, release: boolean): void {
    if (c.paceProbe !== call) {
      // Slow start: the key is released, and calls its probe's answer did not let go are
      // still held. Each answer lets 2 more go (1 for an answer that is no green light, to
      // take the place of its call), so the calls in flight double every round trip, up
      // to the ceiling a slow start met a refusal at. Past it they stay, until the key has
      // gone GROW_AFTER_PAUSES times the longest pause its waiters were held for (heldForMs)
      // since its pace probe; then they grow by 1 a round trip (TCP's congestion
      // avoidance, RFC 5681 §3.1): each answer raises the ceiling by 1/flying. Never
      // growing, a ceiling set while the server had room for 2 held closed-loop callers
      // (their next calls queue behind the held ones) at 2 for good after it had room
      // for 16: 12.3 s for 960 calls where growing took 2.2 s. Growing at once, each
      // probe past a fixed limit cost a whole pause: with `Retry-After: 1` and 20 ms
      // answers, 18.8 s for 640 calls, not 5.0.
      // Only the answers of calls sent since the latest pause began: a call sent before it
      // is none the slow start let go (nor counted in `flying`). Ten such 429s, answered
      // after the probe's 200, let 20 held waiters go at once (25 in flight, not 2).
      if (!c.pausedUntilMs && c.waiters?.size && sent === c.pauses) {
        const grow = release && c.flying < c.ceiling;
        if (
          release &&
          !grow &&
          now() + PROBE_LEASE_MS - c.paceProbeUntilMs >= GROW_AFTER_PAUSES * c.heldForMs
        )
          c.ceiling += 1 / c.flying;
        const n = grow ? SLOW_START_WAKES : 1;
        c.flying += n - 1;
        wakeWaiters(c, n);
      }
      return;
    }
    c.paceProbe = undefined;
    if (release) c.pausedUntilMs = 0;
    // A probe answered faster than the pause lasted (the longest one since the key was last
    // released: see heldForMs) starts slow: the server may have room
    // for only a few (100 callers through retry() of one allowing 4 calls per 200 ms, all
    // at once: 265 429s, 84 callers ending on one; in doubling steps about 70 and 8). A
    // slower answer releases every waiter at once: a slow start would cost more round
    // trips than the pause did (1 s answers after a 200 ms pause: 2.4 s for 100 calls at
    // once, 7.4 s in doubling steps).
    const slow = now() + PROBE_LEASE_MS - c.paceProbeUntilMs < c.heldForMs;
    if (release) c.flying = slow ? SLOW_START_WAKES : 0;
    wakeWaiters(c, release ? (slow ? SLOW_START_WAKES : Infinity) : 1);
  }

  // -- admission ------------------------------------------------------------------

  /**
   * The error for a call that fails fast, to come back at `retryAtMs`. Never before the
   * key's pause ends: until then nothing goes, so an open time that ends sooner (500s to calls in flight beside a 429's long wait) is not
   * when to come back.
   */
  function fastFail(
    c: Circuit,
    call: Call,
    reason: string,
    cause: unknown,
    retryAtMs: number,
  ): CircuitOpenError {
    const t = now();
    return new CircuitOpenError({
      key: call.key,
      retryAt: new Date(Math.max(retryAtMs, c.pausedUntilMs)),
      reason,
      cause,
      now: t,
      request: requestSummary(call.key, call.method, call.href),
    });
  }

  /**
   * The slow path, for a key that is open, half-open or paced: fails fast, waits out
   * a pause or a pace probe, or lets the call through (as the probe, when half-open or
   * when a pause just ended). Returns the circuit to report to (the key's state may
   * have been reset during a wait).
   */
  async function admit(first: Circuit, call: Call): Promise<Circuit> {
    // The signal of the pass this call runs in, read once (admission starts on entry).
    // A call that is over takes no probe slot, reports no wait and no state change: the
    // end of the chain would refuse to send it anyway, and a `half-open` event or state
    // for a probe that never goes out misleads whoever watches. Over: the caller aborted
    // (before or during a wait), or a timeout above ended the pass it was last here in.
    const signal = call.signal;
    const mark = (call as MarkedCall)[ENDED];
    if (mark && left.has(mark)) throw mark.error;
    /** The end of the pause the last wait ran to: a timer's end ends that pause, on a clock that did not move (a test's) too. */
    let sleptUntil: number | undefined;
    /** The end of the pause this call last reported a wait for. */
    let told: number | undefined;
    /** When this call stops waiting for pace probes, by the breaker's clock; set by its first such wait. */
    let probeWaitEndsAt: number | undefined;
    /**
     * Whether this call has a part others wait for, to hand on if it is refused: it waits a
     * pause out (one of those waiting is to probe it), or was woken (to go, or to probe). Not
     * a call held for a probe's outcome: its abort or deadline let a held waiter go, and a
     * slow start's aborted waiters sent the rest at once.
     */
    let waited = false;
    /** This call's place on waiting lists (see {@link waitOn}); `front`: it came here in an earlier pass (a resend). */
    const front = places.has(call);
    /** A new call, on its first look at the key: not here before (a resend), nor a redirect's hop. */
    let fresh = !front && call.bag.get(FOLLOWS) !== 2;
    const place = places.get(call) ?? ++arrivals;
    places.set(call, place);
    let c = first;
    try {
      // After every wait, look the key up again: a key reset (or forgotten) meanwhile comes
      // back closed and unpaused, and goes.
      for (; ; c = lookup(call.key), fresh = false) {
        if (signal?.aborted) throw abortReason(signal);
        const t = rebase(c);
        if (c.state === 'open' && t < c.retryAtMs) {
          throw fastFail(c, call, `circuit open after ${c.openReason}`, c.cause, c.retryAtMs);
        }
        // Half-open, a probe holds the slot until it settles or its lease ends (retryAtMs).
        if (c.state === 'half-open' && c.probe && t < c.retryAtMs) {
          throw fastFail(
            c,
            call,
            `circuit half-open while its probe is in flight, after ${c.openReason}`,
            c.cause,
            comeBack(t, c.retryAtMs, c.lastOpenMs as number),
          );
        }
        const pausedUntilMs = c.pausedUntilMs;
        // A slow start holds the calls waiting for answers to let them go (see paceSettled):
        // a new call takes its place behind them, and so does a pause's waiter whose timer
        // fired after the pace probe's answer released the key, at its own place, as a call
        // held for the probe's outcome waits. Timers of one pause fire some ms apart on a
        // busy machine (each counts from the loop's clock when set), and the first one's
        // probe came back first: 9 of 15 waiters went at once where the slow start let 2
        // go. New calls that went at once overtook the held ones and used the room up. A
        // call here before (a resend, a redirect's hop) is not new: it goes.
        const held =
          !pausedUntilMs && (fresh || sleptUntil) && c.flying && c.waiters?.size && c.state === 'closed';
        if (pausedUntilMs && pausedUntilMs > t && c.allowance > 0) {
          // The pace probe's answer said this many more may go before the quota resets.
          c.allowance--;
        } else if (pausedUntilMs || held) {
          const leftMs = pausedUntilMs - t;
          const remainingMs = call.remainingMs();
          if (leftMs > 0 && pausedUntilMs !== sleptUntil) {
            if (!c.waitable || leftMs >= remainingMs) {
              const reason = c.waitable ? `${c.pauseReason}, past this call's deadline` : c.pauseReason;
              throw fastFail(c, call, reason, c.pauseCause, pausedUntilMs);
            }
            // The wait is on the key's list before anyone hears of it: a listener that resets
            // the key from the event wakes it (it waited out a pause that was gone).
            const woken = waitOn(c, leftMs, t + remainingMs, signal, place, front);
            waited = true;
            // Once a pause: woken for nothing (another waiter of it refused), it waits on.
            if (told !== pausedUntilMs) paced(c, call, 'wait', leftMs);
            told = pausedUntilMs;
            probeWaitEndsAt = undefined;
            // Woken before the pause's end, not by a timer: the key was reset, the circuit
            // opened, or a response stretched the pause, perhaps past what this call may
            // wait. Look again at once, not at the end of a pause that may be gone.
            // Timers may fire a little early against the wall clock: the pause is over then
            // too, unless a response stretched it meanwhile (waiters are not all woken for that).
            sleptUntil = (await woken) ? undefined : pausedUntilMs;
            // Another client of the store may have been told to wait longer meanwhile (its
            // 429 came later): read the key's entry again as the pause ends, before a probe
            // goes. One read per pause end, shared by its waiters; a new call reads anyway.
            if (store && sleptUntil) await look(store, c, call);
            continue;
          }
          // The pause is over, but the server may still be overloaded: releasing every
          // waiting caller at once would be a thundering herd. As half-open does, the
          // first call through is the probe; unlike half-open, the others wait for its
          // outcome (abortably, while their deadline and maxRetryAfterMs allow).
          // A pace probe that has not settled within its lease gives way to this call.
          if (!held && (c.paceProbe === undefined || t >= c.paceProbeUntilMs)) {
            c.paceProbe = call;
            c.paceProbeUntilMs = t + PROBE_LEASE_MS;
          }
          if (c.paceProbe !== call) {
            probeWaitEndsAt ??= t + maxRetryAfterMs;
            const capMs = probeWaitEndsAt - t;
            const byDeadline = remainingMs <= capMs;
            const waitMs = byDeadline ? remainingMs : capMs;
            // None when a slow start holds the call.
            const probe = c.paceProbe;
            sleptUntil = undefined;
            // The wait ends with the probe's lease too, if that comes first.
            const leaseMs = probe ? c.paceProbeUntilMs - t : waitMs;
            const byLease = leaseMs < waitMs;
            // Woken: released (the key goes), a new pause (wait it out), or the probe failed (be the next).
            waited = false;
            waited =
              waitMs > 0 &&
              // A call held as its pause's timer fired keeps the place it waited at.
              (await waitOn(c, byLease ? leaseMs : waitMs, t + remainingMs, signal, place, front || !probe));
            if (waited) continue;
            // The probe's lease ran out: this call may be the next probe. A timer may fire a
            // little early against the wall clock: after a wait until the lease's end, look
            // again unless the clock did not move at all (a test's). So when that probe is
            // gone: a new pause does not wake every waiter.
            const later = now();
            const gone = !probe || c.paceProbe !== probe;
            // Answered in time: the limit on a wait for a probe starts over, as after a pause.
            // Unless this call's own deadline ended the wait (a slow start held it): it
            // would go with no time left (Bun's reached the server), for a caller who gets a
            // TimeoutError, or, with no timer at the deadline, an answer past it.
            if (gone && !(byDeadline && !byLease)) {
              probeWaitEndsAt = undefined;
              continue;
            }
            if (!gone && (later >= c.paceProbeUntilMs || (byLease && later !== t))) continue;
            const limit = byDeadline ? "at this call's deadline" : `after the ${maxRetryAfterMs} ms allowed`;
            throw fastFail(
              c,
              call,
              gone
                ? `${c.pauseReason}, past this call's deadline`
                : `${c.pauseReason}; its pace probe is still in flight ${limit}`,
              c.pauseCause,
              gone ? later : comeBack(later, c.paceProbeUntilMs, c.pausedForMs),
            );
          }
        }
        if (c.state !== 'closed') {
          // From open (no probe), or from half-open with a probe whose lease ran out.
          const why = c.probe
            ? `the probe did not settle within ${PROBE_LEASE_MS} ms`
            : c.state === 'open' && 'open time passed';
          // The slot is the probe's before anyone hears of it: a listener that sends a call
          // to this key from the event (a health check) ran inside this admission and was
          // let through as a second probe.
          c.probe = call;
          c.retryInMs = PROBE_LEASE_MS;
          c.retryAtMs = t + PROBE_LEASE_MS;
          if (why) become(c, call, 'half-open', `${why}; letting one probe through`);
        }
        return c;
      }
    } catch (error) {
      // A waiter refused (an abort, a deadline) may be the one woken to wait out a new pause
      // and probe it, while the others wait for that probe: the next takes its place.
      if (waited) wakeWaiters(c, 1);
      throw error;
    }
  }

  /**
   * The marks (`ENDED`) of timeouts above the breaker that ended a call's pass while the
   * call was in it: the mark was on the call, and the signal the call came in with had
   * aborted, when its outcome arrived (a fetch that ignores the signal). A hand-written
   * resender between that timeout and the breaker may bring the call back on the outer
   * signal the timeout put back; while the mark is on it (until a layer above starts a
   * new pass, which lifts it) the call is refused at once, as the end of the chain
   * refuses it: no wait of up to `maxRetryAfterMs` on a pause, no probe slot. A mark
   * alone does not tell: a timeout below the breaker marks the call too, and a retry
   * above sends it through here again before that timeout lifts its mark.
   */
  const left = new WeakSet<Ended>();

  /** Each call's place on waiting lists: the count of calls that came to admission before it, and it. */
  const places = new WeakMap<Call, number>();
  let arrivals = 0;

  /** Notes the mark of a pass that ended above the breaker while the call was here (see {@link left}). */
  function ended(call: Call, signal: AbortSignal | undefined): void {
    // The mark first: `aborted` on a fresh signal costs more, and is rarely needed.
    const mark = (call as MarkedCall)[ENDED];
    if (mark && signal?.aborted) left.add(mark);
  }

  /**
   * Sends the call on and judges the outcome against `epoch`, the circuit's epoch the
   * call goes out in; the response or error goes back unchanged.
   */
  function send(c: Circuit, call: Call, next: Next, epoch: number): Promise<Response> {
    // The signal of the pass this call runs in: sent on entry, or right after admission
    // (whose waits end with the pass). A timeout above that ends the pass puts its outer
    // signal back on the call before a late answer arrives.
    const signal = call.signal;
    // The key's pauses so far: an answer after another began is from before it.
    const sent = c.pauses;
    let pending: Promise<Response>;
    try {
      pending = next(call);
    } catch (error) {
      settleError(c, call, epoch, sent, error);
      return Promise.reject(error);
    }
    return pending.then(
      (response) => {
        // The happy path: a window bump and a field write or two.
        settle(c, call, epoch, sent, response);
        ended(call, signal);
        return response;
      },
      (error: unknown) => {
        settleError(c, call, epoch, sent, error);
        ended(call, signal);
        throw error;
      },
    );
  }

  // Not an `async` function: with `.then` the happy path makes one promise instead of
  // an async function's three (which matters most when async hooks are on, as under
  // APM agents and node:test, where each promise costs microseconds).
  const breaker = function circuitBreaker(call: Call, next: Next): Promise<Response> {
    try {
      // With a shared store, the key's entry there first (a pause another client was asked for).
      return store ? look(store, lookup(call.key), call).then(() => enter(call, next)) : enter(call, next);
    } catch (error) {
      return Promise.reject(error);
    }
  } as CircuitBreaker;

  /** Admits the call (at once, on the happy path) and sends it on. */
  function enter(call: Call, next: Next): Promise<Response> {
    const c = lookup(call.key);
    // Waiters on a closed, unpaused key: a slow start holds them (new calls queue behind).
    if (c.state === 'closed' && !c.pausedUntilMs && !c.waiters?.size) return send(c, call, next, c.epoch);
    // Sent a microtask after admission: if another call's failure opened the circuit
    // meanwhile, this one is no probe of that opening and counts for nothing (-1), as
    // a call sent just before it would.
    return admit(c, call).then((admitted) =>
      send(
        admitted,
        call,
        next,
        admitted.state === 'closed' || admitted.probe === call ? admitted.epoch : -1,
      ),
    );
  }

  breaker.stats = (key: string): BreakerStats | undefined => {
    const c = circuits.get(key);
    if (!c) return undefined;
    const t = rebase(c);
    advance(c, t);
    return {
      state: c.state,
      consecutiveFailures: c.streak,
      windowFailures: c.failed,
      windowTotal: c.total,
      opens: c.opens,
      ...(c.state !== 'closed' && { retryAt: new Date(c.retryAtMs) }),
      ...(c.pausedUntilMs > t && { pausedUntil: new Date(c.pausedUntilMs) }),
    };
  };
  breaker.reset = (key?: string): void => {
    // Calls waiting on the key (a pause, a pace probe) look again (once this returns),
    // and find it fresh.
    for (const k of key === undefined ? [...circuits.keys()] : [key]) {
      const c = circuits.get(k);
      if (c) forget(c);
      // The shared pause too, or the next call would find it there again. Nothing waits
      // for it; a store that fails keeps the entry until the pause's end.
      if (store) ask(() => store.delete(SHARED_PAUSE + k)).catch(() => {});
    }
  };
  breaker.size = (): number => circuits.size;
  return breaker;
}
