/**
 * @module
 * `mcpFetch()`: a policy's fetch for the MCP SDK's `StreamableHTTPClientTransport`
 * (its `fetch` option) that resends only what is safe to send twice (`mcpResend()`)
 * and gives back what the SDK's errors lose.
 *
 * The SDK turns a failure response into `StreamableHTTPError` with the status as
 * `code` and the body in the message: Retry-After, the other headers and the
 * server's own message are gone. This fetch keeps the last few failure responses of
 * each status it saw, and `toError()` rebuilds a breakwater `HttpStatusError` from the
 * one whose body the SDK's message quotes (else the latest), with the SDK's error as
 * `cause`.
 */

import * as z from 'zod/mini';
import type { FetchLike } from '../../src/call.ts';
import type { StatusSnapshot } from '../../src/capture.ts';
import { oneLine } from '../../src/errors.ts';
import { clientOptionsShape, validate } from '../../src/options.ts';
import type { Policy, PolicyClientOptions } from '../../src/policy.ts';
import { redactText } from '../../src/redact.ts';
import { wrapHttpError } from '../../src/status.ts';
import {
  type McpResendOptions,
  type McpToolInfo,
  type McpToolsList,
  mcpResend,
  resendShape,
} from './resend.ts';

/**
 * Options for {@link mcpFetch}: which MCP requests may be resent, and the client
 * options for `policy.fetch()`. `auth` is optional: the SDK's `authProvider` still works.
 */
export interface McpFetchOptions extends McpResendOptions, PolicyClientOptions {}

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
   * through this fetch (`StreamableHTTPError`, whose `code` is the status): an
   * `HttpStatusError` with the status, the server's delay (`retryAfterMs`), its
   * message, the body's start and safe headers, and the SDK's error as `cause`.
   * Any other error (a breakwater error, `McpError`, an abort) comes back unchanged.
   */
  toError(error: unknown): unknown;
}

/**
 * How old a failure response may be and still explain an SDK error, in ms. The SDK
 * throws as soon as it has read the failing answer (its body, at most a few seconds
 * on a slow server), so an older snapshot of the same status belongs to an earlier
 * request: its Retry-After and message would mislead.
 */
const MAX_SNAPSHOT_AGE_MS = 30_000;
/** Failures kept per status, for `toError()` to tell concurrent ones apart by their body. */
const SNAPSHOTS_PER_STATUS = 8;

const optionsSchema = z.optional(
  z.strictObject({
    ...resendShape,
    ...clientOptionsShape,
  }),
);

/** The HTTP status an MCP SDK transport error carries as `code` (`StreamableHTTPError`, `SseError`), if any. */
function sdkStatus(error: unknown): number | undefined {
  if (!(error instanceof Error) || error.name === 'McpError') return undefined;
  // McpError's code is a JSON-RPC code; a transport's is the response status; a
  // breakwater error's is a string (`HTTP_STATUS`, `ECONNRESET`), never a status.
  const code = (error as { code?: unknown }).code;
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
 *   fetch.learn(await client.listTools());
 * } catch (error) {
 *   throw fetch.toError(error); // HttpStatusError: status, retryAfterMs, serverMessage
 * }
 * ```
 */
export function mcpFetch(policy: Policy, options?: McpFetchOptions): McpFetch {
  const valid = validate(optionsSchema, options, 'mcpFetch()') ?? {};
  const { tools, hints, maxBodyChars, fetch: base, onEvent } = valid;
  const resend = mcpResend({ tools, hints, maxBodyChars });
  /** The latest failure responses of each status, oldest first (a few per status: bounded). */
  const failures = new Map<number, StatusSnapshot[]>();

  const fetch = policy.fetch(base, {
    auth: valid.auth,
    key: valid.key,
    // Outermost, so retry's resend rule sees the mark on calls judged safe.
    use: [resend],
    onEvent(event) {
      if (event.type === 'captured') {
        const { status } = event.snapshot;
        failures.set(status, [
          ...(failures.get(status) ?? []).slice(1 - SNAPSHOTS_PER_STATUS),
          event.snapshot,
        ]);
      }
      onEvent?.(event);
    },
  }) as McpFetch;
  fetch.learn = resend.learn;
  fetch.toError = (error) => {
    const status = sdkStatus(error);
    if (status === undefined) return error;
    // The SDK's message quotes a failed POST's body: of the recent failures of that
    // status, the one whose body it quotes (two concurrent 503s keep their own
    // Retry-After), else the latest. None: the status is all there is.
    // Redacted as the snapshots' bodies are, or a body quoting a URL with a query never
    // matches. A message that is not a string is matched as one; one that throws, as none.
    let message = '';
    try {
      message = redactText(oneLine(`${(error as Error).message}`));
    } catch {}
    const recent = (failures.get(status) ?? []).filter((said) => Date.now() - said.at <= MAX_SNAPSHOT_AGE_MS);
    const said = recent.filter((s) => s.body && message.includes(s.body)).pop() ?? recent.pop();
    return wrapHttpError(status, said, error);
  };
  return fetch;
}
