import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseRateLimit } from '../src/timing.ts';

test('an Integer of -0 in RateLimit reads as 0, not as negative zero', () => {
  // RFC 9651 §4.2.4: "-0" is a valid Integer, and its value is 0.
  const info = parseRateLimit({ ratelimit: '"a";r=-0;t=-0', 'ratelimit-policy': '"a";q=-0;w=-0' });
  assert.deepStrictEqual(info, {
    limits: [{ policy: 'a', remaining: 0, resetSeconds: 0 }],
    policies: [{ policy: 'a', quota: 0, windowSeconds: 0 }],
  });
});
