/**
 * @module
 * Runtimes started as real child processes on 127.0.0.1 (workerd, `deno serve`, `bun run`),
 * the same from Node, Deno and Bun: spawned through node:child_process, their output kept
 * for failure messages, and always stopped and awaited by {@link serveOnFreePort}.
 */

import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import process from 'node:process';
import { fileURLToPath } from 'node:url';

export const ROOT: string = fileURLToPath(new URL('../..', import.meta.url));
const BIN = join(ROOT, 'node_modules', '.bin');
export const WORKERD: string = join(BIN, 'workerd');
export const DENO: string = join(BIN, 'deno');
export const BUN: string = join(BIN, 'bun');
const ESBUILD = join(BIN, 'esbuild');
/** Under Deno and Bun, `process.execPath` is their own binary: a Node child runs on the `node` on PATH. */
export const NODE: string =
  process.versions.deno === undefined && process.versions.bun === undefined ? process.execPath : 'node';

/** How long a runtime may take to answer its first request. */
export const START_DEADLINE_MS = 10_000;
/** How long one readiness probe may wait for an answer. */
const PROBE_TIMEOUT_MS = 1_000;
/** How long a stopped child may take to exit before it is killed outright. */
const STOP_GRACE_MS = 3_000;
/** Launches of a runtime whose port was taken before it could bind, before giving up. */
const LAUNCHES = 3;
/** What a runtime prints when its port was taken between {@link freePort} and its bind. */
const PORT_TAKEN = /address already in use|EADDRINUSE|AddrInUse/i;

interface Exit {
  code: number | null;
  signal: string | null;
}

/** A child process whose output is kept (for failure messages) and which can be stopped. */
export interface Child {
  /** Everything it wrote so far, stdout then stderr. */
  output(): string;
  /** Resolves when it has exited and its pipes are closed. */
  closed: Promise<Exit>;
  exited(): boolean;
  /** SIGTERM, then SIGKILL after a grace period; resolves once it is gone. */
  stop(): Promise<void>;
}

/** Starts `command` from the repository root with `env` added to this process's environment. */
export function start(command: string, args: string[], env: Record<string, string>): Child {
  const child: ChildProcess = spawn(command, args, {
    cwd: ROOT,
    env: { ...process.env, NO_COLOR: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8');
  child.stderr?.setEncoding('utf8');
  child.stdout?.on('data', (chunk: string) => {
    stdout += chunk;
  });
  child.stderr?.on('data', (chunk: string) => {
    stderr += chunk;
  });
  let done = false;
  const closed = new Promise<Exit>((resolve) => {
    child.on('error', (error) => {
      stderr += `\nspawn failed: ${String(error)}`;
      done = true;
      resolve({ code: null, signal: null });
    });
    child.on('close', (code, signal) => {
      done = true;
      resolve({ code, signal });
    });
  });
  return {
    output: () => `${command} ${args.join(' ')}\n--- stdout ---\n${stdout}\n--- stderr ---\n${stderr}`,
    closed,
    exited: () => done,
    async stop() {
      if (done) return;
      child.kill('SIGTERM');
      let timer: ReturnType<typeof setTimeout> | undefined;
      const grace = new Promise<'late'>((resolve) => {
        timer = setTimeout(() => resolve('late'), STOP_GRACE_MS);
      });
      const outcome = await Promise.race([closed, grace]);
      clearTimeout(timer);
      if (outcome === 'late') {
        child.kill('SIGKILL');
        await closed;
      }
    },
  };
}

/** Runs a command to completion; rejects with its output when it fails. */
export async function run(command: string, args: string[]): Promise<void> {
  const child = start(command, args, {});
  const { code } = await child.closed;
  assert.equal(code, 0, child.output());
}

/**
 * Bundles the worker module `entry` into `outfile` as workerd runs it: ESM, every import
 * inlined (workerd resolves no npm packages), the packages' worker builds preferred.
 */
export async function bundleWorker(entry: string, outfile: string): Promise<void> {
  await run(ESBUILD, [
    entry,
    '--bundle',
    '--format=esm',
    '--platform=neutral',
    '--main-fields=module,main',
    '--conditions=workerd,worker,browser',
    `--outfile=${outfile}`,
    '--log-level=warning',
  ]);
}

/** A port that was free a moment ago (the runtimes' CLIs take a port, not a listening socket). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Polls `GET /health` until the app answers 200 `ok` (`'up'`), or the runtime exits
 * because its port was taken meanwhile (`'port-taken'`); fails with the child's
 * output on any other exit or after {@link START_DEADLINE_MS}.
 */
async function waitUntilUp(origin: string, child: Child): Promise<'up' | 'port-taken'> {
  const deadline = Date.now() + START_DEADLINE_MS;
  let last = 'no answer yet';
  while (Date.now() < deadline) {
    if (child.exited()) {
      if (PORT_TAKEN.test(child.output())) return 'port-taken';
      assert.fail(`the runtime exited before answering:\n${child.output()}`);
    }
    // A bounded wait per probe: whatever holds the port may accept and never answer.
    const probe = new AbortController();
    const timer = setTimeout(() => probe.abort(), PROBE_TIMEOUT_MS);
    try {
      const response = await fetch(`${origin}/health`, { signal: probe.signal });
      const body = await response.text();
      if (response.status === 200 && body === 'ok') return 'up';
      last = `${response.status} ${body}`;
    } catch (error) {
      last = String(error);
    } finally {
      clearTimeout(timer);
    }
    await sleep(50);
  }
  assert.fail(
    `no 200 from ${origin}/health within ${START_DEADLINE_MS} ms (last: ${last}):\n${child.output()}`,
  );
}

/**
 * Launches a server runtime on a free port (`launch`), waits until its `/health` answers,
 * and runs `use` against its origin; the child is always stopped and awaited. A launch
 * whose port was taken before it could bind is retried on another port.
 */
export async function serveOnFreePort<T>(
  launch: (port: number) => Child,
  use: (origin: string, child: Child) => Promise<T>,
): Promise<T> {
  for (let launches = 1; ; launches++) {
    const port = await freePort();
    const origin = `http://127.0.0.1:${port}`;
    const child = launch(port);
    try {
      const state = await waitUntilUp(origin, child);
      if (state === 'port-taken') {
        assert.ok(launches < LAUNCHES, `port taken on ${LAUNCHES} launches:\n${child.output()}`);
        continue;
      }
      return await use(origin, child);
    } finally {
      await child.stop();
    }
  }
}
