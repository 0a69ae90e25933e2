/**
 * @module
 * `timeout({ attemptMs, totalMs })`: deadlines for the wait for response headers.
 * A body, and above all a streaming body (`text/event-stream`, an MCP or model
 * stream), is never cut by them: once the headers are in, the timer is cleared, and
 * a layer below that is still reading a failure's body start (`captureStatus()`,
 * `throwOnStatus()`, up to their `bodyWaitMs`) does not turn the response into a
 * `TimeoutError`.
 *
 * Cost matters: on Node 20 `AbortSignal.any` costs about 12 µs a call and
 * `AbortSignal.timeout` keeps timers alive, so each pass uses one `AbortController`
 * and one `setTimeout`, cleared when the headers arrive (about 0.5 µs). The caller's
 * own signal is forwarded through one shared listener per caller signal (see
 * {@link follow}), so a long-lived signal that an SDK reuses for every request does
 * not collect one listener per call.
 */

import * as z from 'zod/mini';
import {
  abortReason,
  BODY_READ,
  type Call,
  dropBody,
  END,
  ENDED,
  type Follower,
  follow,
  type MarkedCall,
  type Middleware,
  type Next,
} from './call.ts';
import { requestSummary, TimeoutError } from './errors.ts';
import { validate } from './options.ts';
import { MAX_DELAY_MS } from './timing.ts';

/** Options for {@link timeout}. */
export interface TimeoutOptions {
  /**
   * The longest wait for response headers on each pass through this middleware, in
   * ms. Put `timeout({ attemptMs })` inside `retry()` to bound each attempt.
   */
  attemptMs?: number | undefined;
  /**
   * The longest wait for the final response headers of the whole call, retries and
   * their waits included, in ms. Put `timeout({ totalMs })` outside `retry()`; retry
   * and pacing read the deadline and never start a wait it cannot cover. Under
   * another total deadline (an outer `timeout()`, `definePolicy()`'s), the nearer one wins.
   */
  totalMs?: number | undefined;
}

const msSchema = z.optional(z.number().check(z.int(), z.positive(), z.maximum(MAX_DELAY_MS)));

/** The serialisable options schema, shared with `definePolicy()`. */
export const timeoutSchema: z.ZodMiniType<TimeoutOptions> = z.strictObject({
  attemptMs: msSchema,
  totalMs: msSchema,
}) as z.ZodMiniType<TimeoutOptions>;

/** Keeps a call's controller alive as long as its response or body is reachable. */
const CONTROLLER = Symbol('breakwater.controller');

/** A pass's controller: {@link follow} ends its wait for headers through `END`. */
type Pass = Follower;

/**
 * Sets the call's total deadline, unless one already set (an outer timeout or deadline,
 * or this one on an earlier pass) comes first: the nearest deadline wins, as nested
 * deadlines do elsewhere (Go's context). "First set wins" let an outer `totalMs` of
 * 120 s silently void an inner one of 5 s.
 */
function startDeadline(call: Call, totalMs: number, now: number): void {
  if (call.deadline === undefined || now + totalMs < call.deadline) {
    call.deadline = now + totalMs;
    call.totalMs = totalMs;
  }
}

/** Ties `controller`'s life to the response and its body, which may outlive the call. */
function keepAlive(response: Response, controller: AbortController): void {
  (response as Response & { [CONTROLLER]?: AbortController })[CONTROLLER] = controller;
  const body = response.body as (ReadableStream & { [CONTROLLER]?: AbortController }) | null;
  if (body !== null) body[CONTROLLER] = controller;
}

/**
 * Deadlines for response headers: per pass (`attemptMs`) and for the whole call
 * (`totalMs`). A missed deadline rejects with `TimeoutError` (`scope` says which)
 * and aborts the request; the caller's own abort still comes back as its own reason.
 * The call ends at the deadline, or at the caller's abort, even when a layer below
 * ignores the abort (a custom `fetch` that drops `init.signal`): a response that still
 * arrives later has its body cancelled, and a later rejection is dropped. Nor does a
 * layer below start another send for the ended pass (a `retry()` on a late 503, an
 * `auth()` resend on a late 401): the end of the chain refuses it with an `AbortError`,
 * until a layer above this timeout starts a new pass of the call.
 *
 * @example
 * ```ts
 * const fetch = createFetch({
 *   use: [timeout({ totalMs: 120_000 }), retry(), timeout({ attemptMs: 30_000 }), captureStatus()],
 * });
 * ```
 */
export function timeout(options: TimeoutOptions): Middleware {
  const { attemptMs, totalMs } = validate(timeoutSchema, options, 'timeout()');
  if (attemptMs === undefined && totalMs === undefined) {
    throw new TypeError('invalid options for timeout():\n  - set attemptMs, totalMs or both');
  }
  const self = async function timeout(call: Call, next: Next): Promise<Response> {
    const now = Date.now();
    if (totalMs !== undefined) startDeadline(call, totalMs, now);
    const remaining = call.remainingMs(now);
    const attemptLimit = attemptMs ?? Infinity;
    // Whichever deadline comes first names the error.
    const scope = attemptLimit < remaining ? 'attempt' : 'total';
    const ms = scope === 'attempt' ? attemptLimit : (call.totalMs ?? remaining);
    const outer = call.signal;
    if (outer?.aborted) throw abortReason(outer);
    // A pass of this timeout that ended at its deadline left a mark: a layer above (a
    // retry) now starts a new pass, which lifts it. Another timeout's mark is an outer
    // deadline: this pass runs for a call that is over (a retry between the two, still
    // running), and starts nothing.
    const ended = (call as MarkedCall)[ENDED];
    if (ended) {
      if (ended.by !== self) throw ended.error;
      (call as MarkedCall)[ENDED] = undefined;
    }

    const controller: Pass = new AbortController();
    if (outer) follow(outer, controller);
    let timer: ReturnType<typeof setTimeout> | undefined;
    let expired = false;
    /** The deadline's error, when it passed while a layer below read a failure's body start. */
    let late: TimeoutError | undefined;
    call.signal = controller.signal;
    try {
      // The abort alone is not enough: a custom fetch or a middleware below that ignores
      // the signal would hold the caller past the deadline, so the timer ends the wait
      // itself, and so does the caller's abort (through follow()'s shared listener). One
      // promise, settled by whichever comes first.
      const response = await new Promise<Response>((resolve, reject) => {
        // Built only for a call with a caller signal: a closure more on every call cost
        // about 0.5 µs (Node 20, stub fetch).
        if (outer) {
          controller[END] = () => {
            expired = true;
            reject(controller.signal.reason);
          };
        }
        const expire = (starting?: true): void => {
          const error = new TimeoutError({
            scope,
            ms,
            request: requestSummary(call.key, call.method, call.href),
          });
          // Marks the call so that nothing below sends for this pass any more (the end
          // of the chain checks). An AbortError: a layer below sees it as a cancel, so
          // it neither retries nor counts it against the server. A caller's abort needs
          // no mark: the end of the chain checks the caller's own signal.
          const mark = { by: self, error: new DOMException(error.message, 'AbortError') };
          // The headers are in and a layer below reads a failure's body start (status.ts):
          // the deadline is met, and the answer goes up as it is. But nothing more is
          // sent for this pass: an auth() below that resent its 401 after the read went
          // out with no deadline left, into a server that may never answer. (A pass that
          // is only starting has no headers: a read still running is another pass's.)
          if (!starting && call.bag.has(BODY_READ)) {
            late = error;
            (call as MarkedCall)[ENDED] = mark;
            return;
          }
          expired = true;
          controller.abort(error);
          if (controller.signal.reason === error) (call as MarkedCall)[ENDED] = mark;
          // The caller's own abort, if it came first, stays the reason.
          reject(controller.signal.reason);
        };
        // A pass that starts with no time left (the event loop was blocked past the
        // deadline, so the outer timer could not fire yet) ends now, before anything is
        // sent: a timer of 0 still let the request out (Bun's reached the server) for a
        // caller who then got a TimeoutError.
        if (remaining <= 0) return expire(true);
        timer = setTimeout(expire, Math.min(attemptLimit, remaining));
        // A rejection after the deadline is dropped here (so none goes unhandled); a
        // response after it has its body cancelled, freeing the connection.
        next(call).then((response) => {
          if (expired) dropBody(response);
          else resolve(response);
        }, reject);
      });
      if (outer) keepAlive(response, controller);
      return response;
    } catch (error) {
      // A send below refused after the deadline passed during a body read: the deadline's
      // error, not the refusal's AbortError. (Any other failure after the read, a
      // throwOnStatus() error say, is the answer's, and stays.)
      const reason =
        controller.signal.reason ?? (error === (call as MarkedCall)[ENDED]?.error ? late : undefined);
      // The runtime may reject with its own AbortError rather than our reason.
      if (reason instanceof TimeoutError && !outer?.aborted) throw reason;
      throw error;
    } finally {
      clearTimeout(timer);
      // A mark left while this pass still ran is an inner timeout's (an outer deadline
      // would have ended this pass first, unless it passed during a body read: a new pass
      // under it then starts with no time left, and ends at once): this pass took its
      // error, so the mark is now this timeout's, lifted when a layer above starts a new
      // pass (a retry above both).
      const mark = (call as MarkedCall)[ENDED];
      if (mark && !expired) mark.by = self;
      // The controller may live on with the response (keepAlive): it must not keep this
      // call, its body included, reachable through the closure.
      if (outer) controller[END] = undefined;
      call.signal = outer;
    }
  };
  return self;
}

/**
 * Sets the call's total deadline without a timer of its own: for chains where an
 * inner `timeout({ attemptMs })` bounds every attempt by the time left (it names the
 * error `scope: 'total'` when the total deadline is the nearer one), and retry and
 * pacing never start a wait past it. `definePolicy()` uses this, saving one
 * `AbortController` (about 2 µs on Node 20) per call.
 */
export function deadline(totalMs: number): Middleware {
  validate(timeoutSchema, { totalMs }, 'deadline()');
  return async function deadline(call: Call, next: Next): Promise<Response> {
    startDeadline(call, totalMs, Date.now());
    return next(call);
  };
}
