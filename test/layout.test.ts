import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import { test } from 'node:test';

const root = new URL('..', import.meta.url).pathname;

function sources(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

test('src/ uses only Web-standard APIs: no node:, Deno or Bun globals, no peer SDK imports', () => {
  const offenders: string[] = [];
  for (const file of sources('src')) {
    const text = readFileSync(join(root, file), 'utf8');
    const found = text.match(
      /from\s+['"](node:[^'"]+|hono[^'"]*|ky|@modelcontextprotocol\/[^'"]+|@a2a-js\/[^'"]+)['"]|\bDeno\.|\bBun\./,
    );
    if (found) offenders.push(`${file}: ${found[0]}`);
  }
  assert.deepEqual(offenders, []);
});

test('adapters/ use no node:, Deno or Bun APIs', () => {
  const offenders: string[] = [];
  for (const file of sources('adapters')) {
    const text = readFileSync(join(root, file), 'utf8');
    const found = text.match(/from\s+['"]node:[^'"]+['"]|\bDeno\.|\bBun\./);
    if (found) offenders.push(`${file}: ${found[0]}`);
  }
  assert.deepEqual(offenders, []);
});

test('no entry makes a WeakRef or FinalizationRegistry at import: workerd before compatibility_date 2025-05-05 has neither, and importing must still work there', () => {
  const offenders: string[] = [];
  for (const file of [...sources('src'), ...sources('adapters')]) {
    const text = readFileSync(join(root, file), 'utf8');
    // A module-level statement (no indentation) that constructs one.
    const found = text.match(/^[^\s/*].*\bnew (WeakRef|FinalizationRegistry)\b/m);
    if (found) offenders.push(`${file}: ${found[0]}`);
  }
  assert.deepEqual(offenders, []);
});

test('every public entry point in package.json has a matching Deno export and tsup entry', () => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    exports: Record<string, unknown>;
  };
  const deno = JSON.parse(readFileSync(join(root, 'deno.json'), 'utf8')) as {
    exports: Record<string, string>;
  };
  const subpaths = Object.keys(pkg.exports).filter((k) => k !== './package.json');
  assert.deepEqual(subpaths.sort(), Object.keys(deno.exports).sort());
  assert.deepEqual(subpaths.sort(), ['.', './a2a', './hono', './ky', './mcp', './providers']);
});

test('client adapters load no SDK when imported: only type imports of their peers (a2a loads its SDK inside createA2AClient)', () => {
  const offenders: string[] = [];
  const sdk =
    /^(?:ky|@modelcontextprotocol\/.*|@a2a-js\/.*|openai(?:\/.*)?|@anthropic-ai\/.*|ai|@ai-sdk\/.*)$/;
  const provider = /^(?:openai(?:\/.*)?|@anthropic-ai\/.*|ai|@ai-sdk\/.*)$/;
  for (const file of ['mcp', 'a2a', 'providers', 'ky'].flatMap((name) => sources(`adapters/${name}`))) {
    const text = readFileSync(join(root, file), 'utf8');
    // Statements at the start of a line: the JSDoc examples (` * import ...`) are not code.
    for (const [statement, typeOnly, specifier] of text.matchAll(
      /^import\s+(type\s)?[^;]*?from\s+['"]([^'"]+)['"]/gm,
    )) {
      const name = specifier as string;
      if (
        (sdk.test(name) && typeOnly === undefined) ||
        (file.startsWith('adapters/providers') && provider.test(name))
      )
        offenders.push(`${file}: ${statement}`);
    }
  }
  assert.deepEqual(offenders, []);
});

test('every name an entry point exports is documented in README', () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const entries = [
    'src/index.ts',
    ...['hono', 'mcp', 'a2a', 'providers', 'ky'].map((n) => `adapters/${n}/index.ts`),
  ];
  const undocumented: string[] = [];
  for (const entry of entries) {
    const text = readFileSync(join(root, entry), 'utf8');
    const names = [
      ...[...text.matchAll(/^export\s+(?:type\s+)?\{([^}]*)\}/gm)].flatMap(([, list]) =>
        (list ?? '').split(',').map(
          (name) =>
            name
              .trim()
              .replace(/^type\s+/, '')
              .split(/\s+as\s+/)
              .pop() ?? '',
        ),
      ),
      ...[...text.matchAll(/^export\s+(?:async\s+)?(?:function|const|class|interface|type)\s+(\w+)/gm)].map(
        ([, name]) => name ?? '',
      ),
    ].filter((name) => name !== '');
    assert.ok(names.length > 0, `${entry} exports nothing this test can read`);
    for (const name of names)
      if (!new RegExp(`\\b${name}\\b`).test(readme)) undocumented.push(`${entry}: ${name}`);
  }
  assert.deepEqual(undocumented, []);
});

/** `breakwater`, `breakwater/hono`, ...: the names package.json exports. */
function publicNames(): string[] {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    name: string;
    exports: Record<string, unknown>;
  };
  return Object.keys(pkg.exports)
    .filter((k) => k !== './package.json')
    .map((k) => `${pkg.name}${k.slice(1)}`);
}

test('examples/ import breakwater by its public names only: no path into src/ or adapters/, no unexported subpath', () => {
  const names = new Set(publicNames());
  const offenders: string[] = [];
  let publicImports = 0;
  for (const file of sources('examples')) {
    // Code lines only: a JSDoc or line comment may quote an import.
    const code = readFileSync(join(root, file), 'utf8')
      .split('\n')
      .filter((line) => !/^\s*(?:\*|\/\/|\/\*)/.test(line))
      .join('\n');
    const specifiers = [
      ...code.matchAll(/^(?:import|export)\s[^;]*?\bfrom\s+['"]([^'"]+)['"]/gm),
      ...code.matchAll(/^import\s+['"]([^'"]+)['"]/gm),
      ...code.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g),
    ].map(([, specifier]) => specifier ?? '');
    for (const specifier of specifiers) {
      if (specifier.startsWith('.')) {
        // Another example's file is fine; breakwater's sources are not.
        const target = join(dirname(file), specifier);
        if (!target.startsWith(`examples${sep}`)) offenders.push(`${file}: ${specifier}`);
      } else if (specifier === 'breakwater' || specifier.startsWith('breakwater/')) {
        if (names.has(specifier)) publicImports++;
        else offenders.push(`${file}: ${specifier} is not a public name`);
      }
    }
  }
  assert.deepEqual(offenders, []);
  assert.ok(publicImports > 0, 'no example imports breakwater: is this test reading the imports?');
});

test('each public name resolves to the source deno.json exports, in tsconfig.json (tsc, tsx, Bun, esbuild), deno.json and the test import map (Deno)', () => {
  const read = <T>(path: string): T => JSON.parse(readFileSync(join(root, path), 'utf8')) as T;
  const deno = read<{ exports: Record<string, string>; imports: Record<string, string> }>('deno.json');
  const tsconfig = read<{ compilerOptions: { paths?: Record<string, string[]> } }>('tsconfig.json');
  const testMap = read<{ imports: Record<string, string> }>('test/deno-import-map.json');
  for (const name of publicNames()) {
    const source = deno.exports[`.${name.slice('breakwater'.length)}`];
    assert.ok(source !== undefined, `deno.json exports nothing for ${name}`);
    assert.deepEqual(tsconfig.compilerOptions.paths?.[name], [source], `tsconfig.json paths: ${name}`);
    assert.equal(deno.imports[name], source, `deno.json imports: ${name}`);
    assert.equal(testMap.imports[name], `.${source}`, `test/deno-import-map.json: ${name}`);
  }
});
