/**
 * @module
 * `breakwater/ky`: ky options built from a breakwater policy, so one layer (the
 * policy) decides about retries, waits, breakers and deadlines, and ky keeps the
 * rest of what it does (`json`, `searchParams`, `prefixUrl` / `prefix`, hooks, progress,
 * `HTTPError` by default).
 *
 * `kyOptions(policy)` sets three ky options: `fetch` (the policy's chain), `retry`
 * (off: ky's own retry would multiply the policy's, resend POSTs it cannot prove
 * safe to the policy, and knows no breaker or budget) and `timeout` (off: ky's timer
 * spans the whole fetch call, the policy's retries and server-requested waits
 * included, so its 10 s default would cut a wait the policy chose to make; the
 * policy's own deadlines cover the same ground). It adds one `beforeRequest` hook
 * so ky's in-memory bodies can be resent (see {@link kyOptions}; with ky 2, an `init`
 * hook puts it first), and with `errors: 'breakwater'` one `beforeError` hook.
 *
 * Only types are imported from ky: importing this module loads no ky code, so it
 * works with the ky 1.x or 2.x the app has. ky 2 hands each hook one state object
 * (`{ request, options, error, retryCount }`) where ky 1 passes them as arguments: the
 * hooks here take either.
 *
 * @example
 * ```ts
 * import ky from 'ky';
 * import { definePolicy } from 'breakwater';
 * import { kyOptions } from 'breakwater/ky';
 *
 * // ky 1 names the base `prefixUrl`; ky 2 `prefix` (or `baseUrl`) and throws on `prefixUrl`.
 * const api = ky.create({ prefix: 'https://api.example.com/v1/' }).extend(kyOptions(definePolicy()));
 * const things = await api.get('things').json(); // a 503 + Retry-After: 2 is waited out, then sent again
 * ```
 */

import type { BeforeErrorHook, BeforeRequestHook, HTTPError, Options } from 'ky';
import * as z from 'zod/mini';
import { Call, type FetchLike } from '../../src/call.ts';
import type { HttpStatusError } from '../../src/errors.ts';
import { clientOptionsShape, policySchema, validate } from '../../src/options.ts';
import type { Policy, PolicyClientOptions } from '../../src/policy.ts';
import { SNAPSHOT, type Snapshotted, statusError } from '../../src/status.ts';

/** The subpath this module is published under. */
export const ADAPTER: 'breakwater/ky' = 'breakwater/ky';

/** Which error a failure status reaches the caller as (when ky's `throwHttpErrors` says to throw). */
export type KyErrorForm = 'ky' | 'breakwater';

/** Options for {@link kyOptions}: what the policy's chain is built with, and the error form. */
export interface KyPolicyOptions extends PolicyClientOptions {
  /**
   * `'ky'` (default): a failure status throws ky's own `HTTPError`, as without
   * breakwater, so existing `isHTTPError()` checks and `beforeError` hooks keep
   * working. `'breakwater'`: it throws breakwater's `HttpStatusError` instead, with
   * `status`, `retryAfterMs`, `serverMessage`, the start of the body, safe headers and
   * a redacted URL; the response body is then cancelled (read only up to 2 KiB; ky 2
   * reads a failure's body into `HTTPError.data` itself, up to 10 MiB, before any
   * `beforeError` hook runs). It has no `cause`: ky's `HTTPError` holds the request's headers, query and body.
   * Either way ky's `throwHttpErrors` decides whether a status throws at all.
   * With `'breakwater'`, leave ky's own retry off (or give it a `shouldRetry`): ky
   * retries an `HTTPError` only for its `retry.statusCodes`, but any other error, this
   * one included, whatever the status (a 404 GET sent `limit + 1` times).
   */
  errors?: KyErrorForm | undefined;
}

/**
 * What ky 2 hands a hook: one state object, where ky 1 passes the request, the normalized
 * options and a state (or, to `beforeError`, the error and a state) as arguments. Typed by
 * shape: this module is typed by ky 1, and imports nothing from ky at run time.
 */
interface KyTwoState {
  request: Request;
  options: object;
  /** `beforeError` only: the error about to be thrown, of any kind (ky 1 calls it for `HTTPError` only). */
  error?: unknown;
  retryCount?: number;
}

/**
 * Whether a hook's first argument is ky 2's state object. ky 1's is a `Request`, or an
 * `HTTPError` (which has a `request` and `options` too, but no `retryCount`).
 */
function isKyTwoState(value: unknown): value is KyTwoState {
  return (
    typeof value === 'object' &&
    value !== null &&
    'request' in value &&
    'options' in value &&
    'retryCount' in value
  );
}

const optionsSchema = z.optional(
  z.strictObject({
    ...clientOptionsShape,
    errors: z.optional(z.enum(['ky', 'breakwater'])),
  }),
);

/**
 * Whether a body can be sent again as is (DESIGN.md §2): everything but a stream and
 * FormData. FormData is left out on purpose: the Request ky built from it already
 * carries a `Content-Type` with its multipart boundary, and sending the FormData
 * again would encode it with a new boundary the header does not name.
 */
function isReplayable(body: unknown): body is BodyInit {
  return (
    typeof body === 'string' ||
    body instanceof ArrayBuffer ||
    ArrayBuffer.isView(body) ||
    body instanceof Blob ||
    body instanceof URLSearchParams
  );
}

/**
 * What a `Request` says that fetch's init can say again (Fetch standard, RequestInit):
 * kyOptions' fetch copies these from the Request ky built into the init it sends the
 * request's URL with. Not `body` (the one remembered goes instead), `duplex` (for a stream
 * body only) nor `window`. Spelled out: `Request.prototype` is not the runtime's own where
 * a server library replaced the global (@hono/node-server does), and a for...in over it
 * costs 5 µs a call on Node 20.
 */
const REQUEST_FIELDS =
  'method headers signal credentials redirect cache integrity keepalive mode referrer referrerPolicy'.split(
    ' ',
  );

/**
 * The failure `response` with a body to read. ky 2 reads a failure's body into
 * `HTTPError.data` (text, or the JSON it parsed) before `beforeError` hooks run. The chain's
 * snapshot keeps what the server said on the response it returned, but not on one an
 * `afterResponse` hook built: that one's body is rebuilt from ky's `data`, so the error
 * keeps the server's message (hidden and redacted as any). Anything else as it is.
 */
function fromKyData(response: Response, data: unknown): Response {
  if (!response.bodyUsed || (response as Snapshotted)[SNAPSHOT] || data === undefined) return response;
  try {
    const { status, statusText, headers } = response;
    return new Response(typeof data === 'string' ? data : JSON.stringify(data), {
      status,
      statusText,
      headers,
    });
  } catch {
    // A status a Response cannot be built with (past 599), or data JSON cannot write: unread.
    return response;
  }
}

/**
 * ky options that send every request through `policy`: pass them to `ky.create()`
 * or `ky.extend()`. ky's own `retry` is set to `{ limit: 0 }` and its `timeout` to
 * `false`; the policy retries (safe resends only, server delays honoured, breaker and
 * budget consulted) and bounds each attempt and the whole call. A user abort through
 * ky's `signal` rejects with the runtime's `AbortError`, never retried.
 *
 * ky hands fetch a `Request`, whose body is a stream the policy could not resend. A
 * `beforeRequest` hook remembers the body ky built the request from (the `json`
 * string, a string, bytes, a Blob, URLSearchParams; bytes and params as ky copied them
 * when the call started) and the fetch sends that instead, so an idempotent or keyed
 * request can be resent. Stream and FormData bodies, the body of a `Request` you pass
 * to ky (a stream too), and any request with `onUploadProgress` are sent as ky built
 * them: once, unless the policy sets `retry.replayBodyBytes`. A `beforeRequest` hook
 * of yours that returns a new `Request` makes that request a stream-body one too, and
 * so does every ky retry (a forced `ky.retry()`): its request may carry a body of its
 * own. So does a hook given before this one (`ky.create({ hooks }).extend(kyOptions(...))`) that
 * returns any `Request`, even the one it got: ky 1 then skips the hooks after it, this
 * one included. Have such hooks return nothing (change `request.headers` in place),
 * or give them after `kyOptions`. ky 2 runs every `beforeRequest` hook, and this one
 * first (an `init` hook moves it to the front): a request any hook of yours replaces
 * goes as built, once; one it returns unchanged can still be resent.
 *
 * With ky's retry off, `beforeRetry` hooks never run and `ky.retry()` from an
 * `afterResponse` hook is capped too; to keep forced retries only, extend with
 * `retry: { limit: 2, shouldRetry: () => false }` (forced retries skip `shouldRetry`).
 *
 * Hooks merge as ky merges them (arrays concatenated). With `errors: 'breakwater'`,
 * `beforeError` hooks that run before this one (given earlier: `api.extend(kyOptions(...))`)
 * see ky's `HTTPError`; hooks added after it see the `HttpStatusError`.
 *
 * @example
 * ```ts
 * import ky from 'ky';
 * import { definePolicy, HttpStatusError } from 'breakwater';
 * import { kyOptions } from 'breakwater/ky';
 *
 * const policy = definePolicy({ name: 'orders', idempotencyKeys: true });
 * const api = ky.create({ prefix: 'https://orders.example.com/' }).extend(kyOptions(policy, { errors: 'breakwater' })); // ky 1: prefixUrl
 * try {
 *   await api.post('orders', { json: { item: 'book' } }).json(); // keyed: resent after a 503 with the same Idempotency-Key
 * } catch (error) {
 *   if (!(error instanceof HttpStatusError)) throw error;
 *   const { status, retryAfterMs, serverMessage } = error; // what the server said, parsed
 * }
 * ```
 */
export function kyOptions(policy: Policy, options?: KyPolicyOptions): Options {
  validate(policySchema, policy, 'kyOptions(policy)');
  const { fetch: base, errors, ...rest } = validate(optionsSchema, options, 'kyOptions()') ?? {};
  const { name, retry } = policy.resolved;
  const key = rest.key ?? name;
  /** The body each request was built from, for the requests whose body can be resent. */
  const bodies = new WeakMap<Request, BodyInit>();
  /**
   * Per ky options object, the request ky's hooks last saw: ky hands each call's
   * `beforeRequest` hooks and its `HTTPError` the same options object (a new one only
   * after a hook replaces the request), but not the same request (the error's is a clone).
   * Per init kyFetch sent a request's URL with (see there), that request.
   */
  const requests = new WeakMap<object, Request>();
  /** Per request sent, the chain's call: with the headers as sent, the policy's credentials included. */
  const calls = new WeakMap<Request, Call>();
  const chained = policy.fetch(base, {
    ...rest,
    use:
      errors === 'breakwater'
        ? [
            function rememberCall(call, next) {
              // The outermost middleware, on the first pass: the init is still kyFetch's own.
              const request = requests.get(call.init as object) ?? call.input;
              if (request instanceof Request) calls.set(request, call);
              return next(call);
            },
          ]
        : [],
  });

  const rememberBody = async function rememberBody(...args: Parameters<BeforeRequestHook>): Promise<void> {
    const [request, normalized, state] = isKyTwoState(args[0])
      ? [args[0].request, args[0].options as (typeof args)[1], args[0]]
      : args;
    requests.set(normalized, request);
    const { body, onUploadProgress } = normalized as typeof normalized & { onUploadProgress?: unknown };
    // Only ky's first request is built from `normalized.body`. A retry's request may be
    // one a hook or `ky.retry({ request })` made with another body, while the options
    // still hold the first (ky < 1.12 passes no state, and cannot replace requests; ky 2
    // runs beforeRequest hooks once, before any retry, and first: see putFirst).
    // A body ky was given is in its first request (a GET or HEAD with one throws).
    if (state?.retryCount || onUploadProgress || !isReplayable(body)) return;
    // Bytes and URLSearchParams can change under us: ky copied them into the Request
    // when the call started (fetch's "extract a body" copies), but this hook runs a
    // microtask later, after a caller that reuses its buffer or params for the next
    // call may have changed them. Those are resent as ky built them: read back as bytes
    // (the Request's headers already say their type: URLSearchParams' form encoding).
    bodies.set(
      request,
      typeof body === 'string' || body instanceof Blob ? body : await request.clone().arrayBuffer(),
    );
  };

  const fetch: FetchLike = function kyFetch(input, init) {
    // A WeakMap gives undefined for a key that is no object (a URL string), as for one it lacks.
    const body = bodies.get(input as Request);
    if (body === undefined) return chained(input, init);
    // The request goes with the body remembered instead of its stream. To the runtime's
    // fetch, as its URL with an init that says all ky put in it (REQUEST_FIELDS: ky's
    // headers, its signal, the caller's and ky's own, `credentials`, `redirect` and the
    // rest as ky set them; ky's `init` holds only options a Request has not). So the chain's end follows itself the redirects of a call that a
    // hop's failure, read as "never sent", would have resent (a method that is not
    // idempotent; any under `resend: 'never'`): a POST answered 303 whose GET finds the
    // server gone (a deploy, a crash: refused at the POST's own address) is not run twice.
    // It does so for a URL, not for a Request of such a method, whose body is a stream
    // that goes once; this one can go again. About 1 µs a call. To a fetch of the caller's
    // own, as the Request: fetch(request, { body }) sends it with the given body instead of
    // its stream (Fetch §5.4, Request constructor), and the chain leaves its redirects to
    // it. ky cancels the unread stream afterwards.
    const sent: Record<string, unknown> = {};
    if (!base)
      for (const name of REQUEST_FIELDS) sent[name] = (input as unknown as Record<string, unknown>)[name];
    Object.assign(sent, init, { body });
    requests.set(sent, input as Request);
    return chained(base ? input : (input as Request).url, sent);
  };

  /**
   * ky 2 (an `init` hook: ky 1 has none, and drops it) runs every beforeRequest hook,
   * those after one that returned a new `Request` included, where ky 1 stops there. Last
   * in line, rememberBody would meet a request a caller's hook built, whose body ky's
   * options do not describe, and send the options' body in its place. `init` hooks run
   * before ky builds the request, on this call's own copy of the options: moved to the
   * front of this call's beforeRequest hooks, rememberBody sees the request ky built from
   * them. A request a later hook returns is then not the one remembered, and goes as built,
   * once, as with ky 1.
   */
  const putFirst = function putFirst(call: { hooks?: { beforeRequest?: unknown[] } }): void {
    const { hooks } = call;
    const before = hooks?.beforeRequest;
    if (!before?.includes(rememberBody) || before[0] === rememberBody) return;
    call.hooks = {
      ...hooks,
      beforeRequest: [rememberBody, ...before.filter((hook) => hook !== rememberBody)],
    };
  };

  // The hooks take ky 1's arguments or ky 2's state object: typed as ky 1's (this module's types).
  const hooks = {
    beforeRequest: [rememberBody as BeforeRequestHook],
    init: [putFirst],
  } as NonNullable<Options['hooks']>;
  if (errors === 'breakwater') {
    const toHttpStatusError = async function toHttpStatusError(
      first: HTTPError | KyTwoState,
    ): Promise<HttpStatusError> {
      // ky 2 calls beforeError for every error (ky 1 for HTTPError only): the others pass on below.
      const error = isKyTwoState(first) ? first.error : first;
      const { request, response, options } = error as Partial<HTTPError>;
      // Anything else an earlier hook put in its place passes through unchanged.
      if (!(request instanceof Request && response instanceof Response)) return error as never;
      // Retryable by the statuses the policy retries, as its own give-up error says. No
      // cause: ky's HTTPError holds the Request and options as sent (Authorization, the
      // query, the body) and a message with the raw URL, which util.inspect or a logger
      // walking `cause` would print. What it says of the response is on this error.
      // The chain's call, if known, for the body's read: a server that quoted back the
      // token the policy's `auth` stamped (not on ky's request) has it hidden, also in a
      // response an `afterResponse` hook rebuilt (the chain's snapshot is not on it).
      // ky 2's error holds the request fetch got; ky 1's a clone of it, found by its options.
      const sent = calls.get(request) ?? calls.get(requests.get(options as object) as Request);
      return statusError(
        sent ?? new Call(request, undefined, key, undefined),
        fromKyData(response, (error as { data?: unknown }).data),
        undefined,
        retry.statuses,
      );
    };
    // ky 1 types beforeError as returning HTTPError; it throws whatever the hooks return.
    hooks.beforeError = [toHttpStatusError as unknown as BeforeErrorHook];
  }
  return { fetch, retry: { limit: 0 }, timeout: false, hooks };
}
