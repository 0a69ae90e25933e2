import assert from 'node:assert/strict';
import { test } from 'node:test';
import { auth } from '../src/auth.ts';
import { circuitBreaker } from '../src/breaker.ts';
import { captureStatus } from '../src/capture.ts';
import { createFetch } from '../src/chain.ts';
import { definePolicy } from '../src/policy.ts';
import { retry } from '../src/retry.ts';
import { timeout } from '../src/timeout.ts';

/** A token-shaped text a getter's error might quote: it must never reach the message. */
const SECRET = 'sk-proj-Zq8xY2aB7cD9eF1gH3iJ4kL5';

/** An object whose `key` getter throws an error that quotes {@link SECRET}. */
function throwing(key: string, fields: object = {}): object {
  return Object.defineProperty({ ...fields }, key, {
    enumerable: true,
    get() {
      throw new Error(`config service said: ${SECRET}`);
    },
  });
}

/** Asserts `run` throws a TypeError whose message has `line`, with `cause` as its cause (when given) and no secret. */
function throwsNaming(run: () => unknown, line: string, cause?: unknown): void {
  assert.throws(run, (error: unknown) => {
    assert.ok(error instanceof TypeError, `a TypeError, got ${String(error)}`);
    assert.ok(error.message.includes(`\n  - ${line}: could not be read (see cause)`), error.message);
    assert.ok(!error.message.includes(SECRET), error.message);
    if (cause !== undefined) assert.equal(error.cause, cause);
    else assert.ok(error.cause instanceof Error, 'the input’s own error is the cause');
    return true;
  });
}

test('a config getter that throws is a TypeError naming its path, with the getter’s error as cause and not quoted', () => {
  const error = new Error(`vault said: ${SECRET}`);
  const config = Object.defineProperty({}, 'retry', {
    enumerable: true,
    get() {
      throw error;
    },
  });
  throwsNaming(() => definePolicy(config), 'definePolicy().retry', error);
  throwsNaming(
    () => definePolicy({ retry: throwing('attempts', { resend: 'safe' }) }),
    'definePolicy().retry.attempts',
  );
  throwsNaming(
    () => definePolicy({ breaker: { open: throwing('maxMs') } }),
    'definePolicy().breaker.open.maxMs',
  );
});

test('a frozen config with a throwing getter inside is named the same way', () => {
  // The guard's proxies must not trip over the invariants of frozen objects.
  const config = Object.freeze({ timeout: Object.freeze(throwing('totalMs', { attemptMs: 1000 })) });
  throwsNaming(() => definePolicy(config), 'definePolicy().timeout.totalMs');
});

test('a config proxy whose traps throw is a TypeError naming the object, or the key being read', () => {
  const fail = () => {
    throw new Error(SECRET);
  };
  // Every key read throws (a "strict" config object): the first key read is named.
  throwsNaming(() => definePolicy(new Proxy({}, { get: fail })), 'definePolicy().name');
  throwsNaming(() => definePolicy({ retry: new Proxy({}, { get: fail }) }), 'definePolicy().retry.attempts');
  // Listing the keys (for unknown options) throws: the object is named.
  throwsNaming(() => definePolicy(new Proxy({}, { ownKeys: fail })), 'definePolicy()');
  throwsNaming(() => definePolicy({ retry: new Proxy({}, { ownKeys: fail }) }), 'definePolicy().retry');
  throwsNaming(() => definePolicy({ retry: new Proxy({}, { has: fail }) }), 'definePolicy().retry.attempts');
  // Any other trap: the whole input, at least.
  throwsNaming(() => definePolicy({ retry: new Proxy({}, { getPrototypeOf: fail }) }), 'definePolicy()');
  throwsNaming(
    () => definePolicy({ retry: { statuses: new Proxy([503], { get: fail }) } }),
    'definePolicy().retry.statuses.length',
  );
});

test('factories that take options directly name the throwing getter too', () => {
  throwsNaming(() => retry(throwing('attempts')), 'retry().attempts');
  throwsNaming(() => circuitBreaker(throwing('consecutiveFailures')), 'circuitBreaker().consecutiveFailures');
  throwsNaming(() => timeout(throwing('attemptMs') as never), 'timeout().attemptMs');
  throwsNaming(() => auth(throwing('token') as never), 'auth().token');
  throwsNaming(() => captureStatus(throwing('bodyWaitMs')), 'captureStatus().bodyWaitMs');
  throwsNaming(() => createFetch(throwing('fetch') as never), 'createFetch().fetch');
});

test('10,000 bad entries make a short message (100,000 made 6.7 MB): the first 20 paths, then how many more', () => {
  assert.throws(
    () => definePolicy({ retry: { statuses: Array(10_000).fill('x') } } as never),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, String(error));
      // Before: 680 KB.
      assert.ok(error.message.length < 2_000, `${error.message.length} characters`);
      for (let i = 0; i < 20; i++)
        assert.ok(
          error.message.includes(`definePolicy().retry.statuses.${i}: must be a number (got "x")\n`),
          error.message,
        );
      assert.ok(!error.message.includes('statuses.20:'), error.message);
      assert.ok(error.message.endsWith('\n  - ... and 9980 more'), error.message.slice(-100));
      return true;
    },
  );
});

test('10,000 unknown options are listed as the first 20 names, then how many more', () => {
  const config = Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`extra${i}`, 1]));
  assert.throws(
    () => definePolicy({ retry: config } as never),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, String(error));
      assert.ok(error.message.length < 1_000, `${error.message.length} characters`);
      assert.ok(
        error.message.includes('definePolicy().retry: unknown option "extra0", "extra1", '),
        error.message,
      );
      assert.ok(error.message.includes('"extra19", ... and 9980 more'), error.message);
      assert.ok(!error.message.includes('"extra20"'), error.message);
      return true;
    },
  );
});

test('a few bad entries are all listed, with no "more"', () => {
  assert.throws(
    () => definePolicy({ retry: { statuses: Array(20).fill('x') } } as never),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, String(error));
      assert.ok(error.message.includes('statuses.19: must be a number (got "x")'), error.message);
      assert.ok(!error.message.includes('more'), error.message);
      return true;
    },
  );
});

test('a huge bigint value is cut as a long string is', () => {
  assert.throws(
    () => definePolicy({ retry: { attempts: 10n ** 3000n } } as never),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, String(error));
      assert.ok(error.message.length < 200, error.message);
      assert.match(error.message, /retry\.attempts: must be a number \(got 10{59}…n\)/);
      return true;
    },
  );
});
