import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inspect } from 'node:util';
// @ts-types="@a2a-js/sdk/server"
import { defaultServerCallContextBuilder, type JsonRpcTransportHandler } from '@a2a-js/sdk/server';
import { Hono } from 'hono';
import { a2aIdempotent } from '../adapters/a2a/fetch.ts';
import { AgentCardError, createA2AClient, resolveAgentCard } from '../adapters/a2a/index.ts';
import { auth } from '../src/auth.ts';
import type { FetchLike } from '../src/call.ts';
import { captureStatus } from '../src/capture.ts';
import { createFetch } from '../src/chain.ts';
import { BreakwaterError, HttpStatusError, NetworkError } from '../src/errors.ts';
import { definePolicy } from '../src/policy.ts';
import { retry } from '../src/retry.ts';
import { echoAgent, userMessage } from './helpers/a2a-agent.ts';
import { assertBrokenAnswer } from './helpers/broken-answer.ts';
import { withBundle } from './helpers/bundle.ts';
import { FLOOD_BYTES, flood } from './helpers/flood.ts';
import { answeringPosts, withApp } from './helpers/hono-server.ts';
import { always, closedPort, type Handler, withServer } from './helpers/server.ts';
import { settledWithin } from './helpers/settled.ts';

const fast = { initialMs: 5, maxMs: 20, jitter: 'none' } as const;

/** A policy with short waits, so tests stay quick. */
function quickPolicy(attempts = 3) {
  return definePolicy({ retry: { attempts, backoff: fast }, breaker: false });
}

/** A v1.0 card for an agent whose JSON-RPC endpoint is `<origin>/a2a`. */
function cardFor(origin: string) {
  return {
    name: 'echo',
    description: 'Echoes what it is told',
    version: '1.0.0',
    supportedInterfaces: [
      { url: `${origin}/a2a`, protocolBinding: 'JSONRPC', protocolVersion: '1.0', tenant: '' },
    ],
    capabilities: { streaming: false, pushNotifications: false, extensions: [] },
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [{ id: 'echo', name: 'Echo', description: 'Echoes', tags: [], examples: [] }],
    securitySchemes: {},
    securityRequirements: [],
    signatures: [],
  };
}

/** {@link cardFor}'s card for the agent asked, saying it streams: for `answering()`'s `card`. */
function streamingCard(c: { req: Request }): Response {
  const card = cardFor(new URL(c.req.url).origin);
  return Response.json({ ...card, capabilities: { ...card.capabilities, streaming: true } });
}

/** What a fault answers instead of the agent: a 503 asking for a short wait. */
function overloaded(): Response {
  return new Response('{"error":{"message":"agent overloaded"}}', {
    status: 503,
    headers: { 'content-type': 'application/json', 'retry-after-ms': '20' },
  });
}

/** When a JSON-RPC method is answered 503: before the agent sees it, or after it ran. */
interface Fault {
  method: string;
  times: number;
  after?: boolean;
}

/** What reached the agent. */
interface Seen {
  cardGets: number;
  /** JSON-RPC methods, in arrival order (faulted ones included). */
  methods: string[];
  /** Times the agent executor ran. */
  executed: number;
}

/**
 * A real A2A agent (the SDK's DefaultRequestHandler, InMemoryTaskStore and
 * JsonRpcTransportHandler, with an executor that echoes the text back as a completed
 * task) on a Hono app, with a fault layer in front of its JSON-RPC endpoint.
 */
function agentApp(seen: Seen, faults: Fault[] = [], card?: (c: { req: Request }) => Response) {
  let handler: JsonRpcTransportHandler | undefined;
  const app = new Hono();
  app.get('/.well-known/agent-card.json', (c) => {
    seen.cardGets++;
    return card ? card({ req: c.req.raw }) : c.json(cardFor(new URL(c.req.url).origin));
  });
  app.post('/a2a', async (c) => {
    const body = await c.req.text();
    const method = String((JSON.parse(body) as { method?: unknown }).method);
    seen.methods.push(method);
    const fault = faults.find((f) => f.method === method && f.times > 0);
    if (fault && !fault.after) {
      fault.times--;
      return overloaded();
    }
    handler ??= echoAgent(cardFor(new URL(c.req.url).origin), () => {
      seen.executed++;
    });
    const context = defaultServerCallContextBuilder({
      headers: Object.fromEntries(c.req.raw.headers),
      requestedVersion: c.req.header('a2a-version'),
    } as never);
    const answer = await handler.handle(body, context);
    if (fault?.after) {
      fault.times--;
      return overloaded();
    }
    return c.json(answer as object);
  });
  return app;
}

function newSeen(): Seen {
  return { cardGets: 0, methods: [], executed: 0 };
}

test('the card resolver waits out a 503 with Retry-After and returns the card', async () => {
  const seen = newSeen();
  let gets = 0;
  const app = agentApp(seen, [], (c) => {
    if (gets++ === 0) return new Response('busy', { status: 503, headers: { 'retry-after': '1' } });
    return Response.json(cardFor(new URL(c.req.url).origin));
  });
  await withApp(app, async ({ origin }) => {
    const started = Date.now();
    const card = await resolveAgentCard(origin, { policy: quickPolicy() });
    assert.equal(card.name, 'echo');
    assert.equal(card.supportedInterfaces?.[0]?.url, `${origin}/a2a`);
    assert.equal(seen.cardGets, 2);
    // Retry-After: 1 is a second; the 5 ms backoff alone would not wait that long.
    assert.ok(Date.now() - started >= 900, `waited ${Date.now() - started} ms`);
  });
});

test('a 404 card fetch throws HttpStatusError with the status, without resending', async () => {
  const seen = newSeen();
  const app = agentApp(seen, [], () => new Response('no card here', { status: 404 }));
  await withApp(app, async ({ origin }) => {
    const error = await resolveAgentCard(`${origin}/?token=s3cret`, { policy: quickPolicy() }).catch(
      (e: unknown) => e,
    );
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.status, 404);
    assert.equal(error.retryable, false);
    assert.equal(error.serverMessage, 'no card here');
    assert.equal(seen.cardGets, 1);
    assert.doesNotMatch(error.message, /s3cret/);
  });
});

test('a 500 card fetch throws HttpStatusError with the server message once retries run out', async () => {
  const seen = newSeen();
  const app = agentApp(
    seen,
    [],
    () => new Response('{"error":{"message":"card store down"}}', { status: 500 }),
  );
  await withApp(app, async ({ origin }) => {
    const error = await resolveAgentCard(origin, { policy: quickPolicy(2) }).catch((e: unknown) => e);
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.status, 500);
    assert.equal(error.serverMessage, 'card store down');
    assert.equal(error.request?.url, `${origin}/.well-known/agent-card.json`);
    assert.equal(seen.cardGets, 2);
  });
});

test('a card that is not JSON throws AgentCardError AGENT_CARD_NOT_JSON', async () => {
  const app = agentApp(
    newSeen(),
    [],
    () => new Response('<html>hello</html>', { headers: { 'content-type': 'text/html' } }),
  );
  await withApp(app, async ({ origin }) => {
    const error = await resolveAgentCard(origin).catch((e: unknown) => e);
    assert.ok(error instanceof AgentCardError, String(error));
    assert.equal(error.code, 'AGENT_CARD_NOT_JSON');
    assert.match(error.message, /content-type text\/html/);
    assert.doesNotMatch(error.message, /hello/);
  });
});

test('a card of 340,000 empty skills (1 MiB) is refused before the schema check, and a card of 1,000 skills with tags is read', async () => {
  let skills: unknown[] = Array.from({ length: 340_000 }, () => ({}));
  const app = agentApp(newSeen(), [], (c) =>
    Response.json({ ...cardFor(new URL(c.req.url).origin), skills }),
  );
  await withApp(app, async ({ origin }) => {
    const error = await resolveAgentCard(origin).catch((e: unknown) => e);
    assert.ok(error instanceof AgentCardError, String(error));
    assert.equal(error.code, 'AGENT_CARD_INVALID');
    assert.deepEqual(error.issues, ['card: more than 10000 skills, tags, interfaces and modes together']);
    skills = Array.from({ length: 1_000 }, (_, i) => ({
      id: `s${i}`,
      name: `skill ${i}`,
      tags: ['a', 'b', 'c', 'd', 'e'],
    }));
    const card = await resolveAgentCard(origin);
    assert.equal(card.skills.length, 1_000);
  });
});

test('a card missing its name and endpoint throws AgentCardError naming every bad path', async () => {
  const app = agentApp(newSeen(), [], (c) => {
    const { name: _, supportedInterfaces: __, ...rest } = cardFor(new URL(c.req.url).origin);
    return Response.json({ ...rest, skills: 'many' });
  });
  await withApp(app, async ({ origin }) => {
    const error = await resolveAgentCard(origin).catch((e: unknown) => e);
    assert.ok(error instanceof AgentCardError, String(error));
    assert.equal(error.code, 'AGENT_CARD_INVALID');
    const paths = error.issues.map((issue) => issue.split(':')[0]);
    assert.deepEqual(paths.sort(), ['card.name', 'card.skills', 'card.supportedInterfaces']);
  });
});

test('a card keeps the fields it was not checked for', async () => {
  const app = agentApp(newSeen(), [], (c) =>
    Response.json({ ...cardFor(new URL(c.req.url).origin), iconUrl: 'https://example.com/i.png' }),
  );
  await withApp(app, async ({ origin }) => {
    const card = await resolveAgentCard(origin);
    assert.equal(card.iconUrl, 'https://example.com/i.png');
    assert.deepEqual(card.securitySchemes, {});
  });
});

test('an endless card body throws AGENT_CARD_TOO_LARGE after about 1 MiB, not after reading it all', async () => {
  let sent = 0;
  const app = agentApp(newSeen(), [], () => {
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        sent += 64 * 1024;
        // JSON whitespace: only the size can reject it.
        controller.enqueue(new Uint8Array(64 * 1024).fill(32));
      },
    });
    return new Response(body, { headers: { 'content-type': 'application/json' } });
  });
  await withApp(app, async ({ origin }) => {
    const started = Date.now();
    const error = await resolveAgentCard(origin).catch((e: unknown) => e);
    assert.ok(error instanceof AgentCardError, String(error));
    assert.equal(error.code, 'AGENT_CARD_TOO_LARGE');
    assert.ok(Date.now() - started < 5000, `took ${Date.now() - started} ms`);
    // The server produced what the cap and the socket buffers took, then the client hung up.
    assert.ok(sent < 32 * 1024 * 1024, `server produced ${sent} bytes`);
  });
});

/** An agent whose card declares 4,096 bytes (and sends them): over a 1,024-byte cap. */
function declaredTooLarge(): ReturnType<typeof agentApp> {
  return agentApp(
    newSeen(),
    [],
    () =>
      new Response(' '.repeat(4096), {
        headers: { 'content-type': 'application/json', 'content-length': '4096' },
      }),
  );
}

test('a card whose declared length is over the cap fails before its body is read', async () => {
  await withApp(declaredTooLarge(), async ({ origin }) => {
    const error = await resolveAgentCard(origin, { maxBytes: 1024 }).catch((e: unknown) => e);
    assert.ok(error instanceof AgentCardError, String(error));
    assert.equal(error.code, 'AGENT_CARD_TOO_LARGE');
    assert.match(error.message, /1024-byte limit/);
  });
});

/**
 * A fetch that relays each answer through a stream of its own (as a proxy or a mock
 * does), whose cancel never settles: its source never confirms it stopped.
 */
const relayingSlowCancel: FetchLike = async (input, init) => {
  const response = await globalThis.fetch(input, init);
  const reader = response.body?.getReader();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await reader?.read();
      if (!next || next.done) controller.close();
      else controller.enqueue(next.value);
    },
    cancel() {
      reader?.cancel().catch(() => {});
      return new Promise<void>(() => {});
    },
  });
  return new Response(body, { status: response.status, headers: response.headers });
};

test('a card whose declared length is over the cap fails at once even when its relayed body is slow to cancel, with or without a policy', async () => {
  await withApp(declaredTooLarge(), async ({ origin }) => {
    for (const policy of [quickPolicy(), undefined]) {
      const outcome = await settledWithin(
        1000,
        resolveAgentCard(origin, { policy, fetch: relayingSlowCancel, maxBytes: 1024 }),
      );
      assert.ok(outcome instanceof AgentCardError, `${policy ? 'policy' : 'no policy'}: ${String(outcome)}`);
      assert.equal(outcome.code, 'AGENT_CARD_TOO_LARGE');
    }
  });
});

test('the SDK client sends a message through the policy and gets the agent reply', async () => {
  const seen = newSeen();
  await withApp(agentApp(seen), async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: quickPolicy() });
    const task = (await client.sendMessage(userMessage('hello'))) as {
      status: { message: { parts: { content: { value: string } }[] } };
    };
    assert.equal(task.status.message.parts[0]?.content.value, 'echo: hello');
    assert.deepEqual(seen.methods, ['SendMessage']);
    assert.equal(seen.cardGets, 1);
  });
});

test('SendMessage answered 503 after the agent ran is not resent, and fails as HttpStatusError', async () => {
  const seen = newSeen();
  const faults = [{ method: 'SendMessage', times: 1, after: true }];
  await withApp(agentApp(seen, faults), async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: quickPolicy() });
    const error = await client.sendMessage(userMessage('pay the invoice')).catch((e: unknown) => e);
    assert.equal(seen.executed, 1);
    assert.deepEqual(seen.methods, ['SendMessage']);
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.status, 503);
    assert.equal(error.retryAfterMs, 20);
    assert.equal(error.serverMessage, 'agent overloaded');
    assert.match(String((error.cause as Error).message), /Status: 503/);
  });
});

test('a read-only GetTask answered 503 once is resent and succeeds', async () => {
  const seen = newSeen();
  const faults = [{ method: 'GetTask', times: 1 }];
  await withApp(agentApp(seen, faults), async ({ origin }) => {
    const fetch = createFetch({ use: [a2aIdempotent(), retry({ backoff: fast }), captureStatus()] });
    const client = await createA2AClient(origin, { fetch });
    const sent = (await client.sendMessage(userMessage('remember me'))) as { id: string };
    const task = (await client.getTask({ id: sent.id } as never)) as { id: string };
    assert.equal(task.id, sent.id);
    assert.deepEqual(seen.methods, ['SendMessage', 'GetTask', 'GetTask']);
  });
});

test('a read-only GetTask answered 503 once is resent through a policy', async () => {
  const seen = newSeen();
  const faults = [{ method: 'GetTask', times: 1 }];
  await withApp(agentApp(seen, faults), async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: quickPolicy() });
    const sent = (await client.sendMessage(userMessage('remember me'))) as { id: string };
    const task = (await client.getTask({ id: sent.id } as never)) as { id: string };
    assert.equal(task.id, sent.id);
    assert.deepEqual(seen.methods, ['SendMessage', 'GetTask', 'GetTask']);
  });
});

test('an A2A error whose message merely mentions a status passes through as the SDK’s error', async () => {
  const app = new Hono();
  app.get('/.well-known/agent-card.json', (c) => c.json(cardFor(new URL(c.req.url).origin)));
  app.post('/a2a', async (c) => {
    const { id } = (await c.req.json()) as { id: unknown };
    // HTTP 200: the agent answered; its message quotes an upstream's words.
    const message = 'HTTP error for GetTask! Status: 503 from upstream. Status: 503';
    return c.json({ jsonrpc: '2.0', id, error: { code: -32001, message: `Task not found. ${message}` } });
  });
  await withApp(app, async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: quickPolicy() });
    const error = await client.getTask({ id: 't1' } as never).catch((e: unknown) => e);
    assert.ok(error instanceof Error, String(error));
    assert.ok(!(error instanceof HttpStatusError), `mapped to ${String(error)}`);
    assert.match(error.message, /Task not found/);
  });
});

/** Everything an error shows: its message, its JSON form and its own fields. */
function shown(error: unknown): string {
  const e = error as Error;
  return `${e.message} ${JSON.stringify(e)} ${JSON.stringify(Object.entries(e))}`;
}

test('without a policy, a refused card GET is a NetworkError that shows no userinfo or query values', async () => {
  const port = await closedPort();
  // A base read as is (`path: ''`) keeps its query into the request.
  const queried = await resolveAgentCard(`http://127.0.0.1:${port}/card?api_key=SECRET-QUERY`, {
    path: '',
  }).catch((e: unknown) => e);
  assert.ok(queried instanceof NetworkError, shown(queried));
  assert.equal(queried.code, 'ECONNREFUSED');
  assert.ok(!shown(queried).includes('SECRET'), shown(queried));
  // Node refuses a URL with userinfo before connecting (a TypeError); Deno and Bun connect.
  const withUser = await resolveAgentCard(`http://agent:SECRET-PASSWORD@127.0.0.1:${port}/`).catch(
    (e: unknown) => e,
  );
  assert.ok(withUser instanceof NetworkError || withUser instanceof TypeError, shown(withUser));
  assert.ok(!shown(withUser).includes('SECRET'), shown(withUser));
});

/**
 * An A2A 1.0 agent that speaks only HTTP+JSON (REST) at `/rest`, answering every call
 * with `status` and `error` (a google.rpc.Status body, as the REST binding words
 * errors) and the given headers.
 */
function restAgent(status: number, error: object, headers: Record<string, string> = {}) {
  const app = new Hono();
  app.get('/.well-known/agent-card.json', (c) =>
    c.json({
      name: 'rest-agent',
      version: '1.0.0',
      capabilities: {},
      skills: [],
      supportedInterfaces: [
        { url: `${new URL(c.req.url).origin}/rest`, protocolBinding: 'HTTP+JSON', protocolVersion: '1.0' },
      ],
    }),
  );
  app.all('/rest/*', (c) => c.json({ error }, status as 503, headers));
  return app;
}

test('a REST agent’s 503 with a google.rpc.Status body comes back as HttpStatusError with its Retry-After', async () => {
  const unavailable = { code: 503, status: 'UNAVAILABLE', message: 'The service is currently unavailable.' };
  await withApp(restAgent(503, unavailable, { 'retry-after': '5' }), async (app) => {
    const client = await createA2AClient(app.origin, {
      policy: definePolicy({ retry: false, breaker: false }),
    });
    const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.status, 503);
    assert.equal(error.retryAfterMs, 5000);
    assert.equal(error.serverMessage, 'The service is currently unavailable.');
    assert.equal((error.cause as Error).name, 'A2AError', 'the SDK’s error is the cause');
  });
});

/** A REST agent's google.rpc.Status body for TaskNotFound (404), with `more` details after its ErrorInfo. */
function taskNotFound(...more: object[]) {
  return {
    code: 404,
    status: 'NOT_FOUND',
    message: 'no such task',
    details: [
      {
        '@type': 'type.googleapis.com/google.rpc.ErrorInfo',
        reason: 'TASK_NOT_FOUND',
        domain: 'a2a-protocol.org',
      },
      ...more,
    ],
  };
}

test('a REST agent’s typed A2A error (TaskNotFound, 404) still passes through as the SDK’s error', async () => {
  await withApp(restAgent(404, taskNotFound()), async (app) => {
    const client = await createA2AClient(app.origin, { policy: definePolicy({ retry: false }) });
    const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
    assert.ok(!(error instanceof HttpStatusError), String(error));
    assert.equal((error as Error).name, 'TaskNotFoundError');
  });
});

test('a REST agent’s failure that sets a cookie (a 503, a typed 404) shows its value nowhere in the error a call gets, its cause’s headers included', async () => {
  const cookie = { 'set-cookie': 'session=SESSION-SECRET-4711; HttpOnly', 'retry-after': '5' };
  const unavailable = { code: 503, status: 'UNAVAILABLE', message: 'down' };
  for (const [status, body] of [
    [503, unavailable],
    [404, taskNotFound()],
  ] as const) {
    await withApp(restAgent(status, body, cookie), async (app) => {
      const client = await createA2AClient(app.origin, { policy: definePolicy({ retry: false }) });
      const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
      assert.ok(error instanceof Error, String(error));
      const shown = inspect(error, { depth: Infinity });
      assert.ok(!shown.includes('SESSION-SECRET'), `${status}: ${shown}`);
      // The SDK's error keeps the other headers it read.
      const sdkError = (status === 503 ? error.cause : error) as { headers?: Record<string, string> };
      assert.equal(sdkError.headers?.['retry-after'], '5', String(status));
    });
  }
});

test('a card fetch’s TypeError with no URL in its message reaches the caller as it was thrown, cause and all', async () => {
  const cause = new Error('the header value had a newline');
  const thrown = new TypeError('Invalid header value', { cause });
  const error = await resolveAgentCard('http://agent.test/', {
    fetch: async () => {
      throw thrown;
    },
  }).catch((e: unknown) => e);
  assert.equal(error, thrown);
});

test('a card fetch’s TypeError whose message is not a string, or cannot be read, is not replaced by a crash of the redaction', async () => {
  class NumberMessage extends TypeError {
    override get message(): string {
      return 42 as never;
    }
  }
  class UnreadableMessage extends TypeError {
    override get message(): string {
      throw new Error('getter failed');
    }
  }
  for (const thrown of [new NumberMessage(), new UnreadableMessage()]) {
    const error = await resolveAgentCard('http://agent.test/', {
      fetch: async () => {
        throw thrown;
      },
    }).catch((e: unknown) => e);
    assert.ok(error === thrown, (error as Error).constructor.name);
  }
});

test('a REST agent’s status past 599 passes through as the SDK’s error, not a TypeError from wrapHttpError', async () => {
  await withApp(restAgent(600, { code: 600, message: 'out of range' }), async (app) => {
    const client = await createA2AClient(app.origin, { policy: definePolicy({ retry: false }) });
    const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
    assert.equal((error as Error).name, 'A2AError', String(error));
    assert.equal((error as { statusCode?: unknown }).statusCode, 600);
  });
});

test('a REST agent’s generic error is mapped by its HTTP status, not by a status its message quotes', async () => {
  // A gateway agent relaying its upstream's SDK error in its own 502.
  const relayed = {
    code: 502,
    message: 'HTTP error for GetTask! Status: 503 Service Unavailable. Response: {}',
  };
  await withApp(restAgent(502, relayed), async (app) => {
    const client = await createA2AClient(app.origin, {
      policy: definePolicy({ retry: false, breaker: false }),
    });
    const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.status, 502);
    assert.equal(error.retryable, true);
  });
});

/** A card, served as `override` says, whose endpoint fields (`url`, interfaces) are replaced. */
function cardWith(override: Record<string, unknown>) {
  const { supportedInterfaces: _, ...rest } = cardFor('http://unused.invalid');
  return agentApp(newSeen(), [], () => Response.json({ ...rest, ...override }));
}

/** A card's endpoint fields: `url`, then a JSON-RPC and an HTTP+JSON interface, in that order. */
function endpoints(url: string, jsonRpc: string, rest: string) {
  return {
    url,
    supportedInterfaces: [
      { url: jsonRpc, protocolBinding: 'JSONRPC' },
      { url: rest, protocolBinding: 'HTTP+JSON' },
    ],
  };
}

test('a card whose endpoints are javascript:, file:, data: or ftp: URLs is refused as AGENT_CARD_INVALID, naming each path but no value', async () => {
  const app = cardWith({
    ...endpoints(
      'javascript:fetch("//evil.example/?k=SECRET-1")',
      'file:///etc/passwd?SECRET-2',
      'data:application/json,{"result":"SECRET-3"}',
    ),
    additionalInterfaces: [{ url: 'ftp://user:SECRET-4@host.example/a2a', transport: 'HTTP+JSON' }],
  });
  await withApp(app, async ({ origin }) => {
    const error = await resolveAgentCard(origin, {
      path: '.well-known/agent-card.json?token=SECRET-5',
    }).catch((e: unknown) => e);
    assert.ok(error instanceof AgentCardError, String(error));
    assert.equal(error.code, 'AGENT_CARD_INVALID');
    const refused = 'must be an http: or https: URL (got a string, not shown)';
    assert.deepEqual([...error.issues].sort(), [
      `card.additionalInterfaces.0.url: ${refused}`,
      `card.supportedInterfaces.0.url: ${refused}`,
      `card.supportedInterfaces.1.url: ${refused}`,
      `card.url: ${refused}`,
    ]);
    assert.match(error.message, /token=/);
    assert.doesNotMatch(`${error.message} ${JSON.stringify(error)}`, /SECRET/);
  });
});

test('a card that also lists a gRPC interface at a gRPC target (host:port, grpc://), as the SDK’s own multi-transport agent does, is taken, and the client talks JSON-RPC', async () => {
  const seen = newSeen();
  const app = agentApp(seen, [], (c) => {
    const card = cardFor(new URL(c.req.url).origin);
    return Response.json({
      ...card,
      supportedInterfaces: [
        { url: 'localhost:41242', protocolBinding: 'GRPC', protocolVersion: '1.0', tenant: '' },
        ...card.supportedInterfaces,
      ],
      additionalInterfaces: [{ url: 'grpc://127.0.0.1:41242', transport: 'GRPC' }],
    });
  });
  await withApp(app, async ({ origin }) => {
    const card = await resolveAgentCard(origin);
    assert.equal(card.supportedInterfaces?.[0]?.url, 'localhost:41242');
    const client = await createA2AClient(origin, { policy: quickPolicy() });
    const reply = (await client.sendMessage(userMessage('hi'))) as { id?: string };
    assert.equal(typeof reply.id, 'string');
    assert.deepEqual(seen.methods, ['SendMessage']);
    // Any other binding's endpoint is still checked, whatever its case.
    const refused = await resolveAgentCard(origin, {
      fetch: async () =>
        Response.json({
          ...card,
          supportedInterfaces: [{ url: 'localhost:41242', protocolBinding: 'jsonrpc' }],
        }),
    }).catch((e: unknown) => e);
    assert.ok(refused instanceof AgentCardError, String(refused));
    assert.deepEqual(refused.issues, [
      'card.supportedInterfaces.0.url: must be an http: or https: URL (got a string, not shown)',
    ]);
  });
});

test('a card fetched over https may not send the client to plain http, while one fetched over http may use either', async () => {
  const app = cardWith(
    endpoints('https://agent.example/a2a', 'http://agent.example/a2a', 'https://agent.example/rest'),
  );
  await withApp(app, async ({ origin }) => {
    // The https card URL is served by the loopback app: only the scheme the caller asked for matters.
    const overHttps: FetchLike = (input, init) =>
      globalThis.fetch(String(input).replace('https://agent.test', origin), init);
    const error = await resolveAgentCard('https://agent.test/', { fetch: overHttps }).catch(
      (e: unknown) => e,
    );
    assert.ok(error instanceof AgentCardError, String(error));
    assert.deepEqual(error.issues, [
      'card.supportedInterfaces.0.url: must be an https: URL, as the card was fetched over https (got a string, not shown)',
    ]);
    const card = await resolveAgentCard(origin);
    assert.equal(card.supportedInterfaces?.[0]?.url, 'http://agent.example/a2a');
  });
});

/**
 * The AgentCardError of resolving https://agent.test/'s card over `fetch`, asserted to be the
 * refusal of a card asked for over https and answered over plain http after a redirect.
 */
async function refusedAsRedirectedToHttp(
  fetch: FetchLike,
  policy: ReturnType<typeof quickPolicy> | undefined,
): Promise<AgentCardError> {
  const error = await resolveAgentCard('https://agent.test/', { fetch, policy }).catch((e: unknown) => e);
  assert.ok(error instanceof AgentCardError, error instanceof Error ? String(error) : 'the card was taken');
  assert.equal(error.code, 'AGENT_CARD_INVALID');
  assert.deepEqual(error.issues, ['card: asked for over https, answered over plain http (a redirect)']);
  return error;
}

test('a card asked for over https but answered over plain http after a redirect is refused, with or without a policy: anyone on the path could have named its endpoints', async () => {
  const app = new Hono();
  // The https card's server sends the client to plain http, where the card names an https endpoint.
  app.get('/.well-known/agent-card.json', (c) => c.redirect(`${new URL(c.req.url).origin}/card.json`, 302));
  app.get('/card.json', (c) => c.json(cardFor('https://elsewhere.example')));
  await withApp(app, async ({ origin }) => {
    // The https card URL is served by the loopback app, whose redirect then goes to plain http.
    const overHttps: FetchLike = (input, init) =>
      globalThis.fetch(String(input).replace('https://agent.test', origin), init);
    for (const policy of [undefined, quickPolicy()]) {
      const error = await refusedAsRedirectedToHttp(overHttps, policy);
      assert.match(error.message, /^agent card at https:\/\/agent\.test\/\.well-known\/agent-card\.json /);
    }
    // Over http from the start, the caller chose plain http: the same redirect is followed.
    assert.equal((await resolveAgentCard(origin)).name, 'echo');
  });
});

test('a card whose endpoint holds a user name or password is refused as AGENT_CARD_INVALID, never showing it, and createA2AClient sends nothing there', async () => {
  let posts = 0;
  const app = new Hono();
  app.get('/.well-known/agent-card.json', (c) => {
    const { host } = new URL(c.req.url);
    const { supportedInterfaces: _, ...card } = cardFor('http://unused.invalid');
    return c.json({
      ...card,
      ...endpoints(
        `http://agent:SECRET-1@${host}/a2a`,
        `http://agent:SECRET-2@${host}/a2a`,
        `http://:SECRET-3@${host}/rest`,
      ),
    });
  });
  app.post('*', (c) => {
    posts++;
    return c.json({ error: 'no' }, 503);
  });
  await withApp(app, async ({ origin }) => {
    const error = await resolveAgentCard(origin).catch((e: unknown) => e);
    assert.ok(error instanceof AgentCardError, error instanceof Error ? String(error) : 'the card was taken');
    assert.equal(error.code, 'AGENT_CARD_INVALID');
    const refused = 'must not hold a user name or password (got a string, not shown)';
    assert.deepEqual([...error.issues].sort(), [
      `card.supportedInterfaces.0.url: ${refused}`,
      `card.supportedInterfaces.1.url: ${refused}`,
      `card.url: ${refused}`,
    ]);
    assert.doesNotMatch(`${error.message} ${JSON.stringify(error)}`, /SECRET/);
    // Node's fetch refuses such a URL, quoting it whole; Deno's and Bun's send its Basic credentials.
    for (const policy of [undefined, quickPolicy()]) {
      const refusal = await createA2AClient(origin, { policy }).then(
        (client) => client.getTask({ id: 'task-1' } as never),
        (e: unknown) => e,
      );
      assert.ok(refusal instanceof AgentCardError, shown(refusal));
    }
    assert.equal(posts, 0);
  });
});

test('createA2AClient refuses a card that points the SDK at a data: URL, before any request goes there', async () => {
  const app = cardWith({ url: 'data:application/json,{"jsonrpc":"2.0","id":1,"result":{}}' });
  const fetched: string[] = [];
  const recording: FetchLike = (input, init) => {
    fetched.push(String(input instanceof Request ? input.url : input));
    return globalThis.fetch(input, init);
  };
  await withApp(app, async ({ origin }) => {
    const error = await createA2AClient(origin, { policy: quickPolicy(), fetch: recording }).then(
      async (client) => {
        await client.sendMessage(userMessage('hello')).catch(() => undefined);
        return client;
      },
      (e: unknown) => e,
    );
    assert.ok(error instanceof AgentCardError, String(error));
    assert.deepEqual(fetched, [`${origin}/.well-known/agent-card.json`]);
  });
});

/** An answer of `status` that sends `start`, then nothing, ever (until the server closes). */
function stalling(status: number, contentType: string, start: string): () => Response {
  return () => {
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(start));
      },
    });
    return new Response(body, { status, headers: { 'content-type': contentType } });
  };
}

/** An SDK client of the agent at `origin` that waits `bodyWaitMs` for a failure's body, and neither retries nor breaks. */
function clientWaiting(origin: string, bodyWaitMs: number) {
  const policy = definePolicy({ retry: false, breaker: false, capture: { bodyWaitMs } });
  return createA2AClient(origin, { policy });
}

/**
 * The echo agent of {@link agentApp}, with every JSON-RPC call of `method` answered by
 * `answer()` instead; `card` as for `agentApp`.
 */
function answering(method: string, answer: () => Response, card?: (c: { req: Request }) => Response) {
  return answeringPosts(agentApp(newSeen(), [], card), `"${method}"`, answer);
}

test('an agent’s failure body that never ends is cut for the SDK: GetTask fails with its status, and the agent stops being read', async () => {
  // An error page that streams on (a proxy's, say).
  const endless = flood('', 'x', { 'content-type': 'text/plain' });
  const app = answering('GetTask', () => endless.failure(500));
  await withApp(app, async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: quickPolicy(1) });
    const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.status, 500);
    const said = (error.cause as Error).message;
    assert.ok(said.length < 100_000, `message of ${said.length} chars`);
    assert.ok(endless.produced() < FLOOD_BYTES / 2, `agent produced ${endless.produced()} bytes`);
  });
});

test('of two concurrent GetTask 503s with the same body, neither is told to wait less than its agent asked', async () => {
  const body = new TextEncoder().encode(`{"error":{"message":"overloaded"}}${' '.repeat(4000)}`);
  const headers = { 'content-type': 'application/json' };
  const agent = agentApp(newSeen());
  // `first` is answered at once (Retry-After: 30) but its body ends only after 300 ms;
  // `second` (Retry-After: 1) after 100 ms: captured before the SDK has read `first`'s.
  const app = {
    async fetch(request: Request): Promise<Response> {
      const text = request.method === 'POST' ? await request.clone().text() : '';
      if (text.includes('"first"')) {
        const stream = new ReadableStream<Uint8Array>({
          start(controller) {
            controller.enqueue(body.subarray(0, 3000));
            setTimeout(() => {
              controller.enqueue(body.subarray(3000));
              controller.close();
            }, 300);
          },
        });
        return new Response(stream, { status: 503, headers: { ...headers, 'retry-after': '30' } });
      }
      if (text.includes('"second"')) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        return new Response(body, { status: 503, headers: { ...headers, 'retry-after': '1' } });
      }
      return agent.fetch(request);
    },
  };
  await withApp(app, async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: definePolicy({ retry: false, breaker: false }) });
    const [first, second] = await Promise.all(
      ['first', 'second'].map((id) => client.getTask({ id } as never).catch((e: unknown) => e)),
    );
    assert.ok(first instanceof HttpStatusError && second instanceof HttpStatusError, String(first));
    // Nothing in the SDK's errors tells them apart: neither may be told to wait less than its agent asked.
    assert.equal(first.retryAfterMs, 30_000, 'first got the Retry-After of the failure captured after it');
    // Mapped when it fails, once `first` was captured: the longer wait as well (never less than its own).
    assert.ok((second.retryAfterMs ?? 0) >= 1000, String(second.retryAfterMs));
    assert.equal(first.serverMessage, 'overloaded');
  });
});

test('an agent’s failure body that stalls is ended for the SDK after the policy’s capture.bodyWaitMs: GetTask fails with its status instead of hanging', async () => {
  await withApp(
    answering('GetTask', stalling(503, 'application/json', '{"error":"stuck')),
    async ({ origin }) => {
      const client = await clientWaiting(origin, 50);
      const started = Date.now();
      const outcome = await settledWithin(3000, client.getTask({ id: 'task-1' } as never));
      assert.ok(outcome instanceof HttpStatusError, String(outcome));
      assert.equal(outcome.status, 503);
      assert.ok(Date.now() - started < 2000, `took ${Date.now() - started} ms`);
    },
  );
});

test('an agent’s JSON-RPC answer that never ends fails GetTask past maxResponseBytes with RESPONSE_TOO_LARGE, and the agent stops being read', async () => {
  const LIMIT = 256 * 1024;
  const endless = flood('{"jsonrpc":"2.0","id":1,"result":{"id":"', 'x', {
    'content-type': 'application/json',
  });
  await withApp(answering('GetTask', endless.answer), async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: quickPolicy(1), maxResponseBytes: LIMIT });
    const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
    assert.ok(error instanceof BreakwaterError, String(error).slice(0, 300));
    assert.equal(error.code, 'RESPONSE_TOO_LARGE');
    assert.match(
      error.message,
      new RegExp(`/a2a \\(server "[^"]+"\\) failed: the response body is over the ${LIMIT}-byte limit`),
    );
    assert.ok(endless.produced() < FLOOD_BYTES / 2, `agent produced ${endless.produced()} bytes`);
  });
});

test('an agent that answers GetTask (JSON-RPC and REST) with an endless event stream of short events fails past maxResponseBytes: the SDK reads that answer whole, so it is limited as one body', async () => {
  const LIMIT = 256 * 1024;
  const endless = flood('data: {}\n\n', 'data: x\n\n', { 'content-type': 'text/event-stream' });
  const app = answering('GetTask', endless.answer);
  // The REST binding's GetTask is a GET of /rest/tasks/<id>.
  const rest = new Hono()
    .get('/.well-known/agent-card.json', (c) => {
      const card = cardFor(new URL(c.req.url).origin);
      return c.json({
        ...card,
        supportedInterfaces: [
          {
            ...card.supportedInterfaces[0],
            url: `${new URL(c.req.url).origin}/rest`,
            protocolBinding: 'HTTP+JSON',
          },
        ],
      });
    })
    .get('/rest/*', endless.answer);
  for (const agent of [app, rest]) {
    await withApp(agent, async ({ origin }) => {
      const before = endless.produced();
      const client = await createA2AClient(origin, { policy: quickPolicy(1), maxResponseBytes: LIMIT });
      const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
      assert.ok(error instanceof BreakwaterError, String(error).slice(0, 300));
      assert.equal(error.code, 'RESPONSE_TOO_LARGE');
      assert.match(error.message, /failed: the response body is over the 262144-byte limit/);
      const read = endless.produced() - before;
      assert.ok(read < FLOOD_BYTES / 2, `agent produced ${read} bytes`);
    });
  }
});

test('an agent that answers SendStreamingMessage with an endless event stream typed Text/Event-Stream fails past maxResponseBytes: the SDK takes only text/event-stream as written for a stream, and reads any other answer whole', async () => {
  const LIMIT = 256 * 1024;
  const endless = flood('data: {}\n\n', 'data: x\n\n', { 'content-type': 'Text/Event-Stream' });
  await withApp(answering('SendStreamingMessage', endless.answer, streamingCard), async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: quickPolicy(1), maxResponseBytes: LIMIT });
    const error = await (async () => {
      for await (const _ of client.sendMessageStream(userMessage('hi'))) {
        // The SDK reads the answer whole before any event.
      }
    })().catch((e: unknown) => e);
    assert.ok(error instanceof BreakwaterError, String(error).slice(0, 300));
    assert.equal(error.code, 'RESPONSE_TOO_LARGE');
    assert.ok(endless.produced() < FLOOD_BYTES / 2, `agent produced ${endless.produced()} bytes`);
  });
});

test('an agent’s SSE event that never ends fails the message stream past maxResponseBytes with RESPONSE_TOO_LARGE', async () => {
  const LIMIT = 256 * 1024;
  const endless = flood('data: {"jsonrpc":"2.0","id":1,"result":"', 'x', {
    'content-type': 'text/event-stream',
  });
  await withApp(answering('SendStreamingMessage', endless.answer, streamingCard), async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: quickPolicy(1), maxResponseBytes: LIMIT });
    const error = await (async () => {
      for await (const _ of client.sendMessageStream(userMessage('hi'))) {
        // No event ever ends.
      }
    })().catch((e: unknown) => e);
    assert.ok(error instanceof BreakwaterError, String(error).slice(0, 300));
    assert.equal(error.code, 'RESPONSE_TOO_LARGE');
    assert.match(
      error.message,
      new RegExp(`an event of the response stream is over the ${LIMIT}-byte limit`),
    );
    assert.ok(endless.produced() < FLOOD_BYTES / 2, `agent produced ${endless.produced()} bytes`);
  });
});

test('without a policy, a huge failure body the SDK quotes whole costs no redaction pass: its hostile text maps as fast as plain text', async () => {
  // Without a policy the SDK gets the body uncut and quotes all of it in its message;
  // nothing was recorded to choose among, so the message need not be read at all.
  const size = 2 * 1024 * 1024;
  const timed = async (fill: string): Promise<number> => {
    const app = answering(
      'GetTask',
      () =>
        new Response(fill.repeat(size / fill.length), {
          status: 503,
          headers: { 'content-type': 'text/plain' },
        }),
    );
    return withApp(app, async ({ origin }) => {
      const client = await createA2AClient(origin);
      const started = performance.now();
      const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
      const ms = performance.now() - started;
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.status, 503);
      return ms;
    });
  };
  const plain = Math.min(await timed('aaaaaaaa'), await timed('aaaaaaaa'));
  const hostile = Math.min(await timed('http://['), await timed('http://['));
  assert.ok(hostile < plain * 5 + 300, `hostile ${hostile.toFixed(0)} ms, plain ${plain.toFixed(0)} ms`);
});

test('a 429 or 503 with Retry-After whose JSON body the SDK reads as a JSON-RPC error (a message stream, any "error" field) comes back as HttpStatusError with its status and wait', async () => {
  // A gateway's JSON error in front of the agent: the SDK's stream request reads any body
  // with an `error` field as a JSON-RPC error, and its other requests any with `jsonrpc` too.
  const bodies = [
    { status: 503, body: '{"error":{"message":"agent overloaded"}}', stream: true },
    { status: 429, body: '{"error":{"message":"slow down","type":"rate_limit"}}', stream: true },
    {
      status: 503,
      body: '{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"overloaded"}}',
      stream: false,
    },
  ];
  for (const { status, body, stream } of bodies) {
    const reply = () =>
      new Response(body, { status, headers: { 'content-type': 'application/json', 'retry-after': '7' } });
    const method = stream ? 'SendStreamingMessage' : 'SendMessage';
    await withApp(answering(method, reply, streamingCard), async ({ origin }) => {
      const client = await createA2AClient(origin, { policy: quickPolicy(1) });
      const error = await (async () => {
        if (!stream) return client.sendMessage(userMessage('hi'));
        for await (const _ of client.sendMessageStream(userMessage('hi'))) {
          // The stream fails before its first event.
        }
      })().catch((e: unknown) => e);
      assert.ok(error instanceof HttpStatusError, `${method} ${status}: ${String(error)}`);
      assert.equal(error.status, status);
      assert.equal(error.retryAfterMs, 7000);
      assert.equal((error.cause as Error).name, 'JsonRpcTransportError', 'the SDK’s error is the cause');
    });
  }
});

test('a 503 whose JSON error body is the same as an earlier 429’s comes back with its own status and no wait, not the 429’s (a stream, a JSON-RPC call, an A2A 0.3 REST call)', async () => {
  // A gateway answers every refusal with the same body: the SDK's error then names no
  // status, and the last matching failure (this call's) is the one it stands for.
  const bodies = [
    { body: '{"error":{"message":"busy"}}', method: 'SendStreamingMessage' },
    { body: '{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"busy"}}', method: 'SendMessage' },
    { body: '{"code":-32000,"message":"busy"}', method: 'legacy REST' },
  ];
  for (const { body, method } of bodies) {
    let calls = 0;
    const reply = () =>
      calls++ === 0
        ? new Response(body, {
            status: 429,
            headers: { 'content-type': 'application/json', 'retry-after': '30' },
          })
        : new Response(body, { status: 503, headers: { 'content-type': 'application/json' } });
    const legacy = new Hono()
      .get('/.well-known/agent-card.json', (c) =>
        c.json(legacyCard(c.req.url, 'legacy', '/rest', 'HTTP+JSON')),
      )
      .all('/rest/*', reply);
    const app = method === 'legacy REST' ? legacy : answering(method, reply, streamingCard);
    await withApp(app, async ({ origin }) => {
      const client = await createA2AClient(origin, { policy: quickPolicy(1) });
      const call = async () => {
        if (method === 'SendMessage') return client.sendMessage(userMessage('hi'));
        if (method === 'legacy REST') return client.getTask({ id: 'task-1' } as never);
        for await (const _ of client.sendMessageStream(userMessage('hi'))) {
          // The stream fails before its first event.
        }
      };
      const first = await call().catch((e: unknown) => e);
      assert.ok(first instanceof HttpStatusError && first.status === 429, `${method}: ${String(first)}`);
      const error = await call().catch((e: unknown) => e);
      assert.ok(error instanceof HttpStatusError, `${method}: ${String(error)}`);
      assert.equal(error.status, 503, method);
      assert.equal(error.retryAfterMs, undefined, method);
    });
  }
});

test('two concurrent calls refused with one JSON error body, a 429 asking 30 s and a 503: the 429’s caller is never told to wait less than its agent asked', async () => {
  // A gateway answers every refusal with one body, so the SDK's error names no status. The
  // 429's body ends only after the 503 was answered: its failure is not the latest one.
  const body = '{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"busy"}}';
  let answeredUnavailable: () => void = () => {};
  const unavailableSent = new Promise<void>((resolve) => {
    answeredUnavailable = resolve;
  });
  const app = agentApp(newSeen());
  const gateway = {
    async fetch(request: Request): Promise<Response> {
      const text = request.method === 'POST' ? await request.clone().text() : '';
      if (!text.includes('"SendMessage"')) return app.fetch(request);
      if (!text.includes('limited')) {
        setTimeout(answeredUnavailable, 100);
        return new Response(body, { status: 503, headers: { 'content-type': 'application/json' } });
      }
      const slow = new ReadableStream<Uint8Array>({
        async start(controller) {
          controller.enqueue(new TextEncoder().encode(`${body}${' '.repeat(4096)}`));
          await unavailableSent;
          controller.close();
        },
      });
      return new Response(slow, {
        status: 429,
        headers: { 'content-type': 'application/json', 'retry-after': '30' },
      });
    },
  };
  await withApp(gateway, async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: quickPolicy(1) });
    const limited = client.sendMessage(userMessage('limited')).catch((e: unknown) => e);
    // Sent once the 429 has arrived.
    await new Promise((resolve) => setTimeout(resolve, 50));
    const unavailable = await client.sendMessage(userMessage('unavailable')).catch((e: unknown) => e);
    const error = await limited;
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.ok(
      (error.retryAfterMs ?? 0) > 29_000,
      `the 429's caller got ${error.status}, wait ${error.retryAfterMs}`,
    );
    assert.ok(unavailable instanceof HttpStatusError, String(unavailable));
  });
});

test('a JSON-RPC error an agent answers with 200 passes through as the SDK’s error, even after a failure with the same message', async () => {
  let calls = 0;
  const app = answeringPosts(agentApp(newSeen()), '"SendMessage"', () =>
    calls++ === 0
      ? new Response('{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"busy"}}', {
          status: 503,
          headers: { 'content-type': 'application/json', 'retry-after': '7' },
        })
      : Response.json({ jsonrpc: '2.0', id: 2, error: { code: -32000, message: 'busy' } }),
  );
  await withApp(app, async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: quickPolicy(1) });
    await assert.rejects(client.sendMessage(userMessage('a')), HttpStatusError);
    const error = await client.sendMessage(userMessage('b')).catch((e: unknown) => e);
    assert.ok(!(error instanceof HttpStatusError), String(error));
    assert.equal((error as Error).name, 'JsonRpcTransportError');
  });
});

/** An A2A 0.3 agent card fetched from `cardUrl`, naming `path` on its origin with `transport`. */
function legacyCard(cardUrl: string, name: string, path: string, transport: string) {
  return {
    name,
    version: '1.0.0',
    protocolVersion: '0.3.0',
    url: `${new URL(cardUrl).origin}${path}`,
    preferredTransport: transport,
    capabilities: {},
    skills: [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
  };
}

/** An A2A 0.3 agent on the REST binding whose every call is answered `status` with `body`. */
function legacyRestAgent(status: number, body: object, headers: Record<string, string> = {}) {
  const app = new Hono();
  app.get('/.well-known/agent-card.json', (c) =>
    c.json(legacyCard(c.req.url, 'legacy-rest-agent', '/rest', 'HTTP+JSON')),
  );
  app.all('/rest/*', (c) => c.json(body, status as 503, headers));
  return app;
}

test('an A2A 0.3 REST agent’s 503 with a {code, message} body comes back as HttpStatusError with its Retry-After', async () => {
  const bodies = [
    { code: 503, message: 'unavailable' },
    { code: -32000, message: 'overloaded', data: { queue: 'full' } },
  ];
  for (const body of bodies) {
    await withApp(legacyRestAgent(503, body, { 'retry-after': '7' }), async (app) => {
      const client = await createA2AClient(app.origin, {
        policy: definePolicy({ retry: false, breaker: false }),
      });
      const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.status, 503);
      assert.equal(error.retryAfterMs, 7000);
      assert.match((error.cause as Error).message, /^REST error: /, 'the SDK’s error is the cause');
    });
  }
});

test('createA2AClient refuses an A2A 0.3 card the SDK cannot translate (no defaultInputModes, a skill without tags, an unknown security scheme type, extensions not a list) with AgentCardError, not the SDK’s RequestMalformedError or TypeError', async () => {
  const legacy = (origin: string) => ({
    name: 'legacy-agent',
    version: '1.0.0',
    protocolVersion: '0.3.0',
    url: `${origin}/a2a`,
    preferredTransport: 'JSONRPC',
    capabilities: {},
    skills: [{ id: 'echo', name: 'Echo', tags: [] }],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
  });
  const breaks: [string, (card: ReturnType<typeof legacy>) => object][] = [
    ['defaultInputModes', ({ defaultInputModes: _, ...card }) => card],
    ['skill.tags', (card) => ({ ...card, skills: [{ id: 'echo', name: 'Echo' }] })],
    ['security scheme', (card) => ({ ...card, securitySchemes: { key: { type: 'bogus' } } })],
    // The SDK's own TypeError: `compat.extensions.map is not a function`.
    ['capabilities.extensions', (card) => ({ ...card, capabilities: { extensions: 'all' } })],
  ];
  for (const [what, broken] of breaks) {
    const app = agentApp(newSeen(), [], (c) => Response.json(broken(legacy(new URL(c.req.url).origin))));
    await withApp(app, async ({ origin }) => {
      // resolveAgentCard checks what both versions require, and takes these cards.
      assert.equal((await resolveAgentCard(origin)).name, 'legacy-agent');
      const error = await createA2AClient(origin, { policy: quickPolicy() }).catch((e: unknown) => e);
      assert.ok(error instanceof AgentCardError, `${what}: ${String(error)}`);
      assert.equal(error.code, 'AGENT_CARD_INVALID');
      assert.match(error.message, new RegExp(`^agent card at ${origin}/\\.well-known/agent-card\\.json `));
      assert.equal(error.issues.length, 1);
    });
  }
});

test('an A2A 0.3 REST agent’s typed error (TaskNotFound, 404) still passes through as the SDK’s error', async () => {
  await withApp(legacyRestAgent(404, { code: -32001, message: 'Task not found' }), async (app) => {
    const client = await createA2AClient(app.origin, {
      policy: definePolicy({ retry: false, breaker: false }),
    });
    const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
    assert.ok(!(error instanceof HttpStatusError), String(error));
    assert.equal((error as Error).name, 'TaskNotFoundError');
  });
});

test('a caller’s signal aborts createA2AClient while its card GET waits out a Retry-After or never answers, with its own reason', async () => {
  const slow = always({ status: 503, headers: { 'retry-after': '30' }, body: 'busy' });
  for (const [handler, policy] of [
    [slow, definePolicy({ breaker: false })],
    [always({ hang: true }), undefined],
  ] as const) {
    await withServer(handler, async (server) => {
      const reason = new Error('the user left');
      const controller = new AbortController();
      setTimeout(() => controller.abort(reason), 50);
      const started = Date.now();
      const error = await createA2AClient(server.origin, { policy, signal: controller.signal }).catch(
        (e: unknown) => e,
      );
      assert.equal(error, reason, String(error));
      assert.ok(Date.now() - started < 2000, `took ${Date.now() - started} ms`);
    });
  }
});

test('createA2AClient refuses a signal that is not an AbortSignal with a TypeError naming it', async () => {
  await assert.rejects(
    createA2AClient('http://127.0.0.1:9/', { signal: 'stop' as never }),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, 'error instanceof TypeError');
      assert.match(error.message, /createA2AClient\(\)\.signal: must be an AbortSignal/);
      return true;
    },
  );
});

test('a message stream cut past maxResponseBytes still delivers the events that ended before the cut in the same read: the task and its id', async () => {
  const LIMIT = 1024;
  // The task event and the start of an oversized artifact event, in one write.
  const answer = () => {
    const task = {
      jsonrpc: '2.0',
      id: 1,
      result: { task: { id: 'task-42', contextId: 'ctx-1', status: { state: 'TASK_STATE_WORKING' } } },
    };
    const text = `data: ${JSON.stringify(task)}\n\ndata: {"jsonrpc":"2.0","id":1,"result":"${'x'.repeat(200_000)}`;
    return new Response(text, { headers: { 'content-type': 'text/event-stream' } });
  };
  await withApp(answering('SendStreamingMessage', answer, streamingCard), async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: quickPolicy(1), maxResponseBytes: LIMIT });
    const events: unknown[] = [];
    const error = await (async () => {
      for await (const event of client.sendMessageStream(userMessage('hi'))) events.push(event);
    })().catch((e: unknown) => e);
    assert.ok(error instanceof BreakwaterError, String(error).slice(0, 300));
    assert.equal(error.code, 'RESPONSE_TOO_LARGE');
    assert.equal(events.length, 1, 'the task event that ended before the cut');
    assert.match(JSON.stringify(events[0]), /task-42/);
  });
});

/**
 * A streaming agent on a plain node:http server: its card, and every message stream
 * answered with a working task's event, then `then` (the stream breaks, or stalls).
 */
function streamingAgent(then: { reset: 'mid-body' } | { stall: 'mid-body' }): Handler {
  const task = {
    jsonrpc: '2.0',
    id: 1,
    result: { task: { id: 'task-42', contextId: 'ctx-1', status: { state: 'TASK_STATE_WORKING' } } },
  };
  return (req) => {
    if (req.method !== 'GET') {
      return {
        ...then,
        headers: { 'content-type': 'text/event-stream' },
        body: `data: ${JSON.stringify(task)}\n\n`,
      };
    }
    const card = cardFor(`http://${req.headers.host}`);
    const body = JSON.stringify({ ...card, capabilities: { ...card.capabilities, streaming: true } });
    return { headers: { 'content-type': 'application/json' }, body };
  };
}

test('a message stream whose connection breaks after its first event fails with a NetworkError in the response phase, maybe sent, naming the request, not the runtime’s raw error', async () => {
  await withServer(streamingAgent({ reset: 'mid-body' }), async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: definePolicy({ name: 'echo', retry: false }) });
    const events: unknown[] = [];
    const error = await (async () => {
      for await (const event of client.sendMessageStream(userMessage('hi'))) events.push(event);
    })().catch((e: unknown) => e);
    assertBrokenAnswer(error, '/a2a', 'echo');
    assert.equal(events.length, 1, 'the event sent before the break');
  });
});

test('a caller’s abort of a message stream mid-way comes back as its own reason, never wrapped', async () => {
  await withServer(streamingAgent({ stall: 'mid-body' }), async ({ origin }) => {
    const client = await createA2AClient(origin, { policy: definePolicy({ name: 'echo' }) });
    const controller = new AbortController();
    // A reason that looks like a network failure: still the caller's, never a NetworkError.
    const reason = Object.assign(new Error('the user left'), { code: 'ECONNRESET' });
    const error = await (async () => {
      for await (const _ of client.sendMessageStream(userMessage('hi'), { signal: controller.signal })) {
        controller.abort(reason);
      }
    })().catch((e: unknown) => e);
    assert.equal(error, reason);
  });
});

test('a 429 or 503 with Retry-After whose body (JSON or an event stream) breaks mid-read fails a message stream or a resubscribe (A2A 1.0 and 0.3) with HttpStatusError keeping its status and wait, the NetworkError naming the request as its cause', async () => {
  const cases = [
    { status: 503, type: 'application/json', body: '{"error":', legacy: false, resubscribe: false },
    { status: 429, type: 'text/event-stream', body: 'data: {"jsonrpc":', legacy: false, resubscribe: true },
    { status: 503, type: 'application/json', body: '{"error":', legacy: true, resubscribe: false },
    { status: 429, type: 'text/event-stream', body: 'event: err', legacy: true, resubscribe: true },
    // No HTTP failure: the read's error as it is.
    { status: 600, type: 'application/json', body: '{"error":', legacy: false, resubscribe: false },
  ];
  for (const { status, type, body, legacy, resubscribe } of cases) {
    const what = `${status} ${type}${legacy ? ' (A2A 0.3)' : ''}${resubscribe ? ' resubscribe' : ''}`;
    await withServer(
      (req) => {
        if (req.method === 'GET') {
          const origin = `http://${req.headers.host}`;
          const card = legacy
            ? {
                ...cardFor(origin),
                supportedInterfaces: undefined,
                protocolVersion: '0.3.0',
                url: `${origin}/a2a`,
              }
            : cardFor(origin);
          const json = JSON.stringify({ ...card, capabilities: { ...card.capabilities, streaming: true } });
          return { headers: { 'content-type': 'application/json' }, body: json };
        }
        // The SDK reads a failure's whole body into its error; this one breaks after its start.
        return { reset: 'mid-body', status, headers: { 'content-type': type, 'retry-after': '7' }, body };
      },
      async ({ origin }) => {
        const client = await createA2AClient(origin, {
          policy: definePolicy({ name: 'echo', retry: false }),
        });
        const stream = resubscribe
          ? client.resubscribeTask({ id: 'task-42' } as never)
          : client.sendMessageStream(userMessage('hi'));
        const error = await (async () => {
          for await (const _ of stream) {
          }
        })().catch((e: unknown) => e);
        if (status > 599) return assertBrokenAnswer(error, '/a2a', 'echo');
        assert.ok(error instanceof HttpStatusError, `${what}: ${String(error)}`);
        assert.equal(error.status, status, what);
        assert.equal(error.retryAfterMs, 7000, what);
        assertBrokenAnswer(error.cause, '/a2a', 'echo');
      },
    );
  }
});

test('a 503 whose body quotes back the credentials a call sent (plain text, a JSON-RPC error) fails as HttpStatusError showing them nowhere: not in its message, its cause or its JSON', async () => {
  const TOKEN = 'tok-9f8e7d6c5b4a3210abcd';
  const bodies = [
    (auth: string) => `invalid credentials: ${auth}`,
    (auth: string) =>
      JSON.stringify({ jsonrpc: '2.0', id: 1, error: { code: -32000, message: `bad ${auth}` } }),
  ];
  for (const body of bodies) {
    await withServer(
      (req) => {
        if (req.method === 'GET') {
          const card = JSON.stringify(cardFor(`http://${req.headers.host}`));
          return { headers: { 'content-type': 'application/json' }, body: card };
        }
        return { status: 503, body: body(String(req.headers.authorization)) };
      },
      async ({ origin }) => {
        const client = await createA2AClient(origin, {
          policy: definePolicy({ name: 'echo', retry: false }),
        });
        // The SDK's way to send a credential: a service parameter (an interceptor's too) is a request header.
        const options = { serviceParameters: { authorization: `Bearer ${TOKEN}` } } as never;
        const error = await client.sendMessage(userMessage('hi'), options).catch((e: unknown) => e);
        // A JSON-RPC error body matches its snapshot (both hide the token): the status is kept.
        assert.ok(error instanceof HttpStatusError, String(error));
        assert.equal(error.status, 503);
        const cause = error.cause as Error;
        const seen = `${shown(error)} ${cause?.message} ${JSON.stringify(error)}`;
        assert.doesNotMatch(seen, new RegExp(TOKEN), seen);
      },
    );
  }
});

test('an agent’s typed JSON-RPC error answered 404, or in an event-stream body, reaches the SDK even when the policy keeps no body in its snapshots (capture.bodyBytes 0)', async () => {
  const notFound = '{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Task not found"}}';
  const bodies = [
    { type: 'application/json', bodyBytes: 0 },
    // Capture reads no event stream: its snapshot keeps no body at any bodyBytes.
    { type: 'text/event-stream', bodyBytes: 2048 },
  ];
  for (const { type, bodyBytes } of bodies) {
    const reply = () => new Response(notFound, { status: 404, headers: { 'content-type': type } });
    await withApp(answering('GetTask', reply), async ({ origin }) => {
      const policy = definePolicy({ retry: false, breaker: false, capture: { bodyBytes } });
      const client = await createA2AClient(origin, { policy });
      const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
      assert.equal((error as Error).name, 'TaskNotFoundError', `${type}: ${String(error)}`);
    });
  }
});

test('an agent’s failure body that stalls holds GetTask for capture.bodyWaitMs once, not once in the capture and again in the body cap', async () => {
  const waitMs = 500;
  await withApp(
    answering('GetTask', stalling(503, 'application/json', '{"error":"stuck')),
    async ({ origin }) => {
      const client = await clientWaiting(origin, waitMs);
      const started = performance.now();
      const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
      const took = performance.now() - started;
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.status, 503);
      assert.ok(took < waitMs * 1.5, `took ${Math.round(took)} ms for a ${waitMs} ms wait`);
    },
  );
});

test('an agent’s typed error answered 404 with a body longer than capture.bodyBytes (a stack trace in its data) still reaches the SDK: JSON-RPC, REST, 0.3 REST, 0.3 JSON-RPC', async () => {
  const trace = '    at TaskStore.load (/srv/agent/store.js:42:7)\n'.repeat(80);
  const jsonRpc = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    error: { code: -32001, message: 'Task not found', data: { trace } },
  });
  const rest = taskNotFound({ '@type': 'type.googleapis.com/google.rpc.DebugInfo', detail: trace });
  const apps = [
    answering(
      'GetTask',
      () => new Response(jsonRpc, { status: 404, headers: { 'content-type': 'application/json' } }),
    ),
    restAgent(404, rest),
    legacyRestAgent(404, { code: -32001, message: 'Task not found', data: { trace } }),
    legacyJsonRpcAgent(404, JSON.parse(jsonRpc)),
  ];
  for (const [i, app] of apps.entries()) {
    await withApp(app, async ({ origin }) => {
      const client = await createA2AClient(origin, {
        policy: definePolicy({ retry: false, breaker: false }),
      });
      const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
      assert.equal((error as Error).name, 'TaskNotFoundError', `${i}: ${String(error).slice(0, 300)}`);
    });
  }
});

test('a card asked for over https whose redirects pass through plain http is refused even when they end over https again: whoever answered the http hop chose the rest', async () => {
  const app = new Hono();
  // The https card's server sends the client to plain http; there, someone on the path
  // sends it on to an https server of their own, whose card names their endpoints.
  app.get('/.well-known/agent-card.json', (c) => c.redirect(`${new URL(c.req.url).origin}/hop`, 302));
  app.get('/hop', (c) => c.redirect('https://evil.test/card.json', 302));
  app.get('/cdn/card.json', (c) => c.json(cardFor('https://agent.test')));
  app.get('/card.json', (c) => c.json(cardFor('https://evil.test')));
  app.get('/moved/.well-known/agent-card.json', (c) => c.redirect('https://cdn.test/cdn/card.json', 301));
  await withApp(app, async ({ origin }) => {
    // A fetch that reaches the *.test hosts on the loopback app and follows redirects as
    // runtimes do (unless asked for 'manual'), telling its caller only the last URL.
    const viaLoopback: FetchLike = async (input, init) => {
      let url = String(input);
      for (let hop = 0; hop < 20; hop++) {
        const response = await globalThis.fetch(url.replace(/^https:\/\/[a-z]+\.test/, origin), {
          ...init,
          redirect: 'manual',
        });
        const location = response.headers.get('location');
        if (init?.redirect === 'manual' || location === null)
          return Object.defineProperties(response, { redirected: { value: hop > 0 }, url: { value: url } });
        await response.body?.cancel();
        url = new URL(location, url).href;
      }
      throw new TypeError('redirect count exceeded');
    };
    for (const policy of [undefined, quickPolicy()]) {
      await refusedAsRedirectedToHttp(viaLoopback, policy);
      // A redirect from https to https is followed as before.
      const moved = await resolveAgentCard('https://agent.test/moved/', { fetch: viaLoopback, policy });
      assert.equal(moved.supportedInterfaces?.[0]?.url, 'https://agent.test/a2a');
    }
  });
});

test('a card asked for over https that redirects to another origin gets there without the credentials the caller’s fetch adds (an auth() chain, a wrapper setting Authorization), with or without a policy, as fetch’s own redirects drop them', async () => {
  const app = new Hono();
  /** The Authorization each request for the card came with, by path. */
  const seen: [string, string | undefined][] = [];
  app.use(async (c, next) => {
    seen.push([new URL(c.req.url).pathname, c.req.header('authorization')]);
    await next();
  });
  app.get('/.well-known/agent-card.json', (c) => c.redirect('https://cdn.test/cdn/card.json', 302));
  app.get('/cdn/card.json', (c) => c.json(cardFor('https://agent.test')));
  await withApp(app, async ({ origin }) => {
    // Reaches the *.test hosts on the loopback app and follows redirects as runtimes do
    // (unless asked for 'manual'): Authorization is dropped on the way to another origin.
    const viaLoopback: FetchLike = async (input, init) => {
      let url = String(input);
      const headers = new Headers(init?.headers);
      for (let hop = 0; hop < 20; hop++) {
        const response = await globalThis.fetch(url.replace(/^https:\/\/[a-z]+\.test/, origin), {
          ...init,
          headers,
          redirect: 'manual',
        });
        const location = response.headers.get('location');
        if (init?.redirect === 'manual' || location === null)
          return Object.defineProperties(response, { redirected: { value: hop > 0 }, url: { value: url } });
        await response.body?.cancel();
        const next = new URL(location, url);
        if (next.origin !== new URL(url).origin) headers.delete('authorization');
        url = next.href;
      }
      throw new TypeError('redirect count exceeded');
    };
    const withToken: FetchLike = (input, init) => {
      const headers = new Headers(init?.headers);
      headers.set('authorization', 'Bearer sk-card-2');
      return viaLoopback(input, { ...init, headers });
    };
    const fetches: [FetchLike, ReturnType<typeof quickPolicy> | undefined][] = [
      [createFetch({ fetch: viaLoopback, use: [auth({ token: 'sk-card-1' })] }), undefined],
      [withToken, undefined],
      [withToken, quickPolicy()],
    ];
    for (const [fetch, policy] of fetches) {
      seen.length = 0;
      const card = await resolveAgentCard('https://agent.test/', { fetch, policy });
      assert.equal(card.supportedInterfaces?.[0]?.url, 'https://agent.test/a2a');
      assert.ok(
        seen.some(([path]) => path.startsWith('/cdn/')),
        'the card was read at the other origin',
      );
      for (const [path, authorization] of seen) {
        // The card's own origin (agent.test) serves /.well-known/, the other (cdn.test) /cdn/.
        if (path.startsWith('/cdn/')) assert.equal(authorization, undefined, `${path} got no token`);
        else assert.match(`${authorization}`, /^Bearer sk-card-/, `${path} got the token`);
      }
    }
  });
});

test('an agent’s answer that stalls under a 302 without Location (which fetch does not follow) is ended at capture.bodyWaitMs too: the SDK reads every answer that is not ok', async () => {
  await withApp(answering('GetTask', stalling(302, 'text/html', '<html>moved')), async ({ origin }) => {
    const client = await clientWaiting(origin, 100);
    const outcome = await settledWithin(2000, client.getTask({ id: 'task-1' } as never));
    assert.ok(outcome instanceof Error, String(outcome));
  });
});

/** An A2A 0.3 agent on the JSON-RPC binding whose every call is answered `status` with `body`. */
function legacyJsonRpcAgent(status: number, body: object) {
  const app = new Hono();
  app.get('/.well-known/agent-card.json', (c) =>
    c.json(legacyCard(c.req.url, 'legacy-json-rpc-agent', '/a2a', 'JSONRPC')),
  );
  app.post('/a2a', (c) => c.json(body, status as 404));
  return app;
}

test('an A2A 0.3 card that prefers gRPC names its gRPC target as its url (host:port, as the a2a-python gRPC samples do), and is taken: the client talks JSON-RPC to its other interface', async () => {
  const methods: string[] = [];
  const app = new Hono();
  app.get('/.well-known/agent-card.json', (c) =>
    c.json({
      ...legacyCard(c.req.url, 'dice', '/a2a', 'GRPC'),
      url: 'localhost:50051',
      additionalInterfaces: [{ url: `${new URL(c.req.url).origin}/a2a`, transport: 'JSONRPC' }],
    }),
  );
  app.post('/a2a', async (c) => {
    const request = (await c.req.json()) as { id: number; method: string };
    methods.push(request.method);
    return c.json({
      jsonrpc: '2.0',
      id: request.id,
      result: {
        kind: 'message',
        messageId: 'm-1',
        role: 'agent',
        parts: [{ kind: 'text', text: 'rolled 4' }],
      },
    });
  });
  await withApp(app, async ({ origin }) => {
    const card = await resolveAgentCard(origin);
    assert.equal(card.url, 'localhost:50051');
    const client = await createA2AClient(origin, { policy: quickPolicy() });
    await client.sendMessage(userMessage('roll'));
    assert.deepEqual(methods, ['message/send']);
    // Any other preferred transport's url is still checked, whatever its case.
    const refused = await resolveAgentCard(origin, {
      fetch: async () => Response.json({ ...card, preferredTransport: 'jsonrpc' }),
    }).catch((e: unknown) => e);
    assert.ok(refused instanceof AgentCardError, String(refused));
    assert.deepEqual(refused.issues, ['card.url: must be an http: or https: URL (got a string, not shown)']);
  });
});

test('AgentCardError keeps its class name in a minified bundle, also one that assigns class fields (useDefineForClassFields: false), and an error of the CommonJS build is an instance of the ESM build’s class', async () => {
  // As 01df373 and cd8091f for the core's errors: a minifier renames classes, so a name read
  // from the class said 'W', and the name match of instanceof across two copies of
  // breakwater (an ESM app, a CommonJS dependency) found no AgentCardError.
  type A2A = typeof import('../adapters/a2a/index.ts');
  const entry = 'adapters/a2a/index.ts';
  const external = ['@a2a-js/*'];
  await withBundle<A2A>(entry, { format: 'esm', minify: true, external }, (esm) =>
    // The CommonJS copy as TypeScript before ES2022, Angular or Babel's loose mode build
    // it: a static field is assigned, which threw on a function's read-only name.
    withBundle<A2A>(entry, { format: 'cjs', minify: true, external, assignClassFields: true }, (cjs) => {
      const request = {
        key: 'agent',
        method: 'GET',
        url: 'https://agent.example/.well-known/agent-card.json',
      };
      const error = new esm.AgentCardError('AGENT_CARD_INVALID', 'is not a usable agent card', request, [
        'name: required',
      ]);
      assert.equal(error.name, 'AgentCardError');
      assert.equal(error.toJSON().name, 'AgentCardError');
      assert.match(String(error), /^AgentCardError: agent card at https:\/\/agent\.example\//);
      const fromCjs = new cjs.AgentCardError('AGENT_CARD_NOT_JSON', 'is not JSON', request);
      assert.equal(fromCjs.name, 'AgentCardError');
      assert.notEqual(esm.AgentCardError, cjs.AgentCardError);
      assert.ok(fromCjs instanceof esm.AgentCardError, 'fromCjs instanceof esm.AgentCardError');
      assert.equal(new Error('x') instanceof esm.AgentCardError, false);
    }),
  );
});

test('an A2A 0.3 card’s preferredTransport and additionalInterfaces are typed as checked, and createA2AClient takes preferredTransports written as const or held readonly', async () => {
  const methods: string[] = [];
  const app = new Hono();
  app.get('/.well-known/agent-card.json', (c) =>
    c.json({
      ...legacyCard(c.req.url, 'echo-03', '/rest', 'HTTP+JSON'),
      additionalInterfaces: [{ url: `${new URL(c.req.url).origin}/a2a`, transport: 'JSONRPC' }],
    }),
  );
  app.post('/a2a', async (c) => {
    const request = (await c.req.json()) as { id: number; method: string };
    methods.push(request.method);
    return c.json({
      jsonrpc: '2.0',
      id: request.id,
      result: { kind: 'message', messageId: 'm-1', role: 'agent', parts: [{ kind: 'text', text: 'hi' }] },
    });
  });
  await withApp(app, async ({ origin }) => {
    const card = await resolveAgentCard(origin);
    // No cast: the fields the schema checks are typed.
    const preferred: string | undefined = card.preferredTransport;
    const other: string | undefined = card.additionalInterfaces?.[0]?.transport;
    assert.deepEqual([preferred, other], ['HTTP+JSON', 'JSONRPC']);
    const held: readonly string[] = Object.freeze(['JSONRPC']);
    for (const preferredTransports of [['JSONRPC'] as const, held]) {
      const client = await createA2AClient(origin, { policy: quickPolicy(), preferredTransports });
      await client.sendMessage(userMessage('hi'));
    }
    // JSON-RPC chosen over the card's preferred REST binding, both times.
    assert.deepEqual(methods, ['message/send', 'message/send']);
  });
});
