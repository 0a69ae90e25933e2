/**
 * @module
 * Resend safety for A2A JSON-RPC. Every JSON-RPC call is a POST, which retry treats
 * as unsafe to resend after a 5xx or a connection reset (the agent may have run
 * it). Reads are safe to repeat, so `a2aIdempotent()` marks them `call.idempotent`
 * by the JSON-RPC method the SDK sends, in A2A 1.0 and 0.3 names alike. Sending a
 * message, streaming one, cancelling, and creating or deleting push configs stay
 * unmarked: a 503 after `SendMessage` reached the agent is never resent.
 */

import * as z from 'zod/mini';
import {
  cappedFailure,
  DEFAULT_MAX_RESPONSE_BYTES,
  limitedBody,
  maxResponseBytesSchema,
  withBody,
} from '../../src/body-limit.ts';
import type { Call, FetchLike, Middleware, Next } from '../../src/call.ts';
import { clientOptionsShape, policySchema, validate } from '../../src/options.ts';
import type { Policy, PolicyClientOptions } from '../../src/policy.ts';
import { redactText } from '../../src/redact.ts';
import {
  bodyText,
  hideSent,
  SNAPSHOT,
  type Snapshotted,
  sdkFailureBody,
  wrapHttpError,
} from '../../src/status.ts';

/**
 * JSON-RPC methods that only read: A2A 1.0 names (`@a2a-js/sdk` 1.x `JsonRpcTransport`)
 * and A2A 0.3 names (the SDK's `LegacyJsonRpcTransport`, and `@a2a-js/sdk` 0.3.x).
 * `SubscribeToTask` / `tasks/resubscribe` open a stream on an existing task: a
 * resend before the stream starts cannot run anything twice.
 */
export const A2A_READ_ONLY_METHODS: ReadonlySet<string> = new Set([
  'GetTask',
  'ListTasks',
  'GetExtendedAgentCard',
  'GetTaskPushNotificationConfig',
  'ListTaskPushNotificationConfigs',
  'SubscribeToTask',
  'tasks/get',
  'agent/getAuthenticatedExtendedCard',
  'tasks/pushNotificationConfig/get',
  'tasks/pushNotificationConfig/list',
  'tasks/resubscribe',
]);

/**
 * The longest request body inspected (64 KiB, in UTF-16 units). Read calls are a few
 * hundred bytes; a larger body is a message with content, never a read, and is not
 * parsed at all.
 */
const MAX_INSPECTED_CHARS = 64 * 1024;

/**
 * The HTTP+JSON binding's SubscribeToTask as the SDK sends it: a POST without a body to
 * `…/tasks/{id}:subscribe` (the id is percent-encoded, so `:subscribe` ends the path only
 * as the verb). The one read that binding sends as a POST; its other reads are GETs.
 */
const REST_SUBSCRIBE = /\/tasks\/[^/?#]+:subscribe(?:[?#]|$)/;

const optionsSchema = z.optional(
  z.strictObject({ ...clientOptionsShape, maxResponseBytes: maxResponseBytesSchema }),
);

/** A parsed JSON value's own field `key`, never an inherited one (a polluted prototype). */
function own(value: unknown, key: string): unknown {
  return typeof value === 'object' && value !== null && Object.hasOwn(value, key)
    ? (value as Record<string, unknown>)[key]
    : undefined;
}

/**
 * Whether one JSON-RPC 2.0 message only reads. Names match exactly (JSON-RPC method
 * names are case-sensitive), so `gettask` or ` GetTask` is unknown and unsafe.
 */
function reads(message: unknown): boolean {
  const method = own(message, 'method');
  return own(message, 'jsonrpc') === '2.0' && typeof method === 'string' && A2A_READ_ONLY_METHODS.has(method);
}

/**
 * Whether `body` is a JSON-RPC request, or a batch, that only reads. Only a body
 * exactly as JSON.stringify() writes it (as the SDK sends) is judged: a key given
 * twice reads as its last copy here but its first on some servers, and re-serialising
 * drops one copy. A batch is one flat array; nested arrays are not JSON-RPC.
 */
function readsOnly(body: string): boolean {
  const json: unknown = JSON.parse(body);
  if (JSON.stringify(json) !== body) return false;
  const calls = Array.isArray(json) ? json : [json];
  return calls.length > 0 && calls.every(reads);
}

/**
 * Middleware that marks read-only A2A JSON-RPC calls idempotent, so `retry()` may
 * resend them after a 5xx or a reset. Put it before (outside) `retry()`. Only POSTs
 * with a string body of at most 64 KiB are parsed (the SDK sends `JSON.stringify`'d
 * bodies); anything else, garbage included, passes through untouched and unmarked, but
 * for the HTTP+JSON binding's SubscribeToTask (a POST without a body to
 * `…/tasks/{id}:subscribe`; that binding's other reads are GETs, idempotent already).
 *
 * @example
 * ```ts
 * import { captureStatus, createFetch, retry } from 'breakwater';
 * import { a2aIdempotent } from 'breakwater/a2a';
 *
 * const fetch = createFetch({ use: [a2aIdempotent(), retry(), captureStatus()] });
 * // new JsonRpcTransportFactory({ fetchImpl: fetch }): GetTask is resent after a 503, SendMessage is not.
 * ```
 */
export function a2aIdempotent(): Middleware {
  return function a2aIdempotent(call: Call, next: Next): Promise<Response> {
    try {
      const body = call.body;
      if (call.method === 'POST' && typeof body === 'string' && body.length <= MAX_INSPECTED_CHARS)
        call.idempotent ||= readsOnly(body);
      else if (call.method === 'POST' && body == null) call.idempotent ||= REST_SUBSCRIBE.test(call.href);
    } catch {
      // Not JSON, or a getter on the caller's init that throws: not ours to judge (the
      // fetch underneath reports the init's problem itself).
    }
    return next(call);
  };
}

/**
 * Middleware that hands a failure response (status >= 300) on with its body ended
 * after `MAX_FAILURE_BODY_BYTES` or `waitMs` from its headers (`cappedFailure`; the
 * capture snapshot's read counts against it), and any other with its
 * body, or one SSE event, failed past `maxBytes` (`limitedBody`; see src/body-limit.ts).
 *
 * A failure's `text()` (which the SDK quotes in its error) gives the capture snapshot's
 * body. A failure body that breaks mid-read fails its `text()` with an `HttpStatusError`
 * (status and Retry-After, from the capture snapshot) whose cause is the read's error:
 * the SDK's stream requests (`SendStreamingMessage`, `SubscribeToTask`, 0.3's
 * `message/stream`, `tasks/resubscribe`) rethrow that error as it is, and the caller
 * of a 429 or 503 would learn neither. A caller's abort stays its own reason, and a
 * status past 599 the read's error.
 */
export function limitBodies(waitMs: number, maxBytes: number = DEFAULT_MAX_RESPONSE_BYTES): Middleware {
  return async function limitBodies(call: Call, next: Next): Promise<Response> {
    const response = await next(call);
    // The SDK reads the body of every answer that is not ok into its error, a 3xx fetch did
    // not follow (no Location) too: capped as a failure's. A success (a stream) is limited.
    if (response.status < 300) {
      // An event stream the call did not ask for (the SDK asks for one by Accept, and reads
      // any other answer whole, whatever its type: its card resolver sends no Accept at all),
      // or typed otherwise than as the SDK reads a stream (`text/event-stream`, in that case:
      // its stream calls read any other type whole too), is limited as one body, not per
      // event: an endless one of short events would grow the SDK's buffer without end. Its
      // type is dropped for that (defined: fetch's headers are immutable): the SDK takes the
      // answer for no stream either way.
      const type = response.headers.get('content-type') ?? '';
      if (
        /event-stream/i.test(type) &&
        !(type.startsWith('text/event-stream') && /event-stream/i.test(call.header('accept') ?? ''))
      ) {
        const headers = new Headers(response.headers);
        headers.delete('content-type');
        Object.defineProperty(response, 'headers', { value: headers });
      }
      return limitedBody(response, maxBytes, call);
    }
    const said = (response as Snapshotted)[SNAPSHOT];
    // The policy's capture (innermost) waited for this body already, from when its headers
    // came: the cap gets what is left of that wait, so a stalled body holds the SDK for
    // `waitMs` in all, not twice. A response no capture saw gets the whole wait.
    const failed = cappedFailure(response, (said?.at ?? Date.now()) + waitMs - Date.now(), call);
    // Every SDK failure message quotes the reason phrase too (`HTTP error for GetTask!
    // Status: 401 <phrase>`), which Node's and Bun's fetch keep as the server wrote it, and
    // an old app server may quote the credential there (`401 Invalid key <key>`): hidden and
    // redacted, as the body the SDK quotes is. A new answer (the capped one's phrase is
    // read-only), its status past 599, URL and `redirected` kept as the cap keeps them.
    const capped = withBody(failed, failed.body, redactText(hideSent(call, failed.statusText)));
    // Every SDK failure path (JSON-RPC, REST, 0.3 and 1.0) reads the body with text().
    // Defined, not assigned: a prototype's `text` may be read-only (@hono/node-server's Response).
    // Read in the charset its Content-Type names, as the snapshot's start is (see bodyText).
    return Object.defineProperty(capped, 'text', {
      value: () =>
        bodyText(capped).then(
          // The SDK quotes it in its error, which an HttpStatusError keeps as its cause: it
          // gets the capture snapshot's body, or the start of the body read as a snapshot's
          // is, or a JSON body the snapshot cut, whole (see sdkFailureBody). The body is read
          // first all the same: one that breaks mid-read fails here, with its status.
          (body) => sdkFailureBody(call, said?.body, () => body),
          (error: unknown) => {
            // A status past 599 (fetch passes up to 999) is no HTTP failure wrapHttpError takes.
            throw call.callerSignal?.aborted || response.status > 599
              ? error
              : wrapHttpError(response.status, said ?? response, error);
          },
        ),
    });
  };
}

/** Options for {@link a2aFetch}: the policy's per-client options, the base fetch, and the answer size limit. */
export interface A2AFetchOptions extends PolicyClientOptions {
  /**
   * The largest answer handed to the SDK, in bytes: a JSON-RPC or REST answer's whole
   * body, or one event (or line) of an SSE stream. Default 32 MiB
   * (`DEFAULT_MAX_RESPONSE_BYTES`): room for artifacts carrying files of several MB
   * inline. The SDK reads a JSON answer whole, so one that never ends would grow the
   * process until it dies; past the limit the body fails with a `BreakwaterError` (code
   * `RESPONSE_TOO_LARGE`) and the connection is let go. An SSE stream of any length is
   * never cut for its length, only for one oversized event (the SDK itself refuses an
   * SSE event over 4 MiB); one that answers a call that did not ask for a stream
   * (`Accept`) is limited as one body, as the SDK reads it whole. Counted decoded (a gzip answer by its unzipped bytes); an
   * uncompressed answer whose Content-Length is over it fails at once, unread.
   * `Infinity`: no limit.
   */
  maxResponseBytes?: number | undefined;
}

/**
 * A fetch for the A2A SDK's `fetchImpl` options: `policy.fetch()` with
 * {@link a2aIdempotent} in front, so reads are resent after a 5xx and sends never are.
 * Non-2xx responses are returned, as the SDK needs them to build its own errors, with
 * at most 64 KiB of their body, ended at the policy's `capture.bodyWaitMs` (default
 * 1 s) if it stalls: the SDK reads it whole into its error message, with no deadline.
 * Their `text()`, which the SDK reads, gives the capture snapshot's body (the start, by
 * default 2 KiB, on one line, with the credentials the call sent and URLs' secrets hidden):
 * the SDK's error quotes it, and a caller may log that error.
 * Other answers fail past `maxResponseBytes` (default 32 MiB; for SSE, per event) with a
 * `BreakwaterError`, code `RESPONSE_TOO_LARGE`: the SDK reads them whole too. An answer
 * (a message stream above all) whose connection breaks mid-way fails with a
 * `NetworkError` (phase `response`, sent `maybe`) naming the request; a failure answer's
 * `text()` with an `HttpStatusError` (its status and Retry-After) caused by it.
 *
 * @example
 * ```ts
 * import { definePolicy } from 'breakwater';
 * import { a2aFetch } from 'breakwater/a2a';
 * import { JsonRpcTransportFactory } from '@a2a-js/sdk/client';
 *
 * const fetchImpl = a2aFetch(definePolicy({ name: 'travel-agent' }));
 * const transport = new JsonRpcTransportFactory({ fetchImpl });
 * ```
 */
export function a2aFetch(policy: Policy, options?: A2AFetchOptions): FetchLike {
  validate(policySchema, policy, 'a2aFetch(policy)');
  const { fetch, maxResponseBytes, ...rest } = validate(optionsSchema, options, 'a2aFetch()') ?? {};
  // `use`: middleware the policy runs outermost, so the mark is set before its retry judges a failure.
  const waitMs = policy.resolved.capture.bodyWaitMs;
  return policy.fetch(fetch, { ...rest, use: [a2aIdempotent(), limitBodies(waitMs, maxResponseBytes)] });
}
