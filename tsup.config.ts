import { readdirSync } from 'node:fs';
import { defineConfig, type Options } from 'tsup';

/** Every public entry point: `breakwater` and one subpath per adapter. */
const entry: Record<string, string> = {
  index: 'src/index.ts',
  hono: 'adapters/hono/index.ts',
  mcp: 'adapters/mcp/index.ts',
  a2a: 'adapters/a2a/index.ts',
  providers: 'adapters/providers/index.ts',
  ky: 'adapters/ky/index.ts',
};

/**
 * Every other source file as an entry of its own (`dist/lib/retry.js`,
 * `dist/lib/hono/proxy.js`; not exported), so that each file's code lands in a chunk of
 * its own. With the public entries alone, esbuild merged the files each set of entries
 * shares into one chunk, and a user's bundler, which drops a whole unused module
 * (`"sideEffects": false`) but keeps its unused top-level calls (zod schemas), kept
 * every merged file's schemas: `createFetch` alone bundled to 9.7 KB gzip from the
 * package against 7.2 KB from the sources, `retryDelay` alone 4.2 KB against 2.3 KB.
 */
const files: Record<string, string> = {};
for (const dir of Object.values(entry).map((path) => path.slice(0, path.lastIndexOf('/')))) {
  for (const name of readdirSync(dir)) {
    if (!name.endsWith('.ts') || name === 'index.ts') continue;
    files[`lib/${dir.replace(/^(?:src|adapters)\/?/, '')}/${name.slice(0, -3)}`.replace('//', '/')] =
      `${dir}/${name}`;
  }
}

/**
 * A top-level `const` of a primitive value, as esbuild writes it when bundling: `var`.
 * Numbers (and arithmetic on them: `2 ** 31 - 1`), plain strings and booleans only.
 */
const PRIMITIVE_VAR =
  /^var ([\w$]+) = (-?[\d.e_]+(?: *(?:\*\*|[-+*/]) *[\d.e_]+)*|"[^"\\\n]*"|true|false);$/gm;

/**
 * Gives the constants of primitive value back their `const`. esbuild, bundling, writes
 * every top-level `const` as `var`, and a user's bundler inlines a `const` from another
 * module (so drops that module, `"sideEffects": false`) but not a `var`: a user who
 * imported only `shed` or `timeout` kept all of src/timing.ts in their bundle (its
 * top-level calls, the quota tables and two `new RegExp`, and every function they reach)
 * for its `MAX_DELAY_MS`: `timeout` alone 6,123 B gzip from the package against 4,716 from the
 * sources, `shed` 5,473 against 4,045, `problemResponse` 1,777 against 270. Only a name
 * the chunk never assigns again is changed: the sources declared it `const`.
 */
const constants: NonNullable<Options['plugins']>[number] = {
  name: 'primitive-constants',
  renderChunk(code) {
    const out = code.replace(PRIMITIVE_VAR, (line: string, name: string, value: string) => {
      const id = name.replaceAll('$', '\\$');
      const writes = new RegExp(
        `(?<![\\w$.])${id}\\s*(?:[-+*/%&|^]|\\*\\*|<<|>>>?|&&|\\|\\||\\?\\?)?=(?!=)|(?:\\+\\+|--)\\s*${id}(?![\\w$])|(?<![\\w$.])${id}\\s*(?:\\+\\+|--)`,
        'g',
      );
      return (code.match(writes) ?? []).length === 1 ? `const ${name} = ${value};` : line;
    });
    return { code: out };
  },
};

const config: Options = defineConfig({
  entry: { ...entry, ...files },
  format: ['esm', 'cjs'],
  // Declarations for the public entries only: the files above are no API.
  dts: { entry },
  target: 'es2022',
  platform: 'neutral',
  clean: true,
  sourcemap: false,
  splitting: true,
  treeshake: true,
  // Peers are the user's: never bundle an SDK into breakwater.
  external: ['zod', 'hono', 'ky', '@modelcontextprotocol/sdk', '@a2a-js/sdk'],
  plugins: [constants],
}) as Options;

export default config;
