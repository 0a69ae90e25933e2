/**
 * @module
 * Error responses the client side understands: `application/problem+json` bodies
 * (RFC 9457) and `Retry-After` as delay-seconds (RFC 9110 §10.2.3), rounded up so a
 * client never comes back early. Every breakwater server middleware answers through
 * these two functions.
 */

import type { Context } from 'hono';
import { describeValue } from '../../src/options.ts';
import { MAX_DELAY_MS } from '../../src/timing.ts';

/**
 * The status for a queued request whose client went away. Nobody reads it (the
 * connection is gone); it is for access logs, where nginx's 499 "Client Closed
 * Request" is the established way to tell this case from a server failure.
 */
export const CLIENT_CLOSED_STATUS = 499;

/**
 * The response headers breakwater's client reads to know when, and whether, to come
 * back. None is a CORS-safelisted response-header name (the Fetch standard lists only
 * Cache-Control, Content-Language, Content-Length, Content-Type, Expires, Last-Modified
 * and Pragma): a browser hides them from a page on another origin unless
 * `Access-Control-Expose-Headers` names them, and its client, seeing a bare 429 or 503,
 * would fall back to its own backoff (measured in headless Chromium 156: `null`).
 */
const CLIENT_HEADERS =
  'retry-after, retry-after-ms, ratelimit, ratelimit-policy, x-should-retry, idempotent-replayed';
/** The header that names the response headers a page on another origin may read (Fetch standard). */
export const EXPOSE = 'access-control-expose-headers';

/**
 * Adds `names` ({@link CLIENT_HEADERS} by default) to `Access-Control-Expose-Headers`
 * when the response being built lets the request's origin read it (a `cors()` in front
 * set `Access-Control-Allow-Origin`): that page reads the body, which says the same.
 * Called before `next()`, the names go on whatever answer comes back, this middleware's
 * or the handler's (Hono sets the headers built so far over a returned response's). Only
 * for a request with an `Origin`, which a cross-origin read always has: others are not
 * charged for building `c.res`. No `names` (`null`, `''`): nothing to add.
 */
export function exposeClientHeaders(c: Context, names: string | null = CLIENT_HEADERS): void {
  // Once, however many middlewares ask (stacked limiters).
  if (
    names &&
    c.req.raw.headers.has('origin') &&
    c.res.headers.has('access-control-allow-origin') &&
    !c.res.headers.get(EXPOSE)?.includes(names)
  ) {
    c.header(EXPOSE, names, { append: true });
  }
}

/**
 * The headers that describe a body, which a handler may have set for its own before it
 * threw: put on another answer, they misdescribe it (a Content-Length longer than the
 * body: the client's read fails). Content-Type is left alone as Hono's `c.res` setter
 * leaves it.
 */
export const BODY_HEADERS: RegExp = /^(?:content-(?:length|encoding|range|type)|transfer-encoding)$/;

/**
 * `response` with the headers it lacks of those the middlewares in front set for this
 * exchange (`c.header()` before `next()`: hono/request-id's X-Request-Id, a trace id), as
 * Hono's own `c.json()` answers have them. Returned bare, a response loses them (Hono
 * merges only a `c.res` already made), so the 429s and 503s an operator looks up had no
 * request id, nor had a proxied answer. Its own headers win, and those that describe a
 * body ({@link BODY_HEADERS}) are never taken. Cookies set in front go before its own, as
 * `c.json()` orders them, so of two of one name a browser keeps its own (the last); one
 * it already sets is not added twice, so a second pass adds nothing. `c.newResponse()`
 * reads them without making `c.res`, which would change how Hono merges a handler's answer.
 *
 * Those it leaves out are also removed from where they were set: Hono's `c.res` setter
 * copies every header of a `c.res` already made (`cors()` makes it before `next()`) over
 * the answer set next (but Content-Type), so a Content-Length or Content-Encoding the
 * handler set before it threw misdescribed errorResponses()' problem (undici 'terminated',
 * Deno 'Invalid gzip header', Bun ZlibError), a front's Cache-Control replaced the answer's
 * own and its cookies dropped the answer's. `c.header(name, undefined)`, not
 * `c.res = undefined`: that marks the context finalized, and Hono's compose then ignores
 * the answer a handler returns (c87c1f6: a proxied 503 went out as an empty 200).
 */
export function answer(c: Context, response: Response): Response {
  const { headers } = response;
  const cookies = headers.getSetCookie();
  const taken = new Set<string>();
  let merged: Headers | undefined;
  const shadowed: string[] = [];
  for (const [name, value] of c.newResponse(null).headers) {
    const body = BODY_HEADERS.test(name);
    if (body || (name === 'set-cookie' ? cookies.length > 0 : headers.has(name))) {
      shadowed.push(name);
    }
    if (body || (name === 'set-cookie' ? cookies.includes(value) : headers.has(name))) continue;
    if (merged === undefined) {
      merged = new Headers(headers);
      merged.delete('set-cookie');
    }
    merged.append(name, value);
    taken.add(name);
  }
  for (const name of shadowed) {
    try {
      c.header(name, undefined);
    } catch {
      // A c.res with immutable headers (a fetch()'s, its body read: Hono's c.header()
      // throws there too) keeps them.
    }
  }
  if (merged === undefined) return response;
  for (const cookie of cookies) merged.append('set-cookie', cookie);
  const out = new Response(response.body, {
    status: response.status,
    statusText: response.statusText,
    headers: merged,
  });
  TAKEN_FROM_FRONT.set(out, taken);
  return out;
}

/**
 * The names {@link answer} took from the headers set in front, for each answer it added
 * some to: idempotency() keeps them out of its record, and keeps the answer's own.
 */
export const TAKEN_FROM_FRONT: WeakMap<Response, ReadonlySet<string>> = new WeakMap();

/** The media type of RFC 9457 problem details. */
export const PROBLEM_JSON = 'application/problem+json';

/**
 * `Retry-After` delay-seconds for a wait in ms: rounded up (`ceil(ms / 1000)`). A
 * negative wait or not a number is `"0"`, and a wait past {@link MAX_DELAY_MS} (the
 * longest a client's timer can wait) is that, so the field always parses.
 */
export function retryAfterSeconds(ms: number): string {
  const seconds = Math.ceil(Math.min(ms, MAX_DELAY_MS) / 1000);
  // `|| 0`: NaN is not a wait (Math.max would keep it).
  return String(Math.max(seconds || 0, 0));
}

/** The fields of a problem details object (RFC 9457 §3.1), plus extension members. */
export interface Problem {
  /** HTTP status of the response. */
  status: number;
  /**
   * A short, human-readable summary of the problem type. With the default `type`
   * (`about:blank`), the status's reason phrase (`'Conflict'` for 409; RFC 9457 §4.2.1),
   * what happened going in `detail`.
   */
  title: string;
  /** What happened this time, for a person. Never a credential or a query string. Undefined: none. */
  detail?: string | undefined;
  /** A URI naming the problem type. Default `about:blank` (RFC 9457 §4.2.1). */
  type?: string;
  /** Extension members (RFC 9457 §3.2), e.g. `upstream`, `retryAfterMs`. */
  [extension: string]: unknown;
}

/**
 * A `Response` carrying problem details, with `Retry-After` when `retryAfterMs` is
 * given (and any extra headers). `headers` is typed as `ResponseInit`'s: `HeadersInit`
 * is a DOM name that a Node program without the DOM library cannot resolve.
 *
 * `problem.status` must be a whole number from 400 to 599, else a `TypeError`: a problem
 * is an error, and `new Response()` took 999 as a 200 with no status in the body (it
 * drops a `status` it cannot send) and threw a RangeError for `'x'`.
 */
export function problemResponse(
  problem: Problem,
  retryAfterMs?: number,
  headers?: ResponseInit['headers'],
): Response {
  // A bare status (`problemResponse(503)`) is shown as itself.
  const status = problem?.status ?? (problem as unknown as number);
  if (!(status >= 400 && status < 600 && Number.isInteger(status))) {
    throw new TypeError(
      `problemResponse(): status must be a whole number from 400 to 599 (got ${describeValue(status)})`,
    );
  }
  const out = new Headers(headers);
  out.set('content-type', PROBLEM_JSON);
  if (retryAfterMs !== undefined) out.set('retry-after', retryAfterSeconds(retryAfterMs));
  return new Response(JSON.stringify({ type: 'about:blank', ...problem }), { status, headers: out });
}
