import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { Hono } from 'hono';
import { cors } from 'hono/cors';
import { HTTPException } from 'hono/http-exception';
import { requestId } from 'hono/request-id';
import { streamSSE } from 'hono/streaming';
import { idempotency } from '../adapters/hono/idempotency.ts';
import {
  errorResponses,
  type UpstreamEnv,
  type UpstreamOptions,
  upstream,
} from '../adapters/hono/upstream.ts';
import {
  CircuitOpenError,
  GateClosedError,
  HttpStatusError,
  NetworkError,
  RetryAfterTooLongError,
  TimeoutError,
} from '../src/errors.ts';
import { definePolicy, type Policy } from '../src/policy.ts';
import { memoryStore, type Store } from '../src/store.ts';
import { retryDelay } from '../src/timing.ts';
import { collector } from './helpers/gc.ts';
import { assertClosedSoon, hangingUpstream, withApp } from './helpers/hono-server.ts';
import { always, closedPort, sequence, withServer } from './helpers/server.ts';
import { allowSlowTests } from './helpers/slow-tests.ts';

// 8,000 real calls in one test: a loaded machine makes it slow, not failed (Bun stops at 5 s).
await allowSlowTests();

/** A query string and header no response may ever show. */
const SECRET_QUERY = '?api_key=SECRET-123&user=me';

/**
 * An app whose `/call` fetches `target` through `policy` (throwing on failure
 * statuses) and answers errors through `errorResponses`.
 */
function gateway(policy: Policy, target: string): Hono<UpstreamEnv> {
  const app = new Hono<UpstreamEnv>();
  app.use(upstream(policy, { throwOnStatus: true }));
  app.get('/call', async (c) => {
    const res = await c.var.fetch(target);
    return c.text(await res.text(), 200);
  });
  app.onError(errorResponses({ policy }));
  return app;
}

/** Reads a problem response: status, Retry-After, body object and raw text. */
async function problemOf(res: Response): Promise<{
  status: number;
  retryAfter: string | null;
  body: Record<string, unknown>;
  text: string;
}> {
  const text = await res.text();
  assert.equal(res.headers.get('content-type'), 'application/problem+json');
  return { status: res.status, retryAfter: res.headers.get('retry-after'), body: JSON.parse(text), text };
}

function assertNoSecrets(text: string): void {
  assert.ok(!text.includes('SECRET'), `leaked the query: ${text}`);
  assert.ok(!text.includes('api_key'), `leaked the query: ${text}`);
  assert.ok(!text.includes('127.0.0.1'), `leaked the upstream address: ${text}`);
}

test('an upstream 503 with Retry-After: 7 reaches the client as a 503 problem with Retry-After: 7', async () => {
  await withServer(
    always({ status: 503, headers: { 'retry-after': '7' }, body: 'internal queue depth 9000' }),
    async (up) => {
      const policy = definePolicy({ name: 'github-mcp', retry: { attempts: 1 } });
      await withApp(gateway(policy, `${up.origin}/mcp${SECRET_QUERY}`), async (server) => {
        const res = await fetch(`${server.origin}/call`);
        const problem = await problemOf(res);
        assert.equal(problem.status, 503);
        assert.equal(problem.retryAfter, '7');
        assert.equal(retryDelay(res.headers), 7000);
        assert.equal(problem.body.upstream, 'github-mcp');
        assert.equal(problem.body.code, 'HTTP_STATUS');
        assert.equal(problem.body.title, 'Service Unavailable');
        assertNoSecrets(problem.text);
        assert.ok(!problem.text.includes('queue depth'), 'the upstream body stays inside');
      });
      assert.equal(up.requests.length, 1);
    },
  );
});

test('an open circuit answers 503 with Retry-After until the breaker lets a probe through', async () => {
  await withServer(always({ status: 500, body: 'down' }), async (up) => {
    const policy = definePolicy({
      name: 'search',
      retry: { attempts: 1 },
      breaker: { consecutiveFailures: 1, open: { initialMs: 2000, factor: 2, maxMs: 8000, jitter: 'none' } },
    });
    await withApp(gateway(policy, `${up.origin}/q${SECRET_QUERY}`), async (server) => {
      const first = await problemOf(await fetch(`${server.origin}/call`));
      assert.equal(first.status, 502, 'an upstream 500 is a bad gateway');
      assert.equal(first.body.upstream, 'search');
      const open = await problemOf(await fetch(`${server.origin}/call`));
      assert.equal(open.status, 503);
      assert.equal(open.retryAfter, '2');
      assert.equal(open.body.code, 'CIRCUIT_OPEN');
      assert.equal(open.body.upstream, 'search');
      assertNoSecrets(open.text);
    });
    assert.equal(up.requests.length, 1, 'the open circuit sent nothing');
  });
});

test('while the breaker probe is in flight, the 503 asks for at least a second, never Retry-After: 0', async () => {
  await withServer(sequence({ status: 500 }, { hang: true }), async (up) => {
    const policy = definePolicy({
      name: 'search',
      retry: { attempts: 1 },
      breaker: { consecutiveFailures: 1, open: { initialMs: 50, factor: 2, maxMs: 1000, jitter: 'none' } },
    });
    await withApp(gateway(policy, `${up.origin}/q`), async (server) => {
      await (await fetch(`${server.origin}/call`)).text();
      await new Promise((resolve) => setTimeout(resolve, 60));
      const controller = new AbortController();
      const probe = fetch(`${server.origin}/call`, { signal: controller.signal }).catch(() => undefined);
      while (up.requests.length < 2) await new Promise((resolve) => setTimeout(resolve, 5));
      const problem = await problemOf(await fetch(`${server.origin}/call`));
      controller.abort();
      await probe;
      assert.equal(problem.status, 503);
      assert.equal(problem.body.code, 'CIRCUIT_OPEN');
      assert.equal(problem.retryAfter, '1');
      assert.match(String(problem.body.detail), /retry in 1 s$/);
    });
  });
  // A start gate whose probe is in flight says the same (its retryAt is now).
  const gate = new GateClosedError({ key: 'mcp', retryAt: new Date() });
  assert.equal((await problemOf(await throwing(gate).request('/'))).retryAfter, '1');
});

test('an upstream that never answers within attemptMs gives a 504 problem', async () => {
  await withServer(always({ hang: true }), async (up) => {
    const policy = definePolicy({ name: 'slow', retry: { attempts: 1 }, timeout: { attemptMs: 100 } });
    await withApp(gateway(policy, `${up.origin}/${SECRET_QUERY}`), async (server) => {
      const started = Date.now();
      const problem = await problemOf(await fetch(`${server.origin}/call`));
      const took = Date.now() - started;
      assert.equal(problem.status, 504);
      assert.equal(problem.retryAfter, null);
      assert.equal(problem.body.code, 'TIMEOUT');
      assert.equal(problem.body.upstream, 'slow');
      assert.ok(took >= 90 && took < 1000, `took ${took} ms`);
      assertNoSecrets(problem.text);
    });
  });
});

test('an upstream on a closed port gives a 502 problem', async () => {
  const port = await closedPort();
  const policy = definePolicy({ name: 'tools', retry: { attempts: 1 } });
  await withApp(gateway(policy, `http://127.0.0.1:${port}/${SECRET_QUERY}`), async (server) => {
    const problem = await problemOf(await fetch(`${server.origin}/call`));
    assert.equal(problem.status, 502);
    assert.equal(problem.body.code, 'ECONNREFUSED');
    assert.equal(problem.body.upstream, 'tools');
    assertNoSecrets(problem.text);
  });
});

/**
 * A Hono app with `upstream()` on an `agent` policy (one attempt, so an abort is not
 * retried), and `handlerDone`, which its handler settles (`settled()`) when it ends.
 */
function agentBehindUpstream(): {
  policy: Policy;
  app: Hono<UpstreamEnv>;
  settled: () => void;
  handlerDone: Promise<void>;
} {
  const policy = definePolicy({ name: 'agent', retry: { attempts: 1 } });
  const app = new Hono<UpstreamEnv>();
  app.use(upstream(policy));
  let settled: () => void = () => {};
  const handlerDone = new Promise<void>((resolve) => {
    settled = resolve;
  });
  return { policy, app, settled, handlerDone };
}

for (const withOwnSignal of [false, true]) {
  const how = withOwnSignal ? 'a call with its own signal' : 'a call without a signal';
  test(`a client that goes away aborts the upstream call (${how})`, async () => {
    const up = hangingUpstream();
    const outcome: { error?: unknown } = {};
    await withApp(up.app, async (upServer) => {
      const { policy, app, settled, handlerDone } = agentBehindUpstream();
      app.get('/call', async (c) => {
        try {
          const own = new AbortController();
          const res = await c.var.fetch(upServer.origin, withOwnSignal ? { signal: own.signal } : undefined);
          return c.text(await res.text());
        } catch (error) {
          outcome.error = error;
          throw error;
        } finally {
          settled();
        }
      });
      app.onError(errorResponses({ policy }));
      await withApp(app, async (server) => {
        const controller = new AbortController();
        const call = fetch(`${server.origin}/call`, { signal: controller.signal });
        await up.received;
        const abortedAt = Date.now();
        controller.abort();
        await assert.rejects(call);
        await assertClosedSoon(up.closed, abortedAt);
        await handlerDone;
      });
    });
    assert.equal((outcome.error as { name?: string } | undefined)?.name, 'AbortError');
  });
}

test("with no name for the upstream, a problem shows no address: the key is then the URL's origin, and is left out", async () => {
  await withServer(always({ status: 503, headers: { 'retry-after': '7' } }), async (up) => {
    const policy = definePolicy({ retry: { attempts: 1 } });
    await withApp(gateway(policy, `${up.origin}/mcp${SECRET_QUERY}`), async (server) => {
      const problem = await problemOf(await fetch(`${server.origin}/call`));
      assert.equal(problem.status, 503);
      assert.equal(problem.retryAfter, '7');
      assert.equal(problem.body.upstream, undefined);
      assert.match(String(problem.body.detail), /^the upstream answered 503/);
      assertNoSecrets(problem.text);
    });
  });
});

test("the caller's own signal still aborts an upstream call", async () => {
  await withServer(always({ hang: true }), async (up) => {
    const policy = definePolicy({ name: 'agent', retry: { attempts: 1 } });
    const app = new Hono<UpstreamEnv>();
    app.use(upstream(policy));
    app.get('/call', async (c) => {
      const own = new AbortController();
      const reason = new Error('caller gave up');
      setTimeout(() => own.abort(reason), 20);
      const error = await c.var.fetch(up.origin, { signal: own.signal }).then(
        () => undefined,
        (e: unknown) => e,
      );
      return c.text(error === reason ? 'own reason' : `other: ${String(error)}`);
    });
    const res = await app.request('/call');
    assert.equal(await res.text(), 'own reason');
  });
});

test('without throwOnStatus, c.var.fetch returns failure responses as fetch does', async () => {
  await withServer(always({ status: 404, body: 'no such tool' }), async (up) => {
    const policy = definePolicy({ name: 'tools', retry: { attempts: 1 } });
    const app = new Hono<UpstreamEnv>();
    app.use(upstream(policy));
    app.get('/call', async (c) => {
      const res = await c.var.fetch(up.origin);
      return c.text(`${res.status} ${await res.text()}`);
    });
    const res = await app.request('/call');
    assert.equal(await res.text(), '404 no such tool');
  });
});

test('throwOnStatus with a list throws only for the listed statuses', async () => {
  await withServer(always({ status: 404, body: 'no such tool' }), async (up) => {
    const policy = definePolicy({ name: 'tools', retry: { attempts: 1 } });
    const app = new Hono<UpstreamEnv>();
    app.use('/strict', upstream(policy, { throwOnStatus: [404] }));
    app.use('/lenient', upstream(policy, { throwOnStatus: [503] }));
    for (const path of ['/strict', '/lenient']) {
      app.get(path, async (c) => {
        const res = await c.var.fetch(up.origin);
        return c.text(`${res.status} ${await res.text()}`);
      });
    }
    app.onError(errorResponses({ policy }));
    const strict = await problemOf(await app.request('/strict'));
    assert.equal(strict.status, 502);
    assert.equal(strict.body.detail, 'upstream "tools" answered 404');
    const lenient = await app.request('/lenient');
    assert.equal(await lenient.text(), '404 no such tool');
  });
});

/** An app whose only route throws `error`, answered by `errorResponses(options)`. */
function throwing(error: unknown, options?: Parameters<typeof errorResponses>[0]): Hono {
  const app = new Hono();
  app.get('/', () => {
    throw error;
  });
  app.onError(errorResponses(options));
  return app;
}

const request = { key: 'github-mcp', method: 'GET', url: 'https://api.example.com/x?token=[redacted]' };

test('errorResponses caps a CircuitOpenError Retry-After at maxRetryAfterMs', async () => {
  const error = new CircuitOpenError({
    key: 'github-mcp',
    retryAt: new Date(Date.now() + 30_000),
    reason: 'test',
  });
  const capped = await problemOf(await throwing(error, { maxRetryAfterMs: 10_000 }).request('/'));
  assert.equal(capped.status, 503);
  assert.equal(capped.retryAfter, '10');
  const uncapped = await problemOf(await throwing(error).request('/'));
  assert.ok(['30', '29'].includes(uncapped.retryAfter ?? ''), `Retry-After ${uncapped.retryAfter}`);
});

test("errorResponses turns RetryAfterTooLongError into a 503 capped by the policy's maxRetryAfterMs", async () => {
  const policy = definePolicy({ retry: { maxRetryAfterMs: 20_000 } });
  const error = new RetryAfterTooLongError({ retryAfterMs: 3_600_000, limitMs: 20_000, request });
  const problem = await problemOf(await throwing(error, { policy }).request('/'));
  assert.equal(problem.status, 503);
  assert.equal(problem.retryAfter, '20');
  assert.equal(problem.body.code, 'RETRY_AFTER_TOO_LONG');
  assert.equal(problem.body.upstream, 'github-mcp');
  assert.ok(
    !problem.text.includes('redacted') && !problem.text.includes('api.example.com'),
    "!problem.text.includes('redacted') && !problem.text.includes('api.example.com')",
  );
});

test('errorResponses maps an upstream 429 with a delay to 503, and other statuses to 502', async () => {
  const limited = new HttpStatusError({ status: 429, retryAfterMs: 4500, request });
  const slowDown = await problemOf(await throwing(limited).request('/'));
  assert.equal(slowDown.status, 503);
  assert.equal(slowDown.retryAfter, '5');
  const broken = new HttpStatusError({ status: 500, body: 'stack trace at db.js:12', request });
  const bad = await problemOf(await throwing(broken).request('/'));
  assert.equal(bad.status, 502);
  assert.equal(bad.retryAfter, null);
  assert.ok(!bad.text.includes('stack trace'), "!bad.text.includes('stack trace')");
  const timeout = await problemOf(
    await throwing(new TimeoutError({ scope: 'total', ms: 5000, request })).request('/'),
  );
  assert.equal(timeout.status, 504);
  const network = await problemOf(
    await throwing(new NetworkError({ code: 'ENOTFOUND', phase: 'connect', sent: 'no', request })).request(
      '/',
    ),
  );
  assert.equal(network.status, 502);
  assert.equal(network.body.code, 'ENOTFOUND');
});

test('errorResponses answers unknown errors with a bare 500 problem, or the fallback', async () => {
  const internal = new Error('password=hunter2 in db config');
  const problem = await problemOf(await throwing(internal).request('/'));
  assert.equal(problem.status, 500);
  assert.deepEqual(problem.body, { type: 'about:blank', status: 500, title: 'Internal Server Error' });
  const custom = await throwing(internal, { fallback: (_err, c) => c.text('custom', 500) }).request('/');
  assert.equal(await custom.text(), 'custom');
});

test("errorResponses keeps an HTTPException's own response", async () => {
  const res = await throwing(new HTTPException(401, { message: 'who are you' })).request('/');
  assert.equal(res.status, 401);
  assert.equal(await res.text(), 'who are you');
});

test('errorResponses answers an abort of the incoming request with 499', async () => {
  const app = new Hono();
  app.get('/', () => {
    throw new DOMException('the client closed the request', 'AbortError');
  });
  app.onError(errorResponses());
  const controller = new AbortController();
  controller.abort();
  const res = await app.request(new Request('http://localhost/', { signal: controller.signal }));
  await res.body?.cancel();
  assert.equal(res.status, 499);
});

test('upstream() and errorResponses() reject bad options with a TypeError', () => {
  const policy = definePolicy({});
  assert.throws(
    () => upstream({} as Policy),
    (e: unknown) => e instanceof TypeError && /upstream\(policy\)/.test(e.message),
  );
  assert.throws(
    () => upstream(policy, { bogus: true } as never),
    (e: unknown) => e instanceof TypeError && /unknown option "bogus"/.test(e.message),
  );
  assert.throws(
    () => upstream(policy, { throwOnStatus: [42] }),
    (e: unknown) => e instanceof TypeError && /throwOnStatus/.test(e.message),
  );
  assert.throws(
    () => errorResponses({ maxRetryAfterMs: -1 }),
    (e: unknown) => e instanceof TypeError && /errorResponses\(\)\.maxRetryAfterMs/.test(e.message),
  );
});

test('a client that goes away mid-stream aborts the upstream call its streaming handler made with its own signal', async () => {
  // streamSSE returns its Response at once and writes afterwards, so upstream()'s
  // middleware has finished (next() returned) while the handler still calls upstreams.
  const up = hangingUpstream();
  const outcome: { error?: unknown } = {};
  await withApp(up.app, async (upServer) => {
    const { app, settled, handlerDone } = agentBehindUpstream();
    app.get('/events', (c) =>
      streamSSE(c, async (stream) => {
        await stream.writeSSE({ data: 'working' });
        const own = new AbortController();
        try {
          const res = await c.var.fetch(upServer.origin, { signal: own.signal });
          await stream.writeSSE({ data: await res.text() });
        } catch (error) {
          outcome.error = error;
        } finally {
          settled();
        }
      }),
    );
    await withApp(app, async (server) => {
      const controller = new AbortController();
      const res = await fetch(`${server.origin}/events`, { signal: controller.signal });
      await res.body?.getReader().read();
      await up.received;
      const abortedAt = Date.now();
      controller.abort();
      await assertClosedSoon(up.closed, abortedAt);
      await handlerDone;
    });
  });
  assert.equal((outcome.error as { name?: string } | undefined)?.name, 'AbortError');
});

test('a keyed request under idempotency() runs its upstream calls to the end even when upstream() is registered before idempotency()', async () => {
  // A global upstream() first and idempotency() on a route after it is the usual Hono
  // order; the retry is coming for the answer whichever order the two were registered in.
  let reserved = 0;
  let started: () => void = () => {};
  const reserving = new Promise<void>((resolve) => {
    started = resolve;
  });
  const inventory = new Hono();
  inventory.post('/reserve', async (c) => {
    started();
    await new Promise((resolve) => setTimeout(resolve, 150));
    reserved++;
    return c.json({ reservation: `r-${reserved}` }, 201);
  });
  const inner = memoryStore();
  let recorded: () => void = () => {};
  const settled = new Promise<void>((resolve) => {
    recorded = resolve;
  });
  const store: Store = {
    get: (key) => inner.get(key),
    set: (key, value, ttlMs) => inner.set(key, value, ttlMs),
    increment: (key, by, ttlMs) => inner.increment(key, by, ttlMs),
    delete: (key) => inner.delete(key),
    async compareAndSet(key, expected, next, ttlMs) {
      const swapped = await inner.compareAndSet(key, expected, next, ttlMs);
      if (swapped && (next as { state?: unknown }).state !== 'running') recorded();
      return swapped;
    },
  };
  await withApp(inventory, async (up) => {
    const app = new Hono<UpstreamEnv>();
    app.use('*', upstream(definePolicy({ name: 'inventory', retry: { attempts: 1 } })));
    app.use('/orders', idempotency({ store }));
    app.post('/orders', async (c) => {
      const res = await c.var.fetch(`${up.origin}/reserve`, { method: 'POST', body: '{}' });
      return c.json(await res.json(), 201);
    });
    app.onError(errorResponses());
    await withApp(app, async (server) => {
      const send = (signal: AbortSignal | null): Promise<Response> =>
        fetch(`${server.origin}/orders`, {
          method: 'POST',
          body: '{"sku":"tea"}',
          headers: { 'idempotency-key': '"order-1"' },
          signal,
        });
      const leave = new AbortController();
      const first = send(leave.signal);
      await reserving;
      leave.abort();
      await assert.rejects(first);
      await settled;
      const again = await send(null);
      assert.equal(again.status, 201);
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await again.json(), { reservation: 'r-1' });
    });
  });
  assert.equal(reserved, 1);
});

test('a client that goes away mid-stream stops the upstream body its streaming handler is relaying, for a call with its own signal too', async () => {
  // The call's answer arrives while the stream runs; its body is read on after that,
  // and Hono's stream writes go nowhere once the client has left.
  let closed: (at: number) => void = () => {};
  const upstreamClosed = new Promise<number>((resolve) => {
    closed = resolve;
  });
  const tokens = new Hono();
  tokens.get('/tokens', () => {
    const encoder = new TextEncoder();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        return new Promise<void>((resolve) => {
          timer = setTimeout(() => {
            controller.enqueue(encoder.encode('token '));
            resolve();
          }, 20);
        });
      },
      cancel() {
        clearTimeout(timer);
        closed(Date.now());
      },
    });
    return new Response(body, { headers: { 'content-type': 'text/plain' } });
  });
  let relayed: () => void = () => {};
  const handlerDone = new Promise<void>((resolve) => {
    relayed = resolve;
  });
  await withApp(tokens, async (up) => {
    const app = new Hono<UpstreamEnv>();
    app.use(upstream(definePolicy({ name: 'model', retry: { attempts: 1 } })));
    app.get('/events', (c) =>
      streamSSE(c, async (stream) => {
        const own = new AbortController();
        try {
          const res = await c.var.fetch(`${up.origin}/tokens`, { signal: own.signal });
          const decoder = new TextDecoder();
          const reader = (res.body as ReadableStream<Uint8Array>).getReader();
          for (let read = await reader.read(); !read.done; read = await reader.read()) {
            await stream.writeSSE({ data: decoder.decode(read.value) });
          }
        } catch {
          // The abort that ends the relay.
        } finally {
          relayed();
        }
      }),
    );
    await withApp(app, async (server) => {
      const controller = new AbortController();
      const res = await fetch(`${server.origin}/events`, { signal: controller.signal });
      await res.body?.getReader().read();
      const abortedAt = Date.now();
      controller.abort();
      await assertClosedSoon(upstreamClosed, abortedAt);
      await handlerDone;
    });
  });
});

/** Rounds of collection in a row that must free less than {@link SETTLED_BYTES} before the heap counts as settled. */
const SETTLED_ROUNDS = 3;
/** What a round may still free and count as settled (64 KiB: 40 finished calls' worth). */
const SETTLED_BYTES = 65_536;
/** Rounds at most, so a heap that never settles (a runtime with no forced collection) still gets read. */
const MAX_GC_ROUNDS = 30;

/**
 * `heapUsed` once full collections a task apart have stopped freeing memory. What a
 * finished call leaves goes in stages, each a FinalizationRegistry callback run in a
 * task after a collection (the follower registry's unhooks a signal's listener; only
 * then may the next collection take the signal, and undici's registry the rest). A
 * fixed three collections 10 ms apart left stages undone on a loaded machine (the
 * suite two files at a time): 6.8 MB read where one more round read 0.9 MB. What a
 * leak holds stays through any number of rounds.
 */
async function settledHeap(collect: () => void): Promise<number> {
  let heap = Number.POSITIVE_INFINITY;
  let quiet = 0;
  for (let round = 0; round < MAX_GC_ROUNDS && quiet < SETTLED_ROUNDS; round++) {
    collect();
    await new Promise((resolve) => setTimeout(resolve, 10));
    const now = process.memoryUsage().heapUsed;
    quiet = heap - now < SETTLED_BYTES ? quiet + 1 : 0;
    heap = Math.min(heap, now);
  }
  return heap;
}

/**
 * How much the heap grew over `calls` upstream calls made one after another inside one
 * SSE request, each with the signal `signalOf` gives (after 500 calls to warm up, each
 * reading taken once collections have stopped freeing memory: see {@link settledHeap}).
 */
async function heapGrowthInOneStream(
  calls: number,
  signalOf: (shutdown: AbortSignal, request: Request) => AbortSignal,
): Promise<number> {
  const collect = collector();
  const up = new Hono();
  up.get('/', (c) => c.text('ok'));
  let grew = Number.NaN;
  await withApp(up, async (upServer) => {
    const { app, settled, handlerDone } = agentBehindUpstream();
    const shutdown = new AbortController();
    app.get('/events', (c) =>
      streamSSE(c, async (stream) => {
        const call = async (): Promise<void> => {
          const signal = signalOf(shutdown.signal, c.req.raw);
          await (await c.var.fetch(upServer.origin, { signal })).text();
        };
        try {
          for (let i = 0; i < 500; i++) await call();
          const before = await settledHeap(collect);
          for (let i = 0; i < calls; i++) await call();
          grew = (await settledHeap(collect)) - before;
          await stream.writeSSE({ data: 'done' });
        } finally {
          settled();
        }
      }),
    );
    await withApp(app, async (server) => {
      const res = await fetch(`${server.origin}/events`);
      assert.match(await res.text(), /data: done/);
      await handlerDone;
    });
  });
  return grew;
}

test('a streaming handler that calls upstream with its own signal again and again keeps no memory per finished call', async () => {
  // An SSE handler calling an upstream every second for hours: each call's link to the
  // client (a controller) was kept for the request's life, about 1.6 KB a call on Node.
  const calls = 8000;
  const grew = await heapGrowthInOneStream(calls, (shutdown) => shutdown);
  assert.ok(grew < 4_000_000, `heapUsed grew ${(grew / 1e6).toFixed(2)} MB over ${calls} calls`);
});

test('a call with its own signal still ends with its client after full collections, both while it waits for its answer and while its body is relayed', async () => {
  // Its controller is held weakly on the signals it follows: only the call and then its
  // response body keep it alive. Collected early, the client's leaving would reach nobody.
  const collect = collector();
  const gc = async (): Promise<void> => {
    for (let i = 0; i < 3; i++) {
      collect();
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  };
  const up = hangingUpstream();
  await withApp(up.app, async (upServer) => {
    const { app, settled, handlerDone } = agentBehindUpstream();
    app.get('/wait', async (c) => {
      try {
        return c.text(
          await (await c.var.fetch(upServer.origin, { signal: new AbortController().signal })).text(),
        );
      } finally {
        settled();
      }
    });
    await withApp(app, async (server) => {
      const controller = new AbortController();
      const call = fetch(`${server.origin}/wait`, { signal: controller.signal });
      await up.received;
      await gc();
      const abortedAt = Date.now();
      controller.abort();
      await assert.rejects(call);
      await assertClosedSoon(up.closed, abortedAt);
      await handlerDone;
    });
  });

  let closed: (at: number) => void = () => {};
  const upstreamClosed = new Promise<number>((resolve) => {
    closed = resolve;
  });
  const tokens = new Hono();
  tokens.get('/tokens', () => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        return new Promise<void>((resolve) => {
          timer = setTimeout(() => {
            controller.enqueue(new TextEncoder().encode('token '));
            resolve();
          }, 20);
        });
      },
      cancel() {
        clearTimeout(timer);
        closed(Date.now());
      },
    });
    return new Response(body, { headers: { 'content-type': 'text/plain' } });
  });
  await withApp(tokens, async (upServer) => {
    const { app, settled, handlerDone } = agentBehindUpstream();
    app.get('/events', (c) =>
      streamSSE(c, async (stream) => {
        try {
          const res = await c.var.fetch(`${upServer.origin}/tokens`, {
            signal: new AbortController().signal,
          });
          // The reader alone holds the body (and so the call's controller) from here on.
          const reader = (res.body as ReadableStream<Uint8Array>).getReader();
          for (let read = await reader.read(); !read.done; read = await reader.read()) {
            await stream.writeSSE({ data: new TextDecoder().decode(read.value) });
          }
        } catch {
          // The abort that ends the relay.
        } finally {
          settled();
        }
      }),
    );
    await withApp(app, async (server) => {
      const controller = new AbortController();
      const res = await fetch(`${server.origin}/events`, { signal: controller.signal });
      await res.body?.getReader().read();
      await gc();
      const abortedAt = Date.now();
      controller.abort();
      await assertClosedSoon(upstreamClosed, abortedAt);
      await handlerDone;
    });
  });
});

test('a streaming handler whose calls each pass an AbortSignal.any() of signals that never abort keeps no memory per finished call', async () => {
  // A runtime keeps a signal from AbortSignal.any() alive while it has an abort listener
  // and can still abort (Node's gcPersistentSignals, Bun too): a listener left on each
  // call's own signal kept that signal, and what follows it, for good.
  const calls = 8000;
  const grew = await heapGrowthInOneStream(calls, (shutdown, request) =>
    AbortSignal.any([shutdown, request.signal]),
  );
  assert.ok(grew < 4_000_000, `heapUsed grew ${(grew / 1e6).toFixed(2)} MB over ${calls} calls`);
});

test("behind hono's cors(), errorResponses()' 503 for an upstream's 429 names Retry-After in Access-Control-Expose-Headers", async () => {
  await withServer(always({ status: 429, headers: { 'retry-after': '7' } }), async (server) => {
    const policy = definePolicy({ retry: { attempts: 1 } });
    const app = new Hono<UpstreamEnv>();
    app.use('*', cors());
    app.use(upstream(policy, { throwOnStatus: true }));
    app.get('/call', async (c) => c.text(await (await c.var.fetch(server.origin)).text()));
    app.onError(errorResponses({ policy }));
    await withApp(app, async ({ origin }) => {
      const res = await fetch(`${origin}/call`, { headers: { origin: 'http://127.0.0.1:1' } });
      await res.text();
      assert.equal(res.status, 503);
      assert.equal(res.headers.get('retry-after'), '7');
      const names = (res.headers.get('access-control-expose-headers') ?? '').toLowerCase().split(/\s*,\s*/);
      assert.ok(names.includes('retry-after'), `exposed: ${names}`);
    });
  });
});

/** A RequestInit whose members are getters on its class: fetch (a WebIDL dictionary) reads them. */
class GetterInit {
  get method(): string {
    return 'POST';
  }
  get body(): string {
    return '{"upstream":1}';
  }
  get headers(): Record<string, string> {
    return { 'content-type': 'application/json', 'x-forwarded-tool': 'search' };
  }
}

test('c.var.fetch sends an init whose members are a class’s getters whole: method, body and headers, as raw fetch does', async () => {
  await withServer(always({ status: 200 }), async (up) => {
    const policy = definePolicy({ name: 'tools', retry: { attempts: 1 } });
    const app = new Hono<UpstreamEnv>();
    app.use(upstream(policy));
    app.get('/call', async (c) => {
      // The premise: raw fetch reads these members.
      await (await globalThis.fetch(`${up.origin}/raw`, new GetterInit() as RequestInit)).text();
      const res = await c.var.fetch(`${up.origin}/upstream`, new GetterInit() as RequestInit);
      return c.text(await res.text());
    });
    assert.equal((await app.request('/call')).status, 200);
    const [raw, sent] = up.requests;
    assert.equal(raw?.method, 'POST', 'raw fetch');
    assert.equal(sent?.method, 'POST');
    assert.equal(sent?.text, '{"upstream":1}');
    assert.equal(sent?.headers['content-type'], 'application/json');
    assert.equal(sent?.headers['x-forwarded-tool'], 'search');
  });
});

/**
 * An app whose keyed `POST /checkout` (idempotency(), then upstream(policy, options)) posts
 * `{"sku":"tea"}` to `orders` through `c.var.fetch` and answers its JSON with 201.
 */
function checkoutApp(policy: Policy, orders: string, options?: UpstreamOptions): Hono<UpstreamEnv> {
  const app = new Hono<UpstreamEnv>();
  app.use('/checkout', idempotency());
  app.use('/checkout', upstream(policy, options));
  app.post('/checkout', async (c) => {
    const res = await c.var.fetch(orders, { method: 'POST', body: '{"sku":"tea"}' });
    return c.json(await res.json(), 201);
  });
  app.onError(errorResponses({ policy }));
  return app;
}

/** A client's `POST /checkout` to `origin` with Idempotency-Key `"key"`. */
function checkout(origin: string, key: string): Promise<Response> {
  return fetch(`${origin}/checkout`, {
    method: 'POST',
    body: '{"sku":"tea"}',
    headers: { 'content-type': 'application/json', 'idempotency-key': `"${key}"` },
  });
}

for (const [how, settings] of [
  ['idempotencyKeys', { idempotencyKeys: true }],
  ["resend: 'always'", { retry: { resend: 'always' } }],
] as const) {
  test(`a keyed POST the upstream answered 303 See Other, whose GET then met a 429 asking for an hour, keeps its key (${how}): fetch followed the 303, so the POST ran, and a resend with the same key does not run it again`, async () => {
    let placed = 0;
    const orders = new Hono();
    orders.post('/orders', (c) => {
      placed++;
      return c.redirect('/orders/1', 303);
    });
    orders.get('/orders/1', (c) => c.text('slow down', 429, { 'retry-after': '3600' }));
    await withApp(orders, async (up) => {
      // Retry resends this POST (its own key, or 'always'), so the 429's wait ends the call as
      // RetryAfterTooLongError. No breaker: pacing would refuse the resend's call, hiding a second run.
      const policy = definePolicy({ name: 'orders', breaker: false, ...settings });
      await withApp(checkoutApp(policy, `${up.origin}/orders`), async (server) => {
        const send = (): Promise<Response> => checkout(server.origin, 'checkout-1');
        const first = await send();
        assert.equal(first.status, 503);
        assert.equal((await first.json()).code, 'RETRY_AFTER_TOO_LONG');
        assert.notEqual(first.headers.get('x-should-retry'), 'true', 'the POST ran: its key is not freed');
        const again = await send();
        assert.equal(again.status, 503);
        assert.equal(again.headers.get('idempotent-replayed'), 'true');
        await again.body?.cancel();
      });
    });
    assert.equal(placed, 1, 'the POST ran once, not again for the resend');
  });
}

test("a keyed request whose GET met the upstream's 503 asking for an hour frees its key (x-should-retry: true): a GET has no effect to run twice, so the answer is a passing state, not the key's outcome", async () => {
  let priced = 0;
  const prices = new Hono();
  prices.get('/price', (c) =>
    ++priced === 1 ? c.text('maintenance', 503, { 'retry-after': '3600' }) : c.json({ price: 3 }),
  );
  await withApp(prices, async (up) => {
    const policy = definePolicy({ name: 'prices', breaker: false });
    const app = new Hono<UpstreamEnv>();
    app.use('/quote', idempotency());
    app.use('/quote', upstream(policy));
    app.post('/quote', async (c) => c.json(await (await c.var.fetch(`${up.origin}/price`)).json(), 201));
    app.onError(errorResponses({ policy }));
    await withApp(app, async (server) => {
      const send = (): Promise<Response> =>
        fetch(`${server.origin}/quote`, {
          method: 'POST',
          body: '{}',
          headers: { 'content-type': 'application/json', 'idempotency-key': '"quote-1"' },
        });
      const refused = await send();
      assert.equal(refused.status, 503);
      assert.equal((await refused.json()).code, 'RETRY_AFTER_TOO_LONG');
      assert.equal(refused.headers.get('x-should-retry'), 'true');
      const retried = await send();
      assert.equal(retried.status, 201);
      assert.deepEqual(await retried.json(), { price: 3 });
    });
  });
  assert.equal(priced, 2);
});

test("a keyed POST the upstream answered 303 See Other, whose GET (auth() following it, for a token in x-api-key) met a refused connection, keeps its key: the POST ran, and neither the policy nor the client's resend runs it again", async () => {
  const gone = await closedPort();
  let placed = 0;
  const orders = new Hono();
  orders.post('/orders', (c) => {
    placed++;
    return c.redirect(`http://127.0.0.1:${gone}/orders/1`, 303);
  });
  await withApp(orders, async (up) => {
    const policy = definePolicy({
      name: 'orders',
      breaker: false,
      retry: { backoff: { initialMs: 5, jitter: 'none' } },
    });
    const app = checkoutApp(policy, `${up.origin}/orders`, {
      auth: { token: 'k', header: 'x-api-key', scheme: '' },
    });
    await withApp(app, async (server) => {
      const send = (): Promise<Response> => checkout(server.origin, 'checkout-2');
      const first = await send();
      assert.equal(first.status, 502);
      await first.body?.cancel();
      assert.notEqual(first.headers.get('x-should-retry'), 'true', 'the POST ran: its key is not freed');
      const again = await send();
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      await again.body?.cancel();
    });
  });
  assert.equal(placed, 1, 'the POST ran once');
});

test('a keyed POST the policy resent on its own Idempotency-Key after a 503, whose resend met a refused connection, keeps its key: the 503 may have run it', async () => {
  let placed = 0;
  const up = createServer((_req, res) => {
    placed++;
    res.writeHead(503, { 'retry-after-ms': '5', connection: 'close' }).end('down');
    // Gone after its answer: the resend's connection is refused.
    up.close();
  });
  await new Promise<void>((resolve) => up.listen(0, '127.0.0.1', resolve));
  const { port } = up.address() as AddressInfo;
  const policy = definePolicy({ name: 'orders', breaker: false, idempotencyKeys: true });
  await withApp(checkoutApp(policy, `http://127.0.0.1:${port}/orders`), async (server) => {
    const res = await checkout(server.origin, 'checkout-3');
    assert.equal(res.status, 502);
    await res.body?.cancel();
    assert.notEqual(
      res.headers.get('x-should-retry'),
      'true',
      'the 503 may have run it: its key is not freed',
    );
  });
  assert.equal(placed, 1);
});

test('a keyed POST the policy resent on its own Idempotency-Key after a 503, whose resend the opened circuit refused, keeps its key: the 503 may have run it', async () => {
  await withServer(always({ status: 503, headers: { 'retry-after-ms': '5' } }), async (up) => {
    const policy = definePolicy({
      name: 'orders',
      idempotencyKeys: true,
      breaker: { consecutiveFailures: 1, open: { initialMs: 3_600_000, maxMs: 3_600_000, jitter: 'none' } },
    });
    await withApp(checkoutApp(policy, `${up.origin}/orders`), async (server) => {
      const res = await checkout(server.origin, 'checkout-4');
      assert.equal(res.status, 503);
      assert.equal((await res.json()).code, 'CIRCUIT_OPEN');
      assert.notEqual(
        res.headers.get('x-should-retry'),
        'true',
        'the 503 may have run it: its key is not freed',
      );
    });
    assert.equal(up.requests.length, 1);
  });
});

test("errorResponses()' answer carries the headers set in front for this request (hono/request-id's X-Request-Id), as the handler's own answer would, over a real server", async () => {
  const port = await closedPort();
  const policy = definePolicy({ name: 'down', retry: { attempts: 1 } });
  const app = new Hono<UpstreamEnv>();
  app.use(requestId());
  app.use(upstream(policy, { throwOnStatus: true }));
  app.get('/call', async (c) => c.text(await (await c.var.fetch(`http://127.0.0.1:${port}/`)).text()));
  app.get('/thrown', () => {
    throw new HTTPException(418, { message: 'teapot' });
  });
  app.onError(errorResponses({ policy }));
  await withApp(app, async ({ origin }) => {
    const failed = await fetch(`${origin}/call`, { headers: { 'x-request-id': 'failed' } });
    const problem = await problemOf(failed);
    assert.deepEqual([problem.status, failed.headers.get('x-request-id')], [502, 'failed']);
    const thrown = await fetch(`${origin}/thrown`, { headers: { 'x-request-id': 'thrown' } });
    assert.equal(await thrown.text(), 'teapot');
    assert.deepEqual([thrown.status, thrown.headers.get('x-request-id')], [418, 'thrown']);
  });
});

test("errorResponses()' answer leaves out the headers that describe another body (content-length, content-encoding, content-range, transfer-encoding, content-type) which the handler set before it threw, so the client reads the problem whole, over a real server", async () => {
  const app = new Hono();
  app.use(requestId());
  app.get('/file', (c) => {
    c.header('content-length', '5000');
    c.header('content-encoding', 'gzip');
    c.header('content-range', 'bytes 0-4999/10000');
    c.header('content-type', 'application/octet-stream');
    throw new Error('ENOENT: the file went away');
  });
  app.onError(errorResponses());
  await withApp(app, async ({ origin }) => {
    const res = await fetch(`${origin}/file`, { headers: { 'x-request-id': 'file' } });
    const problem = await problemOf(res);
    assert.equal(problem.status, 500);
    assert.deepEqual(
      ['content-encoding', 'content-range', 'content-type', 'x-request-id'].map((name) =>
        res.headers.get(name),
      ),
      [null, null, 'application/problem+json', 'file'],
    );
    assert.notEqual(res.headers.get('content-length'), '5000');
  });
});
