// How far below the current size `createFetch + retry + retryDelay` could get by
// cutting contract features, not code: each feature below is swapped (at bundle time,
// by an esbuild plugin) for the crudest stand-in that keeps the bundle working, and
// the bundle is measured as in size.mjs. The stand-ins are not proposals; they bound
// what each feature costs. Run: node bench/size-floor.mjs
//   network    per-runtime network-error normalisation -> every TypeError is ENETWORK
//   timing     the six timing-header sources -> retry-after-ms and delay-seconds only
//   formatter  option errors listing every path and value -> one generic TypeError
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

const root = new URL('..', import.meta.url).pathname;
const stubs = {
  network: [
    'src/network.ts',
    `import { NetworkError } from './errors.ts';
export function normalizeNetworkError(error, request) { return error instanceof TypeError ? new NetworkError({ code: 'ENETWORK', phase: 'send', sent: 'maybe', cause: error, request }) : undefined; }`,
  ],
  timing: [
    'src/timing.ts',
    `export const MAX_DELAY_MS = 2 ** 31 - 1; export const MAX_HEADER_CHARS = 4096;
export function retryDelay(h) { const ms = Number(h.get('retry-after-ms') ?? NaN); if (ms >= 0) return Math.min(Math.ceil(ms), MAX_DELAY_MS); const s = h.get('retry-after'); if (s && /^\\d+$/.test(s)) return Math.min(Number(s) * 1000, MAX_DELAY_MS); return undefined; }
export function shouldRetryHeader(h) { const v = h.get('x-should-retry'); return v === 'true' ? true : v === 'false' ? false : undefined; }
export function parseRateLimit() { return undefined; }`,
  ],
  formatter: [
    'src/options.ts',
    `import * as z from 'zod/mini';
export const isFunction = (v) => typeof v === 'function';
export function functionOption(m = 'must be a function') { return z.custom(isFunction, m); }
export const keyOptionSchema = z.optional(z.union([z.string().check(z.minLength(1)), functionOption()]));
export const onEventSchema = z.optional(functionOption());
export function describeValue(v) { return String(v); }
export function validate(schema, value, where) { const r = schema.safeParse(value); if (r.success) return r.data; throw new TypeError('invalid options for ' + where); }`,
  ],
};
const code = `export { createFetch, retry, retryDelay } from '${root}src/index.ts';`;
async function size(active) {
  const plugin = {
    name: 'stub',
    setup(b) {
      b.onLoad({ filter: /\.ts$/ }, (args) => {
        for (const k of active) {
          const [file, text] = stubs[k];
          if (args.path === root + file) return { contents: text, loader: 'ts' };
        }
        return undefined;
      });
    },
  };
  const r = await build({
    stdin: { contents: code, resolveDir: root, loader: 'ts' },
    bundle: true,
    minify: true,
    format: 'esm',
    platform: 'neutral',
    external: ['zod', 'zod/*'],
    write: false,
    plugins: [plugin],
    logLevel: 'error',
  });
  const bytes = r.outputFiles[0].contents;
  return [bytes.length, gzipSync(bytes, { level: 9 }).length];
}
const base = await size([]);
console.log('as is', base, '(minified, gzip bytes)');
for (const k of Object.keys(stubs)) {
  const s = await size([k]);
  console.log(k, 'stubbed', s, 'saves', base[1] - s[1], 'B gzip');
}
const all = await size(Object.keys(stubs));
console.log('all stubbed', all, 'saves', base[1] - all[1]);
