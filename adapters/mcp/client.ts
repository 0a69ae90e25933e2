/**
 * @module
 * `resilientMcpClient()`: an MCP SDK `Client` that an agent can ask for on every
 * turn. It connects through `mcpFetch()` behind a start gate, so a server that is
 * down or overloaded is asked again only once its window has passed (every other
 * turn fails fast with `GateClosedError`, without a request); it learns which tools
 * are safe to resend from every `tools/list` answer; and the SDK's HTTP errors come
 * out as breakwater `HttpStatusError`s with Retry-After and the server's message.
 */

import * as z from 'zod/mini';
import { maxResponseBytesSchema } from '../../src/body-limit.ts';
import { PROBE_LEASE_MS } from '../../src/breaker.ts';
import type { FetchLike } from '../../src/call.ts';
import { TimeoutError } from '../../src/errors.ts';
import { createGate, type Gate } from '../../src/gate.ts';
import { clientOptionsShape, functionOption, policySchema, validate } from '../../src/options.ts';
import type { Policy } from '../../src/policy.ts';
import { MAX_DELAY_MS } from '../../src/timing.ts';
import {
  LET_GO,
  type LetGo,
  type McpFetch,
  type McpFetchOptions,
  mcpFetch,
  PAST,
  type Past,
} from './fetch.ts';
import { type McpToolsList, resendShape } from './resend.ts';

/** The gate's key when neither `key` nor the policy's `name` gives one. */
const DEFAULT_KEY = 'mcp';
/**
 * How long one connect may take, in ms (60 s): the start gate's probe lease, and the MCP
 * SDK's own default request timeout. Policy timeouts cover only the wait for each
 * response's headers, so a server that opens an SSE answer to `initialize` (or an SSE
 * transport's endpoint stream) and then says nothing would hold the shared connect,
 * and with it every later `connect()`, until restart.
 */
const DEFAULT_CONNECT_TIMEOUT_MS = PROBE_LEASE_MS;
/**
 * How long closing a transport waits for the server to end its session (the DELETE), in
 * ms (2 s): a healthy server answers in milliseconds, and a caller shutting down must
 * not wait on one that hangs. Past it the DELETE is let go and the session expires.
 */
const DEFAULT_CLOSE_TIMEOUT_MS = 2_000;
/** How many `tools/list` answers may be awaited at once before the oldest is forgotten. */
const MAX_PENDING_LISTS = 64;
/** The status that tells an MCP client its session is gone and it must initialize again (MCP spec, Session Management). */
const SESSION_GONE = 404;
/** The header that names the session a request belongs to (MCP spec, Session Management). */
const SESSION_HEADER = 'mcp-session-id';
/** The server's word that its tools changed (MCP spec, Tools: List Changed Notification). */
const TOOLS_CHANGED = 'notifications/tools/list_changed';

/** What this module needs of the MCP SDK's `Client` (any version with `connect` / `close`). */
export interface McpClientLike {
  /**
   * Starts a session over `transport` (the SDK's `Client.connect()`: the transport's start,
   * then `initialize`); called once per `connect()` that opens a session, with the transport
   * `options.transport` built. Typed `never` so any SDK version's transport type fits.
   */
  connect(transport: never): Promise<void>;
  /**
   * Closes the client and its transport (the SDK's `Client.close()`); breakwater calls it to
   * end a lost session, a connect that timed out, and on `close()`. The transport's close
   * first ends the server's session with a DELETE (bounded by `closeTimeoutMs`).
   */
  close(): Promise<void>;
  /** The connected transport; undefined once closed (the SDK's `Protocol.transport`). */
  readonly transport?: unknown;
}

/** What this module needs of an MCP SDK transport (`StreamableHTTPClientTransport`, `SSEClientTransport`). */
export interface McpTransportLike {
  /**
   * Sends one JSON-RPC message (the SDK's `Transport.send()`). Wrapped once per transport:
   * `tools/list` answers teach resend safety, failures come out as breakwater errors, and
   * after closing began nothing more is sent. Typed `never` so any SDK version's types fit.
   */
  send(message: never, options?: never): Promise<void>;
  /**
   * The server's session id (`Mcp-Session-Id`), once `initialize` was answered with one;
   * undefined before, and for a server or transport without sessions (then no DELETE ends it).
   * A transport without this member (the legacy `SSEClientTransport`) names its session in
   * its endpoint's URL: a 404 to its POST, or its stream reopened, ends that session.
   */
  readonly sessionId?: string | undefined;
}

/** The transport as this module wires it. */
interface Wired {
  send(message: unknown, options?: unknown): Promise<void>;
  close?(): Promise<void>;
  /** Ends the server's session with a DELETE (`StreamableHTTPClientTransport`; a 405 counts as done). */
  terminateSession?(): Promise<void>;
  onmessage?: (message: unknown, extra?: unknown) => void;
  readonly sessionId?: string | undefined;
}

/** A JSON-RPC message, as far as this module looks into one. */
interface Message {
  id?: unknown;
  method?: unknown;
  params?: { cursor?: string; requestId?: unknown } | null;
  result?: unknown;
}

/** Options for {@link resilientMcpClient}. */
export interface ResilientMcpClientOptions<C extends McpClientLike, T extends McpTransportLike>
  extends McpFetchOptions {
  /** The SDK client to connect (`new Client({ name, version })`). */
  client: C;
  /**
   * Builds a transport around breakwater's fetch, once per connect (an SDK transport
   * cannot be started twice): `(fetch) => new StreamableHTTPClientTransport(url, { fetch })`.
   */
  transport: (fetch: FetchLike) => T;
  /** The policy for every request (`definePolicy({})` is a good start); its clients share breaker, pacing and budget. */
  policy: Policy;
  /**
   * The start gate around connect. Default: `createGate({ key })` with the key, else
   * the policy's name, else `'mcp'`: 500 ms doubling to 32 s (+30%), stretched to the
   * server's Retry-After up to 60 s.
   */
  gate?: Gate | undefined;
  /**
   * The longest one connect may take, in ms (closing a lost session, the transport's
   * start, `initialize`), default 60 s (the gate's probe lease). Past it every caller
   * waiting on that connect gets a `TimeoutError` (which arms the gate), the client is
   * closed (letting go of the stream it waited on), and the next `connect()` after the
   * gate's window starts afresh. Without it, a connect that never settles would hold
   * every later `connect()` for good.
   */
  connectTimeoutMs?: number | undefined;
  /**
   * The longest closing waits for the server to end its session, in ms, default 2 s.
   * Closing a transport (`close()`, a connect's timeout, the SDK closing after a failed
   * connect, your own `client.close()`) first sends the DELETE the MCP spec asks of a
   * client that no longer needs its session (Streamable HTTP, Session Management), and
   * waits for the answer to an `initialize` in flight, which may open one (not that of a
   * connect that timed out: it had `connectTimeoutMs` to answer). Past this the DELETE
   * is let go, the transport closes all the same, and the server's session stays until
   * it expires. The DELETE is sent once, straight to `fetch` (past the policy's retry and
   * breaker: a server that is down refuses it at once); a failure is recorded as the
   * policy's are, so `fetch.toError()` names the DELETE. With the `auth` option it carries
   * the token the policy last stamped, and goes through the policy only when that one is
   * answered 401 (refreshed) or redirected, or before any was stamped.
   */
  closeTimeoutMs?: number | undefined;
}

/** A client that connects on demand, behind a start gate. */
export interface ResilientMcpClient<C extends McpClientLike, T extends McpTransportLike> {
  /** The SDK client; connected once `connect()` has resolved. */
  readonly client: C;
  /**
   * The fetch behind every transport, with `learn()` and `toError()` (see `mcpFetch()`).
   * Each transport gets it wrapped (`learn()` and `toError()` included), to see 404s.
   */
  readonly fetch: McpFetch;
  /** The start gate: `gate.state()` says whether connects fail fast and until when. */
  readonly gate: Gate;
  /** The transport of the current connection; undefined before `connect()`, after `close()`, and once the server has lost the session. */
  readonly transport: T | undefined;
  /**
   * Resolves with the connected client: at once when already connected, else after
   * one connect through the gate (concurrent callers share it). Rejects with
   * `GateClosedError` (nothing sent) while the gate is armed, with `TimeoutError` when
   * the connect took longer than `connectTimeoutMs`, with an `AbortError` when `close()`
   * was called before it opened its session, or with the connect's failure as a
   * breakwater error (`HttpStatusError`, `NetworkError`, ...).
   */
  connect(): Promise<C>;
  /**
   * Closes the client (and its transport). A connect in flight rejects with an
   * `AbortError` and opens no session; the next `connect()`, even one called before this
   * resolves, starts a new session.
   *
   * The server's session is ended first (MCP spec: an HTTP DELETE with its
   * `Mcp-Session-Id`; a 405 means the server does not allow it), also one a connect in
   * flight opened: its `initialize` answer is waited for. Never longer than
   * `closeTimeoutMs` (default 2 s), and never rejects for the server's sake: a failed or
   * timed-out DELETE only leaves the session to expire on the server, and the SDK
   * reports it to `client.onerror`. Requests made once closing began are not sent (they
   * reject with an `AbortError`). Transports without `terminateSession()` (the SSE
   * transport) just close.
   */
  close(): Promise<void>;
}

// Every option in one schema, named under resilientMcpClient(): mcpFetch()'s checked apart
// were named after a function the caller never called, and listed only once its own passed.
const optionsSchema = z.strictObject({
  ...resendShape,
  ...clientOptionsShape,
  maxResponseBytes: maxResponseBytesSchema,
  client: z.custom<McpClientLike>(
    (value) => typeof (value as McpClientLike | null)?.connect === 'function',
    'must be an MCP client (with connect())',
  ),
  transport: functionOption<(fetch: FetchLike) => McpTransportLike>(),
  policy: policySchema,
  gate: z.optional(
    z.custom<Gate>((value) => typeof (value as Gate | null)?.run === 'function', 'must be a gate'),
  ),
  connectTimeoutMs: z.optional(z.number().check(z.positive(), z.maximum(MAX_DELAY_MS))),
  closeTimeoutMs: z.optional(z.number().check(z.positive(), z.maximum(MAX_DELAY_MS))),
});

/**
 * An MCP client for agents: `connect()` on every turn, and a server that is down is
 * not asked again until the start gate's window has passed.
 *
 * - Connects through `mcpFetch(policy)` inside `gate.run()`: a refused connection,
 *   a timeout or a retryable status (503, 429) arms the gate; auth and config errors
 *   (401, 403, a bad URL) never do. While armed, `connect()` fails fast with
 *   `GateClosedError` (`retryAt`) and sends nothing. A connect still unsettled after
 *   `connectTimeoutMs` (default 60 s) fails with `TimeoutError` and arms the gate.
 * - Learns from every `tools/list` answer which tools the server annotates
 *   `readOnlyHint` / `idempotentHint`: those `tools/call`s may be resent after a 503
 *   or a reset; others never are unless the server proves it did not run them. A
 *   listing's first page replaces what earlier listings taught, and each page it
 *   points to adds (see `mcpResend()`'s `learn()`). A `notifications/tools/list_changed`
 *   from the server forgets every learned hint (the tools in `tools` stay) until the
 *   client lists again, and answers to listings then in flight teach nothing. So does
 *   the SDK reopening the session's GET stream: a notification sent while it was down is
 *   lost. Answers may arrive in any order: once a listing's first page is asked for,
 *   answers to the listings asked for before it only forget.
 * - Errors from requests (`client.callTool()`, ...) and from connect come out as
 *   breakwater errors: the SDK's `StreamableHTTPError` (and the SSE transport's failed
 *   POST) becomes an `HttpStatusError` (status, `retryAfterMs`, `serverMessage`) with the
 *   SDK's error as `cause`, and a retryable one arms the gate.
 * - A 404 for a request in a session means the server ended it (MCP spec): that
 *   request fails with the 404, and the next `connect()` closes the client and
 *   initializes a new session. So does a 404 to the SDK's GET stream (its reconnect
 *   after the server dropped it), which fails no request. With the legacy
 *   `SSEClientTransport` (no `Mcp-Session-Id`), a 404 to a request's POST does, and so
 *   does its stream reopened (its server gives each stream a new, uninitialized session). Each new session starts
 *   without learned hints (the server may have restarted with other tools): list its
 *   tools again.
 * - A request the SDK cancels (its caller aborted, or it timed out) is let go: never sent
 *   again after a 429's or a 503's wait. Its `notifications/cancelled` goes once, straight
 *   to `fetch` as the DELETE does (with the `auth` option too, see `closeTimeoutMs`), so a
 *   pause the server asked for does not hold it (see `mcpFetch()`).
 * - Closing ends the server's session with a DELETE first (MCP spec: clients that no
 *   longer need a session SHOULD), within `closeTimeoutMs` (default 2 s); see `close()`.
 *
 * @example
 * ```ts
 * import { Client } from '@modelcontextprotocol/sdk/client/index.js';
 * import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
 * import { definePolicy, GateClosedError } from 'breakwater';
 * import { resilientMcpClient } from 'breakwater/mcp';
 *
 * const url = new URL('https://mcp.example.com/mcp');
 * const github = resilientMcpClient({
 *   client: new Client({ name: 'my-agent', version: '1.0.0' }),
 *   transport: (fetch) => new StreamableHTTPClientTransport(url, { fetch }),
 *   policy: definePolicy({ name: 'github-mcp' }),
 * });
 *
 * // On every agent turn:
 * try {
 *   const client = await github.connect();
 *   const { tools } = await client.listTools(); // also teaches which tools are safe to resend
 * } catch (error) {
 *   if (!(error instanceof GateClosedError)) throw error;
 *   // The server failed recently; this turn goes on without its tools until error.retryAt.
 * }
 * ```
 */
export function resilientMcpClient<C extends McpClientLike, T extends McpTransportLike>(
  options: ResilientMcpClientOptions<C, T>,
): ResilientMcpClient<C, T> {
  validate(optionsSchema, options, 'resilientMcpClient()');
  const {
    client,
    transport: build,
    policy,
    gate: given,
    connectTimeoutMs,
    closeTimeoutMs,
    ...fetchOptions
  } = options;
  const timeoutMs = connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  const closeMs = closeTimeoutMs ?? DEFAULT_CLOSE_TIMEOUT_MS;
  const fetch = mcpFetch(policy, fetchOptions);
  /** Lets go of the requests waiting in a session (see `mcpFetch()`): cancellations and the DELETE go past it. */
  const letGo = (fetch as McpFetch & { [LET_GO]: LetGo })[LET_GO];
  /** Marks the session's DELETE to be sent once, past the policy (see `mcpFetch()`'s `Past`). */
  const past = (fetch as McpFetch & { [PAST]: Past })[PAST];
  const name = typeof options.key === 'string' ? options.key : policy.resolved.name;
  const gate = given ?? createGate({ key: name ?? DEFAULT_KEY });
  let current: T | undefined;
  let connecting: Promise<C> | undefined;
  /** Gives up the connect in flight (see {@link bounded}): `close()` ends it with an AbortError. */
  let giveUp: ((error: unknown) => void) | undefined;
  /**
   * How many times `close()` was called: a connect started before the latest one (its
   * gate may run it only later: a gate that awaits something first) opens no session.
   */
  let closes = 0;
  /** The connect the latest `close()` ended, which the gate may still hold as its probe. */
  let ended: Promise<C> | undefined;
  /**
   * Resolves once the SDK's `connect()` of the latest connect has settled, if it got as far
   * as sending (see {@link open}); else at once.
   */
  let unwound: () => Promise<unknown> | undefined = () => undefined;

  /** What a connect that `close()` came before, or a request made while closing, rejects with. */
  function closedError(): DOMException {
    return new DOMException('resilientMcpClient closed', 'AbortError');
  }

  /**
   * Routes the transport's failures through `toError()` and its `tools/list` answers to
   * `learn()`; returns what to call when the server answers 404 (the session is gone), or,
   * with `true`, when notifications may have been lost. `late()`: whether its connect timed out.
   * `legacy`: the transport names its session in its endpoint's URL, not by header (see {@link open}).
   */
  function wire(
    transport: Wired,
    sent: () => void,
    late: () => boolean,
    legacy: boolean,
  ): (missed?: boolean) => void {
    // A new session may list other tools (a restarted server, a new version): what the
    // last one taught no longer holds, and its server will send no list_changed for it.
    fetch.learn([]);
    /**
     * The ids of `tools/list` requests awaiting their answer, each with the cursor it
     * asked for; once outdated, with the transport instead: a cursor no page gives, so
     * `learn()` lets that answer only forget.
     */
    const pending = new Map<unknown, unknown>();
    /**
     * Forgets what listings taught: the tools may have changed (read-only turned
     * destructive), so a call made before the client lists again must not be resent on
     * them. A listing in flight may have been answered before the change, so its answer
     * teaches nothing. An empty first page forgets every learned hint, keeps the user's `tools`.
     */
    const forget = (): void => {
      pending.clear();
      fetch.learn([]);
    };
    /** Set once closing began: the transport then sends nothing but the DELETE. */
    let closing: Promise<void> | undefined;
    /** The `initialize` in flight: its answer may open a session, which closing then ends. */
    let initializing: Promise<unknown> = Promise.resolve();
    /** Whether the server said it no longer knows the session (404): no DELETE for it. */
    let lost = false;
    const close = transport.close?.bind(transport);
    // Every close of this transport (close(), a connect's timeout, the SDK's after a failed
    // connect, the user's client.close()) ends the server's session first, bounded: the
    // transport's own close aborts its signal, which would cut the DELETE, and after it
    // the session id (and the auth the SDK stamps) are out of reach.
    transport.close = () =>
      (closing ??= new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, closeMs);
        // Not the initialize of a connect that timed out: it had connectTimeoutMs to answer,
        // and waiting on would hold the next connect(), whose own timeout runs meanwhile.
        (late() ? Promise.resolve() : initializing)
          .then((): unknown => !lost && transport.sessionId && transport.terminateSession?.())
          // A failure is the SDK's to report (it calls onerror); the session then expires.
          .catch(() => {})
          .then(() => {
            clearTimeout(timer);
            resolve();
          });
      }).then(close));
    const send = transport.send.bind(transport);
    transport.send = async (message, sendOptions) => {
      // Closing began (the user is done with the session): a request now is not sent.
      if (closing) throw closedError();
      const { id, method, params } = (message ?? {}) as Message;
      if (method === 'tools/list' && id !== undefined) {
        // A new listing outdates those asked for before it: their answers may arrive after
        // its own (answers come in any order) and describe older tools, so they only forget.
        if (params?.cursor === undefined) for (const key of pending.keys()) pending.set(key, transport);
        if (pending.size >= MAX_PENDING_LISTS) pending.delete(pending.keys().next().value);
        pending.set(id, params?.cursor);
      }
      sent();
      const sending = send(message, sendOptions);
      if (method === 'initialize') initializing = sending.catch(() => {});
      try {
        return await sending;
      } catch (error) {
        // With the message: its id picks the failure that answered it among concurrent ones.
        const failure = fetch.toError(error, message);
        // The SSE transport's POSTs go to the endpoint its server named for the session: a
        // 404 there ("session not found", a restarted server) is the session gone too.
        if (legacy && (failure as { status?: unknown }).status === SESSION_GONE) lose();
        throw failure;
      }
    };
    // The SDK's Protocol keeps a handler set before connect() and calls it first.
    transport.onmessage = (message) => {
      // A transport the client has left (a new session began) speaks for a lost session.
      if (client.transport !== (transport as unknown)) return;
      const { id, method, result } = (message ?? {}) as Message;
      const cursor = pending.get(id);
      if (method === TOOLS_CHANGED) forget();
      else if (method === undefined && pending.delete(id)) {
        // (A request from the server has its own ids: one equal to a pending list's is not its answer.)
        // With the cursor it asked for: a first page replaces what earlier listings taught.
        fetch.learn(result as McpToolsList, cursor as string);
      }
    };
    /**
     * The server no longer knows the session (MCP spec), and the next connect() starts a new
     * one. Not closed here: closing now would fail the request as "Connection closed" instead
     * of with the 404, and every other in flight.
     */
    function lose(): void {
      lost = true;
      if (current === (transport as unknown)) current = undefined;
    }
    return (missed) => {
      if (missed) return forget();
      // A 404 for a request in the session, or the SSE transport's stream reopened.
      if (transport.sessionId || legacy) lose();
    };
  }

  /**
   * One connect; `live()` says false once it was given up, so a late success is not taken;
   * `late()` says true once it timed out.
   */
  async function open(live: () => boolean, late: () => boolean): Promise<C> {
    // A connect given up (close(), its timeout) may still be in the SDK's connect, which
    // fails once the client is closed and then closes the client itself (the SDK's
    // Client.connect does), whatever transport the client holds by then: this one's.
    await unwound();
    // A client still on a lost session: closed first (the SDK connects one transport at a time).
    if (client.transport !== undefined) await client.close();
    // Given up while closing (timed out, or close() came with no transport to close): no
    // session is opened, since nothing would end it; a later connect owns the client now.
    if (!live()) return client;
    let gone: (missed?: boolean) => void = () => {};
    /** Whether the server opened a GET stream in this session. */
    let streamed = false;
    /**
     * Whether the transport names its session in its endpoint's URL, not by `Mcp-Session-Id`:
     * the legacy `SSEClientTransport` (MCP 2024-11-05, HTTP with SSE), which has no `sessionId`.
     * Its server opens a new session for each GET of its stream, and its `endpoint` event
     * moves the transport's POSTs there, uninitialized: once the stream was open, its
     * reopening (the SDK's EventSource does so by itself, after the stream ended) is the
     * session gone, and so is a 404 to a POST.
     */
    let legacy = false;
    // The session's DELETE (sent only while closing) goes once, past the policy: its retry
    // resent a refused DELETE (a refused connect counts as not sent) until closeTimeoutMs,
    // so close() against a server that is down took all of it. So does a cancellation (sent
    // past it by mcpFetch() itself): while a 429 paces the key, the policy held it for the
    // pause, or refused it at once (a pause past maxRetryAfterMs), and the server ran on a
    // tool the user had stopped. See mcpFetch()'s `Past` for the `auth` option's credential.
    //
    // Every answer passes here, a GET stream's too, whose reconnect the SDK reports to
    // onerror only, without its status: a 404 there means the session is gone as well.
    // Not a 404 to the first GET: a server with no GET route may say so (Express does)
    // instead of the spec's 405, and its session works. Only requests in the session
    // count: the SDK's OAuth discovery and token requests pass here too, to other URLs,
    // where a 404 is a usual answer (metadata the server lacks).
    const transport = build(
      Object.assign((input: string | URL | Request, init?: RequestInit) => {
        const method = init?.method;
        const headers = new Headers(init?.headers);
        const session = headers.get(SESSION_HEADER);
        // The SSE transport's stream (not a GET of its OAuth discovery), which its EventSource
        // asks for without a method.
        const stream =
          legacy && (method ?? 'GET') === 'GET' && !!headers.get('accept')?.includes('text/event-stream');
        // A GET once the session's stream was open: the SDK reopens a stream that ended, and
        // what the server sent meanwhile (a tools/list_changed) is lost unless it replays it.
        // The SSE transport's stream reopened: a new session (see `legacy`).
        if (streamed && (stream || method === 'GET')) gone(!stream);
        const deleting = method === 'DELETE';
        // The session ends (closing): a request waiting out a 429 or a 503 must not be sent
        // again while the DELETE is awaited, only to fail once the transport closes.
        if (deleting) letGo(`${input} ${session}`, undefined, closedError());
        return fetch(input, deleting ? past(init) : init).then((response) => {
          const get = method === 'GET';
          if (stream && response.ok) streamed = true;
          if ((response.status === SESSION_GONE || (get && response.ok)) && session !== null) {
            if (response.ok) streamed = true;
            else if (streamed || !get) gone();
          }
          return response;
        });
      }, fetch),
    );
    legacy = !('sessionId' in transport);
    let sending = false;
    gone = wire(
      transport as unknown as Wired,
      () => {
        sending = true;
      },
      late,
      legacy,
    );
    const connected = client.connect(transport as never);
    // Waited for only once it has sent: before, it is in the transport's start, which may
    // never end (an SSE endpoint that never comes), and a start that fails closes nothing.
    unwound = () => (sending ? connected.catch(() => {}) : undefined);
    try {
      await connected;
    } catch (error) {
      throw fetch.toError(error);
    }
    if (live()) current = transport;
    return client;
  }

  /**
   * {@link open}, given up after `timeoutMs` (it rejects with `TimeoutError` and the client
   * is closed) or by `close()` through {@link giveUp}; `started`: {@link closes} when its
   * `connect()` came.
   */
  function bounded(started: number): Promise<C> {
    if (started !== closes) return Promise.reject(closedError());
    return new Promise<C>((resolve, reject) => {
      let live = true;
      let late = false;
      // Also clears the timer: once given up, this connect must not close a later one's session.
      const end = (error: unknown): void => {
        live = false;
        clearTimeout(timer);
        reject(error);
      };
      giveUp = end;
      const timer = setTimeout(() => {
        late = true;
        end(new TimeoutError({ scope: 'total', ms: timeoutMs }));
        // Closing the client closes its transport: the stream or socket the connect waits
        // on is let go, and the SDK fails the pending initialize (ignored: already rejected).
        client.close().catch(() => {});
      }, timeoutMs);
      open(
        () => live,
        () => late,
      )
        .then(resolve, reject)
        .finally(() => clearTimeout(timer));
    });
  }

  return {
    client,
    fetch,
    gate,
    get transport() {
      return client.transport === current ? current : undefined;
    },
    connect(): Promise<C> {
      if (current !== undefined && client.transport === current) return Promise.resolve(client);
      if (connecting === undefined) {
        const started = closes;
        const go = (): Promise<C> => gate.run(() => bounded(started));
        // Through the gate once the connect close() ended has settled: till then the gate
        // may count that one as its probe in flight, and refuse this one with GateClosedError.
        const run: Promise<C> = (ended ? ended.then(go, go) : go()).finally(() => {
          // Not a later connect's: close() lets go of the one it ends at once.
          if (connecting === run) connecting = undefined;
        });
        connecting = run;
      }
      return connecting;
    },
    async close(): Promise<void> {
      const pending = connecting;
      ended = pending ?? ended;
      closes++;
      // A connect() from now on, even before this resolves, starts a new session
      // instead of joining the one ended here.
      connecting = undefined;
      // A connect in flight gives up: it rejects at once and opens no session.
      giveUp?.(closedError());
      current = undefined;
      // Handled now: the connect it ended rejects while the DELETE below is awaited.
      const settled = pending?.catch(() => {});
      await client.close();
      // Resolves once the connect it ended has settled (one its gate had not run yet too).
      await settled;
    },
  };
}
