/**
 * @module
 * One function decides, for every outcome of a call, what it means: is it a failure,
 * may it be retried, and could sending it again run the operation twice?
 *
 * Resend safety is the rule that matters most for agents: a tool call that already
 * ran must not run again. A request is safe to resend when the server provably did
 * not execute it (never sent, or rejected up front: 401/403/407/408/429, or the server
 * says `x-should-retry: true`), or when repeating it is harmless (RFC 9110 §9.2.2
 * idempotent methods, an `Idempotency-Key`, or a caller's explicit mark).
 */

import type { Call } from './call.ts';
import {
  BreakwaterError,
  type CircuitOpenError,
  HttpStatusError,
  isAbort,
  NetworkError,
  type RetryAfterTooLongError,
  type TimeoutError,
} from './errors.ts';
import { describeValue } from './options.ts';
import { type HeadersLike, retryDelay, shouldRetryHeader } from './timing.ts';

/**
 * Statuses retried by default: request timeout, too many requests, and the 5xx that
 * mean "try again" (Anthropic's 529 overloaded included). Not 501 (never will
 * work), 505, or Cloudflare's 520-527 (origin problems a retry rarely fixes).
 */
export const DEFAULT_RETRYABLE_STATUSES: readonly number[] = [408, 429, 500, 502, 503, 504, 529];

/** Statuses the server sends before executing anything: resending cannot run it twice. */
const REJECTED_BEFORE_EXECUTION: ReadonlySet<number> = new Set([401, 403, 407, 408, 429]);

/** What an outcome means. */
export type OutcomeKind =
  | 'ok'
  | 'transient'
  | 'rate-limited'
  | 'auth-recoverable'
  | 'auth-user'
  | 'fatal'
  | 'cancelled';

/** The verdict on one outcome. */
export interface Classification {
  /**
   * What the outcome means, for logs, metrics and branching: `ok` (a status < 400),
   * `transient` (a retryable status, a network error, a timeout, an open circuit or a
   * closed gate), `rate-limited` (a 429, or a wait longer than allowed), `auth-recoverable`
   * (401 or 407: a token refresh may fix it), `auth-user` (403: the user must fix it),
   * `fatal` (any other failure status, or an error breakwater does not know) or
   * `cancelled` (the caller aborted). Whether to try again is `retryable` and `safeToResend`.
   */
  kind: OutcomeKind;
  /** Whether the policy would try again (given it is also safe to resend). */
  retryable: boolean;
  /**
   * Whether the server provably did not run it: never sent, rejected before
   * executing (401/403/407/408/429), or the server says `x-should-retry: true`.
   */
  notRun: boolean;
  /** Whether sending the same request again cannot run the operation twice: `notRun`, or the call is idempotent. */
  safeToResend: boolean;
  /** The server's requested wait, when it said one; for an open circuit or a closed gate, the time until its `retryAt`. */
  retryAfterMs?: number;
}

/** Options for {@link classify}. */
export interface ClassifyOptions {
  /** Statuses that count as retryable. Default {@link DEFAULT_RETRYABLE_STATUSES}. */
  statuses?: readonly number[] | undefined;
}

/** What a call ended with: a response, or what was thrown. */
export type Outcome = { response: Response } | { error: unknown };

/** Auth failures: never retried as such (see {@link isRetryableStatus}); `STATUS_KINDS` gives them `auth-*` kinds. */
const AUTH_STATUSES: readonly number[] = [401, 403, 407];

/**
 * Whether a status is retryable by the status rule, with `x-should-retry` overriding it
 * both ways, as {@link classify} judges it: 401, 403 and 407 never are (an auth failure
 * is the auth middleware's to resend once after a refresh, or the user's to fix).
 * `HttpStatusError.retryable` comes from here, and a start gate arms on it.
 */
export function isRetryableStatus(
  status: number,
  headers?: HeadersLike,
  statuses: readonly number[] = DEFAULT_RETRYABLE_STATUSES,
): boolean {
  return (
    !AUTH_STATUSES.includes(status) && ((headers && shouldRetryHeader(headers)) ?? statuses.includes(status))
  );
}

/** Kinds fixed by the status alone; any other failure status is `transient` or `fatal`. */
const STATUS_KINDS: Readonly<Record<number, OutcomeKind>> = {
  401: 'auth-recoverable',
  407: 'auth-recoverable',
  403: 'auth-user',
  429: 'rate-limited',
};

/** Builds a verdict: safe to resend when the server provably did not run it, or repeating is harmless. */
function verdict(
  kind: OutcomeKind,
  retryable: boolean,
  notRun: boolean,
  call: Call | undefined,
  retryAfterMs?: number,
): Classification {
  const result: Classification = {
    kind,
    retryable,
    notRun,
    safeToResend: notRun || (call?.isIdempotent ?? false),
  };
  if (retryAfterMs !== undefined) result.retryAfterMs = retryAfterMs;
  return result;
}

/** A verdict that is final whatever the call: success (safe to resend), a cancel or an unknown error (not). */
function settled(kind: OutcomeKind, safeToResend = false): Classification {
  return { kind, retryable: false, notRun: false, safeToResend };
}

/**
 * The verdict on a status. `error`: the HttpStatusError it came from, whose own
 * `retryAfterMs` is the server's wait; a response's is read from its headers.
 */
function fromStatus(
  status: number,
  headers: HeadersLike | undefined,
  call: Call | undefined,
  statuses: readonly number[],
  error?: HttpStatusError,
): Classification {
  // Success (most responses) pays for no header parsing, nor for a closure to defer it
  // (one per call cost about 50 ns and 56 B on Node 20, in a micro-benchmark).
  if (status < 400) return settled('ok', true);
  const override = headers && shouldRetryHeader(headers);
  // Auth failures are the auth middleware's to resend (401 after a refresh), or the user's.
  const retryable = isRetryableStatus(status, headers, statuses);
  // The server saying "retry" is the server saying it did not (or may again) execute it.
  const notRun = override === true || REJECTED_BEFORE_EXECUTION.has(status);
  const kind = STATUS_KINDS[status] ?? (retryable ? 'transient' : 'fatal');
  // A response always has its headers.
  return verdict(kind, retryable, notRun, call, error ? error.retryAfterMs : retryDelay(headers as Headers));
}

/**
 * Classifies a call's outcome: a `Response`, or an error thrown by the chain.
 *
 * @example
 * ```ts
 * const verdict = classify({ response }, call);
 * if (verdict.retryable && verdict.safeToResend) {
 *   // wait verdict.retryAfterMs (or a backoff step), then try again
 * }
 * ```
 */
export function classify(outcome: Outcome, call?: Call, options: ClassifyOptions = {}): Classification {
  // `in` on null or a string threw "Cannot use 'in' operator to search for 'response'".
  if (Object(outcome) !== outcome)
    throw new TypeError(
      `classify(outcome): must be { response } or { error } (got ${describeValue(outcome)})`,
    );
  const statuses = options.statuses ?? DEFAULT_RETRYABLE_STATUSES;
  if ('response' in outcome) {
    const { response } = outcome;
    return fromStatus(response.status, response.headers, call, statuses);
  }
  const { error } = outcome;
  if (isAbort(error, call?.signal)) return settled('cancelled');
  if (error instanceof HttpStatusError) {
    return fromStatus(error.status, error.headers, call, statuses, error);
  }
  if (error instanceof NetworkError) {
    return verdict('transient', true, error.sent === 'no', call);
  }
  // The other breakwater errors are told apart by their stable code, not instanceof,
  // so a bundle without timeouts, a breaker or a gate does not carry their classes.
  const code = error instanceof BreakwaterError ? error.code : undefined;
  if (code === 'TIMEOUT') {
    // A total deadline is the caller's whole budget: nothing is left to retry with.
    // An attempt deadline hit while waiting for headers: the server may be running it.
    return verdict('transient', (error as TimeoutError).scope === 'attempt', false, call);
  }
  if (code === 'CIRCUIT_OPEN' || code === 'GATE_CLOSED') {
    // Failed fast locally: nothing was sent. Not retryable: a call meeting an open circuit
    // fails fast, which is the breaker's point. retry() waits for retryAt (retryAfterMs)
    // only when it was already resending: see retry.ts.
    // A retryAt that is no time (an Invalid Date, none) is no wait: not NaN, which made
    // retry() resend at once, without even its backoff step.
    const { retryAt } = error as CircuitOpenError;
    return verdict('transient', false, true, call, Math.max(0, Number(retryAt) - Date.now()) || 0);
  }
  if (code === 'RETRY_AFTER_TOO_LONG') {
    // Whether it ran is what the answer behind it says: a 429 was refused before running,
    // a 503 may have run (DESIGN §5). Without a cause, nothing was sent.
    const { cause, retryAfterMs } = error as RetryAfterTooLongError;
    const notRun = cause === undefined || classify({ error: cause }, call, options).notRun;
    return verdict('rate-limited', false, notRun, call, retryAfterMs);
  }
  return settled('fatal');
}
