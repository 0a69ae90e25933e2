import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type Context, Hono } from 'hono';
import { cors } from 'hono/cors';
import { requestId } from 'hono/request-id';
import { proxy } from '../adapters/hono/proxy.ts';
import { rateLimit } from '../adapters/hono/rate-limit.ts';
import { definePolicy } from '../src/policy.ts';
import { memoryStore, type Store } from '../src/store.ts';
import { parseRateLimit, retryDelay } from '../src/timing.ts';
import { withApp } from './helpers/hono-server.ts';
import { always, withServer } from './helpers/server.ts';

/** A window-aligned instant (a multiple of 60 s) plus 43.5 s: 16.5 s left in a 60 s window. */
const WINDOW_START = 1_800_000_000_000;
const AT = WINDOW_START + 43_500;

/** A clock the test moves by hand, shared by the limiter and its store. */
function clock(start: number): { now: () => number; set: (t: number) => void } {
  let t = start;
  return { now: () => t, set: (next) => (t = next) };
}

function appWith(options: Parameters<typeof rateLimit>[0]): { app: Hono; ran: () => number } {
  let ran = 0;
  const app = new Hono();
  app.use(rateLimit(options));
  app.get('/', (c) => {
    ran++;
    return c.text('ok');
  });
  return { app, ran: () => ran };
}

/** Sends one request to `app` and consumes the body; resolves to the status. */
async function statusOf(app: Hono, init?: RequestInit): Promise<number> {
  const res = await app.request('/', init);
  await res.text();
  return res.status;
}

function from(ip: string): RequestInit {
  return { headers: { 'cf-connecting-ip': ip } };
}

/** `promise`, or a rejection naming `what` if it has not settled in 5 s: a hang guard, not a timing. */
async function within<T>(promise: T | Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within 5 s`)), 5000);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A store whose every call hangs, as one behind a network partition does. */
const hangingStore = {
  increment: () => new Promise<number>(() => {}),
} as unknown as Store;

test('rateLimit sends RateLimit-Policy and RateLimit on every passed response, counting down r', async () => {
  const time = clock(AT);
  const { app } = appWith({
    limit: 3,
    windowMs: 60_000,
    trustedHeader: 'cf-connecting-ip',
    now: time.now,
    store: memoryStore({ now: time.now }),
  });
  for (const remaining of [2, 1, 0]) {
    const res = await app.request('/', from('10.0.0.1'));
    assert.equal(res.status, 200);
    assert.equal(await res.text(), 'ok');
    assert.equal(res.headers.get('ratelimit-policy'), '"3-per-60s";q=3;w=60');
    assert.equal(res.headers.get('ratelimit'), `"3-per-60s";r=${remaining};t=17`);
  }
});

test('the (limit+1)-th request in a window gets a 429 problem with Retry-After = the seconds left, rounded up', async () => {
  const time = clock(AT);
  const { app, ran } = appWith({
    limit: 2,
    windowMs: 60_000,
    trustedHeader: 'cf-connecting-ip',
    now: time.now,
    store: memoryStore({ now: time.now }),
  });
  for (let i = 0; i < 2; i++) await statusOf(app, from('10.0.0.1'));
  const res = await app.request('/', from('10.0.0.1'));
  assert.equal(res.status, 429);
  assert.equal(res.headers.get('retry-after'), '17');
  assert.equal(res.headers.get('ratelimit'), '"2-per-60s";r=0;t=17');
  assert.equal(res.headers.get('ratelimit-policy'), '"2-per-60s";q=2;w=60');
  assert.equal(res.headers.get('content-type'), 'application/problem+json');
  const body = (await res.json()) as Record<string, unknown>;
  assert.equal(body.status, 429);
  assert.equal(body.title, 'Too Many Requests');
  assert.equal(ran(), 2, 'the handler did not run for the rejected request');
});

test("retryDelay() reads back exactly the 429's wait, and parseRateLimit() its fields", async () => {
  const time = clock(WINDOW_START + 59_001);
  const { app } = appWith({
    limit: 1,
    windowMs: 60_000,
    trustedHeader: 'cf-connecting-ip',
    policyName: 'api',
    now: time.now,
    store: memoryStore({ now: time.now }),
  });
  await statusOf(app, from('10.0.0.1'));
  const res = await app.request('/', from('10.0.0.1'));
  await res.body?.cancel();
  assert.equal(res.status, 429);
  assert.equal(res.headers.get('retry-after'), '1');
  assert.equal(retryDelay(res.headers, time.now()), 1000);
  // Without Retry-After, the RateLimit field alone says the same.
  const onlyField = new Headers(res.headers);
  onlyField.delete('retry-after');
  assert.equal(retryDelay(onlyField, time.now()), 1000);
  assert.deepEqual(parseRateLimit(res.headers), {
    limits: [{ policy: 'api', remaining: 0, resetSeconds: 1 }],
    policies: [{ policy: 'api', quota: 1, windowSeconds: 60 }],
  });
});

test('a new window restores the quota', async () => {
  const time = clock(AT);
  const { app } = appWith({
    limit: 1,
    windowMs: 60_000,
    trustedHeader: 'cf-connecting-ip',
    now: time.now,
    store: memoryStore({ now: time.now }),
  });
  assert.equal(await statusOf(app, from('10.0.0.1')), 200);
  assert.equal(await statusOf(app, from('10.0.0.1')), 429);
  time.set(WINDOW_START + 60_000);
  const res = await app.request('/', from('10.0.0.1'));
  await res.text();
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('ratelimit'), '"1-per-60s";r=0;t=60');
});

test('each client id has its own bucket', async () => {
  const { app } = appWith({ limit: 1, windowMs: 60_000, trustedHeader: 'cf-connecting-ip' });
  assert.equal(await statusOf(app, from('10.0.0.1')), 200);
  assert.equal(await statusOf(app, from('10.0.0.1')), 429);
  const other = await app.request('/', from('10.0.0.2'));
  await other.text();
  assert.equal(other.status, 200);
  assert.match(other.headers.get('ratelimit') ?? '', /^"1-per-60s";r=0;t=\d+$/);
});

test('a list header such as x-forwarded-for is keyed by its first entry', async () => {
  const { app } = appWith({ limit: 1, windowMs: 60_000, trustedHeader: 'X-Forwarded-For' });
  assert.equal(await statusOf(app, { headers: { 'x-forwarded-for': '203.0.113.7, 10.0.0.1' } }), 200);
  const again = await app.request('/', { headers: { 'x-forwarded-for': ' 203.0.113.7 ' } });
  assert.equal(again.status, 429);
  await again.body?.cancel();
});

test('a trusted header holding IPv6 addresses is keyed by their /64: a client cannot take a fresh bucket per address of its own network', async () => {
  // Every subscriber gets at least a /64 (2^64 addresses): keyed by address, one client
  // could send limit requests from each.
  const { app } = appWith({ limit: 1, windowMs: 60_000, trustedHeader: 'cf-connecting-ip' });
  assert.equal(await statusOf(app, from('2001:db8:1:2::1')), 200);
  for (const sameNetwork of ['2001:db8:1:2:ffff::9', '2001:DB8:1:2:0:0:0:1', '2001:0db8:0001:0002::']) {
    assert.equal(await statusOf(app, from(sameNetwork)), 429, sameNetwork);
  }
  assert.equal(await statusOf(app, from('2001:db8:1:3::1')), 200, 'the next /64 is another client');
  // Zero groups, written with or without `::`, are the same network.
  assert.equal(await statusOf(app, from('2001:db8::1')), 200);
  assert.equal(await statusOf(app, from('2001:db8:0:0:1::')), 429);
  assert.equal(await statusOf(app, from('::1')), 200);
  // IPv4 and IPv4-mapped addresses stay whole: one bucket per address.
  for (const ip of [
    '192.0.2.1',
    '192.0.2.2',
    '::ffff:192.0.2.1',
    '::ffff:192.0.2.2',
    '::ffff:c000:203',
    '::2',
  ]) {
    assert.equal(await statusOf(app, from(ip)), 200, ip);
  }
});

/** Runs `check` on a real server with a limit of 1 trusting X-Forwarded-For; `status(value)` sends one request forwarded for `value`. */
async function withForwardedFor(
  check: (status: (value: string) => Promise<number>) => Promise<void>,
): Promise<void> {
  const { app } = appWith({ limit: 1, windowMs: 60_000, trustedHeader: 'x-forwarded-for' });
  await withApp(app, async (server) => {
    await check(async (value) => {
      const res = await fetch(server.origin, { headers: { 'x-forwarded-for': value } });
      await res.body?.cancel();
      return res.status;
    });
  });
}

test('a trusted header that also carries the client port (Azure Application Gateway: 203.0.113.7:50912) is keyed without it: a new connection is no fresh bucket', async () => {
  // The port is the client's source port, new on every connection: keyed with it, a
  // client would get a fresh bucket per connection.
  await withForwardedFor(async (status) => {
    assert.equal(await status('203.0.113.7:50912'), 200);
    for (const again of ['203.0.113.7:50913', '203.0.113.7', '203.0.113.7:1, 10.0.0.1']) {
      assert.equal(await status(again), 429, again);
    }
    // IPv6 with a port is bracketed; it counts by its /64 as without one.
    assert.equal(await status('[2001:db8:1:2::1]:50912'), 200);
    for (const again of ['[2001:db8:1:2::9]:50913', '[2001:db8:1:2::1]', '2001:db8:1:2::7']) {
      assert.equal(await status(again), 429, again);
    }
    // Unbracketed IPv6 and IPv4-mapped addresses keep every group: no port is read off them.
    for (const other of ['::2', '::3', '::ffff:192.0.2.1', '::ffff:192.0.2.2', '203.0.113.8:50912']) {
      assert.equal(await status(other), 200, other);
    }
  });
});

test('an IPv4-mapped or NAT64 address with the client port after it (::ffff:203.0.113.7:50912, as a dual-stack Node edge writes its remoteAddress and remotePort) is keyed without the port', async () => {
  // An IPv4 address ends IPv6 text (RFC 4291 §2.2), so a colon after one starts a port,
  // new on every connection: keyed with it, a client would get a fresh bucket per connection.
  await withForwardedFor(async (status) => {
    assert.equal(await status('::ffff:203.0.113.7:50912'), 200);
    for (const again of ['::ffff:203.0.113.7:50913', '::ffff:203.0.113.7', '[::ffff:203.0.113.7]:1']) {
      assert.equal(await status(again), 429, again);
    }
    assert.equal(await status('64:ff9b::198.51.100.9:443'), 200);
    assert.equal(await status('64:ff9b::198.51.100.9:444'), 429);
    // Still one bucket per address, and an unbracketed IPv6 ending in digits keeps them:
    // 2001:db8::1:8080 is an address (of 2001:db8::/64), not 2001:db8::1 and a port.
    assert.equal(await status('::ffff:203.0.113.8:50912'), 200);
    assert.equal(await status('2001:db8::1:8080'), 200);
    assert.equal(await status('2001:db8::2'), 429);
  });
});

test('a key function names the client', async () => {
  const { app } = appWith({ limit: 1, windowMs: 60_000, key: (c) => c.req.header('x-user') });
  assert.equal(await statusOf(app, { headers: { 'x-user': 'ada' } }), 200);
  const second = await app.request('/', { headers: { 'x-user': 'ada' } });
  assert.equal(second.status, 429);
  await second.body?.cancel();
  assert.equal(await statusOf(app, { headers: { 'x-user': 'grace' } }), 200);
});

test('a request without the trusted header gets a 400 problem, not a shared bucket', async () => {
  const { app, ran } = appWith({ limit: 100, windowMs: 60_000, trustedHeader: 'cf-connecting-ip' });
  const res = await app.request('/');
  assert.equal(res.status, 400);
  assert.equal(res.headers.get('content-type'), 'application/problem+json');
  const body = (await res.json()) as Record<string, unknown>;
  assert.equal(body.detail, 'no usable client identity header "cf-connecting-ip"');
  assert.equal(ran(), 0);
});

test('a trusted header over 256 characters is refused as unusable, not called missing', async () => {
  const { app, ran } = appWith({ limit: 100, windowMs: 60_000, trustedHeader: 'x-real-ip' });
  const res = await app.request('/', { headers: { 'x-real-ip': 'a'.repeat(257) } });
  assert.equal(res.status, 400);
  const body = (await res.json()) as Record<string, unknown>;
  assert.equal(body.detail, 'no usable client identity header "x-real-ip"');
  assert.equal(await statusOf(app, { headers: { 'x-real-ip': 'a'.repeat(256) } }), 200);
  assert.equal(ran(), 1);
});

test('a key function that returns no id gets a 400 problem', async () => {
  const { app, ran } = appWith({ limit: 100, windowMs: 60_000, key: () => undefined });
  const res = await app.request('/');
  await res.body?.cancel();
  assert.equal(res.status, 400);
  assert.equal(ran(), 0);
});

test("a key function that returns something other than a string (a numeric user id) is the app's TypeError, naming what it got, not a 400 to every client; null is no id (400)", async () => {
  const numeric = new Hono();
  let seen: unknown;
  numeric.use(rateLimit({ limit: 100, windowMs: 60_000, key: (() => 42) as never }));
  numeric.get('/', (c) => c.text('ok'));
  numeric.onError((error, c) => {
    seen = error;
    return c.text('app error', 500);
  });
  const res = await numeric.request('/');
  await res.body?.cancel();
  assert.equal(res.status, 500, 'the app answers its own bug, not "no client identity" to the client');
  assert.ok(seen instanceof TypeError, `onError got ${String(seen)}`);
  assert.match(seen.message, /rateLimit\(\): key\(\) must return a string \(got number\)/);
  const { app, ran } = appWith({ limit: 100, windowMs: 60_000, key: (() => null) as never });
  assert.equal(await statusOf(app), 400);
  assert.equal(ran(), 0);
});

test('rateLimit() without key or trustedHeader throws a TypeError saying one is required (no silent global bucket); with both, saying not both', () => {
  // Neither was given: the message said "…, not both".
  assert.throws(
    () => rateLimit({ limit: 10, windowMs: 60_000 }),
    (e: unknown) =>
      e instanceof TypeError &&
      /key \(a function of the request\) or trustedHeader \(e\.g\. "cf-connecting-ip"\) is required$/.test(
        e.message,
      ) &&
      !/both/.test(e.message),
  );
  assert.throws(
    () => rateLimit({ limit: 10, windowMs: 60_000, key: () => 'x', trustedHeader: 'x-real-ip' }),
    (e: unknown) => e instanceof TypeError && /set key or trustedHeader, not both$/.test(e.message),
  );
});

test('rateLimit() rejects bad options with a TypeError naming each one', () => {
  assert.throws(
    () =>
      rateLimit({
        limit: 0,
        windowMs: 1500,
        trustedHeader: 'bad header',
        policyName: 'ü',
      } as Parameters<typeof rateLimit>[0]),
    (e: unknown) =>
      e instanceof TypeError &&
      e.message.includes('rateLimit().limit') &&
      e.message.includes('rateLimit().windowMs: must be a whole number of seconds') &&
      e.message.includes('rateLimit().trustedHeader') &&
      e.message.includes('rateLimit().policyName'),
  );
  assert.throws(
    () => rateLimit({ limit: 1, windowMs: 60_000, trustedHeader: 'x', bogus: 1 } as never),
    (e: unknown) => e instanceof TypeError && /unknown option "bogus"/.test(e.message),
  );
});

test('a failing store lets requests through without headers by default (fail open)', async () => {
  const broken = {
    increment: () => Promise.reject(new Error('store down')),
  } as unknown as Store;
  const { app, ran } = appWith({
    limit: 1,
    windowMs: 60_000,
    trustedHeader: 'cf-connecting-ip',
    store: broken,
  });
  const res = await app.request('/', from('10.0.0.1'));
  assert.equal(res.status, 200);
  assert.equal(await res.text(), 'ok');
  assert.equal(res.headers.get('ratelimit'), null);
  assert.equal(ran(), 1);
});

test("onStoreError: 'closed' answers 503 with Retry-After and x-should-retry when the store fails", async () => {
  const broken = {
    increment: () => Promise.reject(new Error('store down')),
  } as unknown as Store;
  const { app, ran } = appWith({
    limit: 1,
    windowMs: 60_000,
    trustedHeader: 'cf-connecting-ip',
    store: broken,
    onStoreError: 'closed',
  });
  const res = await app.request('/', from('10.0.0.1'));
  await res.body?.cancel();
  assert.equal(res.status, 503);
  assert.equal(res.headers.get('retry-after'), '1');
  assert.equal(res.headers.get('x-should-retry'), 'true');
  assert.equal(ran(), 0);
});

test('a store that never answers lets the request through after 1 s by default (fail open), not hang it', async () => {
  const { app, ran } = appWith({
    limit: 1,
    windowMs: 60_000,
    trustedHeader: 'cf-connecting-ip',
    store: hangingStore,
  });
  const started = Date.now();
  const res = await within(app.request('/', from('10.0.0.1')), 'the answer');
  const waited = Date.now() - started;
  assert.equal(res.status, 200);
  assert.equal(await res.text(), 'ok');
  assert.equal(res.headers.get('ratelimit'), null);
  assert.equal(ran(), 1);
  assert.ok(waited >= 900, `answered after ${waited} ms, before the store's 1 s`);
});

test("with onStoreError: 'closed', a store that takes over storeTimeoutMs gets the store-down 503", async () => {
  const { app, ran } = appWith({
    limit: 1,
    windowMs: 60_000,
    trustedHeader: 'cf-connecting-ip',
    store: hangingStore,
    onStoreError: 'closed',
    storeTimeoutMs: 50,
  });
  const res = await within(app.request('/', from('10.0.0.1')), 'the answer');
  await res.body?.cancel();
  assert.equal(res.status, 503);
  assert.equal(res.headers.get('retry-after'), '1');
  assert.equal(res.headers.get('x-should-retry'), 'true');
  assert.equal(ran(), 0);
});

test('a store that answers something other than a count is a store failure, never a RateLimit field no client can parse', async () => {
  // A wrapper that hands back a reply object, null, NaN or a fraction: r must be an
  // sf-integer, and the quota is unknown.
  for (const answer of [Number.NaN, 'abc', { ok: 1 }, [1, 2], null, 0, 1.5, -1]) {
    const store = { increment: async () => answer } as unknown as Store;
    for (const onStoreError of ['open', 'closed'] as const) {
      const { app, ran } = appWith({ limit: 2, windowMs: 60_000, key: () => 'ada', store, onStoreError });
      const res = await app.request('/');
      await res.body?.cancel();
      const what = `${JSON.stringify(answer)}, ${onStoreError}`;
      assert.equal(res.status, onStoreError === 'open' ? 200 : 503, what);
      assert.equal(res.headers.get('ratelimit'), null, what);
      assert.equal(ran(), onStoreError === 'open' ? 1 : 0, what);
    }
  }
  // A count as text (a Redis reply) is still a count.
  const text = { increment: async () => '2' } as unknown as Store;
  const { app } = appWith({ limit: 2, windowMs: 60_000, key: () => 'ada', store: text });
  const res = await app.request('/');
  await res.text();
  assert.match(res.headers.get('ratelimit') ?? '', /^"2-per-60s";r=0;t=\d+$/);
});

test('rate-limit headers reach error responses and responses with immutable headers', async () => {
  const app = new Hono();
  app.use(rateLimit({ limit: 5, windowMs: 60_000, trustedHeader: 'cf-connecting-ip' }));
  app.get('/boom', () => {
    throw new Error('boom');
  });
  app.get('/redirect', () => Response.redirect('http://example.test/elsewhere', 302));
  app.onError((_err, c) => c.text('failed', 500));
  const failed = await app.request('/boom', from('10.0.0.1'));
  assert.equal(failed.status, 500);
  assert.equal(await failed.text(), 'failed');
  assert.match(failed.headers.get('ratelimit') ?? '', /^"5-per-60s";r=4;t=\d+$/);
  const moved = await app.request('/redirect', from('10.0.0.1'));
  await moved.body?.cancel();
  assert.equal(moved.status, 302);
  assert.match(moved.headers.get('ratelimit') ?? '', /^"5-per-60s";r=3;t=\d+$/);
});

test('over a real server, the third request of two allowed gets 429 with both rate-limit headers', async () => {
  const { app } = appWith({ limit: 2, windowMs: 60_000, key: () => 'everyone-in-this-test' });
  await withApp(app, async (server) => {
    const statuses: number[] = [];
    let last: Response | undefined;
    for (let i = 0; i < 3; i++) {
      last = await fetch(server.origin);
      statuses.push(last.status);
      assert.match(last.headers.get('ratelimit-policy') ?? '', /^"2-per-60s";q=2;w=60$/);
      if (i < 2) await last.text();
    }
    assert.deepEqual(statuses, [200, 200, 429]);
    const res = last as Response;
    const t = Number(/t=(\d+)$/.exec(res.headers.get('ratelimit') ?? '')?.[1]);
    assert.ok(t >= 1 && t <= 60, `t=${t}`);
    assert.equal(res.headers.get('retry-after'), String(t));
    assert.equal(res.headers.get('ratelimit'), `"2-per-60s";r=0;t=${t}`);
    assert.equal(retryDelay(res.headers), t * 1000);
    assert.equal(((await res.json()) as { status: number }).status, 429);
  });
});

test('a breakwater client reads the 200 that used up the quota and waits the advertised time: the server never sends a 429', async () => {
  // Keep the first two requests inside one 1 s window.
  const intoWindow = Date.now() % 1000;
  if (intoWindow > 800) await new Promise((resolve) => setTimeout(resolve, 1000 - intoWindow + 5));

  const log: { status: number; at: number; rateLimit: string | null }[] = [];
  const app = new Hono();
  app.use(async (c, next) => {
    const at = Date.now();
    await next();
    log.push({ status: c.res.status, at, rateLimit: c.res.headers.get('ratelimit') });
  });
  app.use(rateLimit({ limit: 2, windowMs: 1000, key: () => 'agent' }));
  app.get('/', (c) => c.text('ok'));

  await withApp(app, async (server) => {
    const fetch = definePolicy({ retry: { attempts: 3 } }).fetch();
    for (let i = 0; i < 3; i++) {
      const res = await fetch(server.origin);
      assert.equal(res.status, 200);
      assert.equal(await res.text(), 'ok');
    }
  });
  assert.deepEqual(
    log.map((entry) => entry.status),
    [200, 200, 200],
  );
  const [, lastAllowed, next] = log;
  // The second 200 says the quota is used up until the window ends, in whole seconds.
  const t = Number(/^"2-per-1s";r=0;t=(\d+)$/.exec(lastAllowed?.rateLimit ?? '')?.[1]);
  assert.equal(t, 1, `RateLimit: ${lastAllowed?.rateLimit}`);
  const waited = (next?.at ?? 0) - (lastAllowed?.at ?? 0);
  assert.ok(Math.abs(waited - t * 1000) <= 100, `waited ${waited} ms for ${t * 1000} ms`);
});

test('stacked limiters each report their quota as one member of RateLimit and RateLimit-Policy', async () => {
  const time = clock(AT);
  const store = memoryStore({ now: time.now });
  const app = new Hono();
  app.use(
    rateLimit({ limit: 5, windowMs: 10_000, key: () => 'ada', policyName: 'burst', now: time.now, store }),
  );
  app.use(
    rateLimit({ limit: 1, windowMs: 60_000, key: () => 'ada', policyName: 'minute', now: time.now, store }),
  );
  app.get('/', (c) => c.text('ok'));

  const first = await app.request('/');
  assert.equal(first.status, 200);
  await first.text();
  assert.deepEqual(parseRateLimit(first.headers), {
    limits: [
      { policy: 'minute', remaining: 0, resetSeconds: 17 },
      { policy: 'burst', remaining: 4, resetSeconds: 7 },
    ],
    policies: [
      { policy: 'minute', quota: 1, windowSeconds: 60 },
      { policy: 'burst', quota: 5, windowSeconds: 10 },
    ],
  });
  // The 200 that used up the minute's quota says so: a client waits 17 s, not 0.
  assert.equal(retryDelay(first.headers, time.now()), 17_000);

  const second = await app.request('/');
  await second.body?.cancel();
  assert.equal(second.status, 429);
  assert.equal(second.headers.get('retry-after'), '17');
  assert.equal(second.headers.get('ratelimit'), '"minute";r=0;t=17, "burst";r=3;t=7');
});

test('limiters sharing a store never share a bucket, whatever colons their names and ids hold', async () => {
  const store = memoryStore();
  const app = new Hono();
  app.use(
    '/a',
    rateLimit({ limit: 1, windowMs: 60_000, key: (c) => c.req.header('x-user'), policyName: 'api', store }),
  );
  app.use(
    '/b',
    rateLimit({
      limit: 1,
      windowMs: 60_000,
      key: (c) => c.req.header('x-user'),
      policyName: 'api:admin',
      store,
    }),
  );
  app.get('/:route', (c) => c.text('ok'));
  // "api" + "admin:eve" and "api:admin" + "eve" are different buckets.
  const a = await app.request('/a', { headers: { 'x-user': 'admin:eve' } });
  await a.text();
  assert.equal(a.status, 200);
  const b = await app.request('/b', { headers: { 'x-user': 'eve' } });
  await b.text();
  assert.equal(b.status, 200);
});

test('stacked limiters left unnamed each get a name of their own, from their quota, and count apart in one store', async () => {
  // 3.5 s into a minute: both windows (10 s and 60 s) started at WINDOW_START, so
  // only the names keep the two counters apart.
  const time = clock(WINDOW_START + 3_500);
  const store = memoryStore({ now: time.now });
  const app = new Hono();
  app.use(rateLimit({ limit: 5, windowMs: 10_000, key: () => 'ada', now: time.now, store }));
  app.use(rateLimit({ limit: 1, windowMs: 60_000, key: () => 'ada', now: time.now, store }));
  app.get('/', (c) => c.text('ok'));

  const first = await app.request('/');
  assert.equal(first.status, 200);
  await first.text();
  // Two members a client can tell apart (the draft: a name identifies its policy),
  // and each counter counted one request, not two.
  assert.equal(first.headers.get('ratelimit-policy'), '"1-per-60s";q=1;w=60, "5-per-10s";q=5;w=10');
  assert.equal(first.headers.get('ratelimit'), '"1-per-60s";r=0;t=57, "5-per-10s";r=4;t=7');
  assert.deepEqual(
    parseRateLimit(first.headers)?.limits.map((limit) => limit.policy),
    ['1-per-60s', '5-per-10s'],
  );
});

test('a window computed in floating point (0.29 h) is taken as its whole seconds: its name, w and windows are whole', async () => {
  // 0.29 * 3_600_000 is 1043999.9999999999: zod's multipleOf allows for the rounding.
  const windowMs = 0.29 * 3_600_000;
  const time = clock(WINDOW_START + 43_500);
  const { app } = appWith({ limit: 5, windowMs, key: () => 'ada', now: time.now });
  const res = await app.request('/');
  await res.text();
  assert.equal(res.headers.get('ratelimit-policy'), '"5-per-1044s";q=5;w=1044');
  assert.match(res.headers.get('ratelimit') ?? '', /^"5-per-1044s";r=4;t=\d+$/);
  assert.deepEqual(parseRateLimit(res.headers)?.policies, [
    { policy: '5-per-1044s', quota: 5, windowSeconds: 1044 },
  ]);
});

test('a limit past the largest structured-field Integer is refused: q and r would make RateLimit fields no client can parse', async () => {
  // 999,999,999,999,999 is the largest sf-integer (RFC 9651 §3.3.1): it is sent as q and r.
  const { app } = appWith({ limit: 999_999_999_999_999, windowMs: 60_000, key: () => 'ada' });
  const res = await app.request('/');
  await res.text();
  assert.equal(parseRateLimit(res.headers)?.policies[0]?.quota, 999_999_999_999_999);
  assert.throws(
    () => rateLimit({ limit: Number.MAX_SAFE_INTEGER, windowMs: 60_000, key: () => 'ada' }),
    (e: unknown) => e instanceof TypeError && /rateLimit\(\)\.limit: .*999999999999999/.test(e.message),
  );
});

/** A memory store that records every key it is asked to count. */
function recordingStore(): { store: Store; keys: string[] } {
  const inner = memoryStore();
  const keys: string[] = [];
  const store = {
    ...inner,
    increment: (key: string, by?: number, ttlMs?: number) => {
      keys.push(key);
      return inner.increment(key, by, ttlMs);
    },
  } as Store;
  return { store, keys };
}

test('a key function returning a 1 MB id (a header the client controls) stores a short fixed-length key, not the megabyte', async () => {
  const { store, keys } = recordingStore();
  const { app } = appWith({ limit: 5, windowMs: 60_000, key: (c) => c.req.header('x-api-key'), store });
  const huge = 'k'.repeat(1024 * 1024);
  assert.equal(await statusOf(app, { headers: { 'x-api-key': huge } }), 200);
  assert.equal(await statusOf(app, { headers: { 'x-api-key': `${huge.slice(1)}j` } }), 200);
  assert.equal(keys.length, 2);
  // The digest is the same length whatever the id's: the store never holds the id itself.
  assert.equal(keys[0]?.length, keys[1]?.length);
  for (const key of keys) assert.ok(key.length < 200, `stored key is ${key.length} characters`);
  assert.notEqual(keys[0], keys[1]);
});

test('distinct long ids get separate buckets, even ones differing only in their last character or in a lone surrogate', async () => {
  const { app } = appWith({ limit: 1, windowMs: 60_000, key: (c) => c.req.header('x-api-key') });
  const long = 'a'.repeat(10_000);
  for (const id of [`${long}1`, `${long}2`, `1${long}`]) {
    assert.equal(await statusOf(app, { headers: { 'x-api-key': id } }), 200, id.slice(0, 3));
  }
  const again = await app.request('/', { headers: { 'x-api-key': `${long}2` } });
  await again.body?.cancel();
  assert.equal(again.status, 429);
  // UTF-8 writes every lone surrogate as U+FFFD; two ids that differ only there are still two clients.
  let id = '\ud800';
  const lone = appWith({ limit: 1, windowMs: 60_000, key: () => `${long}${id}` }).app;
  assert.equal(await statusOf(lone), 200);
  id = '\ud801';
  assert.equal(await statusOf(lone), 200);
  assert.equal(await statusOf(lone), 429);
});

test('a short id is stored as given, readable in the store; an id of digest form is never mistaken for a long id', async () => {
  const { store, keys } = recordingStore();
  let id = 'user-42';
  const { app } = appWith({ limit: 1, windowMs: 60_000, key: () => id, store });
  assert.equal(await statusOf(app), 200);
  assert.match(keys[0] ?? '', /:user-42:\d+$/);
  // A long id stands in the store for its digest; a client that sends that digest's
  // text as its id is still another client.
  id = 'x'.repeat(1000);
  assert.equal(await statusOf(app), 200);
  id = (keys[1] ?? '').split(':').slice(2, -1).join(':');
  assert.ok(id.length > 0, 'id.length > 0');
  assert.equal(await statusOf(app), 200);
  assert.notEqual(keys[2], keys[1]);
});

test("a Retry-After shorter than a used-up quota's reset (a stacked limiter's shorter window) is raised to it: a client that waits as told is not refused again", async () => {
  // A clock 100 ms into a 2 s window: the outer quota's last request leaves it used up
  // for 2 s, while the inner 1 s limiter refuses the same request for 1 s only.
  const offset = (Date.now() % 2000) - 100;
  const now = (): number => Date.now() - offset;
  const store = memoryStore({ now });
  const log: { status: number; retryAfter: string | null; rateLimit: string | null }[] = [];
  const app = new Hono();
  app.use(async (c, next) => {
    await next();
    log.push({
      status: c.res.status,
      retryAfter: c.res.headers.get('retry-after'),
      rateLimit: c.res.headers.get('ratelimit'),
    });
  });
  app.use(rateLimit({ limit: 2, windowMs: 2000, key: () => 'agent', policyName: 'two', now, store }));
  app.use(rateLimit({ limit: 1, windowMs: 1000, key: () => 'agent', policyName: 'one', now, store }));
  app.get('/', (c) => c.text('ok'));

  await withApp(app, async (server) => {
    const fetch = definePolicy({ retry: { attempts: 3 } }).fetch();
    const statuses = await Promise.all(
      [0, 1].map(async () => {
        const res = await fetch(server.origin);
        await res.text();
        return res.status;
      }),
    );
    assert.deepEqual(statuses, [200, 200]);
  });
  // The refusal names the longer wait, as its RateLimit field does: "two" is used up for 2 s.
  const refusals = log.filter((entry) => entry.status === 429);
  assert.deepEqual(refusals, [{ status: 429, retryAfter: '2', rateLimit: '"one";r=0;t=1, "two";r=0;t=2' }]);
  assert.equal(log.length, 3, 'the client came back once, after both quotas reset');
});

test("RateLimit's t counts from when the answer is sent: a handler that took 10 s (a model call) does not send its client away 10 s too long", async () => {
  const time = clock(AT); // 16.5 s left in the window when the request comes in
  const app = new Hono();
  app.use(
    rateLimit({
      limit: 1,
      windowMs: 60_000,
      key: () => 'agent',
      now: time.now,
      store: memoryStore({ now: time.now }),
    }),
  );
  app.get('/', (c) => {
    time.set(time.now() + 10_000);
    return c.text('ok');
  });
  await withApp(app, async (server) => {
    const res = await fetch(server.origin);
    await res.text();
    // 6.5 s are left when it is sent: a client waiting 17 s would wait 10 s for nothing.
    assert.equal(res.headers.get('ratelimit'), '"1-per-60s";r=0;t=7');
    assert.equal(retryDelay(res.headers), 7000);
    // A handler that outlasts the window answers after the reset: nothing to wait for.
    time.set(WINDOW_START + 60_000 + 59_000);
    const late = await fetch(server.origin);
    await late.text();
    assert.equal(late.headers.get('ratelimit'), '"1-per-60s";r=0;t=0');
    assert.equal(retryDelay(late.headers), 0);
  });
});

test("a shorter wait a client reads before Retry-After's delay-seconds is raised too: a proxied upstream's retry-after-ms, a 503's HTTP-date", async () => {
  const time = clock(AT); // 16.5 s left in the window: t=17
  await withServer(
    // An OpenAI-style upstream's refusal; proxy() passes retry-after-ms on beside Retry-After.
    always({ status: 429, headers: { 'retry-after': '1', 'retry-after-ms': '1000' }, body: 'slow down' }),
    async (up) => {
      const app = new Hono();
      // One quota of 1 per path, so each path's only request uses its quota up.
      const key = (c: Context): string => new URL(c.req.url).pathname;
      app.use(rateLimit({ limit: 1, windowMs: 60_000, key, now: time.now, store: memoryStore() }));
      app.post('/chat', proxy(`${up.origin}/chat`, { policy: definePolicy({ retry: { attempts: 1 } }) }));
      // A maintenance answer that names its end as a date, 2 s from now.
      app.get('/', (c) =>
        c.text('back soon', 503, { 'retry-after': new Date(time.now() + 2000).toUTCString() }),
      );
      await withApp(app, async (server) => {
        // Used up for 17 s: a client that reads either field first must not come back sooner.
        const proxied = await fetch(`${server.origin}/chat`, { method: 'POST', body: '{}' });
        await proxied.text();
        assert.equal(proxied.status, 429);
        assert.equal(retryDelay(proxied.headers, time.now()), 17_000);
        const maintenance = await fetch(server.origin);
        await maintenance.text();
        assert.equal(maintenance.status, 503);
        assert.equal(retryDelay(maintenance.headers, time.now()), 17_000);
      });
    },
  );
});

/** The names in a response's `Access-Control-Expose-Headers`, lower case. */
function exposed(response: Response): string[] {
  return (response.headers.get('access-control-expose-headers') ?? '')
    .toLowerCase()
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '');
}

test("behind hono's cors(), the 429 and the answers before it name Retry-After and RateLimit in Access-Control-Expose-Headers, once, so a page on another origin can read them", async () => {
  const app = new Hono();
  app.use('*', cors({ exposeHeaders: ['X-Request-Id'] }));
  // Stacked: each would add the names; they are listed once.
  app.use('*', rateLimit({ limit: 5, windowMs: 60_000, key: () => 'k' }));
  app.use('*', rateLimit({ limit: 1, windowMs: 60_000, key: () => 'k' }));
  app.get('/', (c) => c.text('ok'));
  await withApp(app, async ({ origin }) => {
    const headers = { origin: 'http://127.0.0.1:1' };
    const ok = await fetch(origin, { headers });
    await ok.text();
    const refused = await fetch(origin, { headers });
    await refused.text();
    assert.equal(ok.status, 200);
    assert.equal(refused.status, 429);
    for (const response of [ok, refused]) {
      const names = exposed(response);
      for (const name of ['x-request-id', 'retry-after', 'ratelimit', 'ratelimit-policy']) {
        assert.equal(names.filter((n) => n === name).length, 1, `${response.status}: ${name} in ${names}`);
      }
    }
  });
});

test('a response no other origin may read (no cors(), or an origin it refused) gets no Access-Control-Expose-Headers', async () => {
  const app = new Hono();
  app.use('/cors/*', cors({ origin: 'https://ui.example' }));
  app.use('*', rateLimit({ limit: 1, windowMs: 60_000, key: () => 'k' }));
  app.get('*', (c) => c.text('ok'));
  await withApp(app, async ({ origin }) => {
    for (const path of ['/', '/cors/', '/cors/']) {
      const response = await fetch(`${origin}${path}`, { headers: { origin: 'https://elsewhere.example' } });
      await response.text();
      assert.equal(response.headers.get('access-control-expose-headers'), null, path);
    }
  });
});

test("a 429, and a 400 for no identity, carry the headers set in front for this request (hono/request-id's X-Request-Id), as a passed answer does, over a real server", async () => {
  const app = new Hono();
  app.use(requestId());
  app.use(rateLimit({ limit: 1, windowMs: 60_000, trustedHeader: 'cf-connecting-ip', now: () => AT }));
  app.get('/', (c) => c.text('ok'));
  await withApp(app, async ({ origin }) => {
    const send = async (id: string, ip?: string): Promise<Response> => {
      const res = await fetch(origin, {
        headers: { 'x-request-id': id, ...(ip === undefined ? {} : { 'cf-connecting-ip': ip }) },
      });
      await res.text();
      return res;
    };
    const passed = await send('passed', '203.0.113.7');
    assert.deepEqual([passed.status, passed.headers.get('x-request-id')], [200, 'passed']);
    const refused = await send('refused', '203.0.113.7');
    assert.deepEqual([refused.status, refused.headers.get('x-request-id')], [429, 'refused']);
    assert.equal(refused.headers.get('retry-after'), '17', 'its own headers stay');
    const anonymous = await send('anonymous');
    assert.deepEqual([anonymous.status, anonymous.headers.get('x-request-id')], [400, 'anonymous']);
  });
});
