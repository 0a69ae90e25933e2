import assert from 'node:assert/strict';
import { test } from 'node:test';
import { circuitBreaker } from '../src/breaker.ts';
import type { FetchLike, Middleware } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import { CircuitOpenError, HttpStatusError } from '../src/errors.ts';
import type { BreakwaterEvent, PacedEvent } from '../src/events.ts';
import { always, sequence, withServer } from './helpers/server.ts';

/** A short, exact schedule for the pauses a 429 without a delay imposes. */
const OPEN = { initialMs: 100, factor: 2, maxMs: 10_000, jitter: 'none' } as const;

/** Sends one call and consumes the body; resolves to the status. */
async function send(fetch: FetchLike, url: string, init?: RequestInit): Promise<number> {
  const res = await fetch(url, init);
  await res.text();
  return res.status;
}

const tooMany = (delayMs: number) => ({ status: 429, headers: { 'retry-after-ms': String(delayMs) } });

/** Sets a deadline 100 ms out, as `timeout({ totalMs })` would, before the breaker sees the call. */
const deadline: Middleware = async function deadline(call, next) {
  call.deadline = Date.now() + 100;
  return next(call);
};

test('one 429 with retry-after-ms: 500 holds all 20 concurrent callers on the key, then lets them all through', async () => {
  await withServer(sequence(tooMany(500), { status: 200, body: 'ok' }), async (server) => {
    const events: BreakwaterEvent[] = [];
    const fetch = createFetch({
      use: [circuitBreaker({ open: OPEN })],
      key: 'model',
      onEvent: (e) => events.push(e),
    });
    const started = Date.now();
    assert.equal(await send(fetch, server.origin), 429);
    const elapsed = await Promise.all(
      Array.from({ length: 20 }, async () => {
        assert.equal(await send(fetch, server.origin), 200);
        return Date.now() - started;
      }),
    );
    assert.equal(server.requests.length, 21, 'every caller reached the server after the pause');
    for (const ms of elapsed) {
      assert.ok(ms >= 500, `waited ${ms} ms`);
      assert.ok(ms < 900, `waited ${ms} ms`);
    }
    const paced = events.filter((e): e is PacedEvent => e.type === 'paced');
    assert.equal(paced.filter((e) => e.phase === 'start').length, 1);
    assert.equal(paced.find((e) => e.phase === 'start')?.delayMs, 500);
    assert.equal(paced.filter((e) => e.phase === 'wait').length, 20);
  });
});

test('a paused key does not hold another key', async () => {
  await withServer(always(tooMany(1000)), async (paused) => {
    await withServer(always({ status: 200 }), async (other) => {
      const breaker = circuitBreaker({ open: OPEN });
      const fetch = createFetch({ use: [breaker] });
      assert.equal(await send(fetch, paused.origin), 429);
      assert.notEqual(breaker.stats(paused.origin)?.pausedUntil, undefined);
      const started = Date.now();
      assert.equal(await send(fetch, other.origin), 200);
      assert.ok(Date.now() - started < 200, 'the other server answered at once');
      assert.equal(breaker.stats(other.origin)?.pausedUntil, undefined);
    });
  });
});

test('a pause the server wants longer than maxRetryAfterMs fails the next call fast', async () => {
  await withServer(always(tooMany(5000)), async (server) => {
    const breaker = circuitBreaker({ open: OPEN, maxRetryAfterMs: 200 });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    assert.equal(await send(fetch, server.origin), 429);
    const pausedUntil = breaker.stats('model')?.pausedUntil;
    const started = Date.now();
    await assert.rejects(fetch(server.origin), (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError);
      assert.equal(e.key, 'model');
      assert.equal(e.retryAt.getTime(), pausedUntil?.getTime(), 'retryAt is the end of the (capped) pause');
      assert.match(
        e.message,
        /^circuit "model" is open paced: the server asked to wait 5000 ms \(HTTP 429 Too Many Requests\), longer than the 200 ms allowed; next attempt at /,
      );
      assert.ok(e.cause instanceof HttpStatusError);
      assert.equal(e.cause.status, 429);
      return true;
    });
    assert.ok(Date.now() - started < 50, 'failed at once');
    assert.equal(server.requests.length, 1);
  });
});

test('a pause longer than the call’s remaining deadline fails the call fast', async () => {
  await withServer(always(tooMany(500)), async (server) => {
    const fetch = createFetch({ use: [deadline, circuitBreaker({ open: OPEN })], key: 'model' });
    assert.equal(await send(fetch, server.origin), 429);
    const started = Date.now();
    await assert.rejects(fetch(server.origin), (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError);
      assert.match(
        e.message,
        /is open paced: the server asked to wait \(HTTP 429 Too Many Requests\), past this call's deadline;/,
      );
      assert.ok(e.retryAt.getTime() - Date.now() > 300);
      return true;
    });
    assert.ok(Date.now() - started < 50, 'failed at once');
    assert.equal(server.requests.length, 1);
  });
});

test('an abort during a pause wait rejects within 50 ms with the caller’s reason', async () => {
  await withServer(always(tooMany(1000)), async (server) => {
    const fetch = createFetch({ use: [circuitBreaker({ open: OPEN })] });
    assert.equal(await send(fetch, server.origin), 429);
    const controller = new AbortController();
    const reason = new Error('the user closed the chat');
    const waiting = fetch(server.origin, { signal: controller.signal });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const abortedAt = Date.now();
    controller.abort(reason);
    await assert.rejects(waiting, (e: unknown) => e === reason);
    assert.ok(Date.now() - abortedAt < 50, `rejected ${Date.now() - abortedAt} ms after the abort`);
    assert.equal(server.requests.length, 1, 'nothing was sent');
  });
});

test('a 429 without a delay pauses the key for the next step of the open schedule', async () => {
  await withServer(sequence({ status: 429 }, { status: 429 }, { status: 200 }), async (server) => {
    const events: BreakwaterEvent[] = [];
    const fetch = createFetch({ use: [circuitBreaker({ open: OPEN })], onEvent: (e) => events.push(e) });
    const started = Date.now();
    assert.equal(await send(fetch, server.origin), 429);
    assert.equal(await send(fetch, server.origin), 429, 'sent after waiting 100 ms');
    assert.equal(await send(fetch, server.origin), 200, 'sent after waiting 200 ms more');
    assert.ok(Date.now() - started >= 300);
    const starts = events.filter((e): e is PacedEvent => e.type === 'paced' && e.phase === 'start');
    assert.deepEqual(
      starts.map((e) => e.delayMs),
      [100, 200],
    );
  });
});

test('429s never open the circuit', async () => {
  await withServer(always(tooMany(0)), async (server) => {
    const breaker = circuitBreaker({ open: OPEN, consecutiveFailures: 2, minimumThroughput: 2 });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    for (let i = 0; i < 10; i++) assert.equal(await send(fetch, server.origin), 429);
    const stats = breaker.stats('model');
    assert.equal(stats?.state, 'closed');
    assert.equal(stats?.consecutiveFailures, 0);
    assert.equal(stats?.windowFailures, 0);
    assert.equal(server.requests.length, 10);
  });
});

test('a 503 with a delay both pauses the key and counts as a failure', async () => {
  const unavailable = { status: 503, headers: { 'retry-after-ms': '300' } };
  await withServer(sequence(unavailable, { status: 200 }), async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    const started = Date.now();
    assert.equal(await send(fetch, server.origin), 503);
    const stats = breaker.stats('model');
    assert.equal(stats?.state, 'closed');
    assert.equal(stats?.consecutiveFailures, 1);
    assert.equal(stats?.windowFailures, 1);
    assert.notEqual(stats?.pausedUntil, undefined);
    assert.equal(await send(fetch, server.origin), 200);
    assert.ok(Date.now() - started >= 300, 'the second call waited out the pause');
    assert.equal(breaker.stats('model')?.consecutiveFailures, 0);
  });
});
