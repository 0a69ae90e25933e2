// README is the API's documentation ("docs for every export", DESIGN.md's contract):
// test/readme.test.ts and test/readme-samples.ts keep it in step with the entry points.
// What both read: README itself, its code blocks, and each entry point's exported names.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export const root: string = new URL('../..', import.meta.url).pathname;
export const readme: string = readFileSync(join(root, 'README.md'), 'utf8');

export const ENTRIES: Record<string, string> = {
  breakwater: 'src/index.ts',
  'breakwater/hono': 'adapters/hono/index.ts',
  'breakwater/mcp': 'adapters/mcp/index.ts',
  'breakwater/a2a': 'adapters/a2a/index.ts',
  'breakwater/providers': 'adapters/providers/index.ts',
  'breakwater/ky': 'adapters/ky/index.ts',
};

/** The names an entry exports, read from its `export` lines: `[name, isType]`. */
export function exportsOf(entry: string): [string, boolean][] {
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
export const blocks: { lang: string; code: string; line: number }[] = [
  ...readme.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm),
].map((match) => ({
  lang: match[1] as string,
  code: match[2] as string,
  line: readme.slice(0, match.index).split('\n').length + 1,
}));
