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

/**
 * The text with every comment, string, template text and regular expression body blanked
 * (same length, line breaks kept), so a scan of what is left sees code only.
 */
function codeOnly(text: string): string {
  const out = text.split('');
  const blank = (from: number, to: number): void => {
    for (let k = from; k < to; k++) if (out[k] !== '\n') out[k] = ' ';
  };
  // One entry per open template literal: the brace depth its current `${` started at.
  const templates: number[] = [];
  let braces = 0;
  // The last code character that is not blank: decides whether a `/` starts a regex.
  let previous = '';
  let word = '';
  let i = 0;
  const template = (): void => {
    // Inside template text at i (after the backtick or a closing `}`): up to `${` or the end.
    const start = i;
    while (i < text.length && text[i] !== '`' && !(text[i] === '$' && text[i + 1] === '{'))
      i += text[i] === '\\' ? 2 : 1;
    blank(start, i);
    if (text[i] === '$') {
      templates.push(braces);
      braces++;
      i += 2;
      previous = '{';
    } else {
      i++;
      previous = '`';
    }
  };
  while (i < text.length) {
    const c = text[i] as string;
    const next = text[i + 1];
    if (c === '/' && next === '/') {
      const end = text.indexOf('\n', i);
      const stop = end === -1 ? text.length : end;
      blank(i, stop);
      i = stop;
    } else if (c === '/' && next === '*') {
      const end = text.indexOf('*/', i + 2);
      const stop = end === -1 ? text.length : end + 2;
      blank(i, stop);
      i = stop;
    } else if (c === "'" || c === '"') {
      const start = ++i;
      while (i < text.length && text[i] !== c && text[i] !== '\n') i += text[i] === '\\' ? 2 : 1;
      blank(start, i);
      i++;
      previous = c;
    } else if (c === '`') {
      i++;
      template();
    } else if (c === '}' && templates.length > 0 && templates.at(-1) === braces - 1) {
      templates.pop();
      braces--;
      i++;
      template();
    } else if (
      c === '/' &&
      (previous === '' ||
        '([{,;:=!&|?+-*%<>~^'.includes(previous) ||
        /^(?:return|typeof|case|in|of|delete|void|throw|new|else|do|await|yield)$/.test(word))
    ) {
      // A regular expression literal: its body runs to a `/` outside a character class.
      const start = ++i;
      let inClass = false;
      while (i < text.length && text[i] !== '\n' && (inClass || text[i] !== '/')) {
        if (text[i] === '[') inClass = true;
        else if (text[i] === ']') inClass = false;
        i += text[i] === '\\' ? 2 : 1;
      }
      blank(start, i);
      i++;
      previous = '/';
      word = '';
    } else {
      if (c === '{') braces++;
      else if (c === '}') braces--;
      if (/[\w$]/.test(c)) {
        word = previous !== '' && /[\w$]/.test(previous) ? word + c : c;
        previous = c;
      } else if (!/\s/.test(c)) {
        previous = c;
        word = '';
      }
      i++;
    }
  }
  return out.join('');
}

/** Each `assert.ok(x)` / `assert(x)` call with one argument only: `file:line: text`. */
function bareAsserts(file: string, text: string): string[] {
  const code = codeOnly(text);
  const found: string[] = [];
  for (const match of code.matchAll(/(?<![\w$.])assert\s*(?:\.\s*ok\s*)?\(/g)) {
    const open = (match.index ?? 0) + match[0].length;
    let depth = 0;
    let commas = 0;
    let last = '';
    let i = open;
    for (; i < code.length; i++) {
      const c = code[i] as string;
      if ('([{'.includes(c)) depth++;
      else if (')]}'.includes(c)) {
        if (depth === 0) break;
        depth--;
      } else if (c === ',' && depth === 0) commas++;
      if (!/\s/.test(c)) last = c;
    }
    // A trailing comma (`assert.ok(\n  x,\n)`) is not a second argument.
    const args = code.slice(open, i).trim() === '' ? 0 : commas + 1 - (last === ',' ? 1 : 0);
    if (args === 1) {
      const line = code.slice(0, match.index).split('\n').length;
      const call = text.slice(match.index, i + 1).replace(/\s+/g, ' ');
      found.push(`${file}:${line}: ${call.slice(0, 80)}`);
    }
  }
  return found;
}

test('no file in test/ calls assert.ok(x) or assert(x) without a message: on Node under tsx, a failing one makes node:assert re-read and re-parse the file to build its own message, for minutes in a large file, instead of failing', () => {
  // The scanner first: it must see through comments, strings, templates and regexes.
  const sample = [
    'assert.ok(a);',
    "assert.ok(b, 'b'); // assert.ok(c)",
    `const d = 'assert.ok(d)' + "assert(d)";`,
    `const e = \`assert.ok(e) \${assert.ok(e)}\`;`,
    `const f = \`\${f} assert.ok(f)\`;`,
    `/['"]/.test(s) || assert.ok(g);`,
    'assert(h(x, y));',
    'assert.ok(',
    '  i,',
    ');',
    `assert.ok(j, \`\${k}\`); assert.deepEqual(l); notassert(m); x.assert(n);`,
    "assert.ok(o /* , 'not a message' */);",
  ].join('\n');
  assert.deepEqual(
    bareAsserts('sample', sample).map((found) => found.split(': ')[0]),
    ['sample:1', 'sample:4', 'sample:6', 'sample:7', 'sample:8', 'sample:12'],
  );
  const offenders = sources('test').flatMap((file) =>
    bareAsserts(file, readFileSync(join(root, file), 'utf8')),
  );
  assert.deepEqual(offenders, []);
});
