import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { Hono } from 'hono';
import { createA2AClient, resolveAgentCard } from '../adapters/a2a/index.ts';
import { HttpStatusError, NetworkError } from '../src/errors.ts';
import { definePolicy } from '../src/policy.ts';
import { withApp } from './helpers/hono-server.ts';

/** A port on 127.0.0.1 that nothing listens on: bound, then closed. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

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

test('a REST agent’s typed A2A error (TaskNotFound, 404) still passes through as the SDK’s error', async () => {
  const notFound = {
    code: 404,
    status: 'NOT_FOUND',
    message: 'no such task',
    details: [
      {
        '@type': 'type.googleapis.com/google.rpc.ErrorInfo',
        reason: 'TASK_NOT_FOUND',
        domain: 'a2a-protocol.org',
      },
    ],
  };
  await withApp(restAgent(404, notFound), async (app) => {
    const client = await createA2AClient(app.origin, { policy: definePolicy({ retry: false }) });
    const error = await client.getTask({ id: 'task-1' } as never).catch((e: unknown) => e);
    assert.ok(!(error instanceof HttpStatusError), String(error));
    assert.equal((error as Error).name, 'TaskNotFoundError');
  });
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
