import assert from 'node:assert/strict';
import process from 'node:process';
import { test } from 'node:test';
import { Hono } from 'hono';
import { cors } from 'hono/cors';
import { requestId } from 'hono/request-id';
import { streamText } from 'hono/streaming';
import { sha256Hex } from '../adapters/hono/digest.ts';
import { DEFAULT_LEASE_MS, idempotency, REPLAYED_HEADER } from '../adapters/hono/idempotency.ts';
import { proxy } from '../adapters/hono/proxy.ts';
import { errorResponses, type UpstreamEnv, upstream } from '../adapters/hono/upstream.ts';
import { definePolicy } from '../src/policy.ts';
import { type JsonValue, memoryStore, type Store } from '../src/store.ts';
import { withApp } from './helpers/hono-server.ts';
import { always, closedPort, withServer } from './helpers/server.ts';

const KEY = '"8e03978e-40d5-43e8-bc93-6894a57f9324"';

const RETRY_KEY = '"0b7e3a52-9d0e-4d61-a2a4-0f0c1b2a3d4e"';

/** A promise and the function that resolves it. */
function signal(): { promise: Promise<void>; fire: () => void } {
  let fire = (): void => {};
  const promise = new Promise<void>((resolve) => {
    fire = resolve;
  });
  return { promise, fire };
}

/** `inner` with its compareAndSet replaced (to watch, slow or count the writes); every other call goes straight to it. */
function withCompareAndSet(inner: Store, compareAndSet: Store['compareAndSet']): Store {
  return { ...inner, get: (key) => inner.get(key), delete: (key) => inner.delete(key), compareAndSet };
}

/** A memory store that fires `recorded` once a final record (not a claim) is written. */
function watchedStore(): Store & { recorded: Promise<void> } {
  const inner = memoryStore<JsonValue>();
  const recorded = signal();
  const store = withCompareAndSet(inner, async (key, expected, next, ttlMs) => {
    const done = await inner.compareAndSet(key, expected, next, ttlMs);
    if (done && (next as { state?: string }).state !== 'running') recorded.fire();
    return done;
  });
  return { ...store, recorded: recorded.promise };
}

/** A POST with a key (and a body), as `app.request` takes it. */
function post(body: string, key: string | null = KEY, headers: Record<string, string> = {}): RequestInit {
  return {
    method: 'POST',
    body,
    headers: {
      'content-type': 'application/json',
      ...(key === null ? {} : { 'idempotency-key': key }),
      ...headers,
    },
  };
}

/** An app whose POST /orders handler counts its runs and echoes the body it read. */
function ordersApp(options?: Parameters<typeof idempotency>[0]): { app: Hono; runs: () => number } {
  let runs = 0;
  const app = new Hono();
  app.use('/orders', idempotency(options));
  app.post('/orders', async (c) => {
    runs++;
    const order = (await c.req.json()) as { item: string };
    return c.json({ id: `order-${runs}`, item: order.item }, 201, { 'x-order-run': String(runs) });
  });
  return { app, runs: () => runs };
}

/** A promise the test resolves by hand. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open = (): void => {};
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

/** `promise`, or a rejection if it has not settled within `ms` (so a blocked request fails rather than hangs). */
async function settlesWithin<T>(promise: T | Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not settled within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** The reason phrase of each status a problem here is answered with (RFC 9110 §15). */
const PHRASES: Readonly<Record<number, string>> = {
  400: 'Bad Request',
  409: 'Conflict',
  413: 'Content Too Large',
  422: 'Unprocessable Content',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

/**
 * The problem details body of a problem+json response (consumed). Its type is
 * `about:blank`, so its title must be the status's reason phrase (RFC 9457 §4.2.1).
 */
async function problemOf(res: Response): Promise<{ status: number; title: string; detail?: string }> {
  assert.equal(res.headers.get('content-type'), 'application/problem+json');
  const problem = (await res.json()) as { type: string; status: number; title: string; detail?: string };
  assert.equal(problem.type, 'about:blank');
  assert.equal(problem.status, res.status);
  assert.equal(problem.title, PHRASES[res.status], `the title of a ${res.status} about:blank problem`);
  return problem;
}

/** A store whose every call rejects, and counts the calls. */
function brokenStore(): Store & { calls: number } {
  const fail = async (): Promise<never> => {
    broken.calls++;
    throw new Error('store down');
  };
  const broken = { calls: 0, get: fail, set: fail, delete: fail, increment: fail, compareAndSet: fail };
  return broken;
}

test('the first keyed POST runs the handler; a repeat replays its status, body and headers without running it', async () => {
  const { app, runs } = ordersApp();
  const first = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(first.status, 201);
  assert.equal(first.headers.get(REPLAYED_HEADER), null);
  const firstBody = await first.text();
  assert.deepEqual(JSON.parse(firstBody), { id: 'order-1', item: 'tea' });

  const again = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(again.status, 201);
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  assert.equal(again.headers.get('x-should-retry'), 'false');
  assert.equal(again.headers.get('content-type'), first.headers.get('content-type'));
  assert.equal(again.headers.get('x-order-run'), '1');
  assert.equal(await again.text(), firstBody);
  assert.equal(runs(), 1);
});

test('a replay over a real server is identical to the first response, on every runtime', async () => {
  const { app, runs } = ordersApp();
  await withApp(app, async (server) => {
    const send = (): Promise<Response> => fetch(`${server.origin}/orders`, post('{"item":"coffee"}'));
    const first = await send();
    const firstBody = await first.text();
    const again = await send();
    const againBody = await again.text();
    assert.equal(first.status, 201);
    assert.equal(again.status, 201);
    assert.equal(first.headers.get(REPLAYED_HEADER), null);
    assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
    assert.equal(againBody, firstBody);
    assert.deepEqual(JSON.parse(againBody), { id: 'order-1', item: 'coffee' });
    assert.equal(again.headers.get('content-type'), first.headers.get('content-type'));
    assert.equal(again.headers.get('x-order-run'), '1');
    assert.equal(again.headers.get('content-length'), String(new TextEncoder().encode(firstBody).length));
  });
  assert.equal(runs(), 1);
});

test('a replay leaves out hop-by-hop headers, headers named in Connection, set-cookie and content-length', async () => {
  const app = new Hono();
  app.use('/session', idempotency());
  app.post('/session', () => {
    const headers = new Headers([
      ['x-kept', 'yes'],
      ['vary', 'accept'],
      ['set-cookie', 'session=secret; HttpOnly'],
      ['keep-alive', 'timeout=5'],
      ['proxy-authenticate', 'Basic'],
      ['connection', 'x-hop'],
      ['x-hop', 'private'],
      ['content-length', '2'],
    ]);
    return new Response('ok', { status: 200, headers });
  });
  const first = await app.request('/session', post('{}'));
  assert.equal(first.headers.get('set-cookie'), 'session=secret; HttpOnly');
  await first.body?.cancel();
  const again = await app.request('/session', post('{}'));
  assert.equal(await again.text(), 'ok');
  assert.equal(again.headers.get('x-kept'), 'yes');
  assert.equal(again.headers.get('vary'), 'accept');
  for (const name of [
    'set-cookie',
    'keep-alive',
    'proxy-authenticate',
    'connection',
    'x-hop',
    'content-length',
  ]) {
    assert.equal(again.headers.get(name), null, name);
  }
});

test('a binary response body and a 204 are replayed byte for byte', async () => {
  const bytes = new Uint8Array([0, 255, 128, 10, 13, 0xc3]);
  const app = new Hono();
  app.use('*', idempotency());
  app.post('/blob', () => new Response(bytes, { headers: { 'content-type': 'application/octet-stream' } }));
  app.post('/empty', (c) => c.body(null, 204));
  await (await app.request('/blob', post('{}'))).arrayBuffer();
  const again = await app.request('/blob', post('{}'));
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  assert.deepEqual(new Uint8Array(await again.arrayBuffer()), bytes);

  assert.equal((await app.request('/empty', post('{}'))).status, 204);
  const empty = await app.request('/empty', post('{}'));
  assert.equal(empty.status, 204);
  assert.equal(empty.headers.get(REPLAYED_HEADER), 'true');
  assert.equal(empty.body, null);
});

test('a replay has the content-type of the first response, even none: a bodiless 202, bytes without a type', async () => {
  const app = new Hono();
  app.use('*', idempotency());
  app.post('/jobs', (c) => c.body(null, 202, { location: '/jobs/1' }));
  app.post('/bytes', () => new Response(new TextEncoder().encode('hello')));
  for (const path of ['/jobs', '/bytes']) {
    const first = await app.request(path, post('{}'));
    const firstBody = await first.text();
    const again = await app.request(path, post('{}'));
    assert.equal(again.headers.get(REPLAYED_HEADER), 'true', path);
    assert.equal(again.headers.get('content-type'), first.headers.get('content-type'), path);
    assert.equal(await again.text(), firstBody, path);
  }
  // Over a real server too: the 202 without a body is replayed without a type.
  await withApp(app, async (server) => {
    const send = (): Promise<Response> => fetch(`${server.origin}/jobs`, post('{}', '"over-the-wire"'));
    const first = await send();
    await first.arrayBuffer();
    const again = await send();
    await again.arrayBuffer();
    assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
    assert.equal(again.headers.get('location'), '/jobs/1');
    assert.equal(again.headers.get('content-type'), first.headers.get('content-type'));
  });
});

test('a repeat while the first is still running gets 409 with Retry-After: 1 and x-should-retry: true', async () => {
  const release = gate();
  const entered = gate();
  let runs = 0;
  const app = new Hono();
  app.use('/slow', idempotency());
  app.post('/slow', async (c) => {
    runs++;
    entered.open();
    await release.promise;
    return c.text('done');
  });
  const first = app.request('/slow', post('{}'));
  await entered.promise;
  const during = await app.request('/slow', post('{}'));
  assert.equal(during.status, 409);
  assert.equal(during.headers.get('retry-after'), '1');
  assert.equal(during.headers.get('x-should-retry'), 'true');
  assert.match((await problemOf(during)).detail ?? '', /still running/);
  release.open();
  assert.equal(await (await first).text(), 'done');
  const after = await app.request('/slow', post('{}'));
  assert.equal(after.headers.get(REPLAYED_HEADER), 'true');
  assert.equal(await after.text(), 'done');
  assert.equal(runs, 1);
});

test('the same key with a different body or query is 422 and does not run the handler', async () => {
  const { app, runs } = ordersApp();
  await (await app.request('/orders', post('{"item":"tea"}'))).arrayBuffer();
  const otherBody = await app.request('/orders', post('{"item":"cake"}'));
  assert.equal(otherBody.status, 422);
  assert.match((await problemOf(otherBody)).detail ?? '', /used for a different request/);
  const otherQuery = await app.request('/orders?express=1', post('{"item":"tea"}'));
  assert.equal(otherQuery.status, 422);
  await otherQuery.body?.cancel();
  assert.equal(runs(), 1);
});

test('the same key and bytes with another Content-Type (JSON, then a form) is 422, not a replay; the same media type in another case or with parameters is the same request, over a real server', async () => {
  const { app, runs } = ordersApp();
  await withApp(app, async (server) => {
    const send = (type: string): Promise<Response> =>
      fetch(`${server.origin}/orders`, post('{"item":"tea"}', KEY, { 'content-type': type }));
    const first = await send('application/json');
    assert.equal(first.status, 201);
    await first.body?.cancel();
    const form = await send('application/x-www-form-urlencoded');
    assert.equal(form.status, 422);
    assert.match((await problemOf(form)).detail ?? '', /media type/);
    for (const type of ['Application/JSON; charset=utf-8', 'application/json ;charset="UTF-8"']) {
      const same = await send(type);
      assert.equal(same.status, 201, type);
      assert.equal(same.headers.get(REPLAYED_HEADER), 'true', type);
      await same.body?.cancel();
    }
  });
  assert.equal(runs(), 1);
});

test('a record written before the media type counted (none in it) is matched on its fingerprint alone: its repeat is replayed, another body is still 422', async () => {
  const store = memoryStore<JsonValue>();
  const body = '{"item":"tea"}';
  // As the version before wrote it: the fingerprint of method, path, query and body, no type.
  const record = {
    state: 'done',
    fingerprint: await sha256Hex('POST\n/orders\n', body),
    status: 201,
    headers: [['content-type', 'application/json']],
    body: '{"id":"order-1","item":"tea"}',
    encoding: 'utf8',
  };
  await store.set(`idempotency:${JSON.stringify(['', 'POST', '/orders', KEY.slice(1, -1)])}`, record, 60_000);
  const { app, runs } = ordersApp({ store });
  await withApp(app, async (server) => {
    const again = await fetch(`${server.origin}/orders`, post(body));
    assert.equal(again.status, 201);
    assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
    assert.deepEqual(await again.json(), { id: 'order-1', item: 'tea' });
    const other = await fetch(`${server.origin}/orders`, post('{"item":"cake"}'));
    assert.equal(other.status, 422);
    await other.body?.cancel();
  });
  assert.equal(runs(), 0);
});

test('the same key on another path or method is another request, and runs', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('*', idempotency());
  app.on(['POST', 'PATCH'], ['/a', '/b'], (c) => c.text(`run ${++runs}`));
  for (const [method, path] of [
    ['POST', '/a'],
    ['POST', '/b'],
    ['PATCH', '/a'],
  ] as const) {
    const res = await app.request(path, { ...post('{}'), method });
    assert.equal(res.headers.get(REPLAYED_HEADER), null);
    await res.body?.cancel();
  }
  assert.equal(runs, 3);
});

test('a path sent percent-encoded is the path Hono routes it on, its escapes in either case: the same key replays, over a real server, and a different path still runs', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('/orders/*', idempotency());
  app.post('/orders/:id', (c) => c.text(`run ${++runs}: ${c.req.param('id')}`, 201));
  await withApp(app, async ({ origin }) => {
    const send = async (path: string): Promise<{ replayed: boolean; body: string }> => {
      const res = await fetch(`${origin}${path}`, post('{}'));
      return { replayed: res.headers.get(REPLAYED_HEADER) === 'true', body: await res.text() };
    };
    assert.deepEqual(await send('/orders/a'), { replayed: false, body: 'run 1: a' });
    // Hono decodes %61 to "a" (and hex in either case) before routing: the same handler, the same request.
    for (const same of ['/orders/%61', '/orders/a']) {
      assert.deepEqual(await send(same), { replayed: true, body: 'run 1: a' }, same);
    }
    assert.deepEqual(await send('/orders/%c3%a9'), { replayed: false, body: 'run 2: \u00e9' });
    assert.deepEqual(await send('/orders/%C3%A9'), { replayed: true, body: 'run 2: \u00e9' });
    // Hono keeps the escapes of reserved characters as sent, in either case, and both reach the id "a/b".
    assert.deepEqual(await send('/orders/a%2Fb'), { replayed: false, body: 'run 3: a/b' });
    assert.deepEqual(await send('/orders/a%2fb'), { replayed: true, body: 'run 3: a/b' });
    // Hono keeps %25 encoded ("%2561" is the id "%61", not "a"), and a different id is a different order.
    assert.deepEqual(await send('/orders/%2561'), { replayed: false, body: 'run 4: %61' });
    assert.deepEqual(await send('/orders/b'), { replayed: false, body: 'run 5: b' });
  });
  assert.equal(runs, 5);
});

test('a % that starts no escape is the same request as %25: Hono gives the handler the same id for both', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('/orders/*', idempotency());
  app.post('/orders/:id', (c) => c.text(`run ${++runs}: ${c.req.param('id')}`, 201));
  const send = async (path: string, key: string): Promise<{ replayed: boolean; body: string }> => {
    const res = await app.request(path, post('{}', key));
    return { replayed: res.headers.get(REPLAYED_HEADER) === 'true', body: await res.text() };
  };
  // A client (or a proxy on its resend) that writes the bare % as %25 sends the same request.
  assert.deepEqual(await send('/orders/100%', KEY), { replayed: false, body: 'run 1: 100%' });
  assert.deepEqual(await send('/orders/100%25', KEY), { replayed: true, body: 'run 1: 100%' });
  assert.deepEqual(await send('/orders/%zz', RETRY_KEY), { replayed: false, body: 'run 2: %zz' });
  assert.deepEqual(await send('/orders/%25zz', RETRY_KEY), { replayed: true, body: 'run 2: %zz' });
  assert.equal(runs, 2);
});

test('escapes that are not UTF-8 reach the handler as sent, over a real server: %ff and %FF are two requests, %61%ff is not a%ff, and %25ff (the handler reads "%ff" too) is %ff', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('/orders/*', idempotency());
  app.post('/orders/:id', (c) =>
    c.text(`run ${++runs}: ${c.req.param('id')} ${JSON.stringify(c.req.queries())}`, 201),
  );
  await withApp(app, async ({ origin }) => {
    const send = async (
      target: string,
      key: string,
    ): Promise<{ status: number; replayed: boolean; body: string }> => {
      const res = await fetch(`${origin}/orders/${target}`, post('{}', key));
      return {
        status: res.status,
        replayed: res.headers.get(REPLAYED_HEADER) === 'true',
        body: await res.text(),
      };
    };
    const ran = (body: string) => ({ status: 201, replayed: false, body });
    const replayed = (body: string) => ({ status: 201, replayed: true, body });
    // Hono decodes a run of escapes only when it is UTF-8 (its tryDecode): else the handler gets the run as sent, hex case and all.
    // One key throughout: records are per path, so a path the handler reads differently runs as its own request.
    assert.deepEqual(await send('%ff', KEY), ran('run 1: %ff {}'));
    assert.deepEqual(await send('%FF', KEY), ran('run 2: %FF {}'));
    assert.deepEqual(await send('%25ff', KEY), replayed('run 1: %ff {}'));
    assert.deepEqual(await send('%61%ff', KEY), ran('run 3: %61%ff {}'));
    assert.deepEqual(await send('a%ff', KEY), ran('run 4: a%ff {}'));
    assert.deepEqual(await send('%c3%a9%ff', KEY), ran('run 5: %c3%a9%ff {}'));
    assert.deepEqual(await send('%C3%A9%ff', KEY), ran('run 6: %C3%A9%ff {}'));
    assert.deepEqual(await send('%25%ff', KEY), ran('run 7: %25%ff {}'));
    assert.deepEqual(await send('%2525%25ff', KEY), replayed('run 7: %25%ff {}'));
    // A UTF-8 run is decoded, so its case is still no difference.
    assert.deepEqual(await send('%c3%a9', KEY), ran('run 8: \u00e9 {}'));
    assert.deepEqual(await send('%C3%A9', KEY), replayed('run 8: \u00e9 {}'));
    // The query, as c.req.query() reads it: the same rule.
    assert.deepEqual(await send('x?to=%61%ff', 'query-1'), ran('run 9: x {"to":["%61%ff"]}'));
    assert.equal((await send('x?to=a%ff', 'query-1')).status, 422);
    assert.deepEqual(await send('x?to=%ff', 'query-2'), ran('run 10: x {"to":["%ff"]}'));
    assert.equal((await send('x?to=%FF', 'query-2')).status, 422);
    assert.deepEqual(await send('x?to=%25ff', 'query-2'), replayed('run 10: x {"to":["%ff"]}'));
    assert.deepEqual(
      await send('x?to=%ff%61&b=%61', 'query-3'),
      ran('run 11: x {"to":["%ff%61"],"b":["a"]}'),
    );
    assert.deepEqual(
      await send('x?to=%25ff%2561&b=a', 'query-3'),
      replayed('run 11: x {"to":["%ff%61"],"b":["a"]}'),
    );
    assert.equal((await send('x?to=%ffa&b=a', 'query-3')).status, 422);
  });
  assert.equal(runs, 11);
});

test('a query whose unreserved characters are sent percent-encoded is the same request, over a real server; reserved ones, escaped or not, and the order of parameters still tell requests apart', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('/transfers', idempotency());
  app.post('/transfers', (c) => c.text(`run ${++runs}: ${JSON.stringify(c.req.queries())}`, 201));
  await withApp(app, async ({ origin }) => {
    const send = async (
      query: string,
      key: string,
    ): Promise<{ status: number; replayed: boolean; body: string }> => {
      const res = await fetch(`${origin}/transfers${query}`, post('{}', key));
      return {
        status: res.status,
        replayed: res.headers.get(REPLAYED_HEADER) === 'true',
        body: await res.text(),
      };
    };
    const ran = (body: string) => ({ status: 201, replayed: false, body });
    const replayed = (body: string) => ({ status: 201, replayed: true, body });
    // RFC 3986 §6.2.2.2: %61 is "a" (a client or proxy that re-encodes the query on a resend), and hex case is no difference.
    assert.deepEqual(await send('?to=%61', 'query-1'), ran('run 1: {"to":["a"]}'));
    for (const same of ['?to=a', '?to=%61', '?t%6F=%61']) {
      assert.deepEqual(await send(same, 'query-1'), replayed('run 1: {"to":["a"]}'), same);
    }
    assert.deepEqual(await send('?to=%7e%2D_.%30%c3%a9', 'query-2'), ran('run 2: {"to":["~-_.0\u00e9"]}'));
    for (const same of ['?to=~-_.0%C3%A9', '?to=%7E-%5F%2e0%c3%A9']) {
      assert.deepEqual(await send(same, 'query-2'), replayed('run 2: {"to":["~-_.0\u00e9"]}'), same);
    }
    // A % that starts no escape is the percent sign Hono reads "%25" as.
    assert.deepEqual(await send('?to=100%', 'query-3'), ran('run 3: {"to":["100%"]}'));
    assert.deepEqual(await send('?to=100%25', 'query-3'), replayed('run 3: {"to":["100%"]}'));
    // An escaped reserved character is not the character (RFC 3986 §2.2): "a%26b" is one value, "a&b" two parameters.
    assert.deepEqual(await send('?to=a%26b', 'query-4'), ran('run 4: {"to":["a&b"]}'));
    assert.equal((await send('?to=a&b', 'query-4')).status, 422);
    assert.deepEqual(await send('?to=a%26b', 'query-4'), replayed('run 4: {"to":["a&b"]}'));
    // The order of parameters, and "+" (a space only to form decoding), are kept as sent.
    assert.deepEqual(await send('?a=1&b=2', 'query-5'), ran('run 5: {"a":["1"],"b":["2"]}'));
    assert.equal((await send('?b=2&a=1', 'query-5')).status, 422);
    assert.deepEqual(await send('?q=a+b', 'query-6'), ran('run 6: {"q":["a b"]}'));
    assert.equal((await send('?q=a%20b', 'query-6')).status, 422);
  });
  assert.equal(runs, 6);
});

test('the path is the one the app routes on: with strict: false, a trailing slash is the same request', async () => {
  let runs = 0;
  const app = new Hono({ strict: false });
  app.use('*', idempotency());
  app.post('/orders', (c) => c.text(`run ${++runs}`, 201));
  await (await app.request('/orders', post('{}'))).arrayBuffer();
  const again = await app.request('/orders/', post('{}'));
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  assert.equal(await again.text(), 'run 1');
  assert.equal(runs, 1);
});

test('a missing key passes through, unless required: then 400 problem+json and the handler does not run', async () => {
  const optional = ordersApp();
  for (let i = 0; i < 2; i++)
    await (await optional.app.request('/orders', post('{"item":"tea"}', null))).text();
  assert.equal(optional.runs(), 2);

  const strict = ordersApp({ required: true });
  const res = await strict.app.request('/orders', post('{"item":"tea"}', null));
  assert.equal(res.status, 400);
  assert.match((await problemOf(res)).detail ?? '', /need an Idempotency-Key header/);
  assert.equal(strict.runs(), 0);
});

test('a malformed key is 400: empty, over 255 characters, control characters, a bad escape, a list, parameters', async () => {
  const { app, runs } = ordersApp();
  const bad = [
    '""',
    `"${'k'.repeat(256)}"`,
    '"tab\tinside"',
    '"del\x7f"',
    '"bad \\n escape"',
    '"unterminated',
    '"a", "b"',
    '"key";param=1',
  ];
  for (const key of bad) {
    const res = await app.request('/orders', post('{"item":"tea"}', key));
    assert.equal(res.status, 400, key);
    assert.match((await problemOf(res)).detail ?? '', /^Idempotency-Key /);
  }
  assert.equal(runs(), 0);
  // The edges that are fine: 255 characters, escaped quote and backslash.
  for (const key of [`"${'k'.repeat(255)}"`, '"quote \\" and \\\\ backslash"']) {
    const res = await app.request('/orders', post('{"item":"tea"}', key));
    assert.equal(res.status, 201, key);
    await res.body?.cancel();
  }
  assert.equal(runs(), 2);
});

/** Keys as real clients write them bare: a UUID, base64url and base64, Stripe-like, a ULID, a composite. */
const BARE_KEYS = [
  '8e03978e-40d5-43e8-bc93-6894a57f9324',
  'dGhpcyBpcyBhIGtleQ_-',
  'YWJj+/8/ZGVm==',
  'idem_1NirD82eZvKYlo2CIvbtLWuY',
  '01ARZ3NDEKTSV4RRFFQ69G5FAV',
  'order:42/attempt.1~retry',
  'k'.repeat(255),
];

test('a bare key (as Stripe clients and curl users send it) runs once and is the same key as its quoted form, over a real server', async () => {
  const { app, runs } = ordersApp();
  await withApp(app, async ({ origin }) => {
    const send = (key: string): Promise<Response> => fetch(`${origin}/orders`, post('{"item":"tea"}', key));
    for (const [i, key] of BARE_KEYS.entries()) {
      const first = await send(key);
      assert.equal(first.status, 201, key);
      assert.equal(first.headers.get(REPLAYED_HEADER), null, key);
      const firstBody = await first.text();
      // Bare, then quoted, then bare again: one record, one run.
      for (const again of [`"${key}"`, key]) {
        const res = await send(again);
        assert.equal(res.status, 201, again);
        assert.equal(res.headers.get(REPLAYED_HEADER), 'true', again);
        assert.equal(await res.text(), firstBody, again);
      }
      assert.equal(runs(), i + 1, key);
    }
    // And the other way round: a key first sent quoted is replayed to its bare form.
    const quoted = await send('"3b241101-e2bb-4255-8caf-4136c566a962"');
    assert.equal(quoted.status, 201);
    await quoted.text();
    const bare = await send('3b241101-e2bb-4255-8caf-4136c566a962');
    assert.equal(bare.headers.get(REPLAYED_HEADER), 'true');
    await bare.text();
  });
  assert.equal(runs(), BARE_KEYS.length + 1);
});

test('a bare key reused for another request is 422, as its quoted form is, over a real server', async () => {
  const { app, runs } = ordersApp();
  await withApp(app, async ({ origin }) => {
    const first = await fetch(`${origin}/orders`, post('{"item":"tea"}', 'idem_reused'));
    assert.equal(first.status, 201);
    await first.text();
    for (const key of ['idem_reused', '"idem_reused"']) {
      const res = await fetch(`${origin}/orders`, post('{"item":"cake"}', key));
      assert.equal(res.status, 422, key);
      assert.match((await problemOf(res)).detail ?? '', /used for a different request/);
    }
  });
  assert.equal(runs(), 1);
});

test('a value that is not one key is 400 naming both forms, bare or quoted: a list, whitespace, a stray quote, empty, too long, over a real server', async () => {
  const { app, runs } = ordersApp();
  const bad = [
    'abc, def', // two keys a proxy joined
    'abc,def',
    '"a", "b"',
    'abc, "def"',
    '"abc", def',
    'abc def',
    'abc\tdef',
    '"abc',
    'abc"',
    'ab"c"',
    '"',
    'abc;param=1',
    'abc\\def',
    '(abc)',
    '',
    'k'.repeat(256),
  ];
  await withApp(app, async ({ origin }) => {
    for (const key of bad) {
      // No body: a refusal leaves it unread, and @hono/node-server's drain of an unread body leaves timers behind on Deno.
      const res = await fetch(`${origin}/orders`, { method: 'POST', headers: { 'idempotency-key': key } });
      assert.equal(res.status, 400, JSON.stringify(key));
      const problem = await problemOf(res);
      // The message says what is wrong: both accepted forms, unless it is empty or too long.
      const said =
        key === ''
          ? /must not be empty/
          : key.length > 255
            ? /at most 255 characters/
            : /quoted \("8e03978e-40d5-43e8-bc93-6894a57f9324".*bare \(8e03978e-40d5-43e8-bc93-6894a57f9324/;
      assert.match(problem.detail ?? '', said, JSON.stringify(key));
    }
  });
  assert.equal(runs(), 0);
});

test('a bare key with control characters or non-ASCII bytes is 400, and the handler does not run', async () => {
  const { app, runs } = ordersApp();
  // Headers hands bytes over 0x7f on as Latin-1 characters: "cl\xc3\xa9" is "clé" sent as UTF-8.
  for (const key of ['a\x01b', 'del\x7f', 'cl\xe9', 'cl\xc3\xa9', 'a\x1fb']) {
    const res = await app.request('/orders', post('{"item":"tea"}', key));
    assert.equal(res.status, 400, JSON.stringify(key));
    assert.match((await problemOf(res)).detail ?? '', /^Idempotency-Key /);
  }
  assert.equal(runs(), 0);
});

test('scopes isolate keys: user B reusing user A key runs B handler and never sees A response', async () => {
  let runs = 0;
  const app = new Hono<{ Variables: { user: string } }>();
  app.use('/pay', async (c, next) => {
    c.set('user', c.req.header('x-user') ?? 'anonymous');
    await next();
  });
  app.use('/pay', idempotency<{ Variables: { user: string } }>({ scope: (c) => c.get('user') }));
  app.post('/pay', (c) => c.json({ payer: c.get('user'), run: ++runs }));
  const as = (user: string): RequestInit => post('{"amount":5}', KEY, { 'x-user': user });

  assert.deepEqual(await (await app.request('/pay', as('alice'))).json(), { payer: 'alice', run: 1 });
  const bob = await app.request('/pay', as('bob'));
  assert.equal(bob.headers.get(REPLAYED_HEADER), null);
  assert.deepEqual(await bob.json(), { payer: 'bob', run: 2 });
  const aliceAgain = await app.request('/pay', as('alice'));
  assert.equal(aliceAgain.headers.get(REPLAYED_HEADER), 'true');
  assert.deepEqual(await aliceAgain.json(), { payer: 'alice', run: 1 });
  assert.equal(runs, 2);
});

test('scope reads the app variables with c.get() as the example writes it, without naming the app Env, over a real server', async () => {
  let runs = 0;
  const app = new Hono<{ Variables: { user: string } }>();
  app.use('/pay', async (c, next) => {
    c.set('user', c.req.header('x-user') ?? 'anonymous');
    await next();
  });
  // No type argument: Hono passes none to a middleware it is handed, so `c` must read the app's variables as is.
  app.use('/pay', idempotency({ scope: (c) => c.get('user') }));
  app.post('/pay', (c) => c.json({ payer: c.get('user'), run: ++runs }));
  await withApp(app, async ({ origin }) => {
    const as = (user: string): Promise<Response> =>
      fetch(`${origin}/pay`, post('{"amount":5}', KEY, { 'x-user': user }));
    assert.deepEqual(await (await as('alice')).json(), { payer: 'alice', run: 1 });
    assert.deepEqual(await (await as('bob')).json(), { payer: 'bob', run: 2 });
    const aliceAgain = await as('alice');
    assert.equal(aliceAgain.headers.get(REPLAYED_HEADER), 'true');
    assert.deepEqual(await aliceAgain.json(), { payer: 'alice', run: 1 });
  });
});

test('a handler that throws has its 500 (the app onError answer) stored and replayed, and does not run again', async () => {
  let runs = 0;
  const app = new Hono();
  app.onError((error, c) => c.json({ error: error.message }, 500));
  app.use('/charge', idempotency());
  app.post('/charge', () => {
    runs++;
    throw new Error('card network timed out after charging');
  });
  const first = await app.request('/charge', post('{}'));
  assert.equal(first.status, 500);
  const firstBody = await first.text();
  assert.deepEqual(JSON.parse(firstBody), { error: 'card network timed out after charging' });
  const again = await app.request('/charge', post('{}'));
  assert.equal(again.status, 500);
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  // Retrying would only replay it again: the client is told not to.
  assert.equal(again.headers.get('x-should-retry'), 'false');
  assert.equal(await again.text(), firstBody);
  assert.equal(runs, 1);
});

test('a handler that throws a non-Error gets a problem+json 500, stored and replayed', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('/charge', idempotency());
  app.post('/charge', () => {
    runs++;
    throw 'not an Error';
  });
  const first = await app.request('/charge', post('{}'));
  assert.equal(first.status, 500);
  assert.equal((await problemOf(first)).title, 'Internal Server Error');
  const again = await app.request('/charge', post('{}'));
  assert.equal(again.status, 500);
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  await again.body?.cancel();
  assert.equal(runs, 1);
});

test('a request rejected before idempotency (auth answering 401) stores nothing: once authorised, the same key runs', async () => {
  let authorised = false;
  const { app: inner, runs } = ordersApp();
  const app = new Hono();
  app.use('/orders', async (c, next) => {
    if (!authorised) return c.json({ error: 'unauthorised' }, 401);
    await next();
  });
  app.route('/', inner);
  const rejected = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(rejected.status, 401);
  await rejected.body?.cancel();
  authorised = true;
  const accepted = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(accepted.status, 201);
  assert.equal(accepted.headers.get(REPLAYED_HEADER), null);
  await accepted.body?.cancel();
  assert.equal(runs(), 1);
});

test('a handler that answers "not run" (429, or x-should-retry: true) releases the key, so a retry runs it', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('/job', idempotency());
  app.post('/job', (c) => {
    runs++;
    if (runs === 1) return c.text('slow down', 429, { 'retry-after': '1' });
    if (runs === 2) return c.text('shed', 503, { 'x-should-retry': 'true' });
    return c.text('accepted', 202);
  });
  for (const status of [429, 503, 202, 202]) {
    const res = await app.request('/job', post('{}'));
    assert.equal(res.status, status);
    await res.body?.cancel();
  }
  assert.equal(runs, 3);
});

test('a keyed body over maxBodyBytes is 413, declared or streamed, and the handler does not run', async () => {
  const { app, runs } = ordersApp({ maxBodyBytes: 16 });
  // A declared length over the limit is refused before a byte is read: this body throws if read.
  const declared = await app.request('/orders', {
    ...post('', KEY, { 'content-length': '1000000' }),
    body: new ReadableStream({
      pull() {
        throw new Error('the body was read');
      },
    }),
    duplex: 'half',
  } as RequestInit);
  assert.equal(declared.status, 413);
  assert.equal((await problemOf(declared)).title, 'Content Too Large');

  const chunks = [new TextEncoder().encode('{"item":"'), new TextEncoder().encode(`${'y'.repeat(32)}"}`)];
  const streamed = await app.request('/orders', {
    ...post(''),
    body: new ReadableStream({
      pull(controller) {
        const chunk = chunks.shift();
        if (chunk === undefined) controller.close();
        else controller.enqueue(chunk);
      },
    }),
    duplex: 'half',
  } as RequestInit);
  assert.equal(streamed.status, 413);
  await streamed.body?.cancel();
  assert.equal(runs(), 0);
});

test('a keyed body within maxBodyBytes still reaches the handler whole, over a real server', async () => {
  const { app, runs } = ordersApp({ maxBodyBytes: 64 * 1024 });
  const item = 'z'.repeat(60 * 1024);
  await withApp(app, async (server) => {
    const res = await fetch(`${server.origin}/orders`, post(JSON.stringify({ item })));
    assert.equal(res.status, 201);
    assert.equal(((await res.json()) as { item: string }).item, item);
  });
  assert.equal(runs(), 1);
});

test('a body an earlier middleware already read through Hono is fingerprinted from Hono cache, and the handler reads it too', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('/orders', async (c, next) => {
    const order = (await c.req.json()) as { item: string };
    if (order.item === '') return c.json({ error: 'item required' }, 400);
    await next();
  });
  app.use('/orders', idempotency());
  app.post('/orders', async (c) =>
    c.json({ run: ++runs, item: ((await c.req.json()) as { item: string }).item }),
  );
  assert.deepEqual(await (await app.request('/orders', post('{"item":"tea"}'))).json(), {
    run: 1,
    item: 'tea',
  });
  const again = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  assert.deepEqual(await again.json(), { run: 1, item: 'tea' });
  const other = await app.request('/orders', post('{"item":"cake"}'));
  assert.equal(other.status, 422);
  await other.body?.cancel();
});

test('a store that throws fails closed: 503 with Retry-After and x-should-retry, and the handler does not run', async () => {
  const store = brokenStore();
  const { app, runs } = ordersApp({ store });
  const res = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(res.status, 503);
  assert.equal(res.headers.get('retry-after'), '1');
  assert.equal(res.headers.get('x-should-retry'), 'true');
  assert.match((await problemOf(res)).detail ?? '', /idempotency store did not answer/);
  assert.equal(runs(), 0);
  assert.ok(store.calls >= 1, 'store.calls >= 1');
});

test('a store that fails on the final write still returns the handler response; repeats get 409 while its claim lasts, not a second run', async () => {
  const inner = memoryStore();
  const store: Store = {
    get: (key) => inner.get(key),
    set: (key, value, ttlMs) => inner.set(key, value, ttlMs),
    delete: (key) => inner.delete(key),
    increment: (key, by, ttlMs) => inner.increment(key, by, ttlMs),
    compareAndSet: async (key, expected, next, ttlMs) => {
      if (expected !== undefined) throw new Error('store down');
      return inner.compareAndSet(key, expected, next, ttlMs);
    },
  };
  const { app, runs } = ordersApp({ store });
  const first = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(first.status, 201);
  await first.body?.cancel();
  const again = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(again.status, 409);
  assert.match((await problemOf(again)).detail ?? '', /still running/);
  assert.equal(runs(), 1);
});

test('a store method that throws instead of rejecting (a hand-written adapter) fails like one that rejects: the response, and no unhandled rejection, over a real server', async () => {
  // Only the claim succeeds: every later compareAndSet (renewal, final write, release)
  // throws where it is called, as a synchronous adapter's guard would ("client closed").
  const inner = memoryStore<JsonValue>();
  const store = withCompareAndSet(inner, (key, expected, next, ttlMs) => {
    if (expected !== undefined) throw new Error('store client closed');
    return inner.compareAndSet(key, expected, next, ttlMs);
  });
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown): void => {
    unhandled.push(reason);
  };
  process.on('unhandledRejection', onUnhandled);
  const app = new Hono();
  // A lease of 60 ms is renewed every 20 ms: the 70 ms handler sees renewals throw.
  app.use('*', idempotency({ store, leaseMs: 60 }));
  app.post('/done', async (c) => {
    await new Promise((resolve) => setTimeout(resolve, 70));
    return c.text('charged');
  });
  app.post('/not-run', (c) => c.text('slow down', 429));
  try {
    await withApp(app, async (server) => {
      const done = await fetch(`${server.origin}/done`, post('{}'));
      assert.equal(done.status, 200);
      assert.equal(await done.text(), 'charged');
      const notRun = await fetch(`${server.origin}/not-run`, post('{}'));
      assert.equal(notRun.status, 429);
      assert.equal(await notRun.text(), 'slow down');
    });
    // Past the lease: any renewal still scheduled has run.
    await new Promise((resolve) => setTimeout(resolve, 80));
    assert.deepEqual(unhandled, []);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});

test('a record the store returns in an unknown shape fails closed with 503', async () => {
  const store = memoryStore<JsonValue>();
  const { app, runs } = ordersApp({
    store: {
      ...store,
      compareAndSet: async () => false,
      get: async () => ({ state: 'done', fingerprint: 'x' }),
    },
  });
  const res = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(res.status, 503);
  await res.body?.cancel();
  assert.equal(runs(), 0);
});

test('an event-stream or oversized response is sent once and not stored: a repeat gets 409, never a second run', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('*', idempotency({ maxBodyBytes: 8 }));
  app.post('/events', (c) => {
    runs++;
    return c.body('data: hi\n\n', 200, { 'content-type': 'text/event-stream' });
  });
  app.post('/big', (c) => {
    runs++;
    return c.text('0123456789abcdef');
  });
  for (const [path, body] of [
    ['/events', 'data: hi\n\n'],
    ['/big', '0123456789abcdef'],
  ] as const) {
    const first = await app.request(path, post(''));
    assert.equal(await first.text(), body);
    const again = await app.request(path, post(''));
    assert.equal(again.status, 409);
    assert.match((await problemOf(again)).detail ?? '', /already ran .* will not run again/);
  }
  assert.equal(runs, 2);
});

test('a record expires after ttlMs: the same key then runs again', async () => {
  let now = 1_000_000;
  const { app, runs } = ordersApp({ store: memoryStore({ now: () => now }), ttlMs: 60_000 });
  await (await app.request('/orders', post('{"item":"tea"}'))).arrayBuffer();
  now += 59_999;
  assert.equal((await app.request('/orders', post('{"item":"tea"}'))).headers.get(REPLAYED_HEADER), 'true');
  now += 60_000;
  const later = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(later.headers.get(REPLAYED_HEADER), null);
  await later.body?.cancel();
  assert.equal(runs(), 2);
});

test('GET and other unlisted methods pass through untouched, whatever key they carry', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('*', idempotency());
  app.on(['GET', 'PUT', 'DELETE'], '/thing', (c) => c.text(`run ${++runs}`));
  for (const method of ['GET', 'GET', 'PUT', 'DELETE']) {
    const res = await app.request('/thing', { method, headers: { 'idempotency-key': 'not even quoted' } });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get(REPLAYED_HEADER), null);
    await res.body?.cancel();
  }
  assert.equal(runs, 4);
});

test('bad options are a TypeError naming each one', () => {
  assert.throws(
    () =>
      idempotency({
        ttlMs: 0,
        methods: [],
        maxBodyBytes: 1.5,
        store: {} as Store,
        required: 'yes' as unknown as boolean,
        storeTimeoutMs: 0,
        drainMs: -1,
      }),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, 'error instanceof TypeError');
      for (const name of [
        'ttlMs',
        'methods',
        'maxBodyBytes',
        'store',
        'required',
        'storeTimeoutMs',
        'drainMs',
      ]) {
        assert.match(error.message, new RegExp(`idempotency\\(\\)\\.${name}:`));
      }
      return true;
    },
  );
  assert.throws(() => idempotency({ retries: 3 } as never), /unknown option "retries"/);
  assert.throws(() => idempotency({ methods: ['PO ST'] }), TypeError);
  assert.throws(() => idempotency({ scope: 'tenant' as never }), TypeError);
});

/** An app whose POST /tokens handler streams 'first ', waits for `more`, then streams 'second'. */
function tokensApp(): { app: Hono; more: ReturnType<typeof gate>; runs: () => number } {
  const more = gate();
  let runs = 0;
  const app = new Hono();
  app.use('/tokens', idempotency());
  app.post('/tokens', (c) => {
    runs++;
    return streamText(c, async (stream) => {
      await stream.write('first ');
      await more.promise;
      await stream.write('second');
    });
  });
  return { app, more, runs: () => runs };
}

test('a streamed response reaches the client as the handler writes it, and is replayed whole once it has ended, over a real server', async () => {
  const { app, more, runs } = tokensApp();
  await withApp(app, async (server) => {
    const send = (): Promise<Response> => fetch(`${server.origin}/tokens`, post('{}'));
    try {
      const res = await settlesWithin(send(), 1000);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const decoder = new TextDecoder();
      const first = await settlesWithin(reader.read(), 1000);
      assert.equal(decoder.decode(first.value), 'first ');
      more.open();
      let rest = '';
      for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
        rest += decoder.decode(chunk.value, { stream: true });
      }
      assert.equal(rest, 'second');
    } finally {
      more.open();
    }
    const again = await send();
    assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
    assert.equal(again.headers.get('content-type'), 'text/plain; charset=UTF-8');
    assert.equal(await again.text(), 'first second');
  });
  assert.equal(runs(), 1);
});

test('a client that cancels mid-stream still has the whole response recorded: its retry gets the replay', async () => {
  const { app, more, runs } = tokensApp();
  try {
    const res = await settlesWithin(app.request('/tokens', post('{}')), 1000);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await settlesWithin(reader.read(), 1000);
    const cancelled = reader.cancel(new Error('client went away'));
    more.open();
    await cancelled;
  } finally {
    more.open();
  }
  const again = await app.request('/tokens', post('{}'));
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  assert.equal(await again.text(), 'first second');
  assert.equal(runs(), 1);
});

test('a response whose body nobody reads (the connection dropped) is recorded all the same', async () => {
  const { app, runs } = ordersApp();
  await app.request('/orders', post('{"item":"tea"}'));
  const again = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  assert.deepEqual(await again.json(), { id: 'order-1', item: 'tea' });
  assert.equal(runs(), 1);
});

test('a "not run" answer after the claim expired mid-handler does not release the newer request claim', async () => {
  let now = 1_000_000;
  const release = [gate(), gate()];
  const entered = [gate(), gate()];
  let runs = 0;
  // Two instances sharing a store: an instance's own claims in flight hold their keys whatever the store says.
  const store = memoryStore<JsonValue>({ now: () => now });
  const [app, other] = [new Hono(), new Hono()].map((instance) => {
    instance.use('/job', idempotency({ store, ttlMs: 1000 }));
    instance.post('/job', async (c) => {
      const run = runs++;
      entered[run]?.open();
      await release[run]?.promise;
      return run === 0 ? c.text('slow down', 429) : c.text('done', 201);
    });
    return instance;
  }) as [Hono, Hono];
  // The two claims differ by body here; two of the same request differ by their ids
  // (the same-millisecond tests below).
  const first = app.request('/job', post('{"try":1}'));
  await entered[0]?.promise;
  now += 2000; // the first claim expires while its handler still runs
  const second = other.request('/job', post('{"try":2}'));
  await entered[1]?.promise;
  release[0]?.open();
  assert.equal((await first).status, 429);
  // The second request still runs: a third like it must wait, not run too.
  const third = await app.request('/job', post('{"try":2}'));
  assert.equal(third.status, 409);
  await third.body?.cancel();
  release[1]?.open();
  assert.equal(await (await second).text(), 'done');
  assert.equal(runs, 2);
});

test('a response body that breaks mid-stream breaks the client copy too; repeats get a 500, never a second run', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('/export', idempotency());
  app.post('/export', () => {
    runs++;
    let sent = false;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent) throw new Error('disk read failed');
        sent = true;
        controller.enqueue(new TextEncoder().encode('row 1\n'));
      },
    });
    return new Response(body, { headers: { 'content-type': 'text/csv' } });
  });
  const first = await app.request('/export', post('{}'));
  assert.equal(first.status, 200);
  await assert.rejects(first.text(), /disk read failed/);
  const again = await app.request('/export', post('{}'));
  assert.equal(again.status, 500);
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  assert.equal((await problemOf(again)).title, 'Internal Server Error');
  assert.equal(runs, 1);
});

test('a multipart body resent with a new boundary (fetch picks one per send) is the same request: replayed, not 422', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('/upload', idempotency());
  app.post('/upload', async (c) => {
    const form = await c.req.formData();
    return c.json({ run: ++runs, name: (form.get('file') as File).name });
  });
  const send = async (): Promise<Response> => {
    const form = new FormData();
    form.append('file', new Blob(['hello']), 'hello.txt');
    form.append('note', 'first upload');
    return app.request('/upload', { method: 'POST', body: form, headers: { 'idempotency-key': KEY } });
  };
  assert.deepEqual(await (await send()).json(), { run: 1, name: 'hello.txt' });
  const again = await send();
  assert.equal(again.status, 200);
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  assert.deepEqual(await again.json(), { run: 1, name: 'hello.txt' });
  assert.equal(runs, 1);
});

test('a form an earlier middleware read with c.req.formData() (Hono rebuilds it with a new boundary) is fingerprinted the same on every send', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('/signup', async (c, next) => {
    const form = await c.req.formData();
    if (!form.has('email')) return c.json({ error: 'email required' }, 400);
    await next();
  });
  app.use('/signup', idempotency());
  app.post('/signup', async (c) => c.json({ run: ++runs, email: (await c.req.parseBody()).email }));
  const send = async (email: string): Promise<Response> =>
    app.request('/signup', {
      method: 'POST',
      body: new URLSearchParams({ email }),
      headers: { 'idempotency-key': KEY },
    });
  assert.deepEqual(await (await send('a@example.com')).json(), { run: 1, email: 'a@example.com' });
  const again = await send('a@example.com');
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  assert.deepEqual(await again.json(), { run: 1, email: 'a@example.com' });
  const other = await send('b@example.com');
  assert.equal(other.status, 422);
  await other.body?.cancel();
  assert.equal(runs, 1);
});

/** An app whose POST /text handler counts its runs and echoes the body as text. */
function echoApp(): { app: Hono; runs: () => number } {
  let runs = 0;
  const app = new Hono();
  app.use('/text', idempotency());
  app.post('/text', async (c) => {
    runs++;
    return c.text(await c.req.text());
  });
  return { app, runs: () => runs };
}

test('a body that only starts like a form (a "--" first line, no closing delimiter) is fingerprinted whole: another such body with the same key is 422', async () => {
  const { app, runs } = echoApp();
  const first = await app.request('/text', post('--- a/prod.env\r\n+++ b/prod.env\r\n-DEBUG=1\r\n'));
  assert.equal(await first.text(), '--- a/prod.env\r\n+++ b/prod.env\r\n-DEBUG=1\r\n');
  const other = await app.request('/text', post('--- a/dev.env\r\n+++ b/prod.env\r\n-DEBUG=1\r\n'));
  assert.equal(other.status, 422);
  await other.body?.cancel();
  assert.equal(runs(), 1);
});

test('a form whose part holds its boundary text mid-line is not the same request as one without it', async () => {
  const { app, runs } = echoApp();
  // A fixed boundary (hand-written clients often use one); "--xyz" inside a value is
  // allowed (RFC 2046 §5.1.1 forbids only CRLF "--" boundary).
  const form = (value: string): string =>
    `--xyz\r\nContent-Disposition: form-data; name="cmd"\r\n\r\n${value}\r\n--xyz--\r\n`;
  const type = { 'content-type': 'multipart/form-data; boundary=xyz' };
  assert.equal((await app.request('/text', post(form('rm a--xyz b'), KEY, type))).status, 200);
  const other = await app.request('/text', post(form('rm a b'), KEY, type));
  assert.equal(other.status, 422);
  await other.body?.cancel();
  const again = await app.request('/text', post(form('rm a--xyz b').replaceAll('xyz', 'q7'), KEY, type));
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  assert.equal(await again.text(), form('rm a--xyz b'));
  assert.equal(runs(), 1);
});

test('a binary record replays about as fast as a text one of the same size (no array as long as the body)', async () => {
  const size = 4 * 1024 * 1024;
  const binary = new Uint8Array(size).map((_, i) => (i * 167) & 0xff);
  const app = new Hono();
  app.use('*', idempotency({ maxBodyBytes: size }));
  app.post('/binary', () => new Response(binary));
  app.post('/text', () => new Response('x'.repeat(size)));
  /**
   * The cheapest of five replays of `path`, in ms of this process's CPU time. Not wall
   * time: on a loaded machine a replay is descheduled mid-way, and a 17 ms binary
   * replay took 66 ms of wall time beside a 4 ms text one that fitted in one time slice.
   * The replay runs in this process (`app.request`, no socket), so its CPU time is its work.
   */
  const cheapestReplay = async (path: string): Promise<number> => {
    await (await app.request(path, post('{}'))).arrayBuffer();
    let cheapest = Number.POSITIVE_INFINITY;
    // Five, not three: under load (4.8 on 2 cores) Deno's cheapest of three once passed the bound.
    for (let i = 0; i < 5; i++) {
      const started = process.cpuUsage();
      const again = await app.request(path, post('{}'));
      const body = new Uint8Array(await again.arrayBuffer());
      const used = process.cpuUsage(started);
      cheapest = Math.min(cheapest, (used.user + used.system) / 1000);
      assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
      assert.equal(body.length, size);
    }
    return cheapest;
  };
  const text = await cheapestReplay('/text');
  const bytes = await cheapestReplay('/binary');
  // Measured: a plain loop takes 2 to 4 times the text replay; a per-byte array 15 to 40 times.
  assert.ok(
    bytes <= 4 * text + 40,
    `binary replay ${bytes.toFixed(0)} ms, text ${text.toFixed(0)} ms of CPU`,
  );
});

test('an empty form resent with a new boundary (its only line is the close delimiter) is the same request', async () => {
  const { app, runs } = echoApp();
  // What fetch sends for an empty FormData: undici and Bun end the line with CRLF, Deno does not.
  for (const [key, end, boundaries] of [
    ['"undici"', '\r\n', ['----formdata-undici-070584314208', '----formdata-undici-011223344556']],
    ['"deno"', '', ['----4102721330205681645744100755', '----2771028463716285910364529012']],
  ] as const) {
    const send = async (boundary: string): Promise<Response> =>
      app.request(
        '/text',
        post(`--${boundary}--${end}`, key, { 'content-type': `multipart/form-data; boundary=${boundary}` }),
      );
    assert.equal((await send(boundaries[0])).status, 200);
    const again = await send(boundaries[1]);
    assert.equal(again.status, 200);
    assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
    assert.equal(await again.text(), `--${boundaries[0]}--${end}`);
  }
  assert.equal(runs(), 2);
});

/** An inventory whose POST /reserve answers 150 ms after it started, counting its reservations. */
function slowInventory(): { app: Hono; reserved: () => number; started: Promise<void>; done: Promise<void> } {
  let reserved = 0;
  const started = gate();
  const done = gate();
  const app = new Hono();
  app.post('/reserve', async (c) => {
    started.open();
    await new Promise((resolve) => setTimeout(resolve, 150));
    reserved++;
    done.open();
    return c.json({ reservation: `r-${reserved}` }, 201);
  });
  return { app, reserved: () => reserved, started: started.promise, done: done.promise };
}

/**
 * A memory store that reports when the first request's outcome is settled in it: a
 * record other than `running` written, or the key released. Whatever that outcome
 * is, the test's assertions judge it; the promise only says it is there to be read.
 */
function settlingStore(): { store: Store; settled: Promise<void> } {
  const inner = memoryStore();
  const settled = gate();
  const store: Store = {
    get: (key) => inner.get(key),
    set: (key, value, ttlMs) => inner.set(key, value, ttlMs),
    increment: (key, by, ttlMs) => inner.increment(key, by, ttlMs),
    async delete(key) {
      const deleted = await inner.delete(key);
      settled.open();
      return deleted;
    },
    async compareAndSet(key, expected, next, ttlMs) {
      const swapped = await inner.compareAndSet(key, expected, next, ttlMs);
      const state = (next as { state?: unknown } | null)?.state;
      if (swapped && state !== 'running') settled.open();
      return swapped;
    },
  };
  return { store, settled: settled.promise };
}

/**
 * Sends a keyed order, gives up on it once the inventory has started reserving, then
 * sends the same order again once the first one's outcome is in the store: the
 * retry's answer.
 */
async function abandonThenRetry(
  origin: string,
  path: string,
  inventory: ReturnType<typeof slowInventory>,
  settled: Promise<void>,
): Promise<Response> {
  const send = (signal: AbortSignal | null): Promise<Response> =>
    fetch(`${origin}${path}`, { ...post('{"sku":"tea"}'), signal });
  const leave = new AbortController();
  const first = send(leave.signal);
  await inventory.started;
  leave.abort();
  await assert.rejects(first);
  await inventory.done;
  // The record is written as the answer's body ends, after the reservation: sent
  // before that, the retry would meet the running claim (409), however loaded the machine.
  await settlesWithin(settled, 10_000);
  return send(null);
}

test('a keyed request whose client leaves runs to the end behind upstream(), so the retry gets the real answer replayed', async () => {
  const inventory = slowInventory();
  await withApp(inventory.app, async (up) => {
    const app = new Hono<UpstreamEnv>();
    const { store, settled } = settlingStore();
    app.use('/orders', idempotency({ store }));
    app.use('/orders', upstream(definePolicy({ name: 'inventory', retry: { attempts: 1 } })));
    app.post('/orders', async (c) => {
      const res = await c.var.fetch(`${up.origin}/reserve`, { method: 'POST', body: '{}' });
      return c.json(await res.json(), 201);
    });
    app.onError(errorResponses());
    await withApp(app, async (server) => {
      const again = await abandonThenRetry(server.origin, '/orders', inventory, settled);
      assert.equal(again.status, 201);
      assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
      assert.deepEqual(await again.json(), { reservation: 'r-1' });
    });
  });
  assert.equal(inventory.reserved(), 1);
});

test('a keyed request whose client leaves runs to the end behind proxy(), so the retry gets the real answer replayed', async () => {
  const inventory = slowInventory();
  await withApp(inventory.app, async (up) => {
    const app = new Hono();
    const { store, settled } = settlingStore();
    app.use('/reserve', idempotency({ store }));
    app.post(
      '/reserve',
      proxy(`${up.origin}/reserve`, { policy: definePolicy({ name: 'inventory', retry: { attempts: 1 } }) }),
    );
    await withApp(app, async (server) => {
      const again = await abandonThenRetry(server.origin, '/reserve', inventory, settled);
      assert.equal(again.status, 201);
      assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
      assert.deepEqual(await again.json(), { reservation: 'r-1' });
    });
  });
  assert.equal(inventory.reserved(), 1);
});

/** How long a breaker stays open: ample for an order to meet it on a loaded machine. */
const OPEN_MS = 500;

/**
 * An inventory whose POST /reserve fails once with a 500 (its breaker, at one failure,
 * then opens for {@link OPEN_MS}) and then reserves; GET /price and POST /charge always answer.
 */
function flakyInventory(): { app: Hono; reserved: () => number; charged: () => number } {
  let reserveCalls = 0;
  let reserved = 0;
  let charged = 0;
  const app = new Hono();
  app.post('/reserve', (c) =>
    ++reserveCalls === 1 ? c.text('down', 500) : c.json({ reservation: `r-${++reserved}` }),
  );
  app.get('/price', (c) => c.json({ price: 3 }));
  app.post('/charge', (c) => c.json({ charge: `c-${++charged}` }));
  return { app, reserved: () => reserved, charged: () => charged };
}

/**
 * A keyed /orders route behind idempotency(), upstream() (a breaker per path, open
 * {@link OPEN_MS} after one failure) and errorResponses(), whose handler makes the calls `before` and
 * then reserves; and a way to open /reserve's circuit (a first order meets its 500).
 */
function ordersBehindBreaker(
  origin: string,
  before: (fetch: (path: string, init?: RequestInit) => Promise<Response>) => Promise<unknown>,
): { app: Hono<UpstreamEnv>; runs: () => number; openCircuit: (url: string) => Promise<void> } {
  let runs = 0;
  const policy = definePolicy({
    name: 'inventory',
    retry: { attempts: 1 },
    breaker: {
      consecutiveFailures: 1,
      open: { initialMs: OPEN_MS, factor: 1, maxMs: OPEN_MS, jitter: 'none' },
    },
  });
  const app = new Hono<UpstreamEnv>();
  app.use('/orders', idempotency());
  app.use('*', upstream(policy, { key: (url) => url.pathname }));
  const call = (c: { var: UpstreamEnv['Variables'] }) => (path: string, init?: RequestInit) =>
    c.var.fetch(`${origin}${path}`, init);
  app.post('/orders', async (c) => {
    runs++;
    await before(call(c));
    const res = await call(c)('/reserve', { method: 'POST', body: '{}' });
    return res.ok ? c.json(await res.json(), 201) : c.text('no reservation', 502);
  });
  app.onError(errorResponses({ policy }));
  return {
    app,
    runs: () => runs,
    async openCircuit(url) {
      const res = await fetch(url, post('{}', '"open-the-circuit"'));
      assert.equal(res.status, 502);
      await res.body?.cancel();
    },
  };
}

test("an open circuit's 503 behind errorResponses() is not kept as the key's outcome: the retry with the same key, once the circuit closes, runs the handler and gets its answer, over a real server", async () => {
  const inventory = flakyInventory();
  await withApp(inventory.app, async (up) => {
    const { app, runs, openCircuit } = ordersBehindBreaker(up.origin, async (fetch) =>
      // A safe method's call before it leaves nothing to run twice.
      (await fetch('/price')).json(),
    );
    await withApp(app, async (server) => {
      await openCircuit(`${server.origin}/orders`);
      const send = (): Promise<Response> => fetch(`${server.origin}/orders`, post('{"item":"tea"}'));
      const open = await send();
      assert.equal(open.status, 503);
      assert.equal(open.headers.get('retry-after'), '1');
      assert.equal(open.headers.get('x-should-retry'), 'true');
      assert.equal((await open.json()).code, 'CIRCUIT_OPEN');
      // The breaker lets a probe through after OPEN_MS (the client would wait its Retry-After: 1).
      await new Promise((resolve) => setTimeout(resolve, OPEN_MS + 50));
      const retried = await send();
      assert.equal(retried.status, 201);
      assert.equal(retried.headers.get(REPLAYED_HEADER), null);
      assert.deepEqual(await retried.json(), { reservation: 'r-1' });
      const again = await send();
      assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
      assert.deepEqual(await again.json(), { reservation: 'r-1' });
    });
    assert.equal(runs(), 3, 'the circuit opener, the refused order and its retry');
  });
  assert.equal(inventory.reserved(), 1);
});

test("an upstream's 429 asking for a wait past the cap (503 behind errorResponses()) is not kept as the key's outcome either: it did not run the call, and the retry with the same key runs the handler, over a real server", async () => {
  let reserveCalls = 0;
  const inventory = new Hono();
  inventory.post('/reserve', (c) =>
    ++reserveCalls === 1
      ? c.text('slow down', 429, { 'retry-after': '120' })
      : c.json({ reservation: 'r-1' }),
  );
  await withApp(inventory, async (up) => {
    const policy = definePolicy({ name: 'inventory', breaker: false });
    const app = new Hono<UpstreamEnv>();
    app.use('/orders', idempotency());
    app.use('/orders', upstream(policy));
    app.post('/orders', async (c) => {
      const res = await c.var.fetch(`${up.origin}/reserve`, { method: 'POST', body: '{}' });
      return c.json(await res.json(), 201);
    });
    app.onError(errorResponses({ policy }));
    await withApp(app, async (server) => {
      const send = (): Promise<Response> => fetch(`${server.origin}/orders`, post('{"item":"tea"}'));
      const refused = await send();
      assert.equal(refused.status, 503);
      assert.equal(refused.headers.get('retry-after'), '60');
      assert.equal(refused.headers.get('x-should-retry'), 'true');
      assert.equal((await refused.json()).code, 'RETRY_AFTER_TOO_LONG');
      const retried = await send();
      assert.equal(retried.status, 201);
      assert.deepEqual(await retried.json(), { reservation: 'r-1' });
    });
  });
  assert.equal(reserveCalls, 2);
});

/**
 * An order app behind idempotency() and upstream(policy, { throwOnStatus: true }) whose
 * handler reserves at `${upOrigin}/reserve` by POST.
 */
function ordersThrowingOnStatus(
  upOrigin: string,
  policy: ReturnType<typeof definePolicy>,
): Hono<UpstreamEnv> {
  const app = new Hono<UpstreamEnv>();
  app.use('/orders', idempotency());
  app.use('/orders', upstream(policy, { throwOnStatus: true }));
  app.post('/orders', async (c) => {
    const res = await c.var.fetch(`${upOrigin}/reserve`, { method: 'POST', body: '{}' });
    return c.json(await res.json(), 201);
  });
  app.onError(errorResponses({ policy }));
  return app;
}

test("an upstream's 429 that throwOnStatus turns into an error (503 behind errorResponses()) is not kept as the key's outcome: the upstream did not run it, and the retry with the same key runs the handler, over a real server; a 429 after a 503 the policy resent is kept", async () => {
  const answers: Response[] = [];
  let reserveCalls = 0;
  const inventory = new Hono();
  inventory.post('/reserve', () => {
    reserveCalls++;
    return answers.shift() ?? Response.json({ reservation: `r-${reserveCalls}` });
  });
  const slowDown = (): Response =>
    new Response('slow down', { status: 429, headers: { 'retry-after': '1' } });
  await withApp(inventory, async (up) => {
    const once = definePolicy({ name: 'inventory', breaker: false, retry: { attempts: 1 } });
    await withApp(ordersThrowingOnStatus(up.origin, once), async (server) => {
      const send = (): Promise<Response> => fetch(`${server.origin}/orders`, post('{"item":"tea"}'));
      answers.push(slowDown());
      const refused = await send();
      assert.equal(refused.status, 503);
      assert.equal(refused.headers.get('retry-after'), '1');
      assert.equal(
        refused.headers.get('x-should-retry'),
        'true',
        'the 429 shows the upstream did not run it',
      );
      assert.equal((await refused.json()).code, 'HTTP_STATUS');
      const retried = await send();
      assert.equal(retried.status, 201, 'the retry with the same key runs the handler, not a replayed 503');
      assert.equal(retried.headers.get(REPLAYED_HEADER), null);
      assert.deepEqual(await retried.json(), { reservation: 'r-2' });
    });
    // The policy resent the POST (resend: 'always') after a 503, which may have run it: the
    // later 429 says nothing of that pass, so the answer is the key's outcome.
    const resending = definePolicy({
      name: 'inventory',
      breaker: false,
      retry: { attempts: 2, resend: 'always', backoff: { initialMs: 1, jitter: 'none' } },
    });
    await withApp(ordersThrowingOnStatus(up.origin, resending), async (server) => {
      const send = (): Promise<Response> =>
        fetch(`${server.origin}/orders`, post('{"item":"tea"}', RETRY_KEY));
      answers.push(new Response('busy', { status: 503 }), slowDown());
      const kept = await send();
      assert.equal(kept.status, 503);
      assert.equal(kept.headers.get('x-should-retry'), null, 'a pass of it may have run');
      await kept.body?.cancel();
      const replayed = await send();
      assert.equal(replayed.headers.get(REPLAYED_HEADER), 'true');
      await replayed.body?.cancel();
    });
  });
  assert.equal(reserveCalls, 4, 'the 429, the retry that ran, the 503 and the 429 after it');
});

test("an upstream's 401 or 403 that throwOnStatus turns into an error (502 behind errorResponses()) is not kept as the key's outcome and invites no retry: once the gateway's credentials are fixed, the retry with the same key runs the handler, over a real server", async () => {
  for (const status of [401, 403]) {
    const answers: Response[] = [new Response('bad gateway token', { status })];
    let reserveCalls = 0;
    const inventory = new Hono();
    inventory.post('/reserve', () => {
      reserveCalls++;
      return answers.shift() ?? Response.json({ reservation: `r-${reserveCalls}` });
    });
    await withApp(inventory, async (up) => {
      const policy = definePolicy({ name: 'inventory', breaker: false, retry: { attempts: 1 } });
      await withApp(ordersThrowingOnStatus(up.origin, policy), async (server) => {
        const send = (): Promise<Response> => fetch(`${server.origin}/orders`, post('{"item":"tea"}'));
        const refused = await send();
        assert.equal(refused.status, 502, `${status}`);
        assert.equal(refused.headers.get('x-should-retry'), null, 'a retry would meet the same refusal');
        await refused.body?.cancel();
        const retried = await send();
        assert.equal(retried.status, 201, `${status}: the retry runs the handler, not a replayed 502`);
        assert.equal(retried.headers.get(REPLAYED_HEADER), null);
        assert.deepEqual(await retried.json(), { reservation: 'r-2' });
      });
    });
    assert.equal(reserveCalls, 2, `${status}: the refusal and the retry that ran`);
  }
});

test("a refused connection's 502 after the policy's own resends (each refused too) is not kept as the key's outcome: none of them ran, and the retry with the same key runs the handler, over a real server", async () => {
  const dead = `http://127.0.0.1:${await closedPort()}`;
  const inventory = flakyInventory();
  await withApp(inventory.app, async (up) => {
    let origin = dead;
    // The default three attempts, quickly: a POST is resent only after a failure that ran nothing.
    const policy = definePolicy({
      name: 'inventory',
      breaker: false,
      retry: { backoff: { initialMs: 5, maxMs: 10 } },
    });
    const app = new Hono<UpstreamEnv>();
    app.use('/orders', idempotency());
    app.use('/orders', upstream(policy));
    app.post('/orders', async (c) => {
      const res = await c.var.fetch(`${origin}/charge`, { method: 'POST', body: '{}' });
      return c.json(await res.json(), 201);
    });
    app.onError(errorResponses({ policy }));
    await withApp(app, async (server) => {
      const send = (): Promise<Response> => fetch(`${server.origin}/orders`, post('{"item":"tea"}'));
      const refused = await send();
      assert.equal(refused.status, 502);
      assert.equal(refused.headers.get('x-should-retry'), 'true');
      assert.equal((await refused.json()).code, 'ECONNREFUSED');
      origin = up.origin;
      const retried = await send();
      assert.equal(retried.status, 201);
      assert.deepEqual(await retried.json(), { charge: 'c-1' });
    });
  });
  assert.equal(inventory.charged(), 1);
});

test("an open circuit's 503 after a call of the same request that may have had an effect upstream (a POST answered) is kept and replayed: a retry must not run that call twice", async () => {
  const inventory = flakyInventory();
  await withApp(inventory.app, async (up) => {
    const { app, runs, openCircuit } = ordersBehindBreaker(up.origin, async (fetch) =>
      (await fetch('/charge', { method: 'POST', body: '{}' })).json(),
    );
    await withApp(app, async (server) => {
      await openCircuit(`${server.origin}/orders`);
      const send = (): Promise<Response> => fetch(`${server.origin}/orders`, post('{"item":"tea"}'));
      const open = await send();
      assert.equal(open.status, 503);
      assert.equal(open.headers.get('x-should-retry'), null);
      await open.body?.cancel();
      const retried = await send();
      assert.equal(retried.status, 503);
      assert.equal(retried.headers.get(REPLAYED_HEADER), 'true');
      await retried.body?.cancel();
    });
    assert.equal(runs(), 2, 'the circuit opener and the refused order, not its retry');
  });
  assert.equal(inventory.charged(), 2, 'the circuit opener and the refused order charged once each');
  assert.equal(inventory.reserved(), 0);
});

test("a refused call's 502 while another call of the same request by POST is still on its way upstream (Promise.all) is kept and replayed: that call may run, and a retry would run it twice", async () => {
  const dead = `http://127.0.0.1:${await closedPort()}`;
  const arrived = gate();
  const answer = gate();
  let charged = 0;
  const payments = new Hono();
  payments.post('/charge', async (c) => {
    charged++;
    arrived.open();
    await answer.promise;
    return c.json({ charge: `c-${charged}` });
  });
  /** The charge calls the handler made, which run on after it failed: their bodies are read at the end. */
  const charges: Promise<Response>[] = [];
  await withApp(payments, async (up) => {
    const policy = definePolicy({ name: 'shop', breaker: false, retry: { attempts: 1 } });
    const app = new Hono<UpstreamEnv>();
    app.use('/orders', idempotency());
    app.use('/orders', upstream(policy));
    app.post('/orders', async (c) => {
      const charging = c.var.fetch(`${up.origin}/charge`, { method: 'POST', body: '{}' });
      charges.push(charging);
      const [charge, reserve] = await Promise.all([
        charging,
        // Refused only once the charge is on its way: the charge may run upstream.
        arrived.promise.then(() => c.var.fetch(`${dead}/reserve`, { method: 'POST', body: '{}' })),
      ]);
      return c.json({ charge: await charge.json(), reserve: await reserve.json() }, 201);
    });
    app.onError(errorResponses({ policy }));
    await withApp(app, async (server) => {
      const send = (): Promise<Response> => fetch(`${server.origin}/orders`, post('{"item":"tea"}'));
      const refused = await send();
      assert.equal(refused.status, 502);
      assert.equal(refused.headers.get('x-should-retry'), null);
      await refused.body?.cancel();
      answer.open();
      const retried = await send();
      assert.equal(retried.status, 502);
      assert.equal(retried.headers.get(REPLAYED_HEADER), 'true');
      await retried.body?.cancel();
    });
    for (const charge of charges) await (await charge).arrayBuffer();
  });
  assert.equal(charged, 1, 'the charge ran once, not again for the retry');
});

test("an open circuit's 503 to a request without a key says nothing of resending (the handler may have had effects): only a keyed one under idempotency() is freed", async () => {
  const inventory = flakyInventory();
  await withApp(inventory.app, async (up) => {
    const { app, openCircuit } = ordersBehindBreaker(up.origin, async () => {});
    await withApp(app, async (server) => {
      await openCircuit(`${server.origin}/orders`);
      const open = await fetch(`${server.origin}/orders`, post('{"item":"tea"}', null));
      assert.equal(open.status, 503);
      assert.equal(open.headers.get('x-should-retry'), null);
      await open.body?.cancel();
    });
  });
});

test('a client that gives up before the answer finds it recorded when it retries with the same key, over a real server', async () => {
  let runs = 0;
  const entered = signal();
  const release = signal();
  const store = watchedStore();
  const app = new Hono();
  app.use('/orders', idempotency({ store }));
  app.post('/orders', async (c) => {
    runs++;
    entered.fire();
    await release.promise;
    return c.json({ order: runs }, 201);
  });
  await withApp(app, async ({ origin }) => {
    const send = (abort?: AbortSignal): Promise<Response> =>
      fetch(`${origin}/orders`, {
        method: 'POST',
        body: '{}',
        headers: { 'idempotency-key': RETRY_KEY },
        signal: abort ?? null,
      });
    const controller = new AbortController();
    const first = send(controller.signal);
    await entered.promise;
    controller.abort();
    await assert.rejects(first);
    release.fire();
    await store.recorded;
    const again = await send();
    assert.equal(again.status, 201);
    assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
    assert.deepEqual(await again.json(), { order: 1 });
  });
  assert.equal(runs, 1);
});

/**
 * A memory store whose calls can be held: `hold()` makes every later call wait for
 * `let go`. `released` resolves once a claim is released (swapped for the released
 * marker, or deleted).
 */
function stallingStore(): Store & { hold: () => void; letGo: () => void; released: Promise<void> } {
  const inner = memoryStore<JsonValue>();
  const released = signal();
  let stalled: Promise<void> | undefined;
  let letGo = (): void => {};
  const after = async <T>(call: () => Promise<T>): Promise<T> => {
    if (stalled !== undefined) await stalled;
    return call();
  };
  return {
    get: (key) => after(() => inner.get(key)),
    set: (key, value, ttlMs) => after(() => inner.set(key, value, ttlMs)),
    delete: (key) =>
      after(async () => {
        const done = await inner.delete(key);
        released.fire();
        return done;
      }),
    increment: (key, by, ttlMs) => after(() => inner.increment(key, by, ttlMs)),
    compareAndSet: (key, expected, next, ttlMs) =>
      after(async () => {
        const swapped = await inner.compareAndSet(key, expected, next, ttlMs);
        if (swapped && (next as { state?: unknown } | null)?.state === 'released') released.fire();
        return swapped;
      }),
    hold() {
      stalled = new Promise<void>((resolve) => {
        letGo = resolve;
      });
    },
    letGo: () => {
      stalled = undefined;
      letGo();
    },
    released: released.promise,
  };
}

test('a store that never answers gets the keyed request a 503 with Retry-After and x-should-retry after 1 s by default, not a hang', async () => {
  const store = stallingStore();
  const { app, runs } = ordersApp({ store });
  store.hold();
  try {
    const started = Date.now();
    const res = await settlesWithin(app.request('/orders', post('{"item":"tea"}')), 3000);
    const took = Date.now() - started;
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('retry-after'), '1');
    assert.equal(res.headers.get('x-should-retry'), 'true');
    assert.match((await problemOf(res)).detail ?? '', /idempotency store did not answer/);
    assert.ok(took >= 900 && took < 2500, `answered after ${took} ms`);
    assert.equal(runs(), 0);
  } finally {
    store.letGo();
  }
});

test('a claim the store writes only after its timeout is released, so the retry with the same key runs', async () => {
  const store = stallingStore();
  const { app, runs } = ordersApp({ store, storeTimeoutMs: 20 });
  store.hold();
  const first = await settlesWithin(app.request('/orders', post('{"item":"tea"}')), 1000);
  assert.equal(first.status, 503);
  await first.body?.cancel();
  // The store comes back and writes the claim nobody is running: it must not hold the key.
  store.letGo();
  await settlesWithin(store.released, 1000);
  const retry = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(retry.status, 201);
  assert.deepEqual(await retry.json(), { id: 'order-1', item: 'tea' });
  assert.equal(runs(), 1);
});

test('a final write the store never finishes does not hold back the end of the response', async () => {
  const store = stallingStore();
  let runs = 0;
  const app = new Hono();
  app.use('/orders', idempotency({ store, storeTimeoutMs: 20 }));
  app.post('/orders', (c) => {
    runs++;
    // The key is claimed; from here on the store stalls, the final write included.
    store.hold();
    return c.json({ id: 'order-1' }, 201);
  });
  try {
    const res = await settlesWithin(app.request('/orders', post('{"item":"tea"}')), 1000);
    assert.equal(res.status, 201);
    assert.deepEqual(await settlesWithin(res.json(), 1000), { id: 'order-1' });
  } finally {
    store.letGo();
  }
  assert.equal(runs, 1);
});

/** A call to a store, passed through by a view of it (`eachCall`). */
type StoreCall = <A extends unknown[], R>(call: (...args: A) => Promise<R>) => (...args: A) => Promise<R>;

/** A view of `store` whose every call goes through `through`, which may hang, delay or interleave it. */
function eachCall(store: Store, through: StoreCall): Store {
  return {
    get: through((key) => store.get(key)),
    set: through((key, value, ttlMs) => store.set(key, value, ttlMs)),
    delete: through((key) => store.delete(key)),
    increment: through((key, by, ttlMs) => store.increment(key, by, ttlMs)),
    compareAndSet: through((key, expected, next, ttlMs) => store.compareAndSet(key, expected, next, ttlMs)),
  };
}

/** A view of `store` that can be cut off, as if its process died: every call after `die()` hangs. */
function mortal(store: Store): Store & { die: () => void } {
  let dead = false;
  const hang = new Promise<never>(() => {});
  const alive: StoreCall =
    (call) =>
    (...args) =>
      dead ? hang : call(...args);
  return {
    ...eachCall(store, alive),
    die: () => {
      dead = true;
    },
  };
}

test('a claim left by a process that died lapses after the 30 s lease, not ttlMs: another instance then runs the key', async () => {
  let now = 1_000_000;
  const shared = memoryStore<JsonValue>({ now: () => now });
  const crashed = mortal(shared);
  const entered = gate();
  const never = gate();
  const first = new Hono();
  first.use('/orders', idempotency({ store: crashed, storeTimeoutMs: 10 }));
  first.post('/orders', async (c) => {
    entered.open();
    await never.promise;
    return c.text('never sent', 201);
  });
  const { app: second, runs } = ordersApp({ store: shared });
  const lost = first.request('/orders', post('{"item":"tea"}'));
  try {
    await entered.promise;
    crashed.die();
    const meanwhile = await second.request('/orders', post('{"item":"tea"}'));
    assert.equal(meanwhile.status, 409);
    await meanwhile.body?.cancel();
    now += 30_001;
    const later = await second.request('/orders', post('{"item":"tea"}'));
    assert.equal(later.status, 201);
    assert.deepEqual(await later.json(), { id: 'order-1', item: 'tea' });
    assert.equal(runs(), 1);
  } finally {
    never.open();
    await (await lost).body?.cancel();
  }
});

test('a live claim is renewed while its handler runs past the lease: a repeat still gets 409, never a second run', async () => {
  // The store's clock moves only when the test moves it, and only once a renewal has
  // landed: a loaded machine running the renewal timer late cannot make the claim
  // lapse (on the real clock, a 60 ms lease lapsed whenever a timer ran 40 ms late).
  let now = 1_000_000;
  const leaseMs = 60;
  const inner = memoryStore<JsonValue>({ now: () => now });
  let renewed = signal();
  const store = withCompareAndSet(inner, async (key, expected, next, ttlMs) => {
    const swapped = await inner.compareAndSet(key, expected, next, ttlMs);
    // A renewal is a claim set over itself; a first claim expects nothing (or a released marker).
    if (swapped && (expected as { state?: string } | undefined)?.state === 'running') renewed.fire();
    return swapped;
  });
  const release = gate();
  let runs = 0;
  const app = new Hono();
  app.use('/orders', idempotency({ store, leaseMs }));
  app.post('/orders', async (c) => {
    runs++;
    // Only the first run waits: a second one (the bug) answers at once and fails the test, not hangs it.
    if (runs === 1) await release.promise;
    return c.text('done', 201);
  });
  const first = app.request('/orders', post('{"item":"tea"}'));
  try {
    // Three leases pass, a step after each renewal: the claim lives only because it is renewed.
    for (let step = 0; step < 3; step++) {
      await settlesWithin(renewed.promise, 1000);
      renewed = signal();
      now += leaseMs - 1;
    }
    const repeat = await app.request('/orders', post('{"item":"tea"}'));
    assert.equal(repeat.status, 409, `handler runs: ${runs}`);
    await repeat.body?.cancel();
  } finally {
    release.open();
  }
  assert.equal(await (await first).text(), 'done');
  assert.equal(runs, 1);
});

test('a running claim the store drops to make room for newer keys (LRU, as the default store does when full) still holds its key: a repeat gets 409, not a second run, and the answer is replayed after', async () => {
  const release = gate();
  let runs = 0;
  const app = new Hono();
  // The default store's 65,536 records, scaled down: the same eviction, in a few requests.
  const maxEntries = 8;
  app.use('*', idempotency({ store: memoryStore({ maxEntries }) }));
  app.post('/orders', async (c) => {
    runs++;
    // Only the first run waits: a second one (the bug) answers at once and fails the test, not hangs it.
    if (runs === 1) await release.promise;
    return c.text(`order-${runs}`, 201);
  });
  app.post('/ping', (c) => c.text('pong'));
  const first = app.request('/orders', post('{"item":"tea"}'));
  try {
    // As many other keys as the store holds: the claim is its least recently used entry.
    for (let i = 0; i < maxEntries; i++) {
      await (await app.request('/ping', post('{}', `"ping-${i}"`))).text();
    }
    const repeat = await app.request('/orders', post('{"item":"tea"}'));
    assert.equal(repeat.status, 409, `handler runs: ${runs}`);
    await repeat.body?.cancel();
  } finally {
    release.open();
  }
  assert.equal(await (await first).text(), 'order-1');
  const after = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(after.headers.get(REPLAYED_HEADER), 'true');
  assert.equal(await after.text(), 'order-1');
  assert.equal(runs, 1);
});

test('a claim a shared store drops while its handler runs is taken again at the next renewal: a repeat at another instance gets 409, not a second run', async () => {
  const inner = memoryStore<JsonValue>();
  let claimKey = '';
  let claimed = signal();
  const store = withCompareAndSet(inner, async (key, expected, next, ttlMs) => {
    const swapped = await inner.compareAndSet(key, expected, next, ttlMs);
    if (swapped && (next as { state?: string }).state === 'running') {
      claimKey = key;
      claimed.fire();
    }
    return swapped;
  });
  const release = gate();
  let runs = 0;
  const [first, second] = [new Hono(), new Hono()].map((app) => {
    app.use('/orders', idempotency({ store, leaseMs: 60 }));
    app.post('/orders', async (c) => {
      runs++;
      // Only the first run waits: a second one (the bug) answers at once and fails the test, not hangs it.
      if (runs === 1) await release.promise;
      return c.text(`order-${runs}`, 201);
    });
    return app;
  }) as [Hono, Hono];
  const running = first.request('/orders', post('{"item":"tea"}'));
  try {
    await settlesWithin(claimed.promise, 1000);
    claimed = signal();
    // What a shared store under memory pressure does to a key with a TTL (Redis volatile-lru, an LRU cache).
    await inner.delete(claimKey);
    // The next renewal, if it takes the key again (without it the key stays free: the repeat shows what follows).
    await settlesWithin(claimed.promise, 1000).catch(() => {});
    const repeat = await second.request('/orders', post('{"item":"tea"}'));
    assert.equal(repeat.status, 409, `handler runs: ${runs}`);
    await repeat.body?.cancel();
  } finally {
    release.open();
  }
  assert.equal(await (await running).text(), 'order-1');
  assert.equal(runs, 1);
});

/**
 * A memory store whose running claim `evict()` drops, as a shared store under memory
 * pressure does, and that then delivers the renewal's claim taken again late: after the
 * next write over the claim (sent later on another connection, it arrives first), or
 * after 50 ms. `reclaiming` resolves when that claim is sent.
 */
function evictingStore(): Store & { evict: () => Promise<void>; reclaiming: Promise<void> } {
  const inner = memoryStore<JsonValue>();
  const reclaiming = signal();
  let claimKey = '';
  let evicted = false;
  let held: (() => void) | undefined;
  const store = withCompareAndSet(inner, async (key, expected, next, ttlMs) => {
    const state = (next as { state?: string }).state;
    if (evicted && expected === undefined && state === 'running') {
      reclaiming.fire();
      await new Promise<void>((resolve) => {
        held = resolve;
        setTimeout(resolve, 50);
      });
      return inner.compareAndSet(key, expected, next, ttlMs);
    }
    const swapped = await inner.compareAndSet(key, expected, next, ttlMs);
    if (swapped && state === 'running') claimKey = key;
    if ((expected as { state?: string } | undefined)?.state === 'running' && state !== 'running') {
      // The claim taken again lands just after this write, before the write that follows it.
      held?.();
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    return swapped;
  });
  return {
    ...store,
    reclaiming: reclaiming.promise,
    evict: async () => {
      evicted = true;
      await inner.delete(claimKey);
    },
  };
}

test('a claim a shared store drops and the renewal takes again as the handler ends still gets its outcome: a repeat replays the answer, not a second run', async () => {
  const store = evictingStore();
  const evicted = signal();
  let runs = 0;
  const app = new Hono();
  app.use('/orders', idempotency({ store, leaseMs: 60 }));
  app.post('/orders', async (c) => {
    runs++;
    if (runs === 1) {
      evicted.fire();
      // Ends while the renewal's claim is on its way to the store.
      await settlesWithin(store.reclaiming, 1000).catch(() => {});
    }
    return c.text(`order-${runs}`, 201);
  });
  await withApp(app, async ({ origin }) => {
    const running = fetch(`${origin}/orders`, post('{"item":"tea"}'));
    await settlesWithin(evicted.promise, 1000);
    await store.evict();
    assert.equal(await (await running).text(), 'order-1');
    // Past the lease of any claim left behind.
    await new Promise((resolve) => setTimeout(resolve, 150));
    const repeat = await fetch(`${origin}/orders`, post('{"item":"tea"}'));
    assert.equal(repeat.status, 201, `handler runs: ${runs}`);
    assert.equal(await repeat.text(), 'order-1');
    assert.equal(repeat.headers.get(REPLAYED_HEADER), 'true');
  });
  assert.equal(runs, 1);
});

test('a claim a shared store drops and the renewal takes again as the handler answers "not run" is released: the retry runs at once, not 409 for a lease', async () => {
  const store = evictingStore();
  const evicted = signal();
  let runs = 0;
  const app = new Hono();
  app.use('/orders', idempotency({ store, leaseMs: 300 }));
  app.post('/orders', async (c) => {
    runs++;
    if (runs > 1) return c.text(`order-${runs}`, 201);
    evicted.fire();
    await settlesWithin(store.reclaiming, 1000).catch(() => {});
    return c.text('slow down', 429, { 'retry-after': '0' });
  });
  await withApp(app, async ({ origin }) => {
    const running = fetch(`${origin}/orders`, post('{"item":"tea"}'));
    await settlesWithin(evicted.promise, 1000);
    await store.evict();
    const refused = await running;
    assert.equal(refused.status, 429);
    await refused.body?.cancel();
    // Past the held claim's delivery, within the lease.
    await new Promise((resolve) => setTimeout(resolve, 100));
    const retry = await fetch(`${origin}/orders`, post('{"item":"tea"}'));
    assert.equal(retry.status, 201);
    assert.equal(await retry.text(), 'order-2');
  });
});

/**
 * An app whose POST /feed handler counts its runs and answers a feed that writes
 * 'first ', then stalls until the test calls `end()` (writes 'last' and closes) or
 * `breaks()` (errors with 'upstream reset'); `cancelled` resolves once the feed is
 * cancelled. Not an event stream: those are never read ahead.
 */
function feedApp(options: Parameters<typeof idempotency>[0]): {
  app: Hono;
  runs: () => number;
  end: () => void;
  breaks: () => void;
  cancelled: Promise<void>;
} {
  const cancelled = signal();
  let runs = 0;
  let end = (): void => {};
  let breaks = (): void => {};
  const app = new Hono();
  app.use('/feed', idempotency(options));
  app.post('/feed', () => {
    runs++;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('first '));
        end = () => {
          controller.enqueue(new TextEncoder().encode('last'));
          controller.close();
        };
        breaks = () => controller.error(new Error('upstream reset'));
      },
      cancel: () => cancelled.fire(),
    });
    return new Response(body, { headers: { 'content-type': 'application/x-ndjson' } });
  });
  return { app, runs: () => runs, end: () => end(), breaks: () => breaks(), cancelled: cancelled.promise };
}

/** A client's POST to /feed, read up to its first chunk: the reader it would leave by cancelling. */
async function firstChunkRead(app: Hono): Promise<ReadableStreamDefaultReader<Uint8Array>> {
  const res = await settlesWithin(app.request('/feed', post('{}')), 1000);
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  await settlesWithin(reader.read(), 1000);
  return reader;
}

test('a response body that never ends is read for at most drainMs after its client left: then cancelled, and repeats get 409, never a second run', async () => {
  // The feed writes once, then stalls for good.
  const { app, runs, cancelled } = feedApp({ drainMs: 50 });
  const reader = await firstChunkRead(app);
  await settlesWithin(reader.cancel(new Error('client went away')), 1000);
  await settlesWithin(cancelled, 1000);
  const again = await app.request('/feed', post('{}'));
  assert.equal(again.status, 409);
  assert.equal(again.headers.get('x-should-retry'), 'false');
  assert.match((await problemOf(again)).detail ?? '', /already ran .* will not run again/);
  assert.equal(runs(), 1);
});

test('a response body that breaks while it is drained after its client left leaves no drain timer behind: nothing is written after its 500', async () => {
  const inner = memoryStore<JsonValue>();
  const writes: string[] = [];
  const store = withCompareAndSet(inner, (key, expected, next, ttlMs) => {
    const state = (next as { state?: string }).state ?? '';
    if (state !== 'running') writes.push(state);
    return inner.compareAndSet(key, expected, next, ttlMs);
  });
  const drainMs = 100;
  // The drain timers armed and not cleared. A timer left behind now writes nothing when
  // it fires (the 500 lets go of the copy first), so what is left to see is the timer
  // itself, holding the process for drainMs: watched through the globals it is set with.
  const pending = new Set<unknown>();
  const { setTimeout: realSetTimeout, clearTimeout: realClearTimeout } = globalThis;
  globalThis.setTimeout = ((handler: () => void, ms?: number) => {
    const timer = realSetTimeout(handler, ms);
    if (ms === drainMs) pending.add(timer);
    return timer;
  }) as typeof setTimeout;
  globalThis.clearTimeout = ((timer: ReturnType<typeof setTimeout> | undefined) => {
    pending.delete(timer);
    realClearTimeout(timer);
  }) as typeof clearTimeout;
  const { app, breaks } = feedApp({ store, drainMs });
  try {
    const reader = await firstChunkRead(app);
    const cancelled = reader.cancel(new Error('client went away')).catch(() => {});
    // The client left; while the rest is drained for its retry, the handler's body breaks.
    breaks();
    await settlesWithin(cancelled, 1000);
    assert.equal(pending.size, 0, 'a drain timer is still set');
  } finally {
    globalThis.setTimeout = realSetTimeout;
    globalThis.clearTimeout = realClearTimeout;
  }
  const again = await app.request('/feed', post('{}'));
  assert.equal(again.status, 500);
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  await again.body?.cancel();
  // Past drainMs: a timer left running would now try to record the key as unreplayable.
  await new Promise((resolve) => setTimeout(resolve, drainMs + 50));
  assert.ok(writes.includes('done'), "writes.includes('done')");
  assert.ok(!writes.includes('unreplayable'), `writes: ${writes.join(', ')}`);
});

/**
 * A view of `store` whose every call, once `armed`, runs `between` after the first
 * call that completes: another instance acting between this one's store calls.
 */
function interleaved(store: Store, between: () => Promise<void>): Store & { arm: () => void } {
  let armed = false;
  const then: StoreCall =
    (call) =>
    async (...args) => {
      const result = await call(...args);
      if (armed) {
        armed = false;
        await between();
      }
      return result;
    };
  return {
    ...eachCall(store, then),
    arm: () => {
      armed = true;
    },
  };
}

test('a release stalled past the lease never removes the claim another instance took meanwhile: a repeat gets 409, not a second run', async () => {
  let now = 1_000_000;
  const leaseMs = 1000;
  const shared = memoryStore<JsonValue>({ now: () => now });
  const entered = gate();
  const finish = gate();
  // Instance B's handler runs once the key is free, and holds it until told to finish.
  let runs = 0;
  const second = new Hono();
  second.use('/job', idempotency({ store: shared, leaseMs }));
  second.post('/job', async (c) => {
    runs++;
    entered.open();
    await finish.promise;
    return c.text('done', 201);
  });
  let taken: Response | Promise<Response> | undefined;
  // Instance A's store stalls past the lease in the middle of releasing its claim;
  // meanwhile the key is free to B, which claims it and runs.
  const store = interleaved(shared, async () => {
    now += leaseMs + 1;
    taken = second.request('/job', post('{}'));
    await settlesWithin(entered.promise, 1000);
  });
  const first = new Hono();
  first.use('/job', idempotency({ store, leaseMs }));
  first.post('/job', (c) => {
    runs++;
    store.arm();
    return c.text('slow down', 429);
  });
  try {
    const answered = await first.request('/job', post('{}'));
    assert.equal(answered.status, 429);
    await answered.body?.cancel();
    assert.equal(runs, 2);
    // B still holds the key: a repeat on either instance waits, it does not run a third time.
    for (const app of [first, second]) {
      const repeat = await app.request('/job', post('{}'));
      assert.equal(repeat.status, 409, `handler runs: ${runs}`);
      assert.match((await problemOf(repeat)).detail ?? '', /still running/);
    }
  } finally {
    finish.open();
  }
  assert.equal(await (await (taken as Promise<Response>)).text(), 'done');
  assert.equal(runs, 2);
});

test('a key released a moment ago can be claimed at once, even by a store whose clock has not moved since', async () => {
  const now = 1_000_000;
  const store = memoryStore<JsonValue>({ now: () => now });
  let runs = 0;
  const app = new Hono();
  app.use('/job', idempotency({ store }));
  app.post('/job', (c) => {
    runs++;
    return runs === 1 ? c.text('slow down', 429) : c.text('accepted', 202);
  });
  for (const status of [429, 202, 202]) {
    const res = await app.request('/job', post('{}'));
    assert.equal(res.status, status);
    await res.body?.cancel();
  }
  assert.equal(runs, 2);
});

/**
 * A memory store that takes 100 ms to write a record of a response (`done`, which
 * carries the body, as a remote store takes longer over a large value) and no time
 * for anything else; `writes` lists the states of the records written, claims left out.
 */
function slowRecordStore(): { store: Store; writes: string[] } {
  const inner = memoryStore<JsonValue>();
  const writes: string[] = [];
  const store = withCompareAndSet(inner, async (key, expected, next, ttlMs) => {
    const state = (next as { state?: string }).state ?? '';
    if (state === 'done') await new Promise((resolve) => setTimeout(resolve, 100));
    const swapped = await inner.compareAndSet(key, expected, next, ttlMs);
    if (swapped && state !== 'running') writes.push(state);
    return swapped;
  });
  return { store, writes };
}

test('a body that ends while its client is gone is replayed whole, even if its final write is still in flight when drainMs runs out', async () => {
  const { store, writes } = slowRecordStore();
  const { app, runs, end } = feedApp({ store, drainMs: 20 });
  const reader = await firstChunkRead(app);
  // The client leaves, and the body ends at once: it is all read, its record on its way.
  const cancelled = reader.cancel(new Error('client went away'));
  end();
  await settlesWithin(cancelled, 1000);
  const again = await app.request('/feed', post('{}'));
  assert.equal(
    again.headers.get(REPLAYED_HEADER),
    'true',
    `status ${again.status}, writes: ${writes.join(', ')}`,
  );
  assert.equal(await again.text(), 'first last');
  assert.deepEqual(writes, ['done']);
  assert.equal(runs(), 1);
});

test('a body that breaks while its client is gone is replayed as its 500, even if that write is still in flight when drainMs runs out', async () => {
  const { store, writes } = slowRecordStore();
  const { app, runs, breaks } = feedApp({ store, drainMs: 20 });
  const reader = await firstChunkRead(app);
  // The client leaves, and the body breaks at once: its 500 is on its way to the store.
  const cancelled = reader.cancel(new Error('client went away')).catch(() => {});
  breaks();
  await settlesWithin(cancelled, 1000);
  const again = await app.request('/feed', post('{}'));
  assert.equal(again.status, 500, `writes: ${writes.join(', ')}`);
  assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
  await again.body?.cancel();
  assert.deepEqual(writes, ['done']);
  assert.equal(runs(), 1);
});

/**
 * Runs `fn` with `Date.now` frozen at one millisecond, so every claim the middleware
 * makes meanwhile is stamped with the same start time: two instances of a fleet
 * claiming a key in the same millisecond. Store clocks are injected separately.
 */
async function inOneMillisecond<T>(fn: () => Promise<T>): Promise<T> {
  const realNow = Date.now;
  Date.now = () => 1_767_225_600_000;
  try {
    return await fn();
  } finally {
    Date.now = realNow;
  }
}

/**
 * Two instances (`first`, `second`) of one keyed POST /job over one shared memoryStore
 * (`first` through `firstView(store)`, if given), each with its own idempotency()
 * middleware as a fleet would run them. The first run (on
 * `first`) holds until `answerFirst(response)`; the second (on `second`) until
 * `finishSecond()`; any later run answers at once. `entered[n]` opens once run n+1 has
 * started; `runs()` counts them all; `lapse()` moves the store's clock past one lease.
 */
function twoInstances(firstView: (store: Store) => Store = (store) => store): {
  first: Hono;
  second: Hono;
  entered: [ReturnType<typeof gate>, ReturnType<typeof gate>];
  answerFirst: (response: Response) => void;
  finishSecond: () => void;
  runs: () => number;
  lapse: () => void;
} {
  let now = 1_000_000;
  const shared = memoryStore<JsonValue>({ now: () => now });
  const entered: [ReturnType<typeof gate>, ReturnType<typeof gate>] = [gate(), gate()];
  let firstAnswer: (response: Response) => void = () => {};
  const firstAnswered = new Promise<Response>((resolve) => {
    firstAnswer = resolve;
  });
  const secondFinished = gate();
  let runs = 0;
  const first = new Hono();
  first.use('/job', idempotency({ store: firstView(shared) }));
  first.post('/job', async (c) => {
    const run = ++runs;
    if (run !== 1) return c.text(`run ${run}`, 201);
    entered[0].open();
    return firstAnswered;
  });
  const second = new Hono();
  second.use('/job', idempotency({ store: shared }));
  second.post('/job', async (c) => {
    const run = ++runs;
    if (run === 2) {
      entered[1].open();
      await secondFinished.promise;
    }
    return c.text(`run ${run}`, 201);
  });
  return {
    first,
    second,
    entered,
    answerFirst: firstAnswer,
    finishSecond: secondFinished.open,
    runs: () => runs,
    lapse: () => {
      now += DEFAULT_LEASE_MS + 1;
    },
  };
}

/**
 * Instance A (`first`) claims the key and its run stalls past its lease, then instance B
 * (`second`) claims it: resolves with both requests once B's run has started.
 */
async function claimLapsesToSecond({
  first,
  second,
  entered,
  lapse,
}: ReturnType<typeof twoInstances>): Promise<{
  a: Response | Promise<Response>;
  b: Response | Promise<Response>;
}> {
  const a = first.request('/job', post('{}'));
  await settlesWithin(entered[0].promise, 1000);
  lapse();
  const b = second.request('/job', post('{}'));
  await settlesWithin(entered[1].promise, 1000);
  return { a, b };
}

test('an instance that lost its claim and answers "not run" never releases the claim another instance took in the same millisecond: a repeat gets 409, not a third run', async () => {
  const instances = twoInstances();
  const { first, second, answerFirst, finishSecond, runs } = instances;
  await inOneMillisecond(async () => {
    let b: Response | Promise<Response> | undefined;
    try {
      // Instance A stalls past its lease (its renewal, due after 10 s, never came):
      // its claim lapses, and instance B claims the key and runs the handler.
      const claims = await claimLapsesToSecond(instances);
      b = claims.b;
      // A's handler answers that it did nothing: A releases what it takes for its claim.
      answerFirst(
        new Response('upstream down, nothing done', { status: 503, headers: { 'x-should-retry': 'true' } }),
      );
      assert.equal((await claims.a).status, 503);
      // B still runs: a repeat on either instance waits for it, it does not run a third time.
      for (const app of [first, second]) {
        const repeat = await app.request('/job', post('{}'));
        assert.equal(repeat.status, 409, `handler runs: ${runs()}`);
        assert.match((await problemOf(repeat)).detail ?? '', /still running/);
      }
    } finally {
      answerFirst(new Response('late', { status: 503, headers: { 'x-should-retry': 'true' } }));
      finishSecond();
    }
    assert.equal(await (await (b as Promise<Response>)).text(), 'run 2');
  });
  assert.equal(runs(), 2);
});

test('an instance that lost its claim and then completes never records over the claim another instance took in the same millisecond: the key replays the holder answer', async () => {
  const instances = twoInstances();
  const { first, second, answerFirst, finishSecond, runs } = instances;
  await inOneMillisecond(async () => {
    let b: Response | Promise<Response> | undefined;
    try {
      const claims = await claimLapsesToSecond(instances);
      b = claims.b;
      // A, whose claim lapsed, completes: its client has long retried, and B serves that retry.
      answerFirst(new Response('run 1', { status: 201 }));
      assert.equal(await (await claims.a).text(), 'run 1');
      const during = await second.request('/job', post('{}'));
      assert.equal(
        during.status,
        409,
        `replayed ${during.headers.get(REPLAYED_HEADER)}: ${await during.clone().text()}`,
      );
      await during.body?.cancel();
    } finally {
      answerFirst(new Response('late', { status: 201 }));
      finishSecond();
    }
    assert.equal(await (await (b as Promise<Response>)).text(), 'run 2');
    // The record is the answer of the claim that held the key: the one the retrying client got.
    const after = await first.request('/job', post('{}'));
    assert.equal(after.headers.get(REPLAYED_HEADER), 'true');
    assert.equal(await after.text(), 'run 2');
  });
  assert.equal(runs(), 2);
});

/**
 * A view of `store` as an instance running a version from before claims had ids
 * writes to it: every claim it writes, and every claim it compares with, lacks one.
 */
function withoutClaimIds(store: Store): Store {
  const strip = (value: JsonValue | undefined): JsonValue | undefined => {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return value;
    const { id: _, ...rest } = value;
    return rest;
  };
  return withCompareAndSet(store, (key, expected, next, ttlMs) =>
    store.compareAndSet(key, strip(expected), strip(next) as JsonValue, ttlMs),
  );
}

test('a claim written by an earlier version (no id) holds its key until its lease lapses, and its release never frees the claim taken after it', async () => {
  const { first, second, entered, answerFirst, finishSecond, runs, lapse } = twoInstances(withoutClaimIds);
  await inOneMillisecond(async () => {
    const a = first.request('/job', post('{}'));
    let b: Response | Promise<Response> | undefined;
    try {
      await settlesWithin(entered[0].promise, 1000);
      // The earlier version's claim is read as running: a repeat waits.
      const meanwhile = await second.request('/job', post('{}'));
      assert.equal(meanwhile.status, 409);
      assert.match((await problemOf(meanwhile)).detail ?? '', /still running/);
      lapse();
      b = second.request('/job', post('{}'));
      await settlesWithin(entered[1].promise, 1000);
      answerFirst(
        new Response('upstream down, nothing done', { status: 503, headers: { 'x-should-retry': 'true' } }),
      );
      assert.equal((await a).status, 503);
      const repeat = await second.request('/job', post('{}'));
      assert.equal(repeat.status, 409, `handler runs: ${runs()}`);
      await repeat.body?.cancel();
    } finally {
      answerFirst(new Response('late', { status: 503, headers: { 'x-should-retry': 'true' } }));
      finishSecond();
    }
    assert.equal(await (await (b as Promise<Response>)).text(), 'run 2');
  });
  assert.equal(runs(), 2);
});

test('with the default store, a keyed POST retried after 5,000 other small keyed requests is replayed, not run again', async () => {
  // At 100 keyed requests a second that is 50 s: within a client's retries (Retry-After
  // waits up to 60 s), past the 4,096 records the default store used to keep.
  const { app, runs } = ordersApp();
  const first = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(first.status, 201);
  await first.text();
  for (let i = 0; i < 5000; i++) {
    await (await app.request('/orders', post(`{"item":"other-${i}"}`, `"other-${i}"`))).text();
  }
  assert.equal(runs(), 5001);
  const retry = await app.request('/orders', post('{"item":"tea"}'));
  assert.equal(retry.headers.get(REPLAYED_HEADER), 'true', `handler runs: ${runs()}`);
  assert.deepEqual(await retry.json(), { id: 'order-1', item: 'tea' });
  assert.equal(runs(), 5001);
});

test('the default store bounds its records by weight: 256 KiB responses past 32 MiB push the oldest out, while the newest are replayed', async () => {
  let runs = 0;
  const app = new Hono();
  app.use('*', idempotency());
  // A maximal body (the default maxBodyBytes), stored as text: a record of about 256 Ki characters.
  app.post('/report', (c) => c.text(`${++runs}`.padEnd(262_144, '.')));
  for (let i = 0; i < 160; i++)
    await (await app.request('/report', post('{}', `"report-${i}"`))).arrayBuffer();
  // 160 × 256 Ki is 40 MiB: about 127 fit in 32 MiB. (4,096 of them, as the count alone allowed, were 1 GiB.)
  const newest = await app.request('/report', post('{}', '"report-159"'));
  assert.equal(newest.headers.get(REPLAYED_HEADER), 'true');
  assert.ok((await newest.text()).startsWith('160.'), "(await newest.text()).startsWith('160.')");
  const oldest = await app.request('/report', post('{}', '"report-0"'));
  assert.equal(oldest.headers.get(REPLAYED_HEADER), null);
  assert.ok((await oldest.text()).startsWith('161.'), 'its record was evicted, so it ran again');
});

test('with the default store, a record larger than 32 MiB (a raised maxBodyBytes, a body JSON escapes 6 to 1) is still kept and replayed', async () => {
  let runs = 0;
  const app = new Hono();
  const maxBodyBytes = 6 * 1024 * 1024;
  app.use('*', idempotency({ maxBodyBytes }));
  // Control characters: valid UTF-8, stored as text, each written \u0001 in the record's JSON (36 Mi characters).
  app.post('/dump', (c) => {
    runs++;
    return c.body('\u0001'.repeat(maxBodyBytes), 200, { 'content-type': 'application/octet-stream' });
  });
  await (await app.request('/dump', post('{}'))).arrayBuffer();
  const repeat = await app.request('/dump', post('{}'));
  assert.equal(repeat.headers.get(REPLAYED_HEADER), 'true', `handler runs: ${runs}`);
  assert.equal((await repeat.arrayBuffer()).byteLength, maxBodyBytes);
  assert.equal(runs, 1);
});

test('a record its store refuses for its size (a memoryStore whose maxBytes is under the response) is kept as not replayable: a repeat after the lease gets 409, never a second run', async () => {
  let runs = 0;
  const app = new Hono();
  // memoryStore's doc says to set maxBytes when values can be large; this one is under a 150 KB answer.
  app.use('*', idempotency({ store: memoryStore({ maxBytes: 100_000 }), leaseMs: 50 }));
  app.post('/report', (c) => c.text(`${++runs}`.padEnd(150_000, '.')));
  const first = await app.request('/report', post('{}'));
  assert.equal(first.status, 200);
  assert.equal((await first.text()).length, 150_000, 'the client still gets its answer');
  // The claim is no longer renewed: without a record it lapses, and the key would run again.
  await new Promise((resolve) => setTimeout(resolve, 120));
  const repeat = await app.request('/report', post('{}'));
  assert.equal(repeat.status, 409, `handler runs: ${runs}`);
  assert.equal(repeat.headers.get('x-should-retry'), 'false');
  assert.match(((await repeat.json()) as { detail: string }).detail, /too large to keep/);
  assert.equal(runs, 1);
});

test("behind hono's cors(), a replay names Idempotent-Replayed in Access-Control-Expose-Headers, so a page on another origin can read it", async () => {
  const app = new Hono();
  app.use('*', cors());
  app.use('*', idempotency());
  app.post('/orders', (c) => c.json({ id: 1 }, 201));
  await withApp(app, async ({ origin }) => {
    const init = { method: 'POST', headers: { origin: 'http://127.0.0.1:1', 'idempotency-key': '"k-cors"' } };
    await (await fetch(`${origin}/orders`, init)).text();
    const replay = await fetch(`${origin}/orders`, init);
    await replay.text();
    assert.equal(replay.headers.get(REPLAYED_HEADER), 'true');
    const names = (replay.headers.get('access-control-expose-headers') ?? '').toLowerCase().split(/\s*,\s*/);
    assert.ok(names.includes(REPLAYED_HEADER.toLowerCase()), `exposed: ${names}`);
  });
});

test('a path and query made of bare % (a hostile request) are keyed without a thrown decode per %: each such % is read as %25 at once', async () => {
  // 8531975 tried decodeURIComponent on each "%" that starts no escape, and on each lone
  // escape of a byte past ASCII, to learn that it is no UTF-8: a throw each, microseconds
  // apiece, about 2.7 s of CPU for a megabyte of "%" (the old regex took 0.8 s). Neither can
  // ever be UTF-8: no decode is tried. Counted, not timed: a loaded machine times nothing.
  let runs = 0;
  const app = new Hono();
  app.use('/orders/*', idempotency());
  app.post('/orders/:id', (c) => c.text(`run ${++runs}`, 201));
  const hostile = `${'%'.repeat(2000)}${'%ffx'.repeat(500)}`;
  await withApp(app, async ({ origin }) => {
    const decode = globalThis.decodeURIComponent;
    let calls = 0;
    globalThis.decodeURIComponent = (text) => {
      calls++;
      return decode(text);
    };
    let first: Response;
    let second: Response;
    try {
      first = await fetch(`${origin}/orders/${hostile}?to=${hostile}`, post('{}', KEY));
      second = await fetch(`${origin}/orders/${hostile}?to=${hostile}`, post('{}', KEY));
    } finally {
      globalThis.decodeURIComponent = decode;
    }
    assert.deepEqual([first.status, await first.text()], [201, 'run 1']);
    assert.deepEqual(
      [second.status, await second.text(), second.headers.get(REPLAYED_HEADER)],
      [201, 'run 1', 'true'],
    );
    assert.ok(calls < 50, `decodeURIComponent calls: ${calls}`);
  });
});

test("its answers in the handler's stead (409 while running, 422, 400) carry the headers set in front for this request (hono/request-id's X-Request-Id), over a real server", async () => {
  const release = gate();
  const entered = gate();
  const app = new Hono();
  app.use(requestId());
  app.use('/orders', idempotency());
  app.post('/orders', async (c) => {
    entered.open();
    await release.promise;
    return c.json({ id: 'order-1' }, 201);
  });
  await withApp(app, async ({ origin }) => {
    const send = (id: string, body: string, key = KEY): Promise<Response> =>
      fetch(`${origin}/orders`, post(body, key, { 'x-request-id': id }));
    // Refused before its body is read: first, so the server has read it by the time it closes.
    const malformed = await send('malformed', '{"item":"kettle"}', '"a", "b"');
    await problemOf(malformed);
    const answers: [number, string | null][] = [[malformed.status, malformed.headers.get('x-request-id')]];
    const first = send('first', '{"item":"kettle"}');
    await settlesWithin(entered.promise, 5000);
    try {
      for (const [id, body] of [
        ['running', '{"item":"kettle"}'],
        ['other', '{"item":"teapot"}'],
      ] as const) {
        const res = await send(id, body);
        await problemOf(res);
        answers.push([res.status, res.headers.get('x-request-id')]);
      }
    } finally {
      release.open();
    }
    assert.deepEqual(answers, [
      [400, 'malformed'],
      [409, 'running'],
      [422, 'other'],
    ]);
    const done = await first;
    await done.text();
    assert.deepEqual([done.status, done.headers.get('x-request-id')], [201, 'first']);
  });
});

test("a replay carries the repeat's own headers set in front (hono/request-id's X-Request-Id), not the first request's; the handler's own headers, one overriding a header set in front included, replay as they were, over a real server", async () => {
  let runs = 0;
  const app = new Hono();
  app.use(requestId());
  app.use(async (c, next) => {
    c.header('cache-control', 'no-store');
    await next();
  });
  app.use('/orders', idempotency());
  app.post('/orders', (c) => {
    runs++;
    c.header('cache-control', 'private, max-age=60');
    return c.json({ id: `order-${runs}` }, 201, { 'x-order-run': String(runs) });
  });
  await withApp(app, async ({ origin }) => {
    const send = async (id: string): Promise<Response> => {
      const res = await fetch(`${origin}/orders`, post('{"item":"kettle"}', KEY, { 'x-request-id': id }));
      await res.text();
      return res;
    };
    const first = await send('first');
    const repeat = await send('repeat');
    assert.equal(runs, 1);
    assert.equal(repeat.headers.get(REPLAYED_HEADER), 'true');
    const seen = (res: Response): (string | null)[] =>
      ['x-request-id', 'x-order-run', 'cache-control'].map((name) => res.headers.get(name));
    assert.deepEqual(seen(first), ['first', '1', 'private, max-age=60']);
    assert.deepEqual(seen(repeat), ['repeat', '1', 'private, max-age=60']);
  });
});

/**
 * A keyed order POSTed to `origin/orders/<path>` with `Accept-Language: language` and
 * `X-Request-Id: id`: its status, Idempotent-Replayed, Content-Language and X-Request-Id.
 */
async function sendOrder(
  origin: string,
  path: string,
  language: string,
  id: string,
): Promise<(string | null)[]> {
  const res = await fetch(
    `${origin}/orders/${path}`,
    post('{"item":"kettle"}', KEY, { 'accept-language': language, 'x-request-id': id }),
  );
  await res.text();
  return [
    String(res.status),
    res.headers.get(REPLAYED_HEADER),
    res.headers.get('content-language'),
    res.headers.get('x-request-id'),
  ];
}

test("a header the handler sets to the value a middleware in front set (c.header(), c.json()'s headers, a Response of its own, a proxied upstream's) replays as the handler set it; one only the front set is the repeat's own, over a real server", async () => {
  await withServer(
    always({ status: 201, body: '{"id":"up"}', headers: { 'content-language': 'en' } }),
    async (up) => {
      let runs = 0;
      const app = new Hono();
      app.use(requestId());
      // The front negotiates a language for the exchange; every handler here speaks English only.
      app.use(async (c, next) => {
        c.header('content-language', c.req.header('accept-language') === 'de' ? 'de' : 'en');
        await next();
      });
      app.use('/orders/*', idempotency());
      app.post('/orders/header', (c) => {
        runs++;
        c.header('content-language', 'en');
        return c.json({ id: 'header' }, 201);
      });
      app.post('/orders/json', (c) => {
        runs++;
        return c.json({ id: 'json' }, 201, { 'content-language': 'en' });
      });
      app.post('/orders/own', () => {
        runs++;
        return new Response('{"id":"own"}', {
          status: 201,
          headers: { 'content-type': 'application/json', 'content-language': 'en' },
        });
      });
      app.post('/orders/proxied', proxy(`${up.origin}/`, { policy: definePolicy({ name: 'up' }) }));
      app.post('/orders/front', (c) => {
        runs++;
        return c.json({ id: 'front' }, 201);
      });
      await withApp(app, async ({ origin }) => {
        const send = (path: string, language: string, id: string) => sendOrder(origin, path, language, id);
        for (const path of ['header', 'json', 'own', 'proxied']) {
          // Hono sends a Response of the handler's own without the headers set in front.
          const id = path === 'own' ? null : 'first';
          assert.deepEqual(await send(path, 'en', 'first'), ['201', null, 'en', id], path);
          assert.deepEqual(await send(path, 'de', 'repeat'), ['201', 'true', 'en', 'repeat'], path);
        }
        assert.deepEqual(await send('front', 'en', 'first'), ['201', null, 'en', 'first']);
        assert.deepEqual(
          await send('front', 'de', 'repeat'),
          ['201', 'true', 'de', 'repeat'],
          'set in front only',
        );
        assert.equal(runs, 4);
        assert.equal(up.requests.length, 1);
      });
    },
  );
});

test("a handler that removes one header set in front (c.header(name, undefined)) still has a replay carry the repeat's own X-Request-Id, not the first request's, over a real server", async () => {
  let runs = 0;
  const app = new Hono();
  app.use(requestId());
  app.use(async (c, next) => {
    c.header('x-served-by', 'edge-1');
    c.header('cache-control', 'no-store');
    await next();
  });
  app.use(idempotency());
  app.post('/orders', (c) => {
    runs++;
    c.header('cache-control', undefined);
    return c.json({ id: 'o1' }, 201);
  });
  await withApp(app, async ({ origin }) => {
    const send = async (id: string): Promise<(string | null)[]> => {
      const res = await fetch(`${origin}/orders`, post('{"item":"kettle"}', KEY, { 'x-request-id': id }));
      await res.text();
      return [String(res.status), res.headers.get(REPLAYED_HEADER), res.headers.get('x-request-id')];
    };
    assert.deepEqual(await send('first'), ['201', null, 'first']);
    assert.deepEqual(await send('repeat'), ['201', 'true', 'repeat'], "the repeat's own id");
    assert.equal(runs, 1);
  });
});

test('a replay keeps the Content-Type the first answer had, when a middleware in front set it and the handler answered c.body(bytes), over a real server', async () => {
  let runs = 0;
  const app = new Hono();
  app.use(async (c, next) => {
    c.header('content-type', 'text/html');
    await next();
  });
  app.use(idempotency());
  app.post('/pages', (c) => {
    runs++;
    return c.body(new TextEncoder().encode('<p>made</p>'), 201);
  });
  await withApp(app, async ({ origin }) => {
    const send = async (): Promise<(string | null)[]> => {
      const res = await fetch(`${origin}/pages`, post('{"item":"kettle"}'));
      return [
        String(res.status),
        res.headers.get(REPLAYED_HEADER),
        res.headers.get('content-type'),
        await res.text(),
      ];
    };
    assert.deepEqual(await send(), ['201', null, 'text/html', '<p>made</p>']);
    assert.deepEqual(await send(), ['201', 'true', 'text/html', '<p>made</p>'], 'the replay');
    assert.equal(runs, 1);
  });
});

test("a handler that echoes the request's id set in front (hono/request-id: c.header(), c.json()'s headers, a Response of its own) has a replay carry the repeat's own X-Request-Id, not the first request's, while another header it set to the value set in front (Content-Language) replays as set, over a real server", async () => {
  let runs = 0;
  const app = new Hono<{ Variables: { requestId: string } }>();
  app.use(requestId());
  // A header the front sets that the handler's own Response lacks: it is then taken as made without them.
  app.use(async (c, next) => {
    c.header('cache-control', 'no-store');
    c.header('content-language', c.req.header('accept-language') === 'de' ? 'de' : 'en');
    await next();
  });
  app.use('/orders/*', idempotency());
  app.post('/orders/header', (c) => {
    runs++;
    c.header('x-request-id', c.var.requestId);
    c.header('content-language', 'en');
    return c.json({ id: 'header' }, 201);
  });
  app.post('/orders/json', (c) => {
    runs++;
    return c.json({ id: 'json' }, 201, { 'x-request-id': c.var.requestId, 'content-language': 'en' });
  });
  app.post('/orders/own', (c) => {
    runs++;
    return new Response('{"id":"own"}', {
      status: 201,
      headers: {
        'content-type': 'application/json',
        'x-request-id': c.var.requestId,
        'content-language': 'en',
      },
    });
  });
  await withApp(app, async ({ origin }) => {
    for (const path of ['header', 'json', 'own']) {
      assert.deepEqual(await sendOrder(origin, path, 'en', 'first'), ['201', null, 'en', 'first'], path);
      assert.deepEqual(await sendOrder(origin, path, 'de', 'repeat'), ['201', 'true', 'en', 'repeat'], path);
    }
    assert.equal(runs, 3);
  });
});
