/**
 * A redirect within the origin whose hop finds the server gone: a POST answered 303 (or
 * 307) with `Connection: close`, and the server stops listening right after (a deploy, a
 * crash), so the hop's connection is refused at the request's own address and port. fetch
 * followed the redirect itself and threw that refusal, which read as "never sent": retry()
 * sent the POST again, and once the server was back it ran twice (a reviewer's
 * reproduction, on Node). Real servers on 127.0.0.1 only.
 */

import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { test } from 'node:test';
import type { Middleware } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import { NetworkError } from '../src/errors.ts';
import { definePolicy } from '../src/policy.ts';
import { retry } from '../src/retry.ts';

/** Loopback only. */
const HOST = '127.0.0.1';

/** A server that goes away after its first answer, and comes back when asked. */
interface GoneServer {
  origin: string;
  /** `METHOD path` of every request it got, in order. */
  requests: string[];
  /** Listens again on the same port (once; later calls wait for the same). */
  back(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Answers its first request with `status` to `location` and `Connection: close`, then stops
 * listening at once (in the same tick: the client, in this process, cannot connect before),
 * so the hop is refused. Any later request gets `200 result`. Nothing waits on a timer:
 * the server comes back only through {@link GoneServer.back}, which a middleware below
 * retry() calls before a resend, so a resend is sure to reach it.
 */
async function goneAfterRedirect(status: number, location: string): Promise<GoneServer> {
  const requests: string[] = [];
  const sockets = new Set<Socket>();
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => {
      requests.push(`${req.method} ${req.url}`);
      if (requests.length > 1) {
        res.end('result');
        return;
      }
      res.writeHead(status, { location, connection: 'close' });
      res.end();
      server.close();
    });
  };
  const listen = (port: number) =>
    new Promise<Server>((resolve, reject) => {
      const next = createServer(handler);
      next.on('connection', (socket: Socket) => {
        sockets.add(socket);
        socket.on('close', () => sockets.delete(socket));
      });
      next.once('error', reject);
      next.listen(port, HOST, () => resolve(next));
    });
  let server = await listen(0);
  const { port } = server.address() as AddressInfo;
  let coming: Promise<void> | undefined;
  return {
    origin: `http://${HOST}:${port}`,
    requests,
    back() {
      coming ??= listen(port).then((again) => {
        server = again;
      });
      return coming;
    },
    async close() {
      await coming?.catch(() => {});
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => (server.listening ? server.close(() => resolve()) : resolve()));
    },
  };
}

/** Brings the server back before any resend: one that happens reaches it, and counts. */
function backBeforeResend(server: GoneServer): Middleware {
  return async function back(call, next) {
    if (call.attempt > 1) await server.back();
    return next(call);
  };
}

/** retry(), 3 attempts 1 ms apart; `resend` as given (default 'safe'). */
const quickRetry = (resend?: 'never') =>
  retry({ attempts: 3, backoff: { initialMs: 1, maxMs: 1, jitter: 'none' }, ...(resend ? { resend } : {}) });

/** What `call` rejected with, as the fields a caller judges a resend on. */
async function failure(
  call: Promise<Response>,
): Promise<{ name: string; code?: string; sent?: string; phase?: string }> {
  try {
    const response = await call;
    return { name: `answered ${response.status}` };
  } catch (error) {
    if (!(error instanceof NetworkError)) return { name: String(error) };
    return { name: error.name, code: error.code, sent: error.sent, phase: error.phase };
  }
}

/** The hop's refusal, after the request ran: maybe sent. */
const MAYBE_RAN = { name: 'NetworkError', code: 'ECONNREFUSED', sent: 'maybe', phase: 'send' };

test('a POST answered 303 within the origin, whose GET finds the server gone, runs once and fails as maybe sent', async () => {
  const server = await goneAfterRedirect(303, '/result');
  try {
    const fetch = createFetch({ use: [quickRetry(), backBeforeResend(server)] });
    const result = await failure(
      fetch(`${server.origin}/charge`, { method: 'POST', body: '{"amount":100}' }),
    );
    assert.deepEqual(result, MAYBE_RAN);
    assert.deepEqual(server.requests, ['POST /charge']);
  } finally {
    await server.close();
  }
});

test('a POST to a URL object (as the MCP SDK sends its JSON-RPC) answered 303, whose GET finds the server gone, runs once', async () => {
  const server = await goneAfterRedirect(303, '/result');
  try {
    const fetch = createFetch({ use: [quickRetry(), backBeforeResend(server)] });
    const result = await failure(
      fetch(new URL('/charge', server.origin), { method: 'POST', body: '{"amount":100}' }),
    );
    assert.deepEqual(result, MAYBE_RAN);
    assert.deepEqual(server.requests, ['POST /charge']);
  } finally {
    await server.close();
  }
});

test('the same POST through definePolicy({}).fetch() is not resent, and fails as maybe sent', async () => {
  const server = await goneAfterRedirect(303, '/result');
  try {
    // No backBeforeResend() in a policy's chain: the server stays away, and a resend would
    // be refused, not run. It would say `sent: 'no'` (after backing off 1.5 s).
    const fetch = definePolicy({}).fetch();
    const result = await failure(
      fetch(`${server.origin}/charge`, { method: 'POST', body: '{"amount":100}' }),
    );
    assert.deepEqual(result, MAYBE_RAN);
    assert.deepEqual(server.requests, ['POST /charge']);
  } finally {
    await server.close();
  }
});

test('a POST answered 307 within the origin, whose hop finds the server gone, runs once and fails as maybe sent', async () => {
  const server = await goneAfterRedirect(307, '/charge/2');
  try {
    const fetch = createFetch({ use: [quickRetry(), backBeforeResend(server)] });
    const result = await failure(fetch(`${server.origin}/charge`, { method: 'POST', body: 'x' }));
    assert.deepEqual(result, MAYBE_RAN);
    assert.deepEqual(server.requests, ['POST /charge']);
  } finally {
    await server.close();
  }
});

test("a GET answered 302 within the origin, whose hop finds the server gone, is not resent under retry({ resend: 'never' }) and fails as maybe sent", async () => {
  const server = await goneAfterRedirect(302, '/report/2');
  try {
    const fetch = createFetch({ use: [quickRetry('never'), backBeforeResend(server)] });
    const result = await failure(fetch(`${server.origin}/report`));
    assert.deepEqual(result, MAYBE_RAN);
    assert.deepEqual(server.requests, ['GET /report']);
  } finally {
    await server.close();
  }
});
