/**
 * @module
 * `Store`: the small async key-value interface that rate limits, idempotency records
 * and shared pacing keep their state in, and `memoryStore()`, its in-memory LRU + TTL
 * implementation. Every component that takes a `store` defaults to its own memory
 * store; a fleet can share state by passing one backed by Redis or the like.
 *
 * The interface is shaped so such a store is a thin wrapper: values are JSON (what a
 * remote store keeps as text), every method is async, and each operation maps to one
 * atomic command (`GET`, `SET PX`, `DEL`, `INCRBYFLOAT` + `PEXPIRE NX`, a
 * compare-and-set script). The memory store keeps the same semantics, copies
 * included, so code tested against it behaves the same against a remote one.
 */

import * as z from 'zod/mini';
import { DEFAULT_MAX_ENTRIES, MAX_ENTRIES_LIMIT, PRIMITIVE_BYTES } from './limits.ts';
import { describeValue, functionOption, isFunction, validate } from './options.ts';

/** The expiry of an entry without a TTL. */
const NEVER = Infinity;

/** A value a store can keep: anything that survives `JSON.stringify` / `JSON.parse` unchanged. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/**
 * A small async key-value store with TTLs, shared by breakwater's stateful components.
 *
 * `V` is the type of the values: the default `JsonValue` suits a store shared by
 * several components. Keys that `increment` touches hold numbers, so a store used
 * for counters needs a `V` that includes `number`.
 *
 * TTLs are in ms, finite and greater than 0; an omitted TTL means the entry does not
 * expire. An expired entry is absent for every method.
 */
export interface Store<V extends JsonValue = JsonValue> {
  /** The value under `key`, or `undefined` if absent or expired. Objects come back as fresh copies. */
  get(key: string): Promise<V | undefined>;
  /**
   * Puts `value` under `key`, replacing any value and TTL (like Redis `SET`): without
   * `ttlMs` the entry does not expire. Objects are copied (stored as JSON).
   */
  set(key: string, value: V, ttlMs?: number): Promise<void>;
  /** Removes `key`; resolves whether a live (unexpired) entry was there. */
  delete(key: string): Promise<boolean>;
  /**
   * Adds `by` (default 1; any finite number, negative too) to the number under `key`
   * and resolves the new value. An absent or expired key starts from 0 and gets
   * `ttlMs`; an existing key keeps its TTL, whatever `ttlMs` says (like Redis `INCR`
   * followed by `PEXPIRE ... NX`): a fixed-window counter expires when its window
   * ends, however often it is incremented. Rejects with a `TypeError` if the key holds
   * something other than a number.
   */
  increment(key: string, by?: number, ttlMs?: number): Promise<number>;
  /**
   * Sets `key` to `next` (with `ttlMs`, as `set`) only if it currently holds
   * `expected`, atomically; resolves whether it did. `expected === undefined` means
   * "only if absent" (an expired entry counts as absent). Values are compared as JSON
   * text, as a remote store would: pass back what `get` gave you.
   */
  compareAndSet(key: string, expected: V | undefined, next: V, ttlMs?: number): Promise<boolean>;
}

/**
 * The option schema of a `store`: an object with the methods breakwater calls (`get`,
 * `delete`, `compareAndSet`). Shared by every component that takes one. @internal
 */
export const storeSchema: z.ZodMiniType<Store> = /* @__PURE__ */ z.custom<Store>((value) => {
  const store = value as Partial<Store> | null;
  return isFunction(store?.get) && isFunction(store?.delete) && isFunction(store?.compareAndSet);
}, 'must be a Store (get, delete, compareAndSet)');

/** A {@link Store} in this process's memory. */
export interface MemoryStore<V extends JsonValue = JsonValue> extends Store<V> {
  /** Entries held right now, expired ones included until they are removed. At most `maxEntries`. */
  readonly size: number;
}

/** Options for {@link memoryStore}. */
export interface MemoryStoreOptions {
  /**
   * The most entries kept; past it, expired entries go first, then the least recently
   * used. Default 10,000; at most 10,000,000.
   */
  maxEntries?: number | undefined;
  /**
   * The most the entries may weigh together; past it, entries go as past `maxEntries`.
   * An entry weighs its key's length plus its value's: the JSON text's length for an
   * object or array, the length of a string, 8 for a number, boolean or null. That is
   * characters, about bytes (a character takes 1 or 2 bytes in memory, a few tens
   * of bytes per entry on top). Default: no limit, as a count bounds memory when every
   * value is small. Set it when some values can be large: one entry heavier than this
   * on its own is refused (the write rejects with a `RangeError` and changes nothing),
   * rather than evicting every other entry to keep it.
   */
  maxBytes?: number | undefined;
  /** The clock, epoch ms. Default `Date.now`; inject one in tests. */
  now?: (() => number) | undefined;
}

const optionsSchema = z.optional(
  z.strictObject({
    maxEntries: z.optional(
      z.number().check(z.int('must be a whole number'), z.minimum(1), z.maximum(MAX_ENTRIES_LIMIT)),
    ),
    maxBytes: z.optional(z.number().check(z.int('must be a whole number'), z.minimum(1))),
    now: z.optional(functionOption<() => number>()),
  }),
);

/**
 * One stored value, with short property names (they survive minification). A
 * primitive is kept as it is; an object or array as its JSON text, so the store holds
 * a copy (as a remote store would) and compares by text.
 */
interface Entry {
  /** The primitive, or the JSON text of an object or array. */
  v: string | number | boolean | null;
  /** Whether `v` is JSON text. */
  j: boolean;
  /** Epoch ms at which the entry is gone; `Infinity` for none. */
  exp: number;
}

/** Throws `Type` with `problem` for the store method `method`, e.g. `store.set(): ...`. */
function fail(method: string, problem: string, Type: ErrorConstructor = TypeError): never {
  throw new Type(`store.${method}(): ${problem}`);
}

/**
 * A `JSON.stringify` replacer that throws wherever JSON would write null in a value's
 * place, at any depth, so the value is refused rather than changed: a NaN or ±Infinity
 * (`{ count: NaN }` is a well-typed JsonValue that would come back `{ count: null }`),
 * and in an array (whose length JSON keeps) a hole, undefined, a function or a symbol.
 * In an object, JSON leaves such a field out, which reads the same for undefined.
 */
function unchanged(this: unknown, _key: string, inner: unknown): unknown {
  if (
    typeof inner === 'number'
      ? !Number.isFinite(inner)
      : Array.isArray(this) &&
        (inner === undefined || typeof inner === 'function' || typeof inner === 'symbol')
  ) {
    throw inner;
  }
  return inner;
}

/**
 * `value` as an entry expiring `ttlMs` after `at` (never without a TTL), or a
 * `TypeError` if JSON would not give the value back unchanged.
 */
function encode(value: unknown, method: string, ttlMs?: unknown, at = 0): Entry {
  let json: string | undefined;
  try {
    json = JSON.stringify(value, unchanged);
  } catch {
    // BigInt, cycles and what unchanged() refuses: reported below, without the runtime's wording.
  }
  // undefined, functions and symbols have no JSON at all.
  if (json === undefined) fail(method, `the value must be JSON-serialisable (got ${describeValue(value)})`);
  // A primitive is kept as it is (increment adds to it), an object or array as its text.
  const text = typeof value === 'object' && value !== null;
  return { v: text ? json : (value as Entry['v']), j: text, exp: expiry(ttlMs, at, method) };
}

function checkKey(key: unknown, method: string): void {
  if (typeof key !== 'string') fail(method, `the key must be a string (got ${describeValue(key)})`);
}

/** The expiry for `ttlMs` from `at`: `Infinity` without one. */
function expiry(ttlMs: unknown, at: number, method: string): number {
  if (ttlMs === undefined) return NEVER;
  if (typeof ttlMs === 'number' && ttlMs > 0 && ttlMs < NEVER) return at + ttlMs;
  // A number out of range is a RangeError, anything else a TypeError.
  return fail(
    method,
    `ttlMs must be a finite number of ms > 0 (got ${describeValue(ttlMs)})`,
    typeof ttlMs === 'number' ? RangeError : TypeError,
  );
}

/**
 * A bounded in-memory {@link Store}: least-recently-used eviction plus TTLs, and no
 * timers (a timer would keep a process alive and trip Deno's leak sanitizer).
 *
 * - Every operation is O(1) amortised. A `Map` keeps the entries in use order: a
 *   read or write moves its key to the end, eviction takes from the front.
 * - Expired entries are removed when accessed. When a write takes the store past
 *   `maxEntries` or `maxBytes`, expired entries go first: a sweep removes them, at most
 *   once per `maxEntries / 2` inserts and only when something can have expired (which
 *   is what keeps the sweep's cost amortised O(1)). If still over, the least recently
 *   used go.
 * - Values are copied in and out as JSON, exactly as a remote store would see them.
 *
 * @example
 * ```ts
 * import { memoryStore } from 'breakwater';
 *
 * const store = memoryStore({ maxEntries: 1000, maxBytes: 1_048_576 });
 * const inWindow = await store.increment('rate:api.example.com', 1, 60_000); // 1, expires in 60 s
 * await store.compareAndSet('lock:job-7', undefined, 'worker-a', 30_000); // true: it was free
 * ```
 */
export function memoryStore<V extends JsonValue = JsonValue>(options?: MemoryStoreOptions): MemoryStore<V> {
  const valid = validate(optionsSchema, options, 'memoryStore()');
  const maxEntries = valid?.maxEntries ?? DEFAULT_MAX_ENTRIES;
  const maxBytes = valid?.maxBytes ?? NEVER;
  const now = valid?.now ?? Date.now;
  /** Inserts between two sweeps, at least: a sweep reads every entry once. */
  const sweepGap = Math.max(1, Math.floor(maxEntries / 2));

  const entries = new Map<string, Entry>();
  /**
   * Walks the entries from the least recently used end. Every entry behind it has been
   * deleted (reads and writes move keys to the end, never before it), so its next key
   * is the one to evict. One long-lived iterator matters: V8 leaves deleted slots at
   * the front of a Map until it rehashes, and a fresh `keys().next()` skips them all
   * every time, which made 1,000,000 inserts into a full store take seconds, not ms.
   * But V8 keeps every table a Map outgrows alive for as long as an iterator started on
   * it has not moved (it moves on from them at its next step): a cursor idle while keys
   * were touched held about 54 B per touch, 54 MB after 1,000,000 increments on 8
   * keys. So it is started by the first eviction and dropped after `sweepGap` writes
   * with none; a fresh one's skip then costs at most one read of the Map per `sweepGap`.
   */
  let cursor: IterableIterator<string> | undefined;
  /** Writes to the Map since the cursor last moved. */
  let idle = 0;
  /** No entry expires before this (a lower bound: deletes do not raise it). */
  let earliestExpiry = NEVER;
  let insertsSinceSweep = 0;
  /** What the entries weigh together (see `maxBytes`), kept exact by `put` and `drop`. */
  let bytes = 0;

  /** What the entry `entry` under `key` counts towards `maxBytes`. `increment` never changes it. */
  function weight(key: string, entry: Entry): number {
    return key.length + (typeof entry.v === 'string' ? entry.v.length : PRIMITIVE_BYTES);
  }

  /** Puts `entry` under `key`, which holds nothing, at the most recently used end. */
  function put(key: string, entry: Entry): void {
    entries.set(key, entry);
    bytes += weight(key, entry);
  }

  /** Removes `key`, resolving what it held. */
  function drop(key: string): Entry | undefined {
    const entry = entries.get(key);
    if (entry !== undefined) {
      entries.delete(key);
      bytes -= weight(key, entry);
    }
    return entry;
  }

  /** The live entry under `key`, moved to the most recently used end; expired ones are dropped. */
  function live(key: string, at: number): Entry | undefined {
    const entry = drop(key);
    if (entry === undefined) return undefined;
    moved();
    if (entry.exp <= at) return undefined;
    put(key, entry);
    return entry;
  }

  function sweep(at: number): void {
    let earliest = NEVER;
    // Deleting the entry being visited is safe while iterating a Map.
    for (const [key, entry] of entries) {
      if (entry.exp <= at) drop(key);
      else if (entry.exp < earliest) earliest = entry.exp;
    }
    earliestExpiry = earliest;
    insertsSinceSweep = 0;
  }

  /** Counts a write to the Map, dropping an idle cursor (see `cursor`). */
  function moved(): void {
    if (++idle > sweepGap) cursor = undefined;
  }

  function write(key: string, entry: Entry, at: number, method: string): void {
    // Checked before anything changes. Kept, it would evict every other entry (the
    // bytes bound) and then still be over, so it is refused, as memcached refuses an
    // item over its size limit.
    const size = weight(key, entry);
    if (size > maxBytes) fail(method, `the entry weighs ${size}, over maxBytes (${maxBytes})`, RangeError);
    moved();
    // A replaced entry is no insert (the count stays), but may weigh more than before.
    if (drop(key) === undefined) insertsSinceSweep += 1;
    put(key, entry);
    if (entry.exp < earliestExpiry) earliestExpiry = entry.exp;
    if (entries.size <= maxEntries && bytes <= maxBytes) return;
    if (at >= earliestExpiry && insertsSinceSweep >= sweepGap) sweep(at);
    // The entry just written is the most recently used, and fits alone: it is never evicted.
    while (entries.size > maxEntries || bytes > maxBytes) {
      idle = 0;
      let oldest = cursor?.next();
      // None (never started, or dropped while idle), or one that reached the end (an
      // iterator that once did stays done): start a new one.
      if (!oldest || oldest.done) {
        cursor = entries.keys();
        oldest = cursor.next();
      }
      drop(oldest.value as string);
    }
  }

  return {
    get size(): number {
      return entries.size;
    },

    async get(key: string): Promise<V | undefined> {
      checkKey(key, 'get');
      const entry = live(key, now());
      return entry === undefined ? undefined : ((entry.j ? JSON.parse(entry.v as string) : entry.v) as V);
    },

    async set(key: string, value: V, ttlMs?: number): Promise<void> {
      checkKey(key, 'set');
      const at = now();
      write(key, encode(value, 'set', ttlMs, at), at, 'set');
    },

    async delete(key: string): Promise<boolean> {
      checkKey(key, 'delete');
      const entry = drop(key);
      // An expired entry was already gone as far as callers can tell.
      return entry !== undefined && entry.exp > now();
    },

    async increment(key: string, by = 1, ttlMs?: number): Promise<number> {
      const method = 'increment';
      checkKey(key, method);
      // Number.isFinite is false for anything that is not a number, too.
      if (!Number.isFinite(by)) fail(method, `by must be a finite number (got ${describeValue(by)})`);
      const at = now();
      const exp = expiry(ttlMs, at, method);
      const entry = live(key, at);
      if (entry === undefined) {
        write(key, { v: by, j: false, exp }, at, method);
        return by;
      }
      // JSON text is a string, so this also refuses objects and arrays.
      // describeValue cuts a long key short: a key built from a request may be any length.
      if (typeof entry.v !== 'number') fail(method, `key ${describeValue(key)} does not hold a number`);
      const sum = entry.v + by;
      if (!Number.isFinite(sum)) fail(method, `key ${describeValue(key)} would overflow`, RangeError);
      // The entry keeps its TTL: only creating a key sets one.
      entry.v = sum;
      return sum;
    },

    async compareAndSet(key: string, expected: V | undefined, next: V, ttlMs?: number): Promise<boolean> {
      const method = 'compareAndSet';
      checkKey(key, method);
      const wanted = expected === undefined ? undefined : encode(expected, method);
      const at = now();
      const entry = encode(next, method, ttlMs, at);
      const current = live(key, at);
      // A stored `v` is never undefined, so with `expected === undefined` this matches
      // exactly when the key is absent, and otherwise when value and kind are the same.
      const matches = current?.v === wanted?.v && current?.j === wanted?.j;
      if (matches) write(key, entry, at, method);
      return matches;
    },
  };
}
