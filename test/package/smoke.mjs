// Packs breakwater as npm would publish it, installs the tarball into an empty
// project, and loads every public entry point through both ESM `import` and CJS
// `require`, so a broken `exports` map or a missing file fails here, not for users.
// Then TypeScript consumers compile against it under each moduleResolution a project
// may use (node10, node16 and nodenext from CommonJS and ESM, bundler) with
// skipLibCheck off and no DOM lib, and each must see the declarations of its own
// format: `.d.cts` where `require` loads the CommonJS build, `.d.ts` where `import`
// loads the ESM one. Last, a bundler that imports a few names from the package must
// leave out the rest as well as it does from the sources (bench/size.mjs's figures).
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

const root = new URL('../..', import.meta.url).pathname;
const subpaths = [
  'breakwater',
  'breakwater/hono',
  'breakwater/mcp',
  'breakwater/a2a',
  'breakwater/providers',
  'breakwater/ky',
];

// dist/ is not committed: `npm publish` from a fresh clone must build it first, or the
// package ships without its code (`files` lists dist/, which npm then quietly skips).
const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
if (!/\bnpm run build\b/.test(manifest.scripts.prepublishOnly ?? '')) {
  throw new Error(
    'package.json has no prepublishOnly build: npm publish would ship whatever dist/ holds, or none',
  );
}

const work = mkdtempSync(join(tmpdir(), 'breakwater-pack-'));

try {
  const packed = JSON.parse(
    execFileSync('npm', ['pack', '--json', '--pack-destination', work], { cwd: root, encoding: 'utf8' }),
  );
  const { filename, files } = packed[0];
  const shipped = files.map((f) => f.path);
  const stray = shipped.filter((p) => !/^(dist\/|README\.md$|LICENSE$|package\.json$)/.test(p));
  if (stray.length > 0) throw new Error(`the tarball ships files it should not: ${stray.join(', ')}`);

  writeFileSync(
    join(work, 'package.json'),
    JSON.stringify({ name: 'pack-smoke', private: true, type: 'module' }),
  );
  // The optional peers the adapters import (and whose types their declarations name),
  // at the versions the suite uses.
  const peers = ['hono', 'ky', '@a2a-js/sdk'].map(
    (name) =>
      `${name}@${JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')).version}`,
  );
  execFileSync(
    'npm',
    ['install', '--no-audit', '--no-fund', '--prefer-offline', join(work, filename), ...peers],
    {
      cwd: work,
      stdio: 'ignore',
    },
  );

  for (const name of subpaths) {
    const esm = execFileSync(
      'node',
      [
        '--input-type=module',
        '-e',
        `const m = await import(${JSON.stringify(name)}); console.log(Object.keys(m).length);`,
      ],
      { cwd: work, encoding: 'utf8' },
    );
    const cjs = execFileSync(
      'node',
      [
        '--input-type=commonjs',
        '-e',
        `const m = require(${JSON.stringify(name)}); console.log(Object.keys(m).length);`,
      ],
      { cwd: work, encoding: 'utf8' },
    );
    if (Number(esm) < 1 || Number(cjs) < 1)
      throw new Error(`${name} loaded with no exports (esm ${esm.trim()}, cjs ${cjs.trim()})`);
    console.log(`ok ${name}: esm ${esm.trim()} exports, cjs ${cjs.trim()} exports`);
  }
  // One process that both imports and requires breakwater (an ESM app, a CommonJS
  // dependency) loads both builds: each one's errors must be the other's too.
  const dual = execFileSync(
    'node',
    [
      '--input-type=module',
      '-e',
      [
        "import { createRequire } from 'node:module';",
        "const esm = await import('breakwater'), cjs = createRequire(import.meta.url)('breakwater');",
        'const a = new cjs.HttpStatusError({ status: 503 }), b = new esm.NetworkError({ code: "ECONNRESET", phase: "send", sent: "maybe" });',
        'console.log(esm.BreakwaterError !== cjs.BreakwaterError, a instanceof esm.HttpStatusError, a instanceof esm.BreakwaterError, b instanceof cjs.NetworkError, esm.classify({ error: a }).retryable);',
      ].join('\n'),
    ],
    { cwd: work, encoding: 'utf8' },
  ).trim();
  if (dual !== 'true true true true true')
    throw new Error(`the ESM and CommonJS builds' errors differ: ${dual}`);
  console.log('ok one process with both builds: each build’s errors are instances of the other’s classes');
  typescriptConsumers();
  await treeShaking();
  console.log(`packed ${filename}: ${shipped.length} files`);
} finally {
  rmSync(work, { recursive: true, force: true });
}

/**
 * Compiles one consumer file per module setting with the repository's TypeScript (the
 * types of `node` from its node_modules: a Node project's, with no DOM lib), and
 * checks which of breakwater's declaration files each one read.
 */
function typescriptConsumers() {
  const source = [
    "import { createFetch, retry, BreakwaterError, type FetchLike } from 'breakwater';",
    "import { upstream } from 'breakwater/hono';",
    "import { mcpFetch } from 'breakwater/mcp';",
    "import { createA2AClient } from 'breakwater/a2a';",
    "import { openaiOptions } from 'breakwater/providers';",
    "import { kyOptions } from 'breakwater/ky';",
    'const fetch: FetchLike = createFetch({ use: [retry()] });',
    'export const used: unknown[] = [fetch, BreakwaterError, upstream, mcpFetch, createA2AClient, openaiOptions, kyOptions];',
    '',
  ].join('\n');
  for (const ext of ['ts', 'mts', 'cts']) writeFileSync(join(work, `consumer.${ext}`), source);
  const base = {
    strict: true,
    noEmit: true,
    skipLibCheck: false,
    target: 'es2022',
    lib: ['es2022'],
    typeRoots: [join(root, 'node_modules', '@types')],
    types: ['node'],
  };
  // [name, compilerOptions, file, the declaration format it must read]
  const consumers = [
    ['node10', { module: 'commonjs', moduleResolution: 'node10' }, 'consumer.ts', '.d.ts'],
    ['node16 from CommonJS', { module: 'node16' }, 'consumer.cts', '.d.cts'],
    ['node16 from ESM', { module: 'node16', verbatimModuleSyntax: true }, 'consumer.mts', '.d.ts'],
    ['nodenext from CommonJS', { module: 'nodenext' }, 'consumer.cts', '.d.cts'],
    ['nodenext from ESM', { module: 'nodenext', isolatedModules: true }, 'consumer.mts', '.d.ts'],
    [
      'bundler',
      { module: 'preserve', moduleResolution: 'bundler', verbatimModuleSyntax: true },
      'consumer.ts',
      '.d.ts',
    ],
  ];
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  const failures = [];
  for (const [name, options, file, format] of consumers) {
    const config = join(work, `tsconfig.${name.replace(/\W+/g, '-')}.json`);
    writeFileSync(config, JSON.stringify({ compilerOptions: { ...base, ...options }, files: [file] }));
    const run = spawnSync(process.execPath, [tsc, '-p', config, '--listFiles'], {
      cwd: work,
      encoding: 'utf8',
    });
    // --listFiles prints each file read as an absolute path, one a line.
    const read = run.stdout
      .split('\n')
      .filter((line) => line.startsWith('/') && line.includes('/node_modules/breakwater/'));
    const errors = run.stdout.split('\n').filter((line) => /error TS\d+/.test(line));
    const wrong = read.filter((path) => !path.endsWith(format));
    if (run.status !== 0 || read.length === 0 || wrong.length > 0) {
      failures.push(
        `${name}: ${errors.length} errors${errors.length > 0 ? `\n    ${errors.slice(0, 6).join('\n    ')}` : ''}` +
          `${wrong.length > 0 ? `\n    reads ${wrong.map((p) => p.replace(/.*node_modules\//, '')).join(', ')}, not ${format}` : ''}`,
      );
    } else {
      console.log(`ok TypeScript ${name}: compiles, reads ${read.length} ${format} files`);
    }
  }
  if (failures.length > 0) throw new Error(`TypeScript consumers fail:\n  ${failures.join('\n  ')}`);
}

/**
 * A few names bundled from the installed package (esbuild, as bench/size.mjs bundles
 * the sources: minified, platform neutral, zod external) must cost no more than from
 * the sources, give or take the chunk boundaries (SLACK). "sideEffects": false lets a
 * bundler drop a module none of whose names it uses, but not the top-level calls (zod
 * schemas) of a module it keeps: a dist whose chunks merge many source files keeps
 * all their schemas.
 */
async function treeShaking() {
  const SLACK = 1.02;
  const bundle = async (code, resolveDir) => {
    const result = await build({
      stdin: { contents: code, resolveDir, loader: 'ts' },
      bundle: true,
      minify: true,
      format: 'esm',
      platform: 'neutral',
      external: ['zod', 'hono', 'ky', '@modelcontextprotocol/sdk', '@a2a-js/sdk'],
      write: false,
      logLevel: 'error',
    });
    return gzipSync(result.outputFiles[0].contents, { level: 9 }).byteLength;
  };
  const cases = [
    ['createFetch', 'breakwater', 'src/index.ts'],
    ['retryDelay', 'breakwater', 'src/index.ts'],
    ['BreakwaterError, HttpStatusError', 'breakwater', 'src/index.ts'],
    ['mcpFetch', 'breakwater/mcp', 'adapters/mcp/index.ts'],
    // Modules that use only a constant of another (MAX_DELAY_MS): a bundler inlines a
    // `const`, not the `var` esbuild writes (tsup.config.ts gives them back `const`).
    ['timeout', 'breakwater', 'src/index.ts'],
    ['shed', 'breakwater/hono', 'adapters/hono/index.ts'],
    ['idempotency', 'breakwater/hono', 'adapters/hono/index.ts'],
    ['problemResponse', 'breakwater/hono', 'adapters/hono/index.ts'],
  ];
  const failures = [];
  for (const [names, name, source] of cases) {
    const packed = await bundle(`export { ${names} } from '${name}';`, work);
    const sources = await bundle(`export { ${names} } from '${join(root, source)}';`, root);
    const line = `{ ${names} } from ${name}: ${packed} B gzip from the package, ${sources} B from the sources`;
    if (packed > sources * SLACK) failures.push(line);
    else console.log(`ok ${line}`);
  }
  if (failures.length > 0)
    throw new Error(`the package tree-shakes worse than its sources:\n  ${failures.join('\n  ')}`);
}
