import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { type JsonValue, memoryStore } from '../src/store.ts';
import { collector } from './helpers/gc.ts';

/** A clock the test moves by hand. */
function manualClock(start = 1_000_000): { now: () => number; advance: (ms: number) => void } {
  let t = start;
  return {
    now: () => t,
    advance: (ms) => {
      t += ms;
    },
  };
}

test('get returns what set stored, and undefined for a key never set', async () => {
  const store = memoryStore();
  await store.set('n', 42);
  await store.set('s', 'text');
  await store.set('b', false);
  await store.set('z', null);
  await store.set('o', { a: [1, 'two', { three: true }] });
  assert.equal(await store.get('n'), 42);
  assert.equal(await store.get('s'), 'text');
  assert.equal(await store.get('b'), false);
  assert.equal(await store.get('z'), null);
  assert.deepEqual(await store.get('o'), { a: [1, 'two', { three: true }] });
  assert.equal(await store.get('missing'), undefined);
});

test('delete removes a key and resolves whether a value was there', async () => {
  const store = memoryStore();
  await store.set('k', 1);
  assert.equal(await store.delete('k'), true);
  assert.equal(await store.get('k'), undefined);
  assert.equal(await store.delete('k'), false);
  assert.equal(store.size, 0);
});

test('objects are kept as copies: changing the original or a value read changes nothing stored', async () => {
  const store = memoryStore();
  const original = { count: 1, tags: ['a'] };
  await store.set('o', original);
  original.count = 2;
  original.tags.push('b');
  const read = (await store.get('o')) as { count: number; tags: string[] };
  assert.deepEqual(read, { count: 1, tags: ['a'] });
  read.tags.push('c');
  assert.deepEqual(await store.get('o'), { count: 1, tags: ['a'] });
});

test('an entry expires ttlMs after it was set', async () => {
  const clock = manualClock();
  const store = memoryStore({ now: clock.now });
  await store.set('k', 'v', 1000);
  clock.advance(999);
  assert.equal(await store.get('k'), 'v');
  clock.advance(1);
  assert.equal(await store.get('k'), undefined);
  assert.equal(store.size, 0, 'an expired entry is removed when accessed');
});

test('set without ttlMs replaces an earlier TTL, so the new value does not expire', async () => {
  const clock = manualClock();
  const store = memoryStore({ now: clock.now });
  await store.set('k', 1, 100);
  await store.set('k', 2);
  clock.advance(10_000_000);
  assert.equal(await store.get('k'), 2);
});

test('delete of an expired entry resolves false: it was already gone', async () => {
  const clock = manualClock();
  const store = memoryStore({ now: clock.now });
  await store.set('k', 1, 100);
  clock.advance(100);
  assert.equal(await store.delete('k'), false);
});

test('increment creates a missing key at `by` with the TTL given', async () => {
  const clock = manualClock();
  const store = memoryStore({ now: clock.now });
  assert.equal(await store.increment('hits'), 1);
  assert.equal(await store.increment('hits'), 2);
  assert.equal(await store.increment('w', 5, 1000), 5);
  clock.advance(1000);
  assert.equal(await store.get('w'), undefined, 'the created key expires with its TTL');
  assert.equal(await store.get('hits'), 2, 'a key created without a TTL does not expire');
});

test('increment keeps the TTL of an existing key, whatever ttlMs it is given', async () => {
  const clock = manualClock();
  const store = memoryStore({ now: clock.now });
  assert.equal(await store.increment('window', 1, 1000), 1);
  clock.advance(900);
  assert.equal(await store.increment('window', 1, 1000), 2);
  assert.equal(await store.increment('window', -0.5, 60_000), 1.5);
  clock.advance(100);
  assert.equal(await store.get('window'), undefined, 'the window ends 1000 ms after it was created');
  assert.equal(await store.increment('window', 1, 1000), 1, 'an expired key starts again from 0');
});

test('increment rejects with a TypeError when the key holds something other than a number', async () => {
  const store = memoryStore();
  await store.set('s', '3');
  await store.set('o', { n: 1 });
  await assert.rejects(store.increment('s'), TypeError);
  await assert.rejects(store.increment('o'), TypeError);
  await assert.rejects(store.increment('x', Number.NaN), TypeError);
  assert.equal(await store.get('s'), '3');
});

test('increment’s error for a key that holds no number shows a long key cut short, and a key holding a credential not at all', async () => {
  const store = memoryStore();
  // A key built from a request (a rate limit's client id, a path) can be long, or hold a client's API key.
  const long = `rl:${'k'.repeat(100_000)}`;
  const secret = 'rl:"100-per-60s":sk-live-4f9Qx7Lm2Za8Rt5Kp1Vb:1700000000000';
  await store.set(long, 'text');
  await store.set(secret, 'text');
  await assert.rejects(store.increment(long), (error: unknown) => {
    assert.ok(error instanceof TypeError);
    assert.ok(error.message.length < 200, `a message of ${error.message.length} characters`);
    assert.match(error.message, /^store\.increment\(\): key "rl:k+…" does not hold a number$/);
    return true;
  });
  await assert.rejects(store.increment(secret), (error: unknown) => {
    assert.ok(error instanceof TypeError);
    assert.ok(!error.message.includes('sk-live-4f9Qx7Lm2Za8Rt5Kp1Vb'), error.message);
    return true;
  });
});

test('compareAndSet with expected undefined sets only a key that is absent', async () => {
  const store = memoryStore();
  assert.equal(await store.compareAndSet('lock', undefined, 'a'), true);
  assert.equal(await store.compareAndSet('lock', undefined, 'b'), false);
  assert.equal(await store.get('lock'), 'a');
});

test('compareAndSet sets when the value matches (objects by JSON) and not when it differs', async () => {
  const store = memoryStore();
  await store.set('n', 1);
  assert.equal(await store.compareAndSet('n', 2, 3), false);
  assert.equal(await store.get('n'), 1);
  assert.equal(await store.compareAndSet('n', 1, 3), true);
  assert.equal(await store.get('n'), 3);
  assert.equal(await store.compareAndSet('n', '3', 4), false, 'the string "3" is not the number 3');

  await store.set('o', { v: 1, owner: 'a' });
  const current = await store.get('o');
  assert.equal(await store.compareAndSet('o', { v: 1, owner: 'b' }, { v: 2, owner: 'b' }), false);
  assert.equal(await store.compareAndSet('o', current, { v: 2, owner: 'b' }), true);
  assert.deepEqual(await store.get('o'), { v: 2, owner: 'b' });
  assert.equal(await store.compareAndSet('absent', 1, 2), false, 'a value is expected, none is there');
});

test('compareAndSet treats an expired entry as absent and applies its own TTL', async () => {
  const clock = manualClock();
  const store = memoryStore({ now: clock.now });
  await store.set('lease', 'a', 100);
  clock.advance(100);
  assert.equal(await store.compareAndSet('lease', 'a', 'x'), false, 'the expired value no longer matches');
  assert.equal(await store.compareAndSet('lease', undefined, 'b', 50), true);
  clock.advance(49);
  assert.equal(await store.get('lease'), 'b');
  clock.advance(1);
  assert.equal(await store.get('lease'), undefined);
});

test('over maxEntries the least recently used key goes, and touching a key keeps it', async () => {
  const store = memoryStore({ maxEntries: 3 });
  await store.set('a', 1);
  await store.set('b', 2);
  await store.set('c', 3);
  await store.get('a');
  await store.set('d', 4);
  assert.equal(await store.get('b'), undefined, 'b was the least recently used');
  await store.increment('c');
  await store.set('e', 5);
  assert.equal(await store.get('a'), undefined);
  assert.equal(store.size, 3);
  assert.deepEqual([await store.get('c'), await store.get('d'), await store.get('e')], [4, 4, 5]);
});

test('over maxEntries expired entries are evicted before live ones', async () => {
  const clock = manualClock();
  const store = memoryStore({ maxEntries: 4, now: clock.now });
  await store.set('short', 1, 10);
  await store.set('b', 2);
  await store.set('c', 3);
  await store.set('d', 4);
  await store.get('short'); // now the most recently used
  clock.advance(20);
  await store.set('e', 5);
  assert.equal(store.size, 4);
  assert.deepEqual(
    [await store.get('b'), await store.get('c'), await store.get('d'), await store.get('e')],
    [2, 3, 4, 5],
    'the expired entry went, not the least recently used live one',
  );
});

test('1,000,000 inserts leave the store at maxEntries, keeping the newest', async () => {
  const store = memoryStore();
  for (let i = 0; i < 1_000_000; i++) await store.set(`k${i}`, i);
  assert.equal(store.size, 10_000);
  assert.equal(await store.get('k989999'), undefined);
  assert.equal(await store.get('k990000'), 990_000);
  assert.equal(await store.get('k999999'), 999_999);
});

test('touching the same few keys a million times keeps memory flat while the store is below maxEntries', async () => {
  // Each touch moves its key to the end of the Map. V8 (Deno 2.9; Node when the code is
  // not optimized) kept every table the Map had outgrown alive while an eviction cursor
  // started on it had not moved: about 54 B per touch, 54 MB here, until the store filled.
  const gc = collector();
  const store = memoryStore();
  for (let i = 0; i < 8; i++) await store.set(`client-${i}`, 0);
  gc();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < 1_000_000; i++) await store.increment(`client-${i % 8}`);
  gc();
  const grew = process.memoryUsage().heapUsed - before;
  assert.ok(grew < 16_000_000, `heapUsed grew ${(grew / 1e6).toFixed(1)} MB`);
  assert.equal(await store.get('client-7'), 125_000);
});

test('values JSON cannot carry unchanged and bad TTLs are refused', async () => {
  const store = memoryStore();
  const bad: unknown[] = [Number.NaN, Number.POSITIVE_INFINITY, undefined, () => 1, Symbol('s'), 1n];
  for (const value of bad) await assert.rejects(store.set('k', value as JsonValue), TypeError);
  const cycle: Record<string, unknown> = {};
  cycle.self = cycle;
  await assert.rejects(store.set('k', cycle as JsonValue), TypeError);
  await assert.rejects(store.set('k', 1, 0), RangeError);
  await assert.rejects(store.set('k', 1, -5), RangeError);
  await assert.rejects(store.set('k', 1, Number.POSITIVE_INFINITY), RangeError);
  await assert.rejects(store.increment('k', 1, Number.NaN), RangeError);
  await assert.rejects(store.compareAndSet('k', undefined, 1, 0), RangeError);
  await assert.rejects(store.get(1 as unknown as string), TypeError);
  assert.equal(store.size, 0, 'nothing was stored');
});

test('bad options are a TypeError listing every problem', () => {
  assert.throws(
    () => memoryStore({ maxEntries: 0, now: 5 as unknown as () => number, ttl: 1 } as never),
    (error: unknown) => {
      assert.ok(error instanceof TypeError);
      assert.match(error.message, /memoryStore\(\)\.maxEntries: must be at least 1 \(got 0\)/);
      assert.match(error.message, /memoryStore\(\)\.now: must be a function/);
      assert.match(error.message, /unknown option "ttl"/);
      return true;
    },
  );
  assert.throws(() => memoryStore({ maxEntries: 1.5 }), /whole number/);
  assert.throws(() => memoryStore({ maxEntries: 20_000_000 }), /at most/);
  assert.throws(() => memoryStore('big' as never), TypeError);
});

/** One step of the model-based property below. */
type Op =
  | { op: 'set'; key: string; value: number; ttlMs: number | undefined }
  | { op: 'get'; key: string }
  | { op: 'delete'; key: string }
  | { op: 'increment'; key: string; by: number; ttlMs: number | undefined }
  | { op: 'cas'; key: string; expected: number | undefined; next: number; ttlMs: number | undefined }
  | { op: 'advance'; ms: number };

test('any sequence of operations behaves like a plain map with expiry times', async () => {
  const key = fc.constantFrom('a', 'b', 'c');
  const ttl = fc.option(fc.integer({ min: 1, max: 50 }), { nil: undefined });
  const small = fc.integer({ min: -3, max: 3 });
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.record({ op: fc.constant('set' as const), key, value: small, ttlMs: ttl }),
    fc.record({ op: fc.constant('get' as const), key }),
    fc.record({ op: fc.constant('delete' as const), key }),
    fc.record({ op: fc.constant('increment' as const), key, by: small, ttlMs: ttl }),
    fc.record({
      op: fc.constant('cas' as const),
      key,
      expected: fc.option(small, { nil: undefined }),
      next: small,
      ttlMs: ttl,
    }),
    fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 40 }) }),
  );
  await fc.assert(
    fc.asyncProperty(fc.array(op, { maxLength: 60 }), async (ops) => {
      const clock = manualClock();
      const store = memoryStore<number>({ now: clock.now });
      const model = new Map<string, { value: number; expiresAt: number }>();
      const read = (k: string): number | undefined => {
        const e = model.get(k);
        return e !== undefined && e.expiresAt > clock.now() ? e.value : undefined;
      };
      const until = (ttlMs: number | undefined): number =>
        ttlMs === undefined ? Number.POSITIVE_INFINITY : clock.now() + ttlMs;
      for (const step of ops) {
        switch (step.op) {
          case 'set':
            await store.set(step.key, step.value, step.ttlMs);
            model.set(step.key, { value: step.value, expiresAt: until(step.ttlMs) });
            break;
          case 'get':
            assert.equal(await store.get(step.key), read(step.key));
            break;
          case 'delete':
            assert.equal(await store.delete(step.key), read(step.key) !== undefined);
            model.delete(step.key);
            break;
          case 'increment': {
            const before = read(step.key);
            const expiresAt =
              before === undefined ? until(step.ttlMs) : (model.get(step.key)?.expiresAt ?? 0);
            const value = (before ?? 0) + step.by;
            model.set(step.key, { value, expiresAt });
            assert.equal(await store.increment(step.key, step.by, step.ttlMs), value);
            break;
          }
          case 'cas': {
            const matches = read(step.key) === step.expected;
            if (matches) model.set(step.key, { value: step.next, expiresAt: until(step.ttlMs) });
            assert.equal(await store.compareAndSet(step.key, step.expected, step.next, step.ttlMs), matches);
            break;
          }
          case 'advance':
            clock.advance(step.ms);
            break;
        }
      }
    }),
    { numRuns: 200 },
  );
});

test('a NaN or Infinity inside an object or array is refused, as at the top: JSON would store null in its place', async () => {
  const store = memoryStore();
  // Type-correct values (NaN is a number): a count gone wrong, a ratio divided by zero.
  const bad: JsonValue[] = [
    { count: Number.NaN },
    [1, Number.POSITIVE_INFINITY],
    { window: { ratio: Number.NEGATIVE_INFINITY } },
  ];
  for (const value of bad) {
    await assert.rejects(store.set('k', value), TypeError);
    await assert.rejects(store.compareAndSet('k', undefined, value), TypeError);
  }
  assert.equal(await store.get('k'), undefined, 'nothing was stored, not { count: null }');
  await store.set('k', { count: 0 });
  await assert.rejects(store.compareAndSet('k', { count: Number.NaN }, { count: 1 }), TypeError);
  assert.deepEqual(await store.get('k'), { count: 0 });
});

test('an array element JSON would write as null (a hole, undefined, a function, a symbol) is refused, as at the top', async () => {
  const store = memoryStore();
  // JSON keeps an array's length, so each of these would come back as null in its place.
  const holey: unknown[] = [1];
  holey[2] = 3;
  const bad = [holey, [1, undefined], { list: [() => 1] }, [Symbol('s')]] as unknown as JsonValue[];
  for (const value of bad) {
    await assert.rejects(store.set('k', value), /store\.set\(\): the value must be JSON-serialisable/);
    await assert.rejects(store.compareAndSet('k', undefined, value), TypeError);
  }
  assert.equal(await store.get('k'), undefined, 'nothing was stored, not [1, null, 3]');
  // An object's undefined field is left out, as JSON leaves it out: nothing reads differently.
  await store.set('k', { a: 1, b: undefined } as unknown as JsonValue);
  assert.deepEqual(await store.get('k'), { a: 1 });
});
