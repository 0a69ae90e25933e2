import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type CircuitBreakerOptions, circuitBreaker } from '../src/breaker.ts';
import { Call, type FetchLike, type Middleware, type Next } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import { CircuitOpenError, HttpStatusError, NetworkError, TimeoutError } from '../src/errors.ts';
import type { BreakwaterEvent } from '../src/events.ts';
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
      assert.ok(e instanceof CircuitOpenError);
      assert.equal(e.code, 'CIRCUIT_OPEN');
      assert.equal(e.key, 'github-mcp');
      assert.equal(e.retryAt.getTime(), START + 100);
      assert.equal(
        e.message,
        'circuit "github-mcp" is open after 5 consecutive failures (last: HTTP 503 Service Unavailable); ' +
          'next attempt at 2026-11-29T17:03:00.100Z (in 0.1 s)',
      );
      assert.ok(e.cause instanceof HttpStatusError);
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
      assert.ok(e instanceof CircuitOpenError);
      assert.match(e.message, /is open while its probe is in flight, after 1 consecutive failures/);
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
      assert.ok(e instanceof CircuitOpenError);
      assert.match(e.message, /is open after a failed probe \(last: HTTP 500 Internal Server Error\)/);
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
      assert.ok(statuses.every((s) => s === status));
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
      assert.ok(e instanceof CircuitOpenError);
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
    assert.ok(e instanceof CircuitOpenError);
    assert.match(e.message, /after 3 consecutive failures \(last: network error ECONNREFUSED\)/);
    assert.ok(e.cause instanceof NetworkError);
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
        assert.ok(e instanceof CircuitOpenError);
        assert.match(
          e.message,
          /is open after 5 of the last 10 calls failed \(last: HTTP 500 Internal Server Error\)/,
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
      assert.ok(e instanceof CircuitOpenError);
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

test('the happy path hands the caller’s own input and init to fetch, and builds no Request', async () => {
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
  assert.equal(seen[0]?.[0], url);
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
      assert.ok(e instanceof TypeError);
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
