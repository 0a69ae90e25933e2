// `npm run typecheck`'s last step: every TypeScript sample in README compiles against the
// sources as they are. A fragment gets the breakwater names it uses imported for it, and
// the few things samples assume declared (AMBIENT); errors are reported at README's lines.
// Run by Node only: tsc is the same program on every runtime.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { blocks, ENTRIES, exportsOf, root } from './helpers/readme.ts';

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
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', dir, '--pretty', 'false'],
      { maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) =>
        resolve(`${stdout}${stderr}`.trim() || (error ? `tsc failed: ${error.message}` : '')),
    );
  });
}

/** README's TypeScript samples, with their preludes, compiled by tsc: the errors, at README's lines. */
async function sampleErrors(): Promise<string[]> {
  const values = new Map<string, string>();
  for (const [subpath, entry] of Object.entries(ENTRIES))
    for (const [name, isType] of exportsOf(entry))
      if (!isType && !values.has(name)) values.set(name, subpath);

  const dir = mkdtempSync(join(tmpdir(), 'breakwater-readme-'));
  try {
    // The samples' peers (hono, ky, the SDKs) resolve from the project's node_modules.
    symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir');
    const samples = blocks.filter((block) => block.lang === 'ts' || block.lang === 'typescript');
    if (samples.length < 20)
      return [`README has only ${samples.length} ts blocks: did the fence syntax change?`];
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
    return errors;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const errors = await sampleErrors();
for (const error of errors) console.error(error);
console.log(`README samples: ${errors.length === 0 ? 'all compile' : `${errors.length} errors`}`);
process.exitCode = errors.length === 0 ? 0 : 1;
