// Where the full chain's loopback gap comes from: raw fetch, raw fetch with its own
// AbortController + timer per call (what any abortable per-request timeout costs),
// and definePolicy() with and without timeouts, against one server in its own process,
// 4 interleaved rounds of 1.5 s, 16 concurrent POSTs. Run: npx tsx bench/timeouts.ts
import { definePolicy, type FetchLike } from '../src/index.ts';
import { startServer } from './loopback.ts';

const server = await startServer();
const url = `${server.origin}/x`;
const body = JSON.stringify({ a: 'x'.repeat(200) });
async function run(f: FetchLike, ms = 1500): Promise<number> {
  let n = 0;
  const end = performance.now() + ms;
  const t = performance.now();
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (performance.now() < end) {
        const r = await f(url, { method: 'POST', body });
        await r.text();
        n++;
      }
    }),
  );
  return n / ((performance.now() - t) / 1000);
}
const withSignal: FetchLike = (u, i) => {
  const c = new AbortController();
  const t = setTimeout(() => c.abort(), 30000);
  return fetch(u, { ...i, signal: c.signal }).finally(() => clearTimeout(t));
};
const contenders: [string, FetchLike][] = [
  ['raw', fetch],
  ['raw+signal', withSignal],
  ['policy default', definePolicy({}).fetch()],
  ['policy timeout:false', definePolicy({ timeout: false }).fetch()],
];
await run(fetch);
const sums = new Map<string, number[]>();
for (let round = 0; round < 4; round++)
  for (const [name, f] of contenders) {
    const v = await run(f);
    sums.set(name, [...(sums.get(name) ?? []), v]);
  }
const base = (sums.get('raw') ?? []).reduce((a, b) => a + b) / 4;
for (const [name, v] of sums) {
  const m = v.reduce((a, b) => a + b) / v.length;
  console.log(name.padEnd(24), m.toFixed(0), (m / base).toFixed(3));
}
server.close();
