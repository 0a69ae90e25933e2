import assert from 'node:assert/strict';
import { test } from 'node:test';
// @ts-types="@modelcontextprotocol/sdk/client/index"
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
// @ts-types="@modelcontextprotocol/sdk/server/mcp"
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
// @ts-types="@modelcontextprotocol/sdk/server/webStandardStreamableHttp"
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import * as z from 'zod';
import type { BreakwaterEvent } from '../src/events.ts';
import { definePolicy } from '../src/policy.ts';
import { withApp } from './helpers/hono-server.ts';

const fast = { initialMs: 5, maxMs: 20, jitter: 'none' } as const;

/** What reached the app: every request's method, and how many POSTs the MCP server handled. */
interface Seen {
  methods: string[];
  handled: number;
}

/**
 * A real MCP server (stateless, JSON responses: one fresh server and transport per
 * request, no SSE stream left open), behind a fault layer that answers the first
 * `faults` POSTs 503 with `retry-after-ms: 50` before the MCP transport sees them.
 * `shouldRetry` adds `x-should-retry: true`: the handler never ran, as `shed()` says.
 */
function mcpApp(faults: number, shouldRetry: boolean, seen: Seen) {
  let posts = 0;
  return {
    async fetch(request: Request): Promise<Response> {
      seen.methods.push(request.method);
      // No standalone SSE stream at GET: 405 is the spec's way to say so, and the client accepts it.
      if (request.method !== 'POST') return new Response(null, { status: 405, headers: { allow: 'POST' } });
      if (posts++ < faults) {
        // Read, not cancelled: @hono/node-server drains an unread request body from timers
        // it starts when the connection closes, which Deno's test then reports as leaked.
        await request.text();
        const headers: Record<string, string> = {
          'retry-after-ms': '50',
          'content-type': 'application/json',
        };
        if (shouldRetry) headers['x-should-retry'] = 'true';
        return new Response('{"error":{"message":"overloaded, try again"}}', { status: 503, headers });
      }
      seen.handled++;
      const server = new McpServer({ name: 'adder', version: '1.0.0' });
      server.registerTool(
        'add',
        { description: 'Adds two numbers', inputSchema: { a: z.number(), b: z.number() } },
        async ({ a, b }) => ({ content: [{ type: 'text', text: String(a + b) }] }),
      );
      const transport = new WebStandardStreamableHTTPServerTransport({
        enableJsonResponse: true,
      });
      await server.connect(transport);
      try {
        return await transport.handleRequest(request);
      } finally {
        await server.close();
      }
    },
  };
}

/** What a test gets from {@link withSdkClient}. */
interface Sdk {
  policy: ReturnType<typeof definePolicy>;
  events: BreakwaterEvent[];
  transport: StreamableHTTPClientTransport;
  client: Client;
}

/**
 * Serves `mcpApp(1, shouldRetry, seen)` and runs `fn` with an SDK client, not yet connected,
 * on the fetch of a policy `mcp-test` whose events are recorded; then closes the client and
 * its transport.
 */
async function withSdkClient(
  seen: Seen,
  shouldRetry: boolean,
  fn: (sdk: Sdk) => Promise<void>,
): Promise<void> {
  await withApp(mcpApp(1, shouldRetry, seen), async (app) => {
    const policy = definePolicy({ name: 'mcp-test', retry: { backoff: fast } });
    const events: BreakwaterEvent[] = [];
    const transport = new StreamableHTTPClientTransport(new URL(`${app.origin}/mcp`), {
      fetch: policy.fetch(undefined, { onEvent: (event) => events.push(event) }),
      // The SDK never resends a POST, and its SSE reconnection is off: breakwater decides.
      reconnectionOptions: {
        maxRetries: 0,
        initialReconnectionDelay: 1,
        maxReconnectionDelay: 1,
        reconnectionDelayGrowFactor: 1,
      },
    });
    const client = new Client({ name: 'breakwater-test', version: '1.0.0' });
    try {
      await fn({ policy, events, transport, client });
    } finally {
      await client.close();
      await transport.close();
    }
  });
}

test('the MCP SDK on breakwater’s fetch: a 503 with x-should-retry before initialize is waited out, then a tool call works', async () => {
  const seen: Seen = { methods: [], handled: 0 };
  await withSdkClient(seen, true, async ({ policy, events, transport, client }) => {
    const started = performance.now();
    await client.connect(transport);
    assert.ok(performance.now() - started >= 45, 'the server’s 50 ms delay was waited out');
    assert.equal(client.getServerVersion()?.name, 'adder');
    assert.deepEqual(seen.methods.slice(0, 2), ['POST', 'POST'], 'the initialize POST was resent once');

    const result = await client.callTool({ name: 'add', arguments: { a: 2, b: 3 } });
    assert.deepEqual(result.content, [{ type: 'text', text: '5' }]);

    // The resend waited the server's delay, not a backoff step: what was left of its 50 ms
    // once the capture had read the 503's body (a few ms, or all of it under load: the whole
    // wait, from the headers, is checked above).
    const retries = events.filter((event) => event.type === 'retry');
    const delayMs = retries[0]?.delayMs ?? -1;
    assert.ok(delayMs >= 0 && delayMs <= 50, `waited ${delayMs} ms of the server's 50`);
    assert.deepEqual(retries, [
      { type: 'retry', key: 'mcp-test', attempt: 1, delayMs, delaySource: 'server', reason: 'HTTP 503' },
    ]);
    const captured = events.flatMap((event) => (event.type === 'captured' ? [event.snapshot] : []));
    assert.equal(captured[0]?.status, 503);
    assert.equal(captured[0]?.retryAfterMs, 50);
    assert.equal(policy.stats('mcp-test').retry?.retries, 1);
  });
  // initialize, notifications/initialized and tools/call reached the MCP server; the fault did not.
  assert.equal(seen.handled, 3);
});

test('the MCP SDK on breakwater’s fetch: a 503 without x-should-retry is not resent, and capture keeps the status and delay', async () => {
  const seen: Seen = { methods: [], handled: 0 };
  await withSdkClient(seen, false, async ({ policy, events, client, transport }) => {
    // The SDK's error keeps the status (as `code`) and the raw body in its message, not the server's delay.
    await assert.rejects(
      client.connect(transport),
      (error: unknown) => error instanceof StreamableHTTPError && error.code === 503,
    );
    assert.deepEqual(seen.methods, ['POST'], 'initialize may have run: not resent without the server’s word');
    assert.equal(seen.handled, 0);
    const failure = policy.stats('mcp-test').lastFailure;
    assert.equal(failure?.status, 503);
    assert.equal(failure?.retryAfterMs, 50);
    assert.equal(failure?.method, 'POST');
    assert.equal(failure?.serverMessage, 'overloaded, try again');
    assert.deepEqual(
      events.flatMap((event) => (event.type === 'give-up' ? [event.why] : [])),
      ['unsafe-to-resend'],
    );
  });
});
