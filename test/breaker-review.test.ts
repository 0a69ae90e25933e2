import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type CircuitBreakerOptions, circuitBreaker } from '../src/breaker.ts';
import type { FetchLike } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import { CircuitOpenError, HttpStatusError } from '../src/errors.ts';

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

/** Sends one call; resolves to its status, or to the name of the error it rejected with. */
function outcome(fetch: FetchLike, url: string, init?: RequestInit): Promise<number | string> {
  return fetch(url, init).then(
    (res) => res.status,
    (error: unknown) => (error as Error).name,
  );
}

const URL_A = 'http://api.test/';

test('an HttpStatusError with a NaN retryAfterMs opens the circuit for the schedule’s open time', async () => {
  const throwing: FetchLike = async () => {
    throw new HttpStatusError({ status: 503, retryAfterMs: Number.NaN });
  };
  const { clock, breaker } = clocked({ consecutiveFailures: 1 });
  const fetch = createFetch({ fetch: throwing, use: [breaker], key: 'api' });
  assert.equal(await outcome(fetch, URL_A), 'HttpStatusError');
  assert.equal(breaker.stats('api')?.retryAt?.getTime(), START + 100);
  await assert.rejects(fetch(URL_A), (e: unknown) => {
    assert.ok(e instanceof CircuitOpenError);
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
