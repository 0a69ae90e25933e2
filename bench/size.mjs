// Bundle sizes as a user's bundler would see them: esbuild, minified, gzip -9, with
// the peers (zod, hono) external. Prints each entry and the budgets. Run:
// npm run size. `npm run size -- --files` also lists each source file's minified bytes
// in each bundle, largest first. (Not yet part of npm test: the budgets are not met;
// see bench/README.md.)
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

const root = new URL('..', import.meta.url).pathname;

/** What is measured: whole entries, and the smallest useful client. */
const cases = [
  { name: 'breakwater (everything)', code: `export * from '${root}src/index.ts';`, budget: 12_000 },
  {
    name: 'createFetch + retry + retryDelay',
    code: `export { createFetch, retry, retryDelay } from '${root}src/index.ts';`,
    budget: 5_000,
  },
  { name: 'breakwater/hono (everything)', code: `export * from '${root}adapters/hono/index.ts';` },
  { name: 'breakwater/mcp', code: `export * from '${root}adapters/mcp/index.ts';` },
  { name: 'breakwater/a2a', code: `export * from '${root}adapters/a2a/index.ts';` },
  { name: 'breakwater/providers', code: `export * from '${root}adapters/providers/index.ts';` },
  { name: 'breakwater/ky', code: `export * from '${root}adapters/ky/index.ts';` },
];

const showFiles = process.argv.includes('--files');
let over = 0;
for (const { name, code, budget } of cases) {
  const result = await build({
    stdin: { contents: code, resolveDir: root, loader: 'ts' },
    bundle: true,
    minify: true,
    format: 'esm',
    platform: 'neutral',
    external: ['zod', 'zod/*', 'hono', 'hono/*'],
    write: false,
    metafile: showFiles,
    logLevel: 'error',
  });
  const bytes = result.outputFiles[0].contents;
  const gz = gzipSync(bytes, { level: 9 }).byteLength;
  const verdict =
    budget === undefined ? '' : gz <= budget ? `  ok (budget ${budget})` : `  OVER budget ${budget}`;
  if (budget !== undefined && gz > budget) over++;
  console.log(
    `${name.padEnd(34)} ${String(bytes.byteLength).padStart(7)} B min  ${String(gz).padStart(6)} B gzip${verdict}`,
  );
  if (showFiles) {
    const inputs = Object.entries(Object.values(result.metafile.outputs)[0].inputs)
      .filter(([, input]) => input.bytesInOutput > 0)
      .sort(([, a], [, b]) => b.bytesInOutput - a.bytesInOutput);
    for (const [file, input] of inputs)
      console.log(`    ${String(input.bytesInOutput).padStart(7)} B  ${file}`);
  }
}
if (over > 0) console.log(`${over} budget(s) not met`);
