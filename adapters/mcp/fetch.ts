/**
 * @module
 * `mcpFetch()`: a policy's fetch for the MCP SDK's `StreamableHTTPClientTransport`
 * (its `fetch` option) that resends only what is safe to send twice (`mcpResend()`)
 * and gives back what the SDK's errors lose.
 *
 * The SDK turns a failure response into `StreamableHTTPError` with the status as
 * `code` and the body in the message (its legacy `SSEClientTransport`, a failed POST
 * into a plain `Error` with both in the message): Retry-After, the other headers and
 * the server's own message are gone, and so is which request it answered. This fetch
 * keeps the last failure responses it handed out, each with the JSON-RPC ids of its
 * request, and `toError()` rebuilds a breakwater `HttpStatusError` from the one that
 * answered the request (by id, when the caller passes the message it sent), with the
 * SDK's error as `cause`.
 */

import * as z from 'zod/mini';
import {
  type CutEnding,
  cappedFailure,
  DEFAULT_MAX_RESPONSE_BYTES,
  limitedBody,
  maxResponseBytesSchema,
  withBody,
} from '../../src/body-limit.ts';
import { type Call, type FetchLike, follow, type Next, readable, STAMPED } from '../../src/call.ts';
import type { StatusSnapshot } from '../../src/capture.ts';
import { type BreakwaterError, isAbort, oneLine, requestSummary } from '../../src/errors.ts';
import { fetchFailure } from '../../src/network.ts';
import { clientOptionsShape, policySchema, validate } from '../../src/options.ts';
import type { Policy, PolicyClientOptions } from '../../src/policy.ts';
import { redactText } from '../../src/redact.ts';
import { REPLACED, SNAPSHOT, type Snapshotted, wrapHttpError } from '../../src/status.ts';
import {
  DEFAULT_MAX_BODY_CHARS,
  type McpResendOptions,
  type McpToolInfo,
  type McpToolsList,
  mcpResend,
  own,
  resendShape,
} from './resend.ts';

/**
 * Options for {@link mcpFetch}: which MCP requests may be resent, and the client
 * options for `policy.fetch()`. `auth` is optional: the SDK's `authProvider` still works.
 */
export interface McpFetchOptions extends McpResendOptions, PolicyClientOptions {
  /**
   * The largest answer handed to the SDK, in bytes: a JSON answer's whole body, or one
   * event (or line) of an SSE answer. Default 32 MiB (`DEFAULT_MAX_RESPONSE_BYTES`):
   * room for tool results carrying base64 images and files of several MB. The SDK reads
   * a JSON answer whole and buffers each SSE event to its end, so an answer that never
   * ends would grow the process until it dies; past the limit the connection is let go
   * and the request fails at once: a JSON answer with a `BreakwaterError` (code
   * `RESPONSE_TOO_LARGE`), an SSE answer to a POST with the SDK's `McpError` (code
   * -32000, `data: { code: 'RESPONSE_TOO_LARGE', maxResponseBytes }`), which `toError()`
   * turns into that same `BreakwaterError`. An SSE stream of any length is never cut for
   * its length, only for one oversized event.
   * Counted decoded (a gzip answer by its unzipped bytes); an uncompressed answer whose
   * Content-Length is over it fails at once, unread. `Infinity`: no limit.
   */
  maxResponseBytes?: number | undefined;
}

/** A fetch for the MCP SDK's transport, with what it learned. */
export interface McpFetch extends FetchLike {
  /**
   * Records the server's tool annotations from one `tools/list` result
   * (`learn(await client.listTools())`; a later page with the `cursor` it was asked
   * with). A first page replaces what earlier listings taught. On the server's
   * `notifications/tools/list_changed`, call `learn({ tools: [] })` (forgets every
   * learned hint) or list again. See `mcpResend()`.
   */
  learn(list: McpToolsList | readonly McpToolInfo[], cursor?: string): void;
  /**
   * The breakwater error for an error the MCP SDK threw after a failure response
   * through this fetch (`StreamableHTTPError` or `SseError`, whose `code` is the status;
   * the `SSEClientTransport`'s plain `Error('Error POSTing to endpoint (HTTP 503): …')`,
   * whose message starts with it): an
   * `HttpStatusError` with the status, the server's delay (`retryAfterMs`), its
   * message, the body's start and safe headers, and the SDK's error as `cause`. The
   * `McpError` of a request whose SSE answer this fetch cut past `maxResponseBytes`
   * becomes the `BreakwaterError` (code `RESPONSE_TOO_LARGE`) a JSON answer fails with:
   * one error to catch either way. Any other error (a breakwater error, another
   * `McpError`, an abort) comes back unchanged.
   *
   * `sent`: the JSON-RPC message (or batch) whose `transport.send()` failed. Its id
   * names the failure response that answered it, exactly. Without it (or for a GET or
   * DELETE, which carry no id), the candidates are the recent failures of that status,
   * by the method the SDK's message names (its GET stream, the session's DELETE, a POST),
   * whose body the SDK's message quotes, else all of them; when they differ, the one
   * that asks to wait longest wins, so a caller is never told to wait less than its
   * server asked (at worst longer, and another request's message). `resilientMcpClient()`
   * passes `sent` itself.
   */
  toError(error: unknown, sent?: unknown): unknown;
}

/**
 * How old a failure response may be and still explain an SDK error, in ms. The SDK
 * throws as soon as it has read the failing answer (its body, at most a few seconds
 * on a slow server), so an older snapshot of the same status belongs to an earlier
 * request: its Retry-After and message would mislead.
 */
const MAX_SNAPSHOT_AGE_MS = 30_000;
/**
 * Failure responses kept for `toError()` (32), of any status, and as many cut SSE
 * answers: enough for an agent's concurrent calls failing together, and bounded however
 * many statuses a server sends.
 */
const MAX_FAILURES = 32;

/**
 * Words of the MCP SDK's `StreamableHTTPError` messages (`Failed to open SSE stream`,
 * `Failed to terminate session`, `Error POSTing to endpoint`), and the method of the
 * request each is about.
 */
const SDK_METHODS = [
  ['open SSE stream', 'GET'],
  ['terminate session', 'DELETE'],
  ['POSTing', 'POST'],
] as const;

/** A failure response handed to the SDK, and the JSON-RPC ids (as JSON) of the request it answered. */
interface Failure {
  said: StatusSnapshot;
  ids: string[];
}

/** The ids of a JSON-RPC message or batch, as JSON (so `1` and `"1"` differ); none for notifications. */
function idsOf(sent: unknown): string[] {
  const ids: string[] = [];
  for (const message of Array.isArray(sent) ? sent : [sent]) {
    const id = own(message, 'id');
    if (id !== undefined) ids.push(JSON.stringify(id));
  }
  return ids;
}

/**
 * The JSON-RPC error code of a request whose SSE answer was cut: -32000, the first of
 * JSON-RPC 2.0's implementation-defined errors, the code the MCP SDK itself gives a
 * request whose connection closed before its answer (`ErrorCode.ConnectionClosed`).
 */
const CUT_ANSWER_CODE = -32000;

/**
 * The SSE events that end an answer stream cut past the limit: a JSON-RPC error for each
 * request (not notification) of the POST it answers, in `message` events. A broken
 * stream fails no request in the MCP SDK: its transport only calls `onerror` (and, had
 * the server sent event ids, would resume the stream with a GET), and the request waits
 * for its own timeout, 60 s by default. An error answer fails it at once, as a server's
 * own would, with `McpError`; the stream then ends cleanly. No events (a GET, a body that
 * is not JSON-RPC, notifications only): the stream fails with the limit's error. The
 * error of each cut answered is kept in `cuts`, latest last, for `toError()`.
 */
function answersCut(maxBytes: number, cuts: BreakwaterError[]): CutEnding {
  return (error, call) => {
    let events = '';
    try {
      // A GET has no body, and a body that is not JSON (not a string, even) answers no request.
      const sent: unknown = JSON.parse(call.body as string);
      for (const message of Array.isArray(sent) ? sent : [sent]) {
        const id = own(message, 'id');
        if (typeof own(message, 'method') !== 'string' || (typeof id !== 'string' && typeof id !== 'number'))
          continue;
        // JSON has no raw line end: the message cannot end the event early.
        const data = { code: error.code, maxResponseBytes: maxBytes };
        const answer = {
          jsonrpc: '2.0',
          id,
          error: { code: CUT_ANSWER_CODE, message: `breakwater: ${error.message}`, data },
        };
        events += `event: message\ndata: ${JSON.stringify(answer)}\n\n`;
      }
    } catch {}
    // Kept for toError(), which gives it back for the McpError the SDK builds from the answer.
    if (events && cuts.push(error) > MAX_FAILURES) cuts.shift();
    return events;
  };
}

/** The header that names the session a request belongs to (MCP spec, Session Management). */
const SESSION_HEADER = 'mcp-session-id';

/** Keeps a call's own abort alive as long as its answer's body, which still follows the caller's signal. */
const OWN_ABORT = Symbol('breakwater.mcp.abort');

/** A request waiting for its answer, or whose answer's body is still read (see `letGo` in {@link mcpFetch}). */
interface Waiting {
  /** The URL it went to and its `Mcp-Session-Id` (see {@link LetGo}). */
  session: string;
  /** The caller's signal: each SDK transport passes its own (see {@link LetGo}). */
  from: AbortSignal | undefined;
  /** Its JSON-RPC id as JSON; undefined for a body too long to parse on every send, until a cancellation parses it. */
  id: string | undefined;
  body: string;
  abort: AbortController;
  /** Its POST was answered: nothing left to let go of, but its client may still cancel it. */
  answered?: boolean;
}

/**
 * Where an `mcpFetch()` keeps its {@link LetGo}: `resilientMcpClient()` sends the session's
 * DELETE past the policy, so it never passes `letGo`.
 */
export const LET_GO: unique symbol = Symbol('breakwater.mcp.letGo');
/**
 * Lets go of requests waiting for their answer in `session` (their URL and `Mcp-Session-Id`,
 * space-separated), and sent with the signal `from` if given (without an `Mcp-Session-Id`:
 * each SDK transport passes its own, which tells apart clients of one endpoint): the one
 * with the JSON-RPC `id` (as JSON), if no other request with it waits or has its answer
 * still read; with no `id`, all of them (`reason`: the abort's).
 */
export type LetGo = (session: string, id?: string, reason?: unknown, from?: AbortSignal) => void;

/**
 * Where an `mcpFetch()` keeps its {@link Past}: `resilientMcpClient()` marks the session's
 * DELETE with it.
 */
export const PAST: unique symbol = Symbol('breakwater.mcp.past');
/**
 * Marks a request to be sent past the policy by the fetch that made it: returns `init`
 * (read into a plain object, if it is none) to send through that fetch. It goes
 * as a cancellation does (see `past` in {@link mcpFetch}), as the chain's own call (its
 * key, its events), its failure recorded.
 */
export type Past = (init: RequestInit | undefined) => RequestInit;

/** The client's word that it gave up a request (MCP spec, Cancellation): its caller aborted, or it timed out. */
export const CANCELLED = 'notifications/cancelled';

/** The id (as JSON) of a JSON-RPC request, parsed from its body when a string; undefined for anything else. */
function requestId(message: unknown): string | undefined {
  if (typeof message === 'string') message = JSON.parse(message);
  return typeof own(message, 'method') === 'string' ? JSON.stringify(own(message, 'id')) : undefined;
}

/** When the server said the caller may try again: the response's arrival plus its delay. */
function waitUntil(said: StatusSnapshot): number {
  return said.at + (said.retryAfterMs ?? 0);
}

const optionsSchema = z.optional(
  z.strictObject({
    ...resendShape,
    ...clientOptionsShape,
    maxResponseBytes: maxResponseBytesSchema,
  }),
);

/**
 * The message the legacy `SSEClientTransport` throws, as a plain `Error` without `code`,
 * when its POST fails: `Error POSTing to endpoint (HTTP 503): <body>`. Anchored, no
 * backtracking: linear in the message.
 */
const SSE_POST_FAILED = /^Error POSTing to endpoint \(HTTP ([45]\d\d)\)/;

/**
 * The HTTP status an MCP SDK transport error carries, if any: as `code`
 * (`StreamableHTTPError`, `SseError` of the SSE transport's GET), or, for the SSE
 * transport's failed POST (a plain `Error`), in its message (see {@link SSE_POST_FAILED}).
 */
function sdkStatus(error: unknown): number | undefined {
  if (!(error instanceof Error) || error.name === 'McpError') return undefined;
  // McpError's code is a JSON-RPC code; a transport's is the response status; a
  // breakwater error's is a string (`HTTP_STATUS`, `ECONNRESET`), never a status.
  let code = (error as { code?: unknown }).code;
  if (code === undefined && error.name === 'Error') {
    // A message that is not a string, or throws when read, names no status.
    try {
      code = Number(SSE_POST_FAILED.exec(error.message)?.[1]);
    } catch {}
  }
  return (code as number) >= 400 && (code as number) <= 599 && Number.isInteger(code)
    ? (code as number)
    : undefined;
}

/**
 * A fetch through `policy` for the MCP SDK's `StreamableHTTPClientTransport`:
 * - MCP requests that are safe to send twice (read-only methods, tools annotated
 *   `readOnlyHint` / `idempotentHint` in the latest listing `learn()` saw, tools you
 *   list in `tools`) are resent after a 503 or a connection reset; every other POST, a
 *   `tools/call` above all, is resent only when the server proves it did not run it
 *   (a 429, `x-should-retry: true`, a refused connection). GET (the SSE stream) and
 *   DELETE (session end) are idempotent by method.
 * - A request the SDK cancels (`notifications/cancelled`: its caller aborted, or it timed
 *   out) while retry or pacing waits is let go with an `AbortError`, never sent again. The
 *   cancellation itself goes once, at once, past retry, breaker and pacing (MCP spec,
 *   Cancellation: it exists so the server stops work nobody awaits; held for a pause, the
 *   server ran the tool on), with the `auth` option's token as its chain last stamped it. One
 *   fetch may serve several clients whose ids clash: the cancellation's `Mcp-Session-Id`
 *   (and the URL) tells them apart, else the signal each SDK transport passes its fetch
 *   (behind a fetch wrapper giving each request a signal of its own, the URL alone); a
 *   request waiting with an id that another request nothing tells apart from it has too,
 *   waiting or with its answer still streaming, is kept.
 * - Streams (`text/event-stream`) are never buffered, and only the wait for their
 *   headers is timed, as everywhere in breakwater.
 * - `toError(error)` turns the SDK's `StreamableHTTPError` (and the legacy SSE
 *   transport's failed POST) back into an `HttpStatusError` with Retry-After and the
 *   server's message.
 * - A failure response reaches the SDK with at most 64 KiB of its body, ended at the
 *   policy's `capture.bodyWaitMs` (default 1 s) if it stalls: the SDK reads it whole
 *   into its error message, and an endless or stalled one would never let go. Its
 *   `text()`, which the SDK quotes, gives the capture snapshot's body (by default its
 *   first 2 KiB, on one line, the credentials the call sent and URLs' secrets hidden).
 * - Any other answer's body (or an SSE answer's single event) is cut past
 *   `maxResponseBytes` (default 32 MiB): the SDK reads it whole, so an endless one would
 *   exhaust memory. The request fails at once, a JSON answer's with a `BreakwaterError`
 *   (code `RESPONSE_TOO_LARGE`), an SSE answer's with an `McpError` whose `data.code` says
 *   `RESPONSE_TOO_LARGE` (see {@link answersCut}).
 *
 * Clients built from one policy share its breaker, pacing and retry budget.
 *
 * @example
 * ```ts
 * import { definePolicy } from 'breakwater';
 * import { mcpFetch } from 'breakwater/mcp';
 *
 * const policy = definePolicy({ name: 'github-mcp' });
 * const fetch = mcpFetch(policy);
 * const transport = new StreamableHTTPClientTransport(new URL('https://api.githubcopilot.com/mcp/'), { fetch });
 * try {
 *   await client.connect(transport);
 *   fetch.learn(await client.listTools());
 * } catch (error) {
 *   throw fetch.toError(error); // HttpStatusError: status, retryAfterMs, serverMessage
 * }
 * ```
 */
export function mcpFetch(policy: Policy, options?: McpFetchOptions): McpFetch {
  validate(policySchema, policy, 'mcpFetch(policy)');
  const valid = validate(optionsSchema, options, 'mcpFetch()') ?? {};
  const { tools, hints, maxBodyChars, fetch: base, onEvent, maxResponseBytes } = valid;
  const maxBytes = maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  const resend = mcpResend({ tools, hints, maxBodyChars });
  const waitMs = policy.resolved.capture.bodyWaitMs;
  /** The errors of the latest SSE answers cut past `maxBytes` and ended with error answers, oldest first. */
  const cuts: BreakwaterError[] = [];
  const ending = answersCut(maxBytes, cuts);
  /** The latest failure responses handed to the SDK, oldest first. */
  const failures: Failure[] = [];
  /** The header `auth` stamps, and the value it last stamped on a request not answered 401 (see {@link Past}). */
  // auth()'s default header, named here: importing it would bundle auth() itself.
  const header = valid.auth && (valid.auth.header ?? 'authorization').toLowerCase();
  let stamp: string | null = null;
  const name = typeof valid.key === 'string' ? valid.key : policy.resolved.name;

  /**
   * The base fetch, its failures made what the chain makes them (a `NetworkError`, the URL's
   * query redacted): Deno's and Bun's own quote the URL, `?api_key=` and all, and the SDK
   * hands them to `client.onerror`. The caller's abort goes up as it is, as through the chain.
   */
  const direct: FetchLike = (input, init) =>
    (base ?? globalThis.fetch)(input, init).catch((error) => {
      const url = (input as Request).url ?? `${input}`;
      throw isAbort(error, init?.signal)
        ? error
        : fetchFailure(error, requestSummary(name ?? new URL(url).origin, `${init?.method}`, url));
    });

  /** The inits {@link Past} marked: their calls go past the policy. */
  const marked = new WeakSet<RequestInit>();

  /**
   * Sends `call` once, past the policy's retry, breaker and pacing: a cancellation (see
   * {@link letGo}) and the session's DELETE (marked by {@link Past}). A server pausing every
   * request must still hear that a tool it runs is no longer wanted, and a server that is down
   * refuses at once. With the `auth` option it carries the credential the chain last stamped
   * on a request the server did not answer 401 (not following a redirect: another origin must
   * not get it); `next` (the policy: its refresh, its redirects) sends it instead when that
   * one is answered 401 or redirected, or none was stamped yet.
   */
  function past(call: Call, next: Next): Promise<Response> {
    const init = call.init;
    const headers = new Headers(init?.headers);
    if (header && stamp) headers.set(header, stamp);
    else if (header) return next(call);
    return direct(call.input, header ? { ...init, headers, redirect: 'manual' } : init).then((response) => {
      const { status } = response;
      // A browser hides a redirect it did not follow: status 0.
      if (header && !(status && status !== 401 && (status < 300 || status > 399))) {
        // Freed, as retry frees a response it drops (a node-fetch body has no cancel()).
        response.body?.cancel?.().catch(() => {});
        return next(call);
      }
      // Handed on as the chain's answers are: a failure captured and recorded (toError() then
      // names this request: a DELETE's 403 was told as the GET stream's, the latest failure
      // of that status recorded; the policy's stats and `captured` event see it), its body
      // capped, its reason phrase (which the SDK quotes in what it hands client.onerror:
      // `Failed to terminate session: <phrase>`) and body with the credential stamped here
      // hidden, as one auth() replaced is, then redacted (an authProvider's `Bearer …`); any
      // other answer with its body limited.
      if (header) call.bag.set(REPLACED, [stamp]);
      return remember(call, () => policy.capture(call, async () => response));
    });
  }

  /**
   * Records each failure response the SDK gets (outside retry: the last attempt's, the
   * one its error describes) with its request's ids, and hands it over with its body
   * capped; any other answer goes with its body limited to `maxBytes`. Only failures
   * cost a parse, and only of a body `mcpResend()` would parse too.
   */
  async function remember(call: Call, next: Next): Promise<Response> {
    const response = await next(call);
    // Only a token auth() stamped: a request its token() or refresh() sends through this
    // fetch (a token endpoint) goes with the getter's own header, such as Basic client
    // credentials, which a cancellation must not carry to the MCP server.
    if (header && response.status !== 401 && call.bag.has(STAMPED)) stamp = call.header(header) ?? stamp;
    const said = (response as Snapshotted)[SNAPSHOT];
    if (said) {
      let ids: string[] = [];
      try {
        const body = call.body;
        if (typeof body === 'string' && body.length <= (maxBodyChars ?? DEFAULT_MAX_BODY_CHARS))
          ids = idsOf(JSON.parse(body));
      } catch {}
      if (failures.push({ said, ids }) > MAX_FAILURES) failures.shift();
      // The SDK quotes a GET's or DELETE's reason phrase in its error (`Failed to open SSE
      // stream: <phrase>`), which Node's and Bun's fetch keep as the server wrote it, and an
      // old app server may quote the credential there: it gets the snapshot's, hidden and
      // redacted (a new answer: the capped one's phrase is read-only).
      const failed = cappedFailure(response, waitMs, call);
      const capped = withBody(failed, failed.body, said.statusText);
      // The SDK quotes a failure's text() in its error (and hands that to client.onerror), and
      // parses none: it gets the capture snapshot's body, with the call's credentials and URLs'
      // secrets hidden, not the body as it came, which may quote back the token sent. Read all
      // the same: one that breaks mid-way fails as before. Defined, not assigned: a
      // prototype's `text` may be read-only.
      const text = capped.text.bind(capped);
      return Object.defineProperty(capped, 'text', { value: () => text().then(() => said.body) });
    }
    return limitedBody(response, maxBytes, call, ending);
  }

  /**
   * The requests waiting for their answer. The SDK lets the POST of a request it cancelled
   * (its caller aborted, or it timed out) go on after it sent `notifications/cancelled`:
   * retry then sent it again after a 429's or a 503's wait, and the tool ran for nobody.
   * Several clients may share this fetch, their ids clashing: a cancellation lets go of the
   * one request of its session with the id it names (by the `Mcp-Session-Id` it carries and
   * its URL, where the legacy SSE transport names its session; without one, by the signal its
   * transport passes), and of none when another has that id too, waiting or with its answer's
   * body still read (see {@link LetGo}): each stays here till that body ends.
   */
  const waiting = new Set<Waiting>();
  /** The signals requests came with (each SDK transport passes one to all of its own). */
  const signals = new WeakSet<AbortSignal>();

  const letGoOf: LetGo = (session, id, reason, from) => {
    try {
      const found = [...waiting].filter((request) => {
        if (request.session !== session || (from && request.from !== from)) return false;
        // A long body is parsed once, at the first cancellation: not again for every later one.
        if (id !== undefined) request.id ??= requestId(request.body);
        return id === undefined || request.id === id;
      });
      // One answered already is not let go of (its stream is the SDK's to end), but it still
      // counts: the cancellation may be its client's, for another client's call that waits.
      if (id === undefined || found.length === 1)
        for (const request of found) if (!request.answered) request.abort.abort(reason);
    } catch {}
  };

  function letGo(call: Call, next: Next): Promise<Response> {
    if (marked.has(call.init as RequestInit)) return past(call, next);
    const body = call.body;
    if (call.method !== 'POST' || typeof body !== 'string') return next(call);
    const named = call.header(SESSION_HEADER);
    const session = `${call.href} ${named}`;
    const signal = call.signal;
    // Clients of one endpoint without sessions, their ids clashing: one's cancellation of a
    // call whose POST was already answered (an SSE stream) let go of another's waiting call.
    // Only a signal its requests came with too: a fetch wrapper may give each its own.
    const from = named || !signals.has(signal as AbortSignal) ? undefined : signal;
    let id: string | undefined;
    try {
      // A body too long to parse on every send (a tool's multi-MB argument) is parsed only
      // when a cancellation comes: few requests are ever cancelled.
      // Not the caller's maxBodyChars, which bounds what mcpResend() parses: a cancellation
      // passed unseen under a small one (0: nothing marked), and its request was sent again.
      if (body.length <= DEFAULT_MAX_BODY_CHARS) {
        const sent: unknown = JSON.parse(body);
        if (own(sent, 'method') === CANCELLED) {
          // One without a requestId (the SDK's schema allows it) names none: 'undefined' is no id.
          letGoOf(session, `${JSON.stringify(own(own(sent, 'params'), 'requestId'))}`, undefined, from);
          // Sent once, at once (see Past): a pause the server asked for (pacing held it up to
          // maxRetryAfterMs, or refused it) must not keep a tool the user stopped running.
          return past(call, next);
        }
        // Only the client's own requests: an answer to a server's request carries the server's id.
        id = requestId(sent);
        if (id === undefined) return next(call);
      }
    } catch {
      return next(call);
    }
    const abort = new AbortController();
    if (signal) {
      follow(signal, abort);
      signals.add(signal);
    }
    call.signal = abort.signal;
    const request: Waiting = { session, from: signal, id, body, abort };
    const done = (): void => {
      waiting.delete(request);
    };
    waiting.add(request);
    return next(call).then(
      (response) => {
        const source = response.body;
        // A failure ends its request once the SDK has read its body (capped by remember(),
        // through the text() it gives, which a new body here would lose): it goes as it is,
        // its body following the caller's signal (a transport's close) through `abort`.
        if (!source || !response.ok) {
          done();
          if (source) Object.assign(source, { [OWN_ABORT]: abort });
          return response;
        }
        // Kept till its answer's body ends: its client may cancel it meanwhile (a long tool
        // call streaming its progress), and without a session or a signal of its own telling
        // the clients of one endpoint apart (a fetch wrapper giving each request its own), that
        // cancellation let go of another client's call with the same id, waiting out a 429.
        // Its body still follows the caller's signal through `abort`, held as long as it is.
        request.answered = true;
        const reader = source.getReader();
        return withBody(
          response,
          new ReadableStream<Uint8Array>(
            {
              async pull(controller) {
                let next: ReadableStreamReadResult<Uint8Array> | undefined;
                try {
                  next = await reader.read();
                } finally {
                  // Ended or broken: the SDK has all of the answer it will get.
                  if (next?.done !== false) done();
                }
                if (next.done) controller.close();
                else controller.enqueue(next.value);
              },
              cancel: (reason) => {
                done();
                return reader.cancel(reason);
              },
            },
            // Read only when the SDK reads: nothing is held here ahead of it.
            { highWaterMark: 0 },
          ),
        );
      },
      (error: unknown) => {
        done();
        throw error;
      },
    );
  }

  const fetch = policy.fetch(base, {
    auth: valid.auth,
    key: valid.key,
    // Outermost, so retry's resend rule sees the mark on calls judged safe.
    use: [resend, letGo, remember],
    onEvent,
  }) as McpFetch;
  fetch.learn = resend.learn;
  (fetch as McpFetch & { [LET_GO]: LetGo })[LET_GO] = letGoOf;
  (fetch as McpFetch & { [PAST]: Past })[PAST] = (init) => {
    // A plain object (see readable()), which the chain's call then keeps as it is: a spread
    // of a class's init, or of Object.create(init), kept none of its members.
    const read = readable(init) ?? {};
    marked.add(read);
    return read;
  };
  fetch.toError = (error, sent) => {
    const status = sdkStatus(error);
    if (status === undefined) {
      // The SDK's McpError for an answer of answersCut(): the error the cut answered with.
      // Known by its message (a server's own error of the same code and data is not one);
      // an error that throws when read is none.
      try {
        const { name, message } = error as Error;
        return (
          (name === 'McpError' && cuts.find((cut) => `${message}`.endsWith(`breakwater: ${cut.message}`))) ||
          error
        );
      } catch {
        return error;
      }
    }
    // The SDK's error carries the status and (for a POST) the body, not the request: two
    // concurrent failures with the same status and body look alike in it. The request's
    // own id tells them apart; else the recent failures of that status whose body the
    // message quotes, else all of them, and of those the one asking to wait longest (the
    // latest on a tie): never a shorter wait than the server asked. None: the status alone.
    // Redacted as the snapshots' bodies are, or a body quoting a URL with a query never
    // matches. A message that is not a string is matched as one; one that throws, as none.
    let message = '';
    let ids: string[] = [];
    try {
      message = redactText(oneLine(`${(error as Error).message}`));
    } catch {}
    // The caller's message: an id JSON cannot write (a BigInt) or a revoked proxy matches none.
    try {
      ids = idsOf(sent);
    } catch {}
    // The SDK's words name the request that failed: its GET stream, its session's DELETE,
    // or a POST; a longer wait the GET was asked for must not stand for the DELETE's failure.
    const method = SDK_METHODS.find(([words]) => message.includes(words))?.[1];
    const recent = failures.filter(
      ({ said }) =>
        said.status === status &&
        Date.now() - said.at <= MAX_SNAPSHOT_AGE_MS &&
        (!method || said.method === method),
    );
    const answered = recent.filter((failure) => failure.ids.some((id) => ids.includes(id)));
    const quoted = recent.filter(({ said }) => said.body && message.includes(said.body));
    let said: StatusSnapshot | undefined;
    for (const failure of answered[0] ? answered : quoted[0] ? quoted : recent) {
      if (!said || waitUntil(failure.said) >= waitUntil(said)) said = failure.said;
    }
    return wrapHttpError(status, said, error);
  };
  return fetch;
}
