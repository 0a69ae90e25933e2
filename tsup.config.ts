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

const config: Options = defineConfig({
  entry,
  format: ['esm', 'cjs'],
  dts: true,
  target: 'es2022',
  platform: 'neutral',
  clean: true,
  sourcemap: false,
  splitting: true,
  treeshake: true,
  // Peers are the user's: never bundle an SDK into breakwater.
  external: ['zod', 'hono', 'ky', '@modelcontextprotocol/sdk', '@a2a-js/sdk'],
}) as Options;

export default config;
