import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
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
