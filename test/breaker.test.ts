import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Hono } from 'hono';
import { idempotency } from '../adapters/hono/idempotency.ts';
import { type CircuitBreakerOptions, circuitBreaker } from '../src/breaker.ts';
import { Call, type FetchLike, type Middleware, type Next } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import {
  CircuitOpenError,
  GateClosedError,
  HttpStatusError,
  NetworkError,
  TimeoutError,
} from '../src/errors.ts';
import type { BreakerEvent, BreakwaterEvent } from '../src/events.ts';
import { idempotencyKey } from '../src/idempotency-key.ts';
import { retry } from '../src/retry.ts';
import { throwOnStatus } from '../src/status.ts';
import { timeout } from '../src/timeout.ts';
import { withApp } from './helpers/hono-server.ts';
import { assertNoToken, refusedAfter, withReasonPhrase } from './helpers/reason-phrase.ts';
import { refusedRetryAt } from './helpers/refused.ts';
import { always, closedPort, sequence, type TestServer, withServer } from './helpers/server.ts';
import { allowSlowTests } from './helpers/slow-tests.ts';

// The registry test sends a million calls: about 1 s under Bun, and 7.2 s (past Bun's
// default 5 s limit) with Bun on a core it shared with two busy loops.
await allowSlowTests();

/** 2026-11-29T17:03:00.000Z: a fixed start for the hand-moved clock. */
const START = Date.UTC(2026, 10, 29, 17, 3, 0);

/** A breaker on a hand-moved clock with an exact, short open schedule: 100 ms doubling, no jitter. */
function clocked(options: CircuitBreakerOptions = {}) {
  const clock = { t: START };
  const breaker = circuitBreaker({
    open: { initialMs: 100, factor: 2, maxMs: 10_000, jitter: 'none' },
    now: () => clock.t,
    ...options,
  });
  return { clock, breaker };
}

/** Sends one call and consumes the body; resolves to the status. */
async function send(fetch: FetchLike, url: string, init?: RequestInit): Promise<number> {
  const res = await fetch(url, init);
  await res.text();
  return res.status;
}

/** Sends `n` calls one after another, consuming every body. */
async function sendMany(fetch: FetchLike, url: string, n: number): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < n; i++) statuses.push(await send(fetch, url));
  return statuses;
}

/** Waits (briefly) until the server has received `n` requests. */
async function arrived(server: TestServer, n: number): Promise<void> {
  for (let i = 0; i < 200 && server.requests.length < n; i++) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  assert.equal(server.requests.length, n);
}

const isOpenError = (e: unknown): boolean => e instanceof CircuitOpenError;

/** How long a probe may hold its slot without settling (the breaker's PROBE_LEASE_MS). */
const LEASE_MS = 60_000;

/**
 * A fetch stub that answers each call as the test says: `answer(n)` for the n-th call
 * (0-based) gives a status or a response, or `'hold'` to leave the call pending until
 * the test settles it with `release(n, status)` (or the caller aborts).
 */
function scripted(answer: (index: number) => number | Response | 'hold') {
  const held = new Map<number, (status: number) => void>();
  let calls = 0;
  const fetch: FetchLike = (_input, init) => {
    const index = calls++;
    const verdict = answer(index);
    if (verdict instanceof Response) return Promise.resolve(verdict);
    if (verdict !== 'hold') return Promise.resolve(new Response(null, { status: verdict }));
    return new Promise<Response>((resolve, reject) => {
      held.set(index, (status) => resolve(new Response(null, { status })));
      init?.signal?.addEventListener('abort', () => reject(init.signal?.reason));
    });
  };
  return {
    fetch,
    calls: () => calls,
    release(index: number, status: number): void {
      const settle = held.get(index);
      assert.ok(settle, `call ${index} is held`);
      held.delete(index);
      settle(status);
    },
  };
}

/** Sends one call; resolves to its status, or to the name of the error it rejected with. */
function outcome(fetch: FetchLike, url: string, init?: RequestInit): Promise<number | string> {
  return fetch(url, init).then(
    (res) => res.status,
    (error: unknown) => (error as Error).name,
  );
}

/** Lets pending promise callbacks run (a stub's answer reaching the breaker). */
function tick(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 1));
}

/** A 429 asking for `ms` of quiet. */
function tooMany(ms: number): Response {
  return new Response(null, { status: 429, headers: { 'retry-after-ms': String(ms) } });
}

const URL_A = 'http://api.test/';

test('five 503s open the circuit, and the sixth call fails fast without reaching the server', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const { breaker } = clocked();
    const fetch = createFetch({ use: [breaker] });
    assert.deepEqual(await sendMany(fetch, server.origin, 5), [503, 503, 503, 503, 503]);
    assert.equal(breaker.stats(server.origin)?.state, 'open');
    await assert.rejects(fetch(server.origin), isOpenError);
    await assert.rejects(fetch(server.origin), isOpenError);
    assert.equal(server.requests.length, 5, 'nothing was sent while open');
  });
});

test('the CircuitOpenError names the key and the last failure, with retryAt and the failure as cause', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const { breaker } = clocked();
    const fetch = createFetch({ use: [breaker], key: 'github-mcp' });
    await sendMany(fetch, `${server.origin}/mcp`, 5);
    await assert.rejects(fetch(`${server.origin}/mcp`), (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
      assert.equal(e.code, 'CIRCUIT_OPEN');
      assert.equal(e.key, 'github-mcp');
      assert.equal(e.retryAt.getTime(), START + 100);
      assert.equal(
        e.message,
        `GET ${server.origin}/mcp (server "github-mcp") not sent, circuit open after 5 consecutive failures ` +
          '(last: HTTP 503 Service Unavailable); next attempt at 2026-11-29T17:03:00.100Z (in 0.1 s)',
      );
      assert.ok(e.cause instanceof HttpStatusError, 'e.cause instanceof HttpStatusError');
      assert.equal(e.cause.status, 503);
      return true;
    });
  });
});

test('after the open time exactly one of 50 concurrent callers reaches the server as the probe', async () => {
  const handler = sequence({ status: 503 }, { status: 503 }, { status: 200, body: 'up', delayMs: 50 });
  await withServer(handler, async (server) => {
    const { clock, breaker } = clocked({ consecutiveFailures: 2 });
    const fetch = createFetch({ use: [breaker] });
    await sendMany(fetch, server.origin, 2);
    clock.t += 100;
    const outcomes = await Promise.allSettled(Array.from({ length: 50 }, () => send(fetch, server.origin)));
    const probes = outcomes.filter((o) => o.status === 'fulfilled');
    const refused = outcomes.filter((o) => o.status === 'rejected' && isOpenError(o.reason));
    assert.equal(probes.length, 1);
    assert.equal(refused.length, 49);
    assert.equal(server.requests.length, 3, 'two failures and one probe');
    assert.equal(breaker.stats(server.origin)?.state, 'closed');
  });
});

test('callers that arrive while the probe is in flight fail fast, naming the probe', async () => {
  const handler = sequence({ status: 502 }, { status: 200, delayMs: 50 });
  await withServer(handler, async (server) => {
    const { clock, breaker } = clocked({ consecutiveFailures: 1 });
    const fetch = createFetch({ use: [breaker] });
    await send(fetch, server.origin);
    clock.t += 100;
    const probe = send(fetch, server.origin);
    assert.equal(breaker.stats(server.origin)?.state, 'half-open');
    await assert.rejects(fetch(server.origin), (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
      assert.match(
        e.message,
        /^GET http:\/\/127\.0\.0\.1:\d+\/ \(server "http:\/\/127\.0\.0\.1:\d+"\) not sent, circuit half-open while its probe is in flight, after 1 consecutive failures/,
      );
      return true;
    });
    assert.equal(await probe, 200);
  });
});

test('a failed probe opens the circuit again for twice as long', async () => {
  await withServer(always({ status: 500 }), async (server) => {
    const { clock, breaker } = clocked({ consecutiveFailures: 3 });
    const fetch = createFetch({ use: [breaker] });
    await sendMany(fetch, server.origin, 3);
    assert.equal(breaker.stats(server.origin)?.retryAt?.getTime(), START + 100);
    clock.t += 100;
    assert.equal(await send(fetch, server.origin), 500, 'the probe went through');
    let stats = breaker.stats(server.origin);
    assert.equal(stats?.state, 'open');
    assert.equal(stats?.opens, 2);
    assert.equal(stats?.retryAt?.getTime(), clock.t + 200);
    clock.t += 200;
    await send(fetch, server.origin);
    stats = breaker.stats(server.origin);
    assert.equal(stats?.opens, 3);
    assert.equal(stats?.retryAt?.getTime(), clock.t + 400);
    await assert.rejects(fetch(server.origin), (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
      assert.match(
        e.message,
        /not sent, circuit open after a failed probe \(last: HTTP 500 Internal Server Error\)/,
      );
      return true;
    });
    assert.equal(server.requests.length, 5);
  });
});

test('a successful probe closes the circuit and resets every count and the open-time step', async () => {
  const handler = sequence({ status: 503 }, { status: 503 }, { status: 200 }, { status: 503 });
  await withServer(handler, async (server) => {
    const { clock, breaker } = clocked({ consecutiveFailures: 2 });
    const fetch = createFetch({ use: [breaker] });
    await sendMany(fetch, server.origin, 2);
    clock.t += 100;
    assert.equal(await send(fetch, server.origin), 200);
    assert.deepEqual(breaker.stats(server.origin), {
      state: 'closed',
      consecutiveFailures: 0,
      windowFailures: 0,
      windowTotal: 0,
      opens: 0,
    });
    await send(fetch, server.origin);
    assert.equal(breaker.stats(server.origin)?.state, 'closed', 'one failure is not two');
    await send(fetch, server.origin);
    const stats = breaker.stats(server.origin);
    assert.equal(stats?.state, 'open');
    assert.equal(stats?.opens, 1);
    assert.equal(stats?.retryAt?.getTime(), clock.t + 100, 'the schedule starts over');
  });
});

test('breaker events report open, half-open and closed, with retryAt and a reason', async () => {
  const handler = sequence({ status: 503 }, { status: 503 }, { status: 204 });
  await withServer(handler, async (server) => {
    const events: BreakwaterEvent[] = [];
    const { clock, breaker } = clocked({ consecutiveFailures: 2 });
    const fetch = createFetch({ use: [breaker], key: 'api', onEvent: (e) => events.push(e) });
    await sendMany(fetch, server.origin, 2);
    clock.t += 100;
    await send(fetch, server.origin);
    assert.deepEqual(
      events.filter((e) => e.type === 'breaker'),
      [
        {
          type: 'breaker',
          key: 'api',
          state: 'open',
          retryAt: new Date(START + 100),
          reason: '2 consecutive failures (last: HTTP 503 Service Unavailable)',
        },
        {
          type: 'breaker',
          key: 'api',
          state: 'half-open',
          reason: 'open time passed; letting one probe through',
        },
        { type: 'breaker', key: 'api', state: 'closed', reason: 'probe succeeded' },
      ],
    );
  });
});

test('404, 400, 401 and 403 responses never open the circuit (20 of each)', async () => {
  const byPath = (req: { url: string }) => ({ status: Number(req.url.slice(1)) });
  await withServer(byPath, async (server) => {
    const { breaker } = clocked({ consecutiveFailures: 5, minimumThroughput: 10 });
    const fetch = createFetch({ use: [breaker], key: 'api' });
    for (const status of [404, 400, 401, 403]) {
      const statuses = await sendMany(fetch, `${server.origin}/${status}`, 20);
      assert.ok(
        statuses.every((s) => s === status),
        'statuses.every((s) => s === status)',
      );
    }
    const stats = breaker.stats('api');
    assert.equal(stats?.state, 'closed');
    assert.equal(stats?.consecutiveFailures, 0);
    assert.equal(stats?.windowFailures, 0);
    assert.equal(stats?.windowTotal, 80);
    assert.equal(server.requests.length, 80);
  });
});

test('407 responses never open the circuit', async () => {
  // A stub: fetch implementations treat a real 407 from a non-proxy differently.
  const stub: FetchLike = async () => new Response(null, { status: 407 });
  const { breaker } = clocked({ consecutiveFailures: 2 });
  const fetch = createFetch({ fetch: stub, use: [breaker] });
  for (let i = 0; i < 20; i++) assert.equal((await fetch('http://proxy.test/')).status, 407);
  assert.equal(breaker.stats('http://proxy.test')?.state, 'closed');
});

test('408 and 529 responses count as failures', async () => {
  await withServer(sequence({ status: 408 }, { status: 529 }), async (server) => {
    const { breaker } = clocked({ consecutiveFailures: 2 });
    const fetch = createFetch({ use: [breaker] });
    await sendMany(fetch, server.origin, 2);
    await assert.rejects(fetch(server.origin), (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
      assert.match(e.message, /after 2 consecutive failures \(last: HTTP 529/);
      return true;
    });
  });
});

test('network errors (connection refused) count as failures', async () => {
  const port = await closedPort();
  const url = `http://127.0.0.1:${port}/`;
  const { breaker } = clocked({ consecutiveFailures: 3 });
  const fetch = createFetch({ use: [breaker] });
  for (let i = 0; i < 3; i++) await assert.rejects(fetch(url), NetworkError);
  await assert.rejects(fetch(url), (e: unknown) => {
    assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
    assert.match(e.message, /after 3 consecutive failures \(last: network error ECONNREFUSED\)/);
    assert.ok(e.cause instanceof NetworkError, 'e.cause instanceof NetworkError');
    return true;
  });
});

test('timeout errors count as failures', async () => {
  const timesOut: Middleware = async function timesOut() {
    throw new TimeoutError({ scope: 'attempt', ms: 100 });
  };
  const { breaker } = clocked({ consecutiveFailures: 2 });
  const fetch = createFetch({ fetch: async () => new Response('unused'), use: [breaker, timesOut] });
  await assert.rejects(fetch('http://api.test/'), TimeoutError);
  await assert.rejects(fetch('http://api.test/'), TimeoutError);
  await assert.rejects(
    fetch('http://api.test/'),
    /after 2 consecutive failures \(last: attempt timeout after 100 ms\)/,
  );
});

test('an HttpStatusError thrown inside the breaker is judged by its status', async () => {
  const throwing: Middleware = async function throwing(call, next) {
    const res = await next(call);
    if (res.status < 400) return res;
    await res.body?.cancel();
    throw new HttpStatusError({ status: res.status, statusText: res.statusText });
  };
  const statuses = [404, 404, 404, 503, 503];
  const stub: FetchLike = async () => new Response('no', { status: statuses.shift() ?? 200 });
  const { breaker } = clocked({ consecutiveFailures: 2 });
  const fetch = createFetch({ fetch: stub, use: [breaker, throwing] });
  for (let i = 0; i < 5; i++) await assert.rejects(fetch('http://api.test/'), HttpStatusError);
  const stats = breaker.stats('http://api.test');
  assert.equal(stats?.state, 'open', 'the two 503s opened it, the 404s did not count');
  assert.equal(stats?.windowFailures, 2);
  assert.equal(stats?.windowTotal, 5);
});

test('failures of calls already in flight when the circuit opened do not open it again', async () => {
  await withServer(always({ status: 503, delayMs: 20 }), async (server) => {
    const { breaker } = clocked({ consecutiveFailures: 2 });
    const fetch = createFetch({ use: [breaker] });
    const statuses = await Promise.all(Array.from({ length: 10 }, () => send(fetch, server.origin)));
    assert.equal(statuses.length, 10);
    const stats = breaker.stats(server.origin);
    assert.equal(stats?.opens, 1, 'one opening, not nine');
    assert.equal(stats?.retryAt?.getTime(), START + 100);
  });
});

test('a user abort is not counted against the server', async () => {
  await withServer(always({ hang: true }), async (server) => {
    const { breaker } = clocked({ consecutiveFailures: 2 });
    const fetch = createFetch({ use: [breaker] });
    for (let i = 0; i < 4; i++) {
      const controller = new AbortController();
      const reason = new Error(`gave up ${i}`);
      const pending = fetch(server.origin, { signal: controller.signal });
      controller.abort(reason);
      await assert.rejects(pending, (e: unknown) => e === reason);
    }
    const stats = breaker.stats(server.origin);
    assert.equal(stats?.state, 'closed');
    assert.equal(stats?.consecutiveFailures, 0);
    assert.equal(stats?.windowTotal, 0);
  });
});

test('a probe ended by a user abort frees the probe slot for the next caller', async () => {
  const handler = sequence({ status: 503 }, { hang: true }, { status: 200 });
  await withServer(handler, async (server) => {
    const { clock, breaker } = clocked({ consecutiveFailures: 1 });
    const fetch = createFetch({ use: [breaker] });
    await send(fetch, server.origin);
    clock.t += 100;
    const controller = new AbortController();
    const probe = fetch(server.origin, { signal: controller.signal });
    await assert.rejects(fetch(server.origin), isOpenError);
    await arrived(server, 2);
    controller.abort();
    await assert.rejects(probe, (e: unknown) => (e as Error).name === 'AbortError');
    assert.equal(breaker.stats(server.origin)?.state, 'half-open');
    assert.equal(await send(fetch, server.origin), 200, 'the next caller became the probe');
    assert.equal(breaker.stats(server.origin)?.state, 'closed');
  });
});

test('the circuit opens when the failure ratio over the window reaches failureRatio at minimumThroughput', async () => {
  // Every other call fails: never two in a row, but half of all calls.
  await withServer(
    (_req, i) => ({ status: i % 2 === 0 ? 200 : 500 }),
    async (server) => {
      const { breaker } = clocked({ consecutiveFailures: 100, failureRatio: 0.5, minimumThroughput: 10 });
      const fetch = createFetch({ use: [breaker], key: 'flaky' });
      await sendMany(fetch, server.origin, 9);
      let stats = breaker.stats('flaky');
      assert.equal(stats?.state, 'closed', '4 of 9 is below the minimum throughput');
      assert.equal(stats?.windowFailures, 4);
      assert.equal(stats?.windowTotal, 9);
      await send(fetch, server.origin);
      stats = breaker.stats('flaky');
      assert.equal(stats?.state, 'open');
      await assert.rejects(fetch(server.origin), (e: unknown) => {
        assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
        assert.match(
          e.message,
          /not sent, circuit open after 5 of the last 10 calls failed \(last: HTTP 500 Internal Server Error\)/,
        );
        return true;
      });
    },
  );
});

test('failures older than windowMs no longer count toward the ratio', async () => {
  await withServer(always({ status: 500 }), async (server) => {
    const { clock, breaker } = clocked({
      consecutiveFailures: 100,
      minimumThroughput: 10,
      windowMs: 1000,
    });
    const fetch = createFetch({ use: [breaker], key: 'api' });
    await sendMany(fetch, server.origin, 9);
    assert.equal(breaker.stats('api')?.windowFailures, 9);
    clock.t += 1000;
    assert.equal(breaker.stats('api')?.windowTotal, 0, 'the window slid past them');
    await send(fetch, server.origin);
    const stats = breaker.stats('api');
    assert.equal(stats?.state, 'closed');
    assert.equal(stats?.windowFailures, 1);
    assert.equal(stats?.consecutiveFailures, 10, 'the run of failures is not a window');
  });
});

test('a 503 with Retry-After stretches the open time to the server’s delay', async () => {
  await withServer(always({ status: 503, headers: { 'retry-after': '2' } }), async (server) => {
    const { breaker } = clocked({ consecutiveFailures: 1 });
    const fetch = createFetch({ use: [breaker] });
    await send(fetch, server.origin);
    assert.equal(breaker.stats(server.origin)?.retryAt?.getTime(), START + 2000);
  });
});

test('a Retry-After beyond maxRetryAfterMs stretches the open time only up to the cap', async () => {
  await withServer(always({ status: 503, headers: { 'retry-after': '3600' } }), async (server) => {
    const { breaker } = clocked({ consecutiveFailures: 1, maxRetryAfterMs: 1000 });
    const fetch = createFetch({ use: [breaker] });
    await send(fetch, server.origin);
    await assert.rejects(fetch(server.origin), (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
      assert.equal(e.retryAt.getTime(), START + 1000);
      return true;
    });
    assert.equal(server.requests.length, 1);
  });
});

test('1,000,000 distinct keys leave the registry at maxKeys', async () => {
  const breaker = circuitBreaker({ maxKeys: 1000 });
  const response = new Response(null, { status: 200 });
  // No network, and a settled thenable in place of fetch's promise: the registry is
  // under test, and a million real promises cost seconds under node:test's async hooks.
  // biome-ignore lint/suspicious/noThenProperty: a thenable on purpose, settled at once
  const settled = { then: (resolve: (r: Response) => unknown) => resolve(response) };
  const next = (() => settled) as unknown as Next;
  for (let i = 0; i < 1_000_000; i++) {
    const outcome = breaker(new Call(`http://h${i}.test/`, undefined, undefined, undefined), next);
    if (i % 100_000 === 0) assert.equal(await outcome, response);
  }
  assert.equal(breaker.size(), 1000);
  assert.equal(breaker.stats('http://h0.test'), undefined, 'the oldest keys were forgotten');
  assert.equal(breaker.stats('http://h998999.test'), undefined);
  assert.equal(breaker.stats('http://h999000.test')?.windowTotal, 1);
  assert.equal(breaker.stats('http://h999999.test')?.state, 'closed');
});

test('the registry forgets the least recently used key, not the first one seen', async () => {
  const breaker = circuitBreaker({ maxKeys: 2 });
  const stub: FetchLike = async () => new Response(null, { status: 204 });
  const fetch = createFetch({ fetch: stub, use: [breaker] });
  await fetch('http://a.test/');
  await fetch('http://b.test/');
  await fetch('http://a.test/');
  await fetch('http://c.test/');
  assert.equal(breaker.size(), 2);
  assert.notEqual(breaker.stats('http://a.test'), undefined, 'a was used after b');
  assert.equal(breaker.stats('http://b.test'), undefined);
  assert.notEqual(breaker.stats('http://c.test'), undefined);
});

test('reset(key) forgets one key, reset() every key, and stats() is undefined for an unknown key', async () => {
  const { breaker } = clocked({ consecutiveFailures: 1 });
  const fetch = createFetch({ fetch: async () => new Response(null, { status: 500 }), use: [breaker] });
  await fetch('http://a.test/');
  await fetch('http://b.test/');
  assert.equal(breaker.stats('http://a.test')?.state, 'open');
  breaker.reset('http://a.test');
  assert.equal(breaker.stats('http://a.test'), undefined);
  assert.equal((await fetch('http://a.test/')).status, 500, 'a is closed again');
  assert.equal(breaker.size(), 2);
  breaker.reset();
  assert.equal(breaker.size(), 0);
  assert.equal(breaker.stats('http://never.test'), undefined);
});

test('outcomes of calls sent before reset(key) neither open the forgotten circuit nor pause the key: no event, and the next call goes', async () => {
  const handler = (req: { url: string }) =>
    req.url === '/ok'
      ? { status: 200 }
      : req.url === '/limit'
        ? { status: 429, headers: { 'retry-after': '5' }, delayMs: 100 }
        : { status: 503, delayMs: 100 };
  await withServer(handler, async (server) => {
    const events: BreakwaterEvent[] = [];
    const { breaker } = clocked({ consecutiveFailures: 2 });
    const fetch = createFetch({ use: [breaker], key: 'api', onEvent: (e) => events.push(e) });
    const inFlight = ['/a', '/b', '/limit'].map((path) => send(fetch, `${server.origin}${path}`));
    await arrived(server, 3);
    breaker.reset('api');
    assert.deepEqual(await Promise.all(inFlight), [503, 503, 429]);
    const told = events.filter((e) => e.type === 'breaker' || e.type === 'paced');
    assert.deepEqual(told, [], 'no event for a circuit nobody uses any more');
    assert.equal(breaker.stats('api'), undefined);
    assert.equal(await send(fetch, `${server.origin}/ok`), 200, 'the key is neither open nor paused');
    assert.equal(breaker.stats('api')?.state, 'closed');
  });
});

test('the happy path hands the caller’s own input (a URL as its href, read at the call, as fetch reads it) and init to fetch, and builds no Request', async () => {
  const seen: unknown[][] = [];
  const stub: FetchLike = async (...args) => {
    seen.push(args);
    return new Response('ok');
  };
  const fetch = createFetch({ fetch: stub, use: [circuitBreaker()] });
  const url = new URL('http://api.test/v1');
  const init = { method: 'POST', body: '{}' };
  const res = await fetch(url, init);
  assert.equal(await res.text(), 'ok');
  assert.equal(seen[0]?.[0], url.href);
  assert.equal(seen[0]?.[1], init);
});

test('bad options throw one TypeError naming every offending path', () => {
  assert.throws(
    () =>
      circuitBreaker({
        consecutiveFailures: 0,
        failureRatio: 1.5,
        minimumThroughput: 2.5,
        windowMs: -1,
        open: { jitter: 'lots' as never },
        maxKeys: 0,
        maxRetryAfterMs: Number.NaN,
        now: 5 as never,
        colour: 'red',
      } as CircuitBreakerOptions),
    (e: unknown) => {
      assert.ok(e instanceof TypeError, 'e instanceof TypeError');
      for (const path of [
        'circuitBreaker().consecutiveFailures',
        'circuitBreaker().failureRatio',
        'circuitBreaker().minimumThroughput',
        'circuitBreaker().windowMs',
        'circuitBreaker().open.jitter',
        'circuitBreaker().maxKeys',
        'circuitBreaker().maxRetryAfterMs',
        'circuitBreaker().now',
        'unknown option "colour"',
      ]) {
        assert.ok(e.message.includes(path), `${path} in ${e.message}`);
      }
      return true;
    },
  );
  assert.throws(() => circuitBreaker(42 as never), TypeError);
});

test('a half-open probe that never settles gives up its slot after the probe lease, and the next caller probes', async () => {
  const stub = scripted((i) => (i === 0 ? 503 : i === 1 ? 'hold' : 200));
  const { clock, breaker } = clocked({ consecutiveFailures: 1 });
  const events: BreakwaterEvent[] = [];
  const fetch = createFetch({
    fetch: stub.fetch,
    use: [breaker],
    key: 'api',
    onEvent: (e) => events.push(e),
  });
  assert.equal(await outcome(fetch, URL_A), 503);
  clock.t += 100;
  const hung = outcome(fetch, URL_A); // the probe; the server never answers it
  await tick();
  assert.equal(await outcome(fetch, URL_A), 'CircuitOpenError', 'the probe holds the slot');
  assert.equal(breaker.stats('api')?.retryAt?.getTime(), clock.t + LEASE_MS, 'stats say when the lease ends');
  clock.t += LEASE_MS - 1;
  assert.equal(await outcome(fetch, URL_A), 'CircuitOpenError', 'still within the lease');
  clock.t += 1;
  assert.equal(await outcome(fetch, URL_A), 200, 'the next caller became the probe');
  assert.equal(breaker.stats('api')?.state, 'closed');
  assert.equal(stub.calls(), 3, 'one failure, the hung probe, the new probe');
  const reasons = events.filter((e): e is BreakerEvent => e.type === 'breaker').map((e) => e.reason);
  assert.ok(
    reasons.includes(`the probe did not settle within ${LEASE_MS} ms; letting one probe through`),
    reasons.join(' | '),
  );
  stub.release(1, 200);
  assert.equal(await hung, 200);
});

test('callers refused while the half-open probe is in flight get a retryAt one open step on, later the longer it hangs, never past its lease', async () => {
  // A client that sleeps until retryAt must not spin: a retryAt of now refused it again at once.
  const stub = scripted((i) => (i === 0 ? 503 : i === 1 ? 'hold' : 200));
  const { clock, breaker } = clocked({ consecutiveFailures: 1 });
  const fetch = createFetch({ fetch: stub.fetch, use: [breaker], key: 'api' });
  assert.equal(await outcome(fetch, URL_A), 503);
  clock.t += 100;
  const probeAt = clock.t;
  const hung = outcome(fetch, URL_A);
  await tick();
  const retryAt = () => refusedRetryAt(fetch(URL_A), CircuitOpenError);
  assert.equal(await retryAt(), clock.t + 100, 'at first: the open step just served (100 ms)');
  clock.t += 1_000;
  assert.equal(await retryAt(), clock.t + 1_000, 'after 1 s in flight: as long again');
  clock.t = probeAt + LEASE_MS - 10;
  assert.equal(await retryAt(), probeAt + LEASE_MS, 'never past the lease, when the next call probes');
  clock.t = probeAt + LEASE_MS;
  assert.equal(await outcome(fetch, URL_A), 200, 'the next call probes at the lease end');
  stub.release(1, 200);
  assert.equal(await hung, 200);
});

test('a call sent from an onEvent listener as the circuit turns half-open is refused: one probe goes, not two', async () => {
  // The listener runs inside the admission of the probe (a health check, a log shipper
  // that calls the same server): the slot must be the probe's before anyone hears of it.
  const stub = scripted((i) => (i === 0 ? 503 : 'hold'));
  const { clock, breaker } = clocked({ consecutiveFailures: 1 });
  let fromListener: Promise<number | string> | undefined;
  let retryAtSeen: number | undefined;
  const fetch: FetchLike = createFetch({
    fetch: stub.fetch,
    use: [breaker],
    key: 'api',
    onEvent: (e) => {
      if (e.type !== 'breaker' || e.state !== 'half-open') return;
      retryAtSeen = breaker.stats('api')?.retryAt?.getTime();
      fromListener = outcome(fetch, URL_A);
    },
  });
  assert.equal(await outcome(fetch, URL_A), 503);
  clock.t += 100;
  const probe = outcome(fetch, URL_A);
  await tick();
  try {
    assert.equal(stub.calls(), 2, 'the failure, and one probe');
    assert.equal(await fromListener, 'CircuitOpenError', 'the listener’s call is no second probe');
    assert.equal(retryAtSeen, clock.t + LEASE_MS, 'stats() in the event say when the probe’s lease ends');
  } finally {
    for (let held = 1; held < stub.calls(); held++) stub.release(held, 200);
  }
  assert.equal(await probe, 200);
});

/**
 * A circuit opened by one 503 whose probe (call 1) hangs past its lease, so that a
 * second probe (call 2) goes: both held until the test releases them.
 */
async function supersededProbe() {
  const stub = scripted((i) => (i === 0 ? 503 : 'hold'));
  const { clock, breaker } = clocked({ consecutiveFailures: 1 });
  const fetch = createFetch({ fetch: stub.fetch, use: [breaker], key: 'api' });
  assert.equal(await outcome(fetch, URL_A), 503);
  clock.t += 100;
  const first = outcome(fetch, URL_A);
  await tick();
  clock.t += LEASE_MS;
  const second = outcome(fetch, URL_A);
  await tick();
  return { stub, breaker, first, second };
}

test('a superseded probe that answers late with a success still closes the circuit', async () => {
  const { stub, breaker, first, second } = await supersededProbe();
  assert.equal(stub.calls(), 3, 'the second probe went after the lease');
  stub.release(1, 200); // a slow but healthy server: the first probe's answer comes late
  assert.equal(await first, 200);
  assert.equal(breaker.stats('api')?.state, 'closed');
  stub.release(2, 200);
  assert.equal(await second, 200);
  assert.equal(breaker.stats('api')?.state, 'closed');
});

test('a superseded probe that fails late does not open the circuit again', async () => {
  const { stub, breaker, first, second } = await supersededProbe();
  stub.release(1, 503);
  assert.equal(await first, 503);
  assert.equal(breaker.stats('api')?.state, 'half-open', 'only the current probe decides');
  stub.release(2, 200);
  assert.equal(await second, 200);
  assert.equal(breaker.stats('api')?.state, 'closed');
});

test('calls sent before the circuit opened that fail after it closed again do not open it again', async () => {
  // Four calls go while closed; two fail and open the circuit; the probe succeeds and
  // closes it; then the other two, sent before all that, fail late.
  const stub = scripted((i) => (i < 4 ? 'hold' : 200));
  const { clock, breaker } = clocked({ consecutiveFailures: 2 });
  const fetch = createFetch({ fetch: stub.fetch, use: [breaker], key: 'api' });
  const early = [0, 1, 2, 3].map(() => outcome(fetch, URL_A));
  await tick();
  stub.release(0, 503);
  stub.release(1, 503);
  await tick();
  assert.equal(breaker.stats('api')?.state, 'open');
  clock.t += 100;
  assert.equal(await outcome(fetch, URL_A), 200, 'the probe');
  assert.equal(breaker.stats('api')?.state, 'closed');
  stub.release(2, 503);
  stub.release(3, 503);
  assert.deepEqual(await Promise.all(early), [503, 503, 503, 503]);
  const stats = breaker.stats('api');
  assert.equal(stats?.state, 'closed', 'failures of calls sent before the opening say nothing about now');
  assert.equal(stats?.consecutiveFailures, 0);
  assert.equal(stats?.windowTotal, 0, 'the window the probe started over holds none of them');
});

test('an HttpStatusError with a NaN retryAfterMs opens the circuit for the schedule’s open time', async () => {
  const throwing: FetchLike = async () => {
    throw new HttpStatusError({ status: 503, retryAfterMs: Number.NaN });
  };
  const { clock, breaker } = clocked({ consecutiveFailures: 1 });
  const fetch = createFetch({ fetch: throwing, use: [breaker], key: 'api' });
  assert.equal(await outcome(fetch, URL_A), 'HttpStatusError');
  assert.equal(breaker.stats('api')?.retryAt?.getTime(), START + 100);
  await assert.rejects(fetch(URL_A), (e: unknown) => {
    assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
    assert.equal(e.retryAt.getTime(), clock.t + 100);
    return true;
  });
});

test('a 429 HttpStatusError with a negative or NaN retryAfterMs pauses the key for the next open step', async () => {
  for (const retryAfterMs of [Number.NaN, -5]) {
    const throwing: FetchLike = async () => {
      throw new HttpStatusError({ status: 429, retryAfterMs });
    };
    const { breaker } = clocked();
    const fetch = createFetch({ fetch: throwing, use: [breaker], key: 'api' });
    assert.equal(await outcome(fetch, URL_A), 'HttpStatusError');
    assert.equal(breaker.stats('api')?.pausedUntil?.getTime(), START + 100, `retryAfterMs ${retryAfterMs}`);
  }
});

test('an open circuit whose clock steps back an hour still probes after its open time, not an hour later', async () => {
  const stub = scripted((i) => (i === 0 ? 503 : 200));
  const { clock, breaker } = clocked({ consecutiveFailures: 1 });
  const fetch = createFetch({ fetch: stub.fetch, use: [breaker], key: 'api' });
  assert.equal(await outcome(fetch, URL_A), 503);
  clock.t -= 3_600_000; // NTP corrects a clock that ran an hour fast
  await assert.rejects(fetch(URL_A), (e: unknown) => {
    assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
    assert.ok(e.retryAt.getTime() - clock.t <= 100, `retryAt is ${e.retryAt.getTime() - clock.t} ms away`);
    return true;
  });
  assert.ok(
    (breaker.stats('api')?.retryAt?.getTime() ?? 0) - clock.t <= 100,
    "(breaker.stats('api')?.retryAt?.getTime() ?? 0) - clock.t <= 100",
  );
  clock.t += 100;
  assert.equal(await outcome(fetch, URL_A), 200, 'the probe went after the open time');
  assert.equal(breaker.stats('api')?.state, 'closed');
});

test('a paused key whose clock steps back an hour is paused for what is left of the pause, not an hour more', async () => {
  const deadline: Middleware = async function deadline(call, next) {
    call.deadline = Date.now() + 1000;
    return next(call);
  };
  const stub = scripted((i) => (i === 0 ? tooMany(50) : 200));
  const { clock, breaker } = clocked();
  const fetch = createFetch({ fetch: stub.fetch, use: [deadline, breaker], key: 'api' });
  assert.equal(await outcome(fetch, URL_A), 429);
  clock.t -= 3_600_000;
  assert.ok(
    (breaker.stats('api')?.pausedUntil?.getTime() ?? 0) - clock.t <= 50,
    "(breaker.stats('api')?.pausedUntil?.getTime() ?? 0) - clock.t <= 50",
  );
  assert.equal(await outcome(fetch, URL_A), 200, 'the call waited 50 ms, within its 1 s deadline, and went');
});

test('a clock stepping back by more than the window starts the window over', async () => {
  const { clock, breaker } = clocked({ consecutiveFailures: 100, minimumThroughput: 10, windowMs: 1000 });
  const fetch = createFetch({
    fetch: async () => new Response(null, { status: 500 }),
    use: [breaker],
    key: 'api',
  });
  for (let i = 0; i < 9; i++) await outcome(fetch, URL_A);
  assert.equal(breaker.stats('api')?.windowFailures, 9);
  clock.t -= 3_600_000;
  await outcome(fetch, URL_A);
  const stats = breaker.stats('api');
  assert.equal(stats?.windowTotal, 1, 'the counts from an hour "ahead" are gone');
  assert.equal(stats?.state, 'closed', '1 call is below the minimum throughput');
});

test('a window of a microsecond on a sub-millisecond clock counts calls instead of hanging the process', async () => {
  // windowMs 0.001 makes 0.1 ns buckets: on an epoch clock their indexes pass 2^53,
  // where index + 1 rounds back to index. A clock with fractions (performance-based) steps them by 2.
  await withServer(always({ status: 500 }), async (server) => {
    let t = START;
    const breaker = circuitBreaker({
      consecutiveFailures: 100,
      windowMs: 0.001,
      now: () => (t += 0.0002),
    });
    const fetch = createFetch({ use: [breaker], key: 'api' });
    for (let i = 0; i < 5; i++) assert.equal(await send(fetch, server.origin), 500);
    const stats = breaker.stats('api');
    assert.equal(stats?.consecutiveFailures, 5);
    assert.ok((stats?.windowTotal ?? -1) >= 0, '(stats?.windowTotal ?? -1) >= 0');
  });
});

test('a clock stepping back a little keeps counting in the newest bucket', async () => {
  const { clock, breaker } = clocked({ consecutiveFailures: 100, minimumThroughput: 10, windowMs: 1000 });
  const fetch = createFetch({
    fetch: async () => new Response(null, { status: 500 }),
    use: [breaker],
    key: 'api',
  });
  for (let i = 0; i < 5; i++) await outcome(fetch, URL_A);
  clock.t -= 250;
  for (let i = 0; i < 5; i++) await outcome(fetch, URL_A);
  assert.equal(breaker.stats('api')?.state, 'open', '10 of 10 failed');
});

test('a pace probe that never settles gives way after its lease: the next call probes instead of waiting and failing', async () => {
  const stub = scripted((i) => (i === 0 ? tooMany(40) : i === 1 ? 'hold' : 200));
  const { clock, breaker } = clocked({ maxRetryAfterMs: 50 });
  const fetch = createFetch({ fetch: stub.fetch, use: [breaker], key: 'api' });
  assert.equal(await outcome(fetch, URL_A), 429);
  clock.t += 40; // the pause is over
  const hung = outcome(fetch, URL_A); // the pace probe; the server never answers it
  await tick();
  assert.equal(await outcome(fetch, URL_A), 'CircuitOpenError', 'waited 50 ms for the probe, then failed');
  clock.t += LEASE_MS;
  assert.equal(await outcome(fetch, URL_A), 200, 'the pace probe’s lease ran out: this call probed');
  assert.equal(await outcome(fetch, URL_A), 200, 'and its answer released the key');
  assert.equal(stub.calls(), 4);
  stub.release(1, 200);
  assert.equal(await hung, 200);
});

test('a call waiting for a pace probe whose lease runs out meanwhile becomes the next pace probe', async () => {
  const stub = scripted((i) => (i === 0 ? tooMany(40) : i === 1 ? 'hold' : 200));
  const { clock, breaker } = clocked({ maxRetryAfterMs: 50 });
  const fetch = createFetch({ fetch: stub.fetch, use: [breaker], key: 'api' });
  assert.equal(await outcome(fetch, URL_A), 429);
  clock.t += 40;
  const hung = outcome(fetch, URL_A);
  await tick();
  const waiting = outcome(fetch, URL_A); // waits up to 50 ms for the pace probe
  clock.t += LEASE_MS; // meanwhile the probe's lease runs out
  assert.equal(await waiting, 200);
  assert.equal(stub.calls(), 3);
  stub.release(1, 200);
  assert.equal(await hung, 200);
});

test('a call waiting for a hung pace probe takes over when the probe’s lease ends, not at its own longer limit', async () => {
  const stub = scripted((i) => (i === 0 ? tooMany(40) : i === 1 ? 'hold' : 200));
  const { clock, breaker } = clocked({ maxRetryAfterMs: 120_000 });
  const fetch = createFetch({ fetch: stub.fetch, use: [breaker], key: 'api' });
  assert.equal(await outcome(fetch, URL_A), 429);
  clock.t += 40;
  const hung = outcome(fetch, URL_A); // the pace probe
  await tick();
  clock.t += LEASE_MS - 30; // 30 ms of the lease left when the next call arrives
  // It may wait 120 s for the probe; the lease ends first. Given up after 1 s: not in time.
  const controller = new AbortController();
  const giveUp = setTimeout(() => controller.abort(), 1000);
  const waiting = outcome(fetch, URL_A, { signal: controller.signal });
  setTimeout(() => {
    clock.t += 30;
  }, 10);
  assert.equal(await waiting, 200);
  clearTimeout(giveUp);
  stub.release(1, 200);
  assert.equal(await hung, 200);
});

test('a pace probe hung when the circuit opened does not hold the key after the open time: the next call is the half-open probe', async () => {
  // Calls 0 and 1 are on the wire when call 2's 429 pauses the key; call 3, the pace
  // probe, hangs (a server that accepts and never answers); then 0 and 1 fail and open
  // the circuit. The pace probe was sent before it opened: past the open time, the next
  // call must probe the server, not wait up to maxRetryAfterMs (60 s by default) for it.
  const stub = scripted((i) => (i === 2 ? tooMany(40) : i <= 3 ? 'hold' : 200));
  const { clock, breaker } = clocked({ consecutiveFailures: 2, maxRetryAfterMs: 50 });
  const events: BreakerEvent[] = [];
  const fetch = createFetch({
    fetch: stub.fetch,
    use: [breaker],
    key: 'api',
    onEvent: (e) => e.type === 'breaker' && events.push(e),
  });
  const early = [outcome(fetch, URL_A), outcome(fetch, URL_A)];
  await tick();
  assert.equal(await outcome(fetch, URL_A), 429);
  clock.t += 40; // the pause is over
  const hung = outcome(fetch, URL_A); // the pace probe
  await tick();
  stub.release(0, 503);
  stub.release(1, 503);
  assert.deepEqual(await Promise.all(early), [503, 503]);
  assert.equal(breaker.stats('api')?.state, 'open', 'two failures opened it');
  clock.t += 100; // the open time is over
  assert.equal(await outcome(fetch, URL_A), 200, 'this call probed the server');
  assert.equal(stub.calls(), 5);
  assert.deepEqual(
    events.map((e) => e.state),
    ['open', 'half-open', 'closed'],
  );
  stub.release(3, 200);
  assert.equal(await hung, 200);
  assert.equal(breaker.stats('api')?.state, 'closed', 'the stale probe’s answer changes nothing');
});

test('by default the open time runs 500 ms doubling to 32 s, stretched by up to 30% and never past 32 s', async () => {
  for (const [random, expected] of [
    [0, [500, 1000, 2000, 4000, 8000, 16_000, 32_000, 32_000]],
    [0.999_999, [650, 1300, 2600, 5200, 10_400, 20_800, 32_000, 32_000]],
  ] as const) {
    const clock = { t: START };
    const breaker = circuitBreaker({ consecutiveFailures: 1, now: () => clock.t, random: () => random });
    const fetch = createFetch({
      fetch: async () => new Response(null, { status: 503 }),
      use: [breaker],
      key: 'api',
    });
    const openTimes: number[] = [];
    for (let i = 0; i < expected.length; i++) {
      assert.equal(await outcome(fetch, URL_A), 503, 'the probe went');
      const retryAt = breaker.stats('api')?.retryAt?.getTime() ?? 0;
      openTimes.push(retryAt - clock.t);
      clock.t = retryAt;
    }
    assert.deepEqual(openTimes, expected, `random ${random}`);
  }
});

test('CircuitOpenError, GateClosedError and other errors from inner layers never count, and a probe ending in one frees its slot', async () => {
  const errors = [
    () =>
      new CircuitOpenError({
        key: 'inner',
        retryAt: new Date(START),
        reason: 'after 5 consecutive failures',
      }),
    () => new GateClosedError({ key: 'inner', retryAt: new Date(START) }),
    () => new TypeError('a bug in a middleware'),
  ];
  for (const error of errors) {
    let calls = 0;
    const { clock, breaker } = clocked({ consecutiveFailures: 1 });
    const stub: FetchLike = async () => {
      calls++;
      if (calls === 1) return new Response(null, { status: 503 });
      if (calls === 2) throw error();
      return new Response(null, { status: 200 });
    };
    const fetch = createFetch({ fetch: stub, use: [breaker], key: 'api' });
    assert.equal(await outcome(fetch, URL_A), 503);
    clock.t += 100;
    const name = error().name;
    assert.equal(await outcome(fetch, URL_A), name, 'the probe ended in an error from inside');
    assert.equal(breaker.stats('api')?.state, 'half-open', `${name} did not open the circuit again`);
    assert.equal(breaker.stats('api')?.opens, 1);
    assert.equal(await outcome(fetch, URL_A), 200, 'the next caller probed at once');
    assert.equal(breaker.stats('api')?.state, 'closed');
  }
  const { breaker } = clocked({ consecutiveFailures: 1, minimumThroughput: 1 });
  const inner = errors[0] as () => Error;
  const fetch = createFetch({
    fetch: async () => {
      throw inner();
    },
    use: [breaker],
    key: 'api',
  });
  for (let i = 0; i < 20; i++) assert.equal(await outcome(fetch, URL_A), 'CircuitOpenError');
  assert.deepEqual(breaker.stats('api'), {
    state: 'closed',
    consecutiveFailures: 0,
    windowFailures: 0,
    windowTotal: 0,
    opens: 0,
  });
});

test('a probe answered with a streaming body that never ends closes the circuit at its headers', async () => {
  let calls = 0;
  let cancelled = false;
  const stub: FetchLike = async () => {
    if (calls++ === 0) return new Response(null, { status: 503 });
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('data: hello\n\n'));
      },
      cancel() {
        cancelled = true;
      },
    });
    return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
  };
  const { clock, breaker } = clocked({ consecutiveFailures: 1 });
  const fetch = createFetch({ fetch: stub, use: [breaker], key: 'api' });
  assert.equal(await outcome(fetch, URL_A), 503);
  clock.t += 100;
  const res = await fetch(URL_A);
  assert.equal(breaker.stats('api')?.state, 'closed', 'closed by the headers; the stream is still open');
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  assert.equal(new TextDecoder().decode((await reader.read()).value), 'data: hello\n\n');
  await reader.cancel();
  assert.ok(cancelled, 'cancelled');
});

test('a call admitted while closed that goes out just after another call opened the circuit is no probe of it', async () => {
  // A paced key sends calls down the slow path; the call admitted there (the pace
  // probe) is sent a microtask later. If another call's failure opens the circuit in
  // between, the call goes out while open: its success must not close the circuit (it
  // was never the probe; its failure counts for nothing either). Tried at every
  // interleaving of the failure and the admission.
  for (let depth = 0; depth < 8; depth++) {
    const stub = scripted((i) => (i === 1 ? tooMany(1000) : 'hold'));
    const { clock, breaker } = clocked({ consecutiveFailures: 1 });
    const fetch = createFetch({ fetch: stub.fetch, use: [breaker], key: 'api' });
    const early = outcome(fetch, URL_A); // sent while closed, held
    await tick();
    assert.equal(await outcome(fetch, URL_A), 429); // paces the key for 1 s
    clock.t += 1000; // the pause is over: the next call is the pace probe
    stub.release(0, 503); // the early call fails: opens the circuit, a few microtasks from now
    for (let i = 0; i < depth; i++) await Promise.resolve();
    const late = outcome(fetch, URL_A);
    await tick();
    assert.equal(breaker.stats('api')?.state, 'open', `depth ${depth}`);
    if (stub.calls() === 3) stub.release(2, 200);
    await Promise.all([early, late]);
    assert.equal(breaker.stats('api')?.state, 'open', `depth ${depth}: only a probe closes it`);
  }
});

test('a call whose signal has already aborted does not move an open circuit to half-open: no event, and the next call is the probe', async () => {
  // The end of the chain refuses such a call (as fetch does), so it can probe nothing: a
  // call left over from a pass the caller aborted, or one sent after a shutdown.
  await withServer(sequence({ status: 503 }, { status: 200 }), async (server) => {
    const { clock, breaker } = clocked({ consecutiveFailures: 1 });
    const events: BreakerEvent[] = [];
    const fetch = createFetch({
      use: [breaker],
      onEvent: (e) => {
        if (e.type === 'breaker') events.push(e);
      },
    });
    assert.equal(await send(fetch, server.origin), 503);
    clock.t += 100;
    const reason = new Error('the agent shut down');
    await assert.rejects(fetch(server.origin, { signal: AbortSignal.abort(reason) }), (e) => e === reason);
    assert.deepEqual(
      events.map((e) => e.state),
      ['open'],
      'no half-open for a call that never goes out',
    );
    assert.equal(breaker.stats(server.origin)?.state, 'open');
    assert.equal(await send(fetch, server.origin), 200, 'the next call is the probe');
    assert.deepEqual(
      events.map((e) => e.state),
      ['open', 'half-open', 'closed'],
    );
    assert.equal(server.requests.length, 2);
  });
});

/** A custom fetch that drops `init.signal`: a deadline never reaches the request. */
const deafFetch: FetchLike = (input, init) => {
  const { signal: _ignored, ...rest } = init ?? {};
  return globalThis.fetch(input, rest);
};

test('a call a hand-written resender brings back after a timeout above ended its pass does not move an open circuit to half-open', async () => {
  // [timeout({ attemptMs }), resender, breaker] through a fetch that ignores the signal:
  // the late 503 opens the circuit, and the resender (which does not look at the signal)
  // sends the call again once the open time has passed. The end of the chain refuses
  // it; the breaker must not report a probe for it first.
  await withServer(sequence({ status: 503, delayMs: 150 }, {}), async (server) => {
    const events: BreakerEvent[] = [];
    const breaker = circuitBreaker({ consecutiveFailures: 1, open: { initialMs: 20, jitter: 'none' } });
    let resent: (outcome: unknown) => void = () => {};
    const again = new Promise<unknown>((resolve) => {
      resent = resolve;
    });
    const resender: Middleware = async function resender(call, next) {
      const response = await next(call);
      await response.body?.cancel();
      await new Promise((resolve) => setTimeout(resolve, 50));
      call.attempt++;
      const sent = next(call);
      sent.then(resent, resent);
      return sent;
    };
    const fetch = createFetch({
      fetch: deafFetch,
      onEvent: (e) => {
        if (e.type === 'breaker') events.push(e);
      },
      use: [timeout({ attemptMs: 50 }), resender, breaker],
    });
    await assert.rejects(fetch(`${server.origin}/x`), TimeoutError);
    const outcome = await again;
    assert.equal((outcome as Error).name, 'AbortError', 'the resend is refused');
    assert.deepEqual(
      events.map((e) => e.state),
      ['open'],
      'no half-open for a call that never goes out',
    );
    assert.equal(breaker.stats(server.origin)?.state, 'open');
    assert.equal(server.requests.length, 1);
  });
});

test('after an attempt deadline, a retry() above the breaker still sends its next attempt as the probe, and one above the timeout too', async () => {
  // Both timeouts mark the call at their deadline; neither mark may turn the retry's next
  // attempt away at the breaker: [retry, breaker, timeout] (the policy order), where the
  // mark is lifted only below the breaker, and [retry, timeout, breaker], where the
  // timeout's new pass lifts it.
  for (const order of ['breaker above the timeout', 'timeout above the breaker'] as const) {
    await withServer(sequence({ status: 503, delayMs: 150 }, {}), async (server) => {
      const events: BreakerEvent[] = [];
      const breaker = circuitBreaker({ consecutiveFailures: 1, open: { initialMs: 20, jitter: 'none' } });
      const attempt = timeout({ attemptMs: 50 });
      const fetch = createFetch({
        fetch: deafFetch,
        onEvent: (e) => {
          if (e.type === 'breaker') events.push(e);
        },
        use: [
          retry({ attempts: 2, backoff: { initialMs: 250, jitter: 'none' } }),
          ...(order === 'breaker above the timeout' ? [breaker, attempt] : [attempt, breaker]),
        ],
      });
      const response = await fetch(`${server.origin}/x`);
      assert.equal(response.status, 200, order);
      await response.text();
      assert.deepEqual(
        events.map((e) => e.state),
        ['open', 'half-open', 'closed'],
        order,
      );
      assert.equal(server.requests.length, 2, order);
    });
  }
});

test('a reason phrase that quotes the credential the call sent shows none of it in the open circuit’s error, cause or event', async () => {
  await withReasonPhrase({ status: 503, phrase: 'Invalid token' }, async (origin) => {
    const events: BreakwaterEvent[] = [];
    const { breaker } = clocked({ consecutiveFailures: 1 });
    const fetch = createFetch({ use: [breaker], key: 'api', onEvent: (e) => events.push(e) });
    const error = await refusedAfter(fetch, origin, 503); // the 503 opened the circuit
    const shown = [error.message, error.cause.message, error.cause.statusText, JSON.stringify(error)];
    assertNoToken([...shown, JSON.stringify(events)]);
    if (error.cause.statusText !== 'Service Unavailable')
      assert.match(error.message, /\(last: HTTP 503 Invalid token \[redacted\]\)/);
  });
});

/**
 * Four keyed POSTs through `[retry, idempotencyKey, breaker, ...below]` to a real
 * `idempotency()` app whose handler always fails 500: `post` sends one and checks its
 * outcome. Each run is one failure, retry's resend getting the replay counts for nothing,
 * and a healthy GET beside them still goes and closes the count.
 */
async function assertReplaysCountForNothing(
  below: Middleware[],
  post: (fetch: FetchLike, url: string) => Promise<void>,
): Promise<void> {
  let runs = 0;
  const app = new Hono();
  app.use('/orders', idempotency());
  app.post('/orders', (c) => {
    runs++;
    return c.json({ error: 'down' }, 500);
  });
  app.get('/health', (c) => c.text('ok'));
  await withApp(app, async ({ origin }) => {
    const breaker = circuitBreaker();
    const fetch = createFetch({
      key: 'shop',
      use: [retry({ backoff: { initialMs: 1, jitter: 'none' } }), idempotencyKey(), breaker, ...below],
    });
    for (let call = 1; call <= 4; call++) await post(fetch, `${origin}/orders`);
    assert.equal(runs, 4);
    assert.equal(breaker.stats('shop')?.consecutiveFailures, 4);
    const health = await fetch(`${origin}/health`);
    assert.equal(await health.text(), 'ok');
    assert.equal(breaker.stats('shop')?.consecutiveFailures, 0);
  });
}

test('a replayed answer (Idempotent-Replayed: true, from breakwater/hono idempotency() or Stripe) counts for nothing: retry’s resend of a keyed POST answered 500 is one failure, not two', async () => {
  // The replay is the stored first answer: it says nothing about the server's health now.
  // Counted, each failing POST was 2 failures (the 500, then its replay), so the third
  // opened the circuit and the healthy GET beside it was refused.
  await assertReplaysCountForNothing([], async (fetch, url) => {
    const response = await fetch(url, { method: 'POST', body: '{}' });
    await response.body?.cancel();
    assert.equal(response.status, 500);
  });
});

test('a replayed answer thrown as an HttpStatusError inside the breaker (throwOnStatus() below it) counts for nothing too', async () => {
  // The error's headers are an allowlist: without Idempotent-Replayed, the replay of the
  // stored 500 that retry's resend got counted as a second failure.
  await assertReplaysCountForNothing([throwOnStatus()], async (fetch, url) => {
    await assert.rejects(fetch(url, { method: 'POST', body: '{}' }), (error: unknown) => {
      assert.ok(error instanceof HttpStatusError && error.status === 500, String(error));
      return true;
    });
  });
});

test('a replayed 200 whose stored headers say a quota was used up pauses nothing: the quota was the first answer’s, an hour ago', async () => {
  // A gateway's idempotency() stores a proxied model answer with the provider's quota
  // headers (remaining 0, reset in 20 s). Its replay to a repeat an hour later carries
  // them as they were: read as fresh, they paused the key for 20 s, and every caller of
  // it waited for a quota that had reset long before.
  let runs = 0;
  const app = new Hono();
  app.use('/chat', idempotency());
  app.post('/chat', (c) => {
    runs++;
    c.header('x-ratelimit-remaining-requests', '0');
    c.header('x-ratelimit-reset-requests', '20s');
    return c.json({ answer: 42 });
  });
  await withApp(app, async ({ origin }) => {
    const { clock, breaker } = clocked();
    const fetch = createFetch({ key: 'model', use: [breaker] });
    const post = { method: 'POST', body: '{}', headers: { 'idempotency-key': '"chat-1"' } };
    assert.equal(await send(fetch, `${origin}/chat`, post), 200);
    assert.equal(breaker.stats('model')?.pausedUntil?.getTime(), START + 20_000, 'the first answer pauses');
    clock.t += 3_600_000;
    const replay = await fetch(`${origin}/chat`, post);
    await replay.text();
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.equal(runs, 1);
    assert.equal(breaker.stats('model')?.pausedUntil, undefined);
  });
});

test('a CircuitOpenError names the method and redacted URL, and the state the call met: open, half-open, or paced (not "open")', async () => {
  // A paced key read `circuit "svc" is open paced: the server asked to wait (HTTP 429 …)`:
  // "open" for a key only paced, and the key alone, where DESIGN §4 asks for the request.
  const refusal = async (fetch: FetchLike, url: string, init?: RequestInit): Promise<string> => {
    try {
      await fetch(url, init);
    } catch (error) {
      assert.ok(error instanceof CircuitOpenError, 'a CircuitOpenError');
      return error.message;
    }
    return assert.fail('not refused');
  };
  await withServer(always({ status: 429, headers: { 'retry-after': '3600' } }), async (server) => {
    const fetch = createFetch({ use: [circuitBreaker()], key: 'svc' });
    assert.equal(await send(fetch, `${server.origin}/a`), 429);
    const message = await refusal(fetch, `${server.origin}/v1/chat?api_key=sk-live-123`, { method: 'POST' });
    assert.ok(
      message.startsWith(
        `POST ${server.origin}/v1/chat?api_key=[redacted] (server "svc") not sent, paced: the server asked to wait (HTTP 429 Too Many Requests)`,
      ),
      message,
    );
    assert.ok(!message.includes('open') && !message.includes('sk-live-123'), message);
  });
  await withServer(sequence({ status: 503 }, { status: 200, delayMs: 50 }), async (server) => {
    const { clock, breaker } = clocked({ consecutiveFailures: 1 });
    const fetch = createFetch({ use: [breaker], key: 'svc' });
    await send(fetch, server.origin);
    assert.match(
      await refusal(fetch, `${server.origin}/x`),
      /^GET http:\/\/127\.0\.0\.1:\d+\/x \(server "svc"\) not sent, circuit open after 1 consecutive failures \(last: HTTP 503 Service Unavailable\); next attempt at /,
    );
    clock.t += 100;
    const probe = send(fetch, server.origin);
    assert.match(
      await refusal(fetch, `${server.origin}/y`, { method: 'DELETE' }),
      /^DELETE http:\/\/127\.0\.0\.1:\d+\/y \(server "svc"\) not sent, circuit half-open while its probe is in flight, after 1 consecutive failures/,
    );
    assert.equal(await probe, 200);
  });
});
