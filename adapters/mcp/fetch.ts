/**
 * @module
 * `mcpFetch()`: a policy's fetch for the MCP SDK's `StreamableHTTPClientTransport`
 * (its `fetch` option) that resends only what is safe to send twice (`mcpResend()`)
 * and gives back what the SDK's errors lose.
 *
 * The SDK turns a failure response into `StreamableHTTPError` with the status as
 * `code` and the body in the message: Retry-After, the other headers and the
 * server's own message are gone. This fetch keeps the last failure response of each
 * status it saw, and `toError()` rebuilds a breakwater `HttpStatusError` from it,
 * with the SDK's error as `cause`.
 */

import * as z from 'zod/mini';
import type { AuthOptions } from '../../src/auth.ts';
import { Call, type FetchLike, type KeyOption } from '../../src/call.ts';
import type { StatusSnapshot } from '../../src/capture.ts';
import { isRetryableStatus } from '../../src/classify.ts';
import { BreakwaterError, HttpStatusError, requestSummary } from '../../src/errors.ts';
import type { BreakwaterEvent } from '../../src/events.ts';
import { IDEMPOTENCY_KEY_HEADER } from '../../src/idempotency-key.ts';
import { functionOption, keyOptionSchema, onEventSchema, validate } from '../../src/options.ts';
import type { Policy } from '../../src/policy.ts';
import { type McpResendOptions, type McpToolInfo, mcpResend, resendShape } from './resend.ts';

/**
 * How a call judged safe is marked idempotent inside the policy's chain, which has no
 * place for an extra middleware: an `Idempotency-Key` with this value (retry counts a
 * keyed request as idempotent), removed again before the request reaches the
 * network, so the server never sees it.
 */
const MARK = 'breakwater-mcp-safe-to-resend';

/** Options for {@link mcpFetch}. */
export interface McpFetchOptions extends McpResendOptions {
  /** The fetch under the policy's chain. Default: the global `fetch`, looked up per call. */
  fetch?: FetchLike | undefined;
  /** Stamps and refreshes a token (`auth()` options). Default: none (the SDK's `authProvider` still works). */
  auth?: AuthOptions | undefined;
  /** Receives typed events from this fetch's calls. Default: none. */
  onEvent?: ((event: BreakwaterEvent) => void) | undefined;
  /** The server's name for breakers, pacing and messages. Default: the policy's `name`, else the URL's origin. */
  key?: KeyOption | undefined;
}

/** A fetch for the MCP SDK's transport, with what it learned. */
export interface McpFetch extends FetchLike {
  /** Records the server's tool annotations (`(await client.listTools()).tools`); see `mcpResend()`. */
  learn(tools: readonly McpToolInfo[]): void;
  /**
   * The breakwater error for an error the MCP SDK threw after a failure response
   * through this fetch (`StreamableHTTPError`, whose `code` is the status): an
   * `HttpStatusError` with the status, the server's delay (`retryAfterMs`), its
   * message, the body's start and safe headers, and the SDK's error as `cause`.
   * Any other error (a breakwater error, `McpError`, an abort) comes back unchanged.
   */
  toError(error: unknown): unknown;
}

const optionsSchema = z.optional(
  z.strictObject({
    ...resendShape,
    fetch: z.optional(functionOption<FetchLike>()),
    auth: z.optional(
      z.custom<AuthOptions>((value) => value !== null && typeof value === 'object', 'must be an object'),
    ),
    onEvent: onEventSchema,
    key: keyOptionSchema,
  }),
);

/** The HTTP status an MCP SDK transport error carries as `code` (`StreamableHTTPError`, `SseError`), if any. */
function sdkStatus(error: unknown): number | undefined {
  if (!(error instanceof Error) || error instanceof BreakwaterError || error.name === 'McpError')
    return undefined;
  // McpError's code is a JSON-RPC code; a transport's is the response status.
  const code = (error as { code?: unknown }).code;
  return Number.isInteger(code) && (code as number) >= 400 && (code as number) <= 599
    ? (code as number)
    : undefined;
}

/** The `HttpStatusError` a snapshot describes, with `cause` as its cause. */
function fromSnapshot(said: StatusSnapshot, cause: unknown): HttpStatusError {
  const headers = new Headers(said.headers);
  return new HttpStatusError({
    status: said.status,
    statusText: said.statusText,
    retryable: isRetryableStatus(said.status, headers),
    retryAfterMs: said.retryAfterMs,
    body: said.body,
    serverMessage: said.serverMessage,
    headers,
    request: requestSummary(said.key, said.method, said.url),
    cause,
  });
}

/**
 * A fetch through `policy` for the MCP SDK's `StreamableHTTPClientTransport`:
 * - MCP requests that are safe to send twice (read-only methods, tools annotated
 *   `readOnlyHint` / `idempotentHint` once `learn()` has seen them, tools you list in
 *   `tools`) are resent after a 503 or a connection reset; every other POST, a
 *   `tools/call` above all, is resent only when the server proves it did not run it
 *   (a 429, `x-should-retry: true`, a refused connection). GET (the SSE stream) and
 *   DELETE (session end) are idempotent by method.
 * - Streams (`text/event-stream`) are never buffered, and only the wait for their
 *   headers is timed, as everywhere in breakwater.
 * - `toError(error)` turns the SDK's `StreamableHTTPError` back into an
 *   `HttpStatusError` with Retry-After and the server's message.
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
 *   fetch.learn((await client.listTools()).tools);
 * } catch (error) {
 *   throw fetch.toError(error); // HttpStatusError: status, retryAfterMs, serverMessage
 * }
 * ```
 */
export function mcpFetch(policy: Policy, options?: McpFetchOptions): McpFetch {
  const valid = validate(optionsSchema, options, 'mcpFetch()') ?? {};
  const { tools, hints, maxBodyChars, fetch: base, onEvent } = valid;
  const resend = mcpResend({ tools, hints, maxBodyChars });
  /** The latest failure response of each status (at most one per status: bounded). */
  const failures = new Map<number, StatusSnapshot>();

  /** The end of the policy's chain: drops the mark, then calls the real fetch. */
  const send: FetchLike = (input, init) => {
    const headers = init?.headers;
    if (headers instanceof Headers && headers.get(IDEMPOTENCY_KEY_HEADER) === MARK) {
      // A copy: the call keeps its mark for retry to read after this attempt.
      const unmarked = new Headers(headers);
      unmarked.delete(IDEMPOTENCY_KEY_HEADER);
      init = { ...init, headers: unmarked };
    }
    const real = base ?? globalThis.fetch;
    return init === undefined ? real(input) : real(input, init);
  };

  const chain = policy.fetch(send, {
    auth: valid.auth,
    key: valid.key,
    onEvent(event) {
      if (event.type === 'captured') failures.set(event.snapshot.status, event.snapshot);
      onEvent?.(event);
    },
  } as Parameters<Policy['fetch']>[1]);

  const fetch = function mcpFetch(input: string | URL | Request, init?: RequestInit): Promise<Response> {
    // Judged on the request as the SDK built it; a keyed request is idempotent already.
    const call = new Call(input, init, undefined, undefined);
    if (call.header(IDEMPOTENCY_KEY_HEADER) !== null || !resend.isSafe(call)) return chain(input, init);
    call.setHeader(IDEMPOTENCY_KEY_HEADER, MARK);
    return chain(input, call.init);
  } as McpFetch;
  fetch.learn = resend.learn;
  fetch.toError = (error) => {
    const status = sdkStatus(error);
    if (status === undefined) return error;
    const said = failures.get(status);
    // No failure of that status came through this fetch: the status is all there is.
    return said
      ? fromSnapshot(said, error)
      : new HttpStatusError({ status, retryable: isRetryableStatus(status), cause: error });
  };
  return fetch;
}
