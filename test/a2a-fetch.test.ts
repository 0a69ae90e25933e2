import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Hono } from 'hono';
import { AgentCardError, a2aFetch, a2aIdempotent, resolveAgentCard } from '../adapters/a2a/index.ts';
import { captureStatus } from '../src/capture.ts';
import { createFetch } from '../src/chain.ts';
import { TimeoutError } from '../src/errors.ts';
import { definePolicy } from '../src/policy.ts';
import { retry } from '../src/retry.ts';
import { withApp } from './helpers/hono-server.ts';

const fast = { initialMs: 5, maxMs: 20, jitter: 'none' } as const;

/** A JSON-RPC endpoint that answers the first POST 503 and records every body it got. */
function flakyEndpoint(bodies: string[]) {
  const app = new Hono();
  app.post('/rpc', async (c) => {
    bodies.push(await c.req.text());
    if (bodies.length === 1) return c.json({ error: { message: 'busy' } }, 503);
    return c.json({ jsonrpc: '2.0', id: 1, result: {} });
  });
  return app;
}

const chain = () => createFetch({ use: [a2aIdempotent(), retry({ backoff: fast }), captureStatus()] });

test('an A2A 0.3 tasks/get answered 503 is resent', async () => {
  const bodies: string[] = [];
  await withApp(flakyEndpoint(bodies), async ({ origin }) => {
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tasks/get', params: { id: 't1' } });
    const response = await chain()(`${origin}/rpc`, { method: 'POST', body });
    await response.text();
    assert.equal(response.status, 200);
    assert.equal(bodies.length, 2);
  });
});

test('an A2A 0.3 message/send answered 503 is not resent', async () => {
  const bodies: string[] = [];
  await withApp(flakyEndpoint(bodies), async ({ origin }) => {
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'message/send', params: {} });
    const response = await chain()(`${origin}/rpc`, { method: 'POST', body });
    await response.text();
    assert.equal(response.status, 503);
    assert.equal(bodies.length, 1);
  });
});

test('a body that is not JSON-RPC passes through untouched and is not resent', async () => {
  const bodies: string[] = [];
  await withApp(flakyEndpoint(bodies), async ({ origin }) => {
    const body = '{"method":"GetTask"'; // cut short: not JSON
    const response = await chain()(`${origin}/rpc`, { method: 'POST', body });
    await response.text();
    assert.equal(response.status, 503);
    assert.deepEqual(bodies, [body]);
  });
});

test('a batch is resent only when every call in it reads', async () => {
  const mixed: string[] = [];
  const reads: string[] = [];
  const batch = (second: string) =>
    JSON.stringify([
      { jsonrpc: '2.0', id: 1, method: 'GetTask', params: {} },
      { jsonrpc: '2.0', id: 2, method: second, params: {} },
    ]);
  await withApp(flakyEndpoint(mixed), async ({ origin }) => {
    await (await chain()(`${origin}/rpc`, { method: 'POST', body: batch('SendMessage') })).text();
  });
  await withApp(flakyEndpoint(reads), async ({ origin }) => {
    await (await chain()(`${origin}/rpc`, { method: 'POST', body: batch('ListTasks') })).text();
  });
  assert.equal(mixed.length, 1);
  assert.equal(reads.length, 2);
});

test('a card body that stalls fails with TimeoutError after bodyTimeoutMs', async () => {
  const app = new Hono();
  app.get('/.well-known/agent-card.json', () => {
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{"name":'));
        // Never more, never closed.
      },
    });
    return new Response(body, { headers: { 'content-type': 'application/json' } });
  });
  await withApp(app, async ({ origin }) => {
    const started = Date.now();
    const error = await resolveAgentCard(origin, { bodyTimeoutMs: 100 }).catch((e: unknown) => e);
    assert.ok(error instanceof TimeoutError, String(error));
    assert.equal(error.ms, 100);
    assert.ok(Date.now() - started < 3000, `took ${Date.now() - started} ms`);
  });
});

test('resolveAgentCard rejects bad options with a TypeError naming each path', async () => {
  const error = await resolveAgentCard('http://127.0.0.1:9/', {
    maxBytes: -1,
    path: 5,
    bogus: true,
  } as never).catch((e: unknown) => e);
  assert.ok(error instanceof TypeError, String(error));
  assert.match(error.message, /resolveAgentCard\(\)\.maxBytes: must be at least 1/);
  assert.match(error.message, /resolveAgentCard\(\)\.path: must be a string/);
  assert.match(error.message, /unknown option "bogus"/);
});

test('a2aFetch rejects a non-policy and bad options with a TypeError naming each path', () => {
  assert.throws(() => a2aFetch({} as never), /a2aFetch\(policy\): must be a policy from definePolicy\(\)/);
  const policy = definePolicy({});
  assert.throws(
    () => a2aFetch(policy, { key: '', use: [], onEvent: 'log' } as never),
    (error: unknown) =>
      error instanceof TypeError &&
      /a2aFetch\(\)\.key: must be a non-empty string/.test(error.message) &&
      /a2aFetch\(\)\.onEvent: must be a function/.test(error.message) &&
      /unknown option "use"/.test(error.message),
  );
  assert.throws(() => a2aFetch(policy, null as never), TypeError);
  assert.equal(typeof a2aFetch(policy), 'function');
});

test('resolveAgentCard refuses a base URL that is not http(s) before sending anything', async () => {
  for (const base of ['ftp://agent.example/', 'file:///etc/', 'not a url']) {
    const error = await resolveAgentCard(base).catch((e: unknown) => e);
    assert.ok(error instanceof TypeError, `${base}: ${String(error)}`);
    assert.match(error.message, /must be an absolute http\(s\) URL/);
  }
});

/** The mark a2aIdempotent() left on the last call through `probe` (no request leaves the process). */
let idempotent: boolean | undefined;
const probe = createFetch({
  fetch: async () => new Response('{}'),
  use: [
    a2aIdempotent(),
    (call, next) => {
      idempotent = call.idempotent;
      return next(call);
    },
  ],
});

/** Whether a2aIdempotent() marks a call with this init. */
async function marked(
  init: RequestInit,
  input: string | Request = 'http://agent.test/a2a',
): Promise<boolean> {
  idempotent = undefined;
  await probe(input, init).catch(() => undefined);
  return idempotent === true;
}

const rpc = (method: unknown, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: {}, ...extra });

test('reads are marked in A2A 1.0 and 0.3 names alike; writes in either never are', async () => {
  for (const method of ['GetTask', 'ListTasks', 'SubscribeToTask', 'tasks/get', 'tasks/resubscribe']) {
    assert.equal(await marked({ method: 'POST', body: rpc(method) }), true, method);
  }
  for (const method of [
    'SendMessage',
    'SendStreamingMessage',
    'CancelTask',
    'CreateTaskPushNotificationConfig',
    'DeleteTaskPushNotificationConfig',
    'message/send',
    'message/stream',
    'tasks/cancel',
    'tasks/pushNotificationConfig/set',
    'tasks/pushNotificationConfig/delete',
  ]) {
    assert.equal(await marked({ method: 'POST', body: rpc(method) }), false, method);
  }
});

test('method names match exactly: odd casing and whitespace are not reads', async () => {
  for (const method of ['gettask', 'GETTASK', ' GetTask', 'GetTask ', 'Tasks/Get', 'tasks/get/']) {
    assert.equal(await marked({ method: 'POST', body: rpc(method) }), false, method);
  }
});

test('a body with a key given twice is never marked, whichever copy a server reads', async () => {
  const twice = '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{},"method":"GetTask"}';
  assert.equal(await marked({ method: 'POST', body: twice }), false);
  assert.equal(await marked({ method: 'POST', body: rpc('GetTask') }), true);
});

test('nested batches, non-JSON-RPC bodies and inherited methods are not marked', async () => {
  const read = { jsonrpc: '2.0', id: 1, method: 'GetTask', params: {} };
  assert.equal(await marked({ method: 'POST', body: JSON.stringify([[read]]) }), false);
  assert.equal(await marked({ method: 'POST', body: JSON.stringify([read, [read]]) }), false);
  assert.equal(await marked({ method: 'POST', body: '{"method":"GetTask"}' }), false);
  assert.equal(
    await marked({ method: 'POST', body: '{"jsonrpc":"2.0","__proto__":{"method":"GetTask"}}' }),
    false,
  );
  const proto = Object.prototype as { method?: unknown };
  proto.method = 'GetTask';
  try {
    assert.equal(await marked({ method: 'POST', body: '{"jsonrpc":"2.0","id":1,"result":{}}' }), false);
  } finally {
    delete proto.method;
  }
});

test('non-string bodies, Request inputs and throwing getters pass through unmarked, never crashing the middleware', async () => {
  const body = rpc('GetTask');
  const form = new FormData();
  form.set('body', body);
  for (const other of [new TextEncoder().encode(body), new Blob([body]), form, new ReadableStream()]) {
    assert.equal(await marked({ method: 'POST', body: other, duplex: 'half' } as RequestInit), false);
  }
  assert.equal(await marked({}, new Request('http://agent.test/a2a', { method: 'POST', body })), false);
  const hostile = {
    method: 'POST',
    get body(): string {
      throw new Error('getter');
    },
  };
  idempotent = undefined;
  await probe('http://agent.test/a2a', hostile).catch(() => undefined);
  assert.equal(idempotent, false, 'a2aIdempotent threw instead of passing the call on');
});

test('an abort ends the card body read at once, even through a fetch that ignores the signal', async () => {
  const stalled = async () =>
    new Response(
      new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('{"name":'));
        },
      }),
    );
  const controller = new AbortController();
  const reason = new Error('user gave up');
  setTimeout(() => controller.abort(reason), 50);
  const started = Date.now();
  const error = await resolveAgentCard('http://agent.test/', {
    fetch: stalled,
    bodyTimeoutMs: 5000,
    signal: controller.signal,
  }).catch((e: unknown) => e);
  assert.equal(error, reason);
  assert.ok(Date.now() - started < 2000, `took ${Date.now() - started} ms`);
});

test('a card URL that does not parse is named in issues without its value (userinfo, query secrets)', async () => {
  const card = {
    name: 'leaky',
    version: '1',
    capabilities: {},
    skills: [],
    url: 'agent.example.com/a2a?api_key=SECRET-1',
    supportedInterfaces: [{ url: '//user:SECRET-2@host/a2a', protocolBinding: 'JSONRPC' }],
    additionalInterfaces: [{ url: 'https//host/a2a?token=SECRET-3', transport: 'JSONRPC' }],
  };
  const error = await resolveAgentCard('http://agent.test/', {
    fetch: async () => Response.json(card),
  }).catch((e: unknown) => e);
  assert.ok(error instanceof AgentCardError, String(error));
  assert.equal(error.code, 'AGENT_CARD_INVALID');
  assert.deepEqual([...error.issues].sort(), [
    'card.additionalInterfaces.0.url: must be an absolute URL (got a string, not shown)',
    'card.supportedInterfaces.0.url: must be an absolute URL (got a string, not shown)',
    'card.url: must be an absolute URL (got a string, not shown)',
  ]);
  assert.doesNotMatch(`${error.message} ${JSON.stringify(error)}`, /SECRET/);
});
