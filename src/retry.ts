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
  dropBody,
  hasOneShotBody,
  type Middleware,
  type Next,
  NO_RESEND,
  RAN,
} from './call.ts';
import { waitLeft } from './capture.ts';
import { classify, DEFAULT_RETRYABLE_STATUSES, type Outcome } from './classify.ts';
import {
  BreakwaterError,
  HttpStatusError,
  RetryAfterTooLongError,
  requestSummary,
  TimeoutError,
} from './errors.ts';
import type { GiveUpReason } from './events.ts';
import { DEFAULT_ATTEMPTS, DEFAULT_MAX_RETRY_AFTER_MS, MAX_ATTEMPTS, MAX_BUDGET_KEYS } from './limits.ts';
import { validate } from './options.ts';
import { sleep } from './sleep.ts';
import { statusError, statusesSchema } from './status.ts';

export { DEFAULT_MAX_RETRY_AFTER_MS };

/** gRPC-style retry budget: bucket size, and what one success puts back. */
export const DEFAULT_BUDGET = { tokens: 10, refund: 0.1 } as const;
/**
 * The budget is counted in thousandths of a token, as integers, as gRPC counts it (gRFC A6:
 * `tokenRatio` has three decimal places, `maxTokens` and the count are kept ×1000). In
 * floats a refund of 0.1 is not 0.1: ten of them after a failure left a full bucket of 10
 * at 9.999999999999996 in `stats()`, and a bucket of 4 at 3.000000000000001, above its
 * half, so a retry the budget should refuse went.
 */
const TOKEN_SCALE = 1000;
/**
 * Retry's jitter between attempts when the server names no delay; the rest of the
 * schedule is backoff's default (500 ms ×2 to 32 s, see withDefaults).
 */
export const DEFAULT_RETRY_JITTER: Jitter = 'decorrelated';

/** How resend safety is judged. */
export type ResendRule = 'safe' | 'never' | 'always';

/** Options for {@link retry}. */
export interface RetryOptions {
  /**
   * Total attempts, the first included. Default 3; 1 turns retrying off. A resend an open
   * circuit or armed gate below refused unsent is none (nothing reached the server); such
   * refusals are capped at `attempts` too, apart.
   */
  attempts?: number | undefined;
  /** The wait between attempts when the server names none. Default 500 ms ×2 to 32 s, decorrelated jitter. */
  backoff?: BackoffOptions | undefined;
  /**
   * Statuses that are retried. Default 408, 429, 500, 502, 503, 504, 529. Readonly, so
   * `DEFAULT_RETRYABLE_STATUSES` and a policy written `as const` are taken as they are.
   */
  statuses?: readonly number[] | undefined;
  /**
   * The longest server-requested wait honoured, in ms. Default 60,000. A longer
   * `Retry-After` (or one past the call's deadline) fails at once with
   * `RetryAfterTooLongError` instead of sleeping out a budget it cannot use. The waits for
   * resends a breaker or gate below refused (see {@link retry}) are capped together: one
   * call sleeps at most this long on refusals' `retryAt`s in all, not this long per refusal.
   */
  maxRetryAfterMs?: number | undefined;
  /**
   * Per-server retry budget (gRPC retry throttling): each failed attempt takes a
   * token, each success puts back `refund`, and retries stop while the bucket is
   * at or below half. Default `{ tokens: 10, refund: 0.1 }`; `false` turns it off.
   * Both are counted to the thousandth of a token, as gRPC counts them (a finer refund
   * is rounded to the nearest thousandth), so a count never drifts.
   */
  budget?: { tokens?: number | undefined; refund?: number | undefined } | false | undefined;
  /**
   * `'safe'` (default) resends only what cannot run twice; `'never'` never resends
   * anything that may have reached the server, nor lets an `auth()` in the chain resend
   * it after a 401 (a GET answered 303 ran); `'always'` resends whatever is
   * retryable, even a POST that may have run (only for operations you know are safe).
   */
  resend?: ResendRule | undefined;
  /**
   * Stream bodies are sent once and never resent, unless they are buffered first:
   * set this to buffer a stream body of up to this many bytes so it can be replayed.
   * A larger body is still sent (once), just not resent. The read ends at the caller's
   * abort, and at the call's total deadline (`TimeoutError`, scope `'total'`). Default: off.
   */
  replayBodyBytes?: number | undefined;
}

/** A retry middleware, with its per-server budget readable. */
export interface Retry extends Middleware {
  /**
   * The server's budget and counters. A key with no failure yet (or never seen, or
   * forgotten: the 1000 that failed most recently are kept) has a full budget and no
   * counts: a bucket is made, full, at a key's first failure.
   */
  stats(key: string): RetryStats;
}

/** Counters for one server. */
export interface RetryStats {
  /**
   * Tokens left in the budget bucket, or `undefined` when retry has no budget
   * (`budget: false`): retries are then never refused for the budget, which 0 would deny.
   */
  tokens: number | undefined;
  /** Resends made: sent on, not refused unsent by a breaker or gate below. */
  retries: number;
  /** Calls that ended in a failure retry could not or would not resend. */
  giveUps: number;
}

/**
 * The serialisable options schema, shared with `definePolicy()`. Every field is
 * optional: `z.partial()` says so once. Built in a pure closure (see `backoff.ts`):
 * a bundle that imports this file without `retry()` (breakwater/hono) drops it.
 */
export const retrySchema: z.ZodMiniType<RetryOptions> = /* @__PURE__ */ (() =>
  z.partial(
    z.strictObject({
      attempts: z.number().check(z.int(), z.minimum(1), z.maximum(MAX_ATTEMPTS)),
      backoff: backoffSchema,
      statuses: statusesSchema,
      maxRetryAfterMs: delayMsSchema,
      budget: z.union([
        z.literal(false),
        z.partial(
          z.strictObject({
            tokens: z.number().check(z.positive(), z.maximum(1_000_000)),
            refund: z.number().check(z.minimum(0), z.maximum(1_000_000)),
          }),
        ),
      ]),
      resend: z.enum(['safe', 'never', 'always']),
      replayBodyBytes: z.number().check(z.int(), z.minimum(0), z.maximum(2 ** 31 - 1)),
    }),
  ) as z.ZodMiniType<RetryOptions>)();

interface Budget {
  /** In thousandths of a token (see TOKEN_SCALE): an integer. */
  milliTokens: number;
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

/**
 * Reads a stream body of up to `cap` bytes into memory so it can be resent. A larger
 * body is sent once, as a stream: one branch of a tee is read, and the other (which
 * holds what was read, then the rest) is sent, so memory stays bounded by the cap.
 * The caller's abort ends the read at once with its own reason: a body whose end is
 * slow to come (an upload being relayed) must not hold the call past it. So does the
 * call's total deadline, with a `TimeoutError`: `definePolicy()`'s has no timer of its
 * own (its attempt timeout sits inside retry()), and a body whose end never came held
 * the call until the caller gave up, or for good.
 */
async function bufferBody(call: Call, cap: number): Promise<void> {
  const stream = call.body;
  if (!(stream instanceof ReadableStream)) return;
  const [send, probe] = stream.tee();
  const chunks: BlobPart[] = [];
  let size = 0;
  const ms = call.remainingMs();
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await probe.pipeTo(
      new WritableStream({
        // Erroring the sink ends the pipe even while it waits for a chunk that never comes.
        start(sink) {
          if (ms < Infinity)
            timer = setTimeout(
              () =>
                sink.error(
                  new TimeoutError({
                    scope: 'total',
                    ms: call.totalMs ?? ms,
                    request: requestSummary(call.key, call.method, call.href),
                  }),
                ),
              ms,
            );
        },
        // Stream chunks are never views of a SharedArrayBuffer, which is all the type hides.
        write(chunk: Uint8Array<ArrayBuffer> | string) {
          // Node's and Bun's fetch send a string chunk as UTF-8 (Readable.toWeb() of a stream
          // with an encoding gives them): counted as that, not as no bytes at all (NaN).
          const bytes = typeof chunk === 'string' ? new TextEncoder().encode(chunk) : chunk;
          chunks.push(bytes);
          size += bytes.byteLength;
          // A chunk of no byte length (NaN) cannot be counted either: sent as it is, once.
          if (!(size <= cap)) throw size;
        },
      }),
      // A tee branch's cancel settles only once both are cancelled: pipeTo must not
      // wait for it, or a body over the cap would wait for its own sending.
      // Only a real AbortSignal (an undefined one is absent, as for any WebIDL dictionary
      // member): Deno and Bun reject a polyfill's (node-fetch's abort-controller), which
      // failed the call before a byte was sent. Its abort then ends the send, not this read.
      {
        signal: (call.signal instanceof AbortSignal ? call.signal : undefined) as AbortSignal,
        preventCancel: true,
      },
    );
    // A Blob is replayable, like the body it holds.
    call.init = { ...call.init, body: new Blob(chunks) };
  } catch (error) {
    probe.cancel().catch(() => {});
    if (size <= cap) {
      // Nothing will be sent: cancel the other branch too, so the caller's stream (a
      // relayed upload) is told to stop instead of staying locked and open.
      send.cancel(error).catch(() => {});
      throw error;
    }
    call.init = { ...call.init, body: send, duplex: 'half' } as RequestInit;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Retries what is retryable and safe to resend, honouring the server's delay.
 *
 * A resend that a breaker or gate below refuses with `CircuitOpenError` or
 * `GateClosedError` (nothing was sent, so resending is always safe) is waited out until
 * its `retryAt`, at least the backoff step, then sent again: the circuit opened while this
 * call was retrying, and resent sooner it is refused again. A `retryAt` that would take one
 * call's `retryAt`s together past `maxRetryAfterMs` (a circuit that keeps reopening; the
 * backoff step, which `backoff.maxMs` caps, is not counted), or a wait past the deadline,
 * fails at once with that error itself (give-up
 * `retry-after-too-long`), as the breaker fails a pause past the cap. Such a refusal uses
 * no attempt and no budget token, is not in `stats().retries`, and its wait's `retry`
 * event says `delaySource: 'breaker'` (not when the pass went and a layer below had its
 * own resend refused, auth()'s after a 401: the next pass is then a resend of its own). A new call's first pass refused fails fast, as the
 * breaker means it to: an agent's turn goes on without the server instead of waiting.
 *
 * An answer fetch reached through a redirect counts as run, whatever its status: a POST
 * answered 303 See Other ran, and the 429 of the GET fetch sent after it proves nothing of
 * it. The chain's end marks such an answer in the call's bag as fetch gave it, and retry()
 * reads the mark, so a middleware below retry() that rebuilds the answer
 * (`new Response(body, response)`, whose `redirected` is false) hides no redirect. A custom
 * `fetch` under the chain that rebuilds fetch's answers must keep `redirected` itself, or
 * such a POST is resent when its GET met a 429.
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
  const classifyOptions = { statuses: config.statuses ?? DEFAULT_RETRYABLE_STATUSES };
  const maxRetryAfterMs = config.maxRetryAfterMs ?? DEFAULT_MAX_RETRY_AFTER_MS;
  const resend = config.resend ?? 'safe';
  const schedule = backoff(withDefaults(config.backoff, DEFAULT_RETRY_JITTER));
  // In thousandths of a token. 0 when the budget is off (a configured size is positive,
  // and counts as at least a thousandth): then the bucket stays empty and is never consulted.
  const budgetMilli =
    config.budget === false
      ? 0
      : Math.max(1, Math.round((config.budget?.tokens ?? DEFAULT_BUDGET.tokens) * TOKEN_SCALE));
  const refundMilli =
    config.budget === false ? 0 : Math.round((config.budget?.refund ?? DEFAULT_BUDGET.refund) * TOKEN_SCALE);
  const budgets = new Map<string, Budget>();
  /** A key's budget until it fails: full, nothing counted. */
  const fresh = (): Budget => ({ milliTokens: budgetMilli, retries: 0, giveUps: 0 });

  /** The server's budget, moved to the most recently used end of the registry. */
  function budgetFor(key: string): Budget {
    const budget = budgets.get(key) ?? fresh();
    budgets.delete(key);
    budgets.set(key, budget);
    if (budgets.size > MAX_BUDGET_KEYS) budgets.delete(budgets.keys().next().value as string);
    return budget;
  }

  function settle(outcome: Outcome): Response {
    if ('response' in outcome) return outcome.response;
    throw outcome.error;
  }

  /**
   * Whether resending could run the operation twice, as `resend` judges it: a pass so far
   * may have run it ({@link RAN}). 'never': only what the server provably did not run,
   * idempotent or not. Read from the call as it is now (not the verdict's
   * `safeToResend`): a mark can be taken back while retry waits.
   */
  function unsafe(call: Call): boolean {
    return resend !== 'always' && call.bag.has(RAN) && (resend === 'never' || !call.isIdempotent);
  }

  /** Counts and reports a failure that is not resent. */
  function giveUp(call: Call, budget: Budget, why: GiveUpReason, reason: string): void {
    budget.giveUps++;
    call.emit({ type: 'give-up', key: call.key, attempt: call.attempt, why, reason });
  }

  /**
   * Why a retryable failure is not resent (`cap`: the longest wait on the server's or a
   * breaker's say-so; `invited`: by the server, see below; `refusals`: passes refused
   * unsent so far), or undefined when it is.
   */
  function refusal(
    call: Call,
    serverDelay: number | undefined,
    askedMs: number | undefined,
    budget: Budget,
    delay: number,
    cap: number,
    invited: boolean,
    refusals: number,
  ): GiveUpReason | undefined {
    const remaining = call.remainingMs();
    // A refused pass reached no server: `attempts` caps the sends, and the refusals apart.
    if (Math.max(call.attempt - refusals, refusals) >= attempts) return 'attempts';
    if (unsafe(call)) return 'unsafe-to-resend';
    if (hasOneShotBody(call)) return 'body-not-replayable';
    if (budgetMilli > 0 && !invited && budget.milliTokens <= budgetMilli / 2) return 'budget';
    // No pointless sleep: a wait past the cap or the deadline fails at once. The cap is on
    // the server's (or, after a refusal, the breaker's) say-so, never on retry's own backoff
    // step, which backoff.maxMs caps: a refusal for 5 ms met at a 40 s step is waited out.
    // The cap is on the wait asked (`askedMs`), not on what is left of it after a read of
    // the body's start (DESIGN §6: honoured when the server's delay is ≤ maxRetryAfterMs);
    // the deadline, on what is left.
    if (serverDelay !== undefined && ((askedMs ?? serverDelay) > cap || serverDelay > remaining))
      return 'retry-after-too-long';
    return delay >= remaining ? 'deadline' : undefined;
  }

  const middleware = async function retry(call: Call, next: Next): Promise<Response> {
    // The signal of the pass this retry runs in, read once. A timeout above that ends the
    // pass (its deadline, the caller's abort) puts its outer signal back on the call while
    // this retry may still run (a fetch that ignores the signal, a late 503), and a retry
    // above it may start a new pass with a new signal: waiting on this one ends such a
    // leftover at once, with no timer held for the delay and no resend in the new pass.
    const signal = call.signal;
    // A layer that resends on its own (auth() after a 401) honours 'never' too.
    if (resend === 'never') call.bag.set(NO_RESEND, 1);
    if (config.replayBodyBytes !== undefined && call.attempt === 1)
      await bufferBody(call, config.replayBodyBytes);
    let previousDelay: number | undefined;
    /** Whether this pass is a resend (every pass after the first). */
    let resent = false;
    /** Passes a breaker or gate below refused unsent: no attempt, they reached no server. */
    let refusals = 0;
    /**
     * What is left of maxRetryAfterMs for this call's waits after refusals: each is capped
     * apart, but a circuit that keeps reopening would refuse up to `attempts` resends, and
     * a caller who set maxRetryAfterMs: 60_000 must not sleep attempts × 60 s on a breaker's say-so.
     */
    let refusalMs = maxRetryAfterMs;
    for (;;) {
      /** The attempt this pass sends as: a layer below that resends (auth() after a 401) numbers on. */
      const sentAs = call.attempt;
      let outcome: Outcome;
      try {
        outcome = { response: await next(call) };
      } catch (error) {
        outcome = { error };
      }
      const verdict = classify(outcome, call, classifyOptions);
      // Refused unsent by a breaker or gate below (CircuitOpenError, GateClosedError): the one
      // transient outcome that is neither retryable nor sent.
      const refused = verdict.notRun && verdict.kind === 'transient' && !verdict.retryable;
      // Refused before this pass sent anything: not when a layer below resent it and that
      // resend was refused (auth() after a 401), for then this pass went.
      const unsent = refused && call.attempt === sentAs;
      // A resend counts once it went: not one the caller left during the wait (no pass), nor
      // one a breaker or gate below refused unsent. Not attempt > 1: auth() below counts its
      // own resends.
      if (resent && !unsent) budgetFor(call.key).retries++;
      if (verdict.kind === 'ok') {
        // The happy path: refill the server's bucket if it has one, without touching
        // the registry's order (a Map delete + set per call costs microseconds).
        const known = budgets.get(call.key);
        if (known !== undefined) known.milliTokens = Math.min(budgetMilli, known.milliTokens + refundMilli);
        return settle(outcome);
      }
      // Whether this pass may have run it, kept in the call's bag: a resend's safety is the
      // call's, not its last pass's, and upstream() reads it to tell whether an error's call
      // ran. A redirected answer speaks for the last request only: fetch makes a POST
      // answered 303 a GET, whose 429 says nothing of the POST, which ran. Only that answer
      // is seen, so any redirect counts (as in auth()). The chain's end marks fetch's own
      // redirects (a layer between may rebuild the answer); this sees the answers auth()
      // marks after following redirects itself.
      if (!verdict.notRun || (outcome as { response?: Response }).response?.redirected) call.bag.set(RAN, 1);
      if (verdict.kind === 'cancelled') return settle(outcome);
      // A pass that ended (a timeout above, the caller's abort) while its attempt ran: what
      // comes back now (a late 503 through a fetch that ignores the signal) is dropped and
      // the pass's own reason goes up, which a timeout above drops in turn. The caller has
      // its error: no give-up or retry event for a call already reported, and no token
      // from the server's budget for a retry the caller left.
      if (signal?.aborted) {
        if ('response' in outcome) dropBody(outcome.response);
        throw abortReason(signal);
      }
      if (refused) refusals++;
      const budget = budgetFor(call.key);
      // The budget guards against storms of our own making. A retry the server invited,
      // waited out exactly (and, with a breaker, by every caller of the key at once), is
      // not one. Any other failed attempt takes a token, whether or not it is retried
      // (gRPC throttling).
      // What is left of the server's wait, counted from when the answer's headers arrived: a
      // captureStatus() or throwOnStatus() below has read its body's start since (see
      // waitLeft), for an answer and an HttpStatusError alike.
      const answer = 'response' in outcome ? outcome.response : outcome.error;
      const serverDelay =
        'response' in outcome || answer instanceof HttpStatusError
          ? waitLeft(answer as Response | HttpStatusError, Date.now())
          : verdict.retryAfterMs;
      // Invited: the server named a delay (429/503 + Retry-After), whatever of it the read of
      // the body took. A delay of 0 invites no pause, so it is no invitation: 1,000 calls
      // answered `Retry-After: 0` would otherwise resend at once. A refusal is outside the
      // budget too: it reached no server, and its wait is the breaker's (or gate's) for
      // every caller of the key.
      const invited = refused || (verdict.retryAfterMs ?? 0) > 0;
      if (verdict.retryable && !invited) {
        budget.milliTokens = Math.max(0, budget.milliTokens - TOKEN_SCALE);
      }
      // After a refusal, until its retryAt (classify()'s retryAfterMs), and never less than
      // the backoff step: resent sooner, the breaker refuses it again, and one that is
      // already past must not make a loop. A retryAt past maxRetryAfterMs or the deadline
      // fails at once, as a server's too-long delay does, with the refusal itself (below).
      const delay =
        serverDelay !== undefined && !refused
          ? serverDelay
          : Math.max(serverDelay ?? 0, schedule(call.attempt, previousDelay));
      // A timeout of scope 'total' (the one classify() calls final: an attempt's is
      // retryable) is the call's deadline passing, which is what stops this retry: in
      // definePolicy()'s chain the total deadline has no timer of its own, and the attempt
      // timeout inside ends the last attempt at it.
      // A refused resend is waited out (see retry()); a new call refused fails fast.
      const why =
        verdict.retryable || (refused && resent)
          ? refusal(
              call,
              serverDelay,
              verdict.retryAfterMs,
              budget,
              delay,
              refused ? refusalMs : maxRetryAfterMs,
              invited,
              refusals,
            )
          : (outcome as { error?: TimeoutError }).error?.scope === 'total'
            ? 'deadline'
            : 'not-retryable';
      const reason = describeOutcome(outcome);
      if (why !== undefined) {
        giveUp(call, budget, why, reason);
        // A refusal whose retryAt is too far stays the CircuitOpenError (or GateClosedError)
        // it is, as the breaker's own refusal of a pause past maxRetryAfterMs: it has the
        // retryAt, and a caller's `instanceof CircuitOpenError` keeps working.
        if (why !== 'retry-after-too-long' || refused) return settle(outcome);
        // The response's body is cancelled by statusError(), after it read the body's start
        // (up to a second) for the message: the clock is read before it, so retryAt is when
        // the server's wait ends, not a second later (properties are evaluated in order).
        // The error says the wait the server asked for; `delay` is what is left of it (a
        // capture below read the body's start since the headers came), so retryAt is `delay`
        // from now.
        const asked = verdict.retryAfterMs ?? delay;
        const tooLong = new RetryAfterTooLongError({
          retryAfterMs: asked,
          limitMs: Math.min(maxRetryAfterMs, call.remainingMs()),
          now: Date.now() + delay - asked,
          cause:
            'response' in outcome
              ? await statusError(call, outcome.response, undefined, classifyOptions.statuses)
              : outcome.error,
          request: requestSummary(call.key, call.method, call.href),
        });
        // A caller who left during that read waits for no rate-limit error: user aborts stay
        // their own reason (DESIGN §4), as during a backoff wait.
        if (signal?.aborted) throw abortReason(signal);
        throw tooLong;
      }

      // The dropped answer's connection is freed, not waited for: a caller's abort must end
      // the call at once.
      if ('response' in outcome) dropBody(outcome.response);
      // No retry event for a pass the cancel ended either: the body's source is told at
      // once, and its cancel may abort. (Not throwIfAborted(): a custom fetch may take a
      // polyfill's signal, which lacks it.)
      if (signal?.aborted) throw abortReason(signal);
      call.emit({
        type: 'retry',
        key: call.key,
        attempt: call.attempt,
        delayMs: delay,
        // A refusal's wait says so: it announces again a resend not made (stats), and is not
        // the server's delay. After a pass that went (auth()'s resend refused), the next
        // pass is a resend of its own, announced as one: else stats.retries outran the
        // other retry events.
        delaySource: unsent ? 'breaker' : delay === serverDelay ? 'server' : 'backoff',
        reason,
      });
      previousDelay = delay;
      if (refused) refusalMs -= serverDelay ?? 0;
      await sleep(delay, signal);
      // A mark taken back during the wait (an MCP server's tools/list_changed made a
      // read-only tool destructive): a resend that rested on it does not go.
      if (unsafe(call)) {
        giveUp(call, budget, 'unsafe-to-resend', reason);
        // An answer's body was let go before the wait, to free the connection: the caller
        // gets its status and headers with an empty body, not one that throws when read
        // (an SDK reads a failure's text).
        return 'response' in outcome ? new Response(null, outcome.response) : settle(outcome);
      }
      resent = true;
      call.attempt++;
    }
  } as Retry;

  middleware.stats = (key) => {
    // A key that only succeeded read as undefined, as if retry had no budget for it: it
    // has its full one (the happy path makes no bucket, so a key not here has never failed).
    const budget = budgets.get(key) ?? fresh();
    // No bucket (budget: false) reads as none, not as an empty one (0 tokens: no retries).
    // An integer of thousandths over 1000 is the nearest double to the decimal: 9.9, not 9.899999999999999.
    return {
      tokens: budgetMilli ? budget.milliTokens / TOKEN_SCALE : undefined,
      retries: budget.retries,
      giveUps: budget.giveUps,
    };
  };
  return middleware;
}
