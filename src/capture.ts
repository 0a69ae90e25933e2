/**
 * @module
 * `captureStatus()`: remembers what a failing server said (status, Retry-After, the
 * start of the body, its error message, safe headers) before an SDK turns the
 * response into an error that has lost all of it.
 *
 * The caller's body is never consumed: the snapshot reads a bounded prefix from a
 * clone (a tee of the body) and cancels that branch. Only responses with status >= 400
 * pay for this; every other response costs one comparison. Streaming bodies
 * (`text/event-stream`) are never read, and a body that trickles in slowly is read
 * for at most `bodyWaitMs` (default 1 s). The reader itself (`readSaid()`) lives in
 * `status.ts`, shared with `statusError()`, which reuses a snapshot taken here.
 */

import * as z from 'zod/mini';
import { ATTACH, type Call, type FetchLike, type Middleware, type Next, readable } from './call.ts';
import { HttpStatusError } from './errors.ts';
import { MAX_BODY_BYTES, MAX_BODY_WAIT_MS, MAX_KEYS, MAX_SCOPE_SNAPSHOTS } from './limits.ts';
import { validate } from './options.ts';
import { redactText, redactUrl, safeHeaders } from './redact.ts';
import {
  DEFAULT_BODY_BYTES,
  DEFAULT_BODY_WAIT_MS,
  hideSent,
  readSaid,
  SNAPSHOT,
  type Snapshotted,
  sentHider,
} from './status.ts';
import { retryDelay } from './timing.ts';

export { DEFAULT_BODY_BYTES, DEFAULT_BODY_WAIT_MS };

/** What a failing server said, frozen at the moment the response headers arrived. */
export interface StatusSnapshot {
  /** The server's name in breakwater. */
  readonly key: string;
  /** The request's HTTP method, upper-case. */
  readonly method: string;
  /** Redacted: no userinfo, no query values. */
  readonly url: string;
  /** The response's HTTP status: always >= 400 (only failure responses are captured). */
  readonly status: number;
  /**
   * The reason phrase, redacted as `body` is (an old app server may quote the credential
   * there); `''` when the server sent none (HTTP/2 and HTTP/3 carry none).
   */
  readonly statusText: string;
  /** The server's requested wait (see `retryDelay`), or undefined. */
  readonly retryAfterMs: number | undefined;
  /**
   * The start of the body, decoded and collapsed to one line (at most `bodyBytes` bytes
   * read). Redacted: URLs as in `url`, and the credentials the call sent (its
   * `Authorization`, `Proxy-Authorization`, `x-api-key`, `api-key` values and cookie
   * values, of 8 characters or more) wherever the server quoted them, as `[redacted]`.
   */
  readonly body: string;
  /**
   * The error message from a JSON error body, else the body cut to 400 characters;
   * undefined when empty. Redacted as `body` is.
   */
  readonly serverMessage: string | undefined;
  /**
   * Allowlisted headers only: timing, rate limits, request ids, content type,
   * `WWW-Authenticate`; their values redacted as `body` is (a 401 may quote the token there).
   */
  readonly headers: Readonly<Record<string, string>>;
  /** When the response arrived, epoch ms. */
  readonly at: number;
}

/** A fetch whose snapshots belong to it alone (one connect attempt, say). */
export interface CaptureScope {
  /** Use this fetch for the operation; its failure responses are recorded here. */
  readonly fetch: FetchLike;
  /** The latest snapshot taken through this scope's fetch. */
  last(): StatusSnapshot | undefined;
  /** The snapshots taken through this scope's fetch, oldest first: the last 100. */
  all(): readonly StatusSnapshot[];
}

/**
 * What is left at `now` (epoch ms, on the caller's clock) of the wait a failure asked for
 * (see `retryDelay`), in ms, counted from when its headers arrived: `answer` is the
 * response, or the `HttpStatusError` built of it (by `throwOnStatus()`, `statusError()`,
 * `wrapHttpError()`).
 *
 * `captureStatus()` reads the start of a failure's body (up to `bodyWaitMs`, 1 s by
 * default) before the layers above see the answer, and so does `throwOnStatus()` before
 * it throws: `Retry-After: 1` read by retry() or the breaker after that read was a wait
 * from the read's end, so the resend, or the end of the key's pause, came up to a second
 * later than the server asked. The snapshot's `at` is when the headers arrived: the
 * headers are read as of then (on the caller's clock: that less the time since, as
 * `Date.now()` counts it), and the time since is taken off: never more than the longest
 * read ({@link MAX_BODY_WAIT_MS}), so a clock stepped forward meanwhile (NTP) cuts the
 * wait short by no more than that. A response no capture saw is read as of `now`. An
 * error's wait was read when its headers arrived, its `at`. An error built by hand may
 * carry anything: NaN or a negative wait names none (Infinity is kept: every use caps it).
 */
export function waitLeft(answer: Response | HttpStatusError, now: number): number | undefined {
  if (answer instanceof HttpStatusError) {
    const ms = answer.retryAfterMs ?? -1;
    return ms >= 0 ? Math.max(0, ms - sinceHeaders(answer.at)) : undefined;
  }
  const sinceMs = sinceHeaders((answer as Snapshotted)[SNAPSHOT]?.at);
  const ms = retryDelay(answer.headers, now - sinceMs);
  return ms === undefined ? ms : Math.max(0, ms - sinceMs);
}

/**
 * The ms since `at` (epoch ms: when an answer's headers arrived), at most
 * {@link MAX_BODY_WAIT_MS}; 0 when unknown (no snapshot, an error of an older copy of
 * breakwater, an `at` that is no time).
 */
function sinceHeaders(at: number | undefined): number {
  return Math.min(MAX_BODY_WAIT_MS, Math.max(0, Date.now() - (at as number))) || 0;
}

/** The `captureStatus()` middleware, with its readers. */
export interface CaptureStatus extends Middleware {
  /** The latest snapshot for a server key, from any call. */
  last(key: string): StatusSnapshot | undefined;
  /**
   * A fetch whose snapshots are kept apart from every other call's, so a status from
   * one response is never paired with a Retry-After from another, even for concurrent
   * requests to the same key. `fetch` defaults to the chain this capture is part of;
   * a capture in several chains (one policy's clients) needs it named: a `TypeError`
   * says so, rather than sending through one of them.
   */
  scope(fetch?: FetchLike): CaptureScope;
}

/** Options for {@link captureStatus}. */
export interface CaptureStatusOptions {
  /** Body bytes kept in a snapshot. Default 2048; at most 65,536. */
  bodyBytes?: number | undefined;
  /**
   * How long to wait for those bytes, in ms, before keeping what arrived. Default
   * 1000. The caller gets the response only after this, so it bounds the delay a
   * slow error body can add. A `timeout()` above does not count it: its deadline is
   * met once the headers are in, so a 429 whose body trickles stays a 429.
   */
  bodyWaitMs?: number | undefined;
}

/**
 * The schema of {@link CaptureStatusOptions}: unknown keys are rejected. Exported so
 * `definePolicy()` validates `capture` with the very same rules. Built in a pure
 * closure (see `backoff.ts`): a bundle that imports this file without
 * `captureStatus()` drops it.
 */
export const captureSchema: z.ZodMiniOptional<z.ZodMiniType<CaptureStatusOptions>> = /* @__PURE__ */ (() =>
  z.optional(
    z.strictObject({
      bodyBytes: z.optional(z.number().check(z.int(), z.minimum(0), z.maximum(MAX_BODY_BYTES))),
      bodyWaitMs: z.optional(z.number().check(z.minimum(0), z.maximum(MAX_BODY_WAIT_MS))),
    }),
  ))();

/**
 * Records an immutable snapshot of every response with status >= 400: per server
 * key (`capture.last(key)`) and per scope (`capture.scope()`). Not of one that arrives
 * after its attempt ended (a timeout above, or the caller's abort, through a `fetch`
 * that ignores the signal): nobody gets that response, and its status and Retry-After
 * must not replace those of the answer the caller did get.
 *
 * @example
 * ```ts
 * import { captureStatus, createFetch } from 'breakwater';
 *
 * const capture = captureStatus();
 * const fetch = createFetch({ use: [capture] });
 * const connect = capture.scope();
 * try {
 *   await someSdk.connect({ fetch: connect.fetch });
 * } catch (error) {
 *   const said = connect.last(); // { status: 503, retryAfterMs: 7000, serverMessage: '...' }
 * }
 * ```
 */
export function captureStatus(options?: CaptureStatusOptions): CaptureStatus {
  const valid = validate(captureSchema, options, 'captureStatus()');
  const bodyBytes = valid?.bodyBytes ?? DEFAULT_BODY_BYTES;
  const bodyWaitMs = valid?.bodyWaitMs ?? DEFAULT_BODY_WAIT_MS;
  const byKey = new Map<string, StatusSnapshot>();
  /**
   * Carries a scope's snapshot list from its fetch into the chain, on the init object.
   * This capture's own key: with one shared by every capture, a second capture in the
   * chain (the user's own in a policy client's `use`) added each failure to this one's
   * scopes again.
   */
  const SCOPE = Symbol();
  /**
   * The chain this capture is part of, for `scope()` without a fetch; null once it is
   * part of several (a policy's clients, each with its own base fetch, key and token):
   * which one a scope means is then the caller's to say. The last one built was taken,
   * so an operation meant for one server went out through another's chain, that
   * server's token on it.
   */
  let chain: FetchLike | null | undefined;

  function remember(snapshot: StatusSnapshot): void {
    byKey.delete(snapshot.key);
    byKey.set(snapshot.key, snapshot);
    if (byKey.size > MAX_KEYS) byKey.delete(byKey.keys().next().value as string);
  }

  const capture = async function captureStatus(call: Call, next: Next): Promise<Response> {
    // The signal of the pass this runs in, read once: a timeout above that ended the pass
    // (its deadline, the caller's abort) has put its outer signal back on the call. An
    // answer that arrives after that (a fetch that ignores the signal) reaches nobody:
    // the timeout drops it. Kept, it would replace the snapshot of the answer the caller
    // did get (a stale status and Retry-After in `scope().last()` and `last(key)`).
    const signal = call.signal;
    const response = await next(call);
    if (response.status < 400 || signal?.aborted) return response;
    const at = Date.now();
    // The caller's abort ends the read, and the call, with its reason (readSaid() lets the
    // answer's body go then).
    const said = await readSaid(call, response, bodyBytes, bodyWaitMs, at);
    const snapshot: StatusSnapshot = Object.freeze({
      key: call.key,
      method: call.method,
      url: redactUrl(call.href),
      status: response.status,
      // Hidden and redacted as the body is: Node's and Bun's fetch keep a reason phrase as
      // written, and an old app server may quote the credential there (`401 Invalid token Bearer eyJ…`).
      statusText: redactText(hideSent(call, response.statusText)),
      ...said,
      // Hidden and redacted too: a 401's WWW-Authenticate may quote the token it refused.
      headers: Object.freeze(safeHeaders(response.headers, sentHider(call))),
      at,
    });
    remember(snapshot);
    const scoped = (call.init as { [SCOPE]?: StatusSnapshot[] } | undefined)?.[SCOPE];
    if (scoped && scoped.push(snapshot) > MAX_SCOPE_SNAPSHOTS) scoped.shift();
    // For a throwOnStatus() or retry outside: they reuse it instead of reading the body again.
    // Reflect.set, not `=`: on a sealed Response (a mock's, a cache's) it fails quietly,
    // where an assignment threw and the caller lost the answer to a BreakwaterError.
    Reflect.set(response, SNAPSHOT, snapshot);
    call.emit({ type: 'captured', key: snapshot.key, snapshot });
    return response;
  } as CaptureStatus & { [ATTACH](fetch: FetchLike): void };

  capture.last = (key) => byKey.get(key);
  capture.scope = (fetch) => {
    const target = fetch ?? chain;
    if (typeof target !== 'function') {
      throw new TypeError(
        'capture.scope(): this capture is part of no createFetch() chain, or of several; pass one: capture.scope(fetch)',
      );
    }
    const snapshots: StatusSnapshot[] = [];
    return {
      // Read as the chain reads it (see readable()): a spread of a class's init kept none of
      // its getters, and a POST went out as a bodiless GET. Async: a getter that throws rejects.
      fetch: async (input, init) => target(input, { ...readable(init), [SCOPE]: snapshots } as RequestInit),
      last: () => snapshots.at(-1),
      all: () => [...snapshots],
    };
  };
  capture[ATTACH] = (fetch) => {
    chain = chain === undefined ? fetch : null;
  };
  return capture;
}
