import assert from 'node:assert/strict';
import process from 'node:process';
import { test } from 'node:test';
import fc from 'fast-check';
import { createFetch } from '../src/chain.ts';
import { RetryAfterTooLongError } from '../src/errors.ts';
import { retry } from '../src/retry.ts';
import {
  type HeadersLike,
  MAX_DELAY_MS,
  MAX_HEADER_CHARS,
  parseRateLimit,
  quotaLeft,
  type RateLimitPolicy,
  type RateLimitStatus,
  retryDelay,
  shouldRetryHeader,
} from '../src/timing.ts';
import { always, type TestServer, withServer } from './helpers/server.ts';

// Every date-dependent test uses this instant: Sunday 2026-11-29T17:00:00Z.
const NOW = Date.UTC(2026, 10, 29, 17, 0, 0);

function delay(headers: HeadersLike): number | undefined {
  return retryDelay(headers, NOW);
}

// --- Retry-After: delay-seconds (RFC 9110 §10.2.3) ---

test('Retry-After 0 asks for no wait', () => {
  assert.equal(delay({ 'retry-after': '0' }), 0);
});

test('Retry-After 1 is one second', () => {
  assert.equal(delay({ 'retry-after': '1' }), 1_000);
});

test('Retry-After 120 is two minutes', () => {
  assert.equal(delay({ 'retry-after': '120' }), 120_000);
});

test('Retry-After ignores surrounding whitespace', () => {
  assert.equal(delay({ 'retry-after': ' \t5 ' }), 5_000);
});

test('Retry-After with a sign is not delay-seconds', () => {
  assert.equal(delay({ 'retry-after': '-1' }), undefined);
  assert.equal(delay({ 'retry-after': '+1' }), undefined);
});

test('Retry-After with a fraction is not delay-seconds', () => {
  assert.equal(delay({ 'retry-after': '1.5' }), undefined);
});

test('Retry-After in exponent notation is not delay-seconds', () => {
  assert.equal(delay({ 'retry-after': '1e3' }), undefined);
});

test('Retry-After in hex is not delay-seconds', () => {
  assert.equal(delay({ 'retry-after': '0x10' }), undefined);
});

test('an empty Retry-After asks for nothing', () => {
  assert.equal(delay({ 'retry-after': '' }), undefined);
  assert.equal(delay({ 'retry-after': '   ' }), undefined);
});

test('a 400-digit Retry-After is capped at MAX_DELAY_MS', () => {
  const ms = delay({ 'retry-after': '9'.repeat(400) });
  assert.equal(ms, MAX_DELAY_MS);
  assert.ok(Number.isFinite(ms), 'Number.isFinite(ms)');
});

test('a Retry-After just over the cap returns the cap', () => {
  assert.equal(delay({ 'retry-after': String(Math.ceil(MAX_DELAY_MS / 1000) + 1) }), MAX_DELAY_MS);
});

// --- Retry-After: HTTP-date (RFC 9110 §5.6.7) ---

test('Retry-After as an IMF-fixdate is the time until that date', () => {
  assert.equal(delay({ 'retry-after': 'Sun, 29 Nov 2026 17:00:30 GMT' }), 30_000);
});

test('Retry-After as an RFC 850 date is the time until that date', () => {
  assert.equal(delay({ 'retry-after': 'Sunday, 29-Nov-26 17:01:00 GMT' }), 60_000);
});

test('Retry-After as an asctime date with a space-padded day is the time until that date', () => {
  assert.equal(delay({ 'retry-after': 'Tue Dec  1 17:00:00 2026' }), 2 * 86_400_000);
});

test('Retry-After as an asctime date with a two-digit day is the time until that date', () => {
  assert.equal(delay({ 'retry-after': 'Sun Nov 29 17:00:05 2026' }), 5_000);
});

test('Retry-After as a past date asks for no wait', () => {
  assert.equal(delay({ 'retry-after': 'Sun, 06 Nov 1994 08:49:37 GMT' }), 0);
});

test('Retry-After on 30 February is invalid, not rolled over to March', () => {
  assert.equal(delay({ 'retry-after': 'Tue, 30 Feb 2027 00:00:00 GMT' }), undefined);
});

test('Retry-After at hour 25 is invalid, not rolled over to the next day', () => {
  assert.equal(delay({ 'retry-after': 'Mon, 30 Nov 2026 25:00:00 GMT' }), undefined);
});

test('Retry-After on 29 February is valid only in a leap year', () => {
  const now = Date.UTC(2028, 1, 28, 0, 0, 0);
  assert.equal(retryDelay({ 'retry-after': 'Tue, 29 Feb 2028 00:00:00 GMT' }, now), 86_400_000);
  assert.equal(retryDelay({ 'retry-after': 'Mon, 29 Feb 2027 00:00:00 GMT' }, now), undefined);
});

test('Retry-After with a leap second is read as second 59', () => {
  const now = Date.UTC(2026, 11, 31, 23, 59, 0);
  assert.equal(retryDelay({ 'retry-after': 'Thu, 31 Dec 2026 23:59:60 GMT' }, now), 59_000);
});

test('Retry-After with a seconds field above 60 is invalid', () => {
  assert.equal(delay({ 'retry-after': 'Thu, 31 Dec 2026 23:59:61 GMT' }), undefined);
});

test('Retry-After dates must be in GMT', () => {
  assert.equal(delay({ 'retry-after': 'Sun, 29 Nov 2026 17:00:30 UTC' }), undefined);
  assert.equal(delay({ 'retry-after': 'Sun, 29 Nov 2026 17:00:30 +0000' }), undefined);
  assert.equal(delay({ 'retry-after': 'Sunday, 29-Nov-26 17:01:00 PST' }), undefined);
});

test('Retry-After dates need a valid weekday name but not the matching one', () => {
  assert.equal(delay({ 'retry-after': 'Xyz, 29 Nov 2026 17:00:30 GMT' }), undefined);
  assert.equal(delay({ 'retry-after': 'Wed, 29 Nov 2026 17:00:30 GMT' }), 30_000);
});

test('Retry-After dates are case-sensitive as RFC 9110 says', () => {
  assert.equal(delay({ 'retry-after': 'sun, 29 nov 2026 17:00:30 gmt' }), undefined);
});

test('Retry-After in ISO 8601 is not an HTTP-date', () => {
  assert.equal(delay({ 'retry-after': '2026-11-29T17:00:30Z' }), undefined);
});

test('an RFC 850 two-digit year up to 50 years ahead is in the future', () => {
  // 2076 is exactly 50 years after 2026: not "more than 50 years in the future".
  assert.equal(delay({ 'retry-after': 'Sunday, 01-Jan-76 00:00:00 GMT' }), MAX_DELAY_MS);
});

test('an RFC 850 two-digit year more than 50 years ahead is the most recent past one', () => {
  // 2077 would be 51 years ahead, so it means 1977: long past.
  assert.equal(delay({ 'retry-after': 'Saturday, 01-Jan-77 00:00:00 GMT' }), 0);
});

test('an RFC 850 two-digit year is resolved relative to now, not a fixed century', () => {
  // In 2099, "01" is 2101 (2 years ahead), not 2001.
  const now = Date.UTC(2099, 11, 31, 23, 0, 0);
  assert.equal(retryDelay({ 'retry-after': 'Saturday, 01-Jan-01 00:00:00 GMT' }, now), MAX_DELAY_MS);
});

// --- retry-after-ms ---

test('retry-after-ms is read as milliseconds', () => {
  assert.equal(delay({ 'retry-after-ms': '1500' }), 1_500);
});

test('retry-after-ms with a fraction rounds up to a whole millisecond', () => {
  assert.equal(delay({ 'retry-after-ms': '20.1' }), 21);
});

test('retry-after-ms takes precedence over Retry-After', () => {
  assert.equal(delay({ 'retry-after-ms': '250', 'retry-after': '10' }), 250);
});

test('a malformed retry-after-ms falls through to Retry-After', () => {
  assert.equal(delay({ 'retry-after-ms': '-5', 'retry-after': '10' }), 10_000);
  assert.equal(delay({ 'retry-after-ms': '.5', 'retry-after': '10' }), 10_000);
});

test('a huge retry-after-ms is capped at MAX_DELAY_MS', () => {
  assert.equal(delay({ 'retry-after-ms': `${'9'.repeat(400)}.5` }), MAX_DELAY_MS);
});

// --- RateLimit structured field (draft-ietf-httpapi-ratelimit-headers) ---

test('RateLimit with r=0 asks to wait t seconds', () => {
  assert.equal(delay({ ratelimit: '"default";r=0;t=30' }), 30_000);
});

test('RateLimit with quota left asks for no wait', () => {
  assert.equal(delay({ ratelimit: '"default";r=5;t=30' }), undefined);
});

test('RateLimit with several exhausted policies waits for the longest reset', () => {
  assert.equal(delay({ ratelimit: '"a";r=5;t=10, "b";r=0;t=30, "c";r=0;t=20' }), 30_000);
});

test('RateLimit ignores a reset on a policy that still has quota', () => {
  assert.equal(delay({ ratelimit: '"a";r=5;t=100, "b";r=0;t=30' }), 30_000);
});

test('RateLimit skips a malformed member and still reads the rest', () => {
  assert.equal(delay({ ratelimit: '"a";r=0;t=@@, "b";r=0;t=7' }), 7_000);
  assert.equal(delay({ ratelimit: '"a, b";r=0;x=%, "c";r=0;t=8' }), 8_000);
});

test('Retry-After takes precedence over RateLimit', () => {
  assert.equal(delay({ 'retry-after': '3', ratelimit: '"default";r=0;t=30' }), 3_000);
});

test('RateLimit with quota left falls through to RateLimit-Reset', () => {
  assert.equal(delay({ ratelimit: '"default";r=5;t=30', 'ratelimit-reset': '4' }), 4_000);
});

// --- RateLimit-Reset family ---

test('RateLimit-Reset below the epoch threshold is delay seconds', () => {
  assert.equal(delay({ 'ratelimit-reset': '45' }), 45_000);
});

test('X-RateLimit-Reset at or above 2024-01-01 is epoch seconds', () => {
  assert.equal(delay({ 'x-ratelimit-reset': String(NOW / 1000 + 90) }), 90_000);
});

test('X-RateLimit-Reset at or above 2024-01-01 in milliseconds is epoch milliseconds, not a wait of 54,000 years', () => {
  assert.equal(delay({ 'x-ratelimit-reset': String(NOW + 30_000) }), 30_000);
  assert.equal(delay({ 'ratelimit-reset': String(NOW + 1_500), 'ratelimit-remaining': '0' }), 1_500);
  // One just below the threshold is still epoch seconds (year 55,970: the longest wait).
  assert.equal(delay({ 'x-ratelimit-reset': '1704067199999' }), MAX_DELAY_MS);
  assert.equal(delay({ 'x-ratelimit-reset': '1704067200000' }), 0);
});

test('an epoch reset in the past asks for no wait', () => {
  assert.equal(delay({ 'x-ratelimit-reset': '1704067200' }), 0);
});

test('X-Rate-Limit-Reset is read too', () => {
  assert.equal(delay({ 'x-rate-limit-reset': '12' }), 12_000);
});

test('a reset is ignored while the matching remaining count says quota is left', () => {
  // GitHub sends X-RateLimit-Reset on every response: a 502 must not wait out the hour.
  assert.equal(
    delay({ 'x-ratelimit-reset': String(NOW / 1000 + 3600), 'x-ratelimit-remaining': '4999' }),
    undefined,
  );
  assert.equal(
    delay({ 'x-ratelimit-reset': String(NOW / 1000 + 3600), 'x-ratelimit-remaining': '0' }),
    3_600_000,
  );
});

test('a non-integer RateLimit-Reset asks for nothing', () => {
  assert.equal(delay({ 'ratelimit-reset': '1.5' }), undefined);
});

// --- OpenAI x-ratelimit-reset-* (Go durations) ---

for (const [duration, ms] of [
  ['20ms', 20],
  ['1s', 1_000],
  ['6m0s', 360_000],
  ['1h2m3.5s', 3_723_500],
  ['0.5s', 500],
  ['0.007s', 7],
  ['1.5h', 5_400_000],
  ['1500us', 2],
  ['1500\u00b5s', 2],
  ['999ns', 1],
  ['0', 0],
] as const) {
  test(`an OpenAI reset of ${duration} is ${ms} ms once requests are exhausted`, () => {
    assert.equal(
      delay({ 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': duration }),
      ms,
    );
  });
}

for (const garbage of ['', '1', 's', '1x', '-1s', '1.2.3s', '1h 2m', 'ms1']) {
  test(`an OpenAI reset of ${JSON.stringify(garbage)} asks for nothing`, () => {
    assert.equal(
      delay({ 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': garbage }),
      undefined,
    );
  });
}

test('an OpenAI reset counts only when the matching remaining is 0', () => {
  assert.equal(
    delay({ 'x-ratelimit-remaining-requests': '3', 'x-ratelimit-reset-requests': '1s' }),
    undefined,
  );
  assert.equal(delay({ 'x-ratelimit-reset-requests': '1s' }), undefined);
  assert.equal(delay({ 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-tokens': '1s' }), undefined);
});

test('when both OpenAI limits are exhausted the longer reset wins', () => {
  const headers = {
    'x-ratelimit-remaining-requests': '0',
    'x-ratelimit-reset-requests': '2s',
    'x-ratelimit-remaining-tokens': '0',
    'x-ratelimit-reset-tokens': '6m0s',
  };
  assert.equal(delay(headers), 360_000);
});

test('an exhausted OpenAI limit beats one with quota left', () => {
  const headers = {
    'x-ratelimit-remaining-requests': '10',
    'x-ratelimit-reset-requests': '1h',
    'x-ratelimit-remaining-tokens': '0',
    'x-ratelimit-reset-tokens': '20ms',
  };
  assert.equal(delay(headers), 20);
});

// --- Anthropic anthropic-ratelimit-*-reset (RFC 3339) ---

test('an Anthropic reset in UTC is the time until it once that limit is exhausted', () => {
  const headers = {
    'anthropic-ratelimit-requests-remaining': '0',
    'anthropic-ratelimit-requests-reset': '2026-11-29T17:03:12Z',
  };
  assert.equal(delay(headers), 192_000);
});

test('an Anthropic reset with fractional seconds rounds up', () => {
  const headers = {
    'anthropic-ratelimit-tokens-remaining': '0',
    'anthropic-ratelimit-tokens-reset': '2026-11-29T17:00:01.2345Z',
  };
  assert.equal(delay(headers), 1_235);
});

test('an Anthropic reset with millisecond precision is not rounded past the millisecond', () => {
  const headers = {
    'anthropic-ratelimit-tokens-remaining': '0',
    'anthropic-ratelimit-tokens-reset': '2026-11-29T17:00:00.007Z',
  };
  assert.equal(delay(headers), 7);
});

test('an Anthropic reset with a +01:00 offset is converted to UTC', () => {
  const headers = {
    'anthropic-ratelimit-input-tokens-remaining': '0',
    'anthropic-ratelimit-input-tokens-reset': '2026-11-29T18:00:10+01:00',
  };
  assert.equal(delay(headers), 10_000);
});

test('an Anthropic reset counts only when the matching remaining is 0', () => {
  assert.equal(
    delay({
      'anthropic-ratelimit-requests-remaining': '4',
      'anthropic-ratelimit-requests-reset': '2026-11-29T17:03:12Z',
    }),
    undefined,
  );
  assert.equal(delay({ 'anthropic-ratelimit-requests-reset': '2026-11-29T17:03:12Z' }), undefined);
});

test('when several Anthropic limits are exhausted the latest reset wins', () => {
  const headers = {
    'anthropic-ratelimit-requests-remaining': '0',
    'anthropic-ratelimit-requests-reset': '2026-11-29T17:00:05Z',
    'anthropic-ratelimit-output-tokens-remaining': '0',
    'anthropic-ratelimit-output-tokens-reset': '2026-11-29T17:00:40Z',
  };
  assert.equal(delay(headers), 40_000);
});

test('an Anthropic reset that is not a valid RFC 3339 date asks for nothing', () => {
  for (const reset of [
    '2026-02-30T00:00:00Z',
    '2026-11-29T25:00:00Z',
    '2026-11-29 17:03:12',
    'tomorrow',
    '1764435792',
  ]) {
    assert.equal(
      delay({ 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': reset }),
      undefined,
      reset,
    );
  }
});

test('a past Anthropic reset asks for no wait', () => {
  const headers = {
    'anthropic-ratelimit-requests-remaining': '0',
    'anthropic-ratelimit-requests-reset': '2026-11-29T16:59:00Z',
  };
  assert.equal(delay(headers), 0);
});

test('no timing header means no delay', () => {
  assert.equal(delay({ 'content-type': 'application/json' }), undefined);
  assert.equal(delay(new Headers()), undefined);
});

// --- Header shapes ---

test('a Headers instance is read', () => {
  assert.equal(delay(new Headers({ 'Retry-After': '7' })), 7_000);
});

test('plain object header names match case-insensitively', () => {
  assert.equal(delay({ 'RETRY-AFTER': '7' }), 7_000);
  assert.equal(delay({ 'Retry-After-Ms': '70' }), 70);
  assert.equal(delay({ RateLimit: '"default";r=0;t=9' }), 9_000);
});

test('plain object array values are joined like repeated field lines', () => {
  assert.equal(delay({ ratelimit: ['"a";r=0;t=3', '"b";r=0;t=4'] }), 4_000);
  assert.equal(delay({ 'retry-after': ['1', '2'] }), 2_000);
});

test('a timing field repeated with one value (a proxy adding its own copy) reads as that value', async () => {
  // Real field lines on a real socket: each runtime's fetch joins them with ", ".
  const lines: Array<[Record<string, string[]>, number | undefined]> = [
    [{ 'retry-after': ['2', '2'] }, 2_000],
    [{ 'retry-after': ['2', '2', '2'] }, 2_000],
    [{ 'retry-after': ['Sun, 29 Nov 2026 17:00:30 GMT', 'Sun, 29 Nov 2026 17:00:30 GMT'] }, 30_000],
    [{ 'retry-after-ms': ['150', '150'] }, 150],
    [{ 'x-ratelimit-reset': ['7', '7'], 'x-ratelimit-remaining': ['0', '0'] }, 7_000],
    [{ 'x-ratelimit-reset-requests': ['1s', '1s'], 'x-ratelimit-remaining-requests': ['0', '0'] }, 1_000],
  ];
  for (const [headers, expected] of lines) {
    await withServer(always({ status: 503, headers }), async (server) => {
      const res = await fetch(server.origin);
      await res.body?.cancel();
      assert.equal(retryDelay(res.headers, NOW), expected, JSON.stringify(headers));
    });
  }
  await withServer(
    always({ status: 503, headers: { 'x-should-retry': ['false', 'false'] } }),
    async (server) => {
      const res = await fetch(server.origin);
      await res.body?.cancel();
      assert.equal(shouldRetryHeader(res.headers), false);
    },
  );
});

test('copies of one value joined by a bare comma or with spaces around it (RFC 9110 §5.3 OWS) read as that value', async () => {
  // One field line as a combining intermediary may send it: a comma and optional
  // whitespace (OWS) between the copies, not always fetch's own ", ".
  const date = 'Sun, 29 Nov 2026 17:00:30 GMT';
  const lines: Array<[Record<string, string>, number | undefined]> = [
    [{ 'retry-after': '2,2' }, 2_000],
    [{ 'retry-after': '2 , 2' }, 2_000],
    [{ 'retry-after': '2,\t2 ,2' }, 2_000],
    [{ 'retry-after': `${date},${date}` }, 30_000],
    [{ 'retry-after': `${date} ,  ${date}` }, 30_000],
    [{ 'retry-after-ms': '150,150' }, 150],
    [{ 'x-ratelimit-reset-requests': '1s,1s', 'x-ratelimit-remaining-requests': '0,0' }, 1_000],
    [{ 'retry-after': '1,2' }, 2_000],
    [{ 'retry-after': `${date},Sun, 29 Nov 2026 17:00:31 GMT` }, 31_000],
  ];
  for (const [headers, expected] of lines) {
    await withServer(always({ status: 503, headers }), async (server) => {
      const res = await fetch(server.origin);
      await res.body?.cancel();
      assert.equal(retryDelay(res.headers, NOW), expected, JSON.stringify(headers));
    });
  }
  // A plain object may hold the value as given, spaces and all.
  assert.equal(delay({ 'retry-after': ' 2 , 2 ' }), 2_000);
  assert.equal(shouldRetryHeader({ 'x-should-retry': 'false,false' }), false);
});

test('Retry-After and retry-after-ms sent twice with different values read as the longest: a proxy and the origin each asked for a wait', async () => {
  // Real field lines on a real socket: each runtime's fetch joins them with ", ", and the
  // shorter copy first or last, delay-seconds or dates, the longest is waited out.
  const date = (s: number) => `Sun, 29 Nov 2026 17:00:${String(s).padStart(2, '0')} GMT`;
  const lines: Array<[Record<string, string[]>, number]> = [
    [{ 'retry-after': ['1', '2'] }, 2_000],
    [{ 'retry-after': ['120', '30'] }, 120_000],
    [{ 'retry-after': ['5', '30', '10'] }, 30_000],
    [{ 'retry-after': [date(30), date(45)] }, 45_000],
    [{ 'retry-after': [date(45), date(30)] }, 45_000],
    [{ 'retry-after': ['40', date(30)] }, 40_000],
    [{ 'retry-after': [date(30), '40'] }, 40_000],
    [{ 'retry-after': ['Sunday, 29-Nov-26 17:00:50 GMT', '3'] }, 50_000],
    [{ 'retry-after': ['Sun Nov 29 17:00:20 2026', '3'] }, 20_000],
    // A date already past is no wait; the other copy still asks for one.
    [{ 'retry-after': ['Sun, 29 Nov 2026 16:00:00 GMT', '7'] }, 7_000],
    [{ 'retry-after-ms': ['150', '2500.5'] }, 2_501],
  ];
  for (const [headers, expected] of lines) {
    await withServer(always({ status: 503, headers }), async (server) => {
      const res = await fetch(server.origin);
      await res.body?.cancel();
      assert.equal(retryDelay(res.headers, NOW), expected, JSON.stringify(headers));
    });
  }
  // The same in a Headers built here, and in the forms an intermediary may write.
  const headers = new Headers();
  headers.append('Retry-After', '3');
  headers.append('Retry-After', '9');
  assert.equal(delay(headers), 9_000);
  assert.equal(delay({ 'retry-after': '9,3' }), 9_000);
  assert.equal(delay({ 'retry-after': ` 3 ,\t${date(30)} , 9 ` }), 30_000);
});

test('a copy of Retry-After that cannot be read is passed over: the readable copies still ask for their wait', () => {
  assert.equal(delay({ 'retry-after': '30, soon' }), 30_000);
  assert.equal(delay({ 'retry-after': 'soon, 30' }), 30_000);
  assert.equal(delay({ 'retry-after': '30, -1, 1.5, 1e3' }), 30_000);
  // Empty pieces (RFC 9110 §5.6.1.2), and a weekday with no date after it.
  assert.equal(delay({ 'retry-after': ', 30,' }), 30_000);
  assert.equal(delay({ 'retry-after': '30, Wed' }), 30_000);
  assert.equal(delay({ 'retry-after': 'Wed, 30' }), 30_000);
  // A date that is not GMT, or rolls over, is no date; the number beside it still is.
  assert.equal(delay({ 'retry-after': 'Sun, 29 Nov 2026 17:05:00 UTC, 30' }), 30_000);
  assert.equal(delay({ 'retry-after': 'Tue, 30 Feb 2027 00:00:00 GMT, 30' }), 30_000);
  assert.equal(delay({ 'retry-after-ms': '250, soon' }), 250);
  // Nothing readable at all is no wait named, as before.
  assert.equal(delay({ 'retry-after': 'soon, later' }), undefined);
  assert.equal(delay({ 'retry-after': ', ,' }), undefined);
  assert.equal(delay({ 'retry-after-ms': 'soon, later' }), undefined);
});

test('the RateLimit-Reset family, OpenAI’s and Anthropic’s resets sent twice with different values read as the longest: each layer’s quota is restored only then', async () => {
  // Real field lines on a real socket: each runtime's fetch joins them with ", ".
  const iso = (s: number) => new Date(NOW + s * 1000).toISOString();
  const epoch = (s: number) => String((NOW + s * 1000) / 1000);
  const lines: Array<[Record<string, string[]>, number]> = [
    [{ 'x-ratelimit-reset': ['30', '60'], 'x-ratelimit-remaining': ['0', '0'] }, 60_000],
    [{ 'ratelimit-reset': ['60', '30'], 'ratelimit-remaining': ['0'] }, 60_000],
    [{ 'x-rate-limit-reset': [epoch(45), '30'], 'x-rate-limit-remaining': ['0'] }, 45_000],
    [{ 'x-ratelimit-reset': ['soon', '30'], 'x-ratelimit-remaining': ['0'] }, 30_000],
    [{ 'x-ratelimit-reset-requests': ['1s', '6m0s'], 'x-ratelimit-remaining-requests': ['0', '0'] }, 360_000],
    [{ 'x-ratelimit-reset-tokens': ['20ms', 'soon', '1.5s'], 'x-ratelimit-remaining-tokens': ['0'] }, 1_500],
    [
      {
        'anthropic-ratelimit-requests-reset': [iso(40), iso(20)],
        'anthropic-ratelimit-requests-remaining': ['0', '0'],
      },
      40_000,
    ],
  ];
  for (const [headers, expected] of lines) {
    await withServer(always({ status: 429, headers }), async (server) => {
      const res = await fetch(server.origin);
      await res.body?.cancel();
      assert.equal(retryDelay(res.headers, NOW), expected, JSON.stringify(headers));
    });
  }
});

test('a -Remaining sent twice with different values reads as the fewest left: one layer’s quota used up asks for its reset, one left in every layer vetoes it', async () => {
  const lines: Array<[Record<string, string[]>, number | undefined]> = [
    [{ 'x-ratelimit-reset-requests': ['2s'], 'x-ratelimit-remaining-requests': ['12', '0'] }, 2_000],
    [
      {
        'anthropic-ratelimit-tokens-reset': [new Date(NOW + 9_000).toISOString()],
        'anthropic-ratelimit-tokens-remaining': ['0', '5000'],
      },
      9_000,
    ],
    [{ 'x-ratelimit-reset': ['30'], 'x-ratelimit-remaining': ['5', '0'] }, 30_000],
    // GitHub's reset comes on every answer: quota left in both layers is no wait for a 502.
    [{ 'x-ratelimit-reset': ['3600'], 'x-ratelimit-remaining': ['4999', '4998'] }, undefined],
  ];
  for (const [headers, expected] of lines) {
    await withServer(always({ status: 502, headers }), async (server) => {
      const res = await fetch(server.origin);
      await res.body?.cancel();
      assert.equal(retryDelay(res.headers, NOW), expected, JSON.stringify(headers));
    });
  }
  // The breaker asks only for a quota at 0, and finds one whichever copy says it.
  await withServer(
    always({
      status: 200,
      headers: { 'x-ratelimit-remaining-requests': ['7', '0'], 'x-ratelimit-reset-requests': ['2s', '1s'] },
    }),
    async (server) => {
      const res = await fetch(server.origin);
      await res.body?.cancel();
      assert.deepEqual(quotaLeft(res.headers, NOW, true), { remaining: 0, resetMs: 2_000 });
    },
  );
});

test('RateLimit sent twice is one List of both copies’ members (RFC 8941): the longest t among those at r=0', async () => {
  const lines: Array<[string[], number | undefined]> = [
    [['"a";r=0;t=30', '"a";r=0;t=60'], 60_000],
    [['"a";r=0;t=30', '"b";r=5;t=90'], 30_000],
    [['"a";r=3;t=30', '"a";r=0;t=10'], 10_000],
    [['"a";r=3;t=30', '"b";r=1;t=90'], undefined],
  ];
  for (const [ratelimit, expected] of lines) {
    await withServer(always({ status: 429, headers: { ratelimit } }), async (server) => {
      const res = await fetch(server.origin);
      await res.body?.cancel();
      assert.equal(retryDelay(res.headers, NOW), expected, JSON.stringify(ratelimit));
      assert.equal(parseRateLimit(res.headers)?.limits.length, 2);
    });
  }
});

test('a reset or remaining value of thousands of pieces under the length cap reads in well under 50 ms, from its first 32 pieces', () => {
  const names = [
    ['x-ratelimit-reset', 'x-ratelimit-remaining'],
    ['x-ratelimit-reset-requests', 'x-ratelimit-remaining-requests'],
    ['anthropic-ratelimit-requests-reset', 'anthropic-ratelimit-requests-remaining'],
  ];
  for (const value of [
    ' ,'.repeat(MAX_HEADER_CHARS / 2),
    `${'9,'.repeat(MAX_HEADER_CHARS / 2 - 1)}9`,
    'x,'.repeat(2048),
  ]) {
    const started = process.cpuUsage();
    for (let i = 0; i < 10; i++)
      for (const [reset, remaining] of names) {
        retryDelay({ [reset as string]: value, [remaining as string]: value }, NOW);
        quotaLeft({ [reset as string]: value, [remaining as string]: value }, NOW);
      }
    const used = process.cpuUsage(started);
    const elapsed = (used.user + used.system) / 1000 / 10;
    assert.ok(
      elapsed < 50,
      `${JSON.stringify(value.slice(0, 8))} x ${value.length} took ${elapsed.toFixed(1)} ms`,
    );
  }
  // A copy past the 32nd piece is not read.
  const remaining = { 'x-ratelimit-remaining-requests': '0' };
  assert.equal(delay({ ...remaining, 'x-ratelimit-reset-requests': `${'1s,'.repeat(32)}60s` }), 1_000);
  assert.equal(delay({ ...remaining, 'x-ratelimit-reset-requests': `${'1s,'.repeat(31)}60s` }), 60_000);
});

test('a Retry-After of 100,000 commas, or of thousands of pieces under the length cap, reads in well under 50 ms, from its first 32 pieces', () => {
  retryDelay({ 'retry-after': '1, 2' }, NOW); // warm up
  for (const value of [
    ','.repeat(100_000),
    '1,'.repeat(50_000),
    ' ,'.repeat(MAX_HEADER_CHARS / 2),
    'Wed,'.repeat(MAX_HEADER_CHARS / 4),
    `${'9,'.repeat(MAX_HEADER_CHARS / 2 - 1)}9`,
  ]) {
    const started = process.cpuUsage();
    for (let i = 0; i < 10; i++) {
      retryDelay({ 'retry-after': value }, NOW);
      retryDelay({ 'retry-after-ms': value }, NOW);
    }
    const used = process.cpuUsage(started);
    const elapsed = (used.user + used.system) / 1000 / 10;
    assert.ok(
      elapsed < 50,
      `${JSON.stringify(value.slice(0, 8))} x ${value.length} took ${elapsed.toFixed(1)} ms`,
    );
  }
  // A copy past the 32nd piece is not read: a hostile list cannot make the read grow.
  assert.equal(delay({ 'retry-after': `${'1,'.repeat(32)}60` }), 1_000);
  assert.equal(delay({ 'retry-after': `${'1,'.repeat(31)}60` }), 60_000);
});

test('an iterable of name-value pairs is read', () => {
  assert.equal(delay(new Map([['Retry-After', '8']])), 8_000);
  assert.equal(delay([['retry-after', '8']]), 8_000);
});

test('a header value longer than MAX_HEADER_CHARS is ignored', () => {
  assert.equal(delay({ 'retry-after': `${'0'.repeat(MAX_HEADER_CHARS - 1)}1` }), 1_000);
  assert.equal(
    delay({ 'retry-after': `Sun, 06 Nov 1994 08:49:37 GMT${' '.repeat(MAX_HEADER_CHARS)}` }),
    undefined,
  );
  assert.equal(delay({ 'retry-after': 'x'.repeat(MAX_HEADER_CHARS + 1) }), undefined);
});

test('an all-digit Retry-After too long to read asks for the longest wait, as a huge readable one does', () => {
  const longest = delay({ 'retry-after': '99999999999999' });
  assert.equal(longest, MAX_DELAY_MS);
  for (const value of [
    '9'.repeat(100_000),
    `1${'0'.repeat(MAX_HEADER_CHARS)}`,
    ` \t${'7'.repeat(MAX_HEADER_CHARS + 1)} `,
    // Only the first MAX_HEADER_CHARS characters are looked at, so a zero-padded value
    // (whose size only the whole scan could tell) errs toward the longer wait.
    `${'0'.repeat(MAX_HEADER_CHARS)}1`,
  ]) {
    assert.equal(delay({ 'retry-after': value }), longest, `${value.length} chars`);
    assert.equal(delay(new Headers({ 'retry-after': value })), longest, `Headers, ${value.length} chars`);
  }
  assert.equal(delay({ 'retry-after-ms': '9'.repeat(100_000) }), longest);
  // It outranks the sources after it, as a readable value would.
  assert.equal(delay({ 'retry-after': '9'.repeat(10_000), RateLimit: '"default";r=0;t=9' }), longest);
});

test('a Retry-After over MAX_HEADER_CHARS that is not all digits where read stays absent', () => {
  for (const value of [
    `${'1'.repeat(MAX_HEADER_CHARS - 1)}x${'1'.repeat(10)}`,
    ` ${'x'.repeat(MAX_HEADER_CHARS)}`,
    ' '.repeat(MAX_HEADER_CHARS + 1),
    `-${'9'.repeat(MAX_HEADER_CHARS)}`,
  ]) {
    assert.equal(delay({ 'retry-after': value }), undefined, JSON.stringify(value.slice(0, 8)));
  }
  // retry-after-ms reads decimals, but a fraction that runs past the limit is not read.
  assert.equal(delay({ 'retry-after-ms': `1.${'5'.repeat(MAX_HEADER_CHARS)}` }), undefined);
});

test('an over-long all-digit Retry-After is judged by a bounded prefix: megabytes of digits cost well under 200 ms', () => {
  const value = '9'.repeat(4_000_000);
  delay({ 'retry-after': '1' }); // warm up
  const started = process.cpuUsage();
  for (let i = 0; i < 100; i++) assert.equal(delay({ 'retry-after': value }), MAX_DELAY_MS);
  const used = process.cpuUsage(started);
  const elapsed = (used.user + used.system) / 1000;
  // About 20-40 ms on a quiet machine (the engine's own scans of the string), 80 ms with
  // two other test runs beside it; reading every digit in script took seconds.
  assert.ok(elapsed < 200, `100 reads took ${elapsed.toFixed(1)} ms`);
});

/** A retry() over `server` fails at once, after one request, with RetryAfterTooLongError asking for the longest wait. */
async function assertFailsFastWithLongestWait(server: TestServer): Promise<void> {
  const fetch = createFetch({ use: [retry({ backoff: { initialMs: 1, maxMs: 1, jitter: 'none' } })] });
  await assert.rejects(fetch(server.origin), (error: unknown) => {
    assert.ok(error instanceof RetryAfterTooLongError, 'error instanceof RetryAfterTooLongError');
    assert.equal(error.retryAfterMs, MAX_DELAY_MS);
    return true;
  });
  assert.equal(server.requests.length, 1);
}

test('a 503 whose Retry-After is ten thousand digits makes retry fail fast with RetryAfterTooLongError', async () => {
  await withServer(
    always({ status: 503, headers: { 'retry-after': '9'.repeat(10_000) } }),
    assertFailsFastWithLongestWait,
  );
});

test('an all-digit RateLimit-Reset too long to read asks for the longest wait, as a huge readable one does', () => {
  for (const prefix of ['RateLimit', 'X-RateLimit', 'X-Rate-Limit']) {
    const reset = `${prefix}-Reset`;
    const remaining = `${prefix}-Remaining`;
    assert.equal(delay({ [reset]: '99999999999999', [remaining]: '0' }), MAX_DELAY_MS);
    for (const value of [
      '9'.repeat(5_000),
      ` ${'1'.repeat(MAX_HEADER_CHARS + 1)}`,
      `${'0'.repeat(MAX_HEADER_CHARS)}1`,
    ]) {
      assert.equal(
        delay({ [reset]: value, [remaining]: '0' }),
        MAX_DELAY_MS,
        `${prefix}, ${value.length} chars`,
      );
      assert.equal(delay(new Headers({ [reset]: value })), MAX_DELAY_MS, `${prefix}, no remaining`);
      assert.deepEqual(quotaLeft({ [reset]: value, [remaining]: '0' }, NOW), {
        remaining: 0,
        resetMs: MAX_DELAY_MS,
      });
      // Quota left still vetoes the reset, however long.
      assert.equal(delay({ [reset]: value, [remaining]: '4999' }), undefined, `${prefix}, quota left`);
    }
    // Not digits where read: absent, as before.
    assert.equal(delay({ [reset]: `${'9'.repeat(MAX_HEADER_CHARS - 1)}x9`, [remaining]: '0' }), undefined);
  }
});

test('a 429 with no quota left and a five-thousand-digit X-RateLimit-Reset makes retry fail fast with RetryAfterTooLongError', async () => {
  await withServer(
    always({
      status: 429,
      headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '9'.repeat(5_000) },
    }),
    assertFailsFastWithLongestWait,
  );
});

test('headers that are not an object yield undefined instead of throwing', () => {
  for (const junk of [null, undefined, 42, 'retry-after: 1']) {
    assert.equal(delay(junk as unknown as HeadersLike), undefined);
    assert.equal(shouldRetryHeader(junk as unknown as HeadersLike), undefined);
    assert.equal(parseRateLimit(junk as unknown as HeadersLike), undefined);
  }
});

test('a non-finite now yields no delay from date headers instead of NaN', () => {
  assert.equal(retryDelay({ 'retry-after': 'Sun, 29 Nov 2026 17:00:30 GMT' }, Number.NaN), undefined);
});

// --- shouldRetryHeader ---

test('x-should-retry true means retry', () => {
  assert.equal(shouldRetryHeader({ 'x-should-retry': 'true' }), true);
});

test('x-should-retry false means do not retry', () => {
  assert.equal(shouldRetryHeader(new Headers({ 'X-Should-Retry': 'false' })), false);
});

test('x-should-retry is trimmed and case-insensitive', () => {
  assert.equal(shouldRetryHeader({ 'X-Should-Retry': ' TRUE ' }), true);
  assert.equal(shouldRetryHeader({ 'x-should-retry': 'False' }), false);
});

test('x-should-retry other than true or false says nothing', () => {
  for (const value of ['1', 'yes', '', 'truee']) {
    assert.equal(shouldRetryHeader({ 'x-should-retry': value }), undefined, value);
  }
  assert.equal(shouldRetryHeader({}), undefined);
});

// --- parseRateLimit ---

test('parseRateLimit reads RateLimit and RateLimit-Policy', () => {
  const info = parseRateLimit({
    RateLimit: '"default";r=0;t=30',
    'RateLimit-Policy': '"default";q=100;w=60',
  });
  assert.deepEqual(info, {
    limits: [{ policy: 'default', remaining: 0, resetSeconds: 30 }],
    policies: [{ policy: 'default', quota: 100, windowSeconds: 60 }],
  });
});

test('parseRateLimit reads quota units and partition keys', () => {
  const info = parseRateLimit({
    ratelimit: '"day";r=50;pk=:dXNlcjE=:',
    'ratelimit-policy': '"burst";q=100;w=60;qu="request", "day";q=1000;w=86400;pk=:dXNlcjE=:',
  });
  assert.deepEqual(info, {
    limits: [{ policy: 'day', remaining: 50, partitionKey: 'dXNlcjE=' }],
    policies: [
      { policy: 'burst', quota: 100, windowSeconds: 60, quotaUnit: 'request' },
      { policy: 'day', quota: 1000, windowSeconds: 86400, partitionKey: 'dXNlcjE=' },
    ],
  });
});

test('parseRateLimit ignores unknown parameters', () => {
  assert.deepEqual(parseRateLimit({ ratelimit: '"a";r=1;t=2;acme-x="y";z' })?.limits, [
    { policy: 'a', remaining: 1, resetSeconds: 2 },
  ]);
});

test('parseRateLimit skips malformed members and keeps the rest', () => {
  const info = parseRateLimit({
    ratelimit: '"ok1";r=1, "no-r";t=5, "neg";r=-1, 7;r=0, ("inner");r=0, "bad\\q";r=0, "ok2";r=2, ,',
  });
  assert.deepEqual(
    info?.limits.map((l) => l.policy),
    ['ok1', 'ok2'],
  );
});

test('parseRateLimit accepts Token policy names from earlier drafts', () => {
  assert.deepEqual(parseRateLimit({ 'ratelimit-policy': 'burst;q=10;w=1' })?.policies, [
    { policy: 'burst', quota: 10, windowSeconds: 1 },
  ]);
});

test('parseRateLimit drops an invalid t but keeps the member', () => {
  assert.deepEqual(parseRateLimit({ ratelimit: '"a";r=0;t=1.5' })?.limits, [{ policy: 'a', remaining: 0 }]);
});

test('parseRateLimit is undefined when neither field yields a member', () => {
  assert.equal(parseRateLimit({}), undefined);
  assert.equal(
    parseRateLimit({ ratelimit: 'limit=100, remaining=0, reset=30', 'ratelimit-policy': '' }),
    undefined,
  );
});

// --- Properties ---

const TIMING_HEADERS = [
  'retry-after-ms',
  'retry-after',
  'ratelimit',
  'ratelimit-policy',
  'ratelimit-reset',
  'x-ratelimit-reset',
  'x-rate-limit-reset',
  'x-ratelimit-reset-requests',
  'x-ratelimit-reset-tokens',
  'anthropic-ratelimit-requests-reset',
  'anthropic-ratelimit-output-tokens-reset',
  'x-should-retry',
];

// Pieces of real header syntax, so random strings reach deep into the parsers.
const FRAGMENTS = (
  '0|1|9|60| |\t|,|;|=|"|\\|:|-|+|.|(|)|r|t|q|w|pk|qu|ms|s|m|h|us|\u00b5s|ns|T|Z|e|x|' +
  'GMT|Sun|Sunday|Nov|Feb|2026|1994|true|false|\u00e9|\ud83d\ude00'
).split('|');

const hostileString = fc.oneof(
  fc.string({ maxLength: 10_000 }),
  fc.string({ unit: 'binary', maxLength: 10_000 }),
  fc.string({ unit: fc.constantFrom(...FRAGMENTS), maxLength: 3_000 }),
);

function assertDelay(ms: number | undefined): void {
  if (ms === undefined) return;
  assert.ok(Number.isInteger(ms) && ms >= 0 && ms <= MAX_DELAY_MS, `bad delay ${ms}`);
}

function assertRateLimitInfo(info: ReturnType<typeof parseRateLimit>): void {
  if (info === undefined) return;
  for (const l of info.limits) {
    for (const n of [l.remaining, l.resetSeconds ?? 0])
      assert.ok(Number.isSafeInteger(n) && n >= 0, 'Number.isSafeInteger(n) && n >= 0');
  }
  for (const p of info.policies) {
    for (const n of [p.quota, p.windowSeconds ?? 0])
      assert.ok(Number.isSafeInteger(n) && n >= 0, 'Number.isSafeInteger(n) && n >= 0');
  }
}

test('any string in any timing header yields undefined or an integer delay within the cap, never a throw', () => {
  fc.assert(
    fc.property(fc.constantFrom(...TIMING_HEADERS), hostileString, fc.boolean(), (name, value, exhausted) => {
      const headers: Record<string, string> = { [name]: value };
      if (exhausted) {
        // Make the conditional sources (OpenAI, Anthropic, legacy) eligible.
        headers['x-ratelimit-remaining-requests'] = '0';
        headers['x-ratelimit-remaining-tokens'] = '0';
        headers['anthropic-ratelimit-requests-remaining'] = '0';
        headers['anthropic-ratelimit-output-tokens-remaining'] = '0';
      }
      assertDelay(retryDelay(headers, NOW));
      assertDelay(retryDelay(new Headers(Object.entries(headers).filter(([, v]) => isByteString(v))), NOW));
      const verdict = shouldRetryHeader(headers);
      assert.ok(
        verdict === undefined || typeof verdict === 'boolean',
        "verdict === undefined || typeof verdict === 'boolean'",
      );
      assertRateLimitInfo(parseRateLimit(headers));
    }),
    { numRuns: 400 },
  );
});

test('any now yields undefined or an integer delay within the cap', () => {
  fc.assert(
    fc.property(fc.oneof(fc.double(), fc.integer()), fc.constantFrom(...TIMING_HEADERS), (now, name) => {
      const headers = {
        [name]: 'Sunday, 29-Nov-26 17:01:00 GMT',
        'anthropic-ratelimit-requests-remaining': '0',
      };
      assertDelay(retryDelay(headers, now));
      assertDelay(retryDelay({ 'x-ratelimit-reset': '1764435792' }, now));
      assertDelay(
        retryDelay({ 'anthropic-ratelimit-requests-reset': '2026-11-29T17:03:12Z', ...headers }, now),
      );
    }),
    { numRuns: 300 },
  );
});

/** `new Headers()` rejects values outside ISO-8859-1 or with NUL/CR/LF; skip those there. */
function isByteString(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    if (code > 0xff || code === 0 || code === 0x0a || code === 0x0d) return false;
  }
  return true;
}

// --- Linear time: a safety net against catastrophic backtracking, not a benchmark ---

const HOSTILE_FRAGMENTS = [
  '1h',
  '1.',
  '9',
  ' ',
  ', ',
  '"a";r=0;',
  ';a',
  '"\\"',
  ':',
  '2026-11-29T17:00:00.',
  'Sun, 06 Nov 1994 08:49:37 GM',
  '"',
  '(',
];

test('hostile repeated-fragment values at the length cap parse in well under 50 ms', () => {
  retryDelay({ 'retry-after': '1' }, NOW); // warm up
  for (const fragment of HOSTILE_FRAGMENTS) {
    for (const length of [MAX_HEADER_CHARS, 10_000]) {
      const value = fragment.repeat(Math.ceil(length / fragment.length)).slice(0, length);
      for (const name of TIMING_HEADERS) {
        const headers = {
          [name]: value,
          'x-ratelimit-remaining-requests': '0',
          'x-ratelimit-remaining-tokens': '0',
          'anthropic-ratelimit-requests-remaining': '0',
          'anthropic-ratelimit-output-tokens-remaining': '0',
        };
        // CPU time, not wall time: a loaded machine may deschedule the process mid-parse,
        // which says nothing about the parser; a backtracking pattern costs seconds of CPU.
        const started = process.cpuUsage();
        retryDelay(headers, NOW);
        parseRateLimit(headers);
        shouldRetryHeader(headers);
        const used = process.cpuUsage(started);
        const elapsed = (used.user + used.system) / 1000;
        assert.ok(
          elapsed < 50,
          `${name}: ${JSON.stringify(fragment)} x ${length} took ${elapsed.toFixed(1)} ms`,
        );
      }
    }
  }
});

test('headers whose getters, proxy traps or iterators throw read as absent: nothing throws', () => {
  const getter = {
    'retry-after': '5',
    get other() {
      throw new Error('getter');
    },
  };
  const proxy = new Proxy(
    {},
    {
      ownKeys() {
        throw new Error('trap');
      },
    },
  );
  const iterable = {
    [Symbol.iterator]() {
      throw new Error('iterator');
    },
  };
  for (const headers of [getter, proxy, iterable]) {
    assert.doesNotThrow(() => retryDelay(headers as never));
    assert.equal(retryDelay(headers as never), undefined);
    assert.equal(shouldRetryHeader(headers as never), undefined);
    assert.equal(parseRateLimit(headers as never), undefined);
  }
});

// --- quotaLeft: the tightest quota a response of any status reports ---

test('quotaLeft reads OpenAI’s request quota from a 200: 2 left, restored in 100 ms', () => {
  const headers = new Headers({
    'x-ratelimit-remaining-requests': '2',
    'x-ratelimit-reset-requests': '100ms',
    'x-ratelimit-remaining-tokens': '39000',
    'x-ratelimit-reset-tokens': '6m0s',
  });
  assert.deepEqual(quotaLeft(headers, NOW), { remaining: 2, resetMs: 100 });
});

test('quotaLeft picks the fewest remaining across families, and the later reset between equals', () => {
  assert.deepEqual(
    quotaLeft(
      {
        RateLimit: '"minute";r=7;t=40, "burst";r=0;t=2',
        'anthropic-ratelimit-tokens-remaining': '0',
        'anthropic-ratelimit-tokens-reset': '2026-11-29T17:00:05Z',
      },
      NOW,
    ),
    { remaining: 0, resetMs: 5_000 },
  );
});

test('quotaLeft with maxResetMs passes over a quota whose reset is further off, so a far or unreadable reset at 0 does not hide a nearer one', () => {
  // A legacy reset that reads as the longest wait (15 digits: epoch seconds millennia
  // away; or digits too long to read) beside OpenAI's request quota, both at 0.
  for (const reset of ['999999999999999', '9'.repeat(MAX_HEADER_CHARS + 1)]) {
    const headers = {
      'X-RateLimit-Remaining': '0',
      'X-RateLimit-Reset': reset,
      'x-ratelimit-remaining-requests': '0',
      'x-ratelimit-reset-requests': '2s',
    };
    assert.deepEqual(
      quotaLeft(headers, NOW),
      { remaining: 0, resetMs: MAX_DELAY_MS },
      'no bound: the later reset',
    );
    assert.deepEqual(quotaLeft(headers, NOW, false, 60_000), { remaining: 0, resetMs: 2_000 });
    assert.deepEqual(quotaLeft(new Headers(headers), NOW, true, 60_000), { remaining: 0, resetMs: 2_000 });
  }
  // Fewer left in a quota that resets too far off do not hide the count of one that resets in time.
  const far = { RateLimit: '"day";r=1;t=86400, "minute";r=5;t=40' };
  assert.deepEqual(quotaLeft(far, NOW, false, 60_000), { remaining: 5, resetMs: 40_000 });
  assert.equal(quotaLeft(far, NOW, false, 30_000), undefined, 'every reset further off');
  assert.deepEqual(
    quotaLeft(far, NOW, false, 40_000),
    { remaining: 5, resetMs: 40_000 },
    'a reset at the bound is within it',
  );
});

test('quotaLeft reads the legacy family with an epoch reset', () => {
  const reset = String(NOW / 1000 + 30);
  assert.deepEqual(quotaLeft({ 'X-RateLimit-Remaining': '0', 'X-RateLimit-Reset': reset }, NOW), {
    remaining: 0,
    resetMs: 30_000,
  });
});

test('quotaLeft needs a remaining count and a reset side by side', () => {
  // GitHub sends its reset on every response: without the count it says nothing.
  assert.equal(quotaLeft({ 'X-RateLimit-Reset': String(NOW / 1000 + 3600) }, NOW), undefined);
  assert.equal(quotaLeft({ 'x-ratelimit-remaining-requests': '0' }, NOW), undefined);
  assert.equal(quotaLeft(new Headers({ 'content-type': 'application/json' }), NOW), undefined);
  assert.equal(quotaLeft({ RateLimit: '"default";r=0' }, NOW), undefined, 'r=0 without t');
});

test('quotaLeft treats garbage counts and resets as absent', () => {
  for (const [remaining, reset] of [
    ['-1', '1s'],
    ['1e3', '1s'],
    ['0x10', '1s'],
    ['0', '1 second'],
    ['0', ''],
    ['2', '-5ms'],
  ]) {
    assert.equal(
      quotaLeft({ 'x-ratelimit-remaining-requests': remaining, 'x-ratelimit-reset-requests': reset }, NOW),
      undefined,
      `${remaining} / ${reset}`,
    );
  }
});

test('quotaLeft on any generated headers never throws and returns a bounded wait', () => {
  fc.assert(
    fc.property(
      fc.dictionary(
        fc.constantFrom(
          'ratelimit',
          'x-ratelimit-remaining',
          'x-ratelimit-reset',
          'x-ratelimit-remaining-requests',
          'x-ratelimit-reset-requests',
          'anthropic-ratelimit-requests-remaining',
          'anthropic-ratelimit-requests-reset',
        ),
        fc.string({ maxLength: 40 }),
      ),
      (headers) => {
        const quota = quotaLeft(headers, NOW);
        if (quota === undefined) return;
        assert.ok(
          Number.isInteger(quota.remaining) && quota.remaining >= 0,
          'Number.isInteger(quota.remaining) && quota.remaining >= 0',
        );
        assert.ok(
          Number.isInteger(quota.resetMs) && quota.resetMs >= 0 && quota.resetMs <= MAX_DELAY_MS,
          'Number.isInteger(quota.resetMs) && quota.resetMs >= 0 && quota.resetMs <= MAX_DELAY_MS',
        );
      },
    ),
  );
});

test('quotaLeft with usedUpOnly reads a Headers only when some quota header is at 0', () => {
  const left = new Headers({ 'x-ratelimit-remaining-requests': '2', 'x-ratelimit-reset-requests': '100ms' });
  assert.equal(quotaLeft(left, NOW, true), undefined);
  assert.deepEqual(quotaLeft(left, NOW), { remaining: 2, resetMs: 100 });
  const usedUp = new Headers({
    'x-ratelimit-remaining-requests': '0',
    'x-ratelimit-reset-requests': '100ms',
  });
  assert.deepEqual(quotaLeft(usedUp, NOW, true), { remaining: 0, resetMs: 100 });
  const field = new Headers({ RateLimit: '"burst";r=0;t=2' });
  assert.deepEqual(quotaLeft(field, NOW, true), { remaining: 0, resetMs: 2_000 });
});

test('quotaLeft with usedUpOnly scans a Headers with forEach, not its iterator, which costs Deno about 2 µs a header', () => {
  // Deno's Headers iterator costs ~25 µs for an OpenAI answer's dozen headers (forEach: ~2.5 µs),
  // and the breaker scans every answer. A Headers that cannot be iterated still reads.
  class Uniterable extends Headers {
    override [Symbol.iterator](): HeadersIterator<[string, string]> {
      throw new Error('iterated');
    }
  }
  const headers = new Uniterable({
    'x-ratelimit-remaining-requests': '0',
    'x-ratelimit-reset-requests': '100ms',
  });
  assert.deepEqual(quotaLeft(headers, NOW, true), { remaining: 0, resetMs: 100 });
});

test('a Headers whose methods throw (a subclass, or a Proxy around one) reads as absent: retryDelay and quotaLeft never throw', () => {
  class Hostile extends Headers {
    override get(): string | null {
      throw new Error('get');
    }
    override forEach(): void {
      throw new Error('forEach');
    }
  }
  const fields = { 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '100ms' };
  const hostile = new Hostile(fields);
  assert.equal(retryDelay(hostile, NOW), undefined);
  assert.equal(quotaLeft(hostile, NOW), undefined);
  assert.equal(quotaLeft(hostile, NOW, true), undefined);
  // Node's and Bun's Headers methods check their receiver and throw on a Proxy; Deno's read through it.
  const proxy = new Proxy(new Headers(fields), {});
  assert.ok(
    [undefined, 100].includes(retryDelay(proxy, NOW)),
    '[undefined, 100].includes(retryDelay(proxy, NOW))',
  );
  assert.ok(
    [undefined, 100].includes(quotaLeft(proxy, NOW)?.resetMs),
    '[undefined, 100].includes(quotaLeft(proxy, NOW)?.resetMs)',
  );
  assert.ok(
    [undefined, 100].includes(quotaLeft(proxy, NOW, true)?.resetMs),
    '[undefined, 100].includes(quotaLeft(proxy, NOW, true)?.resetMs)',
  );
  const untyped = new Proxy(new Headers(fields), {
    getPrototypeOf() {
      throw new Error('trap');
    },
  });
  assert.equal(retryDelay(untyped, NOW), undefined);
  assert.equal(quotaLeft(untyped, NOW, true), undefined);
});

test('quotaLeft passes over a used-up quota whose reset has come: it is restored, not the tightest', () => {
  // The burst window just rolled over; the minute's 2 left are what limits the next calls.
  // Read as the tightest, "0 left, reset now" hid them: a pace probe's answer released every waiter.
  assert.deepEqual(quotaLeft({ RateLimit: '"burst";r=0;t=0, "minute";r=2;t=40' }, NOW), {
    remaining: 2,
    resetMs: 40_000,
  });
  const past = {
    'anthropic-ratelimit-requests-remaining': '0',
    'anthropic-ratelimit-requests-reset': '2026-11-29T16:59:59Z',
    'x-ratelimit-remaining-requests': '3',
    'x-ratelimit-reset-requests': '5s',
  };
  assert.deepEqual(quotaLeft(past, NOW), { remaining: 3, resetMs: 5_000 });
});

test('quotaLeft counts a token quota only once it is used up: tokens left are not calls left', () => {
  const headers = {
    'x-ratelimit-remaining-requests': '40',
    'x-ratelimit-reset-requests': '1s',
    'x-ratelimit-remaining-tokens': '5',
    'x-ratelimit-reset-tokens': '2s',
  };
  assert.deepEqual(quotaLeft(headers, NOW), { remaining: 40, resetMs: 1_000 });
  assert.deepEqual(
    quotaLeft(
      {
        'anthropic-ratelimit-input-tokens-remaining': '5',
        'anthropic-ratelimit-input-tokens-reset': '2026-11-29T17:00:02Z',
      },
      NOW,
    ),
    { remaining: Infinity, resetMs: 2_000 },
  );
  assert.deepEqual(quotaLeft({ ...headers, 'x-ratelimit-remaining-tokens': '0' }, NOW), {
    remaining: 0,
    resetMs: 2_000,
  });
});

test('an Integer of -0 in RateLimit reads as 0, not as negative zero', () => {
  // RFC 9651 §4.2.4: "-0" is a valid Integer, and its value is 0.
  const info = parseRateLimit({ ratelimit: '"a";r=-0;t=-0', 'ratelimit-policy': '"a";q=-0;w=-0' });
  assert.deepStrictEqual(info, {
    limits: [{ policy: 'a', remaining: 0, resetSeconds: 0 }],
    policies: [{ policy: 'a', quota: 0, windowSeconds: 0 }],
  });
});

test('a RateLimit member with an RFC 9651 Date or Display String parameter is read, that parameter ignored', () => {
  // RFC 9651 added two bare item types; an unknown parameter of either type is still
  // an unknown parameter, not a malformed member.
  for (const param of ['acme-at=@1700000000', 'note=%"caf%c3%a9"', 'note=%""', 'neg=@-1']) {
    const headers = { ratelimit: `"a";r=0;t=30;${param}`, 'ratelimit-policy': `"a";q=100;${param};w=60` };
    assert.deepStrictEqual(
      parseRateLimit(headers),
      {
        limits: [{ policy: 'a', remaining: 0, resetSeconds: 30 }],
        policies: [{ policy: 'a', quota: 100, windowSeconds: 60 }],
      },
      param,
    );
    assert.equal(retryDelay(headers, NOW), 30_000, param);
  }
  // A Date is an Integer after its `@`, a Display String ends with its quote.
  for (const param of ['at=@1.5', 'at=@', 'at=@-', 'note=%"a', 'note=%a']) {
    assert.equal(parseRateLimit({ ratelimit: `"a";r=0;t=30;${param}` }), undefined, param);
  }
  // A Date is not an Integer: `t=@30` is no reset, `r=@0` no remaining count.
  assert.deepStrictEqual(parseRateLimit({ ratelimit: '"a";r=0;t=@30, "b";r=@0;t=5' })?.limits, [
    { policy: 'a', remaining: 0 },
  ]);
});

// A differential check of the RateLimit / RateLimit-Policy reader against a slow,
// obviously-correct structured-field parser: RFC 9651 §4.2, step by step, strict.
// parseRateLimit() is lenient per member (a malformed member is skipped up to the
// next top-level comma), so each member is parsed on its own here and kept when
// the strict parser accepts it.

type Bare =
  | { type: 'integer' | 'decimal' | 'date'; value: number }
  | { type: 'string' | 'token' | 'bytes' | 'display'; value: string }
  | { type: 'boolean'; value: boolean };
type Params = Map<string, Bare>;
type Member = { item: Bare | 'inner-list'; params: Params };

class Fail extends Error {}

/** RFC 9651 §4.2 parsing over one string, character by character. */
class Parser {
  at = 0;
  constructor(readonly text: string) {}
  get rest(): string {
    return this.text.slice(this.at);
  }
  peek(): string {
    return this.text[this.at] ?? '';
  }
  take(): string {
    if (this.at >= this.text.length) throw new Fail('end');
    return this.text[this.at++] as string;
  }
  skipSp(): void {
    while (this.peek() === ' ') this.at++;
  }
  skipOws(): void {
    while (this.peek() === ' ' || this.peek() === '\t') this.at++;
  }

  /** §4.2.1 the whole field as a List. */
  list(): Member[] {
    const members: Member[] = [];
    this.skipSp();
    while (this.at < this.text.length) {
      members.push(this.peek() === '(' ? this.innerList() : this.item());
      this.skipOws();
      if (this.at >= this.text.length) return members;
      if (this.take() !== ',') throw new Fail('no comma');
      this.skipOws();
      if (this.at >= this.text.length) throw new Fail('trailing comma');
    }
    return members;
  }

  innerList(): Member {
    this.take(); // (
    for (;;) {
      this.skipSp();
      if (this.peek() === ')') {
        this.take();
        return { item: 'inner-list', params: this.params() };
      }
      this.item();
      const c = this.peek();
      if (c !== ' ' && c !== ')') throw new Fail('inner list');
    }
  }

  item(): Member {
    const item = this.bare();
    return { item, params: this.params() };
  }

  params(): Params {
    const params: Params = new Map();
    while (this.peek() === ';') {
      this.take();
      this.skipSp();
      const key = this.key();
      let value: Bare = { type: 'boolean', value: true };
      if (this.peek() === '=') {
        this.take();
        value = this.bare();
      }
      params.set(key, value);
    }
    return params;
  }

  key(): string {
    if (!/[a-z*]/.test(this.peek())) throw new Fail('key');
    let key = '';
    while (/[a-z0-9_\-.*]/.test(this.peek()) && this.peek() !== '') key += this.take();
    return key;
  }

  bare(): Bare {
    const c = this.peek();
    if (c === '-' || /[0-9]/.test(c)) return this.number();
    if (c === '"') return this.string();
    if (c === ':') return this.bytes();
    if (c === '?') {
      this.take();
      const b = this.take();
      if (b !== '0' && b !== '1') throw new Fail('boolean');
      return { type: 'boolean', value: b === '1' };
    }
    if (c === '@') {
      this.take();
      const n = this.number();
      if (n.type !== 'integer') throw new Fail('date');
      return { type: 'date', value: n.value };
    }
    if (c === '%') return this.display();
    if (/[A-Za-z*]/.test(c) && c !== '') return this.token();
    throw new Fail('bare item');
  }

  /** §4.2.4 */
  number(): Bare {
    let type: 'integer' | 'decimal' = 'integer';
    let sign = 1;
    let digits = '';
    if (this.peek() === '-') {
      this.take();
      sign = -1;
    }
    if (!/[0-9]/.test(this.peek()) || this.peek() === '') throw new Fail('number');
    while (this.at < this.text.length) {
      const c = this.peek();
      if (/[0-9]/.test(c)) digits += this.take();
      else if (type === 'integer' && c === '.') {
        if (digits.length > 12) throw new Fail('decimal integer part');
        digits += this.take();
        type = 'decimal';
      } else break;
      if (type === 'integer' && digits.length > 15) throw new Fail('integer length');
      if (type === 'decimal' && digits.length > 16) throw new Fail('decimal length');
    }
    if (type === 'decimal') {
      if (digits.endsWith('.')) throw new Fail('decimal ends with dot');
      if ((digits.split('.')[1] as string).length > 3) throw new Fail('decimal fraction');
    }
    // An Integer's value is a number: -0 is 0.
    return { type, value: sign * Number(digits) + 0 };
  }

  /** §4.2.5 */
  string(): Bare {
    this.take();
    let out = '';
    for (;;) {
      const c = this.take();
      if (c === '\\') {
        const next = this.take();
        if (next !== '"' && next !== '\\') throw new Fail('escape');
        out += next;
      } else if (c === '"') return { type: 'string', value: out };
      else if (c < ' ' || c > '~') throw new Fail('string char');
      else out += c;
    }
  }

  /** §4.2.6 */
  token(): Bare {
    let out = this.take();
    while (/[!#$%&'*+\-.^_`|~0-9A-Za-z:/]/.test(this.peek()) && this.peek() !== '') out += this.take();
    return { type: 'token', value: out };
  }

  /** §4.2.7 */
  bytes(): Bare {
    this.take();
    const end = this.text.indexOf(':', this.at);
    if (end < 0) throw new Fail('bytes end');
    const b64 = this.text.slice(this.at, end);
    if (!/^[A-Za-z0-9+/=]*$/.test(b64)) throw new Fail('bytes char');
    this.at = end + 1;
    return { type: 'bytes', value: b64 };
  }

  /**
   * RFC 9651 §4.2.10 Display String, its content unchecked (printable ASCII, `%`
   * with two lower-case hex digits, valid UTF-8): parseRateLimit() never reads one,
   * so it only needs to know where it ends.
   */
  display(): Bare {
    this.take();
    if (this.take() !== '"') throw new Fail('display');
    let out = '';
    for (let c = this.take(); c !== '"'; c = this.take()) out += c;
    return { type: 'display', value: out };
  }
}

/** One member's text parsed strictly as a one-member List, or undefined. */
function strictMember(text: string): Member | undefined {
  try {
    const members = new Parser(text.replace(/^[ \t]+|[ \t]+$/g, '')).list();
    return members.length === 1 ? members[0] : undefined;
  } catch (error) {
    if (error instanceof Fail) return undefined;
    throw error;
  }
}

/** Top-level commas, outside quoted strings (an escape inside one is a pair). */
function splitMembers(field: string): string[] {
  const members: string[] = [];
  let current = '';
  let quoted = false;
  for (let i = 0; i < field.length; i++) {
    const c = field[i] as string;
    if (quoted && c === '\\') {
      current += c + (field[i + 1] ?? '');
      i++;
      continue;
    }
    if (c === '"') quoted = !quoted;
    if (c === ',' && !quoted) {
      members.push(current);
      current = '';
    } else current += c;
  }
  members.push(current);
  return members;
}

function nameOf(member: Member): string | undefined {
  const { item } = member;
  return item !== 'inner-list' && (item.type === 'string' || item.type === 'token') ? item.value : undefined;
}

function integer(params: Params, key: string): number | undefined {
  const value = params.get(key);
  return value?.type === 'integer' && value.value >= 0 ? value.value : undefined;
}

function text(params: Params, key: string): string | undefined {
  const value = params.get(key);
  return value?.type === 'string' || value?.type === 'token' ? value.value : undefined;
}

function bytes(params: Params, key: string): string | undefined {
  const value = params.get(key);
  return value?.type === 'bytes' ? value.value : undefined;
}

/** `value` without its undefined fields, as parseRateLimit() leaves absent ones out. */
function defined<T>(value: Record<string, unknown>): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

function referenceLimits(field: string): RateLimitStatus[] {
  const out: RateLimitStatus[] = [];
  for (const text of splitMembers(field)) {
    const member = strictMember(text);
    const policy = member && nameOf(member);
    const remaining = member && integer(member.params, 'r');
    if (member === undefined || policy === undefined || remaining === undefined) continue;
    out.push(
      defined<RateLimitStatus>({
        policy,
        remaining,
        resetSeconds: integer(member.params, 't'),
        partitionKey: bytes(member.params, 'pk'),
      }),
    );
  }
  return out;
}

function referencePolicies(field: string): RateLimitPolicy[] {
  const out: RateLimitPolicy[] = [];
  for (const member of splitMembers(field).map(strictMember)) {
    const policy = member && nameOf(member);
    const quota = member && integer(member.params, 'q');
    if (member === undefined || policy === undefined || quota === undefined) continue;
    out.push(
      defined<RateLimitPolicy>({
        policy,
        quota,
        quotaUnit: text(member.params, 'qu'),
        windowSeconds: integer(member.params, 'w'),
        partitionKey: bytes(member.params, 'pk'),
      }),
    );
  }
  return out;
}

// Generators: valid structured-field pieces, and near misses a real server could send.

const digits = (min: number, max: number) =>
  fc.string({ unit: fc.constantFrom(...'0123456789'), minLength: min, maxLength: max });
const integerText = fc.oneof(
  fc.tuple(fc.constantFrom('', '-'), digits(1, 16)).map(([s, d]) => s + d),
  fc.constantFrom('0', '-0', '00', '1', '30', '999999999999999', '1000000000000000'),
);
const decimalText = fc
  .tuple(fc.constantFrom('', '-'), digits(1, 13), digits(0, 4))
  .map(([s, i, f]) => `${s}${i}.${f}`);
const stringText = fc
  .array(
    fc.oneof(
      fc.constantFrom('a', 'Z', ' ', ',', ';', '=', '\\"', '\\\\', '%', '(', ')', ':', '@'),
      fc.constantFrom('\\q', '\t', '\u00e9', '\u007f'), // invalid inside a String
    ),
    { maxLength: 6 },
  )
  .map((parts) => `"${parts.join('')}"`);
const tokenText = fc
  .tuple(
    fc.constantFrom('a', 'Z', '*', 'default', 'foo:bar/baz', 'x-y.z'),
    fc.constantFrom('', '1', '_', '!', '#', "'"),
  )
  .map(([a, b]) => a + b);
const bytesText = fc.constantFrom(':YWJj:', '::', ':dXNlcjE=:', ':not base64!:');
const bareText = fc.oneof(
  { weight: 4, arbitrary: integerText },
  decimalText,
  stringText,
  tokenText,
  bytesText,
  fc.constantFrom(
    '?0',
    '?1',
    '?2',
    '@1700000000',
    '@-1',
    '@1.5',
    '%"caf%c3%a9"',
    '%"a%C3"',
    '%"bad%zz"',
    '%""',
  ),
);
const keyText = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('r', 't', 'q', 'w', 'qu', 'pk') },
  fc.constantFrom('x', '*k', 'a_b-c.d', 'R', 'T', '1x', 'acme-extension'),
);
const paramText = fc
  .tuple(fc.constantFrom(';', '; ', ';  ', ' ;', ';\t'), keyText, fc.option(bareText, { nil: undefined }))
  .map(([semi, key, value]) => `${semi}${key}${value === undefined ? '' : `=${value}`}`);
const memberText = fc
  .tuple(
    fc.oneof(
      { weight: 6, arbitrary: fc.oneof(stringText, tokenText) },
      bareText,
      fc.constantFrom('("a" "b")', '()', '("a";r=0 b)'),
      fc.constant(''),
    ),
    fc.array(paramText, { maxLength: 5 }),
  )
  .map(([item, params]) => item + params.join(''));
const fieldText = fc
  .tuple(fc.array(memberText, { maxLength: 4 }), fc.constantFrom(', ', ',', ' , ', ',\t', ',  '))
  .map(([members, separator]) => members.join(separator));

test('parseRateLimit keeps exactly the members a strict RFC 9651 parser accepts, member by member', () => {
  fc.assert(
    fc.property(fieldText, fieldText, (limit, policy) => {
      const info = parseRateLimit({ ratelimit: limit, 'ratelimit-policy': policy });
      const limits = referenceLimits(limit.trim());
      const policies = referencePolicies(policy.trim());
      assert.deepStrictEqual(
        info,
        limits.length + policies.length > 0 ? { limits, policies } : undefined,
        `RateLimit: ${limit}\nRateLimit-Policy: ${policy}`,
      );
    }),
    { numRuns: 5_000 },
  );
});

test('retryDelay from RateLimit is the longest t among the members with r=0, by the strict parser', () => {
  fc.assert(
    fc.property(fieldText, (field) => {
      const resets = referenceLimits(field.trim())
        .filter((l) => l.remaining === 0 && l.resetSeconds !== undefined)
        .map((l) => Math.min((l.resetSeconds as number) * 1000, 2 ** 31 - 1));
      const expected = resets.length > 0 ? Math.max(...resets) : undefined;
      assert.equal(retryDelay({ ratelimit: field }, NOW), expected, field);
    }),
    { numRuns: 5_000 },
  );
});
