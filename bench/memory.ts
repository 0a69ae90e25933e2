// Does per-server state stay bounded when every call names a new server?
//
// Drives one `definePolicy({}).fetch(stub)` (the full chain) with distinct keys: the
// URL `http://h${i}.invalid/` per call, so the key (the origin) is new every time. The
// stub never touches the network; it returns a fresh Response: a 503 with a JSON error
// body for every 10th key (POST, so it is not resent; the retry budget, the breaker's
// failure record and capture's snapshot are all created for that key) and a 200 for
// the rest. The breaker registry, the retry budgets and capture's last-by-key are each
// bounded to 1,000 keys (least recently used dropped first).
//
// 1,000 keys → gc → heapUsed; then 1,000,000 more keys → gc → heapUsed. Calls go in
// batches of CONCURRENT at once (sequential awaits would be slower, not different).
//
// Run: node --expose-gc --import tsx bench/memory.ts
//   MEMORY_KEYS=N        the large run's key count (default 1,000,000)
//   MEMORY_FAIL_EVERY=N  every N-th key gets a 503 (default 10)
//   MEMORY_CONFIG=JSON   the policy config, to turn parts off: '{"timeout":false}'
import { setImmediate as tick } from 'node:timers/promises';
import { definePolicy, type FetchLike, type PolicyConfig } from '../src/index.ts';

const SMALL = 1000;
const LARGE = Number(process.env.MEMORY_KEYS ?? 1_000_000);
const CONCURRENT = 200;
/** Every FAIL_EVERY-th key gets a 503 (and so a budget debit, a breaker failure, a snapshot). */
const FAIL_EVERY = Number(process.env.MEMORY_FAIL_EVERY ?? 10);
/** The policy config: `MEMORY_CONFIG='{"timeout":false}'` turns parts of the chain off to find what grows. */
const CONFIG = JSON.parse(process.env.MEMORY_CONFIG ?? '{}') as PolicyConfig;
/** The target: heap after LARGE keys within this much of the heap after SMALL. */
const BUDGET_MB = 5;

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) {
  console.error('run with --expose-gc: node --expose-gc --import tsx bench/memory.ts');
  process.exit(1);
}

const ERROR_BODY = '{"error":{"message":"upstream unavailable"}}';
const stub: FetchLike = (input) => {
  const i = Number(/^http:\/\/h(\d+)\./.exec(String(input))?.[1]);
  return Promise.resolve(
    i % FAIL_EVERY === 0
      ? new Response(ERROR_BODY, { status: 503, headers: { 'content-type': 'application/json' } })
      : new Response('ok'),
  );
};

const policy = definePolicy(CONFIG);
const fetch = policy.fetch(stub);
const init: RequestInit = {
  method: 'POST',
  body: '{"a":1}',
  headers: { 'content-type': 'application/json' },
};

async function drive(from: number, to: number): Promise<void> {
  for (let start = from; start < to; start += CONCURRENT) {
    const end = Math.min(to, start + CONCURRENT);
    const batch: Promise<void>[] = [];
    for (let i = start; i < end; i++) {
      batch.push(fetch(`http://h${i}.invalid/`, init).then(() => undefined));
    }
    await Promise.all(batch);
  }
}

/** heapUsed after full collections, once pending callbacks and finalizers have run. */
async function settledHeap(): Promise<number> {
  for (let i = 0; i < 4; i++) {
    await tick();
    gc?.();
  }
  return process.memoryUsage().heapUsed;
}

const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(2)} MB`;

console.log(`breakwater memory — ${process.release.name} ${process.version}, ${new Date().toISOString()}`);
const baseline = await settledHeap();
let started = performance.now();
await drive(0, SMALL);
const small = await settledHeap();
console.log(
  `  after ${SMALL.toLocaleString('en')} distinct keys      heapUsed ${mb(small)}  (${((performance.now() - started) / 1000).toFixed(1)} s; before any call ${mb(baseline)})`,
);
started = performance.now();
await drive(SMALL, SMALL + LARGE);
const large = await settledHeap();
const seconds = (performance.now() - started) / 1000;
console.log(
  `  after ${LARGE.toLocaleString('en')} more distinct keys heapUsed ${mb(large)}  (${seconds.toFixed(1)} s, ${((seconds * 1e6) / LARGE).toFixed(1)} µs per call)`,
);
const grown = large - small;
console.log(
  `  difference ${grown >= 0 ? '+' : ''}${mb(grown)} → ${grown <= BUDGET_MB * 1024 * 1024 ? 'within' : 'NOT within'} ${BUDGET_MB} MB`,
);
const last = SMALL + LARGE - 1;
const probe = `http://h${last - (last % FAIL_EVERY)}.invalid`;
const stats = policy.stats(probe);
console.log(
  `  state kept for the newest 503 key ${probe}: retry ${stats.retry ? 'yes' : 'no'}, breaker ${stats.breaker ? 'yes' : 'no'}, lastFailure ${stats.lastFailure ? `HTTP ${stats.lastFailure.status}` : 'none'}; oldest key h0: ${policy.stats('http://h0.invalid').retry ? 'still kept' : 'dropped'}`,
);
