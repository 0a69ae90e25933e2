/**
 * @module
 * `retry()`: sends a call again only when the failure is retryable *and* resending
 * cannot run the operation twice (see `classify.ts`), waits exactly as long as the
 * server asked when it asked, and never starts a wait it cannot finish.
 *
 * Two production incidents shaped it: a 429 retry storm re-run on every agent turn
 * (hence the server's delay is honoured, a delay past the cap fails at once, and a
 * per-server budget stops a fleet of callers from multiplying load on a failing
 * server), and MCP tool calls that must never run twice (hence only safe resends).
 */

import * as z from 'zod/mini';
import { type BackoffOptions, backoff, backoffSchema } from './backoff.ts';
import type { Call, Middleware, Next } from './call.ts';
import { type Classification, classify, DEFAULT_RETRYABLE_STATUSES, type Outcome } from './classify.ts';
import { BreakwaterError, RetryAfterTooLongError, requestSummary } from './errors.ts';
import type { GiveUpReason } from './events.ts';
import { validate } from './options.ts';
import { sleep } from './sleep.ts';
import { statusError } from './status.ts';
import { MAX_DELAY_MS } from './timing.ts';

/** Total attempts, the first included. */
export const DEFAULT_ATTEMPTS = 3;
/** The longest server-requested wait honoured (60 s); longer ones fail at once. */
export const DEFAULT_MAX_RETRY_AFTER_MS = 60_000;
/** gRPC-style retry budget: bucket size, and what one success puts back. */
export const DEFAULT_BUDGET = { tokens: 10, refund: 0.1 } as const;
/** Retry's backoff between attempts when the server names no delay. */
export const DEFAULT_RETRY_BACKOFF: BackoffOptions = {
  initialMs: 500,
  factor: 2,
  maxMs: 32_000,
  jitter: 'decorrelated',
};
/** How many servers' budgets are kept (least recently used dropped first). */
const MAX_BUDGET_KEYS = 1000;
/** The most attempts one call may be configured to make. */
const MAX_ATTEMPTS = 100;

/** How resend safety is judged. */
export type ResendRule = 'safe' | 'never' | 'always';

/** Options for {@link retry}. */
export interface RetryOptions {
  /** Total attempts, the first included. Default 3; 1 turns retrying off. */
  attempts?: number;
  /** The wait between attempts when the server names none. Default 500 ms ×2 to 32 s, decorrelated jitter. */
  backoff?: BackoffOptions;
  /** Statuses that are retried. Default 408, 429, 500, 502, 503, 504, 529. */
  statuses?: number[];
  /**
   * The longest server-requested wait honoured, in ms. Default 60,000. A longer
   * `Retry-After` (or one past the call's deadline) fails at once with
   * `RetryAfterTooLongError` instead of sleeping out a budget it cannot use.
   */
  maxRetryAfterMs?: number;
  /**
   * Per-server retry budget (gRPC retry throttling): each failed attempt takes a
   * token, each success puts back `refund`, and retries stop while the bucket is
   * at or below half. Default `{ tokens: 10, refund: 0.1 }`; `false` turns it off.
   */
  budget?: { tokens?: number; refund?: number } | false;
  /**
   * `'safe'` (default) resends only what cannot run twice; `'never'` never resends
   * anything that may have reached the server; `'always'` resends whatever is
   * retryable, even a POST that may have run (only for operations you know are safe).
   */
  resend?: ResendRule;
  /**
   * Stream bodies are sent once and never resent, unless they are buffered first:
   * set this to buffer a stream body of up to this many bytes so it can be replayed.
   * A larger body is still sent (once), just not resent. Default: off.
   */
  replayBodyBytes?: number;
}

/** A retry middleware, with its per-server budget readable. */
export interface Retry extends Middleware {
  /** The server's budget state, or undefined when it has none yet. */
  stats(key: string): RetryStats | undefined;
}

/** Counters for one server. */
export interface RetryStats {
  /** Tokens left in the budget bucket. */
  tokens: number;
  /** Resends made. */
  retries: number;
  /** Calls that ended in a failure retry could not or would not resend. */
  giveUps: number;
}

const statusSchema = z.number().check(z.int(), z.minimum(100), z.maximum(599));

/** The serialisable options schema, shared with `definePolicy()`. */
export const retrySchema: z.ZodMiniType<RetryOptions> = z.strictObject({
  attempts: z.optional(
    z.number().check(z.int('must be a whole number'), z.minimum(1), z.maximum(MAX_ATTEMPTS)),
  ),
  backoff: z.optional(backoffSchema),
  statuses: z.optional(z.array(statusSchema)),
  maxRetryAfterMs: z.optional(z.number().check(z.minimum(0), z.maximum(MAX_DELAY_MS))),
  budget: z.optional(
    z.union([
      z.literal(false),
      z.strictObject({
        tokens: z.optional(z.number().check(z.positive(), z.maximum(1_000_000))),
        refund: z.optional(z.number().check(z.minimum(0), z.maximum(1_000_000))),
      }),
    ]),
  ),
  resend: z.optional(z.enum(['safe', 'never', 'always'])),
  replayBodyBytes: z.optional(z.number().check(z.int(), z.minimum(0), z.maximum(2 ** 31 - 1))),
}) as z.ZodMiniType<RetryOptions>;

interface Budget {
  tokens: number;
  retries: number;
  giveUps: number;
}

/** A short description of what failed, for events: `HTTP 503` or a code. */
function describeOutcome(outcome: Outcome): string {
  if ('response' in outcome) return `HTTP ${outcome.response.status}`;
  const error = outcome.error as { code?: unknown; name?: unknown } | null;
  if (error instanceof BreakwaterError) return error.code;
  return typeof error?.name === 'string' ? error.name : 'error';
}

/** Whether the body can be sent again as it is. */
function replayable(call: Call): boolean {
  return !(call.body instanceof ReadableStream);
}

/**
 * Reads a stream body of up to `cap` bytes into memory so it can be resent. A larger
 * body is stitched back into a stream (what was read, then the rest) and sent once.
 */
async function bufferBody(call: Call, cap: number): Promise<void> {
  const stream = call.body;
  if (!(stream instanceof ReadableStream)) return;
  const reader = (stream as ReadableStream<Uint8Array>).getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.byteLength;
    if (size > cap) {
      const rest = new ReadableStream<Uint8Array>({
        start(controller) {
          for (const chunk of chunks) controller.enqueue(chunk);
        },
        async pull(controller) {
          const next = await reader.read();
          if (next.done) controller.close();
          else controller.enqueue(next.value);
        },
        cancel(reason) {
          return reader.cancel(reason);
        },
      });
      call.init = { ...call.init, body: rest, duplex: 'half' } as RequestInit;
      return;
    }
  }
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  call.init = { ...call.init, body: bytes };
}

/**
 * Retries what is retryable and safe to resend, honouring the server's delay.
 *
 * @example
 * ```ts
 * import { captureStatus, createFetch, retry } from 'breakwater';
 *
 * const fetch = createFetch({ use: [retry({ attempts: 4 }), captureStatus()] });
 * const res = await fetch('https://api.example.com/v1/things'); // 503 + Retry-After: 1 → waits 1 s, tries again
 * ```
 */
export function retry(options: RetryOptions = {}): Retry {
  const config = validate(retrySchema, options, 'retry()');
  const attempts = config.attempts ?? DEFAULT_ATTEMPTS;
  const statuses = config.statuses ?? [...DEFAULT_RETRYABLE_STATUSES];
  const maxRetryAfterMs = config.maxRetryAfterMs ?? DEFAULT_MAX_RETRY_AFTER_MS;
  const resend = config.resend ?? 'safe';
  const schedule = backoff({ ...DEFAULT_RETRY_BACKOFF, ...config.backoff });
  const budgetTokens = config.budget === false ? undefined : (config.budget?.tokens ?? DEFAULT_BUDGET.tokens);
  const refund = config.budget === false ? 0 : (config.budget?.refund ?? DEFAULT_BUDGET.refund);
  const budgets = new Map<string, Budget>();

  function budgetFor(key: string): Budget {
    let budget = budgets.get(key);
    if (budget === undefined) {
      budget = { tokens: budgetTokens ?? 0, retries: 0, giveUps: 0 };
      if (budgets.size >= MAX_BUDGET_KEYS) budgets.delete(budgets.keys().next().value as string);
    } else {
      budgets.delete(key);
    }
    budgets.set(key, budget);
    return budget;
  }

  function settle(outcome: Outcome): Response {
    if ('response' in outcome) return outcome.response;
    throw outcome.error;
  }

  function giveUp(call: Call, outcome: Outcome, why: GiveUpReason, budget: Budget): Response {
    budget.giveUps++;
    call.emit({
      type: 'give-up',
      key: call.key,
      attempt: call.attempt,
      why,
      reason: describeOutcome(outcome),
    });
    return settle(outcome);
  }

  /** Whether this outcome may be resent, given the `resend` rule. */
  function mayResend(verdict: Classification): boolean {
    if (resend === 'always') return true;
    // 'never': only what the server provably did not run, idempotent or not.
    return resend === 'safe' ? verdict.safeToResend : verdict.notRun;
  }

  const middleware = async function retry(call: Call, next: Next): Promise<Response> {
    if (config.replayBodyBytes !== undefined && call.attempt === 1)
      await bufferBody(call, config.replayBodyBytes);
    let previousDelay: number | undefined;
    for (;;) {
      let outcome: Outcome;
      try {
        outcome = { response: await next(call) };
      } catch (error) {
        outcome = { error };
      }
      const verdict = classify(outcome, call, { statuses });
      if (verdict.kind === 'ok') {
        // The happy path: refill the server's bucket if it has one, without touching
        // the registry's order (a Map delete + set per call costs microseconds).
        const known = budgets.get(call.key);
        if (known !== undefined && budgetTokens !== undefined) {
          known.tokens = Math.min(budgetTokens, known.tokens + refund);
        }
        return settle(outcome);
      }
      const budget = budgetFor(call.key);
      if (!verdict.retryable) {
        if (verdict.kind !== 'cancelled') {
          return giveUp(call, outcome, 'not-retryable', budget);
        }
        return settle(outcome);
      }
      // The budget guards against storms of our own making. A retry the server invited
      // with a delay it named (429/503 + Retry-After), waited out exactly (and, with a
      // breaker, by every caller of the key at once), is not one: it neither takes a
      // token nor is refused by the bucket. Any other failed attempt takes a token,
      // whether or not it is retried (gRPC throttling).
      const invited = verdict.retryAfterMs !== undefined;
      if (budgetTokens !== undefined && !invited) budget.tokens = Math.max(0, budget.tokens - 1);
      if (call.attempt >= attempts) return giveUp(call, outcome, 'attempts', budget);
      if (!mayResend(verdict)) return giveUp(call, outcome, 'unsafe-to-resend', budget);
      if (!replayable(call)) return giveUp(call, outcome, 'body-not-replayable', budget);
      if (budgetTokens !== undefined && !invited && budget.tokens <= budgetTokens / 2) {
        return giveUp(call, outcome, 'budget', budget);
      }

      const remaining = call.remainingMs();
      const serverDelay = verdict.retryAfterMs;
      if (serverDelay !== undefined && (serverDelay > maxRetryAfterMs || serverDelay > remaining)) {
        budget.giveUps++;
        call.emit({
          type: 'give-up',
          key: call.key,
          attempt: call.attempt,
          why: 'retry-after-too-long',
          reason: describeOutcome(outcome),
        });
        throw await tooLong(call, outcome, serverDelay, Math.min(maxRetryAfterMs, remaining));
      }
      const delay = serverDelay ?? schedule(call.attempt, previousDelay);
      if (delay >= remaining) return giveUp(call, outcome, 'deadline', budget);

      if ('response' in outcome) await outcome.response.body?.cancel().catch(() => {});
      budget.retries++;
      call.emit({
        type: 'retry',
        key: call.key,
        attempt: call.attempt,
        delayMs: delay,
        delaySource: serverDelay === undefined ? 'backoff' : 'server',
        reason: describeOutcome(outcome),
      });
      previousDelay = delay;
      await sleep(delay, call.signal);
      call.attempt++;
    }
  } as Retry;

  middleware.stats = (key) => {
    const budget = budgets.get(key);
    return budget === undefined ? undefined : { ...budget };
  };
  return middleware;
}

/** The error for a server delay retry will not wait out; the response's body is cancelled. */
async function tooLong(
  call: Call,
  outcome: Outcome,
  delayMs: number,
  limitMs: number,
): Promise<RetryAfterTooLongError> {
  const cause = 'response' in outcome ? await statusError(call, outcome.response) : outcome.error;
  return new RetryAfterTooLongError({
    retryAfterMs: delayMs,
    limitMs,
    cause,
    request: requestSummary(call.key, call.method, call.href),
  });
}
