import assert from 'node:assert/strict';
import { test } from 'node:test';
import { blocks, ENTRIES, exportsOf, readme } from './helpers/readme.ts';

// README is the API's documentation ("docs for every export", DESIGN.md's contract).
// layout.test.ts checks that each exported name occurs somewhere in README; here it must
// occur as code. That every TypeScript sample compiles against the sources is checked once,
// in `npm run typecheck` (test/readme-samples.ts): tsc is the same program on every runtime.

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
