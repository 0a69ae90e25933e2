// The JSR package (deno.json) names the same peers as the npm package (package.json),
// in the same ranges: a Deno user resolves `hono`, `ky`, zod and the SDKs through
// deno.json's imports, so a range left behind there lets in the versions package.json
// excludes for a reason (hono before 4.8.4 re-serialised a JSON body proxy() forwards).
// `npm run test:jsr` runs this after `deno publish --dry-run`.
import { readFileSync } from 'node:fs';

const root = new URL('../..', import.meta.url).pathname;
const pkg = JSON.parse(readFileSync(`${root}package.json`, 'utf8'));
const deno = JSON.parse(readFileSync(`${root}deno.json`, 'utf8'));
const ranges = { ...pkg.dependencies, ...pkg.peerDependencies };

const mismatches = [];
let checked = 0;
for (const [specifier, target] of Object.entries(deno.imports)) {
  // npm:name@range, npm:name@range/subpath and npm:/name@range/ (a prefix mapping).
  const match = /^npm:\/?((?:@[^/@]+\/)?[^/@]+)@([^/]+)/.exec(target);
  if (match === null || !(match[1] in ranges)) continue;
  checked++;
  // A union in package.json (ky `^1.7.0 || ^2.0.0`) cannot be written in deno.json: Deno
  // refuses `npm:ky@^1.7.0 || ^2.0.0`, `^1.7.0||^2.0.0` and `>=1.7.0` alike ("Invalid
  // package specifier", Deno 2.9). There its first range stands for it.
  const wanted = ranges[match[1]].split(' || ')[0];
  if (match[2] !== wanted) {
    mismatches.push(`${specifier}: deno.json ${match[2]}, package.json ${ranges[match[1]]}`);
  }
}
if (checked === 0) throw new Error('deno.json maps none of package.json dependencies or peers');
if (mismatches.length > 0)
  throw new Error(`deno.json's ranges differ from package.json's:\n  ${mismatches.join('\n  ')}`);
console.log(`ok deno.json: ${checked} npm imports in package.json's ranges`);
