import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { gzipSync } from 'node:zlib';
// @ts-types="@a2a-js/sdk/client"
import { DefaultAgentCardResolver, RestTransportFactory } from '@a2a-js/sdk/client';
import { Hono } from 'hono';
import { AgentCardError, a2aFetch, a2aIdempotent, resolveAgentCard } from '../adapters/a2a/index.ts';
import type { FetchLike } from '../src/call.ts';
import { captureStatus } from '../src/capture.ts';
import { createFetch } from '../src/chain.ts';
import { BreakwaterError, HttpStatusError, NetworkError, TimeoutError } from '../src/errors.ts';
import { definePolicy } from '../src/policy.ts';
import { retry } from '../src/retry.ts';
import { FLOOD_BYTES, flood } from './helpers/flood.ts';
import { withApp } from './helpers/hono-server.ts';
import { always, withServer } from './helpers/server.ts';

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

/** A minimal card that passes the checks, answered without a network. */
const minimalCard = async () =>
  Response.json({ name: 'a', version: '1', capabilities: {}, skills: [], url: 'http://agent.test/a2a' });

/**
 * Runs `fn` with `setTimeout` and `clearTimeout` recorded: the delay of every timer
 * started and the handles cleared. The originals are always put back.
 */
async function recordingTimers(
  fn: () => Promise<unknown>,
): Promise<{ started: { ms: unknown; handle: unknown }[]; cleared: Set<unknown> }> {
  const original = { setTimeout: globalThis.setTimeout, clearTimeout: globalThis.clearTimeout };
  const started: { ms: unknown; handle: unknown }[] = [];
  const cleared = new Set<unknown>();
  globalThis.setTimeout = ((callback: () => void, ms?: number) => {
    const handle = original.setTimeout(callback, ms);
    started.push({ ms, handle });
    return handle;
  }) as typeof setTimeout;
  globalThis.clearTimeout = ((handle: Parameters<typeof clearTimeout>[0]) => {
    cleared.add(handle);
    original.clearTimeout(handle);
  }) as typeof clearTimeout;
  try {
    await fn();
  } finally {
    globalThis.setTimeout = original.setTimeout;
    globalThis.clearTimeout = original.clearTimeout;
  }
  return { started, cleared };
}

test('a card server that accepts and never answers fails with TimeoutError after timeoutMs', async () => {
  await withServer(always({ hang: true }), async (server) => {
    const started = Date.now();
    const error = await resolveAgentCard(`${server.origin}/card.json?api_key=SECRET-1`, {
      path: '',
      timeoutMs: 150,
    }).catch((e: unknown) => e);
    assert.ok(error instanceof TimeoutError, String(error));
    assert.equal(error.scope, 'total');
    assert.equal(error.ms, 150);
    assert.equal(server.requests.length, 1);
    assert.ok(error.message.includes(`${server.origin}/card.json?api_key=`), error.message);
    assert.doesNotMatch(`${error.message} ${JSON.stringify(error)}`, /SECRET/);
    assert.ok(Date.now() - started < 3000, `took ${Date.now() - started} ms`);
  });
});

test('a fetch that ignores its signal still ends at the deadline, and the message hides userinfo and query values', async () => {
  const started = Date.now();
  const error = await resolveAgentCard('http://user:SECRET-1@agent.test/card.json?token=SECRET-2', {
    path: '',
    fetch: () => new Promise<Response>(() => {}),
    timeoutMs: 100,
  }).catch((e: unknown) => e);
  assert.ok(error instanceof TimeoutError, String(error));
  assert.ok(error.message.includes('http://agent.test/card.json?token='), error.message);
  assert.doesNotMatch(`${error.message} ${JSON.stringify(error)}`, /SECRET|user/);
  assert.ok(Date.now() - started < 3000, `took ${Date.now() - started} ms`);
});

test('without a policy the card resolution is bounded by a 10-second default deadline', async () => {
  let signal: AbortSignal | null | undefined;
  const { started } = await recordingTimers(() =>
    resolveAgentCard('http://agent.test/', {
      bodyTimeoutMs: 4322,
      fetch: async (_input, init) => {
        signal = init?.signal;
        return minimalCard();
      },
    }),
  );
  assert.ok(signal instanceof AbortSignal, 'the GET carries no signal');
  assert.deepEqual(
    started.map((timer) => timer.ms),
    [10_000, 4322],
  );
});

test('under a policy with timeouts its deadlines govern, and an explicit timeoutMs is added; with its timeouts off the default applies', async () => {
  const delays = async (options: Parameters<typeof resolveAgentCard>[1]) =>
    (
      await recordingTimers(() => resolveAgentCard('http://agent.test/', { ...options, fetch: minimalCard }))
    ).started
      .map((timer) => timer.ms)
      .filter((ms) => ms === 10_000 || ms === 4321);
  const withTimeouts = definePolicy({ retry: { attempts: 1 }, breaker: false });
  const withoutTimeouts = definePolicy({ retry: { attempts: 1 }, breaker: false, timeout: false });
  const body = { bodyTimeoutMs: 4322 };
  assert.deepEqual(await delays({ ...body, policy: withTimeouts }), []);
  assert.deepEqual(await delays({ ...body, policy: withTimeouts, timeoutMs: 4321 }), [4321]);
  assert.deepEqual(await delays({ ...body, policy: withoutTimeouts }), [10_000]);
});

test('under a policy, an explicit timeoutMs ends a card GET that never answers before the policy’s own timeouts', async () => {
  await withServer(always({ hang: true }), async (server) => {
    const policy = definePolicy({ name: 'agent', retry: { attempts: 1 }, breaker: false });
    const error = await resolveAgentCard(server.origin, { policy, timeoutMs: 150 }).catch((e: unknown) => e);
    assert.ok(error instanceof TimeoutError, String(error));
    assert.equal(error.scope, 'total');
    assert.equal(error.ms, 150);
    assert.match(error.message, /server "agent"/);
  });
});

test('the card deadlines are cleared on every path: a card, a failing status, a bad body, a network error, a timeout', async () => {
  const outcomes: FetchLike[] = [
    minimalCard,
    async () => new Response('gone', { status: 404 }),
    async () => new Response('<html>', { headers: { 'content-type': 'text/html' } }),
    async () => {
      throw new TypeError('fetch failed');
    },
    () => new Promise<Response>(() => {}),
  ];
  const results: unknown[] = [];
  const { started, cleared } = await recordingTimers(async () => {
    for (const fetch of outcomes) {
      const timeoutMs = fetch === outcomes[4] ? 50 : 4321;
      results.push(
        await resolveAgentCard('http://agent.test/', { fetch, timeoutMs, bodyTimeoutMs: 4322 }).catch(
          (e: unknown) => e,
        ),
      );
    }
  });
  assert.equal(typeof (results[0] as { name?: unknown }).name, 'string');
  assert.ok(results[1] instanceof HttpStatusError, String(results[1]));
  assert.ok(results[2] instanceof AgentCardError, String(results[2]));
  assert.ok(results[3] instanceof NetworkError, String(results[3]));
  assert.ok(results[4] instanceof TimeoutError, String(results[4]));
  const ours = started.filter((timer) => timer.ms === 4321 || timer.ms === 4322 || timer.ms === 50);
  assert.equal(ours.length, 7, 'one deadline per call, one body deadline per body read');
  for (const timer of ours) assert.ok(cleared.has(timer.handle), `a ${timer.ms} ms timer was left running`);
});

test('a long-lived caller signal keeps no listener from the resolver once the card resolves or fails', async () => {
  const controller = new AbortController();
  const signal = controller.signal;
  const listening = new Set<unknown>();
  const add = signal.addEventListener.bind(signal);
  const remove = signal.removeEventListener.bind(signal);
  signal.addEventListener = ((type: string, listener: EventListener) => {
    listening.add(listener);
    add(type, listener);
  }) as typeof signal.addEventListener;
  signal.removeEventListener = ((type: string, listener: EventListener) => {
    listening.delete(listener);
    remove(type, listener);
  }) as typeof signal.removeEventListener;
  await resolveAgentCard('http://agent.test/', { signal, fetch: minimalCard });
  await resolveAgentCard('http://agent.test/', {
    signal,
    fetch: async () => new Response('gone', { status: 404 }),
  }).catch(() => undefined);
  assert.equal(listening.size, 0);
});

test('a caller’s abort during a card GET that never answers comes back as its own reason', async () => {
  await withServer(always({ hang: true }), async (server) => {
    const reason = new Error('user gave up');
    const controller = new AbortController();
    setTimeout(() => controller.abort(reason), 50);
    const error = await resolveAgentCard(server.origin, { signal: controller.signal, timeoutMs: 5000 }).catch(
      (e: unknown) => e,
    );
    assert.equal(error, reason);
    const early = new Error('gave up before');
    const before = await resolveAgentCard(server.origin, { signal: AbortSignal.abort(early) }).catch(
      (e: unknown) => e,
    );
    assert.equal(before, early);
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

test('resolveAgentCard rejects a timeoutMs or bodyTimeoutMs that is not a usable timer delay', async () => {
  for (const ms of [0, -5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31, '100']) {
    for (const name of ['timeoutMs', 'bodyTimeoutMs']) {
      const error = await resolveAgentCard('http://127.0.0.1:9/', { [name]: ms } as never).catch(
        (e: unknown) => e,
      );
      assert.ok(error instanceof TypeError, `${name} ${String(ms)}: ${String(error)}`);
      assert.match(error.message, new RegExp(`resolveAgentCard\\(\\)\\.${name}: `));
    }
  }
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

test('an HTTP+JSON agent’s SubscribeToTask (the SDK’s bodiless POST …/tasks/{id}:subscribe) answered 503 is resent, as over JSON-RPC; its CancelTask is not', async () => {
  const seen: string[] = [];
  const app = new Hono();
  app.post('/rest/*', (c) => {
    const path = new URL(c.req.url).pathname;
    seen.push(path);
    if (seen.filter((p) => p === path).length === 1)
      return c.json({ error: { code: 503, message: 'restarting' } }, 503);
    const task = { id: 't1', contextId: 'c1', status: { state: 'TASK_STATE_WORKING' } };
    if (path.endsWith(':cancel')) return c.json(task);
    return c.body(`data: ${JSON.stringify({ task })}\n\n`, 200, { 'content-type': 'text/event-stream' });
  });
  await withApp(app, async ({ origin }) => {
    const fetchImpl = a2aFetch(definePolicy({ retry: { backoff: fast }, breaker: false })) as typeof fetch;
    const transport = await new RestTransportFactory({ fetchImpl }).create(`${origin}/rest`, {} as never);
    const events: unknown[] = [];
    for await (const event of transport.resubscribeTask({ id: 't1' } as never)) events.push(event);
    assert.equal(events.length, 1);
    assert.deepEqual(seen, ['/rest/tasks/t1:subscribe', '/rest/tasks/t1:subscribe']);
    const error = await transport.cancelTask({ id: 't1' } as never).catch((e: unknown) => e);
    assert.ok(error instanceof Error, String(error));
    assert.deepEqual(seen.slice(2), ['/rest/tasks/t1:cancel']);
  });
});

test('a POST is marked a subscribe only without a body and with :subscribe ending its path', async () => {
  assert.equal(await marked({ method: 'POST' }, 'http://agent.test/v1/tasks/t%3A1:subscribe'), true);
  assert.equal(await marked({ method: 'POST' }, 'http://agent.test/tenant/tasks/t1:subscribe?x=1'), true);
  assert.equal(await marked({ method: 'POST', body: '{}' }, 'http://agent.test/tasks/t1:subscribe'), false);
  assert.equal(await marked({ method: 'POST' }, 'http://agent.test/tasks/t1:subscribe/message:send'), false);
  assert.equal(await marked({ method: 'POST' }, 'http://agent.test/tasks/t1:cancel'), false);
  assert.equal(await marked({ method: 'POST' }, 'http://agent.test/message:send'), false);
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

test('a signal aborted before the call rejects with its reason and sends nothing, even through a fetch that ignores signals', async () => {
  let calls = 0;
  const fetch: FetchLike = async () => {
    calls++;
    return new Response('{}', { headers: { 'content-type': 'application/json' } });
  };
  const reason = new Error('the user left');
  await assert.rejects(
    resolveAgentCard('http://127.0.0.1:9/', { fetch, signal: AbortSignal.abort(reason) }),
    (error: unknown) => error === reason,
  );
  assert.equal(calls, 0);
});

test('where the global AbortSignal is a polyfill’s (React Native’s abort-controller: aborted and an abort event, no throwIfAborted() or reason), a caller’s signal resolves the card, and its abort ends the GET', async () => {
  class PolyfillSignal extends EventTarget {
    aborted = false;
  }
  const native = globalThis.AbortSignal;
  globalThis.AbortSignal = PolyfillSignal as never;
  try {
    const card = await resolveAgentCard('http://agent.test/', {
      signal: new PolyfillSignal() as never,
      fetch: minimalCard,
    });
    assert.equal(card.name, 'a');
    const signal = new PolyfillSignal();
    const hangs: FetchLike = () => new Promise(() => {});
    const gets = resolveAgentCard('http://agent.test/', { signal: signal as never, fetch: hangs });
    signal.aborted = true;
    signal.dispatchEvent(new Event('abort'));
    const error = await gets.catch((e: unknown) => e);
    assert.equal((error as Error).name, 'AbortError', String(error));
  } finally {
    globalThis.AbortSignal = native;
  }
});

test('a card body that breaks mid-way is a NetworkError in the response phase, maybe sent', async () => {
  await withServer(
    always({
      reset: 'mid-body',
      headers: { 'content-type': 'application/json', 'content-length': '4000' },
      body: '{"name":"a',
    }),
    async (server) => {
      const error = await resolveAgentCard(server.origin).catch((e: unknown) => e);
      assert.ok(error instanceof NetworkError, String(error));
      assert.equal(error.phase, 'response');
      assert.equal(error.sent, 'maybe');
    },
  );
});

test('a failure whose reason phrase is not Latin-1 once decoded (a French "503 Réessayez plus tard") is handed on with its status and body, not a TypeError', async () => {
  // node:http sends the phrase as Latin-1 bytes; Node's fetch decodes them as UTF-8 (é
  // becomes U+FFFD), and a Response cannot be built with such a statusText.
  const server = createServer((_request, response) => {
    response.writeHead(503, 'Réessayez plus tard', { 'content-type': 'application/json' });
    response.end('{"error":{"message":"maintenance"}}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/rpc`;
    const plain = await fetch(url);
    await plain.text();
    const fetchImpl = a2aFetch(definePolicy({ retry: false, breaker: false }));
    const response = await fetchImpl(url, {
      method: 'POST',
      body: '{"jsonrpc":"2.0","id":1,"method":"GetTask"}',
    });
    assert.equal(response.status, 503);
    assert.equal(response.statusText, plain.statusText, 'the phrase as this runtime’s fetch gives it');
    assert.equal(await response.text(), '{"error":{"message":"maintenance"}}');
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

test('a failure body in another charset (ISO-8859-1, UTF-16) reaches the SDK’s text() decoded in it, alike short or past capture.bodyBytes', async () => {
  // A short body was the snapshot's and a long JSON one read whole: both as UTF-8 ('Requ\uFFFDte').
  const said = (detail: string) => JSON.stringify({ error: { message: 'Requête refusée', detail } });
  const bodies = { 'iso-8859-1': 'latin1', 'utf-16le': 'utf16le' } as const;
  for (const [charset, encoding] of Object.entries(bodies))
    for (const detail of ['', 'd'.repeat(4096)]) {
      const app = new Hono();
      app.post(
        '/rpc',
        () =>
          new Response(new Uint8Array(Buffer.from(said(detail), encoding)), {
            status: 503,
            headers: { 'content-type': `application/json; charset=${charset}` },
          }),
      );
      await withApp(app, async ({ origin }) => {
        const fetchImpl = a2aFetch(definePolicy({ retry: false, breaker: false }));
        const response = await fetchImpl(`${origin}/rpc`, { method: 'POST', body: '{}' });
        assert.equal(
          await response.text(),
          said(detail),
          `${charset}, ${detail.length} characters of detail`,
        );
      });
    }
});

test('a failure body cut for the SDK carries no Content-Length, so a proxy passing the response on does not announce bytes that never come', async () => {
  const big = 'x'.repeat(200 * 1024);
  await withServer(
    always({
      status: 502,
      headers: { 'content-type': 'text/plain', 'content-length': String(big.length) },
      body: big,
    }),
    async (server) => {
      const fetchImpl = a2aFetch(definePolicy({ retry: false, breaker: false }));
      const response = await fetchImpl(`${server.origin}/rpc`, {
        method: 'POST',
        body: '{"jsonrpc":"2.0","id":1,"method":"GetTask"}',
      });
      assert.equal(response.status, 502);
      // Its bytes: text() gives the SDK the capture snapshot's body.
      const body = await response.arrayBuffer();
      assert.equal(body.byteLength, 64 * 1024, 'cut at 64 KiB');
      assert.equal(response.headers.get('content-length'), null);
      assert.equal(response.headers.get('content-type'), 'text/plain', 'the other headers are kept');
    },
  );
});

/** What a call through `a2aFetch(policy, { maxResponseBytes })` to a server answering `answer` reads, or fails with. */
async function readThrough(answer: () => Response, maxResponseBytes?: number): Promise<unknown> {
  const app = new Hono();
  app.post('/rpc', async (c) => {
    await c.req.text();
    return answer();
  });
  return withApp(app, async ({ origin }) => {
    const fetch = a2aFetch(definePolicy({ name: 'agent', retry: false, breaker: false }), {
      maxResponseBytes,
    });
    // Asking for a stream, as the SDK's stream calls do: an SSE answer is then limited per event.
    const headers = { accept: 'text/event-stream' };
    const response = await fetch(`${origin}/rpc`, { method: 'POST', body: '{}', headers });
    return response.text().catch((error: unknown) => error);
  });
}

/** Whether `error` is the limit's error, naming the request and the limit. */
function tooLarge(error: unknown, limit: number): boolean {
  return (
    error instanceof BreakwaterError &&
    error.code === 'RESPONSE_TOO_LARGE' &&
    error.message.includes(`/rpc (server "agent")`) &&
    error.message.includes(`${limit}-byte limit (maxResponseBytes)`)
  );
}

test('a JSON answer that never ends fails past maxResponseBytes with RESPONSE_TOO_LARGE, and the server stops being read', async () => {
  const LIMIT = 256 * 1024;
  const { answer, produced } = flood('{"jsonrpc":"2.0","id":1,"result":"', 'x', {
    'content-type': 'application/json',
  });
  const error = await readThrough(answer, LIMIT);
  assert.ok(tooLarge(error, LIMIT), String(error).slice(0, 300));
  assert.ok(produced() < FLOOD_BYTES / 2, `server produced ${produced()} bytes`);
});

test('an SSE event whose one line, or whose many short lines, never end fails past maxResponseBytes', async () => {
  const LIMIT = 256 * 1024;
  const sse = { 'content-type': 'text/event-stream' };
  // One data line that never ends; then an event of short data lines that never ends.
  for (const [head, fill] of [
    ['event: message\ndata: {"ok":true}\n\ndata: ', 'x'],
    ['data: {"ok":true}\r\n\r\n', 'data: x\r\n'],
  ] as const) {
    const { answer, produced } = flood(head, fill, sse);
    const error = await readThrough(answer, LIMIT);
    assert.ok(tooLarge(error, LIMIT), `${JSON.stringify(head)}: ${String(error).slice(0, 300)}`);
    assert.ok(produced() < FLOOD_BYTES / 2, `${JSON.stringify(head)}: server produced ${produced()} bytes`);
  }
});

test('the SDK’s own card resolver, which sends no Accept and reads the card whole, fails past maxResponseBytes on a card answered as an endless event stream of short events', async () => {
  const LIMIT = 256 * 1024;
  const { answer, produced } = flood('data: {}\n\n', 'data: x\n\n', { 'content-type': 'text/event-stream' });
  const app = new Hono().get('/.well-known/agent-card.json', answer);
  await withApp(app, async ({ origin }) => {
    const fetchImpl = a2aFetch(definePolicy({ name: 'agent', retry: false, breaker: false }), {
      maxResponseBytes: LIMIT,
    });
    const error = await new DefaultAgentCardResolver({ fetchImpl }).resolve(origin).catch((e: unknown) => e);
    assert.ok(error instanceof BreakwaterError, String(error).slice(0, 300));
    assert.equal(error.code, 'RESPONSE_TOO_LARGE');
    assert.ok(produced() < FLOOD_BYTES / 2, `server produced ${produced()} bytes`);
  });
});

test('an SSE stream far longer than maxResponseBytes, of events within it, is never cut, whatever its line ends and chunking', async () => {
  const LIMIT = 1024;
  // Each event just within the limit, its line ends included.
  const data = 'y'.repeat(LIMIT - 30);
  // LF, CRLF and CR line ends, events split across chunks anywhere (a CRLF pair too).
  for (const end of ['\n', '\r\n', '\r']) {
    const event = `event: message${end}data: ${data}${end}${end}`;
    const text = event.repeat(50);
    const answer = () => {
      const bytes = new TextEncoder().encode(text);
      let at = 0;
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (at >= bytes.length) return controller.close();
          const size = 1 + ((at * 7) % 97);
          controller.enqueue(bytes.slice(at, at + size));
          at += size;
        },
      });
      return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
    };
    const read = await readThrough(answer, LIMIT);
    assert.equal(read, text, `${JSON.stringify(end)}: ${String(read).slice(0, 200)}`);
  }
});

test('an SSE stream passes each event on as it comes: nothing is held back waiting for more', async () => {
  let release: () => void = () => {};
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  const app = new Hono();
  app.post('/rpc', async (c) => {
    await c.req.text();
    const body = new ReadableStream<Uint8Array>({
      async start(controller) {
        controller.enqueue(new TextEncoder().encode('data: first\n\n'));
        // The next event only once the client has read the first.
        await held;
        controller.enqueue(new TextEncoder().encode('data: second\n\n'));
        controller.close();
      },
    });
    return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
  });
  await withApp(app, async ({ origin }) => {
    const fetch = a2aFetch(definePolicy({ retry: false, breaker: false }), { maxResponseBytes: 64 });
    const headers = { accept: 'text/event-stream' };
    const response = await fetch(`${origin}/rpc`, { method: 'POST', body: '{}', headers });
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const first = await Promise.race([
      reader.read().then(({ value }) => decoder.decode(value)),
      new Promise((resolve) => {
        timer = setTimeout(() => resolve('held back'), 2000);
      }),
    ]);
    clearTimeout(timer);
    release();
    assert.equal(first, 'data: first\n\n');
    let rest = '';
    for (let next = await reader.read(); !next.done; next = await reader.read())
      rest += decoder.decode(next.value);
    assert.equal(rest, 'data: second\n\n');
  });
});

test('a JSON answer within maxResponseBytes reads whole, and Infinity turns the limit off', async () => {
  const json = JSON.stringify({ jsonrpc: '2.0', id: 1, result: 'z'.repeat(100_000) });
  const answer = () => new Response(json, { headers: { 'content-type': 'application/json' } });
  assert.equal(await readThrough(answer, json.length), json);
  assert.equal(await readThrough(answer, Infinity), json);
  const error = await readThrough(answer, json.length - 1);
  assert.ok(tooLarge(error, json.length - 1), String(error).slice(0, 300));
});

test('a JSON answer whose Content-Length is over maxResponseBytes fails at its first read, without waiting for its bytes', async () => {
  const LIMIT = 1024;
  // Announces 10 MB, sends its start, then stalls: only the header can tell it is too large.
  const stalled = {
    stall: 'mid-body',
    headers: { 'content-type': 'application/json', 'content-length': '10000000' },
    body: '{"jsonrpc":"2.0","id":1,"result":"',
  } as const;
  await withServer(always(stalled), async (server) => {
    const fetch = a2aFetch(definePolicy({ name: 'agent', retry: false, breaker: false }), {
      maxResponseBytes: LIMIT,
    });
    const response = await fetch(`${server.origin}/rpc`, { method: 'POST', body: '{}' });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const outcome = await Promise.race([
      response.text().catch((error: unknown) => error),
      new Promise((resolve) => {
        timer = setTimeout(() => resolve('still reading after 2 s'), 2000);
      }),
    ]);
    clearTimeout(timer);
    assert.ok(tooLarge(outcome, LIMIT), String(outcome).slice(0, 300));
  });
  // A compressed answer's Content-Length counts encoded bytes, the limit decoded ones: not judged by it.
  const gzipped = () =>
    new Response(new Blob(['{"ok":true}']).stream().pipeThrough(new CompressionStream('gzip')), {
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
    });
  assert.equal(await readThrough(gzipped, LIMIT), '{"ok":true}');
});

test('an answer handed on under maxResponseBytes keeps the URL it came from and whether it was redirected, as the runtime’s fetch gives them', async () => {
  const app = new Hono();
  app.get('/start', (c) => c.redirect('/end', 302));
  app.get('/end', (c) => c.json({ ok: true }));
  await withApp(app, async ({ origin }) => {
    for (const maxResponseBytes of [1024, Infinity]) {
      const fetch = a2aFetch(definePolicy({ retry: false, breaker: false }), { maxResponseBytes });
      const response = await fetch(`${origin}/start`);
      assert.deepEqual(
        { url: response.url, redirected: response.redirected, body: await response.json() },
        { url: `${origin}/end`, redirected: true, body: { ok: true } },
        `maxResponseBytes ${maxResponseBytes}`,
      );
    }
  });
});

test('maxResponseBytes must be a whole number of bytes above 0, or Infinity', () => {
  const policy = definePolicy({});
  for (const bad of [0, -1, 1.5, Number.NaN, '1024', null]) {
    assert.throws(
      () => a2aFetch(policy, { maxResponseBytes: bad } as never),
      /a2aFetch\(\)\.maxResponseBytes: must be a whole number of bytes above 0, or Infinity/,
      String(bad),
    );
  }
  assert.equal(typeof a2aFetch(policy, { maxResponseBytes: Infinity }), 'function');
});

test('a caller who aborts after its answer’s connection broke, before reading on, gets its own reason from the body, not a NetworkError', async () => {
  await withServer(
    always({ reset: 'mid-body', headers: { 'content-type': 'application/json' }, body: '{"jsonrpc":"2.0",' }),
    async ({ origin }) => {
      const fetch = a2aFetch(definePolicy({ name: 'agent', retry: false, breaker: false }));
      const controller = new AbortController();
      const response = await fetch(`${origin}/a2a`, {
        method: 'POST',
        body: '{}',
        signal: controller.signal,
      });
      const reader = (response.body as ReadableStream<Uint8Array>).getReader();
      await reader.read();
      // The reset lands while the caller is busy with the first chunk; then it aborts. Node
      // and Bun still fail the next read with the break, Deno with the abort's reason.
      await new Promise((resolve) => setTimeout(resolve, 100));
      const reason = Object.assign(new Error('the user left'), { code: 'ECONNRESET' });
      controller.abort(reason);
      assert.equal(await reader.read().catch((e: unknown) => e), reason);
    },
  );
});

test('a body read that fails for another reason than the network (a corrupt gzip answer, a success or a failure) shows no query secret in its error', async () => {
  // Bun's error quotes the request URL whole: `ZlibError fetching "http://...?token=..."`.
  const gzip = gzipSync('{"jsonrpc":"2.0","result":{}}'.repeat(100));
  const corrupt = new Uint8Array([
    ...gzip.subarray(0, 30),
    ...new TextEncoder().encode('not gzip at all, not at all'),
  ]);
  for (const status of [200, 503]) {
    await withServer(
      always({
        status,
        headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
        body: corrupt,
      }),
      async ({ origin }) => {
        const fetch = a2aFetch(definePolicy({ name: 'agent', retry: false, breaker: false }));
        const response = await fetch(`${origin}/a2a?token=s3cret`, { method: 'POST', body: '{}' });
        const error = await response.text().then(
          () => assert.fail(`status ${status}: the corrupt body read whole`),
          (e: unknown) => e,
        );
        assert.ok(error instanceof Error, String(error));
        assert.doesNotMatch(String(error), /s3cret/, `status ${status}`);
      },
    );
  }
});

test('a 503 whose body breaks mid-read rejects text() with HttpStatusError (status, Retry-After, the NetworkError as cause), and a caller’s abort there with its own reason', async () => {
  // The same 503, its body cut after its first bytes: by a reset, then by a stall.
  const failure = { status: 503, headers: { 'retry-after': '7' }, body: '{"error":' } as const;
  const broken = { ...failure, reset: 'mid-body' } as const;
  const stalled = { ...failure, stall: 'mid-body' } as const;
  await withServer(
    (_, index) => (index === 0 ? broken : stalled),
    async ({ origin }) => {
      const fetch = a2aFetch(definePolicy({ name: 'agent', retry: false, breaker: false }));
      const response = await fetch(`${origin}/a2a`, { method: 'POST', body: '{}' });
      const error = await response.text().catch((e: unknown) => e);
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.status, 503);
      assert.equal(error.retryAfterMs, 7000);
      assert.ok(error.cause instanceof NetworkError, String(error.cause));
      const controller = new AbortController();
      const stalling = await fetch(`${origin}/a2a`, {
        method: 'POST',
        body: '{}',
        signal: controller.signal,
      });
      const reading = stalling.text().catch((e: unknown) => e);
      const reason = new Error('the user left');
      controller.abort(reason);
      assert.equal(await reading, reason);
    },
  );
});
