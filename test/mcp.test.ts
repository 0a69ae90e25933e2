import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { test } from 'node:test';
import { inspect } from 'node:util';
// @ts-types="@modelcontextprotocol/sdk/client/index"
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
// @ts-types="@modelcontextprotocol/sdk/server/index"
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
// @ts-types="@modelcontextprotocol/sdk/server/mcp"
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
// @ts-types="@modelcontextprotocol/sdk/server/webStandardStreamableHttp"
import {
  type EventStore,
  WebStandardStreamableHTTPServerTransport,
} from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
// @ts-types="@modelcontextprotocol/sdk/types"
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { mcpFetch, mcpResend, resilientMcpClient } from '../adapters/mcp/index.ts';
import { Call, type FetchLike } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import {
  BreakwaterError,
  GateClosedError,
  HttpStatusError,
  NetworkError,
  TimeoutError,
} from '../src/errors.ts';
import type { BreakwaterEvent } from '../src/events.ts';
import { createGate } from '../src/gate.ts';
import { definePolicy, type PolicyConfig } from '../src/policy.ts';
import { retry } from '../src/retry.ts';
import { assertBrokenAnswer } from './helpers/broken-answer.ts';
import { FLOOD_BYTES, flood } from './helpers/flood.ts';
import { collector, heapGrowth } from './helpers/gc.ts';
import { answeringPosts, type FetchApp, withApp } from './helpers/hono-server.ts';
import { always, closedPort, withServer } from './helpers/server.ts';
import { allowSlowTests } from './helpers/slow-tests.ts';

// Memory tests make 20,000 calls each: seconds under Bun on a loaded machine.
await allowSlowTests();

const fast = { initialMs: 5, maxMs: 20, jitter: 'none' } as const;
const quickGate = { initialMs: 20, maxMs: 20, jitter: 'none' } as const;

/** A failure the fault layer answers instead of (or after) the MCP server. */
interface Fault {
  status: number;
  headers?: Record<string, string>;
  body?: string;
  /** Run the MCP server first (the tool ran), then answer with the fault. */
  after?: boolean;
}

/** What reached the app: POSTs per JSON-RPC method (`tools/call:<name>` for calls), tool runs, all requests. */
interface Counts {
  posts: Record<string, number>;
  runs: Record<string, number>;
  requests: number;
}

/** Decides, for the n-th POST of `what` (a method, or `tools/call:<tool>`), whether to fail it. */
type Faults = (what: string, nth: number) => Fault | undefined;

function counts(): Counts {
  return { posts: {}, runs: {}, requests: 0 };
}

/** Four tools, each counting its runs: `add` (no annotations), `lookup` (`readOnlyHint`), `upsert` (`idempotentHint`), `wipe` (`destructiveHint` only). */
function fourTools(seen: Counts): McpServer {
  const server = new McpServer({ name: 'tools', version: '1.0.0' });
  const tool = (name: string, annotations: Record<string, boolean>) =>
    server.registerTool(name, { description: name, annotations }, async () => {
      seen.runs[name] = (seen.runs[name] ?? 0) + 1;
      return { content: [{ type: 'text' as const, text: `${name} ran` }] };
    });
  tool('add', {});
  tool('lookup', { readOnlyHint: true });
  tool('upsert', { readOnlyHint: false, idempotentHint: true });
  tool('wipe', { readOnlyHint: false, destructiveHint: true });
  return server;
}

/**
 * A real MCP server (stateless, one server and transport per request), by default
 * {@link fourTools}. A fault layer in front can answer any POST with a failure, before
 * or after the server ran it. Answers are JSON, or with `sse` SSE streams, which also
 * carry what a handler sends while it runs (`extra.sendNotification()`).
 */
function mcpApp(
  seen: Counts,
  faults: Faults = () => undefined,
  build: () => McpServer | Server = () => fourTools(seen),
  { sse = false }: { sse?: boolean } = {},
) {
  async function serve(request: Request): Promise<Response> {
    const server = build();
    const transport = new WebStandardStreamableHTTPServerTransport({ enableJsonResponse: !sse });
    await server.connect(transport);
    let response: Response;
    try {
      response = await transport.handleRequest(request);
    } catch (error) {
      await server.close();
      throw error;
    }
    if (!sse || response.body === null) {
      await server.close();
      return response;
    }
    // An SSE answer is handed out before its handlers run: closing the server now would
    // end the stream empty, so it closes once the stream has carried everything.
    const closing = new TransformStream<Uint8Array, Uint8Array>({ flush: () => server.close() });
    return new Response(response.body.pipeThrough(closing), {
      status: response.status,
      headers: response.headers,
    });
  }
  return {
    async fetch(request: Request): Promise<Response> {
      seen.requests++;
      if (request.method !== 'POST') return new Response(null, { status: 405, headers: { allow: 'POST' } });
      const text = await request.text();
      let what = 'not-json';
      try {
        const message = JSON.parse(text);
        what = message.method === 'tools/call' ? `tools/call:${message.params.name}` : String(message.method);
      } catch {}
      const nth = (seen.posts[what] ?? 0) + 1;
      seen.posts[what] = nth;
      const fault = faults(what, nth);
      const failure = () =>
        new Response(fault?.body ?? '{"error":{"message":"overloaded, try again"}}', {
          status: fault?.status ?? 500,
          headers: { 'content-type': 'application/json', ...fault?.headers },
        });
      if (fault && !fault.after) return failure();
      const response = await serve(
        new Request(request.url, { method: 'POST', headers: request.headers, body: text }),
      );
      if (!fault) return response;
      // Read to its end: on an SSE answer the tool runs while the stream is open.
      await response.text();
      return failure();
    },
  };
}

/** What a catalog server lists: its tools as they are now, in order, `pageSize` to a `tools/list` page. */
interface Catalog {
  pageSize: number;
  tools: { name: string; annotations?: Record<string, boolean> }[];
}

/** A tool whose call changes the catalog's tools, and the server says so to the client. */
interface CatalogChange {
  tool: string;
  tools: Catalog['tools'];
}

/**
 * An MCP server that lists `catalog` as it is at each request, paginated (MCP
 * `cursor` / `nextCursor`, the cursor being the offset), and runs any tool it is
 * called with, counting its runs: a server whose tools change between listings.
 * Calling `change.tool` replaces the catalog's tools with `change.tools` and sends
 * `notifications/tools/list_changed` on the call's own stream (needs an SSE app).
 */
function catalogServer(seen: Counts, catalog: Catalog, change?: CatalogChange): Server {
  const server = new Server(
    { name: 'catalog', version: '1.0.0' },
    { capabilities: { tools: change ? { listChanged: true } : {} } },
  );
  server.setRequestHandler(ListToolsRequestSchema, (request) => {
    const start = Number(request.params?.cursor ?? 0);
    const end = start + catalog.pageSize;
    const tools = catalog.tools
      .slice(start, end)
      .map((tool) => ({ ...tool, inputSchema: { type: 'object' as const } }));
    return end < catalog.tools.length ? { tools, nextCursor: String(end) } : { tools };
  });
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const name = request.params.name;
    seen.runs[name] = (seen.runs[name] ?? 0) + 1;
    if (name === change?.tool) {
      catalog.tools = change.tools;
      await extra.sendNotification({ method: 'notifications/tools/list_changed' });
    }
    return { content: [{ type: 'text' as const, text: `${name} ran` }] };
  });
  return server;
}

/** Faults that fail the next `tools/call` once `arm()` is called: a 503 after the tool ran. */
function tripwire(): { faults: Faults; arm(): void } {
  let armed = false;
  return {
    faults(what) {
      if (!armed || !what.startsWith('tools/call:')) return undefined;
      armed = false;
      return { status: 503, after: true };
    },
    arm() {
      armed = true;
    },
  };
}

/** The server's counts, a tripwire, and a catalog listing `tools`, `pageSize` to a page. */
function catalogTest(
  pageSize: number,
  tools: Catalog['tools'],
): { seen: Counts; trip: ReturnType<typeof tripwire>; catalog: Catalog } {
  return { seen: counts(), trip: tripwire(), catalog: { pageSize, tools } };
}

/** Calls `name` with the tripwire armed: whether its 503 was resent, so the tool ran twice. */
async function ranTwice(
  client: Client,
  seen: Counts,
  trip: ReturnType<typeof tripwire>,
  name: string,
): Promise<boolean> {
  const runs = seen.runs[name] ?? 0;
  trip.arm();
  await client.callTool({ name, arguments: {} }).catch(() => undefined);
  return (seen.runs[name] ?? 0) - runs === 2;
}

/** A connected SDK client on `mcpFetch(policy)`; closed by `fn`'s caller. */
async function withClient<T>(
  origin: string,
  config: PolicyConfig,
  fn: (client: Client, fetch: ReturnType<typeof mcpFetch>) => Promise<T>,
  options: Parameters<typeof mcpFetch>[1] = {},
): Promise<T> {
  const fetch = mcpFetch(definePolicy({ name: 'mcp', retry: { backoff: fast }, ...config }), options);
  const transport = new StreamableHTTPClientTransport(new URL(`${origin}/mcp`), { fetch });
  const client = new Client({ name: 'breakwater-test', version: '1.0.0' });
  try {
    await client.connect(transport);
    return await fn(client, fetch);
  } finally {
    await client.close();
  }
}

/** Fails the first `times` POSTs of `what` with `fault`. */
function failFirst(what: string, fault: Fault, times = 1): Faults {
  return (seenWhat, nth) => (seenWhat === what && nth <= times ? fault : undefined);
}

/** Waits until `date` has passed. */
async function until(date: Date | undefined): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, (date?.getTime() ?? 0) - Date.now()) + 5));
}

test('a tools/list answered 503 (no x-should-retry) is resent, and the list arrives', async () => {
  const seen = counts();
  await withApp(mcpApp(seen, failFirst('tools/list', { status: 503 })), async (app) => {
    await withClient(app.origin, {}, async (client) => {
      const { tools } = await client.listTools();
      assert.deepEqual(
        tools.map((tool) => tool.name),
        ['add', 'lookup', 'upsert', 'wipe'],
      );
    });
  });
  assert.equal(seen.posts['tools/list'], 2);
});

test('an initialize answered 503 is resent: connect succeeds on the second attempt', async () => {
  const seen = counts();
  await withApp(mcpApp(seen, failFirst('initialize', { status: 503 })), async (app) => {
    await withClient(app.origin, {}, async (client) => {
      assert.equal(client.getServerVersion()?.name, 'tools');
    });
  });
  assert.equal(seen.posts.initialize, 2);
});

test('a tools/call of an unannotated tool answered 503 after it ran is not resent: the tool ran once', async () => {
  const seen = counts();
  await withApp(mcpApp(seen, failFirst('tools/call:add', { status: 503, after: true })), async (app) => {
    await withClient(app.origin, {}, async (client) => {
      await client.listTools();
      await assert.rejects(
        client.callTool({ name: 'add', arguments: {} }),
        (error: unknown) => error instanceof StreamableHTTPError && error.code === 503,
      );
    });
  });
  assert.equal(seen.posts['tools/call:add'], 1);
  assert.equal(seen.runs.add, 1);
});

test('a tools/call of a tool annotated readOnlyHint is resent after a 503 once learn() has seen tools/list', async () => {
  const seen = counts();
  await withApp(mcpApp(seen, failFirst('tools/call:lookup', { status: 503, after: true })), async (app) => {
    await withClient(app.origin, {}, async (client, fetch) => {
      fetch.learn((await client.listTools()).tools);
      const result = await client.callTool({ name: 'lookup', arguments: {} });
      assert.deepEqual(result.content, [{ type: 'text', text: 'lookup ran' }]);
    });
  });
  assert.equal(seen.posts['tools/call:lookup'], 2);
});

test('a tools/call of a tool annotated idempotentHint is resent after a 503', async () => {
  const seen = counts();
  await withApp(mcpApp(seen, failFirst('tools/call:upsert', { status: 503, after: true })), async (app) => {
    await withClient(app.origin, {}, async (client, fetch) => {
      fetch.learn((await client.listTools()).tools);
      await client.callTool({ name: 'upsert', arguments: {} });
    });
  });
  assert.equal(seen.runs.upsert, 2);
});

test('a tools/call of a tool annotated destructiveHint only is not resent', async () => {
  const seen = counts();
  await withApp(mcpApp(seen, failFirst('tools/call:wipe', { status: 503, after: true })), async (app) => {
    await withClient(app.origin, {}, async (client, fetch) => {
      fetch.learn((await client.listTools()).tools);
      await assert.rejects(client.callTool({ name: 'wipe', arguments: {} }));
    });
  });
  assert.equal(seen.runs.wipe, 1);
});

test('with hints: false the server’s annotations are ignored, and a tool named in tools is resent', async () => {
  const seen = counts();
  const faults: Faults = (what, nth) =>
    what.startsWith('tools/call') && nth === 1 ? { status: 503 } : undefined;
  await withApp(mcpApp(seen, faults), async (app) => {
    await withClient(
      app.origin,
      {},
      async (client, fetch) => {
        fetch.learn((await client.listTools()).tools);
        await assert.rejects(client.callTool({ name: 'lookup', arguments: {} }));
        await client.callTool({ name: 'add', arguments: {} });
      },
      { hints: false, tools: ['add'] },
    );
  });
  assert.deepEqual(seen.posts['tools/call:lookup'], 1);
  assert.deepEqual(seen.posts['tools/call:add'], 2);
});

test('toError() gives a 503’s status, Retry-After and server message back, with the SDK error as cause', async () => {
  const fault = {
    status: 503,
    headers: { 'retry-after': '7' },
    body: '{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"database is down"}}',
  };
  await withApp(mcpApp(counts(), failFirst('tools/call:add', fault)), async (app) => {
    await withClient(app.origin, {}, async (client, fetch) => {
      const error = await client.callTool({ name: 'add', arguments: {} }).then(
        () => undefined,
        (caught: unknown) => fetch.toError(caught),
      );
      assert.ok(error instanceof HttpStatusError, 'error instanceof HttpStatusError');
      assert.equal(error.status, 503);
      assert.equal(error.retryAfterMs, 7000);
      assert.equal(error.serverMessage, 'database is down');
      assert.equal(error.retryable, true);
      assert.equal(error.request?.key, 'mcp');
      assert.equal(error.request?.method, 'POST');
      assert.ok(error.cause instanceof StreamableHTTPError, 'error.cause instanceof StreamableHTTPError');
      assert.equal(error.cause.code, 503);
    });
  });
});

test('toError() gives a 429’s Retry-After back when the policy does not retry', async () => {
  const fault = { status: 429, headers: { 'retry-after': '3' }, body: '{"error":"slow down"}' };
  await withApp(mcpApp(counts(), failFirst('tools/call:add', fault)), async (app) => {
    await withClient(app.origin, { retry: false, breaker: false }, async (client, fetch) => {
      const error = await client.callTool({ name: 'add', arguments: {} }).catch(fetch.toError);
      assert.ok(error instanceof HttpStatusError, 'error instanceof HttpStatusError');
      assert.equal(error.status, 429);
      assert.equal(error.retryAfterMs, 3000);
      assert.equal(error.serverMessage, 'slow down');
    });
  });
});

test('toError() does not lend an old failure’s Retry-After to a later error of the same status', async () => {
  const fault = { status: 429, headers: { 'retry-after': '3' }, body: '{"error":"slow down"}' };
  await withApp(mcpApp(counts(), failFirst('tools/call:add', fault)), async (app) => {
    await withClient(app.origin, { retry: false, breaker: false }, async (client, fetch) => {
      const caught = await client.callTool({ name: 'add', arguments: {} }).catch((e: unknown) => e);
      assert.equal((fetch.toError(caught) as HttpStatusError).retryAfterMs, 3000);
      // The same SDK error, judged 31 s later: that snapshot can no longer be its answer.
      const realNow = Date.now;
      const later = realNow() + 31_000;
      Date.now = () => later;
      try {
        const stale = fetch.toError(caught);
        assert.ok(stale instanceof HttpStatusError, 'stale instanceof HttpStatusError');
        assert.equal(stale.status, 429);
        assert.equal(stale.retryAfterMs, undefined);
        assert.equal(stale.serverMessage, undefined);
      } finally {
        Date.now = realNow;
      }
    });
  });
});

test('toError() leaves errors that are not the SDK’s HTTP errors unchanged', () => {
  const fetch = mcpFetch(definePolicy());
  const mcpError = Object.assign(new Error('MCP error 404: no such tool'), { name: 'McpError', code: 404 });
  const plain = new Error('boom');
  assert.equal(fetch.toError(mcpError), mcpError);
  assert.equal(fetch.toError(plain), plain);
  assert.equal(fetch.toError('text'), 'text');
  assert.equal(fetch.toError(null), null);
  // An SDK HTTP error with no failure seen by this fetch still keeps its status.
  const bare = fetch.toError(new StreamableHTTPError(502, 'Error POSTing to endpoint: bad gateway'));
  assert.ok(bare instanceof HttpStatusError, 'bare instanceof HttpStatusError');
  assert.equal(bare.status, 502);
});

/** An app that answers every POST 503 and records what it got. */
function recordingApp(got: { body: string; key: string | null }[]) {
  return {
    async fetch(request: Request): Promise<Response> {
      got.push({ body: await request.text(), key: request.headers.get('idempotency-key') });
      return new Response('busy', { status: 503 });
    },
  };
}

test('garbage and oversized bodies pass through mcpFetch untouched, are not resent, and never throw', async () => {
  const got: { body: string; key: string | null }[] = [];
  await withApp(recordingApp(got), async (app) => {
    const fetch = mcpFetch(definePolicy({ retry: { backoff: fast }, breaker: false }), { maxBodyChars: 100 });
    const bodies = [
      'not json',
      '{"jsonrpc":"2.0","method":"ping"',
      'null',
      '[]',
      '[1,"x",null]',
      '{"jsonrpc":"2.0","id":1,"method":{"toString":1}}',
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"lookup"}',
      JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping', params: { pad: 'x'.repeat(200) } }),
    ];
    for (const body of bodies) {
      const response = await fetch(`${app.origin}/mcp`, { method: 'POST', body });
      assert.equal(response.status, 503);
      await response.body?.cancel();
    }
    const bytes = new TextEncoder().encode('{"jsonrpc":"2.0","id":1,"method":"ping"}');
    await (await fetch(`${app.origin}/mcp`, { method: 'POST', body: bytes })).body?.cancel();
    assert.deepEqual(
      got.map((g) => g.body),
      [...bodies, new TextDecoder().decode(bytes)],
    );
    assert.deepEqual(
      got.map((g) => g.key),
      got.map(() => null),
    );
  });
});

test('a read-only request is resent, and its resend mark never reaches the server', async () => {
  const got: { body: string; key: string | null }[] = [];
  await withApp(recordingApp(got), async (app) => {
    const fetch = mcpFetch(definePolicy({ retry: { backoff: fast }, breaker: false }));
    const body =
      '[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/cancelled"}]';
    const response = await fetch(`${app.origin}/mcp`, {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(response.status, 503);
    await response.body?.cancel();
  });
  assert.deepEqual(got, [
    {
      body: '[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/cancelled"}]',
      key: null,
    },
    {
      body: '[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/cancelled"}]',
      key: null,
    },
    {
      body: '[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/cancelled"}]',
      key: null,
    },
  ]);
});

test('a batch with one unsafe message is not resent', async () => {
  const got: { body: string; key: string | null }[] = [];
  await withApp(recordingApp(got), async (app) => {
    const fetch = mcpFetch(definePolicy({ retry: { backoff: fast }, breaker: false }));
    const body = JSON.stringify([
      { jsonrpc: '2.0', id: 1, method: 'ping' },
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'add' } },
    ]);
    await (await fetch(`${app.origin}/mcp`, { method: 'POST', body })).body?.cancel();
  });
  assert.equal(got.length, 1);
});

/** Whether `resend` judges a POST of `body` to the MCP endpoint safe to send twice. */
function judged(resend: ReturnType<typeof mcpResend>, body: unknown, init: RequestInit = {}): boolean {
  return resend.isSafe(
    new Call(
      'http://mcp.test/mcp',
      { method: 'POST', body: body as BodyInit, ...init },
      undefined,
      undefined,
    ),
  );
}

test('a body with a key given twice is never marked, whichever copy a server reads', () => {
  const resend = mcpResend();
  // JSON.parse keeps the last "method" (ping); a first-wins server runs tools/call.
  assert.equal(
    judged(resend, '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add"},"method":"ping"}'),
    false,
  );
  assert.equal(
    judged(
      resend,
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","name":"lookup"}}',
      {},
    ),
    false,
  );
  assert.equal(judged(resend, '{"jsonrpc":"2.0","id":1,"method":"ping"}'), true);
});

test('only JSON-RPC 2.0 messages are marked, with their own fields, not inherited ones', () => {
  const resend = mcpResend();
  assert.equal(judged(resend, '{"id":1,"method":"ping"}'), false);
  assert.equal(judged(resend, '{"jsonrpc":"1.0","id":1,"method":"ping"}'), false);
  assert.equal(judged(resend, '{"jsonrpc":"2.0","id":1,"__proto__":{"method":"ping"}}'), false);
  const proto = Object.prototype as { method?: unknown };
  proto.method = 'ping';
  try {
    // A response to the server (no method of its own) stays unmarked under a polluted prototype.
    assert.equal(judged(resend, '{"jsonrpc":"2.0","id":1,"result":{}}'), false);
  } finally {
    delete proto.method;
  }
});

test('method names match exactly: odd casing, whitespace and non-string tool names are not safe', () => {
  const resend = mcpResend({ tools: ['lookup'] });
  const message = (method: unknown, params?: unknown) =>
    JSON.stringify({ jsonrpc: '2.0', id: 1, method, params });
  for (const method of ['Tools/List', 'PING', ' ping', 'ping ', 'tools/list\u0000', 'Tools/call']) {
    assert.equal(judged(resend, message(method, { name: 'lookup' })), false, method);
  }
  for (const name of [['lookup'], { toString: 'lookup' }, 1, null, 'Lookup', ' lookup']) {
    assert.equal(judged(resend, message('tools/call', { name })), false, JSON.stringify(name));
  }
  assert.equal(judged(resend, message('tools/call', ['lookup'])), false);
  assert.equal(judged(resend, message('tools/call', { name: 'lookup' })), true);
});

test('isSafe() never throws: non-string bodies, Request inputs and throwing getters are unmarked', async () => {
  const resend = mcpResend();
  const ping = '{"jsonrpc":"2.0","id":1,"method":"ping"}';
  const bytes = new TextEncoder().encode(ping);
  const form = new FormData();
  form.set('body', ping);
  for (const body of [bytes, bytes.buffer, new Blob([ping]), new ReadableStream(), form, new String(ping)]) {
    assert.equal(judged(resend, body), false);
  }
  const request = new Request('http://mcp.test/mcp', { method: 'POST', body: ping });
  assert.equal(resend.isSafe(new Call(request, undefined, undefined, undefined)), false);
  const hostile = {
    method: 'POST',
    get body(): string {
      throw new Error('getter');
    },
  };
  assert.equal(resend.isSafe(new Call('http://mcp.test/mcp', hostile, undefined, undefined)), false);
  const trap = new Proxy({} as RequestInit, {
    get() {
      throw new Error('trap');
    },
  });
  assert.equal(resend.isSafe(new Call('http://mcp.test/mcp', trap, undefined, undefined)), false);
});

test('a tool learned as read-only and listed again without hints stops being resent', () => {
  const resend = mcpResend();
  const call = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'lookup' } });
  resend.learn([{ name: 'lookup', annotations: { readOnlyHint: true } }]);
  assert.equal(judged(resend, call), true);
  resend.learn([{ name: 'lookup' }]);
  assert.equal(judged(resend, call), false);
  resend.learn([{ name: 'lookup', annotations: { idempotentHint: true } }]);
  resend.learn([{ name: 'lookup', annotations: { readOnlyHint: false, idempotentHint: false } }]);
  assert.equal(judged(resend, call), false);
});

/** Whether `resend` judges a `tools/call` of `name` safe to send twice. */
function callSafe(resend: ReturnType<typeof mcpResend>, name: string): boolean {
  return judged(resend, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name } }));
}

const readOnly = { readOnlyHint: true };
/** Tools as a catalog lists them: two read-only, one idempotent. */
const LOOKUP = { name: 'lookup', annotations: readOnly };
const SCAN = { name: 'scan', annotations: readOnly };
const UPSERT = { name: 'upsert', annotations: { idempotentHint: true } };

test('learn(): a first tools/list page replaces what earlier listings taught, but never the tools you listed', () => {
  const resend = mcpResend({ tools: ['pinned'] });
  resend.learn({
    tools: [LOOKUP, { name: 'pinned', annotations: readOnly }],
  });
  assert.equal(callSafe(resend, 'lookup'), true);
  // A bare array of tools (learn()'s older form) is a first page too.
  resend.learn([{ name: 'search', annotations: readOnly }]);
  assert.equal(callSafe(resend, 'lookup'), false, 'lookup is no longer listed');
  assert.equal(callSafe(resend, 'search'), true);
  resend.learn({ tools: [{ name: 'pinned' }] });
  assert.equal(callSafe(resend, 'search'), false);
  assert.equal(callSafe(resend, 'pinned'), true, 'a listing cannot take back a tool you vouched for');
});

test('learn(): a page for a cursor the current listing did not give teaches nothing and forgets each tool it names', () => {
  const resend = mcpResend();
  resend.learn({
    tools: [
      { name: 'a', annotations: readOnly },
      { name: 'b', annotations: readOnly },
    ],
    nextCursor: 'p2',
  });
  resend.learn({ tools: [{ name: 'c', annotations: readOnly }] }, 'p9');
  assert.equal(callSafe(resend, 'c'), false, 'an unknown cursor');
  resend.learn({ tools: [{ name: 'a', annotations: readOnly }] }, 'old');
  assert.equal(callSafe(resend, 'a'), false, 'a stale page names a: it may describe another tool');
  assert.equal(callSafe(resend, 'b'), true);
  resend.learn({ tools: [{ name: 'd', annotations: readOnly }], nextCursor: 'p3' }, 'p2');
  assert.equal(callSafe(resend, 'd'), true, 'the page the listing pointed to adds');
  resend.learn({ tools: [{ name: 'e', annotations: readOnly }] }, 'p2');
  assert.equal(callSafe(resend, 'e'), false, 'p2 again, out of order');
  resend.learn({ tools: [{ name: 'f', annotations: readOnly }] }, 'p3');
  assert.equal(callSafe(resend, 'f'), true, 'the last page');
  resend.learn({ tools: [{ name: 'g', annotations: readOnly }] }, 'p3');
  assert.equal(callSafe(resend, 'g'), false, 'after the last page no listing goes on');
  assert.equal(callSafe(resend, 'b'), true);
});

test('learn({ tools: [] }) forgets every learned hint and keeps the tools you listed: what to do on tools/list_changed', () => {
  const resend = mcpResend({ tools: ['pinned'] });
  resend.learn({ tools: [LOOKUP], nextCursor: 'p2' });
  resend.learn({ tools: [] });
  assert.equal(callSafe(resend, 'lookup'), false);
  assert.equal(callSafe(resend, 'pinned'), true);
  resend.learn({ tools: [SCAN] }, 'p2');
  assert.equal(callSafe(resend, 'scan'), false, 'the listing before the change goes on no more');
});

test('a tools predicate that throws vouches for nothing: the call, and a batch holding it, stay unmarked', () => {
  const resend = mcpResend({
    tools: () => {
      throw new Error('predicate');
    },
  });
  const ping = { jsonrpc: '2.0', id: 1, method: 'ping' };
  const call = { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'lookup' } };
  assert.equal(judged(resend, JSON.stringify(call)), false);
  assert.equal(judged(resend, JSON.stringify([ping, call])), false);
  assert.equal(judged(resend, JSON.stringify(ping)), true);
});

test('a tool a fresh tools/list no longer lists is not resent after a 503: the new listing replaces the old', async () => {
  const { seen, trip, catalog } = catalogTest(10, [LOOKUP, UPSERT]);
  await withApp(
    mcpApp(seen, trip.faults, () => catalogServer(seen, catalog)),
    async (app) => {
      await withClient(app.origin, {}, async (client, fetch) => {
        fetch.learn(await client.listTools());
        assert.equal(await ranTwice(client, seen, trip, 'lookup'), true);
        catalog.tools = [UPSERT];
        fetch.learn(await client.listTools());
        assert.equal(await ranTwice(client, seen, trip, 'lookup'), false, 'lookup is no longer listed');
        assert.equal(await ranTwice(client, seen, trip, 'upsert'), true);
      });
    },
  );
});

test('mcpResend() marks read-only calls in a createFetch() chain, and a caller’s own Idempotency-Key is kept', async () => {
  const got: { body: string; key: string | null }[] = [];
  await withApp(recordingApp(got), async (app) => {
    const fetch = createFetch({ use: [mcpResend(), retry({ attempts: 2, backoff: fast })] });
    const ping = '{"jsonrpc":"2.0","id":1,"method":"ping"}';
    const call = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add"}}';
    await (await fetch(`${app.origin}/mcp`, { method: 'POST', body: ping })).body?.cancel();
    await (await fetch(`${app.origin}/mcp`, { method: 'POST', body: call })).body?.cancel();
    await (
      await fetch(`${app.origin}/mcp`, { method: 'POST', body: call, headers: { 'idempotency-key': '"k1"' } })
    ).body?.cancel();
  });
  assert.deepEqual(
    got.map((g) => [JSON.parse(g.body).id, g.key]),
    [
      [1, null],
      [1, null],
      [2, null],
      [2, '"k1"'],
      [2, '"k1"'],
    ],
  );
});

test('mcpResend() inside retry(): a tool forgotten after a resend was decided is not resent again after the next failure', async () => {
  const seen = counts();
  const resend = mcpResend();
  // The server turns lookup destructive (list_changed) while the resend retry decided on
  // the first attempt's mark is in flight: its failure is not resent on that mark.
  const lookupFails: Faults = (what, nth) => {
    if (what !== 'tools/call:lookup') return undefined;
    if (nth === 2) resend.learn({ tools: [] });
    return { status: 503, after: true };
  };
  await withApp(mcpApp(seen, lookupFails), async (app) => {
    resend.learn([LOOKUP]);
    const fetch = createFetch({ use: [retry({ attempts: 3, backoff: fast }), resend] });
    const response = await fetch(`${app.origin}/mcp`, lookupCall());
    await response.body?.cancel();
    assert.equal(response.status, 503);
  });
  assert.equal(seen.runs.lookup, 2, 'lookup ran a third time: resent on the mark of its first attempt');
});

test('mcpResend() inside retry(): a call to a tool forgotten while retry waits to resend it is not resent', async () => {
  const seen = counts();
  const lookupFails: Faults = (what) =>
    what === 'tools/call:lookup' ? { status: 503, after: true } : undefined;
  await withApp(mcpApp(seen, lookupFails), async (app) => {
    const resend = mcpResend();
    resend.learn([LOOKUP]);
    // Each attempt passes mcpResend(), which lets go of the call between attempts; the
    // server turns lookup destructive (list_changed) while retry waits to resend it.
    const fetch = createFetch({
      use: [retry({ attempts: 3, backoff: fast }), resend],
      onEvent: (event) => {
        if (event.type === 'retry') resend.learn({ tools: [] });
      },
    });
    const response = await fetch(`${app.origin}/mcp`, lookupCall());
    await response.body?.cancel();
    assert.equal(response.status, 503);
  });
  assert.equal(seen.runs.lookup, 1, 'lookup ran twice: resent after its hint was forgotten');
});

/** A POST calling lookup, as the SDK sends it. */
function lookupCall(): RequestInit {
  return {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'lookup', arguments: {} },
    }),
  };
}

test('mcpFetch(): a call to a tool forgotten while retry waits to resend it is not resent', async () => {
  const seen = counts();
  const lookupFails = failFirst('tools/call:lookup', { status: 503, after: true });
  let learn: ((list: { tools: [] }) => void) | undefined;
  await withApp(mcpApp(seen, lookupFails), async (app) => {
    await withClient(
      app.origin,
      {},
      async (client, fetch) => {
        fetch.learn(await client.listTools());
        learn = fetch.learn;
        await client.callTool({ name: 'lookup', arguments: {} }).catch(() => undefined);
      },
      {
        onEvent: (event) => {
          // The server says its tools changed while retry waits to resend lookup.
          if (event.type === 'retry' && event.reason === 'HTTP 503') learn?.({ tools: [] });
        },
      },
    );
  });
  assert.equal(seen.runs.lookup, 1, 'lookup ran twice: resent after its hint was forgotten');
});

test('learn() does not read the bodies of the calls in flight again: its time does not grow with their size', async () => {
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  let arrived = 0;
  const app = {
    async fetch(request: Request): Promise<Response> {
      await request.text();
      arrived++;
      await held;
      return new Response('{}', { headers: { 'content-type': 'application/json' } });
    },
  };
  await withApp(app, async ({ origin }) => {
    const resend = mcpResend();
    resend.learn([LOOKUP]);
    const fetch = createFetch({ use: [resend] });
    // Twenty read-only calls near the largest body judged, held at the server's door.
    const doc = 'x'.repeat(250_000);
    const body = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'lookup', arguments: { doc } },
    });
    const calls = Array.from({ length: 20 }, () => fetch(`${origin}/mcp`, { method: 'POST', body }));
    try {
      while (arrived < calls.length) await new Promise((resolve) => setTimeout(resolve, 5));
      // A server may send notifications/tools/list_changed as often as it likes.
      const started = performance.now();
      for (let i = 0; i < 200; i++) resend.learn([LOOKUP]);
      const ms = performance.now() - started;
      assert.ok(ms < 80, `200 learn() calls with 20 calls of 250 KB in flight took ${Math.round(ms)} ms`);
    } finally {
      release();
      for (const response of await Promise.all(calls)) await response.body?.cancel();
    }
  });
});

test('an SSE response slower than the attempt timeout is not cut', async () => {
  // The deadlines: room for the wait for headers on a loaded machine (load 11 on 2 cores).
  const attemptMs = 200;
  const totalMs = 300;
  // What the server's event waits for once its stream is open: nothing, until the timed call.
  let held: Promise<unknown> = Promise.resolve();
  const app = {
    async fetch(request: Request): Promise<Response> {
      // Read, so the server has no request body left to drain after the response.
      await request.text();
      const encoder = new TextEncoder();
      const hold = held;
      const stream = new ReadableStream<Uint8Array>({
        async start(controller) {
          controller.enqueue(encoder.encode(': open\n\n'));
          await hold;
          controller.enqueue(
            encoder.encode('event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'),
          );
          controller.close();
        },
      });
      return new Response(stream, { headers: { 'content-type': 'text/event-stream' } });
    },
  };
  await withApp(app, async (server) => {
    const url = `${server.origin}/mcp`;
    const init = {
      method: 'POST',
      body: '{"jsonrpc":"2.0","id":1,"method":"ping"}',
      headers: { accept: 'application/json, text/event-stream' },
    };
    // The process's first request (fetch's and the server's code loaded and compiled) may
    // take longer than the deadlines on a loaded machine: paid here, with none.
    await (await mcpFetch(definePolicy())(url, init)).text();
    const fetch = mcpFetch(definePolicy({ timeout: { attemptMs, totalMs } }));
    const started = performance.now();
    // The event comes once both deadlines have passed, counted from the call's start.
    held = new Promise((resolve) => setTimeout(resolve, totalMs + 100));
    const response = await fetch(url, init);
    const text = await response.text();
    assert.ok(performance.now() - started >= totalMs + 90, 'performance.now() - started >= totalMs + 90');
    assert.match(text, /"result":\{\}/);
  });
});

test('bad options for mcpFetch() and mcpResend() throw a TypeError naming each path', () => {
  assert.throws(
    () => mcpFetch(definePolicy(), { tools: 5, maxBodyChars: -1 } as never),
    (error: unknown) =>
      error instanceof TypeError &&
      error.message.includes('mcpFetch().tools') &&
      error.message.includes('mcpFetch().maxBodyChars'),
  );
  assert.throws(() => mcpResend({ hints: 'yes' } as never), /mcpResend\(\)\.hints/);
  // Options or a fetch in the policy's place: named, not "Cannot read properties of undefined".
  for (const notAPolicy of [{ fetch }, fetch, undefined])
    assert.throws(
      () => mcpFetch(notAPolicy as never),
      (error: unknown) =>
        error instanceof TypeError &&
        /mcpFetch\(policy\): must be a policy from definePolicy\(\)/.test(error.message),
    );
});

test('a tools option that is neither names nor a function is told what it must be in plain words, by mcpResend(), mcpFetch() and resilientMcpClient()', () => {
  const client = new Client({ name: 'breakwater-test', version: '1.0.0' });
  const transport = () => new StreamableHTTPClientTransport(new URL('http://127.0.0.1:9/mcp'));
  for (const [where, make] of [
    ['mcpResend()', () => mcpResend({ tools: 'search' } as never)],
    ['mcpFetch()', () => mcpFetch(definePolicy(), { tools: 'search' } as never)],
    [
      'resilientMcpClient()',
      () => resilientMcpClient({ client, transport, policy: definePolicy(), tools: 'search' } as never),
    ],
  ] as const)
    assert.throws(make, (error: unknown) => {
      assert.ok(error instanceof TypeError, String(error));
      assert.ok(
        error.message.includes(`${where}.tools: must be an array or a function (got "search")`),
        error.message,
      );
      return true;
    });
});

/** A resilient client for `origin`, with a quick gate and events recorded. */
function resilient(
  origin: string,
  events: BreakwaterEvent[] = [],
  config: PolicyConfig = {},
  options: Parameters<typeof mcpFetch>[1] & { closeTimeoutMs?: number; connectTimeoutMs?: number } = {},
) {
  return resilientMcpClient({
    client: new Client({ name: 'breakwater-test', version: '1.0.0' }),
    transport: (fetch: FetchLike) => new StreamableHTTPClientTransport(new URL(`${origin}/mcp`), { fetch }),
    policy: definePolicy({ name: 'tools', retry: { backoff: fast }, ...config }),
    gate: createGate({ key: 'tools', schedule: quickGate }),
    onEvent: (event) => events.push(event),
    ...options,
  });
}

/**
 * A connected `resilient()` client on a `catalogServer(catalog)` behind `trip`, for
 * `fn`; the client is closed and the server stopped afterwards.
 */
async function withCatalogClient(
  seen: Counts,
  trip: ReturnType<typeof tripwire>,
  catalog: Catalog,
  fn: (client: Client) => Promise<void>,
): Promise<void> {
  await withApp(
    mcpApp(seen, trip.faults, () => catalogServer(seen, catalog)),
    async (app) => {
      const mcp = resilient(app.origin);
      try {
        await fn(await mcp.connect());
      } finally {
        await mcp.close();
      }
    },
  );
}

test('resilientMcpClient: a closed port arms the gate, and the next connect fails fast without a request', async () => {
  const events: BreakwaterEvent[] = [];
  const mcp = resilient(`http://127.0.0.1:${await closedPort()}`, events);
  try {
    await assert.rejects(
      mcp.connect(),
      (error: unknown) => error instanceof NetworkError && error.code === 'ECONNREFUSED',
    );
    const attempts = events.filter((event) => event.type === 'attempt').length;
    assert.equal(attempts, 3, 'a refused connection was not sent: retried');
    assert.equal(mcp.gate.state().armed, true);
    await assert.rejects(
      mcp.connect(),
      (error: unknown) =>
        error instanceof GateClosedError && error.key === 'tools' && error.retryAt.getTime() > Date.now() - 5,
    );
    assert.equal(events.filter((event) => event.type === 'attempt').length, attempts);
  } finally {
    await mcp.close();
  }
});

test('resilientMcpClient: a 503 arms the gate for the server’s delay; after it a connect succeeds and clears the gate', async () => {
  const seen = counts();
  const fault = { status: 503, headers: { 'retry-after-ms': '60' } };
  await withApp(mcpApp(seen, failFirst('initialize', fault)), async (app) => {
    const mcp = resilient(app.origin, [], { retry: false });
    try {
      const error = await mcp.connect().catch((caught: unknown) => caught);
      assert.ok(error instanceof HttpStatusError, 'error instanceof HttpStatusError');
      assert.equal(error.status, 503);
      assert.equal(error.retryAfterMs, 60);
      assert.ok(error.cause instanceof StreamableHTTPError, 'error.cause instanceof StreamableHTTPError');
      const { retryAt } = mcp.gate.state();
      assert.ok((retryAt?.getTime() ?? 0) - Date.now() > 30, 'the window is the server’s 60 ms');

      const requests = seen.requests;
      await assert.rejects(mcp.connect(), GateClosedError);
      assert.equal(seen.requests, requests, 'nothing was sent while the gate was armed');

      await until(retryAt);
      const client = await mcp.connect();
      assert.equal(client.getServerVersion()?.name, 'tools');
      assert.deepEqual(mcp.gate.state(), { armed: false, failures: 0, probing: false });
      assert.equal(await mcp.connect(), client, 'connected: no new connect');
      assert.equal(seen.posts.initialize, 2);
    } finally {
      await mcp.close();
    }
  });
});

test('resilientMcpClient: a 401 never arms the gate, so every connect reaches the server', async () => {
  const seen = counts();
  await withApp(
    mcpApp(seen, (what) => (what === 'initialize' ? { status: 401 } : undefined)),
    async (app) => {
      const mcp = resilient(app.origin);
      try {
        for (let i = 0; i < 2; i++) {
          await assert.rejects(
            mcp.connect(),
            (error: unknown) => error instanceof HttpStatusError && error.status === 401 && !error.retryable,
          );
        }
        assert.equal(seen.posts.initialize, 2);
        assert.equal(mcp.gate.state().armed, false);
      } finally {
        await mcp.close();
      }
    },
  );
});

test('resilientMcpClient: a bad URL never arms the gate', async () => {
  const mcp = resilientMcpClient({
    client: new Client({ name: 'breakwater-test', version: '1.0.0' }),
    transport: (fetch: FetchLike) => new StreamableHTTPClientTransport(new URL('not a url'), { fetch }),
    policy: definePolicy(),
  });
  await assert.rejects(mcp.connect(), TypeError);
  await assert.rejects(mcp.connect(), TypeError);
  assert.equal(mcp.gate.state().failures, 0);
});

test('resilientMcpClient: listTools() teaches which tools are resent, and call errors are HttpStatusErrors', async () => {
  const seen = counts();
  const faults: Faults = (what, nth) =>
    what.startsWith('tools/call') && nth === 1
      ? { status: 503, after: true, headers: { 'retry-after': '0' } }
      : undefined;
  await withApp(mcpApp(seen, faults), async (app) => {
    const mcp = resilient(app.origin);
    try {
      const client = await mcp.connect();
      await client.listTools();
      await client.callTool({ name: 'lookup', arguments: {} });
      const error = await client.callTool({ name: 'add', arguments: {} }).catch((caught: unknown) => caught);
      assert.ok(error instanceof HttpStatusError, 'error instanceof HttpStatusError');
      assert.equal(error.status, 503);
      assert.equal(error.retryAfterMs, 0);
      assert.ok(error.cause instanceof StreamableHTTPError, 'error.cause instanceof StreamableHTTPError');
    } finally {
      await mcp.close();
    }
  });
  assert.deepEqual(seen.runs, { lookup: 2, add: 1 });
});

/** Calls the tool `add` and cancels the call 50 ms in, as a user who moved on: it rejects with that. */
async function cancelledAdd(client: Client): Promise<void> {
  const cancel = new AbortController();
  const call = client.callTool({ name: 'add', arguments: {} }, undefined, { signal: cancel.signal });
  setTimeout(() => cancel.abort(new Error('the user moved on')), 50);
  await assert.rejects(call, /the user moved on/);
}

/** What the cancellation tests' server answers a tools/call of `add` with first: a 429 asking for 300 ms, ample time for {@link cancelledAdd}. */
const SLOW_DOWN = { status: 429, headers: { 'retry-after-ms': '300' } };

/** Waits past {@link SLOW_DOWN}'s delay (by default): a resend would have run the tool by then. */
async function pastDelay(ms = 400): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Serves `mcpApp()` (behind `wrap`) with its first `times` tools/call of `add` answered
 * {@link SLOW_DOWN}, and runs `fn` on its origin: what the server saw.
 */
async function slowedAdd(
  fn: (origin: string) => Promise<void>,
  { times = 1, wrap = (app) => app }: { times?: number; wrap?: (app: FetchApp) => FetchApp } = {},
): Promise<Counts> {
  const seen = counts();
  await withApp(wrap(mcpApp(seen, failFirst('tools/call:add', SLOW_DOWN, times))), ({ origin }) =>
    fn(origin),
  );
  return seen;
}

/** Runs `fn` with `opened` (a client, or a `resilientMcpClient()`), and closes it afterwards. */
async function closing<C extends { close(): Promise<unknown> }>(
  opened: C,
  fn: (opened: C) => Promise<void>,
): Promise<void> {
  try {
    await fn(opened);
  } finally {
    await opened.close();
  }
}

/** An SDK client connected to `url` on `fetch`. */
async function sdkClient(url: string, fetch: FetchLike): Promise<Client> {
  const client = new Client({ name: 'breakwater-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch }));
  return client;
}

/**
 * Two SDK clients of `origin` (at `paths`) on one `mcpFetch()`, their ids clashing (each
 * counts from 0): the second calls `add` and the first's call of it is cancelled
 * ({@link cancelledAdd}) while both wait out their 429; once the second's call ran, a wait
 * of 100 ms, in which a resend of the cancelled call would have run too.
 */
async function cancelledBesideWaiting(origin: string, paths: [string, string]): Promise<void> {
  const fetch = mcpFetch(definePolicy({ name: 'mcp', retry: { backoff: fast } }));
  const cancelling = await sdkClient(`${origin}${paths[0]}`, fetch);
  await closing(await sdkClient(`${origin}${paths[1]}`, fetch), async (waiting) => {
    await closing(cancelling, async () => {
      const resent = waiting.callTool({ name: 'add', arguments: {} });
      await cancelledAdd(cancelling);
      await resent;
      await pastDelay(100);
    });
  });
}

test('resilientMcpClient: a tools/call the caller cancels while retry waits out a 429 is not sent again: the tool never runs', async () => {
  const seen = await slowedAdd((origin) =>
    closing(resilient(origin), async (mcp) => {
      await cancelledAdd(await mcp.connect());
      await pastDelay();
    }),
  );
  assert.equal(seen.posts['tools/call:add'], 1, 'the cancelled call was not sent again');
  assert.equal(seen.runs.add, undefined);
  assert.equal(seen.posts['notifications/cancelled'], 1, 'the SDK told the server');
});

/**
 * Cancels a call of the destructive tool `wipe` (a 300 ms run) while a 429 asking for 2 s
 * paces the key (past `maxRetryAfterMs`), on a `resilient()` client with `options`: when
 * the server heard of it, in ms after the abort (`Infinity`: never), and the credential it came with.
 */
async function cancelledWhilePaused(
  options: Parameters<typeof resilient>[3] = {},
  { alone = false, maxRetryAfterMs = 100 }: { alone?: boolean; maxRetryAfterMs?: number } = {},
): Promise<{ ms: number; authorization: string | null }> {
  const seen = counts();
  const slow = () => {
    const server = new McpServer({ name: 'slow', version: '1.0.0' });
    server.registerTool('wipe', { description: 'wipe', annotations: { destructiveHint: true } }, async () => {
      await new Promise((resolve) => setTimeout(resolve, 300));
      return { content: [{ type: 'text' as const, text: 'wiped' }] };
    });
    return server;
  };
  const fault = { status: 429, headers: { 'retry-after-ms': '2000' } };
  const inner = mcpApp(seen, failFirst('tools/list', fault), slow);
  let cancelledAt = 0;
  let authorization: string | null = null;
  const app = {
    async fetch(request: Request): Promise<Response> {
      if ((await request.clone().text()).includes('notifications/cancelled')) {
        cancelledAt = Date.now();
        authorization = request.headers.get('authorization');
      }
      return inner.fetch(request);
    },
  };
  let ms = Infinity;
  await withApp(app, async ({ origin }) => {
    const config = { retry: { backoff: fast, maxRetryAfterMs } };
    let paced = () => {};
    const pausing = new Promise<void>((resolve) => {
      paced = resolve;
    });
    const watched = { ...options, onEvent: (event: BreakwaterEvent) => event.type === 'paced' && paced() };
    // With `alone`, an SDK client on mcpFetch() alone, not through resilientMcpClient().
    const mcp = alone
      ? await sdkClient(`${origin}/mcp`, mcpFetch(definePolicy({ name: 'tools', ...config }), watched))
      : resilient(origin, [], config, watched);
    try {
      const client = mcp instanceof Client ? mcp : await mcp.connect();
      const cancel = new AbortController();
      const call = client.callTool({ name: 'wipe', arguments: {} }, undefined, { signal: cancel.signal });
      // The server asks for 2 s: every request of this key is paused meanwhile (a listing
      // within maxRetryAfterMs waits it out, and runs once the test is over).
      const listing = client.listTools().catch(() => undefined);
      await pausing;
      const abortedAt = Date.now();
      cancel.abort(new Error('stop the wipe'));
      await assert.rejects(call, /stop the wipe/);
      // Till the tool's run is over.
      await new Promise((resolve) => setTimeout(resolve, 400));
      if (cancelledAt >= abortedAt) ms = cancelledAt - abortedAt;
      await listing;
    } finally {
      await mcp.close();
    }
  });
  return { ms, authorization };
}

test('resilientMcpClient: a cancellation reaches the server at once while a 429 paces the server’s other requests', async () => {
  const { ms } = await cancelledWhilePaused();
  assert.ok(ms < Infinity, 'the server was told the call is cancelled');
  assert.ok(ms < 1000, `told ${ms} ms after the abort`);
});

test('resilientMcpClient: with the auth option, a cancellation reaches the server at once, with the token, while a 429 paces the server’s other requests', async () => {
  const { ms, authorization } = await cancelledWhilePaused({ auth: { token: 'sk-cancel-1' } });
  assert.ok(ms < Infinity, 'the server was told the call is cancelled');
  assert.ok(ms < 1000, `told ${ms} ms after the abort`);
  assert.equal(authorization, 'Bearer sk-cancel-1');
});

test('mcpFetch() alone: a cancellation reaches the server at once while a 429 paces the server’s other requests past maxRetryAfterMs, instead of being refused unsent', async () => {
  const { ms } = await cancelledWhilePaused({}, { alone: true });
  assert.ok(ms < Infinity, 'the server was told the call is cancelled');
  assert.ok(ms < 1000, `told ${ms} ms after the abort`);
});

test('mcpFetch() alone: a cancellation reaches the server at once while a 429 paces the server’s other requests within maxRetryAfterMs, instead of waiting out the pause', async () => {
  const { ms } = await cancelledWhilePaused({}, { alone: true, maxRetryAfterMs: 60_000 });
  assert.ok(ms < 1000, `told ${ms} ms after the abort`);
});

test('mcpFetch() alone, with the auth option: a cancellation reaches the server at once, with the token, while a 429 paces the server’s other requests', async () => {
  const { ms, authorization } = await cancelledWhilePaused(
    { auth: { token: 'sk-cancel-2' } },
    { alone: true },
  );
  assert.ok(ms < 1000, `told ${ms} ms after the abort`);
  assert.equal(authorization, 'Bearer sk-cancel-2');
});

test('resilientMcpClient: an answer to a server request with the id of a call in flight does not stop a cancellation of that call', async () => {
  const bodies: string[] = [];
  const app = {
    async fetch(request: Request): Promise<Response> {
      const body = await request.text();
      bodies.push(body);
      const first =
        body.includes('tools/call') && bodies.filter((seen) => seen.includes('tools/call')).length === 1;
      return new Response(null, { status: first ? 429 : 202, headers: { 'retry-after-ms': '300' } });
    },
  };
  await withApp(app, async ({ origin }) => {
    let post: ((message: unknown) => Promise<Response>) | undefined;
    const client = {
      transport: undefined as unknown,
      async connect(transport: never) {
        this.transport = transport;
      },
      async close() {
        this.transport = undefined;
      },
    };
    const signal = new AbortController().signal;
    const mcp = resilientMcpClient({
      client,
      transport: (fetch) => {
        // Posts as the SDK's transport does: the JSON body, the transport's own signal.
        post = (message) => fetch(`${origin}/mcp`, { method: 'POST', body: JSON.stringify(message), signal });
        return { async send() {} };
      },
      policy: definePolicy({ retry: { backoff: fast }, breaker: false }),
    });
    try {
      await mcp.connect();
      assert.ok(post, 'post');
      const call = post({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'add' } }).catch(
        (error: unknown) => error,
      );
      await new Promise((resolve) => setTimeout(resolve, 50));
      // The client answers the server's own request 1 (a sampling, a roots/list) meanwhile.
      await (await post({ jsonrpc: '2.0', id: 1, result: {} })).body?.cancel();
      await (
        await post({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1 } })
      ).body?.cancel();
      assert.equal(((await call) as Error).name, 'AbortError');
      assert.equal(bodies.filter((body) => body.includes('tools/call')).length, 1, 'not sent again');
    } finally {
      await mcp.close();
    }
  });
});

/**
 * An in-process MCP server's answer to a JSON-RPC request it took (`message`): the
 * `initialize` result, else an empty tool result, in session `s`. No socket: for tests
 * that send thousands of calls or answer as no real server can.
 */
function inProcessAnswer(message: {
  id: unknown;
  method: string;
  params: { protocolVersion?: string };
}): Response {
  const result =
    message.method === 'initialize'
      ? {
          protocolVersion: message.params.protocolVersion,
          capabilities: { tools: {} },
          serverInfo: { name: 'tools', version: '1.0.0' },
        }
      : { content: [] };
  return Response.json({ jsonrpc: '2.0', id: message.id, result }, { headers: { 'mcp-session-id': 's' } });
}

/** A resilientMcpClient (policy 'tools') whose base fetch is `answer`, an in-process server. */
function inProcess(answer: FetchLike) {
  return resilientMcpClient({
    client: new Client({ name: 'breakwater-test', version: '1.0.0' }),
    transport: (fetch: FetchLike) =>
      new StreamableHTTPClientTransport(new URL('http://127.0.0.1:9/mcp'), { fetch }),
    policy: definePolicy({ name: 'tools' }),
    fetch: answer,
  });
}

test('mcpFetch: requests that each pass an AbortSignal.any() of a signal that never aborts keep no memory per finished request', async () => {
  // Each request's own abort follows the caller's signal through one listener on it. A
  // runtime keeps a signal that has one and can still abort (Node's gcPersistentSignals,
  // Bun too, for AbortSignal.any() and AbortSignal.timeout()): a listener left on a fetch
  // wrapper's per-request signal kept that signal, and its followers, for good.
  const calls = 12_000;
  // Answered in process: the listeners under test are mcpFetch's own, and 12,000
  // requests over loopback took 18 s of the suite on Node.
  const answer: FetchLike = async () =>
    new Response('{"jsonrpc":"2.0","id":1,"result":{}}', { headers: { 'content-type': 'application/json' } });
  const fetch = mcpFetch(definePolicy({ name: 'tools' }), { fetch: answer });
  const long = new AbortController();
  const init = { method: 'POST', headers: { 'content-type': 'application/json' } };
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
  const call = async (): Promise<void> => {
    await (
      await fetch('http://127.0.0.1:9/mcp', { ...init, body, signal: AbortSignal.any([long.signal]) })
    ).text();
  };
  const grew = await heapGrowth(call, calls);
  assert.ok(grew < 4_000_000, `heapUsed grew ${(grew / 1e6).toFixed(2)} MB over ${calls} calls`);
});

/** Answers every request in process: a notification 202, a request {@link inProcessAnswer}. */
async function answerAll(_input: unknown, init?: RequestInit): Promise<Response> {
  const message = JSON.parse(String(init?.body));
  if (message.id === undefined) return new Response(null, { status: 202 });
  return inProcessAnswer(message);
}

/**
 * Calls `add` 1,000 times on `client` (an in-process server: 20,000 calls over loopback
 * take half a minute), then 20,000 more: in bytes, how much the heap grew over those.
 */
function heapGrowthOf20kCalls(client: Client): Promise<number> {
  return heapGrowth(() => client.callTool({ name: 'add', arguments: {} }), 20_000, { warm: 1000 });
}

test('resilientMcpClient: 20,000 tool calls in one session keep memory flat: the session-long signal keeps no call’s own abort', async () => {
  // Each call's fetch gets its own abort (a notifications/cancelled ends it), tied to the
  // transport's signal, which lives as long as the session. With AbortSignal.any(), Node
  // 20 and Deno kept every signal so made: about 1.5 KB a call (32 MB here), for good.
  await closing(inProcess(answerAll), async (mcp) => {
    const grew = await heapGrowthOf20kCalls(await mcp.connect());
    assert.ok(grew < 6_000_000, `heapUsed grew ${(grew / 1e6).toFixed(1)} MB`);
  });
});

/** A transport that sends nothing: the test plays the server's messages to `onmessage`. */
interface ScriptedTransport {
  send(message: unknown): Promise<void>;
  onmessage?: (message: unknown) => void;
}

/**
 * `resilientMcpClient()` over a stand-in client and a {@link ScriptedTransport}, connected:
 * for what only a misbehaving server or an unlucky ordering shows (a server request
 * reusing an id, answers after a notification). Its fetch is the policy's, on loopback.
 */
async function scriptedClient() {
  let wired: ScriptedTransport | undefined;
  const client = {
    transport: undefined as unknown,
    async connect(transport: never) {
      this.transport = transport;
    },
    async close() {
      this.transport = undefined;
    },
  };
  const mcp = resilientMcpClient({
    client,
    transport: () => {
      wired = { async send() {} };
      return wired;
    },
    policy: definePolicy({ retry: { backoff: fast }, breaker: false }),
  });
  await mcp.connect();
  assert.ok(wired, 'connect() built the transport');
  return { mcp, wired };
}

test('resilientMcpClient: a server request reusing a pending tools/list id does not steal its answer', async () => {
  const got: { body: string; key: string | null }[] = [];
  await withApp(recordingApp(got), async (app) => {
    const { mcp, wired } = await scriptedClient();
    await wired.send({ jsonrpc: '2.0', id: 7, method: 'tools/list' });
    // The server's own request with the same id, then the list's answer.
    wired.onmessage?.({ jsonrpc: '2.0', id: 7, method: 'sampling/createMessage', params: {} });
    const lookup = { name: 'lookup', annotations: { readOnlyHint: true } };
    wired.onmessage?.({ jsonrpc: '2.0', id: 7, result: { tools: [lookup] } });
    const body = JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 'lookup' } });
    await (await mcp.fetch(`${app.origin}/mcp`, { method: 'POST', body })).body?.cancel();
  });
  assert.equal(got.length, 3, 'lookup was not learned as read-only, so its 503 was not resent');
});

test('resilientMcpClient: a first tools/list page replaces what earlier listings taught, before the next page arrives', async () => {
  const { seen, trip, catalog } = catalogTest(2, [LOOKUP, UPSERT, SCAN]);
  await withCatalogClient(seen, trip, catalog, async (client) => {
    const { nextCursor } = await client.listTools();
    assert.equal(nextCursor, '2');
    await client.listTools({ cursor: nextCursor });
    assert.equal(await ranTwice(client, seen, trip, 'scan'), true, 'the second page adds to the listing');
    // The server turns upsert destructive and lists it on its second page now.
    catalog.tools = [LOOKUP, SCAN, { name: 'upsert', annotations: { destructiveHint: true } }];
    await client.listTools();
    assert.equal(await ranTwice(client, seen, trip, 'upsert'), false, 'not on the new first page');
    assert.equal(await ranTwice(client, seen, trip, 'scan'), true);
    await client.listTools({ cursor: '2' });
    assert.equal(await ranTwice(client, seen, trip, 'upsert'), false);
  });
});

test('resilientMcpClient: a tools/list page for a cursor no listing gave teaches nothing', async () => {
  const { seen, trip, catalog } = catalogTest(1, [LOOKUP, SCAN]);
  await withCatalogClient(seen, trip, catalog, async (client) => {
    await client.listTools({ cursor: '1' });
    assert.equal(await ranTwice(client, seen, trip, 'scan'), false);
    const { nextCursor } = await client.listTools();
    await client.listTools({ cursor: nextCursor });
    assert.equal(await ranTwice(client, seen, trip, 'scan'), true, 'the same page, in its listing');
  });
});

test('resilientMcpClient: a listing answered late, after a listing sent later was answered, only forgets', async () => {
  const { seen, trip, catalog } = catalogTest(10, [LOOKUP]);
  const inner = mcpApp(seen, trip.faults, () => catalogServer(seen, catalog));
  let listed!: () => void;
  const firstListed = new Promise<void>((resolve) => {
    listed = resolve;
  });
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  let lists = 0;
  // The first tools/list is answered (lookup read-only), then the server turns lookup
  // destructive, without a notification, and that answer reaches the client last.
  const app = {
    async fetch(request: Request): Promise<Response> {
      const text = request.method === 'POST' ? await request.clone().text() : '';
      const response = await inner.fetch(request);
      if (!text.includes('"method":"tools/list"') || ++lists !== 1) return response;
      catalog.tools = [{ name: 'lookup', annotations: { destructiveHint: true } }];
      listed();
      await held;
      return response;
    },
  };
  await withApp(app, async ({ origin }) => {
    const mcp = resilient(origin);
    try {
      const client = await mcp.connect();
      const first = client.listTools();
      await firstListed;
      const { tools } = await client.listTools();
      assert.deepEqual(tools[0]?.annotations, { destructiveHint: true });
      release();
      assert.deepEqual((await first).tools[0]?.annotations, readOnly);
      assert.equal(
        await ranTwice(client, seen, trip, 'lookup'),
        false,
        'the older answer taught lookup read-only',
      );
    } finally {
      release();
      await mcp.close();
    }
  });
});

test('resilientMcpClient: after notifications/tools/list_changed a tool learned read-only is not resent until the client lists again', async () => {
  const { seen, trip, catalog } = catalogTest(10, [
    LOOKUP,
    { name: 'pinned' },
    { name: 'retool', annotations: { destructiveHint: true } },
  ]);
  // Calling retool turns lookup destructive, and the server says its tools changed.
  const change: CatalogChange = {
    tool: 'retool',
    tools: [
      { name: 'lookup', annotations: { readOnlyHint: false, destructiveHint: true } },
      { name: 'pinned' },
      SCAN,
    ],
  };
  await withApp(
    mcpApp(seen, trip.faults, () => catalogServer(seen, catalog, change), { sse: true }),
    async (app) => {
      const mcp = resilient(app.origin, [], {}, { tools: ['pinned'] });
      try {
        const client = await mcp.connect();
        let notified = 0;
        client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
          notified++;
        });
        await client.listTools();
        assert.equal(await ranTwice(client, seen, trip, 'lookup'), true, 'learned read-only');

        await client.callTool({ name: 'retool', arguments: {} });
        // The SDK hands a notification to its handler a microtask after the message.
        await new Promise((resolve) => setTimeout(resolve, 0));
        assert.equal(notified, 1, 'the notification reached the client');

        const runs = seen.runs.lookup ?? 0;
        assert.equal(await ranTwice(client, seen, trip, 'lookup'), false, 'no re-list, and no resend');
        assert.equal((seen.runs.lookup ?? 0) - runs, 1, 'lookup ran once');
        assert.equal(await ranTwice(client, seen, trip, 'pinned'), true, 'a tool you vouched for stays');

        await client.listTools();
        assert.equal(await ranTwice(client, seen, trip, 'scan'), true, 'a new listing teaches again');
        assert.equal(await ranTwice(client, seen, trip, 'lookup'), false);
      } finally {
        await mcp.close();
      }
    },
  );
});

/**
 * `inner` with the first POST whose body holds `marker` held at the server's door:
 * `arrival` settles when it comes, and it goes on to `inner` once `release()` is called.
 */
function holdFirst(
  inner: { fetch(request: Request): Promise<Response> },
  marker: string,
): { app: { fetch(request: Request): Promise<Response> }; arrival: Promise<void>; release: () => void } {
  let arrived!: () => void;
  const arrival = new Promise<void>((resolve) => {
    arrived = resolve;
  });
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  let holding = true;
  const app = {
    async fetch(request: Request): Promise<Response> {
      const text = request.method === 'POST' ? await request.clone().text() : '';
      if (holding && text.includes(marker)) {
        holding = false;
        arrived();
        await held;
      }
      return inner.fetch(request);
    },
  };
  return { app, arrival, release };
}

test('resilientMcpClient: a call to a tool learned read-only that fails after notifications/tools/list_changed arrived is not resent', async () => {
  const retool = { name: 'retool', annotations: { destructiveHint: true } };
  const { seen, catalog } = catalogTest(10, [LOOKUP, retool]);
  // Calling retool turns lookup destructive, and the server says its tools changed.
  const change: CatalogChange = {
    tool: 'retool',
    tools: [{ name: 'lookup', annotations: { destructiveHint: true } }, retool],
  };
  const lookupFails: Faults = (what, nth) =>
    what === 'tools/call:lookup' && nth === 1 ? { status: 503, after: true } : undefined;
  const inner = mcpApp(seen, lookupFails, () => catalogServer(seen, catalog, change), { sse: true });
  // The first lookup call waits at the server's door until released: it runs, and fails
  // 503, after the server changed its tools and the client heard so.
  const { app, arrival: lookupArrived, release } = holdFirst(inner, '"name":"lookup"');
  await withApp(app, async ({ origin }) => {
    const mcp = resilient(origin);
    try {
      const client = await mcp.connect();
      await client.listTools();
      const call = client.callTool({ name: 'lookup', arguments: {} }).catch((caught: unknown) => caught);
      await lookupArrived;
      await client.callTool({ name: 'retool', arguments: {} });
      release();
      const error = await call;
      assert.equal(seen.runs.lookup, 1, 'lookup ran twice: resent after the server said its tools changed');
      assert.ok(
        error instanceof HttpStatusError && error.status === 503,
        'error instanceof HttpStatusError && error.status === 503',
      );
    } finally {
      release();
      await mcp.close();
    }
  });
});

test('resilientMcpClient: a tools/list answer arriving after notifications/tools/list_changed teaches nothing', async () => {
  const got: { body: string; key: string | null }[] = [];
  await withApp(recordingApp(got), async (app) => {
    const { mcp, wired } = await scriptedClient();
    await wired.send({ jsonrpc: '2.0', id: 7, method: 'tools/list' });
    // The list may have been answered before the change the notification announces.
    wired.onmessage?.({ jsonrpc: '2.0', method: 'notifications/tools/list_changed' });
    const lookup = { name: 'lookup', annotations: { readOnlyHint: true } };
    wired.onmessage?.({ jsonrpc: '2.0', id: 7, result: { tools: [lookup] } });
    const body = JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 'lookup' } });
    await (await mcp.fetch(`${app.origin}/mcp`, { method: 'POST', body })).body?.cancel();
  });
  assert.equal(got.length, 1, 'lookup was learned from a listing older than the change, and resent');
});

test('resilientMcpClient: bad options throw a TypeError naming each path', () => {
  assert.throws(
    () =>
      resilientMcpClient({
        client: {},
        transport: 'x',
        gate: 1,
        connectTimeoutMs: 0,
        closeTimeoutMs: -1,
      } as never),
    (error: unknown) =>
      error instanceof TypeError &&
      ['client', 'transport', 'policy', 'gate', 'connectTimeoutMs', 'closeTimeoutMs'].every((path) =>
        error.message.includes(`resilientMcpClient().${path}`),
      ),
  );
});

test('resilientMcpClient: bad options of its own and of mcpFetch() are listed together in one TypeError, each under resilientMcpClient()', () => {
  const client = new Client({ name: 'breakwater-test', version: '1.0.0' });
  const transport = () => new StreamableHTTPClientTransport(new URL('http://127.0.0.1:9/mcp'));
  assert.throws(
    () =>
      resilientMcpClient({
        client,
        transport,
        policy: definePolicy(),
        connectTimeoutMs: 'soon',
        tools: 5,
        maxResponseBytes: -1,
        retries: 2,
      } as never),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, String(error));
      for (const path of ['connectTimeoutMs', 'tools', 'maxResponseBytes'])
        assert.ok(error.message.includes(`resilientMcpClient().${path}: `), `${path} in ${error.message}`);
      assert.ok(error.message.includes('unknown option "retries"'), error.message);
      assert.ok(
        !error.message.includes('mcpFetch()'),
        `named after what the caller called: ${error.message}`,
      );
      return true;
    },
  );
});

/** `sessionApp()`'s one tool: its annotations in sessions started from now on, its runs, and whether its next call is answered 503 after it ran. */
interface Echo {
  annotations: Record<string, boolean>;
  runs: number;
  failNext: boolean;
}

/**
 * A stateful MCP server: one server and transport per session, kept until `forget()`
 * drops them all (a restarted server) or the client ends it (DELETE). No standalone
 * SSE stream (GET answers 405) unless `stream`. `streams()`: GET streams opened;
 * `lostGets()`: GETs answered 404.
 */
function sessionApp(echo: Echo = { annotations: {}, runs: 0, failNext: false }, { stream = false } = {}) {
  const sessions = new Map<string, McpServer>();
  let initializes = 0;
  let lostGets = 0;
  let streams = 0;
  return {
    sessions,
    initializes: () => initializes,
    lostGets: () => lostGets,
    streams: () => streams,
    async forget(): Promise<void> {
      for (const server of sessions.values()) await server.close();
      sessions.clear();
    },
    async fetch(request: Request): Promise<Response> {
      if (request.method === 'GET' && !stream)
        return new Response(null, { status: 405, headers: { allow: 'POST, DELETE' } });
      const id = request.headers.get('mcp-session-id');
      if (id !== null) {
        const server = sessions.get(id);
        if (server === undefined) {
          await request.body?.cancel();
          if (request.method === 'GET') lostGets++;
          return Response.json(
            { jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } },
            { status: 404 },
          );
        }
        const runs = echo.runs;
        const response = await (
          server.server.transport as WebStandardStreamableHTTPServerTransport
        ).handleRequest(request);
        if (request.method === 'GET' && response.ok) streams++;
        if (!echo.failNext || echo.runs === runs) return response;
        echo.failNext = false;
        await response.text();
        return new Response('busy', { status: 503 });
      }
      initializes++;
      const server = new McpServer({ name: 'sessions', version: '1.0.0' });
      server.registerTool('echo', { description: 'echo', annotations: echo.annotations }, async () => {
        echo.runs++;
        return { content: [{ type: 'text' as const, text: 'echoed' }] };
      });
      const transport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => crypto.randomUUID(),
        enableJsonResponse: true,
        onsessioninitialized: (sessionId) => {
          sessions.set(sessionId, server);
        },
        onsessionclosed: (sessionId) => {
          sessions.delete(sessionId);
        },
      });
      await server.connect(transport);
      return transport.handleRequest(request);
    },
  };
}

/** Calls the echo tool through `client`: it must answer 'echoed'. */
async function assertEchoes(client: Client): Promise<void> {
  const result = await client.callTool({ name: 'echo', arguments: {} });
  assert.deepEqual(result.content, [{ type: 'text', text: 'echoed' }]);
}

/** Serves `app` and runs `fn` with a `resilient()` client on it, then closes the client and drops the sessions of `sessions`. */
async function withResilient(
  app: FetchApp,
  sessions: { forget(): Promise<void> },
  options: Parameters<typeof resilient>[3],
  fn: (mcp: ReturnType<typeof resilient>, origin: string) => Promise<void>,
): Promise<void> {
  await withApp(app, async ({ origin }) => {
    const mcp = resilient(origin, [], {}, options);
    try {
      await fn(mcp, origin);
    } finally {
      await mcp.close();
      await sessions.forget();
    }
  });
}

test('resilientMcpClient: a 404 for a session the server forgot closes the client, and the next connect starts a new session', async () => {
  const app = sessionApp();
  await withResilient(app, app, {}, async (mcp) => {
    const client = await mcp.connect();
    const first = (mcp.transport as StreamableHTTPClientTransport | undefined)?.sessionId;
    assert.ok(first, 'first');
    await app.forget();
    await assert.rejects(
      client.callTool({ name: 'echo', arguments: {} }),
      (error: unknown) =>
        error instanceof HttpStatusError &&
        error.status === 404 &&
        error.serverMessage === 'Session not found',
    );
    assert.equal(mcp.transport, undefined);
    assert.equal(mcp.gate.state().failures, 0, 'a lost session is not a start failure');

    const again = await mcp.connect();
    const second = (mcp.transport as StreamableHTTPClientTransport | undefined)?.sessionId;
    assert.ok(second && second !== first, 'second && second !== first');
    await assertEchoes(again);
    assert.equal(app.initializes(), 2);
  });
});

test('resilientMcpClient: a new session after a 404 forgets the tool hints the lost session taught', async () => {
  const echo: Echo = { annotations: readOnly, runs: 0, failNext: false };
  const app = sessionApp(echo);
  /** Calls echo with its answer failing 503 after it ran: how many times it ran. */
  const runs = async (client: Client): Promise<number> => {
    const before = echo.runs;
    echo.failNext = true;
    await client.callTool({ name: 'echo', arguments: {} }).catch(() => undefined);
    return echo.runs - before;
  };
  await withResilient(app, app, {}, async (mcp) => {
    const client = await mcp.connect();
    await client.listTools();
    assert.equal(await runs(client), 2, 'learned read-only, so resent');
    // The server restarts, and its echo is destructive now.
    await app.forget();
    echo.annotations = { destructiveHint: true };
    await assert.rejects(
      client.callTool({ name: 'echo', arguments: {} }),
      (error: unknown) => error instanceof HttpStatusError && error.status === 404,
    );
    const again = await mcp.connect();
    assert.equal(await runs(again), 1, 'resent on a hint from the lost session');
    await again.listTools();
    assert.equal(await runs(again), 1);
  });
});

test('resilientMcpClient: close() while a connect is closing the lost session opens no new one: that connect rejects with an AbortError, nothing is sent', async () => {
  const app = sessionApp();
  await withResilient(app, app, {}, async (mcp) => {
    const client = await mcp.connect();
    await app.forget();
    await assert.rejects(client.callTool({ name: 'echo', arguments: {} }), HttpStatusError);
    // connect() first closes the client on the lost session; close() comes meanwhile.
    const connecting = mcp.connect();
    await mcp.close();
    // A connect() after close() starts a new session: it does not join the one close() ended.
    const again = mcp.connect();
    await assert.rejects(connecting, (error: unknown) => (error as Error).name === 'AbortError');
    assert.equal(await again, client);
    assert.equal(app.initializes(), 2, 'the connect close() ended initialized a session too');
    assert.ok(mcp.transport, 'connected on the new session');
    assert.equal(mcp.gate.state().failures, 0, 'a close is not a start failure');
  });
});

test('resilientMcpClient: a connect() right after close() ended a connect mid-initialize is not closed by the ended one: it connects', async () => {
  const app = sessionApp();
  // The first connect's notifications/initialized waits at the server's door: close()
  // comes while the SDK's connect still awaits it.
  const { app: door, arrival: initializedArrived, release } = holdFirst(app, '"notifications/initialized"');
  await withResilient(door, app, {}, async (mcp) => {
    try {
      const connecting = mcp.connect();
      await initializedArrived;
      await mcp.close();
      await assert.rejects(connecting, (error: unknown) => (error as Error).name === 'AbortError');
      const client = await mcp.connect();
      // The ended connect's SDK cleanup (its initialized send failing) must not close this one.
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.ok(mcp.transport, 'the connect after close() was closed by the one close() ended');
      await assertEchoes(client);
    } finally {
      release();
    }
  });
});

test('resilientMcpClient: a connect() called while close() is still closing starts a new session instead of joining the connect close() ended', async () => {
  const app = sessionApp();
  await withResilient(app, app, {}, async (mcp) => {
    const ended = mcp.connect();
    const closing = mcp.close();
    // Called after close(), not after it resolved: the next connect() all the same.
    const again = mcp.connect();
    await assert.rejects(ended, (error: unknown) => (error as Error).name === 'AbortError');
    await closing;
    const client = await again;
    assert.ok(mcp.transport, 'connected on a new session');
    await assertEchoes(client);
    assert.equal(app.initializes(), 1, 'the connect close() ended sent its initialize');
  });
});

test('resilientMcpClient: a connect() called while close() ends the gate’s probe is not refused as a probe in flight: it connects', async () => {
  const seen = counts();
  await withApp(mcpApp(seen, failFirst('initialize', { status: 503 })), async (app) => {
    const mcp = resilient(app.origin, [], { retry: { attempts: 1 } });
    try {
      await assert.rejects(mcp.connect(), HttpStatusError);
      await until(mcp.gate.state().retryAt);
      // The gate lets one probe through after its window: close() ends it.
      const probe = mcp.connect();
      const closing = mcp.close();
      const again = mcp.connect();
      await assert.rejects(probe, (error: unknown) => (error as Error).name === 'AbortError');
      await closing;
      const client = await again;
      assert.ok(mcp.transport, 'connected');
      assert.equal(client.getServerVersion()?.name, 'tools');
      assert.equal(mcp.gate.state().failures, 0);
    } finally {
      await mcp.close();
    }
  });
});

test('resilientMcpClient: close() before a gate that runs connects later has run one opens no session: that connect rejects with an AbortError', async () => {
  let connects = 0;
  const client = {
    transport: undefined as unknown,
    async connect(transport: never) {
      connects++;
      this.transport = transport;
    },
    async close() {
      this.transport = undefined;
    },
  };
  const inner = createGate();
  // A gate that asks something first (a shared store, say) before it runs the connect.
  const gate = {
    ...inner,
    async run<T>(fn: () => Promise<T>): Promise<T> {
      await new Promise((resolve) => setTimeout(resolve, 5));
      return inner.run(fn);
    },
  };
  const mcp = resilientMcpClient({
    client,
    transport: () => ({ async send() {} }),
    policy: definePolicy({ breaker: false }),
    gate,
  });
  const connecting = mcp.connect();
  await mcp.close();
  await assert.rejects(connecting, (error: unknown) => (error as Error).name === 'AbortError');
  assert.equal(connects, 0, 'the client connected after close()');
  assert.equal(client.transport, undefined);
  await mcp.connect();
  assert.equal(connects, 1, 'a connect() after close() connects');
});

/**
 * `inner` with its DELETEs counted, and answered `status` instead when given, or with
 * `'hang'` not at all until the client goes away.
 */
function deletes(
  inner: { fetch(request: Request): Promise<Response> },
  status?: number | 'hang',
): { app: { fetch(request: Request): Promise<Response> }; count: () => number } {
  let count = 0;
  const app = {
    async fetch(request: Request): Promise<Response> {
      if (request.method !== 'DELETE' || status === undefined) {
        if (request.method === 'DELETE') count++;
        return inner.fetch(request);
      }
      count++;
      // Read to its end (it is empty), so the server leaves no drain timer behind once the client goes.
      await request.arrayBuffer();
      if (status === 'hang') {
        await new Promise((resolve) => request.signal.addEventListener('abort', resolve, { once: true }));
      }
      return new Response('nope', { status: status === 'hang' ? 200 : status });
    },
  };
  return { app, count: () => count };
}

test('resilientMcpClient: close() ends the server’s session with a DELETE (MCP spec, Session Management): the server holds none afterwards', async () => {
  const server = sessionApp();
  const { app, count } = deletes(server);
  await withResilient(app, server, {}, async (mcp) => {
    await mcp.connect();
    assert.equal(server.sessions.size, 1);
    await mcp.close();
    assert.equal(count(), 1, 'no DELETE sent');
    assert.equal(server.sessions.size, 0, 'the session stayed on the server after close()');
    const again = await mcp.connect();
    await again.callTool({ name: 'echo', arguments: {} });
    assert.equal(server.sessions.size, 1, 'a connect after close() opens a new session');
  });
});

test('resilientMcpClient: a connect() called right after close(), not awaited, keeps its new session: the DELETE ends only the old one', async () => {
  const server = sessionApp();
  const { app, count } = deletes(server);
  await withResilient(app, server, {}, async (mcp) => {
    await mcp.connect();
    const [old] = server.sessions.keys();
    const closing = mcp.close();
    const client = await mcp.connect();
    await closing;
    assert.equal(count(), 1);
    assert.equal(server.sessions.has(old as string), false, 'the old session stayed');
    assert.equal(server.sessions.size, 1, 'the new session was ended too');
    await assertEchoes(client);
  });
});

test('resilientMcpClient: close() against a server that never answers the DELETE resolves after closeTimeoutMs, without throwing', async () => {
  const server = sessionApp();
  const { app, count } = deletes(server, 'hang');
  await withResilient(app, server, { closeTimeoutMs: 50 }, async (mcp) => {
    await mcp.connect();
    const started = performance.now();
    assert.equal(await settledWithin(mcp.close(), 2_000), undefined, 'close() hung');
    assert.ok(performance.now() - started >= 45, 'close() did not wait for the DELETE');
    assert.equal(count(), 1, 'no DELETE sent');
    assert.equal(mcp.transport, undefined);
  });
});

test('resilientMcpClient: close() resolves when the server answers the DELETE with a failure; the SDK reports it to client.onerror', async () => {
  const server = sessionApp();
  const { app, count } = deletes(server, 500);
  await withApp(app, async ({ origin }) => {
    const mcp = resilient(origin, [], { retry: { attempts: 1 } });
    const errors: unknown[] = [];
    try {
      const client = await mcp.connect();
      client.onerror = (error) => errors.push(error);
      await mcp.close();
      assert.equal(count(), 1, 'no DELETE sent');
      assert.ok(
        errors.some((error) => (error as { code?: unknown }).code === 500),
        'the failed DELETE was not reported',
      );
    } finally {
      await mcp.close();
      await server.forget();
    }
  });
});

/** A credential in the server's URL, as services that take their key in the query have it. */
const URL_SECRET = 'Sk9vQ2hLmP4xRt7WzY3nBc';

/**
 * `inner`, ending the connection without an answer (with a TCP reset, or a plain close:
 * Deno's message quotes the URL for the close only) of each request `cuts(method, body)`
 * picks; each tools/call is held 300 ms first, time for its caller to cancel it.
 */
function cuttingApp(inner: FetchApp, cuts: (method: string, body: string) => boolean, reset: boolean) {
  return {
    async fetch(request: Request, env: { incoming: { socket: Socket } }): Promise<Response> {
      const body = await request.clone().text();
      if (cuts(request.method, body)) {
        const { socket } = env.incoming;
        if (reset && typeof socket.resetAndDestroy === 'function') socket.resetAndDestroy();
        else socket.destroy();
        return new Response(null);
      }
      if (body.includes('"tools/call"')) await new Promise((resolve) => setTimeout(resolve, 300));
      return inner.fetch(request);
    },
  };
}

/** Asserts no way a logger shows `errors` (util.inspect, JSON, each cause's fields) quotes {@link URL_SECRET}. */
function assertSecretHidden(errors: unknown[]): void {
  for (const error of errors) {
    const shown = [inspect(error, { depth: 5 }), String(error)];
    try {
      shown.push(JSON.stringify(error));
    } catch {}
    for (let link = error, i = 0; link instanceof Object && i < 8; i++) {
      for (const field of ['message', 'stack', 'path', 'input', 'url'])
        shown.push(String(Reflect.get(link, field)));
      link = Reflect.get(link, 'cause');
    }
    for (const text of shown) assert.ok(!text.includes(URL_SECRET), `the URL's secret is shown: ${text}`);
  }
}

test('resilientMcpClient: a cancellation or a DELETE whose connection is reset or closed reaches client.onerror without the secret in the URL’s query', async () => {
  // With how many failures other than the cancelled call's AbortError the SDK reports the
  // cut: the transport's own and, for a cancellation, the Protocol's "Failed to send cancellation".
  for (const [cuts, failures, reset] of [
    [(_method: string, body: string) => body.includes('notifications/cancelled'), 2, true],
    [(_method: string, body: string) => body.includes('notifications/cancelled'), 2, false],
    [(method: string) => method === 'DELETE', 1, true],
    [(method: string) => method === 'DELETE', 1, false],
  ] as const) {
    const server = sessionApp();
    await withApp(cuttingApp(server, cuts, reset), async ({ origin }) => {
      const url = new URL(`${origin}/mcp?api_key=${URL_SECRET}`);
      const mcp = resilientMcpClient({
        client: new Client({ name: 'breakwater-test', version: '1.0.0' }),
        transport: (fetch: FetchLike) => new StreamableHTTPClientTransport(url, { fetch }),
        policy: definePolicy({ name: 'tools', retry: { backoff: fast } }),
        gate: createGate({ key: 'tools', schedule: quickGate }),
      });
      const errors: unknown[] = [];
      try {
        const client = await mcp.connect();
        client.onerror = (error) => errors.push(error);
        const cancel = new AbortController();
        const call = client.callTool({ name: 'echo', arguments: {} }, undefined, { signal: cancel.signal });
        cancel.abort(new Error('stop'));
        await assert.rejects(call, /stop/);
        // Closing (the DELETE) also waits for the cancellation's failure to be reported.
        assert.equal(await settledWithin(mcp.close(), 3_000), undefined, 'close() did not resolve');
        const reported = () => errors.filter((error) => (error as Error).name !== 'AbortError').length;
        for (let i = 0; i < 100 && reported() < failures; i++)
          await new Promise((resolve) => setTimeout(resolve, 10));
        assert.equal(reported(), failures, `the reset was not reported: ${inspect(errors)}`);
        assertSecretHidden(errors);
        // As the policy's chain reports a network failure: a NetworkError naming the request.
        assert.ok(
          errors.some((error) => error instanceof NetworkError && error.message.includes('api_key=')),
          inspect(errors),
        );
      } finally {
        await mcp.close();
        await server.forget();
      }
    });
  }
});

test('resilientMcpClient: close() that cuts a connect whose initialize the server has run ends the session that initialize opened', async () => {
  const server = sessionApp();
  let opened!: () => void;
  const open = new Promise<void>((resolve) => {
    opened = resolve;
  });
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  // The initialize runs (the server opens its session), and its answer waits at the door.
  const app = {
    async fetch(request: Request): Promise<Response> {
      const initialize = request.method === 'POST' && request.headers.get('mcp-session-id') === null;
      const response = await server.fetch(request);
      if (initialize) {
        opened();
        await held;
      }
      return response;
    },
  };
  await withResilient(app, server, {}, async (mcp) => {
    try {
      const connecting = mcp.connect();
      await open;
      assert.equal(server.sessions.size, 1);
      const closing = mcp.close();
      release();
      await assert.rejects(connecting, (error: unknown) => (error as Error).name === 'AbortError');
      await closing;
      assert.equal(server.sessions.size, 0, 'the session the cut initialize opened stayed on the server');
    } finally {
      release();
    }
  });
});

test('resilientMcpClient: a connect that fails after the server opened its session ends that session', async () => {
  const server = sessionApp();
  // notifications/initialized is refused: the SDK's connect fails after initialize opened a session.
  const app = answeringPosts(
    server,
    '"notifications/initialized"',
    () => new Response('{"error":"bad"}', { status: 400 }),
  );
  await withResilient(app, server, {}, async (mcp) => {
    await assert.rejects(mcp.connect(), (error: unknown) => error instanceof HttpStatusError);
    assert.equal(server.initializes(), 1);
    for (let waited = 0; server.sessions.size > 0 && waited < 1_000; waited += 10) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.equal(server.sessions.size, 0, 'the session stayed on the server after the failed connect');
  });
});

test('resilientMcpClient: a request made while close() ends the session is not sent', async () => {
  const echo: Echo = { annotations: {}, runs: 0, failNext: false };
  const server = sessionApp(echo);
  // The DELETE is not answered while the request is made.
  const { app } = deletes(server, 'hang');
  await withResilient(app, server, { closeTimeoutMs: 100 }, async (mcp) => {
    const client = await mcp.connect();
    const closing = mcp.close();
    await assert.rejects(client.callTool({ name: 'echo', arguments: {} }));
    await closing;
    assert.equal(echo.runs, 0, 'the tool ran after close()');
  });
});

/**
 * A transport to `origin`'s /mcp over `fetch` that resumes a lost stream once, `delayMs`
 * after it ended.
 */
function reconnectingTransport(
  origin: string,
  fetch: FetchLike,
  delayMs: number,
): StreamableHTTPClientTransport {
  return new StreamableHTTPClientTransport(new URL(`${origin}/mcp`), {
    fetch,
    reconnectionOptions: {
      initialReconnectionDelay: delayMs,
      maxReconnectionDelay: delayMs,
      reconnectionDelayGrowFactor: 1,
      maxRetries: 1,
    },
  });
}

/** A resilient client for `origin`, with a quick gate, whose GET stream is resumed once, `delayMs` after it ended. */
function reconnecting(origin: string, delayMs: number) {
  return resilientMcpClient({
    client: new Client({ name: 'breakwater-test', version: '1.0.0' }),
    transport: (fetch: FetchLike) => reconnectingTransport(origin, fetch, delayMs),
    policy: definePolicy({ name: 'tools', retry: { backoff: fast } }),
    gate: createGate({ key: 'tools', schedule: quickGate }),
  });
}

test('resilientMcpClient: a 404 on the reconnecting GET stream (the server lost the session) makes the next connect() start a new session, without a request failing first', async () => {
  const app = sessionApp(undefined, { stream: true });
  await withApp(app, async ({ origin }) => {
    const mcp = reconnecting(origin, 5);
    try {
      const client = await mcp.connect();
      // The SDK reports the failed reconnect to onerror once it has the answer.
      const reconnectFailed = new Promise<void>((resolve) => {
        client.onerror = (error) => {
          if (error.message.includes('Failed to reconnect')) resolve();
        };
      });
      const first = mcp.transport;
      // The SDK opens its GET stream once initialized, without waiting for it.
      for (let waited = 0; app.streams() === 0 && waited < 2_000; waited += 5) {
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      // The server restarts: its GET stream ends, and the SDK's reconnect is answered 404.
      await app.forget();
      assert.notEqual(await settledWithin(reconnectFailed, 2_000), 'hung', 'no reconnect');
      assert.equal(app.lostGets(), 1);
      assert.equal(mcp.transport, undefined, 'still on the session the server lost');
      const again = await mcp.connect();
      assert.ok(mcp.transport && mcp.transport !== first, 'mcp.transport && mcp.transport !== first');
      await assertEchoes(again);
      assert.equal(app.initializes(), 2);
    } finally {
      await mcp.close();
      await app.forget();
    }
  });
});

test('resilientMcpClient: once the GET stream reopens, the hints are forgotten: a tools/list_changed sent while it was down is lost, and a tool it made destructive is not resent', async () => {
  const echo = { annotations: { readOnlyHint: true }, runs: 0, failNext: false };
  const app = sessionApp(echo, { stream: true });
  await withApp(app, async ({ origin }) => {
    const mcp = reconnecting(origin, 50);
    const waitFor = async (streams: number) => {
      for (let waited = 0; app.streams() < streams && waited < 2_000; waited += 5) {
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      assert.equal(app.streams(), streams);
    };
    try {
      const client = await mcp.connect();
      await client.listTools();
      await waitFor(1);
      // The server ends its GET stream (a proxy's idle cut, a deploy), and says its tools
      // changed before the SDK has reopened it: no stream carries the notification.
      const [server] = app.sessions.values();
      assert.ok(server, 'server');
      (server.server.transport as WebStandardStreamableHTTPServerTransport).closeStandaloneSSEStream();
      await server.sendToolListChanged();
      await waitFor(2);
      echo.failNext = true;
      await assert.rejects(client.callTool({ name: 'echo', arguments: {} }));
      assert.equal(echo.runs, 1, 'run once: not resent on what the lost listing taught');
    } finally {
      await mcp.close();
      await app.forget();
    }
  });
});

test('resilientMcpClient: a server that answers the GET stream 404 from the start (no GET route, as Express answers) keeps its session: connect() does not start a new one', async () => {
  const server = sessionApp();
  let gets = 0;
  const app = {
    async fetch(request: Request): Promise<Response> {
      if (request.method !== 'GET') return server.fetch(request);
      gets++;
      return new Response('Cannot GET /mcp', { status: 404 });
    },
  };
  await withResilient(app, server, {}, async (mcp) => {
    const client = await mcp.connect();
    // The SDK opens its GET stream once initialized, and reports the 404 to onerror.
    const refused = new Promise<void>((resolve) => {
      client.onerror = (error) => {
        if (error.message.includes('SSE stream')) resolve();
      };
    });
    assert.notEqual(await settledWithin(refused, 2_000), 'hung', 'no GET');
    assert.equal(gets, 1);
    assert.ok(mcp.transport, 'the session was taken for lost');
    assert.equal(await mcp.connect(), client);
    await assertEchoes(client);
    assert.equal(server.initializes(), 1);
  });
});

test('resilientMcpClient: a 404 the transport’s fetch gets outside the session (the SDK’s OAuth discovery of metadata the server lacks) keeps the session', async () => {
  const server = sessionApp(undefined, { stream: true });
  // The MCP endpoint, and nothing else: no OAuth metadata, no token endpoint.
  const app = {
    fetch: (request: Request): Promise<Response> =>
      new URL(request.url).pathname === '/mcp'
        ? server.fetch(request)
        : Promise.resolve(new Response('Not Found', { status: 404 })),
  };
  await withApp(app, async ({ origin }) => {
    let given: FetchLike | undefined;
    const mcp = resilientMcpClient({
      client: new Client({ name: 'breakwater-test', version: '1.0.0' }),
      transport: (fetch: FetchLike) => {
        given = fetch;
        return new StreamableHTTPClientTransport(new URL(`${origin}/mcp`), { fetch });
      },
      policy: definePolicy({ name: 'tools', retry: { backoff: fast } }),
      gate: createGate({ key: 'tools', schedule: quickGate }),
    });
    try {
      const client = await mcp.connect();
      for (let waited = 0; server.streams() === 0 && waited < 2_000; waited += 5) {
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      assert.equal(server.streams(), 1);
      // What the SDK's auth() does with the transport's fetch after a 401: discovery GETs
      // (a 404 is the usual answer for one of the well-known URLs) and a token POST.
      await (await (given as FetchLike)(`${origin}/.well-known/oauth-protected-resource/mcp`)).body?.cancel();
      await (
        await (given as FetchLike)(`${origin}/token`, { method: 'POST', body: 'grant_type=refresh_token' })
      ).body?.cancel();
      assert.ok(mcp.transport, 'the session was taken for lost');
      assert.equal(await mcp.connect(), client);
      assert.equal(server.initializes(), 1);
    } finally {
      await mcp.close();
      await server.forget();
    }
  });
});

test('toError() gives each of two 503s its own Retry-After and message, told apart by the body the SDK quotes', async () => {
  const faults: Faults = (what) => {
    if (what === 'tools/call:add') {
      return {
        status: 503,
        headers: { 'retry-after': '7' },
        body: '{"error":{"message":"add is overloaded"}}',
      };
    }
    if (what === 'tools/call:wipe') {
      return { status: 503, headers: { 'retry-after': '2' }, body: '{"error":{"message":"wipe is paused"}}' };
    }
    return undefined;
  };
  await withApp(mcpApp(counts(), faults), async (app) => {
    await withClient(app.origin, { retry: false, breaker: false }, async (client, fetch) => {
      const add = await client.callTool({ name: 'add', arguments: {} }).catch((e: unknown) => e);
      const wipe = await client.callTool({ name: 'wipe', arguments: {} }).catch((e: unknown) => e);
      // Judged after both failed, as an agent that ran them in parallel would.
      const [addError, wipeError] = [fetch.toError(add), fetch.toError(wipe)];
      assert.ok(
        addError instanceof HttpStatusError && wipeError instanceof HttpStatusError,
        'addError instanceof HttpStatusError && wipeError instanceof HttpStatusError',
      );
      assert.deepEqual([addError.retryAfterMs, addError.serverMessage], [7000, 'add is overloaded']);
      assert.deepEqual([wipeError.retryAfterMs, wipeError.serverMessage], [2000, 'wipe is paused']);
    });
  });
});

test('resilientMcpClient: a tools/list answer on a transport the client no longer uses teaches nothing', async () => {
  const got: { body: string; key: string | null }[] = [];
  await withApp(recordingApp(got), async (app) => {
    const { mcp, wired: old } = await scriptedClient();
    await old.send({ jsonrpc: '2.0', id: 7, method: 'tools/list' });
    // A new session (after a 404, or close() and connect()) before the old answer lands.
    await mcp.close();
    await mcp.connect();
    const lookup = { name: 'lookup', annotations: { readOnlyHint: true } };
    old.onmessage?.({ jsonrpc: '2.0', id: 7, result: { tools: [lookup] } });
    const body = JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 'lookup' } });
    await (await mcp.fetch(`${app.origin}/mcp`, { method: 'POST', body })).body?.cancel();
  });
  assert.equal(got.length, 1, 'the old session’s listing taught lookup read-only, and its 503 was resent');
});

/**
 * A real MCP server (stateless: one server and transport per request) with the tools
 * named in `faults` plus `ok`; a `tools/call` of a tool in `faults` is answered with
 * its fault instead (a fault's `after` is not honoured here). GET answers 405 (no
 * standalone SSE stream).
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
async function withPlainClient(
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
    await withPlainClient(app.origin, async (client, fetch) => {
      const add = await client.callTool({ name: 'add', arguments: {} }).catch((e: unknown) => e);
      const wipe = await client.callTool({ name: 'wipe', arguments: {} }).catch((e: unknown) => e);
      // Judged after both failed, as an agent that ran them in parallel would.
      const [addError, wipeError] = [fetch.toError(add), fetch.toError(wipe)];
      assert.ok(
        addError instanceof HttpStatusError && wipeError instanceof HttpStatusError,
        'addError instanceof HttpStatusError && wipeError instanceof HttpStatusError',
      );
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

/** The body both twin failures send: the same words, padded past what a snapshot keeps (2048 bytes). */
const TWIN_BODY = `{"error":{"message":"overloaded"}}${' '.repeat(4000)}`;

/**
 * {@link faultyApp} with two tools that fail alike but ask for different waits: a
 * `tools/call` of `first` is answered 503 with `Retry-After: 30` at once, its body
 * finishing only after 300 ms; one of `second` 503 with `Retry-After: 1` after 100 ms.
 * Same status, same body: so `second`'s failure is captured before the SDK has read
 * `first`'s, and nothing in the SDK's errors tells them apart.
 */
function twinFailuresApp() {
  const inner = faultyApp({});
  return {
    async fetch(request: Request): Promise<Response> {
      const text = request.method === 'POST' ? await request.clone().text() : '';
      const name = text.includes('"tools/call"') ? JSON.parse(text).params?.name : undefined;
      const headers = { 'content-type': 'application/json' };
      const bytes = new TextEncoder().encode(TWIN_BODY);
      if (name === 'first') {
        const body = new ReadableStream<Uint8Array>({
          start(controller) {
            controller.enqueue(bytes.subarray(0, 3000));
            setTimeout(() => {
              controller.enqueue(bytes.subarray(3000));
              controller.close();
            }, 300);
          },
        });
        return new Response(body, { status: 503, headers: { ...headers, 'retry-after': '30' } });
      }
      if (name === 'second') {
        await new Promise((resolve) => setTimeout(resolve, 100));
        return new Response(bytes, { status: 503, headers: { ...headers, 'retry-after': '1' } });
      }
      return inner.fetch(request);
    },
  };
}

test('resilientMcpClient: two concurrent 503s with the same body each keep their own Retry-After, matched by JSON-RPC id', async () => {
  await withApp(twinFailuresApp(), async (app) => {
    const mcp = resilient(app.origin, [], { retry: false, breaker: false });
    try {
      const client = await mcp.connect();
      const [first, second] = await Promise.all(
        ['first', 'second'].map((name) => client.callTool({ name, arguments: {} }).catch((e: unknown) => e)),
      );
      assert.ok(first instanceof HttpStatusError && second instanceof HttpStatusError, String(first));
      assert.equal(first.retryAfterMs, 30_000, 'first got the Retry-After of the failure captured after it');
      assert.equal(second.retryAfterMs, 1000);
    } finally {
      await mcp.close();
    }
  });
});

test('toError() without the request gives each of two indistinguishable failures the longest Retry-After, never a shorter one than the server asked', async () => {
  await withApp(twinFailuresApp(), async (app) => {
    await withPlainClient(app.origin, async (client, fetch) => {
      const [first, second] = await Promise.all(
        ['first', 'second'].map((name) => client.callTool({ name, arguments: {} }).catch((e: unknown) => e)),
      );
      // Judged after both failed: the SDK's errors hold the status and the same body, nothing more.
      const [firstError, secondError] = [fetch.toError(first), fetch.toError(second)];
      assert.ok(
        firstError instanceof HttpStatusError && secondError instanceof HttpStatusError,
        'firstError instanceof HttpStatusError && secondError instanceof HttpStatusError',
      );
      assert.equal(firstError.retryAfterMs, 30_000, 'first was told to wait less than its server asked');
      assert.equal(secondError.retryAfterMs, 30_000);
      assert.equal(firstError.serverMessage, 'overloaded');
    });
  });
});

/** {@link faultyApp}'s server, with every `tools/call` of `tool` answered by `answer()` instead. */
function answering(tool: string, answer: () => Response) {
  return answeringPosts(faultyApp({}), `"${tool}"`, answer);
}

test('a failure body that never ends is cut for the SDK: the call fails with its status, and the server stops being read', async () => {
  // A status past 599 (fetch passes it through) must not slip past the cap, nor break the fetch.
  for (const status of [500, 999]) {
    // An error page that streams on (a proxy's, say).
    const endless = flood('', 'x', { 'content-type': 'text/plain' });
    const app = answering('flood', () => endless.failure(status));
    await withApp(app, async ({ origin }) => {
      await withPlainClient(origin, async (client, fetch) => {
        const caught = await client.callTool({ name: 'flood', arguments: {} }).catch((e: unknown) => e);
        assert.equal((caught as { code?: unknown }).code, status, String(caught));
        const error = fetch.toError(caught);
        // Past 599 there is no HttpStatusError to build: the SDK's error comes back as it was.
        assert.ok(status > 599 ? error === caught : error instanceof HttpStatusError, String(error));
        const { length } = (caught as Error).message;
        assert.ok(length < 100_000, `${status}: message of ${length} chars`);
        assert.ok(
          endless.produced() < FLOOD_BYTES / 2,
          `${status}: server produced ${endless.produced()} bytes`,
        );
      });
    });
  }
});

/** What `work` settles to, or `'hung'` if it has not within `ms`; the timer is cleared either way. */
async function settledWithin<T>(work: Promise<T>, ms: number): Promise<T | 'hung'> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const hung = new Promise<'hung'>((resolve) => {
    timer = setTimeout(() => resolve('hung'), ms);
  });
  try {
    return await Promise.race([work, hung]);
  } finally {
    clearTimeout(timer);
  }
}

test('resilientMcpClient: a failure answer to a cancellation whose body never ends is not read on: the server stops being read', async () => {
  const endless = flood('', 'x', { 'content-type': 'text/plain' });
  const app = answeringPosts(mcpApp(counts()), 'notifications/cancelled', () => endless.failure(500));
  await withApp(app, async ({ origin }) => {
    const mcp = resilient(origin);
    try {
      const client = await mcp.connect();
      const reported = new Promise<unknown>((resolve) => {
        client.onerror = (error) => {
          if (String(error).includes('cancellation')) resolve(error);
        };
      });
      const cancel = new AbortController();
      const call = client.callTool({ name: 'add', arguments: {} }, undefined, { signal: cancel.signal });
      cancel.abort();
      await assert.rejects(call);
      assert.notEqual(await settledWithin(reported, 5_000), 'hung');
      assert.ok(endless.produced() < FLOOD_BYTES / 2, `server produced ${endless.produced()} bytes`);
    } finally {
      await mcp.close();
    }
  });
});

test('a failure body that stalls is ended for the SDK after the policy’s capture.bodyWaitMs: the call fails with its status instead of hanging', async () => {
  const app = answering('stall', () => {
    // A few bytes, then nothing, ever (until the server closes).
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{"error":"stuck'));
      },
    });
    return new Response(body, { status: 503, headers: { 'content-type': 'application/json' } });
  });
  await withApp(app, async ({ origin }) => {
    const policy = definePolicy({ name: 'stall', retry: false, breaker: false, capture: { bodyWaitMs: 50 } });
    const fetch = mcpFetch(policy);
    const client = new Client({ name: 'breakwater-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${origin}/mcp`), { fetch }));
    try {
      const started = Date.now();
      const outcome = await settledWithin(
        client.callTool({ name: 'stall', arguments: {} }).catch((e: unknown) => fetch.toError(e)),
        3000,
      );
      assert.ok(outcome instanceof HttpStatusError, String(outcome));
      assert.equal(outcome.status, 503);
      assert.ok(Date.now() - started < 2000, `took ${Date.now() - started} ms`);
    } finally {
      await client.close();
    }
  });
});

test('toError() never throws on the message it is given: an id JSON cannot write, or a message that cannot be read, only loses the match', () => {
  const fetch = mcpFetch(definePolicy({ retry: false }));
  const error = new StreamableHTTPError(503, 'Error POSTing to endpoint: busy');
  const revoked = Proxy.revocable({}, {});
  revoked.revoke();
  for (const sent of [{ jsonrpc: '2.0', id: 10n, method: 'ping' }, revoked.proxy]) {
    let converted: unknown;
    assert.doesNotThrow(() => {
      converted = fetch.toError(error, sent);
    });
    assert.ok(converted instanceof HttpStatusError, 'converted instanceof HttpStatusError');
    assert.equal(converted.status, 503);
  }
});

test('a failure whose reason phrase is not Latin-1 once decoded (a French "503 Réessayez plus tard") still reaches the SDK as its status, not a TypeError', async () => {
  // node:http sends the phrase as Latin-1 bytes; Node's fetch decodes them as UTF-8 (é
  // becomes U+FFFD), and a Response cannot be built with such a statusText.
  const server = createServer((_request, response) => {
    response.writeHead(503, 'Réessayez plus tard', {
      'content-type': 'application/json',
      'retry-after': '7',
    });
    response.end('{"error":{"message":"maintenance"}}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = server.address() as AddressInfo;
    const fetch = mcpFetch(definePolicy({ name: 'phrase', retry: false, breaker: false }));
    const client = new Client({ name: 'breakwater-test', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`), { fetch });
    const error = fetch.toError(await client.connect(transport).catch((caught: unknown) => caught));
    await client.close();
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.status, 503);
    assert.equal(error.retryAfterMs, 7000);
    assert.equal(error.serverMessage, 'maintenance');
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

test('a failure body in another charset (an old Java server’s ISO-8859-1 page) reaches the SDK’s error, and toError()’s, decoded in it', async () => {
  // Read as UTF-8, its 'é' was U+FFFD in both.
  const page = 'Service indisponible, réessayez plus tard';
  await withServer(
    always({
      status: 503,
      headers: { 'content-type': 'text/html;charset=ISO-8859-1' },
      body: new Uint8Array(Buffer.from(page, 'latin1')),
    }),
    async (server) => {
      const fetch = mcpFetch(definePolicy({ name: 'latin1', retry: false, breaker: false }));
      const client = new Client({ name: 'breakwater-test', version: '1.0.0' });
      const transport = new StreamableHTTPClientTransport(new URL(`${server.origin}/mcp`), { fetch });
      const sdkError = await client.connect(transport).catch((caught: unknown) => caught);
      await client.close();
      assert.match(String(sdkError), /réessayez plus tard/);
      const error = fetch.toError(sdkError);
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.body, page);
    },
  );
});

test('resilientMcpClient: a connect that never settles fails every caller with TimeoutError after connectTimeoutMs and arms the gate; after the window a connect starts afresh', async () => {
  const seen = counts();
  const inner = mcpApp(seen);
  // While hanging, every initialize gets the headers of an SSE answer, then nothing, ever:
  // the SDK waits for its result (an SSE transport's start() would wait for its endpoint
  // the same way). Keyed to the phase, not to the order of arrival: on a loaded machine
  // the first connect may time out before its initialize arrives.
  let hanging = false;
  const app = {
    async fetch(request: Request): Promise<Response> {
      const text = request.method === 'POST' ? await request.clone().text() : '';
      if (text.includes('"initialize"') && hanging) {
        return new Response(new ReadableStream(), { headers: { 'content-type': 'text/event-stream' } });
      }
      return inner.fetch(request);
    },
  };
  // Room for the connect that succeeds on a loaded machine (load 11 on 2 cores).
  const connectMs = 1000;
  await withApp(app, async ({ origin }) => {
    // A first connect in the process (the SDKs' code and schemas loaded and compiled) takes
    // over a second on such a machine: paid here, outside the timed connects.
    const warm = new Client({ name: 'breakwater-test', version: '1.0.0' });
    await warm.connect(new StreamableHTTPClientTransport(new URL(`${origin}/mcp`)));
    await warm.close();
    hanging = true;
    const mcp = resilientMcpClient({
      client: new Client({ name: 'breakwater-test', version: '1.0.0' }),
      transport: (fetch: FetchLike) => new StreamableHTTPClientTransport(new URL(`${origin}/mcp`), { fetch }),
      policy: definePolicy({ name: 'tools', retry: { backoff: fast } }),
      gate: createGate({ key: 'tools', schedule: quickGate }),
      connectTimeoutMs: connectMs,
    });
    try {
      const started = Date.now();
      // A second caller joins the connect in flight: it must not wait on it forever either.
      const outcomes = await settledWithin(
        Promise.all([mcp.connect(), mcp.connect()].map((connect) => connect.catch((e: unknown) => e))),
        connectMs + 2000,
      );
      assert.ok(Array.isArray(outcomes), `connect still pending after ${Date.now() - started} ms`);
      for (const error of outcomes) {
        assert.ok(error instanceof TimeoutError, String(error));
        assert.equal(error.ms, connectMs);
      }
      // Armed by the timeout (its window, 20 ms, may be over by now on a loaded machine).
      const { failures, cause, retryAt } = mcp.gate.state();
      assert.equal(failures, 1, 'a connect that timed out arms the gate');
      assert.ok(cause instanceof TimeoutError, 'cause instanceof TimeoutError');
      hanging = false;
      await until(retryAt);
      // A new connect: a new initialize, which the server answers.
      const client = await mcp.connect();
      assert.equal(client.getServerVersion()?.name, 'tools');
      assert.equal(mcp.gate.state().failures, 0);
    } finally {
      await mcp.close();
    }
  });
});

test('resilientMcpClient: a connect() after one timed out on an initialize that is never answered is not held by that one’s close: it connects', async () => {
  const server = sessionApp();
  // While hanging, an initialize gets no answer at all, not even headers, until the client goes.
  let hanging = true;
  const app = {
    async fetch(request: Request): Promise<Response> {
      if (hanging && request.method === 'POST' && request.headers.get('mcp-session-id') === null) {
        await request.arrayBuffer();
        await new Promise((resolve) => request.signal.addEventListener('abort', resolve, { once: true }));
        return new Response('late', { status: 503 });
      }
      return server.fetch(request);
    },
  };
  // Room for the connect that succeeds on a loaded machine; closing may wait far longer.
  const connectMs = 1000;
  await withApp(app, async ({ origin }) => {
    // The SDKs' code loaded and compiled outside the timed connects (over a second on a loaded machine).
    hanging = false;
    const warm = new Client({ name: 'breakwater-test', version: '1.0.0' });
    await warm.connect(new StreamableHTTPClientTransport(new URL(`${origin}/mcp`)));
    await warm.close();
    await server.forget();
    hanging = true;
    const mcp = resilient(origin, [], {}, { connectTimeoutMs: connectMs, closeTimeoutMs: 3 * connectMs });
    try {
      await assert.rejects(mcp.connect(), TimeoutError);
      hanging = false;
      await until(mcp.gate.state().retryAt);
      // The timed-out initialize is given up: nothing is left to wait for before this connect.
      const client = await mcp.connect();
      assert.equal(client.getServerVersion()?.name, 'sessions');
      assert.equal(server.sessions.size, 1);
      assert.equal(mcp.gate.state().failures, 0);
    } finally {
      await mcp.close();
      await server.forget();
    }
  });
});

/** 256 KiB: the maxResponseBytes the answers of {@link whileFlooding} are held to. */
const FLOOD_LIMIT = 256 * 1024;

/** How an endless answer to the `flood` call starts, by its content type: a result, or an SSE event, whose text never ends. */
const FLOOD_HEADS = {
  'application/json': '{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"',
  'text/event-stream': 'event: message\ndata: {"jsonrpc":"2.0","id":2,"result":{"content":"',
} as const;

/**
 * Serves {@link answering} a `flood` call with an answer of `contentType` that never
 * ends (its {@link FLOOD_HEADS} head, then `x` on and on) for `fn`; once `fn` is done
 * (its client closed), the server must have stopped being read, far short of where a
 * flood stops ({@link FLOOD_BYTES}).
 */
async function whileFlooding(
  contentType: keyof typeof FLOOD_HEADS,
  fn: (origin: string) => Promise<void>,
): Promise<void> {
  const endless = flood(FLOOD_HEADS[contentType], 'x', { 'content-type': contentType });
  await withApp(answering('flood', endless.answer), async ({ origin }) => {
    await fn(origin);
    assert.ok(endless.produced() < FLOOD_BYTES / 2, `server produced ${endless.produced()} bytes`);
  });
}

/** {@link withClient} for server "tools", without retries or breaker, held to {@link FLOOD_LIMIT}. */
function withLimitedClient(
  origin: string,
  fn: (client: Client, fetch: ReturnType<typeof mcpFetch>) => Promise<void>,
): Promise<void> {
  return withClient(origin, { name: 'tools', retry: false, breaker: false }, fn, {
    maxResponseBytes: FLOOD_LIMIT,
  });
}

test('an answer that never ends fails the call past maxResponseBytes with RESPONSE_TOO_LARGE, and the server stops being read', async () => {
  await whileFlooding('application/json', async (origin) => {
    await withLimitedClient(origin, async (client, fetch) => {
      const caught = await client.callTool({ name: 'flood', arguments: {} }).catch((e: unknown) => e);
      assert.ok(caught instanceof BreakwaterError, String(caught).slice(0, 300));
      assert.equal(caught.code, 'RESPONSE_TOO_LARGE');
      assert.match(
        caught.message,
        new RegExp(
          `^POST ${origin}/mcp \\(server "tools"\\) failed: the response body is over the ${FLOOD_LIMIT}-byte limit \\(maxResponseBytes\\)$`,
        ),
      );
      assert.equal(fetch.toError(caught), caught);
    });
  });
});

test('resilientMcpClient: an answer that never ends fails the call with RESPONSE_TOO_LARGE', async () => {
  await whileFlooding('application/json', async (origin) => {
    const mcp = resilient(origin, [], { retry: false }, { maxResponseBytes: FLOOD_LIMIT });
    try {
      const client = await mcp.connect();
      const caught = await client.callTool({ name: 'flood', arguments: {} }).catch((e: unknown) => e);
      assert.ok(caught instanceof BreakwaterError, String(caught).slice(0, 300));
      assert.equal(caught.code, 'RESPONSE_TOO_LARGE');
    } finally {
      await mcp.close();
    }
  });
});

/** Whether `error` is the SDK's McpError for a request whose SSE answer breakwater cut past `limit`. */
function cutAnswer(error: unknown, limit: number): boolean {
  return (
    error instanceof McpError &&
    error.code === -32000 &&
    /^MCP error -32000: breakwater: POST .* failed: an event of the response stream is over the \d+-byte limit \(maxResponseBytes\)$/.test(
      error.message,
    ) &&
    error.message.includes(`${limit}-byte`) &&
    JSON.stringify(error.data) === JSON.stringify({ code: 'RESPONSE_TOO_LARGE', maxResponseBytes: limit })
  );
}

test('an SSE answer whose event never ends fails the call at once past maxResponseBytes, with an error naming RESPONSE_TOO_LARGE, and the server stops being read', async () => {
  await whileFlooding('text/event-stream', async (origin) => {
    await withLimitedClient(origin, async (client) => {
      const reported: unknown[] = [];
      client.onerror = (error) => reported.push(error);
      const started = performance.now();
      // The SDK's own timeout (3 s here, 60 s by default) only keeps a hang from hanging the suite.
      const caught = await client
        .callTool({ name: 'flood', arguments: {} }, undefined, { timeout: 3000 })
        .catch((e: unknown) => e);
      const ms = performance.now() - started;
      assert.ok(cutAnswer(caught, FLOOD_LIMIT), String(caught).slice(0, 300));
      assert.ok(ms < 1000, `failed after ${Math.round(ms)} ms`);
      // The stream ended cleanly: no broken stream for the SDK to report, nor to reconnect for.
      assert.deepEqual(reported.map(String), []);
    });
  });
});

test('resilientMcpClient: an SSE answer whose event never ends fails the call at once with an error naming RESPONSE_TOO_LARGE', async () => {
  await whileFlooding('text/event-stream', async (origin) => {
    const mcp = resilient(origin, [], { retry: false }, { maxResponseBytes: FLOOD_LIMIT });
    try {
      const client = await mcp.connect();
      const started = performance.now();
      const caught = await client
        .callTool({ name: 'flood', arguments: {} }, undefined, { timeout: 3000 })
        .catch((e: unknown) => e);
      assert.ok(cutAnswer(caught, FLOOD_LIMIT), String(caught).slice(0, 300));
      assert.ok(performance.now() - started < 1000, 'performance.now() - started < 1000');
    } finally {
      await mcp.close();
    }
  });
});

test('toError() turns the McpError of an SSE answer cut past maxResponseBytes into the BreakwaterError a JSON answer fails with', async () => {
  await whileFlooding('text/event-stream', async (origin) => {
    await withLimitedClient(origin, async (client, fetch) => {
      const caught = await client
        .callTool({ name: 'flood', arguments: {} }, undefined, { timeout: 3000 })
        .catch((e: unknown) => e);
      assert.ok(cutAnswer(caught, FLOOD_LIMIT), String(caught).slice(0, 300));
      const error = fetch.toError(caught);
      assert.ok(error instanceof BreakwaterError, String(error));
      assert.equal(error.code, 'RESPONSE_TOO_LARGE');
      assert.equal(
        error.message,
        `POST ${origin}/mcp (server "tools") failed: an event of the response stream is over the ${FLOOD_LIMIT}-byte limit (maxResponseBytes)`,
      );
      assert.deepEqual(error.request, { key: 'tools', method: 'POST', url: `${origin}/mcp` });
    });
  });
});

test('toError() leaves a server’s own McpError alone, even one that reads like a cut answer', () => {
  const fetch = mcpFetch(definePolicy({ name: 'tools' }), { maxResponseBytes: FLOOD_LIMIT });
  const error = new McpError(
    -32000,
    `breakwater: POST http://127.0.0.1:1/mcp (server "tools") failed: an event of the response stream is over the ${FLOOD_LIMIT}-byte limit (maxResponseBytes)`,
    { code: 'RESPONSE_TOO_LARGE', maxResponseBytes: FLOOD_LIMIT },
  );
  assert.equal(fetch.toError(error), error);
});

test('resilientMcpClient: a connect whose initialize answer is an SSE event cut past maxResponseBytes fails at once with the BreakwaterError RESPONSE_TOO_LARGE', async () => {
  const endless = flood('event: message\ndata: {"jsonrpc":"2.0","id":0,"result":{"serverInfo":"', 'x', {
    'content-type': 'text/event-stream',
  });
  await withApp(answeringPosts(faultyApp({}), '"initialize"', endless.answer), async ({ origin }) => {
    const mcp = resilient(origin, [], { retry: false }, { maxResponseBytes: FLOOD_LIMIT });
    try {
      // Well within the connect timeout (60 s): a connect that waited for it would be 'hung'.
      const caught = await settledWithin(
        mcp.connect().catch((e: unknown) => e),
        3000,
      );
      assert.ok(caught instanceof BreakwaterError, String(caught).slice(0, 300));
      assert.equal(caught.code, 'RESPONSE_TOO_LARGE');
    } finally {
      await mcp.close();
    }
    assert.ok(endless.produced() < FLOOD_BYTES / 2, `server produced ${endless.produced()} bytes`);
  });
});

test('an SSE event cut past maxResponseBytes is never delivered, even when what arrived of it is a whole answer', async () => {
  // The answer's one data line is whole; comment lines then keep its event from ever ending.
  const head = 'event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{"content":[]}}\n';
  const endless = flood(head, ': still going\n', { 'content-type': 'text/event-stream' });
  await withApp(answering('flood', endless.answer), async ({ origin }) => {
    await withLimitedClient(origin, async (client) => {
      const caught = await client
        .callTool({ name: 'flood', arguments: {} }, undefined, { timeout: 3000 })
        .catch((e: unknown) => e);
      assert.ok(cutAnswer(caught, FLOOD_LIMIT), String(caught).slice(0, 300));
    });
    assert.ok(endless.produced() < FLOOD_BYTES / 2, `server produced ${endless.produced()} bytes`);
  });
});

test('a cut SSE answer ends with one JSON-RPC error per request of the batch it answers, none for a notification, and the cut event is never delivered', async () => {
  // What arrives of the cut event: a line cut short, or an answer whole but for the
  // event's blank line, comment lines then keeping it open (LF, CR or CRLF line ends; as
  // the reads split them, the last byte handed on may end a line or not).
  const answer = 'data: {"jsonrpc":"2.0","id":1,"result":{}}';
  for (const [head, fill] of [
    ['data: {"jsonrpc":"2.0","id":1,"result":{"content":"', 'x'],
    [`${answer}\n`, ': x\n'],
    [`${answer}\r`, ': x\r'],
    [`${answer}\r\n`, ': x\r\n'],
  ] as const) {
    const endless = flood(`event: message\n${head}`, fill, { 'content-type': 'text/event-stream' });
    const app = {
      async fetch(request: Request): Promise<Response> {
        await request.text();
        return endless.answer();
      },
    };
    await withApp(app, async ({ origin }) => {
      const fetch = mcpFetch(definePolicy({ name: 'tools', retry: false }), {
        maxResponseBytes: FLOOD_LIMIT,
      });
      const transport = new StreamableHTTPClientTransport(new URL(`${origin}/mcp`), { fetch });
      const messages: unknown[] = [];
      const reported: unknown[] = [];
      let arrived: () => void = () => {};
      const both = new Promise<void>((resolve) => {
        arrived = resolve;
      });
      transport.onmessage = (message) => {
        if (messages.push(message) === 2) arrived();
      };
      transport.onerror = (error) => reported.push(error);
      await transport.start();
      try {
        await transport.send([
          { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'a' } },
          { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 1, progress: 1 } },
          { jsonrpc: '2.0', id: 'b', method: 'ping' },
        ] as never);
        await settledWithin(both, 2000);
        // Anything more (the cut event, an error) would come right after.
        await new Promise((resolve) => setTimeout(resolve, 50));
      } finally {
        await transport.close();
      }
      const said = `${JSON.stringify(fill)}: ${JSON.stringify(messages).slice(0, 400)} ${reported.map(String)}`;
      const error = (id: number | string) => ({
        jsonrpc: '2.0',
        id,
        error: {
          code: -32000,
          message: `breakwater: POST ${origin}/mcp (server "tools") failed: an event of the response stream is over the ${FLOOD_LIMIT}-byte limit (maxResponseBytes)`,
          data: { code: 'RESPONSE_TOO_LARGE', maxResponseBytes: FLOOD_LIMIT },
        },
      });
      assert.deepEqual(messages, [error(1), error('b')], said);
      assert.deepEqual(reported.map(String), [], said);
      assert.ok(endless.produced() < FLOOD_BYTES / 2, said);
    });
  }
});

/**
 * An event store that replays a stream's events in the order they were stored. (The
 * SDK's example store sorts by id, whose time part is in ms: two events of one ms replay
 * in random order, a priming event after the answer it primed.)
 */
function orderedEventStore(): EventStore {
  const events: { id: string; stream: string; message: unknown }[] = [];
  return {
    async storeEvent(stream, message) {
      const id = String(events.length);
      events.push({ id, stream, message });
      return id;
    },
    async replayEventsAfter(lastEventId, { send }) {
      const after = events[Number(lastEventId)];
      if (!after) throw new Error(`no event ${lastEventId}`);
      for (const event of events.slice(Number(lastEventId) + 1)) {
        if (event.stream === after.stream) await send(event.id, event.message as never);
      }
      return after.stream;
    },
  };
}

test('the events a cut read ends whole still arrive, before the error answers: a notification just ahead of the oversized event', async () => {
  const LIMIT = 1024;
  const note =
    '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"working"}}';
  // Read at once with the fill, past the limit: the cut read holds the notification whole.
  const endless = flood(`event: message\ndata: ${note}\n\nevent: message\ndata: {"`, 'x', {
    'content-type': 'text/event-stream',
  });
  const app = {
    async fetch(request: Request): Promise<Response> {
      await request.text();
      return endless.answer();
    },
  };
  await withApp(app, async ({ origin }) => {
    const fetch = mcpFetch(definePolicy({ name: 'tools', retry: false }), { maxResponseBytes: LIMIT });
    const response = await fetch(`${origin}/mcp`, {
      method: 'POST',
      body: '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a"}}',
      headers: { accept: 'application/json, text/event-stream' },
    });
    const text = await response.text();
    // The `message` events, as an SSE parser reads them (this stream has LF line ends only).
    const data = text
      .split('\n\n')
      .map((event) => event.split('\n'))
      .filter((lines) => lines.filter((line) => line.startsWith('event: ')).pop() === 'event: message')
      .map((lines) => JSON.parse(lines.find((line) => line.startsWith('data: '))?.slice(6) ?? ''));
    assert.deepEqual(
      data.map((message) => message.method ?? [message.id, message.error?.data?.code]),
      ['notifications/message', [7, 'RESPONSE_TOO_LARGE']],
      text.slice(0, 300),
    );
  });
});

test('a cut SSE answer on a resumable stream fails the call at once; the SDK then resumes past the refused event, which is neither replayed nor run again', async () => {
  // A real stateful server with an event store: its SSE events carry ids, so the SDK
  // resumes a POST's stream with a GET and Last-Event-ID after any error answer.
  let runs = 0;
  const server = new McpServer({ name: 'tools', version: '1.0.0' });
  server.registerTool('big', { description: 'big' }, async () => {
    runs++;
    return { content: [{ type: 'text' as const, text: 'z'.repeat(4 * FLOOD_LIMIT) }] };
  });
  const transport = new WebStandardStreamableHTTPServerTransport({
    sessionIdGenerator: () => crypto.randomUUID(),
    eventStore: orderedEventStore(),
    retryInterval: 10,
  });
  await server.connect(transport);
  let resumed: () => void = () => {};
  const resume = new Promise<void>((resolve) => {
    resumed = resolve;
  });
  const app = {
    fetch(request: Request): Promise<Response> {
      if (request.headers.has('last-event-id')) resumed();
      return transport.handleRequest(request);
    },
  };
  try {
    await withApp(app, async ({ origin }) => {
      await withLimitedClient(origin, async (client) => {
        const reported: unknown[] = [];
        client.onerror = (error) => reported.push(error);
        const started = performance.now();
        const caught = await client
          .callTool({ name: 'big', arguments: {} }, undefined, { timeout: 3000 })
          .catch((e: unknown) => e);
        assert.ok(cutAnswer(caught, FLOOD_LIMIT), String(caught).slice(0, 300));
        assert.ok(performance.now() - started < 1000, 'performance.now() - started < 1000');
        assert.notEqual(await settledWithin(resume, 1000), 'hung', 'the SDK did not resume');
        // A replayed event would come right after the resume.
        await new Promise((resolve) => setTimeout(resolve, 100));
        assert.equal(runs, 1);
        assert.deepEqual(reported.map(String), []);
      });
    });
  } finally {
    await server.close();
  }
});

test('a cut SSE answer to a GET (the server’s own stream), which answers no request, still fails with RESPONSE_TOO_LARGE', async () => {
  const LIMIT = 1024;
  const endless = flood('event: message\ndata: ', 'y', { 'content-type': 'text/event-stream' });
  await withApp({ fetch: endless.answer }, async ({ origin }) => {
    const fetch = mcpFetch(definePolicy({ name: 'tools', retry: false }), { maxResponseBytes: LIMIT });
    const response = await fetch(`${origin}/mcp`, { headers: { accept: 'text/event-stream' } });
    const caught = await response.text().catch((e: unknown) => e);
    assert.ok(caught instanceof BreakwaterError && caught.code === 'RESPONSE_TOO_LARGE', String(caught));
  });
});

/**
 * Serves every POST an SSE answer that starts with `text` and never goes on, and records
 * the Last-Event-ID of each GET (the SDK resuming the stream), which it answers 405.
 */
function resumable(text: string): { app: { fetch(request: Request): Promise<Response> }; resumed: string[] } {
  const resumed: string[] = [];
  const app = {
    async fetch(request: Request): Promise<Response> {
      if (request.method !== 'POST') {
        resumed.push(String(request.headers.get('last-event-id')));
        return new Response(null, { status: 405 });
      }
      await request.text();
      const body = new ReadableStream<Uint8Array>({
        start: (controller) => controller.enqueue(new TextEncoder().encode(text)),
        pull: () => new Promise(() => {}),
      });
      return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
    },
  };
  return { app, resumed };
}

/**
 * An SSE event whose `line` the cut at `limit` bytes falls in, after its first `kept`
 * characters: a data line fills the event up to there.
 */
function cutIn(line: string, kept: number, limit: number): string {
  const head = 'event: message\ndata: ';
  return `${head}${'y'.repeat(limit - head.length - 1 - kept)}\n${line}\n`;
}

/**
 * Sends one tools/call through a transport on `origin` held to `limit`; gives the
 * `data.code` of its answer and the resumption tokens the SDK took, `waitMs` later.
 */
async function sendCut(
  origin: string,
  limit: number,
  waitMs: number,
): Promise<{ tokens: string[]; code: unknown }> {
  const fetch = mcpFetch(definePolicy({ name: 'tools', retry: false }), { maxResponseBytes: limit });
  // Resumes 10 ms after the stream ends, unless the server said otherwise (`retry:`).
  const transport = reconnectingTransport(origin, fetch, 10);
  const tokens: string[] = [];
  let code: unknown;
  let answered: () => void = () => {};
  const answer = new Promise<void>((resolve) => {
    answered = resolve;
  });
  transport.onmessage = (message) => {
    code = (message as { error?: { data?: { code?: unknown } } }).error?.data?.code;
    answered();
  };
  await transport.start();
  try {
    await transport.send({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'a' } } as never, {
      onresumptiontoken: (token: string) => tokens.push(token),
    });
    await settledWithin(answer, 2000);
    await new Promise((resolve) => setTimeout(resolve, waitMs));
  } finally {
    await transport.close();
  }
  return { tokens, code };
}

test('a cut that falls inside an SSE event’s id line hands the SDK no part of the id: it resumes from the last whole id', async () => {
  const LIMIT = 1024;
  // Cut after "id: 42" of "id: 4242": a whole line "id: 42" would name another event.
  const { app, resumed } = resumable(`id: 41\ndata: \n\n${cutIn('id: 4242', 'id: 42'.length, LIMIT)}`);
  await withApp(app, async ({ origin }) => {
    const { tokens, code } = await sendCut(origin, LIMIT, 200);
    assert.equal(code, 'RESPONSE_TOO_LARGE');
    assert.deepEqual(tokens, ['41']);
    assert.deepEqual(resumed, ['41']);
  });
});

test('a cut that falls inside an SSE event’s retry line does not set the SDK’s reconnection delay to what arrived of it', async () => {
  const LIMIT = 1024;
  // The server asks for 60 s between reconnections; the cut leaves "retry: 6" of its next "retry: 60000".
  const { app, resumed } = resumable(
    `id: 41\nretry: 60000\ndata: \n\n${cutIn('retry: 60000', 'retry: 6'.length, LIMIT)}`,
  );
  await withApp(app, async ({ origin }) => {
    const { code } = await sendCut(origin, LIMIT, 300);
    assert.equal(code, 'RESPONSE_TOO_LARGE');
    assert.deepEqual(resumed, [], 'the SDK resumed 6 ms after the stream ended, not 60 s');
  });
});

test('an SSE answer far longer than maxResponseBytes, of events within it (progress notifications), streams through whole', async () => {
  const seen = counts();
  const build = () => {
    const server = new McpServer({ name: 'progress', version: '1.0.0' });
    server.registerTool('report', { description: 'report' }, async (extra) => {
      const progressToken = extra._meta?.progressToken as string | number;
      for (let progress = 1; progress <= 40; progress++) {
        await extra.sendNotification({
          method: 'notifications/progress',
          params: { progressToken, progress, total: 40, message: 'p'.repeat(1000) },
        });
      }
      return { content: [{ type: 'text' as const, text: 'reported' }] };
    });
    return server;
  };
  await withApp(mcpApp(seen, undefined, build, { sse: true }), async ({ origin }) => {
    // 40 events of about 1.1 KB each: a stream 20 times the limit, no event over it.
    await withClient(
      origin,
      { retry: false },
      async (client) => {
        const progress: number[] = [];
        const result = await client.callTool({ name: 'report', arguments: {} }, undefined, {
          onprogress: (p) => progress.push(p.progress),
        });
        assert.deepEqual(result.content, [{ type: 'text', text: 'reported' }]);
        assert.equal(progress.length, 40);
      },
      { maxResponseBytes: 2048 },
    );
  });
});

test('maxResponseBytes must be a whole number of bytes above 0, or Infinity', () => {
  for (const bad of [0, -1, 1.5, Number.NaN, '1024', null]) {
    assert.throws(
      () => mcpFetch(definePolicy(), { maxResponseBytes: bad } as never),
      /mcpFetch\(\)\.maxResponseBytes: must be a whole number of bytes above 0, or Infinity/,
      String(bad),
    );
  }
  assert.equal(typeof mcpFetch(definePolicy(), { maxResponseBytes: Infinity }), 'function');
});

test('an SSE answer whose connection breaks mid-way is reported to the SDK as a NetworkError naming the request, not the runtime’s raw error', async () => {
  const progress = {
    jsonrpc: '2.0',
    method: 'notifications/progress',
    params: { progressToken: 1, progress: 1 },
  };
  await withServer(
    // The server's connection drops while its answer stream is open.
    () => ({
      reset: 'mid-body',
      headers: { 'content-type': 'text/event-stream' },
      body: `event: message\ndata: ${JSON.stringify(progress)}\n\n`,
    }),
    async ({ origin }) => {
      const fetch = mcpFetch(definePolicy({ name: 'tools', retry: false }));
      const transport = new StreamableHTTPClientTransport(new URL(`${origin}/mcp?token=secret`), { fetch });
      let reported: (error: Error) => void = () => {};
      const report = new Promise<Error>((resolve) => {
        reported = resolve;
      });
      transport.onerror = reported;
      await transport.start();
      try {
        await transport.send({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'a' } } as never);
        const error = await settledWithin(report, 2000);
        // The SDK reports a broken stream in a message of its own: `SSE stream disconnected: ${error}`.
        // Node and Bun say the peer reset the connection; Deno says only `error reading a body from connection`.
        assert.match(
          String(error),
          /^Error: SSE stream disconnected: NetworkError: POST http:\/\/127\.0\.0\.1:\d+\/mcp\?token=\S+ \(server "tools"\) failed: network error (?:ECONNRESET|ENETWORK) during response \(may have reached the server\)$/,
        );
        assert.doesNotMatch(String(error), /secret/);
      } finally {
        await transport.close();
      }
    },
  );
});

test('a JSON answer whose connection breaks mid-way fails the request with a NetworkError in the response phase, maybe sent, not the runtime’s raw error', async () => {
  await withServer(
    always({
      reset: 'mid-body',
      headers: { 'content-type': 'application/json' },
      body: '{"jsonrpc":"2.0","id":1,',
    }),
    async ({ origin }) => {
      const fetch = mcpFetch(definePolicy({ name: 'tools', retry: false }));
      const transport = new StreamableHTTPClientTransport(new URL(`${origin}/mcp`), { fetch });
      await transport.start();
      try {
        const error = await transport
          .send({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'a' } } as never)
          .catch((e: unknown) => e);
        assertBrokenAnswer(error, '/mcp', 'tools');
      } finally {
        await transport.close();
      }
    },
  );
});

/**
 * Connects a `resilient()` client with `options` (the policy's default retry), stops its
 * server, and closes it: close() must resolve well before closeTimeoutMs, its DELETE tried once.
 */
async function assertClosesOnceWhenDown(options: Parameters<typeof resilient>[3] = {}): Promise<void> {
  // The policy's default retry (500 ms backoff) would resend a refused DELETE (a refused
  // connect counts as not sent) until closeTimeoutMs (2 s) let it go.
  const server = sessionApp();
  let attempts = 0;
  const counting: FetchLike = (input, init) => {
    if (init?.method === 'DELETE') attempts++;
    return fetch(input, init);
  };
  let mcp: ReturnType<typeof resilient> | undefined;
  try {
    await withApp(server, async ({ origin }) => {
      mcp = resilient(origin, [], { retry: {} }, { ...options, fetch: counting });
      await mcp.connect();
    });
    // The server is gone now: its port refuses.
    const started = performance.now();
    assert.equal(await settledWithin((mcp as ReturnType<typeof resilient>).close(), 3_000), undefined);
    const elapsed = performance.now() - started;
    assert.ok(elapsed < 500, `close() took ${Math.round(elapsed)} ms`);
    assert.equal(attempts, 1, 'the DELETE was not tried exactly once');
  } finally {
    await mcp?.close();
    await server.forget();
  }
}

test('resilientMcpClient: close() against a server that is down sends the DELETE once and resolves well before closeTimeoutMs', async () => {
  await assertClosesOnceWhenDown();
});

test('resilientMcpClient: with the auth option, close() against a server that is down sends the DELETE once and resolves well before closeTimeoutMs', async () => {
  await assertClosesOnceWhenDown({ auth: { token: 'sk-close-2' } });
});

/** Calls {@link slowWipe}'s tool, cancels it 50 ms in, and waits until its run is over. */
async function cancelWipe(client: Client): Promise<void> {
  const cancel = new AbortController();
  const call = client.callTool({ name: 'wipe', arguments: {} }, undefined, { signal: cancel.signal });
  await new Promise((resolve) => setTimeout(resolve, 50));
  cancel.abort(new Error('stop the wipe'));
  await assert.rejects(call, /stop the wipe/);
  await new Promise((resolve) => setTimeout(resolve, 400));
}

/** An MCP server with one tool, `wipe`, that takes 300 ms: a call to cancel while it runs. */
function slowWipe(): McpServer {
  const server = new McpServer({ name: 'slow', version: '1.0.0' });
  server.registerTool('wipe', { description: 'wipe' }, async () => {
    await new Promise((resolve) => setTimeout(resolve, 300));
    return { content: [{ type: 'text' as const, text: 'wiped' }] };
  });
  return server;
}

test('resilientMcpClient: with the auth option, a cancellation answered 401 for the token it carried goes again through the policy, which refreshes it: the server hears it with the new token', async () => {
  const seen = counts();
  const inner = mcpApp(seen, undefined, slowWipe);
  // The old token expires once the call is sent.
  let expired = false;
  const cancellations: (string | null)[] = [];
  const app = {
    async fetch(request: Request): Promise<Response> {
      const text = await request.clone().text();
      const authorization = request.headers.get('authorization');
      if (text.includes('notifications/cancelled')) cancellations.push(authorization);
      if (expired && authorization !== 'Bearer sk-new') return new Response(null, { status: 401 });
      if (text.includes('tools/call')) expired = true;
      return inner.fetch(request);
    },
  };
  await withApp(app, async ({ origin }) => {
    const mcp = resilient(origin, [], {}, { auth: { token: 'sk-old', refresh: () => 'sk-new' } });
    try {
      await cancelWipe(await mcp.connect());
      // Its old token's 401 said nothing yet to the policy's auth(), which sends it once more first.
      assert.equal(cancellations[0], 'Bearer sk-old');
      assert.equal(cancellations.at(-1), 'Bearer sk-new');
      assert.equal(seen.posts['notifications/cancelled'], 1, 'the server heard it once');
    } finally {
      await mcp.close();
    }
  });
});

test('mcpFetch() with the auth option: a cancellation carries the token auth() stamped, never the Basic client credentials a token() request sent through the same fetch', async () => {
  const seen = counts();
  const inner = mcpApp(seen, undefined, slowWipe);
  const basic = `Basic ${btoa('client:s3cret-client')}`;
  const cancellations: (string | null)[] = [];
  const cancel = new AbortController();
  let armed = false;
  const app = {
    async fetch(request: Request): Promise<Response> {
      if (new URL(request.url).pathname === '/token') {
        // Once armed: the call is cancelled just after this token request is answered,
        // while the request it was asked for is still on its way.
        if (armed) setTimeout(() => cancel.abort(new Error('stop the wipe')), 20);
        return Response.json({ token: 'sk-fresh' });
      }
      const text = await request.clone().text();
      if (text.includes('notifications/cancelled')) cancellations.push(request.headers.get('authorization'));
      else if (armed) await new Promise((resolve) => setTimeout(resolve, 200));
      return inner.fetch(request);
    },
  };
  await withApp(app, async ({ origin }) => {
    // token() asks the token endpoint through this same fetch, with the client's own
    // credentials, before each request.
    const fetch: FetchLike = mcpFetch(definePolicy({ name: 'tools', retry: { backoff: fast } }), {
      auth: {
        token: () =>
          fetch(`${origin}/token`, { method: 'POST', headers: { authorization: basic } })
            .then((res) => res.json())
            .then((body) => (body as { token: string }).token),
      },
    });
    const client = await sdkClient(`${origin}/mcp`, fetch);
    try {
      const call = client.callTool({ name: 'wipe', arguments: {} }, undefined, { signal: cancel.signal });
      await new Promise((resolve) => setTimeout(resolve, 50));
      armed = true;
      const listing = client.listTools().catch(() => undefined);
      await assert.rejects(call, /stop the wipe/);
      await new Promise((resolve) => setTimeout(resolve, 400));
      await listing;
      assert.deepEqual(cancellations, ['Bearer sk-fresh']);
    } finally {
      await client.close();
    }
  });
});

test('resilientMcpClient: with the auth option, close() stamps the policy’s token on the DELETE', async () => {
  const server = sessionApp();
  const stamped: (string | null)[] = [];
  const app = {
    fetch(request: Request): Promise<Response> {
      if (request.method === 'DELETE') stamped.push(request.headers.get('authorization'));
      return server.fetch(request);
    },
  };
  await withResilient(app, server, { auth: { token: 'sk-close-1' } }, async (mcp) => {
    await mcp.connect();
    await mcp.close();
    assert.deepEqual(stamped, ['Bearer sk-close-1']);
  });
});

/**
 * A resilientMcpClient (with the policy's `auth`) whose transport hands its fetch every init
 * with its members inherited, as a hand-written transport's class instance (getters on a
 * prototype) or `Object.create(init)` has them: a spread of it keeps none.
 */
function inheritedInits(origin: string, token: string) {
  return resilientMcpClient({
    client: new Client({ name: 'breakwater-test', version: '1.0.0' }),
    transport: (fetch: FetchLike) =>
      new StreamableHTTPClientTransport(new URL(`${origin}/mcp`), {
        fetch: (input, init) => fetch(input, init && (Object.create(init) as RequestInit)),
      }),
    policy: definePolicy({ name: 'tools', retry: { backoff: fast } }),
    gate: createGate({ key: 'tools', schedule: quickGate }),
    auth: { token },
  });
}

test('resilientMcpClient: with the auth option, close() sends a transport’s init whose members are inherited as the DELETE it is, with the token: the server ends the session', async () => {
  const server = sessionApp();
  const deletes: (string | null)[] = [];
  const app = {
    fetch(request: Request): Promise<Response> {
      if (request.method === 'DELETE') deletes.push(request.headers.get('authorization'));
      return server.fetch(request);
    },
  };
  await withApp(app, async ({ origin }) => {
    const mcp = inheritedInits(origin, 'sk-close-3');
    try {
      await assertEchoes(await mcp.connect());
      assert.equal(server.sessions.size, 1);
      await mcp.close();
      assert.deepEqual(deletes, ['Bearer sk-close-3']);
      assert.equal(server.sessions.size, 0, 'the server ended the session');
    } finally {
      await mcp.close();
      await server.forget();
    }
  });
});

test('resilientMcpClient: with the auth option, a cancellation whose init’s members are inherited reaches the server as the POST it is, body and token included', async () => {
  const seen = counts();
  const inner = mcpApp(seen, undefined, slowWipe);
  const cancellations: (string | null)[] = [];
  const app = {
    async fetch(request: Request): Promise<Response> {
      if ((await request.clone().text()).includes('notifications/cancelled'))
        cancellations.push(request.headers.get('authorization'));
      return inner.fetch(request);
    },
  };
  await withApp(app, async ({ origin }) => {
    const mcp = inheritedInits(origin, 'sk-cancel-3');
    try {
      await cancelWipe(await mcp.connect());
      assert.deepEqual(cancellations, ['Bearer sk-cancel-3']);
      assert.equal(seen.posts['notifications/cancelled'], 1, 'the server heard it once');
    } finally {
      await mcp.close();
    }
  });
});

test('resilientMcpClient: a tools/call waiting out a 429 when close() begins is not sent again while the DELETE is awaited', async () => {
  const echo: Echo = { annotations: {}, runs: 0, failNext: false };
  const sessions = sessionApp(echo);
  let calls = 0;
  const app = {
    async fetch(request: Request): Promise<Response> {
      if (request.method === 'DELETE') await new Promise((resolve) => setTimeout(resolve, 600));
      else if (
        request.method === 'POST' &&
        (await request.clone().text()).includes('tools/call') &&
        ++calls === 1
      )
        return new Response('slow down', { status: 429, headers: { 'retry-after-ms': '200' } });
      return sessions.fetch(request);
    },
  };
  await withResilient(app, sessions, {}, async (mcp) => {
    const client = await mcp.connect();
    const call = client.callTool({ name: 'echo', arguments: {} }).catch((error: unknown) => error);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await mcp.close();
    await call;
    assert.equal(calls, 1, 'the call was not sent again after close() began');
    assert.equal(echo.runs, 0);
  });
});

test('resilientMcpClient: a transport that replaces its abort signal (the SSE transport after a 401) still has its calls ended by close()', async () => {
  const seen = await slowedAdd((origin) =>
    closing(resilient(origin), async (mcp) => {
      const client = await mcp.connect();
      await client.callTool({ name: 'lookup', arguments: {} });
      // As SSEClientTransport's _startOrAuth() does when it authenticates again.
      (mcp.transport as unknown as { _abortController: AbortController })._abortController =
        new AbortController();
      const call = client.callTool({ name: 'add', arguments: {} }).catch((error: unknown) => error);
      await new Promise((resolve) => setTimeout(resolve, 50));
      await mcp.close();
      await call;
      await pastDelay();
    }),
  );
  assert.equal(seen.posts['tools/call:add'], 1, 'the call was not sent again after close()');
  assert.equal(seen.runs.add, undefined);
});

test('resilientMcpClient: a cancellation the server redirects within its origin (/mcp to /mcp/) is followed there and reaches it', async () => {
  const redirecting = (tools: FetchApp): FetchApp => ({
    async fetch(request: Request): Promise<Response> {
      // As a server mounted at /mcp/ answers a path without its slash (Starlette's redirect_slashes).
      if (new URL(request.url).pathname === '/mcp') {
        await request.body?.cancel();
        return new Response(null, { status: 307, headers: { location: '/mcp/' } });
      }
      return tools.fetch(request);
    },
  });
  const seen = await slowedAdd(
    (origin) =>
      closing(resilient(origin), async (mcp) => {
        await cancelledAdd(await mcp.connect());
        // Past the 429's wait (a resend would have run the tool), and time for two requests
        // (the 307 and the cancellation it leads to) on a loaded machine: 100 ms was short.
        await pastDelay();
      }),
    { wrap: redirecting },
  );
  assert.equal(seen.posts['notifications/cancelled'], 1, 'the server was told');
  assert.equal(seen.runs.add, undefined);
});

/**
 * Connects `mcp`, cancels one tool call there, and resolves to what the client's `onerror`
 * got (the SDK reports a failed `notifications/cancelled` there), waiting up to 500 ms for one.
 */
async function cancelledCallErrors(mcp: ReturnType<typeof inProcess>): Promise<unknown[]> {
  const errors: unknown[] = [];
  const client = await mcp.connect();
  client.onerror = (error) => errors.push(error);
  const cancel = new AbortController();
  const call = client.callTool({ name: 'add', arguments: {} }, undefined, { signal: cancel.signal });
  cancel.abort(new Error('stop'));
  await assert.rejects(call, /stop/);
  for (let i = 0; i < 50 && errors.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
  return errors;
}

test('resilientMcpClient: a cancellation a browser answers with an opaque redirect (status 0) reaches the SDK as that answer, not as a RangeError', async () => {
  // A browser hides a manual redirect (the SDK asks for one): status 0, no headers, no body.
  // new Response(null, { status: 0 }) throws a RangeError, which the SDK reported instead.
  const opaque = (): Response =>
    Object.defineProperty(Response.error(), 'type', { value: 'opaqueredirect' }) as Response;
  const answer = async (_input: unknown, init?: RequestInit): Promise<Response> => {
    if (init?.method !== 'POST') return new Response(null, { status: 405 });
    const message = JSON.parse(String(init.body));
    if (message.method === 'notifications/cancelled') return opaque();
    if (message.id === undefined) return new Response(null, { status: 202 });
    return inProcessAnswer(message);
  };
  const mcp = inProcess(answer);
  try {
    const errors = await cancelledCallErrors(mcp);
    assert.ok(
      errors.some((error) => `${(error as Error).message}`.includes('Redirect not followed')),
      inspect(errors),
    );
    assert.ok(!errors.some((error) => error instanceof RangeError), inspect(errors));
  } finally {
    await mcp.close();
  }
});

test('resilientMcpClient: a cancellation and a DELETE answered with a status past 599 or a reason phrase that is not a ByteString reach the SDK as that status, not as a RangeError or TypeError', async () => {
  // What fetch gives for a server's "600 Réessayez plus tard" (Node's fetch decodes the
  // Latin-1 phrase as UTF-8); new Response() takes neither.
  const hostile = (): Response =>
    Object.defineProperties(new Response('{"error":"go away"}', { status: 500 }), {
      status: { value: 600 },
      statusText: { value: 'R\uFFFDessayez plus tard' },
    });
  const answer = async (_input: unknown, init?: RequestInit): Promise<Response> => {
    if (init?.method === 'DELETE') return hostile();
    if (init?.method !== 'POST') return new Response(null, { status: 405 });
    const message = JSON.parse(String(init.body));
    if (message.method === 'notifications/cancelled') return hostile();
    if (message.id === undefined) return new Response(null, { status: 202 });
    return inProcessAnswer(message);
  };
  const mcp = inProcess(answer);
  try {
    const errors = await cancelledCallErrors(mcp);
    await mcp.close();
    // The SDK's own errors for both, with the status: the cancellation's, then the DELETE's.
    const codes = errors.map((error) => (error as { code?: unknown }).code).filter((code) => code === 600);
    assert.equal(codes.length, 2, inspect(errors));
    assert.ok(
      !errors.some((error) => error instanceof RangeError || error instanceof TypeError),
      inspect(errors),
    );
  } finally {
    await mcp.close();
  }
});

test('resilientMcpClient: a transport whose requests carry no abort signal still has a call its caller cancels while retry waits out a 429 let go: the tool never runs', async () => {
  const unsignalled = (origin: string) =>
    resilientMcpClient({
      client: new Client({ name: 'breakwater-test', version: '1.0.0' }),
      // As a custom transport (or a fetch wrapper that builds its own init) sends them.
      transport: (fetch: FetchLike) =>
        new StreamableHTTPClientTransport(new URL(`${origin}/mcp`), {
          fetch: (input, init) => fetch(input, { ...init, signal: null }),
        }),
      policy: definePolicy({ name: 'tools', retry: { backoff: fast } }),
      gate: createGate({ key: 'tools', schedule: quickGate }),
    });
  const seen = await slowedAdd((origin) =>
    closing(unsignalled(origin), async (mcp) => {
      await cancelledAdd(await mcp.connect());
      await pastDelay();
    }),
  );
  assert.equal(seen.posts['notifications/cancelled'], 1, 'the SDK told the server');
  assert.equal(seen.posts['tools/call:add'], 1, 'the cancelled call was not sent again');
  assert.equal(seen.runs.add, undefined);
});

test('resilientMcpClient: a transport that gives each request its own signal (a per-request timeout) ends only that request when it aborts, not every other in flight', async () => {
  const answer = async (_input: unknown, init?: RequestInit): Promise<Response> => {
    if (init?.method !== 'POST') return new Response(null, { status: 405 });
    const message = JSON.parse(String(init.body));
    if (message.id === undefined) return new Response(null, { status: 202 });
    if (message.method === 'tools/call') {
      // 'slow' outlasts its request's timeout; 'quick' ends well within its own.
      const ms = message.params.name === 'slow' ? 1_000 : 250;
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(resolve, ms);
        init.signal?.addEventListener('abort', () => {
          clearTimeout(timer);
          reject(init.signal?.reason);
        });
      });
    }
    return inProcessAnswer(message);
  };
  const mcp = resilientMcpClient({
    client: new Client({ name: 'breakwater-test', version: '1.0.0' }),
    transport: (fetch: FetchLike) =>
      new StreamableHTTPClientTransport(new URL('http://127.0.0.1:9/mcp'), {
        fetch: (input, init) => {
          const own = new AbortController();
          const timer = setTimeout(
            () => own.abort(new DOMException('request timed out', 'TimeoutError')),
            300,
          );
          init?.signal?.addEventListener('abort', () => own.abort(init.signal?.reason));
          return fetch(input, { ...init, signal: own.signal }).finally(() => clearTimeout(timer));
        },
      }),
    policy: definePolicy({ name: 'tools', retry: false }),
    fetch: answer,
  });
  try {
    const client = await mcp.connect();
    const slow = client.callTool({ name: 'slow', arguments: {} }).catch((error: unknown) => error);
    await new Promise((resolve) => setTimeout(resolve, 150));
    // Sent at 150 ms, answered at 400 ms: within its own 300 ms, past the slow call's.
    const quick = await client.callTool({ name: 'quick', arguments: {} }).catch((error: unknown) => error);
    assert.deepEqual((quick as { content?: unknown }).content, [], inspect(quick));
    assert.match(String(await slow), /timed out/);
  } finally {
    await mcp.close();
  }
});

test('resilientMcpClient: a tools/call body over maxBodyChars is not parsed on its way out, and cancelled while retry waits out a 429 it is still not sent again', async () => {
  const big = 'x'.repeat(2_000_000);
  let bigPosts = 0;
  const cancelled: unknown[] = [];
  const answer = async (_input: unknown, init?: RequestInit): Promise<Response> => {
    const body = String(init?.body);
    if (body.length > big.length) {
      // Answered without parsing it here either: only the client's parses are counted.
      bigPosts++;
      if (body.includes('"slow"'))
        return new Response(null, { status: 429, headers: { 'retry-after-ms': '300' } });
      const id = Number(/"id":(\d+)\}$/.exec(body)?.[1]);
      return Response.json({ jsonrpc: '2.0', id, result: { content: [] } });
    }
    const message = JSON.parse(body);
    if (message.method === 'notifications/cancelled') cancelled.push(message.params.requestId);
    if (message.id === undefined) return new Response(null, { status: 202 });
    return inProcessAnswer(message);
  };
  const mcp = inProcess(answer);
  const parse = JSON.parse;
  let bigParses = 0;
  try {
    const client = await mcp.connect();
    JSON.parse = (text: string, reviver?: Parameters<typeof parse>[1]) => {
      if (text.length > big.length) bigParses++;
      return parse(text, reviver);
    };
    await client.callTool({ name: 'add', arguments: { big } });
    assert.equal(bigParses, 0, 'a body over maxBodyChars is not parsed');
    const cancel = new AbortController();
    const call = client.callTool({ name: 'add', arguments: { big, slow: true } }, undefined, {
      signal: cancel.signal,
    });
    setTimeout(() => cancel.abort(new Error('the user moved on')), 50);
    await assert.rejects(call, /the user moved on/);
    // Past the server's delay: a resend would have been sent by now.
    await new Promise((resolve) => setTimeout(resolve, 400));
    assert.equal(cancelled.length, 1, 'the SDK told the server');
    assert.equal(bigPosts, 2, 'the cancelled call was not sent again');
  } finally {
    JSON.parse = parse;
    await mcp.close();
  }
});

test('mcpFetch(): a tools/call its client cancels while retry waits out a 429 is not sent again, and another session’s call with the same JSON-RPC id still is', async () => {
  // Each initialize opens a session of its own, named on every later request.
  const sessions = (inner: FetchApp): FetchApp => ({
    async fetch(request: Request): Promise<Response> {
      const opening = request.headers.get('mcp-session-id') === null;
      const response = await inner.fetch(request);
      if (opening && response.ok) response.headers.set('mcp-session-id', crypto.randomUUID());
      return response;
    },
  });
  const seen = await slowedAdd((origin) => cancelledBesideWaiting(origin, ['/mcp', '/mcp']), {
    times: 2,
    wrap: sessions,
  });
  assert.equal(seen.posts['notifications/cancelled'], 1, 'the SDK told the server');
  assert.equal(seen.posts['tools/call:add'], 3, 'only the call nobody cancelled was sent again');
  assert.equal(seen.runs.add, 1);
});

test('mcpFetch(): 20,000 tool calls on one transport keep memory flat: its session-long signal keeps no call’s own abort', async () => {
  const fetch = mcpFetch(definePolicy({ name: 'tools' }), { fetch: answerAll });
  await closing(await sdkClient('http://127.0.0.1:9/mcp', fetch), async (client) => {
    const grew = await heapGrowthOf20kCalls(client);
    assert.ok(grew < 6_000_000, `heapUsed grew ${(grew / 1e6).toFixed(1)} MB`);
  });
});

test('mcpFetch(): clients of two endpoints without sessions share one fetch, their ids clashing: a cancellation lets go only of its own endpoint’s call', async () => {
  // The legacy SSE transport, too, names its session in the URL, not in a header.
  const seen = await slowedAdd((origin) => cancelledBesideWaiting(origin, ['/a/mcp', '/b/mcp']), {
    times: 2,
  });
  assert.equal(seen.posts['tools/call:add'], 3, 'only the call nobody cancelled was sent again');
  assert.equal(seen.runs.add, 1);
});

test('a notifications/cancelled that names no requestId (the SDK’s schema allows it) lets go of no request: the waiting tools/call is still sent after the 429’s wait, through mcpFetch() and resilientMcpClient', async () => {
  const seen = counts();
  const fault = { status: 429, headers: { 'retry-after-ms': '200' } };
  // Each client's call is answered 429 first, then runs.
  const faults = (what: string, nth: number) =>
    what === 'tools/call:add' && nth % 2 === 1 ? fault : undefined;
  await withApp(mcpApp(seen, faults), async ({ origin }) => {
    const fetch = mcpFetch(definePolicy({ name: 'mcp', retry: { backoff: fast } }));
    const client = await sdkClient(`${origin}/mcp`, fetch);
    const mcp = resilient(origin);
    try {
      for (const caller of [client, await mcp.connect()]) {
        const call = caller.callTool({ name: 'add', arguments: {} }).then(
          () => 'ran',
          (error: Error) => error.message,
        );
        await new Promise((resolve) => setTimeout(resolve, 50));
        await caller.notification({ method: 'notifications/cancelled', params: { reason: 'no id' } });
        assert.equal(await call, 'ran');
      }
      assert.equal(seen.posts['tools/call:add'], 4);
      assert.equal(seen.runs.add, 2);
    } finally {
      await client.close();
      await mcp.close();
    }
  });
});

/**
 * Two SDK clients of one endpoint without sessions on one `mcpFetch()` (each behind
 * `wrap`, if given), their ids clashing: the first calls a tool whose SSE answer streams
 * until the test ends and cancels it, while the second's call of `add` (the same id) waits
 * out a 429. What the second call came to: `'ran'`, or its error's message.
 */
async function cancelledWhileOtherWaits(wrap?: (fetch: FetchLike) => FetchLike): Promise<string> {
  const seen = counts();
  let release = () => {};
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  const build = () => {
    const server = fourTools(seen);
    // Runs until the test is over: its answer's SSE stream stays open meanwhile.
    server.registerTool('slow', { description: 'slow' }, async () => {
      await released;
      return { content: [{ type: 'text' as const, text: 'slow ran' }] };
    });
    return server;
  };
  let outcome = '';
  await withApp(
    mcpApp(seen, failFirst('tools/call:add', SLOW_DOWN), build, { sse: true }),
    async ({ origin }) => {
      const fetch = mcpFetch(definePolicy({ name: 'mcp', retry: { backoff: fast } }));
      const [cancelling, waiting] = [
        await sdkClient(`${origin}/mcp`, wrap?.(fetch) ?? fetch),
        await sdkClient(`${origin}/mcp`, wrap?.(fetch) ?? fetch),
      ];
      try {
        const stop = new AbortController();
        // Each client's first call: both id 1. The slow call's POST is answered (an SSE stream) at once.
        const slow = cancelling.callTool({ name: 'slow', arguments: {} }, undefined, { signal: stop.signal });
        const add = waiting.callTool({ name: 'add', arguments: {} }).then(
          () => 'ran',
          (error: Error) => error.message,
        );
        await new Promise((resolve) => setTimeout(resolve, 100));
        stop.abort(new Error('the user moved on'));
        await assert.rejects(slow, /the user moved on/);
        outcome = await add;
        if (outcome === 'ran') assert.equal(seen.posts['tools/call:add'], 2);
      } finally {
        release();
        await cancelling.close();
        await waiting.close();
      }
    },
  );
  return outcome;
}

/** A fetch wrapper that gives each request a signal of its own, following the one it is given (a per-request deadline, say). */
function ownSignals(fetch: FetchLike): FetchLike {
  return (input, init) => {
    const own = new AbortController();
    init?.signal?.addEventListener('abort', () => own.abort(init.signal?.reason));
    return fetch(input, { ...init, signal: own.signal });
  };
}

test('mcpFetch(): two clients of one endpoint without sessions share one fetch, their ids clashing: cancelling a call whose SSE answer already streams lets go of no other client’s call waiting out a 429', async () => {
  assert.equal(await cancelledWhileOtherWaits(), 'ran', 'the other client’s call was sent after the wait');
});

test('mcpFetch(): two clients of one endpoint without sessions, each behind a fetch wrapper that gives every request a signal of its own, their ids clashing: cancelling a call whose SSE answer already streams lets go of no other client’s call waiting out a 429', async () => {
  assert.equal(
    await cancelledWhileOtherWaits(ownSignals),
    'ran',
    'the other client’s call was sent after the wait',
  );
});

test('resilientMcpClient: 20 tool calls with bodies over maxBodyChars, cancelled together while retry waits out their 429s, have each body parsed once, not once per cancellation', async () => {
  const big = 'x'.repeat(300_000);
  const answer = async (_input: unknown, init?: RequestInit): Promise<Response> => {
    const body = String(init?.body);
    if (body.length > big.length)
      return new Response(null, { status: 429, headers: { 'retry-after-ms': '300' } });
    const message = JSON.parse(body);
    if (message.id === undefined) return new Response(null, { status: 202 });
    return inProcessAnswer(message);
  };
  const mcp = inProcess(answer);
  const parse = JSON.parse;
  let bigParses = 0;
  try {
    const client = await mcp.connect();
    JSON.parse = (text: string, reviver?: Parameters<typeof parse>[1]) => {
      if (text.length > big.length) bigParses++;
      return parse(text, reviver);
    };
    const cancel = new AbortController();
    const calls = Array.from({ length: 20 }, () =>
      client.callTool({ name: 'add', arguments: { big } }, undefined, { signal: cancel.signal }),
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    cancel.abort(new Error('the user moved on'));
    for (const call of calls) await assert.rejects(call, /the user moved on/);
    // Each cancellation looked for its id among all 20 bodies, parsing every one again: 400 parses.
    assert.ok(bigParses <= 20, `${bigParses} parses of the big bodies`);
  } finally {
    JSON.parse = parse;
    await mcp.close();
  }
});

test('mcpFetch() with maxBodyChars 0 (no request parsed for resend) still lets go of a tools/call its client cancels while retry waits out a 429', async () => {
  const seen = await slowedAdd((origin) =>
    withClient(
      origin,
      {},
      async (client) => {
        await cancelledAdd(client);
        await pastDelay();
      },
      { maxBodyChars: 0 },
    ),
  );
  assert.equal(seen.posts['notifications/cancelled'], 1, 'the SDK told the server');
  assert.equal(seen.posts['tools/call:add'], 1, 'the cancelled call was not sent again');
  assert.equal(seen.runs.add, undefined);
});

test('mcpFetch() behind a fetch wrapper that gives each request a signal of its own still lets go of a tools/call its client cancels while retry waits out a 429, at an endpoint without sessions', async () => {
  // A per-request deadline on top of the transport's signal, as a wrapper may add one.
  const wrapped = ownSignals(mcpFetch(definePolicy({ name: 'mcp', retry: { backoff: fast } })));
  const seen = await slowedAdd(async (origin) =>
    closing(await sdkClient(`${origin}/mcp`, wrapped), async (client) => {
      await cancelledAdd(client);
      await pastDelay();
    }),
  );
  assert.equal(seen.posts['tools/call:add'], 1, 'the cancelled call was not sent again');
  assert.equal(seen.runs.add, undefined);
});

test('a failure body that quotes back the token a call sent (a gateway’s error page) shows it nowhere: not in the error a call gets, its cause, or what the SDK hands client.onerror', async () => {
  const token = 'sk-mcp-echo-7f3a';
  const fault = {
    status: 503,
    headers: { 'content-type': 'text/plain' },
    body: `upstream refused the request: Authorization: Bearer ${token}; token=${token}`,
  };
  await withApp(mcpApp(counts(), failFirst('tools/call:add', fault, 2)), async ({ origin }) => {
    const seen: string[] = [];
    const mcp = resilient(origin, [], {}, { auth: { token } });
    const fetch = mcpFetch(definePolicy({ name: 'mcp' }), { auth: { token } });
    const alone = await sdkClient(`${origin}/mcp`, fetch);
    try {
      for (const client of [await mcp.connect(), alone]) {
        client.onerror = (error) => seen.push(inspect(error, { depth: 8 }));
        const error = await client.callTool({ name: 'add', arguments: {} }).catch((e: unknown) => e);
        seen.push(inspect(error, { depth: 8 }), inspect(fetch.toError(error), { depth: 8 }));
        assert.match(String(error), /503|upstream refused/, 'the call failed with the 503');
      }
      for (const shown of seen) assert.ok(!shown.includes(token), `the token is shown: ${shown}`);
    } finally {
      await alone.close();
      await mcp.close();
    }
  });
});

test('mcpFetch(): a failure answer’s stalled body still ends at once when its caller’s signal aborts (a transport closing), after a garbage collection too', async () => {
  let cancelled = false;
  const base: FetchLike = async (_input, init) => {
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        // More than the capture snapshot reads (2 KiB), so only the SDK's read waits on.
        controller.enqueue(new TextEncoder().encode(`{"error":"${'x'.repeat(4096)}`));
        init?.signal?.addEventListener('abort', () => controller.error(init.signal?.reason));
      },
      cancel() {
        cancelled = true;
      },
    });
    return new Response(body, { status: 503, headers: { 'content-type': 'application/json' } });
  };
  // The policy would end a stalled failure body only after 30 s.
  const policy = definePolicy({ name: 'mcp', retry: false, capture: { bodyWaitMs: 30_000 } });
  const fetch = mcpFetch(policy, { fetch: base });
  const closing = new AbortController();
  const response = await fetch('http://127.0.0.1:9/mcp', {
    method: 'POST',
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'add' } }),
    signal: closing.signal,
  });
  assert.equal(response.status, 503);
  const reading = response.text().then(
    () => 'read',
    (error: Error) => error.name,
  );
  const gc = collector();
  // WeakRefs are cleared only once the job that made them is over.
  for (let i = 0; i < 3; i++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    gc();
  }
  closing.abort(new DOMException('closed', 'AbortError'));
  const settled = await settledWithin(reading, 500);
  assert.notEqual(settled, 'hung', 'the body read ended with the abort');
  assert.ok(cancelled || settled !== 'read', `the body was let go (${settled})`);
});

/**
 * Runs `fn` with the URL of an MCP endpoint: a real server (`sessionApp()`) behind a
 * loopback front whose answer to every GET (the SDK's stream) and DELETE (the session's
 * end) is a 403 with a reason phrase quoting the credential the request carried, as an old
 * app server may (`Authorization`, else `x-mcp-token`), and a body naming the method (the
 * GET's with `Retry-After: 30`). Node's and Bun's fetch keep the phrase as written; Deno's gives the
 * standard one (there the test passes either way).
 */
async function withQuotingFront(fn: (url: string) => Promise<void>): Promise<void> {
  const inner = sessionApp();
  await withApp(inner, async ({ origin: backend }) => {
    const front = createServer(async (request, response) => {
      const chunks: Buffer[] = [];
      for await (const chunk of request) chunks.push(chunk as Buffer);
      if (request.method !== 'POST') {
        response.writeHead(
          403,
          `Forbidden ${request.headers.authorization ?? request.headers['x-mcp-token']}`,
          // The GET's asks a longer wait: toError() of the later DELETE must still name the DELETE.
          request.method === 'GET' ? { 'retry-after': '30' } : {},
        );
        response.end(`no ${request.method} here`);
        return;
      }
      const headers = new Headers();
      for (const [name, value] of Object.entries(request.headers))
        if (typeof value === 'string' && name !== 'host' && name !== 'connection') headers.set(name, value);
      const answer = await fetch(`${backend}${request.url}`, {
        method: 'POST',
        headers,
        body: Buffer.concat(chunks),
      });
      response.writeHead(answer.status, Object.fromEntries(answer.headers));
      response.end(Buffer.from(await answer.arrayBuffer()));
    });
    await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
    try {
      await fn(`http://127.0.0.1:${(front.address() as AddressInfo).port}/mcp`);
    } finally {
      front.closeAllConnections();
      await new Promise((resolve) => front.close(resolve));
      await inner.forget();
    }
  });
}

test('a credential the server quotes back in the reason phrase of a failed GET stream or DELETE is not in what the SDK hands client.onerror, nor in toError()’s, with mcpFetch alone and resilientMcpClient', async () => {
  const token = 'opaque-T0k3n-9f8e7d6c5b4a3210';
  await withQuotingFront(async (url) => {
    const fetch = mcpFetch(definePolicy({ name: 'mcp', retry: false }), { auth: { token } });
    const mcp = resilientMcpClient({
      client: new Client({ name: 'breakwater-test', version: '1.0.0' }),
      transport: (inner: FetchLike) => new StreamableHTTPClientTransport(new URL(url), { fetch: inner }),
      policy: definePolicy({ name: 'tools', retry: false }),
      // A header of its own, the token bare: no redaction knows it, only what was sent.
      auth: { token, header: 'x-mcp-token', scheme: '' },
    });
    const alone = new Client({ name: 'breakwater-test', version: '1.0.0' });
    /** What each client's onerror got (the SDK's errors), and what toError() made of each. */
    const reported: [Error[], Error[]] = [[], []];
    const converted: unknown[] = [];
    alone.onerror = (error) => reported[0].push(error) && converted.push(fetch.toError(error));
    mcp.client.onerror = (error) => reported[1].push(error) && converted.push(mcp.fetch.toError(error));
    await alone.connect(new StreamableHTTPClientTransport(new URL(url), { fetch }));
    await mcp.connect();
    // The SDK opens its GET stream once `initialized` is accepted, and reports its failure only to onerror.
    for (let i = 0; i < 200 && !(reported[0][0] && reported[1][0]); i++)
      await new Promise((resolve) => setTimeout(resolve, 10));
    await alone.close();
    // resilientMcpClient's close() ends the session with a DELETE, sent past the policy.
    await mcp.close();
    const [byAlone, byResilient] = reported.map((errors) =>
      errors.map((error) => `${(error as { code?: unknown }).code} ${error.message}`),
    ) as [string[], string[]];
    assert.ok(
      byAlone.some((line) => line.startsWith('403 Streamable HTTP error: Failed to open SSE stream')),
      `${byAlone}`,
    );
    assert.ok(
      byResilient.some((line) => line.startsWith('403 Streamable HTTP error: Failed to open SSE stream')),
      `${byResilient}`,
    );
    assert.ok(
      byResilient.some((line) => line.startsWith('403 Streamable HTTP error: Failed to terminate session')),
      `${byResilient}`,
    );
    for (const error of [...reported.flat(), ...converted]) {
      const shown = inspect(error, { depth: 8 });
      assert.ok(!shown.includes(token.slice(0, 8)), `the token is shown: ${shown}`);
    }
  });
});

test('resilientMcpClient: toError() of the session’s DELETE the server refused names the DELETE and what it said, not the GET stream it refused with the same status and a longer Retry-After before; the policy records it', async () => {
  await withQuotingFront(async (url) => {
    // With the auth option too: the DELETE then carries the token the chain last stamped.
    for (const auth of [undefined, { token: 'opaque-T0k3n-9f8e7d6c5b4a3210' }]) {
      const policy = definePolicy({ name: 'tools', retry: false });
      const events: BreakwaterEvent[] = [];
      const mcp = resilientMcpClient({
        client: new Client({ name: 'breakwater-test', version: '1.0.0' }),
        transport: (inner: FetchLike) => new StreamableHTTPClientTransport(new URL(url), { fetch: inner }),
        policy,
        onEvent: (event) => events.push(event),
        ...(auth && { auth }),
      });
      const reported: Error[] = [];
      mcp.client.onerror = (error) => reported.push(error);
      await mcp.connect();
      // The SDK opens its GET stream once `initialized` is accepted, and reports its 403 only to onerror.
      for (let i = 0; i < 200 && !reported[0]; i++) await new Promise((resolve) => setTimeout(resolve, 10));
      // resilientMcpClient's close() ends the session with a DELETE, sent past the policy: refused too.
      await mcp.close();
      const refused = reported.find((error) => error.message.includes('Failed to terminate session'));
      assert.ok(refused, `the DELETE's failure reached onerror: ${reported.map(String)}`);
      const error = mcp.fetch.toError(refused);
      assert.ok(error instanceof HttpStatusError, `an HttpStatusError: ${inspect(error)}`);
      assert.equal(error.status, 403);
      assert.equal(error.request?.method, 'DELETE', `the DELETE is named: ${error.message}`);
      assert.match(
        error.message,
        /^DELETE http:\/\/127\.0\.0\.1:\d+\/mcp \(server "tools"\) failed with HTTP 403/,
      );
      assert.equal(error.serverMessage, 'no DELETE here');
      assert.equal(error.cause, refused, 'the SDK’s error is its cause');
      // Recorded as the policy's failures are: its stats and onEvent see it too.
      assert.equal(policy.stats('tools').lastFailure?.method, 'DELETE');
      assert.deepEqual(
        events.flatMap((event) => (event.type === 'captured' ? [event.snapshot.method] : [])),
        ['GET', 'DELETE'],
      );
    }
  });
});
