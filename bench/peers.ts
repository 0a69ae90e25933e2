// breakwater's full policy chain against raw fetch and its peers, in one run.
//
// Contenders: raw fetch; `definePolicy({}).fetch()` (the full chain: total timeout →
// retry → idempotency key → auth → breaker/pacing → attempt timeout → capture, with
// the default 30 s / 120 s timeouts on); the same with `timeout: false`; ky 1.14 with
// its default retry; cockatiel 3 retry (2 attempts, exponential backoff) wrapped around
// a consecutive breaker, alone and with cockatiel's own 30 s timeout inside (the like
// for like of breakwater's default chain: each attempt gets its own AbortSignal);
// ofetch 1.5.
//
// 1. Per-call overhead over a stub fetch (nothing touches the network).
//    a. Fresh `new Response('ok')` per call and the body read as text, for every
//       contender: ofetch always reads the body itself (its result is the body), and
//       ky's `.text()` reads it too, so a shared Response would be used up after one
//       call. The Response and the read cost the same for everyone and are in the
//       raw baseline.
//    b. One ready 200 Response reused, body not read: raw, breakwater, cockatiel
//       (the contenders that can run this way).
//    Batches are sized to ~50 ms per contender and interleaved (the order rotates
//    each round); the overhead is the median over rounds of (contender − raw stub).
// 2. Loopback throughput: 16 concurrent POSTs of a small JSON body to a node:http
//    server in its own process, `res.text()` (or the equivalent) for every contender,
//    rounds interleaved with the order rotated each round.
//
// Run: npm run bench, or: npx tsx bench/peers.ts
//   BENCH_SECONDS=N  length of each throughput round (default 1.5)
//   BENCH_ROUNDS=N   throughput rounds (default 6)

import {
  ConsecutiveBreaker,
  circuitBreaker,
  ExponentialBackoff,
  handleAll,
  retry,
  TimeoutStrategy,
  timeout,
  wrap,
} from 'cockatiel';
import ky from 'ky';
import { createFetch as createOfetch, ofetch } from 'ofetch';
import { definePolicy, type FetchLike } from '../src/index.ts';
import { median, startServer } from './loopback.ts';

const CONCURRENCY = 16;
const ROUND_MS = Number(process.env.BENCH_SECONDS ?? 1.5) * 1000;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);
/** Per-call rounds; each contender runs one batch of about BATCH_MS per round. */
const CALL_ROUNDS = 15;
const BATCH_MS = 50;

/** One call, start to finish (body read or not, as the section says). */
type Run = () => Promise<unknown>;

interface Contender {
  name: string;
  run: Run;
}

const HEADERS = { 'content-type': 'application/json' };

/** breakwater's default chain without its timeouts: the like for like of cockatiel's retry+breaker. */
const UNTIMED = 'breakwater, timeout: false';
/** cockatiel's retry+breaker with a timeout: the like for like of breakwater's default chain. */
const TIMED = 'cockatiel + timeout';

/** cockatiel: retry (2 attempts) around a breaker that opens after 5 consecutive failures. */
function cockatielPolicy() {
  return wrap(
    retry(handleAll, { maxAttempts: 2, backoff: new ExponentialBackoff() }),
    circuitBreaker(handleAll, { halfOpenAfter: 10_000, breaker: new ConsecutiveBreaker(5) }),
  );
}

/**
 * The same with cockatiel's timeout innermost (30 s, as breakwater's default attempt
 * timeout), whose signal each attempt hands to fetch. `abortOnReturn: false`: its
 * default aborts the signal once fetch returns, which would cut the body being read.
 */
function cockatielTimedPolicy() {
  return wrap(
    retry(handleAll, { maxAttempts: 2, backoff: new ExponentialBackoff() }),
    circuitBreaker(handleAll, { halfOpenAfter: 10_000, breaker: new ConsecutiveBreaker(5) }),
    timeout(30_000, { strategy: TimeoutStrategy.Aggressive, abortOnReturn: false }),
  );
}

const mean = (values: number[]): number => values.reduce((a, b) => a + b, 0) / values.length;

/** The order of `items` for round `r`: rotated by `r`, so each contender leads in turn. */
function rotated<T>(items: T[], r: number): T[] {
  const k = r % items.length;
  return [...items.slice(k), ...items.slice(0, k)];
}

function pad(text: string, width: number): string {
  return text.length >= width ? text : text + ' '.repeat(width - text.length);
}

function padLeft(text: string, width: number): string {
  return text.length >= width ? text : ' '.repeat(width - text.length) + text;
}

function table(header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: string[]) =>
    `  ${cells.map((c, i) => (i === 0 ? pad(c, widths[i] as number) : padLeft(c, widths[i] as number))).join('  ')}`;
  console.log(line(header));
  console.log(`  ${widths.map((w) => '-'.repeat(w)).join('  ')}`);
  for (const row of rows) console.log(line(row));
}

async function timeBatch(run: Run, n: number): Promise<number> {
  const started = performance.now();
  for (let i = 0; i < n; i++) await run();
  return ((performance.now() - started) * 1000) / n;
}

/** Per-call µs for each contender (median of rounds) and overhead over the first (the raw stub). */
async function perCall(
  title: string,
  contenders: Contender[],
): Promise<Map<string, { us: number; overhead: number }>> {
  // Warm up the JIT, then size each contender's batch to about BATCH_MS.
  const sizes = new Map<string, number>();
  for (const c of contenders) {
    await timeBatch(c.run, 2000);
    const us = await timeBatch(c.run, 2000);
    sizes.set(c.name, Math.max(200, Math.min(100_000, Math.round((BATCH_MS * 1000) / us))));
  }
  const samples = new Map<string, number[]>(contenders.map((c) => [c.name, []]));
  for (let r = 0; r < CALL_ROUNDS; r++) {
    for (const c of rotated(contenders, r)) {
      samples.get(c.name)?.push(await timeBatch(c.run, sizes.get(c.name) as number));
    }
  }
  const base = samples.get((contenders[0] as Contender).name) as number[];
  const result = new Map<string, { us: number; overhead: number }>();
  for (const c of contenders) {
    const s = samples.get(c.name) as number[];
    result.set(c.name, { us: median(s), overhead: median(s.map((v, i) => v - (base[i] as number))) });
  }
  const bw = result.get('breakwater')?.overhead as number;
  console.log(title);
  table(
    ['contender', 'µs/call', 'overhead µs', '× raw time', '× breakwater overhead'],
    contenders.map((c) => {
      const { us, overhead } = result.get(c.name) as { us: number; overhead: number };
      const first = c === contenders[0];
      return [
        c.name,
        us.toFixed(3),
        first ? '—' : overhead.toFixed(3),
        (us / (result.get((contenders[0] as Contender).name)?.us as number)).toFixed(2),
        first ? '—' : (overhead / bw).toFixed(2),
      ];
    }),
  );
  console.log(
    `  (median of ${CALL_ROUNDS} interleaved rounds; batch sizes ${contenders.map((c) => `${c.name} ${sizes.get(c.name)}`).join(', ')})`,
  );
  return result;
}

/** Overhead in µs by contender name: a fresh Response read, and a ready one. */
type Overheads = { fresh: (name: string) => number; ready: (name: string) => number };

async function overhead(): Promise<Overheads> {
  const url = 'http://127.0.0.1:9/v1/things';
  const body = '{"a":1}';
  const init: RequestInit = { method: 'POST', body, headers: HEADERS };

  // a. Fresh Response per call, body read as text.
  const freshStub: FetchLike = () => Promise.resolve(new Response('ok'));
  const bwFresh = definePolicy({}).fetch(freshStub);
  const bwFreshUntimed = definePolicy({ timeout: false }).fetch(freshStub);
  const cockFresh = cockatielPolicy();
  const cockFreshTimed = cockatielTimedPolicy();
  const kyFresh = ky.create({ fetch: freshStub });
  const ofFresh = createOfetch({ fetch: freshStub as typeof fetch });
  const fresh = await perCall(
    'per-call cost over a stub fetch: fresh `new Response("ok")` per call, body read as text (POST, JSON body)',
    [
      { name: 'raw stub', run: async () => (await freshStub(url, init)).text() },
      { name: 'breakwater', run: async () => (await bwFresh(url, init)).text() },
      { name: UNTIMED, run: async () => (await bwFreshUntimed(url, init)).text() },
      {
        name: 'cockatiel',
        run: async () => (await cockFresh.execute(() => freshStub(url, init))).text(),
      },
      {
        name: TIMED,
        run: async () =>
          (await cockFreshTimed.execute(({ signal }) => freshStub(url, { ...init, signal }))).text(),
      },
      { name: 'ky', run: () => kyFresh.post(url, { body, headers: HEADERS }).text() },
      {
        name: 'ofetch',
        run: () => ofFresh(url, { method: 'POST', body, headers: HEADERS, responseType: 'text' }),
      },
    ],
  );

  // b. One ready Response reused, body not read (ofetch always reads the body, so it
  //    cannot run this way; ky only when `.text()` is not used, and its cost is the
  //    Request it builds either way).
  const ready = new Response('ok');
  const readyStub: FetchLike = () => Promise.resolve(ready);
  const bwReady = definePolicy({}).fetch(readyStub);
  const bwReadyUntimed = definePolicy({ timeout: false }).fetch(readyStub);
  const cockReady = cockatielPolicy();
  const cockReadyTimed = cockatielTimedPolicy();
  console.log();
  const reused = await perCall(
    'per-call cost over a stub fetch: one ready 200 Response reused, body not read (POST, JSON body)',
    [
      { name: 'raw stub', run: () => readyStub(url, init) },
      { name: 'breakwater', run: () => bwReady(url, init) },
      { name: UNTIMED, run: () => bwReadyUntimed(url, init) },
      { name: 'cockatiel', run: () => cockReady.execute(() => readyStub(url, init)) },
      { name: TIMED, run: () => cockReadyTimed.execute(({ signal }) => readyStub(url, { ...init, signal })) },
    ],
  );
  return {
    fresh: (name) => fresh.get(name)?.overhead as number,
    ready: (name) => reused.get(name)?.overhead as number,
  };
}

/** Loopback ratios to raw fetch by contender name: of the means, and the median of rounds. */
type Rates = (name: string) => { mean: number; median: number };

async function throughput(): Promise<Rates> {
  const server = await startServer();
  const url = `${server.origin}/v1/things`;
  const body = JSON.stringify({ model: 'm', input: 'x'.repeat(200) });
  const init = (): RequestInit => ({ method: 'POST', body, headers: { 'content-type': 'application/json' } });

  const bw = definePolicy({}).fetch();
  const bwUntimed = definePolicy({ timeout: false }).fetch();
  const cock = cockatielPolicy();
  const cockTimed = cockatielTimedPolicy();
  const kyClient = ky.create({});
  const contenders: Contender[] = [
    { name: 'raw fetch', run: async () => (await fetch(url, init())).text() },
    { name: 'breakwater', run: async () => (await bw(url, init())).text() },
    { name: UNTIMED, run: async () => (await bwUntimed(url, init())).text() },
    { name: 'cockatiel', run: async () => (await cock.execute(() => fetch(url, init()))).text() },
    {
      name: TIMED,
      run: async () => (await cockTimed.execute(({ signal }) => fetch(url, { ...init(), signal }))).text(),
    },
    {
      name: 'ky',
      run: () => kyClient.post(url, { body, headers: { 'content-type': 'application/json' } }).text(),
    },
    {
      name: 'ofetch',
      run: () =>
        ofetch(url, {
          method: 'POST',
          body,
          headers: { 'content-type': 'application/json' },
          responseType: 'text',
        }),
    },
  ];

  async function round(run: Run, ms: number): Promise<number> {
    let done = 0;
    const started = performance.now();
    const deadline = started + ms;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (performance.now() < deadline) {
          await run();
          done++;
        }
      }),
    );
    return done / ((performance.now() - started) / 1000);
  }

  try {
    for (const c of contenders) await round(c.run, 1000); // warm up connections and JIT
    const rates = new Map<string, number[]>(contenders.map((c) => [c.name, []]));
    for (let r = 0; r < ROUNDS; r++) {
      for (const c of rotated(contenders, r)) rates.get(c.name)?.push(await round(c.run, ROUND_MS));
    }
    const raw = rates.get('raw fetch') as number[];
    const rawMean = mean(raw);
    console.log(
      `loopback throughput: ${CONCURRENCY} concurrent POSTs (${body.length}-byte JSON body, body read as text), ` +
        `${ROUNDS} rounds of ${ROUND_MS} ms per contender, order rotated each round`,
    );
    table(
      ['contender', 'req/s (mean)', 'ratio (means)', 'ratio (median of rounds)', 'round ratios min–max'],
      contenders.map((c) => {
        const own = rates.get(c.name) as number[];
        const ratios = own.map((v, i) => v / (raw[i] as number));
        const first = c === contenders[0];
        return [
          c.name,
          mean(own).toFixed(0),
          (mean(own) / rawMean).toFixed(3),
          first ? '—' : median(ratios).toFixed(3),
          first ? '—' : `${Math.min(...ratios).toFixed(3)}–${Math.max(...ratios).toFixed(3)}`,
        ];
      }),
    );
    const bwRates = rates.get('breakwater') as number[];
    const bwRatios = bwRates.map((v, i) => v / (raw[i] as number));
    console.log(`  breakwater / raw per round: [${bwRatios.map((p) => p.toFixed(3)).join(', ')}]`);
    return (name) => {
      const own = rates.get(name) as number[];
      return { mean: mean(own) / rawMean, median: median(own.map((v, i) => v / (raw[i] as number))) };
    };
  } finally {
    server.close();
  }
}

console.log(
  `breakwater vs peers — ${process.release.name} ${process.version}, ${new Date().toISOString()} ` +
    '(ky 1.14.2, cockatiel 3.2.1, ofetch 1.5.1)',
);
const costs = await overhead();
console.log();
const rate = await throughput();
console.log();
console.log('targets');
const full = rate('breakwater');
const cockTimed = rate(TIMED);
console.log(
  `  full chain ≥ 0.95 of raw fetch req/s: ${full.mean.toFixed(3)} (means), ${full.median.toFixed(3)} (median of rounds) → ${full.mean >= 0.95 ? 'met' : 'NOT met'}` +
    ` (cockatiel + timeout: ${cockTimed.mean.toFixed(3)}; breakwater, timeout: false: ${rate(UNTIMED).mean.toFixed(3)})`,
);
/** Whether `ours` costs less per call than `theirs`, with a ready and with a fresh Response. */
function cheaper(ours: string, theirs: string): string {
  const ready = [costs.ready(ours), costs.ready(theirs)] as const;
  const fresh = [costs.fresh(ours), costs.fresh(theirs)] as const;
  const met = ready[0] < ready[1] && fresh[0] < fresh[1];
  return (
    `${ready[0].toFixed(3)} vs ${ready[1].toFixed(3)} µs (ready Response), ` +
    `${fresh[0].toFixed(3)} vs ${fresh[1].toFixed(3)} µs (fresh Response) → ${met ? 'met' : 'NOT met'}`
  );
}
console.log(`  less per-call overhead than cockatiel, like for like:`);
console.log(`    breakwater (default timeouts) vs cockatiel + timeout: ${cheaper('breakwater', TIMED)}`);
console.log(`    breakwater, timeout: false vs cockatiel retry+breaker: ${cheaper(UNTIMED, 'cockatiel')}`);
