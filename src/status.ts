/**
 * @module
 * Failure responses as errors: `throwOnStatus()` for callers who want a throw, and
 * `wrapHttpError()` for re-building what an SDK's own error lost (the MCP SDK drops
 * Retry-After; the A2A card resolver keeps the status only in its message).
 *
 * breakwater returns non-2xx responses by default: SDKs need to see them (MCP OAuth
 * discovery, 401 handling, redirects). Throwing is opt-in.
 */

import * as z from 'zod/mini';
import type { Call, Middleware, Next } from './call.ts';
import { type StatusSnapshot, snapshotFor, takeSnapshot } from './capture.ts';
import { isRetryableStatus } from './classify.ts';
import { HttpStatusError, requestSummary } from './errors.ts';
import { validate } from './options.ts';
import { type HeadersLike, retryDelay } from './timing.ts';

const statusesSchema = z.optional(
  z.array(
    z
      .number('must be an HTTP status (100-599)')
      .check(
        z.int('must be a whole number'),
        z.minimum(100, 'must be an HTTP status (100-599)'),
        z.maximum(599, 'must be an HTTP status (100-599)'),
      ),
    'must be an array of HTTP statuses',
  ),
);

/** Builds the error for a snapshot of a failure response. */
function errorFrom(call: Call, snapshot: StatusSnapshot, headers: Headers): HttpStatusError {
  return new HttpStatusError({
    status: snapshot.status,
    statusText: snapshot.statusText,
    retryable: isRetryableStatus(snapshot.status, headers),
    ...(snapshot.retryAfterMs === undefined ? {} : { retryAfterMs: snapshot.retryAfterMs }),
    body: snapshot.body,
    ...(snapshot.serverMessage === undefined ? {} : { serverMessage: snapshot.serverMessage }),
    headers,
    request: requestSummary(call.key, call.method, call.href),
  });
}

/**
 * Turns failure responses into {@link HttpStatusError}: by default every status
 * >= 400, or only the listed ones. The error carries the status, the server's
 * requested wait, its message and the start of the body; the body is then cancelled
 * so the connection is freed.
 *
 * @example
 * ```ts
 * const fetch = createFetch({ use: [throwOnStatus()] });
 * try {
 *   await fetch('https://api.example.com/v1/things');
 * } catch (error) {
 *   if (!(error instanceof HttpStatusError)) throw error;
 *   const { status, retryAfterMs, serverMessage } = error; // 503, 7000, 'model overloaded'
 * }
 * ```
 */
export function throwOnStatus(statuses?: readonly number[]): Middleware {
  // Validated as given: spreading first would throw "not iterable" for a number, and
  // split a string into digits, before the message could name the argument.
  const only = validate(statusesSchema, statuses, 'throwOnStatus(statuses)');
  const failing = only === undefined ? undefined : new Set(only);
  return async function throwOnStatus(call: Call, next: Next): Promise<Response> {
    const response = await next(call);
    if (failing === undefined ? response.status < 400 : !failing.has(response.status)) return response;
    throw await statusError(call, response);
  };
}

/**
 * The {@link HttpStatusError} for a failure response of a call: reuses the snapshot
 * `captureStatus()` took of it, or reads the body snippet itself, then cancels the
 * body so the connection is freed.
 */
export async function statusError(call: Call, response: Response): Promise<HttpStatusError> {
  const snapshot = snapshotFor(call, response) ?? (await takeSnapshot(call, response));
  await response.body?.cancel().catch(() => {});
  return errorFrom(call, snapshot, response.headers);
}

function toHeaders(source: Response | HeadersLike | undefined): Headers | undefined {
  if (source === undefined) return undefined;
  if (source instanceof Response) return source.headers;
  if (source instanceof Headers) return source;
  const headers = new Headers();
  const entries =
    Symbol.iterator in source
      ? (source as Iterable<[string, string]>)
      : Object.entries(source as Record<string, string | string[] | undefined>);
  for (const [name, value] of entries) {
    if (value === undefined) continue;
    try {
      headers.append(name, Array.isArray(value) ? value.join(', ') : String(value));
    } catch {
      // A malformed header name or value from an SDK error: skip it, keep the others.
    }
  }
  return headers;
}

/**
 * Builds an {@link HttpStatusError} from an SDK error that lost the status or the
 * headers: pass the status you recovered, the response or headers if you still have
 * them (a `StatusSnapshot` from `captureStatus()` has them), and the SDK's error as `cause`.
 *
 * @example
 * ```ts
 * catch (error) {
 *   const said = connect.last();
 *   if (said) throw wrapHttpError(said.status, new Headers(said.headers), error);
 * }
 * ```
 */
export function wrapHttpError(
  status: number,
  source: Response | HeadersLike | undefined,
  cause?: unknown,
): HttpStatusError {
  if (!Number.isInteger(status) || status < 100 || status > 599) {
    throw new TypeError(`wrapHttpError(): status must be an HTTP status (100-599) (got ${String(status)})`);
  }
  const headers = toHeaders(source);
  const retryAfterMs = headers === undefined ? undefined : retryDelay(headers);
  return new HttpStatusError({
    status,
    statusText: source instanceof Response ? source.statusText : '',
    retryable: isRetryableStatus(status, headers),
    ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
    ...(headers === undefined ? {} : { headers }),
    ...(cause === undefined ? {} : { cause }),
  });
}
