// Packs breakwater as npm would publish it, installs the tarball into an empty
// project, and loads every public entry point through both ESM `import` and CJS
// `require`, so a broken `exports` map or a missing file fails here, not for users.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = new URL('../..', import.meta.url).pathname;
const subpaths = [
  'breakwater',
  'breakwater/hono',
  'breakwater/mcp',
  'breakwater/a2a',
  'breakwater/providers',
  'breakwater/ky',
];
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
  // The optional peers the adapters import, at the versions the suite uses.
  const peers = ['hono'].map(
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
  console.log(`packed ${filename}: ${shipped.length} files`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
