import assert from 'node:assert/strict';
import { test } from 'node:test';
// @ts-types="@modelcontextprotocol/sdk/client/index"
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
// @ts-types="@modelcontextprotocol/sdk/server/mcp"
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
// @ts-types="@modelcontextprotocol/sdk/server/webStandardStreamableHttp"
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { mcpFetch } from '../adapters/mcp/index.ts';
import { HttpStatusError } from '../src/errors.ts';
import { definePolicy } from '../src/policy.ts';
import { withApp } from './helpers/hono-server.ts';

/** A failure the app answers a `tools/call` of a tool with, instead of running it. */
interface Fault {
  status: number;
  headers?: Record<string, string>;
  body?: string;
}

/**
 * A real MCP server (stateless: one server and transport per request) with the tools
 * named in `faults` plus `ok`; a `tools/call` of a tool in `faults` is answered with
 * its fault instead. GET answers 405 (no standalone SSE stream).
 */
function faultyApp(faults: Record<string, Fault>) {
  return {
    async fetch(request: Request): Promise<Response> {
      if (request.method !== 'POST') return new Response(null, { status: 405, headers: { allow: 'POST' } });
      const text = await request.text();
      const message = JSON.parse(text) as { method?: string; params?: { name?: string } };
      const fault = message.method === 'tools/call' ? faults[String(message.params?.name)] : undefined;
      if (fault) {
        return new Response(fault.body ?? '', {
          status: fault.status,
          headers: { 'content-type': 'application/json', ...fault.headers },
        });
      }
      const server = new McpServer({ name: 'faulty', version: '1.0.0' });
      for (const name of ['ok', ...Object.keys(faults)]) {
        server.registerTool(name, { description: name }, async () => ({
          content: [{ type: 'text' as const, text: `${name} ran` }],
        }));
      }
      const transport = new WebStandardStreamableHTTPServerTransport({ enableJsonResponse: true });
      await server.connect(transport);
      try {
        return await transport.handleRequest(
          new Request(request.url, { method: 'POST', headers: request.headers, body: text }),
        );
      } finally {
        await server.close();
      }
    },
  };
}

/** An SDK client on `mcpFetch()` without retries or breaker, connected to `origin` for `fn`, then closed. */
async function withClient(
  origin: string,
  fn: (client: Client, fetch: ReturnType<typeof mcpFetch>) => Promise<void>,
): Promise<void> {
  const fetch = mcpFetch(definePolicy({ name: 'review', retry: false, breaker: false }));
  const client = new Client({ name: 'breakwater-review', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${origin}/mcp`), { fetch }));
  try {
    await fn(client, fetch);
  } finally {
    await client.close();
  }
}

test('toError() tells two 503s apart by their bodies even when the bodies quote a URL with a query', async () => {
  const faults: Record<string, Fault> = {
    add: {
      status: 503,
      headers: { 'retry-after': '7' },
      body: '{"error":{"message":"add is overloaded, see https://status.example.com/?incident=41"}}',
    },
    wipe: {
      status: 503,
      headers: { 'retry-after': '2' },
      body: '{"error":{"message":"wipe is paused, see https://status.example.com/?incident=42"}}',
    },
  };
  await withApp(faultyApp(faults), async (app) => {
    await withClient(app.origin, async (client, fetch) => {
      const add = await client.callTool({ name: 'add', arguments: {} }).catch((e: unknown) => e);
      const wipe = await client.callTool({ name: 'wipe', arguments: {} }).catch((e: unknown) => e);
      // Judged after both failed, as an agent that ran them in parallel would.
      const [addError, wipeError] = [fetch.toError(add), fetch.toError(wipe)];
      assert.ok(addError instanceof HttpStatusError && wipeError instanceof HttpStatusError);
      assert.equal(addError.retryAfterMs, 7000, 'add got the Retry-After of another failure');
      assert.match(String(addError.serverMessage), /^add is overloaded/);
      assert.equal(wipeError.retryAfterMs, 2000);
    });
  });
});

test('toError() turns a status error whose message is not a string, or cannot be read, into an HttpStatusError instead of throwing', () => {
  const fetch = mcpFetch(definePolicy({ retry: false }));
  class NumberMessage extends Error {
    code = 503;
    override get message(): string {
      return 42 as never;
    }
  }
  class UnreadableMessage extends Error {
    code = 503;
    override get message(): string {
      throw new Error('getter failed');
    }
  }
  for (const error of [new NumberMessage(), new UnreadableMessage()]) {
    let converted: unknown;
    assert.doesNotThrow(() => {
      converted = fetch.toError(error);
    }, error.constructor.name);
    assert.ok(converted instanceof HttpStatusError, error.constructor.name);
    assert.equal(converted.status, 503);
    assert.equal(converted.cause, error);
  }
});
