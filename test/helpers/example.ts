/**
 * @module
 * Runs an example program as a child process under Node (`node --import tsx <main>`),
 * the same from Node, Deno and Bun: the examples serve through node:http and tsx.
 * Test files that run examples call `allowSlowTests()` (./slow-tests.ts) first: Bun's
 * per-test timeout is shorter than one example run.
 */

import { spawn } from 'node:child_process';
import process from 'node:process';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** Under Deno and Bun, `process.execPath` is their own binary: use the `node` on PATH. */
const NODE =
  process.versions.deno === undefined && process.versions.bun === undefined ? process.execPath : 'node';

/** What one run of an example printed, and how it exited. */
export interface ExampleRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `examples/<path>` (e.g. `demo/main.ts`) with `args`, from the repository root. */
export function runExample(path: string, args: readonly string[] = []): Promise<ExampleRun> {
  const main = fileURLToPath(new URL(`../../examples/${path}`, import.meta.url));
  return new Promise((resolve, reject) => {
    const child = spawn(NODE, ['--import', 'tsx', main, ...args], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk: string) => {
      stderr += chunk;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}
