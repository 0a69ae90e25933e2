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
  CircuitOpenError,
  GateClosedError,
  HttpStatusError,
  NetworkError,
  RetryAfterTooLongError,
  TimeoutError,
} from './errors.ts';
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
  kind: OutcomeKind;
  /** Whether the policy would try again (given it is also safe to resend). */
  retryable: boolean;
  /** Whether sending the same request again cannot run the operation twice. */
  safeToResend: boolean;
  /** The server's requested wait, when it said one. */
  retryAfterMs?: number;
}

/** Options for {@link classify}. */
export interface ClassifyOptions {
  /** Statuses that count as retryable. Default {@link DEFAULT_RETRYABLE_STATUSES}. */
  statuses?: readonly number[];
}

/** What a call ended with: a response, or what was thrown. */
export type Outcome = { response: Response } | { error: unknown };

/** Whether a status is retryable by the status rule, with `x-should-retry` overriding it both ways. */
export function isRetryableStatus(
  status: number,
  headers?: HeadersLike,
  statuses: readonly number[] = DEFAULT_RETRYABLE_STATUSES,
): boolean {
  const override = headers === undefined ? undefined : shouldRetryHeader(headers);
  return override ?? statuses.includes(status);
}

function fromStatus(
  status: number,
  headers: HeadersLike | undefined,
  retryAfterMs: number | undefined,
  call: Call | undefined,
  statuses: readonly number[],
): Classification {
  const wait = retryAfterMs === undefined ? {} : { retryAfterMs };
  if (status < 400) return { kind: 'ok', retryable: false, safeToResend: true };
  const override = headers === undefined ? undefined : shouldRetryHeader(headers);
  const retryable = override ?? statuses.includes(status);
  // The server saying "retry" is the server saying it did not (or may again) execute it.
  const safeToResend =
    override === true || REJECTED_BEFORE_EXECUTION.has(status) || (call?.isIdempotent ?? false);
  if (status === 401 || status === 407)
    return { kind: 'auth-recoverable', retryable: false, safeToResend, ...wait };
  if (status === 403) return { kind: 'auth-user', retryable: false, safeToResend, ...wait };
  if (status === 429) return { kind: 'rate-limited', retryable, safeToResend, ...wait };
  return { kind: retryable ? 'transient' : 'fatal', retryable, safeToResend, ...wait };
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
  const statuses = options.statuses ?? DEFAULT_RETRYABLE_STATUSES;
  if ('response' in outcome) {
    const { response } = outcome;
    return fromStatus(response.status, response.headers, retryDelay(response.headers), call, statuses);
  }
  const { error } = outcome;
  const signal = call?.signal;
  if (
    (signal?.aborted && error === signal.reason) ||
    (error as { name?: unknown } | null)?.name === 'AbortError'
  ) {
    return { kind: 'cancelled', retryable: false, safeToResend: false };
  }
  if (error instanceof HttpStatusError) {
    return fromStatus(error.status, error.headers, error.retryAfterMs, call, statuses);
  }
  if (error instanceof NetworkError) {
    return {
      kind: 'transient',
      retryable: true,
      safeToResend: error.sent === 'no' || (call?.isIdempotent ?? false),
    };
  }
  if (error instanceof TimeoutError) {
    // A total deadline is the caller's whole budget: nothing is left to retry with.
    // An attempt deadline hit while waiting for headers: the server may be running it.
    return {
      kind: 'transient',
      retryable: error.scope === 'attempt',
      safeToResend: call?.isIdempotent ?? false,
    };
  }
  if (error instanceof CircuitOpenError || error instanceof GateClosedError) {
    // Failed fast locally: nothing was sent. Waiting is the breaker's business, not retry's.
    return {
      kind: 'transient',
      retryable: false,
      safeToResend: true,
      retryAfterMs: Math.max(0, error.retryAt.getTime() - Date.now()),
    };
  }
  if (error instanceof RetryAfterTooLongError) {
    return { kind: 'rate-limited', retryable: false, safeToResend: true, retryAfterMs: error.retryAfterMs };
  }
  return { kind: 'fatal', retryable: false, safeToResend: false };
}
