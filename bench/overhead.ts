// breakwater's cost on the happy path, measured against raw fetch in the same run.
//
// 1. Per-call overhead: createFetch + captureStatus over a stub fetch that returns
//    a ready 200 Response, minus the same stub called directly. Median of batches.
// 2. Loopback throughput: 16 concurrent POSTs to a real node:http server on
//    127.0.0.1 (in its own process), raw fetch vs the chain, rounds interleaved
//    so drift hits both.
//
// Run: npm run bench   (BENCH_SECONDS=N to lengthen the throughput rounds)

import { captureStatus, createFetch, type FetchLike } from '../src/index.ts';
import { median, startServer } from './loopback.ts';

const BATCH = 20_000;
const BATCHES = 25;
const CONCURRENCY = 16;
const ROUND_MS = Number(process.env.BENCH_SECONDS ?? 2) * 1000;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);

async function perCall(fetch: FetchLike, url: string, init: RequestInit): Promise<number> {
  const started = performance.now();
  for (let i = 0; i < BATCH; i++) await fetch(url, init);
  return ((performance.now() - started) * 1000) / BATCH;
}

async function overhead(): Promise<void> {
  const ready = new Response('ok');
  const stub: FetchLike = () => Promise.resolve(ready);
  const chain = createFetch({ fetch: stub, use: [captureStatus()] });
  const url = 'http://127.0.0.1:9/v1/things';
  const init: RequestInit = {
    method: 'POST',
    body: '{"a":1}',
    headers: { 'content-type': 'application/json' },
  };
  const raw: number[] = [];
  const wrapped: number[] = [];
  const request: number[] = [];
  for (let b = 0; b < BATCHES; b++) {
    raw.push(await perCall(stub, url, init));
    wrapped.push(await perCall(chain, url, init));
  }
  const started = performance.now();
  for (let i = 0; i < 2000; i++) new Request(url, init).clone();
  request.push(((performance.now() - started) * 1000) / 2000);
  const diffs = raw.map((r, i) => (wrapped[i] as number) - r);
  console.log('per-call overhead (stub fetch returning a ready 200, POST with a JSON body)');
  console.log(`  raw stub call               ${median(raw).toFixed(3)} µs`);
  console.log(`  createFetch + captureStatus ${median(wrapped).toFixed(3)} µs`);
  console.log(
    `  overhead (median of ${BATCHES} batches of ${BATCH}) ${median(diffs).toFixed(3)} µs per call`,
  );
  console.log(`  for scale: new Request() + clone() ${median(request).toFixed(2)} µs`);
}

async function throughput(): Promise<void> {
  const server = await startServer();
  const url = `${server.origin}/v1/things`;
  const chain = createFetch({ use: [captureStatus()] });
  const body = JSON.stringify({ model: 'm', input: 'x'.repeat(200) });

  async function run(fetch: FetchLike): Promise<number> {
    let done = 0;
    const deadline = performance.now() + ROUND_MS;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (performance.now() < deadline) {
          const res = await fetch(url, {
            method: 'POST',
            body,
            headers: { 'content-type': 'application/json' },
          });
          await res.text();
          done++;
        }
      }),
    );
    return done / ((performance.now() - started) / 1000);
  }

  try {
    await run(globalThis.fetch); // warm up connections and JIT
    await run(chain);
    const raw: number[] = [];
    const wrapped: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      if (r % 2 === 0) {
        raw.push(await run(globalThis.fetch));
        wrapped.push(await run(chain));
      } else {
        wrapped.push(await run(chain));
        raw.push(await run(globalThis.fetch));
      }
    }
    const rawRate = raw.reduce((a, b) => a + b, 0) / raw.length;
    const chainRate = wrapped.reduce((a, b) => a + b, 0) / wrapped.length;
    console.log(
      `loopback throughput (${CONCURRENCY} concurrent POSTs, ${ROUNDS} interleaved rounds of ${ROUND_MS} ms)`,
    );
    console.log(`  raw fetch                   ${rawRate.toFixed(0)} req/s`);
    console.log(`  createFetch + captureStatus ${chainRate.toFixed(0)} req/s`);
    const pairs = raw.map((r, i) => (wrapped[i] as number) / r);
    console.log(`  ratio (means)               ${(chainRate / rawRate).toFixed(3)}`);
    console.log(
      `  ratio (median of rounds)    ${median(pairs).toFixed(3)}  [${pairs.map((p) => p.toFixed(3)).join(', ')}]`,
    );
  } finally {
    server.close();
  }
}

console.log(`breakwater bench — ${process.release.name} ${process.version}, ${new Date().toISOString()}`);
await overhead();
await throughput();
