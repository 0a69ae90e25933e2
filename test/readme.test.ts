import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { allowSlowTests } from './helpers/slow-tests.ts';

// README is the API's documentation ("docs for every export", DESIGN.md's contract): these
// checks keep it in step with the entry points. layout.test.ts checks that each exported
// name occurs somewhere in README; here it must occur as code, and every TypeScript
// sample must compile against the sources as they are.

// tsc over every sample takes 5-20 s on a loaded machine; Bun's default limit is 5 s.
await allowSlowTests();

const root = new URL('..', import.meta.url).pathname;
const readme = readFileSync(join(root, 'README.md'), 'utf8');

const ENTRIES: Record<string, string> = {
  breakwater: 'src/index.ts',
  'breakwater/hono': 'adapters/hono/index.ts',
  'breakwater/mcp': 'adapters/mcp/index.ts',
  'breakwater/a2a': 'adapters/a2a/index.ts',
  'breakwater/providers': 'adapters/providers/index.ts',
  'breakwater/ky': 'adapters/ky/index.ts',
};

/** The names an entry exports, read from its `export` lines: `[name, isType]`. */
function exportsOf(entry: string): [string, boolean][] {
  const text = readFileSync(join(root, entry), 'utf8');
  return [
    ...[...text.matchAll(/^export\s+(type\s+)?\{([^}]*)\}/gm)].flatMap(([, typeOnly, list]) =>
      (list ?? '')
        .split(',')
        .map((item) => item.trim())
        .filter((item) => item !== '')
        .map((item): [string, boolean] => [
          item
            .replace(/^type\s+/, '')
            .split(/\s+as\s+/)
            .pop() as string,
          typeOnly !== undefined || item.startsWith('type '),
        ]),
    ),
    ...[...text.matchAll(/^export\s+(?:async\s+)?(function|const|class|interface|type)\s+(\w+)/gm)].map(
      ([, kind, name]): [string, boolean] => [name as string, kind === 'interface' || kind === 'type'],
    ),
  ];
}

/** The fenced code blocks of README: language, text, and the README line the code starts on. */
const blocks = [...readme.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((match) => ({
  lang: match[1] as string,
  code: match[2] as string,
  line: readme.slice(0, match.index).split('\n').length + 1,
}));

test('every name an entry point exports appears in README as code (a code span or a code block), not only as a word in prose', () => {
  const prose = readme.replace(/^```\w*\n[\s\S]*?^```$/gm, '');
  const code = [
    ...blocks.map((block) => block.code),
    ...[...prose.matchAll(/(`+)([^`][\s\S]*?)\1(?!`)/g)].map(([, , span]) => span),
  ].join('\n');
  const missing: string[] = [];
  for (const [subpath, entry] of Object.entries(ENTRIES)) {
    const names = exportsOf(entry);
    assert.ok(names.length > 0, `${entry} exports nothing this test can read`);
    for (const [name] of names)
      if (!new RegExp(`\\b${name}\\b`).test(code)) missing.push(`${subpath}: ${name}`);
  }
  assert.deepEqual(missing, []);
});

/**
 * What README's samples use without defining it (the MCP client the section is about,
 * the app, the policy built a sample earlier), typed as the real thing so the calls on it
 * are checked too. A sample that uses another undefined name fails: import it in the
 * sample, or add it here.
 */
const AMBIENT: Record<string, string> = {
  app: "declare const app: import('hono').Hono;",
  claude: "declare const claude: import('@anthropic-ai/sdk').default;",
  client: "declare const client: import('@modelcontextprotocol/sdk/client/index.js').Client;",
  job: 'declare const job: unknown;',
  ky: "import ky from 'ky';",
  messages: "declare const messages: import('@anthropic-ai/sdk').default.MessageParam[];",
  policy: "declare const policy: import('breakwater').Policy;",
  queue: 'declare const queue: { later(job: unknown, ms: number): void };',
  report: 'declare function report(code: string, issues: readonly string[]): void;',
  resend: "declare const resend: import('breakwater/mcp').McpResend;",
  response: 'declare const response: Response;',
  retryLater: 'declare function retryLater(ms: number | undefined): void;',
  scheduler: 'declare const scheduler: { pauseUntil(at: Date | undefined): void };',
  StreamableHTTPClientTransport:
    "import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';",
  transportUsing:
    "declare function transportUsing(fetch: import('breakwater').FetchLike): import('@modelcontextprotocol/sdk/client/streamableHttp.js').StreamableHTTPClientTransport;",
  url: 'declare const url: URL;',
};

/** Whether a sample defines `name` itself: imports it, or declares it at the start of a line. */
function defines(code: string, name: string): boolean {
  return (
    new RegExp(`^import\\s[^;]*\\b${name}\\b[^;]*\\sfrom\\s`, 'm').test(code) ||
    new RegExp(`^(?:export\\s+)?(?:const|let|var|function|class|interface|type)\\s+${name}\\b`, 'm').test(
      code,
    )
  );
}

/** Runs tsc on `dir`; resolves with its output (empty when it found nothing). */
function tsc(dir: string): Promise<string> {
  // Node itself runs tsc on every runtime (Deno: --allow-run=node).
  const node =
    process.versions.deno === undefined && process.versions.bun === undefined ? process.execPath : 'node';
  return new Promise((resolve) => {
    execFile(
      node,
      [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', dir, '--pretty', 'false'],
      { maxBuffer: 16 * 1024 * 1024 },
      (_error, stdout, stderr) => resolve(`${stdout}${stderr}`.trim()),
    );
  });
}

test("README's TypeScript samples compile against the sources: breakwater names a fragment uses are imported for it, the few it assumes are declared (AMBIENT)", async () => {
  const values = new Map<string, string>();
  for (const [subpath, entry] of Object.entries(ENTRIES))
    for (const [name, isType] of exportsOf(entry))
      if (!isType && !values.has(name)) values.set(name, subpath);

  const dir = mkdtempSync(join(tmpdir(), 'breakwater-readme-'));
  try {
    // The samples' peers (hono, ky, the SDKs) resolve from the project's node_modules.
    symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir');
    const samples = blocks.filter((block) => block.lang === 'ts' || block.lang === 'typescript');
    assert.ok(
      samples.length >= 20,
      `README has only ${samples.length} ts blocks: did the fence syntax change?`,
    );
    const preludes = new Map<string, { line: number; added: number }>();
    for (const { code, line } of samples) {
      const words = new Set(code.match(/\b[A-Za-z_$][\w$]*\b/g));
      const prelude: string[] = [];
      for (const [name, subpath] of values)
        if (words.has(name) && !defines(code, name)) prelude.push(`import { ${name} } from '${subpath}';`);
      for (const [name, text] of Object.entries(AMBIENT))
        if (words.has(name) && !defines(code, name) && !values.has(name)) prelude.push(text);
      const file = `readme-${line}.ts`;
      // One line each, then the sample as written (imports may follow declarations).
      writeFileSync(join(dir, file), [...prelude, code, 'export {};', ''].join('\n'));
      preludes.set(file, { line, added: prelude.length });
    }
    const paths = Object.fromEntries(
      Object.entries(ENTRIES).map(([subpath, entry]) => [subpath, [join(root, entry)]]),
    );
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          lib: ['ES2022', 'DOM', 'DOM.Iterable'],
          module: 'ESNext',
          moduleResolution: 'Bundler',
          types: ['node'],
          strict: true,
          noUncheckedIndexedAccess: true,
          exactOptionalPropertyTypes: true,
          verbatimModuleSyntax: true,
          allowImportingTsExtensions: true,
          noEmit: true,
          skipLibCheck: true,
          paths,
        },
        include: ['*.ts'],
      }),
    );
    const output = await tsc(dir);
    // `.../readme-154.ts(7,3): error TS2353: ...` → the README line it stands for.
    const errors = output
      .split('\n')
      .filter((text) => text !== '')
      .map((text) => {
        const at = /(readme-\d+\.ts)\((\d+),(\d+)\): (.*)$/.exec(text);
        const sample = at && preludes.get(at[1] as string);
        if (!at || !sample) return text;
        const offset = Number(at[2]) - sample.added;
        const where =
          offset > 0
            ? `README.md:${sample.line + offset - 1}:${at[3]}`
            : `README.md:${sample.line} (prelude)`;
        return `${where}: ${at[4]}`;
      });
    assert.deepEqual(errors, [], `tsc ${join(dir, 'tsconfig.json')}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
