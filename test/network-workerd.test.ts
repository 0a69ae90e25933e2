/**
 * Network failures on Cloudflare workerd, provoked on real sockets: the npm package's
 * workerd runs test/helpers/workerd-probe.ts (bundled by esbuild), which fetches a
 * loopback server that refuses, resets or breaks off, and reports what workerd's fetch
 * threw and what breakwater made of it there. workerd says one thing for every one of
 * these (`Network connection lost.`, an `Error` with `retryable: true`), so breakwater
 * cannot tell a refused connect from a reset after the request ran: each reads as maybe
 * sent, and a POST is never resent while a GET is.
 *
 * workerd is spawned through node:child_process, so this file runs the same from Node,
 * Deno and Bun; the child is stopped and awaited in `finally`.
 */

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { bundleWorker, ROOT, serveOnFreePort, start, WORKERD } from './helpers/runtime-process.ts';
import { always, type Behaviour, closedPort, type ServerOptions, withServer } from './helpers/server.ts';
import { allowSlowTests } from './helpers/slow-tests.ts';
import type { Described, Probe, ProbeResult } from './helpers/workerd-probe.ts';

await allowSlowTests();

/**
 * The probe's workerd config: the worker, and a global fetch allowed to reach loopback
 * (workerd's default outbound reaches public addresses only).
 */
const CONFIG = `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .probe),
    (name = "outbound", network = (allow = ["local"])),
  ],
  sockets = [(name = "http", address = "127.0.0.1:0", http = (), service = "main")],
);
const probe :Workerd.Worker = (
  modules = [(name = "probe.js", esModule = embed "probe.js")],
  compatibilityDate = "2025-09-01",
  globalOutbound = "outbound",
);
`;

/**
 * Bundles the probe, serves it on workerd on a free port, and runs `use` with a function
 * that sends one {@link Probe}; workerd is stopped and its directory removed afterwards.
 */
async function withProbe(
  use: (send: (probe: Probe) => Promise<ProbeResult>, log: () => string) => Promise<void>,
): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'breakwater-workerd-'));
  try {
    await bundleWorker(join(ROOT, 'test', 'helpers', 'workerd-probe.ts'), join(dir, 'probe.js'));
    await writeFile(join(dir, 'config.capnp'), CONFIG);
    await serveOnFreePort(
      (port) =>
        start(WORKERD, ['serve', join(dir, 'config.capnp'), '--socket-addr', `http=127.0.0.1:${port}`], {}),
      (origin, child) =>
        use(
          async (probe) => {
            const response = await fetch(`${origin}/probe`, { method: 'POST', body: JSON.stringify(probe) });
            const text = await response.text();
            assert.equal(response.status, 200, `${text}\n${child.output()}`);
            return JSON.parse(text) as ProbeResult;
          },
          () => child.output(),
        ),
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A loopback server that fails every connection the way `behaviour` and `options` say. */
interface Failure {
  name: string;
  behaviour: Behaviour;
  options?: ServerOptions;
  /** Where workerd's error surfaces. */
  stage: 'headers' | 'body';
}

const FAILURES: Failure[] = [
  { name: 'a reset right after accept', behaviour: {}, options: { onConnect: 'reset' }, stage: 'headers' },
  { name: 'a reset after the request was read', behaviour: { reset: 'after-read' }, stage: 'headers' },
  { name: 'a close with no response', behaviour: { close: 'no-response' }, stage: 'headers' },
  {
    name: 'a reset in the middle of the body',
    behaviour: { reset: 'mid-body', body: 'partial' },
    stage: 'body',
  },
];

/** What workerd's fetch throws for each failure, and what breakwater reads in it. */
const LOST = { name: 'Error', message: 'Network connection lost.', retryable: true, networkError: false };

/** What breakwater reads in it before a response: sent or not, it cannot tell. */
const MAYBE_SENT_IN_SEND = { networkError: true, code: 'ENETWORK', phase: 'send', sent: 'maybe' };

/** The fields of a normalised error that say what happened. */
function fields(error: Described | null | undefined): Record<string, unknown> | null | undefined {
  return (
    error && { networkError: error.networkError, code: error.code, phase: error.phase, sent: error.sent }
  );
}

test("workerd's fetch, refused or reset on loopback, throws its one `Network connection lost.`, which breakwater reads as ENETWORK, maybe sent: in send before a response, in response mid-body", async () => {
  await withProbe(async (send) => {
    const port = await closedPort();
    const refused = await send({ target: `http://127.0.0.1:${port}/`, method: 'POST', through: 'fetch' });
    assert.equal(refused.stage, 'headers', 'a refused connect');
    assert.deepEqual(refused.thrown, LOST, 'a refused connect');
    assert.deepEqual(fields(refused.normalized), MAYBE_SENT_IN_SEND, 'a refused connect');
    for (const failure of FAILURES) {
      await withServer(
        always(failure.behaviour),
        async (server) => {
          const seen = await send({ target: server.origin, method: 'POST', through: 'fetch' });
          assert.equal(seen.stage, failure.stage, failure.name);
          assert.deepEqual(seen.thrown, LOST, failure.name);
          assert.deepEqual(
            fields(seen.normalized),
            failure.stage === 'body' ? { ...MAYBE_SENT_IN_SEND, phase: 'response' } : MAYBE_SENT_IN_SEND,
            failure.name,
          );
        },
        failure.options,
      );
    }
  });
});

test('on workerd, a POST refused or reset before its answer is tried once and fails with NetworkError maybe sent; a GET is resent (retry(), 3 attempts)', async () => {
  await withProbe(async (send) => {
    const port = await closedPort();
    for (const method of ['POST', 'GET'] as const) {
      const refused = await send({ target: `http://127.0.0.1:${port}/`, method, through: 'chain' });
      assert.equal(refused.attempts, method === 'POST' ? 1 : 3, `${method}, a refused connect`);
      assert.deepEqual(
        refused.thrown && {
          networkError: refused.thrown.networkError,
          code: refused.thrown.code,
          sent: refused.thrown.sent,
        },
        { networkError: true, code: 'ENETWORK', sent: 'maybe' },
        `${method}, a refused connect`,
      );
    }
    for (const failure of FAILURES.filter((f) => f.stage === 'headers')) {
      for (const method of ['POST', 'GET'] as const) {
        await withServer(
          always(failure.behaviour),
          async (server) => {
            const seen = await send({ target: server.origin, method, through: 'chain' });
            const name = `${method}, ${failure.name}`;
            assert.equal(seen.attempts, method === 'POST' ? 1 : 3, name);
            assert.deepEqual(fields(seen.thrown), MAYBE_SENT_IN_SEND, name);
            if (failure.options?.onConnect !== 'reset') {
              assert.equal(
                server.requests.length,
                method === 'POST' ? 1 : 3,
                `${name}: requests the server read`,
              );
            }
          },
          failure.options,
        );
      }
    }
  });
});

/**
 * A name under `.invalid` (RFC 6761 §6.4): guaranteed never to resolve. The probe's outbound
 * reaches loopback only, so nothing but the one lookup leaves the machine.
 */
const UNRESOLVABLE_URL = 'http://breakwater-test.invalid/';

test("workerd's fetch of a name that does not resolve throws only `internal error; reference = …` (the lookup failure is in workerd's log alone), which breakwater reads as ENETWORK, maybe sent: a POST is tried once", async () => {
  // Two lookups of a .invalid name, which fail at once (as test/network.test.ts's one).
  await withProbe(async (send, log) => {
    const seen = await send({ target: UNRESOLVABLE_URL, method: 'POST', through: 'fetch' });
    assert.equal(seen.stage, 'headers');
    assert.equal(seen.thrown?.name, 'Error');
    assert.match(seen.thrown?.message ?? '', /^internal error; reference = \w+$/);
    assert.equal(seen.thrown?.retryable, undefined, 'workerd does not call it retryable');
    // workerd did look the name up: its log says so, and nothing else does.
    assert.match(
      log(),
      /failed to lookup address information|DNS lookup failed/,
      'workerd looked the name up',
    );
    assert.deepEqual(fields(seen.normalized), MAYBE_SENT_IN_SEND);
    const chained = await send({ target: UNRESOLVABLE_URL, method: 'POST', through: 'chain' });
    assert.equal(chained.attempts, 1, 'a POST that may have been sent is not resent');
    assert.deepEqual(fields(chained.thrown), MAYBE_SENT_IN_SEND);
  });
});
