/**
 * @module
 * `breakwater/mcp`: the MCP TypeScript SDK's Streamable HTTP client, made steady.
 *
 * - {@link mcpResend}: marks MCP calls that are safe to send twice (read-only JSON-RPC
 *   methods, tools annotated `readOnlyHint` / `idempotentHint`), so retry resends
 *   those after a 503 or a reset and never a `tools/call` that may have run.
 * - {@link mcpFetch}: a policy's fetch for `StreamableHTTPClientTransport` with that
 *   rule built in, and `toError()` to get the status, Retry-After and the server's
 *   message back from the SDK's `StreamableHTTPError`.
 * - {@link resilientMcpClient}: connect on every agent turn behind a start gate,
 *   learn tool annotations from `tools/list`, errors as breakwater errors.
 *
 * The SDK is not imported at run time: clients and transports are typed by shape, so
 * any 1.x version with `connect()` and a `fetch` option works.
 *
 * @example
 * ```ts
 * import { Client } from '@modelcontextprotocol/sdk/client/index.js';
 * import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
 * import { definePolicy } from 'breakwater';
 * import { resilientMcpClient } from 'breakwater/mcp';
 *
 * const mcp = resilientMcpClient({
 *   client: new Client({ name: 'my-agent', version: '1.0.0' }),
 *   transport: (fetch) => new StreamableHTTPClientTransport(new URL('https://mcp.example.com/mcp'), { fetch }),
 *   policy: definePolicy({ name: 'example-mcp' }),
 * });
 * const client = await mcp.connect();
 * ```
 */

export { DEFAULT_MAX_RESPONSE_BYTES } from '../../src/body-limit.ts';
export type {
  McpClientLike,
  McpTransportLike,
  ResilientMcpClient,
  ResilientMcpClientOptions,
} from './client.ts';
export { resilientMcpClient } from './client.ts';
export type { McpFetch, McpFetchOptions } from './fetch.ts';
export { mcpFetch } from './fetch.ts';
export type { McpResend, McpResendOptions, McpToolInfo, McpToolsList } from './resend.ts';
export { DEFAULT_MAX_BODY_CHARS, mcpResend } from './resend.ts';

/** The subpath this module is published under. */
export const ADAPTER: 'breakwater/mcp' = 'breakwater/mcp';
