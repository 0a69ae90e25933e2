/**
 * @module
 * A Hono server calling its own upstreams through a breakwater policy:
 * `upstream(policy)` puts a per-request `fetch` on the context whose calls stop when
 * the incoming request's client goes away, and `errorResponses()` turns what that
 * fetch throws (open circuit, upstream's own Retry-After, timeout, network failure)
 * into the problem+json responses a client can act on: 503 with `Retry-After`, 504,
 * 502. Bodies name the upstream by its key, never its URL or credentials.
 */

import type { Context, ErrorHandler, MiddlewareHandler, Next } from 'hono';
import * as z from 'zod/mini';
import type { AuthOptions } from '../../src/auth.ts';
import {
  Call,
  type FetchLike,
  follow,
  type KeyOption,
  type Middleware,
  RAN,
  readable,
} from '../../src/call.ts';
import {
  BreakwaterError,
  CircuitOpenError,
  GateClosedError,
  HttpStatusError,
  isAbort,
  NetworkError,
  RetryAfterTooLongError,
  TimeoutError,
} from '../../src/errors.ts';
import type { BreakwaterEvent } from '../../src/events.ts';
import {
  authOptionSchema,
  functionOption,
  keyOptionSchema,
  onEventSchema,
  policySchema,
  validate,
} from '../../src/options.ts';
import type { Policy, PolicyFetchOptions } from '../../src/policy.ts';
import { DEFAULT_MAX_RETRY_AFTER_MS } from '../../src/retry.ts';
import { statusError, statusesSchema } from '../../src/status.ts';
import { MAX_DELAY_MS, shouldRetryHeader } from '../../src/timing.ts';
import {
  answer,
  CLIENT_CLOSED_STATUS,
  EXPOSE,
  exposeClientHeaders,
  problemResponse,
  retryAfterSeconds,
} from './problem.ts';

/** The statuses whose server delay an upstream answer passes on to our client as a 503 with `Retry-After`. */
const DELAY_STATUSES: ReadonlySet<number> = new Set([429, 503]);

/** Refusals before a request runs that a resend meets again until someone acts (RFC 9110 §15.5.2, .4, .8). */
const AUTH_STATUSES = [401, 403, 407];

/**
 * Statuses that show a request did not run ("rejected before executing" in breakwater's
 * classify table): the refusals above, 408 and 429 (RFC 9110 §15.5.9, RFC 6585 §4).
 * `idempotency()` takes a handler answering one at its word and frees the key, so a
 * retry runs the handler.
 */
export const NOT_RUN_STATUSES: readonly number[] = [408, 429, ...AUTH_STATUSES];

/**
 * Incoming requests whose outgoing calls do not end with their client: a keyed
 * request under `idempotency()` runs to its end, so the client's retry finds the real
 * answer recorded, not the 499 of a call cut off halfway (for the record's `ttlMs`).
 */
export const RUN_TO_END: WeakSet<Request> = new WeakSet();

/**
 * Incoming keyed requests whose handler failed with an upstream's refusal that no retry
 * would change (its 401, 403 or 407, thrown by `throwOnStatus`, none of whose calls can
 * have run): `idempotency()` frees the key, so a retry once the gateway's credentials are
 * fixed runs the handler, but the 502 invites no retry (`x-should-retry` stays unset).
 */
export const NOT_RUN_REQUESTS: WeakSet<Request> = new WeakSet();

/** Methods with no effect on the server (RFC 9110 §9.2.1): a call by one leaves nothing to run twice. */
const SAFE_METHOD = /^(GET|HEAD|OPTIONS|TRACE)$/i;

/**
 * Incoming requests a call of which through `c.var.fetch` may have had an effect
 * upstream: by a method that is not safe, it got an answer, or failed after its request
 * may have been sent (on any attempt).
 */
const REACHED: WeakSet<Request> = new WeakSet();

/**
 * How many calls of each incoming request through `c.var.fetch`, by a method that is not
 * safe, are still on their way: each may yet run upstream. A handler that makes two at
 * once (`Promise.all`) fails with the first to fail, while the other may be running.
 */
const PENDING: WeakMap<Request, number> = new WeakMap();

/**
 * What `c.var.fetch` threw for a call that had no effect upstream, and that says the
 * upstream is not taking it now: an open circuit or a paused key, a refused connection,
 * a wait past the cap (see {@link sortFailures}), or an answer that shows it did not run,
 * thrown by `throwOnStatus` (see {@link upstream}).
 */
const UNSENT: WeakSet<object> = new WeakSet();

/**
 * What a call through upstream()'s or proxy()'s chain threw, or answered, after a pass of
 * it may have run upstream (see {@link sortFailures}).
 */
const RAN_FAILURES: WeakSet<object> = new WeakSet();

/**
 * Whether `error` says the upstream is not taking a call now: an open circuit or a paused
 * key, a refused connection, a wait past the cap (a 429's, or a 503's that may have run it:
 * see {@link mayHaveRun}).
 */
export function refusal(error: unknown): boolean {
  return (
    error instanceof CircuitOpenError ||
    error instanceof RetryAfterTooLongError ||
    (error as NetworkError | undefined)?.sent === 'no'
  );
}

/**
 * Outermost in upstream()'s and proxy()'s chains: sorts what a call fails with by what
 * retry() knew of its passes ({@link RAN}: a 503 before the last, a 429 after a 303 fetch
 * followed (the POST ran), an attempt that may have left). Into {@link RAN_FAILURES} when a
 * pass may have run it; into {@link UNSENT} when it is a {@link refusal} and the call could
 * not have an effect: by a safe method, or none of its passes can have run. Without retry()
 * (one attempt), the refusal itself shows its attempt did not run.
 */
export const sortFailures: Middleware = async function sortFailures(call, next) {
  try {
    const response = await next(call);
    // An answer too (see upstream()).
    if (call.bag.has(RAN)) RAN_FAILURES.add(response);
    return response;
  } catch (error) {
    const ran = call.bag.has(RAN);
    // A thrown primitive (a string abort reason) cannot be remembered: it is no refusal.
    if (ran && Object(error) === error) RAN_FAILURES.add(error as object);
    if (refusal(error) && (SAFE_METHOD.test(call.method) || !ran)) UNSENT.add(error as object);
    throw error;
  }
};

/**
 * Whether a call through a chain with {@link sortFailures} outermost failed with `error`
 * (or answered it, a response) after a pass of it may have run upstream: a resend of the
 * call may run it twice.
 */
export function mayHaveRun(error: unknown): boolean {
  return RAN_FAILURES.has(error as object);
}

/** What `upstream()` puts on the context: `c.var.fetch`. */
export interface UpstreamVariables {
  /** A fetch through the policy whose calls are aborted when the incoming request's client goes away. */
  fetch: FetchLike;
}

/** The Hono env `upstream()` provides: `new Hono<UpstreamEnv>()`. */
export interface UpstreamEnv {
  /** What `c.var` (and `c.get()`) holds: `fetch`, through the policy (see {@link UpstreamVariables}). */
  Variables: UpstreamVariables;
}

/** Options for {@link upstream}. */
export interface UpstreamOptions {
  /**
   * The upstream's name (breaker, pacing, messages, problem bodies), or a function of
   * the URL. Default: the policy's `name`, else the URL's origin. Name it: the key is
   * what error responses show your clients.
   */
  key?: KeyOption | undefined;
  /** Receives typed events from every call (`attempt`, `retry`, `breaker`, ...). Default: none. */
  onEvent?: ((event: BreakwaterEvent) => void) | undefined;
  /** Stamps and refreshes the upstream's token (`auth()` options), shared by every request. Default: none. */
  auth?: AuthOptions | undefined;
  /**
   * Turn failure responses into `HttpStatusError` (which `errorResponses()` maps to
   * 503 / 502): `true` for every status ≥ 400, or a list of statuses. Default
   * `false`: failure responses come back as responses, as from fetch (after the
   * policy's retries), for the handler to look at.
   */
  throwOnStatus?: boolean | readonly number[] | undefined;
}

/** Options for {@link errorResponses}. */
export interface ErrorResponsesOptions {
  /**
   * The policy the upstream calls use: its `retry.maxRetryAfterMs` caps every
   * `Retry-After` sent. Ignored when `maxRetryAfterMs` is given.
   */
  policy?: Policy | undefined;
  /**
   * The longest `Retry-After` sent to a client, in ms, whatever the upstream asked
   * for: a misbehaving upstream must not be able to send every client away for a
   * day. Default: the policy's `retry.maxRetryAfterMs`, else 60,000.
   */
  maxRetryAfterMs?: number | undefined;
  /**
   * Answers every error that is not breakwater's (nor Hono's `HTTPException`, which
   * keeps its own response). Default: a bare 500 problem with no details, so no
   * internals leak.
   */
  fallback?: ErrorHandler | undefined;
}

const upstreamSchema = z.optional(
  z.strictObject({
    key: keyOptionSchema,
    onEvent: onEventSchema,
    auth: authOptionSchema,
    throwOnStatus: z.optional(z.union([z.boolean(), statusesSchema])),
  }),
);

const errorResponsesSchema = z.optional(
  z.strictObject({
    policy: z.optional(policySchema),
    maxRetryAfterMs: z.optional(
      z.number().check(z.int('must be a whole number'), z.minimum(0), z.maximum(MAX_DELAY_MS)),
    ),
    fallback: z.optional(functionOption<ErrorHandler>()),
  }),
);

/** The caller's own signal for a fetch call, if any. */
function ownSignal(input: string | URL | Request, init: RequestInit | undefined): AbortSignal | undefined {
  return init?.signal ?? (input instanceof Request ? input.signal : undefined);
}

/** Keeps a call's controller alive as long as its response's body is reachable. */
const CONTROLLER = Symbol('breakwater.upstream.controller');

/**
 * What the runtime rejects with when the incoming request is aborted: node-server
 * aborts with a string, and Hono sends only `Error`s to `onError`, so a non-Error
 * reason becomes an `AbortError`.
 */
function abortError(reason: unknown): unknown {
  if (reason instanceof Error) return reason;
  return new DOMException('the client closed the request', 'AbortError');
}

/**
 * Puts a per-request `fetch` through `policy` on the context (`c.var.fetch`). Its
 * calls are aborted when the incoming request is (its client went away), as well
 * as by the caller's own signal, so an agent server does not keep an upstream busy
 * for nobody.
 *
 * The chain is built once; per request it costs one closure. A call without a
 * signal of its own gets the incoming request's signal as is (no listener); a call
 * with one gets a small controller that follows both, through one listener per
 * signal however many calls share it, held only as long as the call, its response or
 * its body is. A call made after the handler returned (a streaming handler's) still
 * ends with its client, and so does the body it is still reading.
 *
 * @example
 * ```ts
 * import { Hono } from 'hono';
 * import { definePolicy } from 'breakwater';
 * import { errorResponses, upstream, type UpstreamEnv } from 'breakwater/hono';
 *
 * const github = definePolicy({ name: 'github-mcp', retry: { attempts: 2 } });
 * const app = new Hono<UpstreamEnv>();
 * app.use('/tools/*', upstream(github, { throwOnStatus: true }));
 * app.get('/tools/issues', async (c) => {
 *   const res = await c.var.fetch('https://api.github.com/repos/o/r/issues');
 *   return c.json(await res.json());
 * });
 * app.onError(errorResponses({ policy: github })); // open circuit → 503 + Retry-After, timeout → 504
 * ```
 */
export function upstream(policy: Policy, options?: UpstreamOptions): MiddlewareHandler<UpstreamEnv> {
  validate(policySchema, policy, 'upstream(policy)');
  const valid = validate(upstreamSchema, options, 'upstream()') ?? {};
  // policy.fetch() takes an absent option as undefined, so no spreads are needed.
  const chained = policy.fetch(undefined, {
    key: valid.key,
    onEvent: valid.onEvent,
    auth: valid.auth,
    use: [sortFailures],
  } as PolicyFetchOptions);
  const keyOption = valid.key ?? policy.resolved.name;
  const throwing = valid.throwOnStatus ?? false;
  const failing = Array.isArray(throwing) ? new Set<number>(throwing) : undefined;
  const fails = (status: number): boolean =>
    failing === undefined ? throwing === true && status >= 400 : failing.has(status);

  return async function upstream(c, next) {
    // Behind cors(): a page on another origin sees errorResponses()' Retry-After.
    exposeClientHeaders(c);
    const raw = c.req.raw;
    const incoming = raw.signal;

    const fetch: FetchLike = async function upstreamFetch(input, init) {
      const own = ownSignal(input, init);
      // Asked at each call, not on entry: an idempotency() registered after this
      // middleware (a global upstream(), a keyed route) marks the request only later.
      const runToEnd = RUN_TO_END.has(raw);
      let controller: AbortController | undefined;
      if (!runToEnd && own !== undefined && own !== incoming) {
        controller = new AbortController();
        follow(own, controller);
        follow(incoming, controller);
      }
      // Read as the chain reads it (see readable()): a spread of a class's init kept none
      // of its getters, and a POST went out as a bodiless GET.
      const callInit: RequestInit = {
        ...readable(init),
        signal: controller?.signal ?? (runToEnd ? (own ?? null) : incoming),
      };
      const effect = !SAFE_METHOD.test(callInit.method ?? (input as Request).method ?? 'GET');
      let response: Response;
      if (effect) PENDING.set(raw, (PENDING.get(raw) ?? 0) + 1);
      try {
        response = await chained(input, callInit);
      } catch (error) {
        if (effect && !UNSENT.has(error as object)) REACHED.add(raw);
        throw incoming.aborted && error === incoming.reason ? abortError(error) : error;
      } finally {
        if (effect) PENDING.set(raw, (PENDING.get(raw) as number) - 1);
      }
      const { status } = response;
      const thrown = fails(status);
      // An answer that shows the call did not run (a 429 or 408, RFC 6585 §4 and RFC 9110
      // §15.5.9; a 401, 403 or 407, refused before it ran; or x-should-retry: true), after
      // passes none of which can have run it:
      // thrown, it is a refusal, as an open circuit is. Kept as a keyed request's outcome,
      // its 503 "retry in 1 s" was replayed to every retry with the key for the record's
      // 24 h, and the order was never placed.
      const refused =
        thrown &&
        (!effect || !mayHaveRun(response)) &&
        (NOT_RUN_STATUSES.includes(status) || shouldRetryHeader(response.headers) === true);
      if (effect && !refused) REACHED.add(raw);
      // The body may stream on (a model's tokens relayed to an SSE stream, whose writes
      // go nowhere once the client left): the controller lives as long as the body does.
      const body = response.body as (ReadableStream & { [CONTROLLER]?: unknown }) | null;
      if (body !== null) body[CONTROLLER] = controller;
      if (!thrown) return response;
      const error = await statusError(new Call(input, callInit, keyOption, undefined), response);
      if (refused) UNSENT.add(error);
      throw error;
    };
    c.set('fetch', fetch);
    await next();
  };
}

/** Whether an error is Hono's own `HTTPException` (or anything carrying its response). */
function hasResponse(err: unknown): err is { getResponse: () => Response } {
  return typeof (err as { getResponse?: unknown } | null)?.getResponse === 'function';
}

/**
 * A key that is a URL: the default one (the target's origin) when nothing names the
 * upstream, an internal address that is no name for clients to see.
 */
const URL_KEY = /^https?:\/\//i;

/** The upstream's key, as an error names it; never a URL (a key that is one is left out). */
function keyOf(err: BreakwaterError): string | undefined {
  const key = err instanceof CircuitOpenError || err instanceof GateClosedError ? err.key : err.request?.key;
  return key !== undefined && URL_KEY.test(key) ? undefined : key;
}

/** The title of each status a breakwater error is answered with. */
const TITLES: Readonly<Record<number, string>> = {
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
};

/**
 * The problem response for a breakwater error, or `undefined` for one this mapping
 * does not know (it then falls back like any other error).
 */
function breakwaterProblem(err: BreakwaterError, capMs: number, now: number): Response | undefined {
  const key = keyOf(err);
  const who = key === undefined ? 'the upstream' : `upstream "${key}"`;
  const capped = (ms: number): number => Math.min(Math.max(0, ms), capMs);
  let status = 503;
  let detail: string;
  let waitMs: number | undefined;

  if (err instanceof CircuitOpenError || err instanceof GateClosedError) {
    // Not accepting means a wait remains, even for a retryAt already reached (a clock
    // step, a custom gate's error): never Retry-After: 0, which would send every client
    // straight back.
    waitMs = capped(Math.max(1, err.retryAt.getTime() - now));
    detail = `${who} is not accepting requests right now`;
  } else if (err instanceof RetryAfterTooLongError) {
    waitMs = capped(err.retryAfterMs);
    detail = `${who} asked for a pause`;
  } else if (err instanceof HttpStatusError) {
    detail = `${who} answered ${err.status}`;
    if (DELAY_STATUSES.has(err.status)) {
      if (err.retryAfterMs !== undefined) waitMs = capped(err.retryAfterMs);
      detail += ' (overloaded or rate-limited)';
    } else {
      status = 502;
    }
  } else if (err instanceof TimeoutError) {
    status = 504;
    detail = `${who} did not answer within ${err.ms} ms`;
  } else if (err instanceof NetworkError) {
    status = 502;
    detail = `could not get an answer from ${who} (${err.code})`;
  } else {
    return undefined;
  }
  if (waitMs !== undefined) detail += `; retry in ${retryAfterSeconds(waitMs)} s`;
  // JSON leaves out `upstream` when the key is unknown.
  return problemResponse(
    { status, title: TITLES[status] as string, detail, code: err.code, upstream: key },
    waitMs,
  );
}

/**
 * An `app.onError` handler that answers breakwater's errors with problem+json
 * (RFC 9457) a client can act on; every body names the upstream by key (`upstream`)
 * and the error's `code`, never a URL, a query string or a credential.
 *
 * | error | response |
 * | --- | --- |
 * | `CircuitOpenError` (open, half-open, paced), `GateClosedError` | 503, `Retry-After` = time until `retryAt` |
 * | `RetryAfterTooLongError` | 503, `Retry-After` = the upstream's wait |
 * | `HttpStatusError` 429 / 503 | 503, with the upstream's `Retry-After` when it sent one |
 * | other `HttpStatusError`, `NetworkError` | 502 |
 * | `TimeoutError` | 504 |
 * | the incoming request was aborted | 499 (for logs: the client is gone) |
 * | Hono's `HTTPException` | its own response |
 * | anything else | `fallback`, default a bare 500 problem |
 *
 * Every `Retry-After` is delay-seconds, rounded up, and at most `maxRetryAfterMs`.
 *
 * Each answer carries the headers set for the request, as a `c.json()` answer does (a
 * request id, `cors()`'s), but those that describe another body. Mounted with
 * `app.use()` too (the same function), after the middlewares whose headers the answers
 * keep, it notes the headers set in front of it, and an answer to a throw behind it
 * carries those only, as they were: a header the handler set or changed before it threw
 * (`Cache-Control: public, max-age=3600`, an ETag, a Location, a half-done login's
 * Set-Cookie) is removed, a front's value it overwrote or removed put back. But
 * Access-Control-Expose-Headers, which `upstream()` behind it adds for a page on another
 * origin to read `Retry-After`. Not mounted, it cannot tell them apart and keeps them all.
 *
 * For a keyed request under `idempotency()`, the answer for a `c.var.fetch` call that
 * never left (an open circuit or a paused key, a refused connection: 503, 502) or that
 * the upstream refused unrun (a 429 or 408, or `x-should-retry: true`; not one fetch
 * reached through a redirect, for a POST answered 303 See Other ran), asking for a wait
 * past the cap (503) or thrown by `throwOnStatus` (503, 502), none of whose attempts before can have run (the policy's retries
 * know; a call by GET, HEAD, OPTIONS or TRACE has no effect to run twice), says
 * `x-should-retry: true` unless another call of the same request, by a method other
 * than GET, HEAD, OPTIONS or TRACE, got an answer, may have been sent, or is still on its
 * way (made at the same time, as with `Promise.all`): `idempotency()`
 * then frees the key instead of keeping that passing state as the key's outcome, and the
 * client's retry with the key runs the handler once the upstream is back. What the handler
 * did itself before the call (a database write) runs again then.
 *
 * @example
 * ```ts
 * const policy = definePolicy({ name: 'github-mcp' });
 * const errors = errorResponses({ policy });
 * app.use(cors(), requestId(), errors); // the 500 keeps these headers, not the handler's
 * app.onError(errors);
 * // { "type": "about:blank", "status": 503, "title": "Service Unavailable",
 * //   "detail": "upstream \"github-mcp\" is not accepting requests right now; retry in 4 s",
 * //   "code": "CIRCUIT_OPEN", "upstream": "github-mcp" }   + Retry-After: 4
 * ```
 */
export function errorResponses(options?: ErrorResponsesOptions): ErrorHandler & MiddlewareHandler {
  const valid = validate(errorResponsesSchema, options, 'errorResponses()') ?? {};
  // The headers set in front of the mount, per request: a copy, as @hono/node-server's
  // Response may hold the very Headers the handler goes on to set.
  const fronts = new WeakMap<Context, Headers>();
  const capMs =
    valid.maxRetryAfterMs ?? valid.policy?.resolved.retry.maxRetryAfterMs ?? DEFAULT_MAX_RETRY_AFTER_MS;
  const fallback = valid.fallback;

  function respond(err: Error, c: Context): Response | Promise<Response> {
    if (hasResponse(err)) return err.getResponse();
    const { raw } = c.req;
    const incoming = raw.signal;
    if (incoming.aborted && isAbort(err, incoming)) {
      return problemResponse({
        status: CLIENT_CLOSED_STATUS,
        title: 'Client Closed Request',
        detail: 'the client went away',
      });
    }
    if (err instanceof BreakwaterError) {
      const response = breakwaterProblem(err, capMs, Date.now());
      if (response !== undefined) {
        // A keyed request under idempotency() whose upstream call never left (an open
        // circuit, a refused connection) or was refused unrun (a 429), none of whose calls
        // can have had an effect upstream (see sortFailures): this answer is a passing state, not the
        // request's outcome. Stored, it was replayed to every retry with the key for the
        // record's 24 h, though it says "retry in N s"; `x-should-retry: true` has
        // idempotency() free the key instead, so the retry runs the handler anew. Stripe
        // stores only what began to run; the draft leaves other errors to the server. What
        // the handler did itself before the call (a database write) is not seen here: it
        // runs again with the retry.
        // Another such call still on its way (a Promise.all's other half) may run yet.
        if (UNSENT.has(err) && RUN_TO_END.has(raw) && !REACHED.has(raw) && !PENDING.get(raw)) {
          if (AUTH_STATUSES.includes((err as HttpStatusError).status)) NOT_RUN_REQUESTS.add(raw);
          else response.headers.set('x-should-retry', 'true');
        }
        return response;
      }
    }
    if (fallback !== undefined) return fallback(err, c);
    return problemResponse({ status: 500, title: 'Internal Server Error' });
  }

  return async function errorResponse(
    err: Error | Context,
    c: Context | Next,
  ): Promise<Response | undefined> {
    if (typeof c === 'function') {
      fronts.set(err as Context, new Headers((err as Context).newResponse(null).headers));
      await c();
      return;
    }
    const front = fronts.get(c);
    if (front !== undefined) keepFront(c, front);
    // Headers set in front (a request id) reach the error's answer, as a c.json() answer's do.
    return answer(c, await respond(err as Error, c));
  } as ErrorHandler & MiddlewareHandler;
}

/**
 * Puts the headers set for `c` back as they were in `front`: those the handler set or
 * changed before it threw are removed (a `Cache-Control: public, max-age=3600`, an ETag,
 * a Location, a half-done login's Set-Cookie would have a CDN cache the 500, a client keep
 * a cookie of a request that failed), a front's value it overwrote or removed is the
 * front's again (its `Cache-Control: no-store` over the handler's `public`). But
 * Access-Control-Expose-Headers: upstream() and rateLimit() behind the mount add the names
 * a page on another origin needs to read these answers' Retry-After.
 */
function keepFront(c: Context, front: Headers): void {
  try {
    // Names first: @hono/node-server's Response may hold the very Headers c.header() sets.
    for (const name of new Set(c.newResponse(null).headers.keys())) {
      if (name !== EXPOSE) c.header(name, undefined);
    }
    for (const [name, value] of front) if (name !== EXPOSE) c.header(name, value, { append: true });
  } catch {
    // A c.res with immutable headers keeps them (see answer()).
  }
}
