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
import { type Context, Hono, type MiddlewareHandler } from 'hono';
import { compress } from 'hono/compress';
import { cors } from 'hono/cors';
import { HTTPException } from 'hono/http-exception';
import { requestId } from 'hono/request-id';
import { streamSSE } from 'hono/streaming';
import { timeout } from 'hono/timeout';
import { appendTrailingSlash, trimTrailingSlash } from 'hono/trailing-slash';
import { idempotency } from '../adapters/hono/idempotency.ts';
import { shed } from '../adapters/hono/shed.ts';
import type { BreakwaterEvent } from '../src/events.ts';
import { definePolicy } from '../src/policy.ts';
import { retryDelay, shouldRetryHeader } from '../src/timing.ts';
import { announcedWindows } from './helpers/announced-windows.ts';
import { withApp } from './helpers/hono-server.ts';

/** A promise the test resolves by hand. */
function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve: () => void = () => {};
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** `promise`, or a rejection naming `what` if it has not settled in 10 s: a hang guard, not a timing. */
async function within<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within 10 s`)), 10_000);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * An app behind `shed(options)` whose handler for `/?id=X` records X, then waits
 * until the test calls `finish(X)` (or `fail(X)`, which makes it throw). In front of
 * `shed`, it reports when a request reached it (`whenArrived(X)`: by then `shed` has
 * admitted, queued or refused it) and the status `shed` or the handler answered it
 * with (`whenAnswered(X)`), so a test waits on the server's own view, not a sleep.
 */
function blockingApp(options: Parameters<typeof shed>[0]): {
  app: Hono;
  entered: string[];
  whenEntered: (count: number) => Promise<void>;
  finish: (id: string) => void;
  fail: (id: string) => void;
  whenArrived: (id: string) => Promise<void>;
  whenAnswered: (id: string) => Promise<number>;
} {
  const entered: string[] = [];
  const arrivals = new Map<string, ReturnType<typeof deferred>>();
  const answers = new Map<string, { promise: Promise<number>; resolve: (status: number) => void }>();
  const arrival = (id: string) => {
    let a = arrivals.get(id);
    if (a === undefined) {
      a = deferred();
      arrivals.set(id, a);
    }
    return a;
  };
  const answer = (id: string) => {
    let a = answers.get(id);
    if (a === undefined) {
      let resolve: (status: number) => void = () => {};
      const promise = new Promise<number>((r) => {
        resolve = r;
      });
      a = { promise, resolve };
      answers.set(id, a);
    }
    return a;
  };
  const gates = new Map<string, { promise: Promise<void>; resolve: () => void; throws: boolean }>();
  const watchers: { count: number; resolve: () => void }[] = [];
  const gate = (id: string) => {
    let g = gates.get(id);
    if (g === undefined) {
      g = { ...deferred(), throws: false };
      gates.set(id, g);
    }
    return g;
  };
  const app = new Hono();
  app.use(async (c, next) => {
    const id = c.req.query('id') ?? '';
    // Resolved before next(): shed() queues synchronously, ahead of the test's continuation.
    arrival(id).resolve();
    await next();
    answer(id).resolve(c.res.status);
  });
  app.use(shed(options));
  app.get('/', async (c) => {
    const id = c.req.query('id') ?? '';
    entered.push(id);
    for (const w of watchers) if (entered.length >= w.count) w.resolve();
    const g = gate(id);
    await g.promise;
    if (g.throws) throw new Error(`handler ${id} failed`);
    return c.text(`done ${id}`);
  });
  app.onError((err, c) => c.text(err.message, 500));
  return {
    app,
    entered,
    whenEntered: (count) =>
      entered.length >= count
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            watchers.push({ count, resolve });
          }),
    finish: (id) => gate(id).resolve(),
    fail: (id) => {
      const g = gate(id);
      g.throws = true;
      g.resolve();
    },
    whenArrived: (id) => arrival(id).promise,
    whenAnswered: (id) => answer(id).promise,
  };
}

async function settle(res: Response | Promise<Response>): Promise<{ status: number; text: string }> {
  const r = await res;
  return { status: r.status, text: await r.text() };
}

test('with maxInFlight 2, a third concurrent request gets 503 + Retry-After + x-should-retry and its handler never runs', async () => {
  const t = blockingApp({ maxInFlight: 2 });
  const a = t.app.request('/?id=a');
  const b = t.app.request('/?id=b');
  await t.whenEntered(2);
  const res = await t.app.request('/?id=c');
  assert.equal(res.status, 503);
  assert.equal(res.headers.get('retry-after'), '1');
  assert.equal(res.headers.get('x-should-retry'), 'true');
  assert.equal(res.headers.get('content-type'), 'application/problem+json');
  const body = (await res.json()) as Record<string, unknown>;
  assert.equal(body.status, 503);
  assert.equal(body.title, 'Service Unavailable');
  assert.equal(retryDelay(res.headers), 1000);
  assert.equal(shouldRetryHeader(res.headers), true);
  t.finish('a');
  t.finish('b');
  assert.deepEqual(await settle(a), { status: 200, text: 'done a' });
  assert.deepEqual(await settle(b), { status: 200, text: 'done b' });
  assert.deepEqual(t.entered, ['a', 'b'], 'the refused handler never ran');
});

test('retryAfterMs sets the Retry-After of a refusal, rounded up to whole seconds', async () => {
  const t = blockingApp({ maxInFlight: 1, retryAfterMs: 2500 });
  const a = t.app.request('/?id=a');
  await t.whenEntered(1);
  const res = await t.app.request('/?id=b');
  await res.body?.cancel();
  assert.equal(res.status, 503);
  assert.equal(res.headers.get('retry-after'), '3');
  t.finish('a');
  await settle(a);
});

test('slots come back when handlers finish, including a handler that throws', async () => {
  const t = blockingApp({ maxInFlight: 2 });
  const a = t.app.request('/?id=a');
  const b = t.app.request('/?id=b');
  await t.whenEntered(2);
  t.finish('a');
  t.fail('b');
  assert.deepEqual(await settle(a), { status: 200, text: 'done a' });
  assert.deepEqual(await settle(b), { status: 500, text: 'handler b failed' });
  // Both slots are free again: two more run at once, a third is refused.
  const c = t.app.request('/?id=c');
  const d = t.app.request('/?id=d');
  await t.whenEntered(4);
  const e = await settle(t.app.request('/?id=e'));
  assert.equal(e.status, 503);
  t.finish('c');
  t.finish('d');
  assert.equal((await settle(c)).status, 200);
  assert.equal((await settle(d)).status, 200);
});

test('with maxQueue, waiting requests run in arrival order as slots free, and the overflow is refused', async () => {
  const t = blockingApp({ maxInFlight: 1, maxQueue: 2 });
  const a = t.app.request('/?id=a');
  await t.whenEntered(1);
  const b = t.app.request('/?id=b');
  const c = t.app.request('/?id=c');
  const d = await settle(t.app.request('/?id=d'));
  assert.equal(d.status, 503, 'the queue is full');
  assert.deepEqual(t.entered, ['a'], 'queued requests wait');
  t.finish('a');
  await t.whenEntered(2);
  assert.deepEqual(t.entered, ['a', 'b']);
  // A newcomer may not overtake the queue while c still waits.
  const e = t.app.request('/?id=e');
  t.finish('b');
  await t.whenEntered(3);
  assert.deepEqual(t.entered, ['a', 'b', 'c']);
  t.finish('c');
  await t.whenEntered(4);
  assert.deepEqual(t.entered, ['a', 'b', 'c', 'e']);
  t.finish('e');
  for (const [id, res] of [
    ['a', a],
    ['b', b],
    ['c', c],
    ['e', e],
  ] as const) {
    assert.deepEqual(await settle(res), { status: 200, text: `done ${id}` });
  }
});

test('a queued request that waits longer than queueTimeoutMs gets a 503 with Retry-After', async () => {
  const t = blockingApp({ maxInFlight: 1, maxQueue: 1, queueTimeoutMs: 50 });
  const a = t.app.request('/?id=a');
  await t.whenEntered(1);
  const started = Date.now();
  const res = await t.app.request('/?id=b');
  const waited = Date.now() - started;
  await res.body?.cancel();
  assert.equal(res.status, 503);
  assert.equal(res.headers.get('retry-after'), '1');
  assert.equal(res.headers.get('x-should-retry'), 'true');
  assert.ok(waited >= 45 && waited < 1000, `waited ${waited} ms`);
  t.finish('a');
  await settle(a);
  assert.deepEqual(t.entered, ['a']);
});

test('a queued request whose client goes away leaves the queue and never runs', async () => {
  const t = blockingApp({ maxInFlight: 1, maxQueue: 1 });
  const a = t.app.request('/?id=a');
  await t.whenEntered(1);
  const controller = new AbortController();
  const b = t.app.request(new Request('http://localhost/?id=b', { signal: controller.signal }));
  controller.abort();
  const gone = await settle(b);
  assert.equal(gone.status, 499);
  // Its place in the queue is free again.
  const c = t.app.request('/?id=c');
  t.finish('a');
  await t.whenEntered(2);
  t.finish('c');
  assert.equal((await settle(c)).status, 200);
  assert.equal((await settle(a)).status, 200);
  assert.deepEqual(t.entered, ['a', 'c']);
});

test('shed() rejects bad options with a TypeError naming each one', () => {
  assert.throws(
    () => shed({ maxInFlight: 0, maxQueue: -1, retryAfterMs: 1.5, queueTimeoutMs: 0 }),
    (e: unknown) =>
      e instanceof TypeError &&
      e.message.includes('shed().maxInFlight') &&
      e.message.includes('shed().maxQueue') &&
      e.message.includes('shed().retryAfterMs') &&
      e.message.includes('shed().queueTimeoutMs'),
  );
  assert.throws(() => shed(undefined as never), TypeError);
});

test('over a real server, the request past maxInFlight is refused with 503 while the others complete', async () => {
  const t = blockingApp({ maxInFlight: 2 });
  await withApp(t.app, async (server) => {
    const a = fetch(`${server.origin}/?id=a`);
    const b = fetch(`${server.origin}/?id=b`);
    await t.whenEntered(2);
    const res = await fetch(`${server.origin}/?id=c`);
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('retry-after'), '1');
    assert.equal(res.headers.get('x-should-retry'), 'true');
    assert.equal(((await res.json()) as { status: number }).status, 503);
    t.finish('a');
    t.finish('b');
    t.finish('d');
    assert.deepEqual(await settle(a), { status: 200, text: 'done a' });
    assert.deepEqual(await settle(b), { status: 200, text: 'done b' });
    const again = await fetch(`${server.origin}/?id=d`);
    assert.equal(again.status, 200, 'the slots were released');
    await again.text();
    assert.deepEqual(t.entered, ['a', 'b', 'd']);
  });
});

test('over a real server, a queued request whose client disconnects leaves the queue', async () => {
  const t = blockingApp({ maxInFlight: 1, maxQueue: 1 });
  t.finish('c');
  await withApp(t.app, async (server) => {
    const a = fetch(`${server.origin}/?id=a`);
    await t.whenEntered(1);
    const controller = new AbortController();
    const b = fetch(`${server.origin}/?id=b`, { signal: controller.signal });
    await t.whenArrived('b'); // queued behind a
    controller.abort();
    await assert.rejects(b);
    assert.equal(await within(t.whenAnswered('b'), 'b answered'), 499, 'the server saw b leave the queue');
    const c = fetch(`${server.origin}/?id=c`);
    await t.whenArrived('c'); // queued in the place b left
    t.finish('a');
    assert.deepEqual(await settle(a), { status: 200, text: 'done a' });
    assert.deepEqual(await settle(c), { status: 200, text: 'done c' });
    assert.deepEqual(t.entered, ['a', 'c'], 'the abandoned request never ran');
  });
});

test("behind hono's cors(), the 503 names Retry-After and x-should-retry in Access-Control-Expose-Headers, so a page on another origin can read them", async () => {
  const busy = deferred();
  const entered = deferred();
  const app = new Hono();
  app.use('*', cors());
  app.use('*', shed({ maxInFlight: 1 }));
  app.get('/', async (c) => {
    entered.resolve();
    await busy.promise;
    return c.text('ok');
  });
  await withApp(app, async ({ origin }) => {
    const headers = { origin: 'http://127.0.0.1:1' };
    const first = fetch(origin, { headers });
    await within(entered.promise, 'the first request');
    const refused = await fetch(origin, { headers });
    await refused.text();
    busy.resolve();
    await (await first).text();
    assert.equal(refused.status, 503);
    const names = (refused.headers.get('access-control-expose-headers') ?? '').toLowerCase().split(/\s*,\s*/);
    assert.ok(names.includes('retry-after') && names.includes('x-should-retry'), `exposed: ${names}`);
  });
});

test("32 callers through one policy's client (default breaker) against shed({ maxInFlight: 4 }): the shed 503s to calls in flight never open the circuit, every call ends 200, and none is sent inside an announced Retry-After", async () => {
  const ledger = announcedWindows((c) => c.req.query('id') ?? '');
  const app = new Hono();
  app.use(ledger.middleware);
  // The first 4 handlers hold their slots until the other 28 calls were shed (at most
  // 2 s): all 32 were on the wire when the server started shedding, whatever the order in
  // which the runtime sends them. Every handler then takes a moment (50 ms).
  const storm = deferred();
  let shedCount = 0;
  let served = 0;
  app.use(async (c, next) => {
    await next();
    if (c.res.status === 503 && ++shedCount === 28) storm.resolve();
  });
  // Retry-After: 1 (200 ms rounded up to whole seconds).
  app.use(shed({ maxInFlight: 4, retryAfterMs: 200 }));
  app.get('/', async (c) => {
    if (served++ < 4) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([storm.promise, new Promise((resolve) => (timer = setTimeout(resolve, 2000)))]);
      clearTimeout(timer);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
    return c.text('ok');
  });
  await withApp(app, async (server) => {
    const events: BreakwaterEvent[] = [];
    // The default breaker and retry (3 attempts). After a pause the calls let go double per
    // answer (slow start) past the 4 slots; the next slow start doubles only up to half of
    // what was out then, and a call shed after being let go waits at the front of the queue
    // when it comes back. Before, the same calls at the back were shed again: 2-3 of the 32
    // ended on the 503, each having waited out every Retry-After.
    const policy = definePolicy({});
    const fetch = policy.fetch(ledger.stamp(), { onEvent: (e) => events.push(e) });
    const outcomes = await within(
      Promise.all(
        Array.from({ length: 32 }, (_, i) =>
          fetch(`${server.origin}/?id=${i}`).then(
            async (res) => `${res.status} ${await res.text()}`,
            (error: Error) => `${error.name}: ${error.message}`,
          ),
        ),
      ),
      '32 calls',
    );
    assert.ok(
      ledger.requests.some((r) => r.status === 503),
      'the server shed some of them (else this shows nothing)',
    );
    assert.deepEqual(
      events.filter((e) => e.type === 'breaker'),
      [],
      'the circuit never left closed (16adf09: it opened on the in-flight 503s)',
    );
    assert.deepEqual(outcomes, Array(32).fill('200 ok'));
    assert.deepEqual(
      ledger.inside(),
      [],
      'no request was sent inside a Retry-After window announced before it',
    );
  });
});

test("a refusal carries the headers set in front for this request (hono/request-id's X-Request-Id), as an admitted answer does, over a real server", async () => {
  const release = deferred();
  const entered = deferred();
  const app = new Hono();
  app.use(requestId());
  app.use(shed({ maxInFlight: 1 }));
  app.get('/', async (c) => {
    entered.resolve();
    await release.promise;
    return c.text('done');
  });
  await withApp(app, async ({ origin }) => {
    const admitted = fetch(origin, { headers: { 'x-request-id': 'admitted' } });
    await within(entered.promise, 'the first handler');
    const refused = await fetch(origin, { headers: { 'x-request-id': 'refused' } });
    await refused.text();
    release.resolve();
    const done = await within(admitted, 'the first answer');
    await done.text();
    assert.deepEqual([done.status, done.headers.get('x-request-id')], [200, 'admitted']);
    assert.deepEqual([refused.status, refused.headers.get('x-request-id')], [503, 'refused']);
    assert.equal(refused.headers.get('x-should-retry'), 'true', 'its own headers stay');
  });
});

/**
 * An app behind `shed(options)` whose answers stream. `/sse?id=X` (GET or POST) is
 * Hono's streamSSE(): it sends `open`, waits until the test calls `finish(X)`, then
 * sends `end`; `aborted(X)` resolves when streamSSE's onAbort heard the client go.
 * `/broken?id=X` sends `first`, then errors when the test calls `finish(X)`. `/ok`
 * answers at once, `/empty` 204, `/not-modified` 304: each a probe of a free slot.
 */
function streamingApp(options: Parameters<typeof shed>[0]): {
  app: Hono;
  finish: (id: string) => void;
  aborted: (id: string) => Promise<void>;
  finishAll: () => void;
} {
  const gates = new Map<string, ReturnType<typeof deferred>>();
  const aborts = new Map<string, ReturnType<typeof deferred>>();
  const once = (map: Map<string, ReturnType<typeof deferred>>, id: string) => {
    let d = map.get(id);
    if (d === undefined) {
      d = deferred();
      map.set(id, d);
    }
    return d;
  };
  const app = new Hono();
  app.use(shed(options));
  app.on(['GET', 'POST'], '/sse', (c) => {
    const id = c.req.query('id') ?? '';
    return streamSSE(c, async (stream) => {
      stream.onAbort(() => once(aborts, id).resolve());
      await stream.writeSSE({ data: 'open' });
      await once(gates, id).promise;
      await stream.writeSSE({ data: 'end' });
    });
  });
  app.get('/broken', (c) => {
    const gate = once(gates, c.req.query('id') ?? '').promise;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('first\n'));
        gate.then(() => controller.error(new Error('the body broke')));
      },
    });
    return new Response(body, { headers: { 'content-type': 'text/plain' } });
  });
  app.get('/ok', (c) => c.text('ok'));
  app.get('/empty', (c) => c.body(null, 204));
  app.get('/not-modified', (c) => c.body(null, 304));
  return {
    app,
    finish: (id) => once(gates, id).resolve(),
    aborted: (id) => once(aborts, id).promise,
    finishAll: () => {
      for (const gate of gates.values()) gate.resolve();
    },
  };
}

const decoder = new TextDecoder();

/** Reads `reader` until what it has read includes `text`; the text read. */
async function readUntil(reader: ReadableStreamDefaultReader<Uint8Array>, text: string): Promise<string> {
  let read = '';
  while (!read.includes(text)) {
    const chunk = await within(reader.read(), `"${text}" in the body`);
    if (chunk.done) throw new Error(`the body ended before "${text}": ${read}`);
    read += decoder.decode(chunk.value, { stream: true });
  }
  return read;
}

/** Reads `reader` to its end; the text read. */
async function readToEnd(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<string> {
  let read = '';
  for (;;) {
    const chunk = await within(reader.read(), 'the end of the body');
    if (chunk.done) return read;
    read += decoder.decode(chunk.value, { stream: true });
  }
}

/** Sends a request for `path` to the app under test: over a real server, or through `app.request()`. */
type Send = (path: string, init?: RequestInit) => Promise<Response>;

/** {@link Send} over the server at `origin`. */
const over =
  (origin: string): Send =>
  (path, init) =>
    fetch(`${origin}${path}`, init);

/** The status of one request for `path`, its body read. */
async function statusOf(send: Send, path: string, init?: RequestInit): Promise<number> {
  const res = await send(path, init);
  await res.arrayBuffer();
  return res.status;
}

/**
 * The status of the first request for `path` that shed() does not refuse, asking every
 * 10 ms for at most 5 s (then the last 503): a server hears of a client's abort a moment after it.
 */
async function admittedWithin(send: Send, path: string): Promise<number> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const status = await statusOf(send, path);
    if (status !== 503 || Date.now() > deadline) return status;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Opens `/sse?id=` and reads until its first event: a stream the server still sends. */
async function openStream(
  send: Send,
  id: string,
  init?: RequestInit,
): Promise<ReadableStreamDefaultReader<Uint8Array>> {
  const res = await send(`/sse?id=${id}`, init);
  assert.equal(res.status, 200, `stream ${id} admitted`);
  assert.equal(res.headers.get('content-type'), 'text/event-stream');
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  await readUntil(reader, 'data: open');
  return reader;
}

/**
 * With maxInFlight 1 and the slot free: a new stream takes it, and only it (a probe is
 * refused until the stream ends). Fails if an earlier release ran twice (two would fit).
 */
async function assertOneSlot(t: ReturnType<typeof streamingApp>, send: Send, id: string): Promise<void> {
  const reader = await openStream(send, id);
  assert.equal(await statusOf(send, '/ok'), 503, 'a single slot, held by the new stream');
  t.finish(id);
  assert.match(await readToEnd(reader), /data: end/);
  assert.equal(await statusOf(send, '/ok'), 200, 'the slot came back when the stream ended');
}

test('with holdUntilBodyEnds, a request that arrives while an SSE answer is still streaming is shed with 503 + Retry-After, and the next one after the stream ended is admitted', async () => {
  const t = streamingApp({ maxInFlight: 1, holdUntilBodyEnds: true });
  await withApp(t.app, async ({ origin }) => {
    const send = over(origin);
    try {
      const reader = await openStream(send, 'a');
      const refused = await send('/ok');
      await refused.text();
      assert.equal(refused.status, 503, 'the open stream holds the only slot');
      assert.equal(refused.headers.get('retry-after'), '1');
      assert.equal(refused.headers.get('x-should-retry'), 'true');
      t.finish('a');
      assert.match(await readToEnd(reader), /data: end/, 'the stream carried the rest');
      assert.equal(await statusOf(send, '/ok'), 200, 'the slot came back when the stream ended');
      await assertOneSlot(t, send, 'b');
    } finally {
      t.finishAll();
    }
  });
});

test('with holdUntilBodyEnds, a client that aborts mid-stream gives the slot back, exactly once, and streamSSE hears the abort', async () => {
  const t = streamingApp({ maxInFlight: 1, holdUntilBodyEnds: true });
  await withApp(t.app, async ({ origin }) => {
    const send = over(origin);
    try {
      const controller = new AbortController();
      const reader = await openStream(send, 'a', { signal: controller.signal });
      assert.equal(await statusOf(send, '/ok'), 503, 'the open stream holds the only slot');
      controller.abort();
      await reader.closed.catch(() => {});
      await within(t.aborted('a'), "streamSSE's onAbort");
      assert.equal(await admittedWithin(send, '/ok'), 200, 'the slot came back after the abort');
      await assertOneSlot(t, send, 'b');
    } finally {
      t.finishAll();
    }
  });
});

test('with holdUntilBodyEnds, a body that errors mid-stream gives the slot back, exactly once', async () => {
  const t = streamingApp({ maxInFlight: 1, holdUntilBodyEnds: true });
  await withApp(t.app, async ({ origin }) => {
    const send = over(origin);
    try {
      const res = await send('/broken?id=a');
      assert.equal(res.status, 200);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      await readUntil(reader, 'first');
      assert.equal(await statusOf(send, '/ok'), 503, 'the open body holds the only slot');
      t.finish('a');
      await assert.rejects(within(readToEnd(reader), 'the broken body'), 'the client sees the body break');
      assert.equal(await admittedWithin(send, '/ok'), 200, 'the slot came back after the error');
      await assertOneSlot(t, send, 'b');
    } finally {
      t.finishAll();
    }
  });
});

test('with holdUntilBodyEnds, an answer without a body (204, 304) and a HEAD (whose body Hono drops unread) give the slot back at once', async () => {
  const t = streamingApp({ maxInFlight: 1, holdUntilBodyEnds: true });
  await withApp(t.app, async ({ origin }) => {
    const send = over(origin);
    try {
      assert.equal(await statusOf(send, '/empty'), 204);
      assert.equal(await statusOf(send, '/ok'), 200, 'after a 204');
      assert.equal(await statusOf(send, '/not-modified'), 304);
      assert.equal(await statusOf(send, '/ok'), 200, 'after a 304');
      // The GET handler behind it streams until finished; the HEAD answer ends at once.
      assert.equal(await statusOf(send, '/sse?id=head', { method: 'HEAD' }), 200);
      assert.equal(await statusOf(send, '/ok'), 200, 'after a HEAD');
      await assertOneSlot(t, send, 'b');
    } finally {
      t.finishAll();
    }
  });
});

test('with holdUntilBodyEnds: (c) => c.req.method === "POST", an open POST stream holds its slot and an open GET stream (an MCP notification stream) does not', async () => {
  const t = streamingApp({ maxInFlight: 1, holdUntilBodyEnds: (c) => c.req.method === 'POST' });
  await withApp(t.app, async ({ origin }) => {
    const send = over(origin);
    try {
      const get = await openStream(send, 'get');
      assert.equal(
        await statusOf(send, '/ok'),
        200,
        'the GET stream freed its slot when its handler returned',
      );
      const post = await openStream(send, 'post', { method: 'POST' });
      assert.equal(await statusOf(send, '/ok'), 503, 'the POST stream holds the only slot');
      t.finish('post');
      await readToEnd(post);
      assert.equal(await statusOf(send, '/ok'), 200, 'until it ends');
      t.finish('get');
      await readToEnd(get);
    } finally {
      t.finishAll();
    }
  });
});

test('without holdUntilBodyEnds (the default), an open SSE stream does not hold its slot: the next request is admitted', async () => {
  const t = streamingApp({ maxInFlight: 1 });
  await withApp(t.app, async ({ origin }) => {
    const send = over(origin);
    try {
      const reader = await openStream(send, 'a');
      assert.equal(await statusOf(send, '/ok'), 200, 'the slot came back when the handler returned');
      const second = await openStream(send, 'b');
      t.finish('a');
      t.finish('b');
      assert.match(await readToEnd(reader), /data: end/);
      assert.match(await readToEnd(second), /data: end/);
    } finally {
      t.finishAll();
    }
  });
});

test('shed() rejects a holdUntilBodyEnds that is neither a boolean nor a function', () => {
  assert.throws(
    () => shed({ maxInFlight: 1, holdUntilBodyEnds: 'yes' as never }),
    (e: unknown) => e instanceof TypeError && e.message.includes('shed().holdUntilBodyEnds'),
  );
});

test('with holdUntilBodyEnds and no server in between (app.request()), cancelling the body and a body that errors each give the slot back at once, exactly once', async () => {
  const t = streamingApp({ maxInFlight: 1, holdUntilBodyEnds: true });
  const send: Send = async (path, init) => t.app.request(path, init);
  try {
    const reader = await openStream(send, 'a');
    assert.equal(await statusOf(send, '/ok'), 503, 'the open stream holds the only slot');
    await reader.cancel();
    await within(t.aborted('a'), "streamSSE's onAbort");
    assert.equal(await statusOf(send, '/ok'), 200, 'the slot came back when the body was cancelled');
    const broken = (await send('/broken?id=b')).body as ReadableStream<Uint8Array>;
    const brokenReader = broken.getReader();
    await readUntil(brokenReader, 'first');
    assert.equal(await statusOf(send, '/ok'), 503, 'the open body holds the only slot');
    t.finish('b');
    await assert.rejects(readToEnd(brokenReader), /the body broke/);
    assert.equal(await statusOf(send, '/ok'), 200, 'the slot came back when the body errored');
    await assertOneSlot(t, send, 'c');
  } finally {
    t.finishAll();
  }
});

test("with holdUntilBodyEnds, a client that goes away gives the slot back even where the server only aborts the request's signal and never cancels the body (Bun.serve before 1.2)", async () => {
  const t = streamingApp({ maxInFlight: 1, holdUntilBodyEnds: true });
  const send: Send = async (path, init) => t.app.request(path, init);
  try {
    const client = new AbortController();
    await openStream(send, 'a', { signal: client.signal });
    assert.equal(await statusOf(send, '/ok'), 503, 'the open stream holds the only slot');
    client.abort(); // the body is left as it is: neither read on nor cancelled
    assert.equal(await statusOf(send, '/ok'), 200, 'the slot came back when the client went away');
    await assertOneSlot(t, send, 'b');
  } finally {
    t.finishAll();
  }
});

test('with holdUntilBodyEnds for POSTs, a real MCP server (Streamable HTTP, tool calls answered over SSE) is shed while a tool call streams its progress, and admits again once the result was sent', async () => {
  const running = deferred();
  const finish = deferred();
  /** A stateless MCP server per request whose tool `work` reports progress, then waits for the test. */
  const mcp = async (request: Request): Promise<Response> => {
    const server = new McpServer({ name: 'work', version: '1.0.0' });
    server.registerTool('work', { description: 'work' }, async (extra) => {
      const progressToken = extra._meta?.progressToken as string | number;
      await extra.sendNotification({
        method: 'notifications/progress',
        params: { progressToken, progress: 1 },
      });
      await finish.promise;
      return { content: [{ type: 'text' as const, text: 'done' }] };
    });
    const transport = new WebStandardStreamableHTTPServerTransport({ enableJsonResponse: false });
    await server.connect(transport);
    const response = await transport.handleRequest(request);
    if (response.body === null) {
      await server.close();
      return response;
    }
    // The SSE answer is handed out before the tool has run: the server closes once it carried everything.
    const closing = new TransformStream<Uint8Array, Uint8Array>({ flush: () => server.close() });
    return new Response(response.body.pipeThrough(closing), response);
  };
  const app = new Hono();
  app.use('/mcp', shed({ maxInFlight: 1, holdUntilBodyEnds: (c) => c.req.method === 'POST' }));
  app.post('/mcp', (c) => mcp(c.req.raw));
  app.get('/mcp', (c) => c.body(null, 405, { allow: 'POST' }));
  await withApp(app, async ({ origin }) => {
    const client = new Client({ name: 'shed-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${origin}/mcp`)));
    try {
      const call = client.callTool({ name: 'work', arguments: {} }, undefined, {
        onprogress: () => running.resolve(),
      });
      await within(running.promise, 'the progress notification');
      // The tool call's SSE answer is open: its handler returned long ago.
      const refused = await fetch(`${origin}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
      });
      await refused.text();
      assert.equal(refused.status, 503, 'the streaming tool call holds the only slot');
      assert.equal(refused.headers.get('retry-after'), '1');
      assert.equal(refused.headers.get('x-should-retry'), 'true');
      finish.resolve();
      assert.deepEqual((await within(call, 'the tool call')).content, [{ type: 'text', text: 'done' }]);
      assert.equal(
        await admittedWithin(over(origin), '/mcp'),
        405,
        'the slot came back when the answer ended',
      );
      assert.deepEqual(
        (await within(client.callTool({ name: 'work', arguments: {} }), 'a second call')).content,
        [{ type: 'text', text: 'done' }],
      );
    } finally {
      finish.resolve();
      await client.close();
    }
  });
});

test("with holdUntilBodyEnds behind hono's timeout(), a handler that returns after the 504 was sent gives its slot back, quietly: only the timeout reaches onError", async () => {
  // The 504 as Hono's own onError answers it (its body a stream the server reads), and as
  // the exception's own Response (a string @hono/node-server writes without reading a stream).
  const answers: [string, (error: HTTPException, c: Context) => Response][] = [
    ['as the default onError', (error, c) => c.newResponse(error.getResponse().body, error.getResponse())],
    ["as the exception's own Response", (error) => error.getResponse()],
  ];
  for (const [name, answer] of answers) {
    const late = deferred();
    const errors: unknown[] = [];
    const app = new Hono();
    app.use(timeout(50));
    app.use(shed({ maxInFlight: 1, holdUntilBodyEnds: true }));
    app.get('/slow', async (c) => {
      await late.promise;
      return c.text('too late');
    });
    app.get('/ok', (c) => c.text('ok'));
    app.onError((error, c) => {
      errors.push(error);
      return error instanceof HTTPException ? answer(error, c) : c.text('error', 500);
    });
    await withApp(app, async ({ origin }) => {
      const send = over(origin);
      try {
        assert.equal(await statusOf(send, '/slow'), 504, name);
        assert.equal(
          await statusOf(send, '/ok'),
          503,
          `${name}: the late handler still runs in the only slot`,
        );
        late.resolve();
        assert.equal(await admittedWithin(send, '/ok'), 200, `${name}: the slot came back when it returned`);
        assert.deepEqual(
          errors.map((error) => (error instanceof HTTPException ? error.status : String(error))),
          [504],
          name,
        );
      } finally {
        late.resolve();
      }
    });
  }
});

/**
 * An app whose `front` middleware sits before `shed({ maxInFlight: 1, holdUntilBodyEnds:
 * true })`. `/stream?status=N` answers N with a text/plain body that sends `first`, then
 * ends when the test calls `finish()`; `cancelled` resolves when that body was cancelled.
 * A POST to `/stream` answers the same. `/dir/` and `/ok` answer at once.
 */
function frontedApp(front: MiddlewareHandler): {
  app: Hono;
  finish: () => void;
  cancelled: Promise<void>;
} {
  const gate = deferred();
  const cancelled = deferred();
  const app = new Hono();
  app.use(front);
  app.use(shed({ maxInFlight: 1, holdUntilBodyEnds: true }));
  app.on(['GET', 'POST'], '/stream', (c) => {
    let sent = false;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (!sent) {
          sent = true;
          controller.enqueue(new TextEncoder().encode('first\n'));
          return;
        }
        await gate.promise;
        controller.close();
      },
      cancel: () => cancelled.resolve(),
    });
    return c.body(body, Number(c.req.query('status') ?? 200) as 200, { 'content-type': 'text/plain' });
  });
  app.get('/dir/', (c) => c.text('dir'));
  app.get('/ok', (c) => c.text('ok'));
  app.onError((_, c) => c.text('internal', 500));
  return { app, finish: gate.resolve, cancelled: cancelled.promise };
}

test('with holdUntilBodyEnds, an answer a middleware in front drops for another after shed() returned gives its slot back and has its body cancelled: hono/trailing-slash redirects, a c.res = … after next() (after a c.res = undefined too, or that alone), the onError answer to a throw after next()', async () => {
  const cases: [string, MiddlewareHandler, string, number][] = [
    ['appendTrailingSlash()', appendTrailingSlash(), '/dir', 301],
    ['trimTrailingSlash()', trimTrailingSlash(), '/ok/', 301],
    [
      'a c.res = … after next()',
      async (c, next) => {
        await next();
        if (c.res.status >= 500) c.res = c.json({ error: 'internal' }, 500);
      },
      '/stream?status=502',
      500,
    ],
    [
      'a throw after next()',
      async (c, next) => {
        await next();
        if (c.req.path === '/stream') throw new Error('after next()');
      },
      '/stream',
      500,
    ],
    [
      'a c.res = undefined, then a new answer',
      async (c, next) => {
        await next();
        if (c.req.path !== '/stream') return;
        c.res = undefined;
        c.res = new Response('replaced', { status: 500 });
      },
      '/stream',
      500,
    ],
    [
      'a c.res = undefined left so (Hono then answers an empty 200)',
      async (c, next) => {
        await next();
        if (c.req.path === '/stream') c.res = undefined;
      },
      '/stream',
      200,
    ],
  ];
  for (const [name, front, path, status] of cases) {
    const t = frontedApp(front);
    await withApp(t.app, async ({ origin }) => {
      const send = over(origin);
      try {
        assert.equal(await statusOf(send, path, { redirect: 'manual' }), status, name);
        if (path.startsWith('/stream')) await within(t.cancelled, `${name}: the dropped body's cancel`);
        assert.equal(await statusOf(send, '/dir/'), 200, `${name}: the slot came back`);
        assert.equal(await statusOf(send, '/dir/'), 200, `${name}: and stays free`);
      } finally {
        t.finish();
      }
    });
  }
});

test('with holdUntilBodyEnds, an answer a middleware in front sends on in another Response (new Response(c.res.body, c.res), hono/compress, c.res = undefined then a Response of the same body, idempotency()) keeps its slot until its body ends', async () => {
  const cases: [string, MiddlewareHandler][] = [
    [
      'new Response(c.res.body, c.res)',
      async (c, next) => {
        await next();
        c.res = new Response(c.res.body, c.res);
        c.res.headers.set('x-front', 'yes');
      },
    ],
    ['compress()', compress({ encoding: 'gzip' })],
    [
      // Hono's documented way to replace an answer's headers.
      'c.res = undefined; c.res = new Response(body, …)',
      async (c, next) => {
        await next();
        const { body, status, headers } = c.res;
        c.res = undefined;
        c.res = new Response(body, { status, headers: { ...Object.fromEntries(headers), 'x-front': 'yes' } });
      },
    ],
    // A keyed POST: idempotency() sets c.res = undefined, then its answer with the same body.
    ['idempotency()', idempotency()],
  ];
  for (const [name, front] of cases) {
    const t = frontedApp(front);
    await withApp(t.app, async ({ origin }) => {
      const send = over(origin);
      try {
        const init: RequestInit = { headers: { 'accept-encoding': 'gzip' } };
        if (name === 'idempotency()') {
          Object.assign(init, { method: 'POST', body: '{}', headers: { 'idempotency-key': '"k1"' } });
        }
        const res = await send('/stream', init);
        assert.equal(res.status, 200, name);
        assert.equal(await statusOf(send, '/ok'), 503, `${name}: the open body holds the only slot`);
        t.finish();
        assert.equal(await within(res.text(), `${name}: the body`), 'first\n', name);
        assert.equal(await admittedWithin(send, '/ok'), 200, `${name}: the slot came back when it ended`);
      } finally {
        t.finish();
      }
    });
  }
});

/**
 * Front middleware that drop the answer behind them in ways shed() cannot hear from the
 * context, each only for a request with `?drop`: the server then sends another answer
 * whole, and only the server's own end of the exchange says the held body will never be read.
 */
const unheardDrops: [string, MiddlewareHandler, number][] = [
  [
    'a throw after next() of something that is not an Error (Hono hands it to the server, which answers 500)',
    async (c, next) => {
      await next();
      if (c.req.query('drop') !== undefined) throw 'not an Error';
    },
    500,
  ],
  [
    'a middleware in front that reads the body partly and drops it for another answer',
    async (c, next) => {
      await next();
      if (c.req.query('drop') === undefined) return;
      const reader = (c.res.body as ReadableStream<Uint8Array>).getReader();
      await reader.read();
      c.res = new Response('replaced', { status: 202 });
    },
    202,
  ],
];

test('with holdUntilBodyEnds over @hono/node-server, an answer dropped where shed() cannot hear it (a non-Error thrown after next(), a body read partly and dropped) gives its slot back, exactly once, when the server has sent its own', async () => {
  for (const [name, front, status] of unheardDrops) {
    const t = frontedApp(front);
    await withApp(t.app, async ({ origin }) => {
      const send = over(origin);
      try {
        assert.equal(await statusOf(send, '/stream?drop'), status, name);
        assert.equal(await admittedWithin(send, '/ok'), 200, `${name}: the slot came back`);
        // One slot, not two: a stream held now takes it alone.
        const res = await send('/stream');
        assert.equal(res.status, 200, name);
        assert.equal(await statusOf(send, '/ok'), 503, `${name}: the open body holds the only slot`);
        t.finish();
        assert.equal(await within(res.text(), `${name}: the body`), 'first\n', name);
        assert.equal(await admittedWithin(send, '/ok'), 200, `${name}: the slot came back when it ended`);
      } finally {
        t.finish();
      }
    });
  }
});

test('with holdUntilBodyEnds over @hono/node-server, an unread answer dropped by a non-Error thrown after next() has its body cancelled, so the handler hears its answer is not wanted', async () => {
  const t = frontedApp(unheardDrops[0]?.[1] as MiddlewareHandler);
  await withApp(t.app, async ({ origin }) => {
    try {
      assert.equal(await statusOf(over(origin), '/stream?drop'), 500);
      await within(t.cancelled, "the dropped body's cancel");
    } finally {
      t.finish();
    }
  });
});

test('with holdUntilBodyEnds over @hono/node-server, an answer dropped because app.onError itself threw gives its slot back once the server answered 500', async () => {
  const t = frontedApp(async (c, next) => {
    await next();
    if (c.req.query('drop') !== undefined) throw new Error('after next()');
  });
  t.app.onError((error) => {
    throw new Error(`onError failed on: ${error.message}`);
  });
  await withApp(t.app, async ({ origin }) => {
    const send = over(origin);
    try {
      assert.equal(await statusOf(send, '/stream?drop'), 500);
      await within(t.cancelled, "the dropped body's cancel");
      assert.equal(await admittedWithin(send, '/ok'), 200, 'the slot came back');
      assert.equal(await statusOf(send, '/ok'), 200, 'and stays free');
    } finally {
      t.finish();
    }
  });
});

test('with holdUntilBodyEnds over @hono/node-server, a handler that returns after a middleware in front answered in its stead (without throwing) gives its slot back when it returns', async () => {
  const entered = deferred();
  const late = deferred();
  const app = new Hono();
  // A hand-written deadline: answers 202 once the handler is running, and lets it run on.
  app.use(async (c, next) => {
    if (c.req.path !== '/slow') return next();
    next().catch(() => {});
    await entered.promise;
    return c.text('accepted', 202);
  });
  app.use(shed({ maxInFlight: 1, holdUntilBodyEnds: true }));
  app.get('/slow', async (c) => {
    entered.resolve();
    await late.promise;
    return c.text('too late');
  });
  app.get('/ok', (c) => c.text('ok'));
  await withApp(app, async ({ origin }) => {
    const send = over(origin);
    try {
      assert.equal(await statusOf(send, '/slow'), 202);
      assert.equal(await statusOf(send, '/ok'), 503, 'the handler still runs in the only slot');
      late.resolve();
      assert.equal(await admittedWithin(send, '/ok'), 200, 'the slot came back when it returned');
      assert.equal(await statusOf(send, '/ok'), 200, 'and stays free');
    } finally {
      late.resolve();
    }
  });
});

test("with holdUntilBodyEnds under a server that tells the end of an exchange by a `completed` promise (Deno.serve()'s handler info, as Deno drops its abort of the request's signal), an answer dropped unheard gives its slot back, and has its body cancelled, once the exchange completed", async () => {
  const t = frontedApp(unheardDrops[0]?.[1] as MiddlewareHandler);
  const completed = deferred();
  try {
    await assert.rejects(
      async () => t.app.request('/stream?drop', {}, { completed: completed.promise }),
      (thrown: unknown) => thrown === 'not an Error',
      'Hono hands the server what was thrown',
    );
    const probe = (): Promise<number> => statusOf(async (path) => t.app.request(path), '/ok');
    assert.equal(await probe(), 503, 'held until the server says the exchange is over');
    completed.resolve();
    await within(t.cancelled, "the dropped body's cancel");
    assert.equal(await probe(), 200, 'the slot came back');
    assert.equal(await probe(), 200, 'and stays free');
  } finally {
    t.finish();
  }
});
