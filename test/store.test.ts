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
    assert.ok(error instanceof TypeError, 'error instanceof TypeError');
    assert.ok(error.message.length < 200, `a message of ${error.message.length} characters`);
    assert.match(error.message, /^store\.increment\(\): key "rl:k+…" does not hold a number$/);
    return true;
  });
  await assert.rejects(store.increment(secret), (error: unknown) => {
    assert.ok(error instanceof TypeError, 'error instanceof TypeError');
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
      assert.ok(error instanceof TypeError, 'error instanceof TypeError');
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

test('over maxBytes the least recently used entries go until the rest fit, the one just written never', async () => {
  // Each entry weighs its key's length plus its value's: the JSON text, a string's length, 8 for a number.
  const store = memoryStore({ maxBytes: 40 });
  await store.set('a', 'x'.repeat(9)); // 10
  await store.set('b', 1); // 9
  await store.set('c', { s: 'yy' }); // 1 + 10 = 11
  await store.get('a');
  await store.set('d', 'z'.repeat(10)); // 11: 41 in all, so b (the least recently used) goes
  assert.equal(await store.get('b'), undefined);
  assert.equal(store.size, 3);
  await store.set('e', 'w'.repeat(29)); // 30: c, a and d go, e stays alone
  assert.deepEqual(
    [await store.get('a'), await store.get('c'), await store.get('d'), await store.get('e')],
    [undefined, undefined, undefined, 'w'.repeat(29)],
  );
  assert.equal(store.size, 1);
});

test('a value replaced by a heavier one under the same key evicts by weight, as an insert does', async () => {
  const store = memoryStore({ maxBytes: 30 });
  await store.set('a', 1); // 9
  await store.set('b', 2); // 9
  await store.set('c', 3); // 9
  // An idempotency claim becoming its record: the same key, a much larger value.
  await store.set('c', 'r'.repeat(19)); // 20: a goes (9 + 9 + 20 = 38 > 30), then b (29 fits)
  assert.equal(await store.get('a'), undefined);
  assert.equal(await store.get('b'), 2);
  assert.equal(await store.get('c'), 'r'.repeat(19));
});

test('an entry heavier than maxBytes on its own is refused with a RangeError and changes nothing, rather than evicting every other entry', async () => {
  const store = memoryStore({ maxBytes: 100 });
  await store.set('a', 'kept');
  await store.set('b', { n: 1 });
  const huge = 'h'.repeat(100);
  await assert.rejects(store.set('c', huge), (error: unknown) => {
    assert.ok(error instanceof RangeError, 'error instanceof RangeError');
    assert.equal(error.message, 'store.set(): the entry weighs 101, over maxBytes (100)');
    return true;
  });
  await assert.rejects(store.set('a', huge), RangeError);
  await assert.rejects(
    store.compareAndSet('b', { n: 1 }, { big: huge }),
    /store\.compareAndSet\(\): the entry weighs/,
  );
  await assert.rejects(store.increment('k'.repeat(93)), /store\.increment\(\): the entry weighs 101/);
  assert.equal(store.size, 2);
  assert.equal(await store.get('a'), 'kept', 'a refused write leaves the old value');
  assert.deepEqual(await store.get('b'), { n: 1 });
  await store.set('c', 'h'.repeat(99)); // weighs exactly 100: fits, alone
  assert.equal(store.size, 1);
});

test('maxBytes must be a whole number of at least 1', () => {
  for (const maxBytes of [0, -1, 1.5, Number.POSITIVE_INFINITY, Number.NaN, '1' as never]) {
    assert.throws(
      () => memoryStore({ maxBytes }),
      (error: unknown) =>
        error instanceof TypeError && /memoryStore\(\)\.maxBytes: .*got/.test(error.message),
      `maxBytes ${String(maxBytes)}`,
    );
  }
  assert.equal(memoryStore({ maxBytes: 1, maxEntries: 1 }).size, 0);
});

/** One step of the weighted LRU property below. */
type WeightedOp =
  | { op: 'set'; key: string; value: JsonValue; ttlMs: number | undefined }
  | { op: 'get'; key: string }
  | { op: 'delete'; key: string }
  | { op: 'increment'; key: string; by: number; ttlMs: number | undefined }
  | { op: 'cas'; key: string; expected: JsonValue | undefined; next: JsonValue; ttlMs: number | undefined }
  | { op: 'advance'; ms: number };

test('under maxBytes, any sequence of writes, replaces, expiries, deletes and increments evicts exactly as an LRU whose weight is recomputed from scratch', async () => {
  // The store keeps a running total; the model sums its entries again at every step.
  // A total that drifted on any path (a replace, an expiry found on access, a delete,
  // an eviction) would evict more or less than the model, and a read below would differ.
  const maxBytes = 40;
  const keys = ['a', 'bb', 'ccc', 'dddd'];
  const key = fc.constantFrom(...keys);
  const ttl = fc.option(fc.integer({ min: 1, max: 50 }), { nil: undefined });
  const value: fc.Arbitrary<JsonValue> = fc.oneof(
    fc.integer({ min: -3, max: 3 }),
    fc.string({ maxLength: 40 }),
    fc.string({ maxLength: 30 }).map((s) => ({ s })),
    fc.constantFrom(null, true, [1, 'x']),
  );
  const op: fc.Arbitrary<WeightedOp> = fc.oneof(
    fc.record({ op: fc.constant('set' as const), key, value, ttlMs: ttl }),
    fc.record({ op: fc.constant('get' as const), key }),
    fc.record({ op: fc.constant('delete' as const), key }),
    fc.record({
      op: fc.constant('increment' as const),
      key,
      by: fc.integer({ min: -3, max: 3 }),
      ttlMs: ttl,
    }),
    fc.record({
      op: fc.constant('cas' as const),
      key,
      expected: fc.option(fc.integer({ min: -3, max: 3 }), { nil: undefined }),
      next: value,
      ttlMs: ttl,
    }),
    fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 40 }) }),
  );
  const weigh = (k: string, v: JsonValue): number =>
    k.length +
    (typeof v === 'string' ? v.length : typeof v === 'object' && v !== null ? JSON.stringify(v).length : 8);
  await fc.assert(
    fc.asyncProperty(fc.array(op, { maxLength: 60 }), async (ops) => {
      const clock = manualClock();
      // maxEntries far above what 4 keys need: no count eviction, and no sweep (it needs 500 inserts).
      const store = memoryStore({ maxBytes, maxEntries: 1000, now: clock.now });
      // Insertion order is use order, as in the store: a use deletes and sets the key again.
      const model = new Map<string, { value: JsonValue; expiresAt: number }>();
      const total = (): number => [...model].reduce((sum, [k, e]) => sum + weigh(k, e.value), 0);
      const until = (ttlMs: number | undefined): number =>
        ttlMs === undefined ? Number.POSITIVE_INFINITY : clock.now() + ttlMs;
      /** The model's live value, moved to the most recently used end; an expired one is dropped. */
      const touch = (k: string): JsonValue | undefined => {
        const e = model.get(k);
        if (e === undefined) return undefined;
        model.delete(k);
        if (e.expiresAt <= clock.now()) return undefined;
        model.set(k, e);
        return e.value;
      };
      /** Writes as the store does: refused when too heavy alone, else in, then the least recently used out. */
      const write = (k: string, v: JsonValue, expiresAt: number): boolean => {
        if (weigh(k, v) > maxBytes) return false;
        model.delete(k);
        model.set(k, { value: v, expiresAt });
        while (total() > maxBytes) model.delete(model.keys().next().value as string);
        return true;
      };
      for (const step of ops) {
        switch (step.op) {
          case 'set': {
            const written = write(step.key, step.value, until(step.ttlMs));
            const setting = store.set(step.key, step.value, step.ttlMs);
            await (written ? setting : assert.rejects(setting, RangeError));
            break;
          }
          case 'get':
            assert.deepEqual(await store.get(step.key), touch(step.key));
            break;
          case 'delete': {
            const was = model.get(step.key);
            model.delete(step.key);
            assert.equal(await store.delete(step.key), was !== undefined && was.expiresAt > clock.now());
            break;
          }
          case 'increment': {
            const expiresAt = model.get(step.key)?.expiresAt ?? 0;
            const before = touch(step.key);
            const incrementing = store.increment(step.key, step.by, step.ttlMs);
            if (before !== undefined && typeof before !== 'number') {
              await assert.rejects(incrementing, TypeError);
            } else if (before === undefined) {
              assert.ok(
                write(step.key, step.by, until(step.ttlMs)),
                'write(step.key, step.by, until(step.ttlMs))',
              );
              assert.equal(await incrementing, step.by);
            } else {
              // The value changes in place: same weight, same TTL, same place.
              model.set(step.key, { value: before + step.by, expiresAt });
              assert.equal(await incrementing, before + step.by);
            }
            break;
          }
          case 'cas': {
            const matches = touch(step.key) === step.expected;
            const setting = store.compareAndSet(step.key, step.expected, step.next, step.ttlMs);
            if (matches && !write(step.key, step.next, until(step.ttlMs)))
              await assert.rejects(setting, RangeError);
            else assert.equal(await setting, matches);
            break;
          }
          case 'advance':
            clock.advance(step.ms);
            break;
        }
        // Every key read back, in a fixed order (each read is a use, in both).
        for (const k of keys) assert.deepEqual(await store.get(k), touch(k), `key ${k} after ${step.op}`);
        assert.equal(store.size, model.size);
        assert.ok(total() <= maxBytes, 'total() <= maxBytes');
      }
    }),
    { numRuns: 300 },
  );
});

test('expired entries swept to make room give back their weight: no live entry goes for them', async () => {
  const clock = manualClock();
  // maxEntries 4 sweeps (at most) every 2 inserts.
  const store = memoryStore({ maxEntries: 4, maxBytes: 40, now: clock.now });
  await store.set('a', 'x'.repeat(9), 10); // 10
  await store.set('b', 'x'.repeat(9), 10); // 10
  await store.set('c', 1); // 9
  await store.set('d', 2); // 9
  clock.advance(20);
  await store.set('e', 3); // 9: over both bounds, so the sweep removes a and b (27 left)
  await store.set('f', 'y'.repeat(9)); // 10: 37 in all, under both
  assert.deepEqual(
    [await store.get('c'), await store.get('d'), await store.get('e'), await store.get('f')],
    [1, 2, 3, 'y'.repeat(9)],
  );
});
