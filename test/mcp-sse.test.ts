import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
// @ts-types="@modelcontextprotocol/sdk/client/index"
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
// @ts-types="@modelcontextprotocol/sdk/client/sse"
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
// @ts-types="@modelcontextprotocol/sdk/server/mcp"
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
// @ts-types="@modelcontextprotocol/sdk/server/sse"
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { mcpFetch, resilientMcpClient } from '../adapters/mcp/index.ts';
import { GateClosedError, HttpStatusError } from '../src/errors.ts';
import { definePolicy } from '../src/policy.ts';

/** A failure the app answers a POST with instead of the MCP server. */
interface Fault {
  status: number;
  headers?: Record<string, string>;
  body?: string;
}

/** What reached the app. */
interface Seen {
  /** Every request, as `METHOD /path`. */
  requests: string[];
  /** POSTs per JSON-RPC method that reached the MCP server. */
  posts: Record<string, number>;
  /** The SSE responses of the streams open now, by session id. */
  streams: Map<string, ServerResponse>;
}

/** A legacy MCP server (HTTP with SSE, 2024-11-05): `GET /sse` opens a session, `POST /messages?sessionId=` feeds it. */
interface SseApp {
  url: URL;
  seen: Seen;
  /** Decides, for each POST by its JSON-RPC method, whether to answer it with a fault. */
  fault: (method: string) => Fault | undefined;
  /** Forgets every session as a restarted server would (their streams kept open): their POSTs get 404. */
  forget(): void;
  close(): Promise<void>;
}

async function readBody(req: IncomingMessage): Promise<string> {
  let text = '';
  for await (const chunk of req) text += chunk;
  return text;
}

/** Starts an MCP server with one tool (`echo`) over the SDK's `SSEServerTransport` on 127.0.0.1, port 0. */
async function sseApp(): Promise<SseApp> {
  const seen: Seen = { requests: [], posts: {}, streams: new Map() };
  const transports = new Map<string, SSEServerTransport>();
  const app: SseApp = {
    url: new URL('http://127.0.0.1'),
    seen,
    fault: () => undefined,
    forget: () => transports.clear(),
    close: async () => {},
  };
  const http = createServer(async (req, res) => {
    const path = new URL(`${req.url}`, 'http://x');
    seen.requests.push(`${req.method} ${path.pathname}`);
    if (req.method === 'GET' && path.pathname === '/sse') {
      const transport = new SSEServerTransport('/messages', res);
      transports.set(transport.sessionId, transport);
      seen.streams.set(transport.sessionId, res);
      res.on('close', () => seen.streams.delete(transport.sessionId));
      const server = new McpServer({ name: 'sse-tools', version: '1.0.0' });
      server.registerTool('echo', { description: 'echo' }, async () => ({
        content: [{ type: 'text', text: 'echoed' }],
      }));
      await server.connect(transport);
      // A reconnect delay of 10 ms (SSE `retry` field), not EventSource's default 3 s.
      res.write('retry: 10\n\n');
      return;
    }
    if (req.method === 'POST' && path.pathname === '/messages') {
      const body = JSON.parse(await readBody(req));
      const fault = app.fault(body.method);
      if (fault) {
        res.writeHead(fault.status, { 'content-type': 'application/json', ...fault.headers });
        res.end(fault.body ?? '');
        return;
      }
      const transport = transports.get(`${path.searchParams.get('sessionId')}`);
      // As the SDK's example servers answer a session they do not know (a restart, an expiry).
      if (!transport) {
        res.writeHead(404).end('Session not found');
        return;
      }
      seen.posts[body.method] = (seen.posts[body.method] ?? 0) + 1;
      await transport.handlePostMessage(req, res, body);
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  app.url = new URL(`http://127.0.0.1:${(http.address() as AddressInfo).port}/sse`);
  app.close = async () => {
    for (const transport of transports.values()) await transport.close();
    http.closeAllConnections();
    await new Promise((resolve) => http.close(resolve));
  };
  return app;
}

async function withSseApp(run: (app: SseApp) => Promise<void>): Promise<void> {
  const app = await sseApp();
  try {
    await run(app);
  } finally {
    await app.close();
  }
}

const overloaded: Fault = {
  status: 503,
  headers: { 'retry-after': '7' },
  body: '{"error":{"message":"overloaded, come back later"}}',
};

function sseClient(app: SseApp, name: string) {
  return resilientMcpClient({
    client: new Client({ name: 'agent', version: '1.0.0' }),
    transport: (fetch) => new SSEClientTransport(app.url, { fetch }),
    policy: definePolicy({ name, retry: { attempts: 1 } }),
  });
}

/** Waits (up to 5 s) until `done()` holds. */
async function eventually(done: () => boolean, what: string): Promise<void> {
  for (let waited = 0; !done(); waited += 5) {
    assert.ok(waited < 5000, `timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

test('SSE transport: a tools/call answered 503 with Retry-After comes out as HttpStatusError with status, retryAfterMs and the server message', async () => {
  await withSseApp(async (app) => {
    const mcp = sseClient(app, 'sse-status');
    try {
      const client = await mcp.connect();
      app.fault = (method) => (method === 'tools/call' ? overloaded : undefined);
      await assert.rejects(client.callTool({ name: 'echo', arguments: {} }), (error: unknown) => {
        assert.ok(error instanceof HttpStatusError, `an HttpStatusError, not ${error}`);
        assert.equal(error.status, 503);
        assert.equal(error.retryAfterMs, 7000);
        assert.equal(error.serverMessage, 'overloaded, come back later');
        assert.equal(error.request?.method, 'POST');
        assert.match(`${(error.cause as Error).message}`, /^Error POSTing to endpoint \(HTTP 503\)/);
        return true;
      });
    } finally {
      await mcp.close();
    }
  });
});

test('SSE transport: an initialize answered 503 arms the start gate: the next turns fail fast with GateClosedError and send nothing', async () => {
  await withSseApp(async (app) => {
    app.fault = (method) => (method === 'initialize' ? overloaded : undefined);
    const mcp = sseClient(app, 'sse-gate');
    try {
      await assert.rejects(mcp.connect(), (error: unknown) => {
        assert.ok(error instanceof HttpStatusError, `an HttpStatusError, not ${error}`);
        assert.equal(error.status, 503);
        assert.equal(error.retryAfterMs, 7000);
        return true;
      });
      // The stream's GET and the initialize POST.
      assert.deepEqual(app.seen.requests, ['GET /sse', 'POST /messages']);
      const state = mcp.gate.state();
      assert.equal(state.armed, true);
      // Stretched to the server's Retry-After.
      assert.ok((state.retryAt?.getTime() ?? 0) - Date.now() > 6000, `armed ~7 s, not ${state.retryAt}`);
      for (let turn = 0; turn < 3; turn++) {
        await assert.rejects(mcp.connect(), GateClosedError);
      }
      assert.equal(app.seen.requests.length, 2, `no request while the gate is armed: ${app.seen.requests}`);
    } finally {
      await mcp.close();
    }
  });
});

test('SSE transport: a POST answered 404 (the server lost the session) makes the next connect() open a new session', async () => {
  await withSseApp(async (app) => {
    const mcp = sseClient(app, 'sse-404');
    try {
      const client = await mcp.connect();
      const first = mcp.transport;
      app.forget();
      await assert.rejects(client.callTool({ name: 'echo', arguments: {} }), (error: unknown) => {
        assert.ok(error instanceof HttpStatusError, `an HttpStatusError, not ${error}`);
        assert.equal(error.status, 404);
        return true;
      });
      assert.equal(mcp.transport, undefined, 'the lost session is no longer current');
      const again = await mcp.connect();
      assert.notEqual(mcp.transport, first, 'a new transport');
      assert.equal(app.seen.posts.initialize, 2);
      const result = await again.callTool({ name: 'echo', arguments: {} });
      assert.deepEqual(result.content, [{ type: 'text', text: 'echoed' }]);
    } finally {
      await mcp.close();
    }
  });
});

test('SSE transport: the stream reopened by EventSource (a new, uninitialized server session) makes the next connect() initialize a new session', async () => {
  await withSseApp(async (app) => {
    const mcp = sseClient(app, 'sse-reopened');
    try {
      await mcp.connect();
      const first = mcp.transport;
      // The server ends the stream; EventSource reopens it 10 ms later, and the server's
      // new stream names a new session, which the old transport then posts to.
      for (const stream of app.seen.streams.values()) stream.end();
      await eventually(
        () => app.seen.requests.filter((r) => r === 'GET /sse').length === 2,
        'the reopened stream',
      );
      assert.equal(mcp.transport, undefined, 'the session is no longer current');
      const client = await mcp.connect();
      assert.notEqual(mcp.transport, first, 'a new transport');
      assert.equal(app.seen.posts.initialize, 2);
      const result = await client.callTool({ name: 'echo', arguments: {} });
      assert.deepEqual(result.content, [{ type: 'text', text: 'echoed' }]);
    } finally {
      await mcp.close();
    }
  });
});

test('mcpFetch().toError() reads the status only from the SSE transport message form it knows, anchored', () => {
  const fetch = mcpFetch(definePolicy({ name: 'sse-forms' }));
  for (const message of [
    'Error POSTing to endpoint (HTTP 302): redirected',
    'oops: Error POSTing to endpoint (HTTP 503): x',
    'Error POSTing to endpoint (HTTP 5030): x',
  ]) {
    const error = new Error(message);
    assert.equal(fetch.toError(error), error, message);
  }
  const sdk = new Error('Error POSTing to endpoint (HTTP 502): bad gateway');
  const wrapped = fetch.toError(sdk);
  assert.ok(wrapped instanceof HttpStatusError, 'an HttpStatusError');
  assert.equal(wrapped.status, 502);
  assert.equal(wrapped.cause, sdk);
  // A subclass (not the SDK's plain Error) is left as it is.
  const typed = new TypeError('Error POSTing to endpoint (HTTP 503): x');
  assert.equal(fetch.toError(typed), typed);
});
