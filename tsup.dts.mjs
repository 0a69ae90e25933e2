// Runs after tsup (`npm run build`): marks the CommonJS declarations' imports of peers
// that ship ESM types only as type imports resolved as by `import`.
//
// dist/*.d.cts is what a CommonJS TypeScript consumer reads (`require` condition). tsup
// writes its peer imports as plain imports (`import { Options } from 'ky'`), which TS
// resolves as `require` would: ky is ESM only, and @a2a-js/sdk's `types` condition
// names ESM declarations, so under moduleResolution node16 (and nodenext before TS 5.8)
// a CommonJS project with skipLibCheck off failed on TS1479 in breakwater's files. The
// runtime is not concerned: the CommonJS build never requires either (types only; the
// A2A SDK is loaded by `import()`). The `resolution-mode` attribute needs TS >= 5.3 in
// such a project. Peers with CommonJS types (hono) keep plain imports, so a consumer's
// own `import ... from 'hono'` and breakwater's name the same declarations.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';

/** Peers whose declarations TypeScript reads as ESM even from a `require`. */
const ESM_TYPES_ONLY = /^(?:ky|@a2a-js\/sdk(?:\/.*)?)$/;
const IMPORT = /^import (?:type )?(\{[^}]*\}) from '([^']+)';$/gm;

const dist = new URL('./dist/', import.meta.url);
let changed = 0;
for (const name of readdirSync(dist).filter((file) => file.endsWith('.d.cts'))) {
  const path = new URL(name, dist);
  const text = readFileSync(path, 'utf8');
  const out = text.replace(IMPORT, (line, names, specifier) => {
    if (!ESM_TYPES_ONLY.test(specifier)) return line;
    changed++;
    return `import type ${names} from '${specifier}' with { 'resolution-mode': 'import' };`;
  });
  if (out !== text) writeFileSync(path, out);
}
console.log(`tsup.dts.mjs: ${changed} peer imports in dist/*.d.cts resolved as ESM`);
