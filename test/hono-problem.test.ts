import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PROBLEM_JSON, problemResponse, retryAfterSeconds } from '../adapters/hono/problem.ts';
import { MAX_DELAY_MS, retryDelay } from '../src/timing.ts';

test('retryAfterSeconds rounds a wait up to whole seconds, so a client never comes back early', () => {
  assert.equal(retryAfterSeconds(1), '1');
  assert.equal(retryAfterSeconds(1000), '1');
  assert.equal(retryAfterSeconds(1001), '2');
  assert.equal(retryAfterSeconds(0), '0');
});

test('retryAfterSeconds gives delay-seconds a client can parse for any number: 0 for none, at most the longest timer', () => {
  for (const ms of [-5, Number.NaN, Number.NEGATIVE_INFINITY])
    assert.equal(retryAfterSeconds(ms), '0', String(ms));
  for (const ms of [Number.POSITIVE_INFINITY, 1e300, MAX_DELAY_MS]) {
    const value = retryAfterSeconds(ms);
    assert.match(value, /^\d+$/, String(ms));
    assert.equal(value, String(Math.ceil(MAX_DELAY_MS / 1000)));
    assert.equal(retryDelay({ 'retry-after': value }), MAX_DELAY_MS);
  }
});

test('problemResponse answers with problem+json, about:blank by default, and Retry-After when a wait is given', async () => {
  const res = problemResponse({ status: 503, title: 'Service Unavailable', detail: 'busy' }, 1500, {
    'x-should-retry': 'true',
  });
  assert.equal(res.status, 503);
  assert.equal(res.headers.get('content-type'), PROBLEM_JSON);
  assert.equal(res.headers.get('retry-after'), '2');
  assert.equal(res.headers.get('x-should-retry'), 'true');
  assert.deepEqual(await res.json(), {
    type: 'about:blank',
    status: 503,
    title: 'Service Unavailable',
    detail: 'busy',
  });
  assert.equal(problemResponse({ status: 400, title: 'Bad Request' }).headers.get('retry-after'), null);
});

test('problemResponse takes a detail passed through as undefined (exactOptionalPropertyTypes): the body has none', async () => {
  // A caller's own optional message, handed on as it is.
  const failure: { message?: string | undefined } = {};
  const res = problemResponse({ status: 502, title: 'Bad Gateway', detail: failure.message });
  assert.deepEqual(await res.json(), { type: 'about:blank', status: 502, title: 'Bad Gateway' });
});

test('problemResponse refuses a status that is not an error status (an integer 400 to 599) with a TypeError naming it', () => {
  // 999 was a 200 with no status in its body; 'x' a RangeError from the Response constructor.
  for (const status of [999, 200, 399, 600, 404.5, Number.NaN, 'x', '503', undefined, null]) {
    assert.throws(
      () => problemResponse({ status, title: 'Oops' } as never),
      (e: unknown) =>
        e instanceof TypeError &&
        /^problemResponse\(\): status must be a whole number from 400 to 599 \(got /.test(e.message),
      String(status),
    );
  }
  // A bare status instead of a problem is shown as itself.
  assert.throws(() => problemResponse(999 as never), { name: 'TypeError', message: /\(got 999\)/ });
  assert.throws(() => problemResponse(null as never), { name: 'TypeError', message: /\(got null\)/ });
  for (const status of [400, 499, 599]) {
    assert.equal(problemResponse({ status, title: 'x' }).status, status);
  }
});
