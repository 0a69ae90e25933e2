import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

const root = new URL('..', import.meta.url).pathname;

/** The `.ts` files of `dir` (relative to the repo), one level deep: src/ and each adapter's folder. */
function sources(dir: string): string[] {
  return readdirSync(join(root, dir))
    .filter((name) => name.endsWith('.ts'))
    .map((name) => join(dir, name));
}

const files = [
  ...sources('src'),
  ...readdirSync(join(root, 'adapters')).flatMap((adapter) => sources(join('adapters', adapter))),
];

/** An exported declaration, with its name. */
const DECLARATION = /^export (?:declare )?(?:abstract )?(interface|class|type|const) (\w+)/;
/** A type alias or const whose type is an object literal opened on its first line. */
const OBJECT_LITERAL = /^export (?:type \w+(?:<.*>)? =|const \w+:) \{$/;
/** A member that needs no JSDoc of its own: the constructor (the class's JSDoc covers it), private ones. */
const EXEMPT = /^(?:constructor\(|#|private |protected )/;

/**
 * The names the package exports: those an entry (`src/index.ts`, `adapters/<name>/index.ts`)
 * re-exports in an `export { ... } from` or `export type { ... } from` list, and those it
 * declares itself. A type exported only between modules (a symbol's payload, a zod shape)
 * is internal and left out.
 */
function publicNames(): Set<string> {
  const names = new Set<string>();
  for (const entry of files.filter((file) => file.endsWith('index.ts'))) {
    const text = readFileSync(join(root, entry), 'utf8');
    for (const [, list = ''] of text.matchAll(/^export (?:type )?\{([^}]*)\}/gm)) {
      for (const name of list.split(',')) names.add(name.trim().replace(/^type /, ''));
    }
    for (const line of text.split('\n')) names.add(DECLARATION.exec(line)?.[2] ?? '');
  }
  names.delete('');
  return names;
}

/** Whether the line before `at` ends a block comment that opened with `/**`. */
function documented(lines: readonly string[], at: number): boolean {
  if (!(lines[at - 1] ?? '').trim().endsWith('*/')) return false;
  for (let j = at - 1; j >= 0; j--) {
    const line = (lines[j] as string).trim();
    if (line.startsWith('/**')) return true;
    // Inside a block comment every line starts with `*`; anything else ended it.
    if (!line.startsWith('*')) return false;
  }
  return false;
}

/**
 * Every member without a JSDoc block of the exported interfaces, classes and object types
 * in `text` (of those in `names`, when given), as `file:line: member`. Line-based, on the
 * layout Biome formats to: a declaration starts at column 0, its members start at exactly
 * two spaces, and its body ends at the next line in column 0 (`}`, `};`, `} = {`). Deeper
 * lines (a nested type literal, a method's body, a wrapped type) are not its members. A
 * member's previous line must close a block comment opened by `/**`. A column-0 line
 * inside a body that is no closing brace means the layout is not what this reads: it is
 * reported too, so the check fails loudly rather than skipping a body.
 */
function undocumented(file: string, text: string, names?: ReadonlySet<string>): string[] {
  const lines = text.split('\n');
  const found: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    const [, kind, name = ''] = DECLARATION.exec(line) ?? [];
    if (kind === undefined || (names && !names.has(name))) continue;
    let open = -1;
    if (kind === 'interface' || kind === 'class') {
      // The header ends at the first line ending with `{`; one ending with `}` or `;` has no body.
      for (let j = i; j < lines.length; j++) {
        const header = (lines[j] as string).trimEnd();
        if (header.endsWith('{')) open = j;
        if (header.endsWith('{') || header.endsWith('}') || header.endsWith(';')) break;
      }
    } else if (OBJECT_LITERAL.test(line)) open = i;
    if (open < 0) continue;
    let end = open + 1;
    for (; end < lines.length; end++) {
      const body = lines[end] as string;
      if (/^\S/.test(body)) {
        if (!body.startsWith('}'))
          found.push(`${file}:${end + 1}: unexpected column-0 line in a body: ${body}`);
        break;
      }
      if (!/^ {2}[^\s*/})|&]/.test(body)) continue;
      const member = body.trim();
      if (!(EXEMPT.test(member) || documented(lines, end))) found.push(`${file}:${end + 1}: ${member}`);
    }
    i = end;
  }
  return found;
}

test('every member of an exported interface, class or object type in src/ and adapters/ has JSDoc', () => {
  const names = publicNames();
  // The entries' lists were read: a renamed entry or a new export syntax would empty them.
  for (const name of ['HttpStatusError', 'AgentCard', 'McpToolsList', 'UpstreamEnv'])
    assert.ok(names.has(name), name);
  const found = files.flatMap((file) => undocumented(file, readFileSync(join(root, file), 'utf8'), names));
  assert.deepEqual(found, []);
});

test('the check reads members of every shape: a field, an optional, a method, a readonly, a getter, a multi-line header', () => {
  const source = [
    'export interface Options<T extends object>',
    '  extends Base {',
    '  /** Documented. */',
    '  ok: number;',
    '  bare?: string | undefined;',
    '  /**',
    '   * Documented over lines.',
    '   */',
    '  readonly long: {',
    '    nested: boolean;',
    '  };',
    '  // A line comment is no JSDoc.',
    '  method(): void;',
    '}',
    'export class Thing extends Error {',
    '  static override get name(): string {',
    "    return 'Thing';",
    '  }',
    '  /* Not JSDoc. */',
    '  declare readonly code: string;',
    '  constructor() {',
    "    super('x');",
    '  }',
    '}',
    'export type Shape = {',
    '  side: number;',
    '};',
    'export interface Empty extends Base {}',
    'export type Union = { a: 1 } | { b: 2 };',
    'export function f(): void {',
    '  const x = 1;',
    '}',
  ].join('\n');
  assert.deepEqual(undocumented('x.ts', source), [
    'x.ts:5: bare?: string | undefined;',
    'x.ts:13: method(): void;',
    'x.ts:16: static override get name(): string {',
    'x.ts:20: declare readonly code: string;',
    'x.ts:26: side: number;',
  ]);
  // Only the names asked for.
  assert.deepEqual(undocumented('x.ts', source, new Set(['Shape'])), ['x.ts:26: side: number;']);
});

test('the check fails on the real tree when one JSDoc block is removed', () => {
  const file = join('src', 'errors.ts');
  const lines = readFileSync(join(root, file), 'utf8').split('\n');
  const at = lines.findIndex((line) => line.includes('declare readonly status: number;'));
  assert.ok(at > 0, 'HttpStatusError.status is where this test expects it');
  // Drop the JSDoc block above `status` (its lines back to the `/**`).
  let start = at - 1;
  while (start > 0 && !(lines[start] as string).trim().startsWith('/**')) start--;
  const stripped = [...lines.slice(0, start), ...lines.slice(at)].join('\n');
  const before = undocumented(file, lines.join('\n'));
  const after = undocumented(file, stripped);
  assert.ok(after.includes(`${file}:${start + 1}: declare readonly status: number;`), after.join('\n'));
  assert.equal(after.length, before.length + 1);
});
