/**
 * @module
 * A copy of breakwater bundled as apps ship it (esbuild: minified, CommonJS, class fields
 * assigned rather than defined), loaded from a temporary folder that is always removed.
 * For the tests of what survives such a build: class names, instanceof across two copies.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** The repository's root, where the entries and node_modules/.bin/esbuild are. */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** How the copy is built. */
export interface BundleOptions {
  /** 'esm' is loaded with import(), 'cjs' with require(). */
  format: 'esm' | 'cjs';
  /** Minify as a production build does (renames classes). Default false. */
  minify?: boolean;
  /** Packages left out of the bundle (esbuild's --external). Default none. */
  external?: string[];
  /**
   * Assign class fields instead of defining them, as TypeScript before ES2022
   * (useDefineForClassFields: false), Angular and Babel's loose mode build. Default false.
   */
  assignClassFields?: boolean;
}

/**
 * Builds `entry` (a path from the repository's root, e.g. 'src/index.ts') with esbuild into
 * a temporary folder, loads it and calls `fn` with the module; the folder is removed after,
 * whether `fn` passes or throws.
 */
export async function withBundle<M, T = void>(
  entry: string,
  options: BundleOptions,
  fn: (module: M) => T | Promise<T>,
): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'breakwater-bundle-'));
  try {
    const outfile = join(dir, options.format === 'esm' ? 'index.mjs' : 'index.cjs');
    execFileSync(join(ROOT, 'node_modules', '.bin', 'esbuild'), [
      join(ROOT, entry),
      '--bundle',
      ...(options.minify ? ['--minify'] : []),
      `--format=${options.format}`,
      '--platform=neutral',
      ...(options.external ?? []).map((name) => `--external:${name}`),
      '--log-level=error',
      ...(options.assignClassFields
        ? ['--tsconfig-raw={"compilerOptions":{"useDefineForClassFields":false}}']
        : []),
      `--outfile=${outfile}`,
    ]);
    const module =
      options.format === 'esm'
        ? ((await import(pathToFileURL(outfile).href)) as M)
        : (createRequire(import.meta.url)(outfile) as M);
    return await fn(module);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
