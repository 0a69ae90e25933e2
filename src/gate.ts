/**
 * @module
 * `createGate()`: a start gate for a connect/start operation (an MCP client's
 * `connect()`, say). After a retryable failure the gate arms for a backoff window, and
 * every `run()` in that window fails fast with `GateClosedError` without calling the
 * operation.
 *
 * Why: in production an agent re-ran a failing connect on every turn; each turn met a
 * 429, so the retries became a storm against a server that had asked for quiet. The
 * fix was a gate that arms only on failures worth waiting out (never on auth or config
 * errors, which waiting cannot fix) and that honours the server's Retry-After.
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
import { comeBack, PROBE_LEASE_MS } from './breaker.ts';
import { notify } from './call.ts';
import {
  CircuitOpenError,
  GateClosedError,
  HttpStatusError,
  isAbort,
  NetworkError,
  RetryAfterTooLongError,
  TimeoutError,
} from './errors.ts';
import type { GateEvent } from './events.ts';
import { functionOption, validate } from './options.ts';
import { DEFAULT_MAX_RETRY_AFTER_MS } from './retry.ts';

/** The gate's name in errors and state, by default. */
export const DEFAULT_GATE_KEY = 'gate';
/**
 * The spread of the gate's windows by default. The rest of the schedule is backoff's
 * default (500 ms doubling to 32 s), as for the breaker's open time (DESIGN.md §6);
 * +30% spreads agents restarted together without ever shortening a window.
 */
export const DEFAULT_GATE_JITTER: Jitter = '+30%';
/** Options for {@link createGate}. */
export interface GateOptions {
  /** The gate's name, shown in `GateClosedError` messages. Default `'gate'`. */
  key?: string | undefined;
  /**
   * The window after the n-th consecutive failure is `backoff(schedule)(n)`.
   * Default `{ initialMs: 500, factor: 2, maxMs: 32_000, jitter: '+30%' }`; fields
   * given here replace those defaults one by one.
   */
  schedule?: BackoffOptions | undefined;
  /**
   * The longest window, in ms, a server's requested delay (`HttpStatusError.retryAfterMs`,
   * `RetryAfterTooLongError.retryAfterMs`, the `retryAt` of a `CircuitOpenError` or
   * `GateClosedError`) may stretch the gate to. Default 60,000: a server asking for an
   * hour should not silence a client for an hour on its word alone.
   */
  maxRetryAfterMs?: number | undefined;
  /**
   * Marks other errors as worth waiting out, such as a stdio server process that
   * exits at once. Asked only about errors the gate does not classify itself: not about
   * `HttpStatusError` (its `retryable` decides), and never about user aborts. If it
   * throws, the error is treated as not a crash loop and passes through unchanged.
   */
  isCrashLoop?: ((error: unknown) => boolean) | undefined;
  /** Receives `gate` events (`armed`, `cleared`, `refused`); a listener that throws is ignored. */
  onEvent?: ((event: GateEvent) => void) | undefined;
  /** The clock, epoch ms. Default `Date.now`; inject one in tests. */
  now?: (() => number) | undefined;
}

/** A snapshot of a gate, for logs and health checks. */
export interface GateState {
  /** Whether `run()` fails fast right now (inside the window, or while a probe runs). */
  readonly armed: boolean;
  /** Retryable failures that armed the gate since the last success or `reset()` (not those of runs already in flight when it armed). */
  readonly failures: number;
  /**
   * Whether the one attempt allowed after a window is in flight and holds the others
   * back: false once its 60 s lease has run out, even if it has not settled.
   */
  readonly probing: boolean;
  /** When the current (or last) window ends; undefined once cleared. */
  readonly retryAt?: Date;
  /** The failure that armed the gate last; undefined once cleared. */
  readonly cause?: unknown;
}

/** A start gate: see {@link createGate}. */
export interface Gate {
  /**
   * Runs `fn` unless the gate is armed, in which case it rejects with
   * `GateClosedError` at once and `fn` is not called. `fn`'s own result or error
   * comes back unchanged.
   */
  run<T>(fn: () => Promise<T>): Promise<T>;
  /** The gate's current state. */
  state(): GateState;
  /**
   * Clears the gate: no window, no failures. A run still in flight (a probe included)
   * may clear it again by succeeding, but its failure arms nothing: it started before
   * the reset.
   */
  reset(): void;
}

// Messages come from options.ts's formatter ("must be a function", "must be at least
// 0"), which names the value found as well. Every field is optional (`z.partial()`).
const optionsSchema = z.optional(
  z.partial(
    z.strictObject({
      key: z.string().check(z.minLength(1, 'must be a non-empty string')),
      schedule: backoffSchema,
      maxRetryAfterMs: delayMsSchema,
      isCrashLoop: functionOption<(error: unknown) => boolean>(),
      onEvent: functionOption<(event: GateEvent) => void>(),
      now: functionOption<() => number>(),
    }),
  ),
);

/**
 * Guards a start/connect operation with a backoff window that arms only on failures
 * that waiting can fix.
 *
 * - Arms on: an `HttpStatusError` with `retryable: true`, a `NetworkError`, a
 *   `TimeoutError`, a `RetryAfterTooLongError` (retry() would not sleep out the
 *   server's long Retry-After: the next start must not go before it either), a
 *   `CircuitOpenError` or `GateClosedError` (a breaker or inner gate knows the server is
 *   down until its `retryAt`: the window lasts at least until then; not this gate's own
 *   refusal, which a re-entrant run gets), the `TimeoutError`
 *   DOMException of an `AbortSignal.timeout()` (out of `fn` it is the operation's
 *   deadline: the server did not answer in time), or an error `isCrashLoop` accepts.
 *   Anything else (auth and other non-retryable statuses, `TypeError`s and config
 *   errors, user aborts: an `AbortError`) passes through unchanged and leaves the gate
 *   as it was.
 * - The n-th consecutive failure arms it for `schedule(n)` ms, stretched to the
 *   server's Retry-After (`retryAfterMs`) when that is longer, up to `maxRetryAfterMs`. A window only
 *   ever grows: a late failure from a concurrent call never shortens it.
 * - While armed, `run(fn)` rejects with `GateClosedError` (`key`, `retryAt`, `cause`)
 *   without calling `fn`.
 * - After the window, exactly one `run` goes through as a probe (like a breaker's
 *   half-open state); callers arriving while it is in flight fail fast with
 *   `GateClosedError`, with a `retryAt` one window step on (the schedule's step the gate
 *   just served), or as far on as the probe has been in flight if that is longer, and
 *   never past the end of the probe's lease, as the breaker's half-open refusals. The
 *   probe's success clears the gate, its retryable failure arms the next, longer window. A
 *   probe that has not settled after 60 s gives up its slot: the next `run` probes
 *   instead; the old one's success still clears the gate when it comes, its failure
 *   arms it only if nothing cleared or armed the gate since it started (below).
 * - Any success clears the gate (failures back to 0, a probe in flight no longer
 *   holds others back); so does `reset()`.
 * - A failure arms the gate only if its run started after the last success,
 *   `reset()` or arming, as a breaker counts an outcome only in the epoch it was sent
 *   in: a hung connect failing after a newer one succeeded is older news, and must not
 *   refuse the next connect for a whole window; 20 connects in flight when a server
 *   drops are one failure, not 20 steps up the schedule (32 s for a blip), though a
 *   delay one of them brings from the server (a 503's Retry-After) still lengthens the
 *   window as far as the server asked. A late success still clears the gate: it is news from its end (the server just answered),
 *   where a failure may be news from its start (a connect that hung, then timed out).
 *
 * @example
 * ```ts
 * import { createGate, GateClosedError } from 'breakwater';
 *
 * // `client`: your MCP SDK client; `transport`: its transport, built with
 * // `{ fetch }`, where `fetch = mcpFetch(policy)` (breakwater/mcp). The SDK throws its
 * // own errors, which arm nothing: for a 503 a `StreamableHTTPError`, which
 * // `fetch.toError()` turns into a retryable `HttpStatusError` with the server's
 * // Retry-After; for a refused connection a bare `TypeError`, which the policy's fetch
 * // turns into a `NetworkError`.
 * const gate = createGate({ key: 'mcp:github' });
 *
 * async function ensureConnected(): Promise<void> {
 *   try {
 *     await gate.run(() =>
 *       client.connect(transport).catch((error) => {
 *         throw fetch.toError(error);
 *       }),
 *     );
 *   } catch (error) {
 *     if (error instanceof GateClosedError) {
 *       // error.retryAt: when the next connect may go. This turn goes on without the
 *       // github tools; no request was sent.
 *       return;
 *     }
 *     throw error;
 *   }
 * }
 * ```
 */
export function createGate(options?: GateOptions): Gate {
  const valid = validate(optionsSchema, options, 'createGate()');
  const key = valid?.key ?? DEFAULT_GATE_KEY;
  const schedule = backoff(withDefaults(valid?.schedule, DEFAULT_GATE_JITTER));
  const maxRetryAfterMs = valid?.maxRetryAfterMs ?? DEFAULT_MAX_RETRY_AFTER_MS;
  const isCrashLoop = valid?.isCrashLoop;
  const now = valid?.now ?? Date.now;
  const listener = valid?.onEvent;

  function emit(state: GateEvent['state'], at?: number): void {
    if (!listener) return;
    const event: GateEvent = { type: 'gate', key, state };
    if (at !== undefined) event.retryAt = new Date(at);
    notify(listener, event);
  }

  let failures = 0;
  /**
   * Bumped by every success, `reset()` and arming. A run remembers the epoch it started
   * in: its failure arms the gate only in that epoch (see createGate's JSDoc).
   */
  let epoch = 0;
  /** The epoch the last success or `reset()` began: a run from before it arms nothing. */
  let cleared = 0;
  /** The last backoff step used, for decorrelated jitter. */
  let lastDelayMs: number | undefined;
  /**
   * Epoch ms when the window ends; 0 when cleared. Every failure that arms the gate
   * sets it, so `failures > 0` says whether there is a window at all.
   */
  let retryAtMs = 0;
  /** How long the window was set for: a clock that steps back never makes it longer. */
  let retryInMs = 0;
  let cause: unknown;
  /** The probe in flight, by identity, so a stale probe cannot end a newer one. */
  let probe: symbol | undefined;
  /** Epoch ms when the probe's lease ends: from then on it holds nobody back. */
  let probeUntilMs = 0;
  /**
   * This gate's own refusals: one out of `fn` (a re-entrant run, refused by the probe it
   * runs in) says nothing about the server, and must not arm the next, longer window.
   */
  const refusals = new WeakSet<object>();

  function arms(error: unknown): boolean {
    try {
      // A user's abort never arms (DESIGN §4). An AbortSignal.timeout() out of fn does: it
      // is the operation's deadline (the server did not answer in time), as a TimeoutError
      // of breakwater's is; a caller who stops for its own reasons aborts (AbortError).
      if (isAbort(error, undefined)) return (error as Error).name === 'TimeoutError';
      if (error instanceof HttpStatusError) return error.retryable;
      return (
        error instanceof NetworkError ||
        error instanceof TimeoutError ||
        error instanceof RetryAfterTooLongError ||
        error instanceof CircuitOpenError ||
        (error instanceof GateClosedError && !refusals.has(error)) ||
        isCrashLoop?.(error) === true
      );
    } catch {
      // A broken predicate, or a rejection that throws when read (a name getter, a
      // revoked Proxy), must not replace the caller's error with its own.
      return false;
    }
  }

  /**
   * Arms the gate for `error`: the next step of the schedule (`step`), or, for a run in
   * flight when it armed, only the server's delay, which may lengthen the window.
   */
  function arm(error: unknown, step: boolean): void {
    // The server's delay, as a number. One that is none (a NaN or text from a garbage
    // header, an object: HttpStatusError is public) counts as no delay: a NaN window
    // would compare false with every time, and the gate would refuse nothing. So does
    // one that throws when read (a getter, a BigInt): fn's own error must come back, as
    // in arms(), and no failure be counted without its window.
    // A breaker's CircuitOpenError (or an inner gate's GateClosedError) knows the server is
    // down or paced until its retryAt: the next start must not go before it either.
    const time = now();
    let serverMs = 0;
    try {
      if (error instanceof HttpStatusError || error instanceof RetryAfterTooLongError)
        serverMs = +(error.retryAfterMs as number) || 0;
      else if (error instanceof CircuitOpenError || error instanceof GateClosedError)
        serverMs = +error.retryAt - time || 0;
    } catch {}
    if (step) {
      lastDelayMs = schedule(++failures, lastDelayMs);
      // Runs in flight now fail for the same cause: their failures are this one told again.
      epoch++;
    }
    // The server's delay may lengthen the window, never shorten it, and only up to the
    // cap: a Retry-After of a day must not silence the client for a day.
    const windowMs = Math.max(step ? (lastDelayMs as number) : 0, Math.min(serverMs, maxRetryAfterMs));
    // After a step back the old window's end is that far ahead: cut it to its length
    // first, or it outlasts this window and its distance becomes the window's length.
    rebase(time);
    // A run in flight when it armed, whose server named no longer delay: nothing new.
    if (!step && time + windowMs <= Math.max(retryAtMs, time)) return;
    retryAtMs = Math.max(retryAtMs, time + windowMs);
    retryInMs = retryAtMs - time;
    cause = error;
    emit('armed', retryAtMs);
  }

  /**
   * A clock that stepped back (NTP correcting a clock that ran fast, a VM resumed) must
   * not stretch the window or the probe's lease by the step, as in the breaker: what is
   * left of each is never more than its length.
   */
  function rebase(time: number): void {
    if (retryAtMs - time > retryInMs) retryAtMs = time + retryInMs;
    if (probeUntilMs - time > PROBE_LEASE_MS) probeUntilMs = time + PROBE_LEASE_MS;
  }

  /**
   * Back to no window and no failures; a new epoch, so a run still in flight (a probe
   * included) holds nobody back any more and its failure arms nothing.
   */
  function clear(): void {
    const armed = failures > 0;
    failures = 0;
    cleared = ++epoch;
    lastDelayMs = undefined;
    retryAtMs = 0;
    cause = undefined;
    probe = undefined;
    // Last, as 'armed' is: a listener finds the gate cleared, and may run at once.
    if (armed) emit('cleared');
  }

  return {
    async run<T>(fn: () => Promise<T>): Promise<T> {
      // Before the gate is looked at: an armed gate refused it, a probe took the slot for it.
      validate(functionOption(), fn, 'gate.run(fn)');
      /** This run's probe token, when it is the one attempt allowed after a window. */
      let mine: symbol | undefined;
      if (failures > 0) {
        const time = now();
        rebase(time);
        // Inside the window, or after it while its probe runs within its lease: fail fast
        // without calling fn. Come back at the window's end, or from a probe in flight as
        // the breaker's half-open refusals do (comeBack()): one window step on (the quiet
        // the schedule just gave the server), later the longer the probe hangs, never past
        // its lease's end, when the next run probes.
        if (time < retryAtMs || (probe && time < probeUntilMs)) {
          const at = time < retryAtMs ? retryAtMs : comeBack(time, probeUntilMs, lastDelayMs as number);
          emit('refused', at);
          const refusal = new GateClosedError({ key, retryAt: new Date(at), cause, now: time });
          refusals.add(refusal);
          throw refusal;
        }
        probe = mine = Symbol();
        // The breaker's probe lease: a connect that never returns (no timeout inside `fn`)
        // must not refuse every later start until `reset()`.
        probeUntilMs = time + PROBE_LEASE_MS;
      }
      const started = epoch;
      try {
        const result = await fn();
        clear();
        return result;
      } catch (error) {
        // Done probing before 'armed' goes out, so a listener sees no probe in flight.
        // (A success needs no such step: clear() ends every probe.) A stale probe (after
        // reset() or past its lease) must not end a newer one.
        if (probe === mine) probe = undefined;
        // Stale (a success, reset() or arming came since it started): says nothing new,
        // but a server's delay after an arming is its word still (a 503's Retry-After).
        if (started >= cleared && arms(error)) arm(error, started === epoch);
        throw error;
      }
    },
    state(): GateState {
      const time = now();
      rebase(time);
      const probing = !!probe && time < probeUntilMs;
      const state: { -readonly [K in keyof GateState]: GateState[K] } = {
        armed: probing || (failures > 0 && time < retryAtMs),
        failures,
        probing,
      };
      if (failures > 0) {
        state.retryAt = new Date(retryAtMs);
        state.cause = cause;
      }
      return state;
    },
    reset: clear,
  };
}
