/**
 * ky's POST answered 303 (or 307) within its origin, whose hop finds the server gone (a
 * deploy, a crash): the hop's connection is refused at the request's own address and port.
 * ky hands fetch a `Request`, which the chain's end leaves to the runtime's fetch to follow
 * (its body is a stream that goes once), so the hop's refusal read as "never sent" and the
 * policy ran the POST again once the server was back. Real ky, real servers on 127.0.0.1.
 */

import assert from 'node:assert/strict';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import ky from 'ky';
import { kyOptions } from '../adapters/ky/index.ts';
import { definePolicy } from '../src/policy.ts';
import { failure, type GoneServer, goneAfterRedirect, MAYBE_RAN } from './helpers/gone-server.ts';

/** Loopback only. */
const HOST = '127.0.0.1';

/**
 * ky with a policy (3 attempts, 1 ms apart) whose `auth()` token brings the server back
 * before any resend (its `token()` runs once per attempt), so a resend reaches it and counts.
 */
function kyFor(server: GoneServer, resend: 'safe' | 'never' = 'safe') {
  let attempts = 0;
  const policy = definePolicy({
    retry: { attempts: 3, backoff: { initialMs: 1, maxMs: 1, jitter: 'none' }, resend },
  });
  return ky.create(
    kyOptions(policy, {
      auth: {
        token: async () => {
          if (++attempts > 1) await server.back();
          return 'token-of-the-test';
        },
      },
    }),
  );
}

test('a ky POST answered 303 within the origin, whose GET finds the server gone, runs once and fails as maybe sent', async () => {
  const server = await goneAfterRedirect(303, '/result');
  try {
    const result = await failure(
      kyFor(server)
        .post(`${server.origin}/charge`, { json: { amount: 100 } })
        .json(),
    );
    assert.deepEqual(result, MAYBE_RAN);
    assert.deepEqual(server.requests, ['POST /charge {"amount":100}']);
  } finally {
    await server.close();
  }
});

test('a ky POST answered 307 within the origin, whose hop finds the server gone, runs once and fails as maybe sent', async () => {
  const server = await goneAfterRedirect(307, '/charge/2');
  try {
    const result = await failure(
      kyFor(server).post(`${server.origin}/charge`, { body: 'amount=100' }).json(),
    );
    assert.deepEqual(result, MAYBE_RAN);
    assert.deepEqual(server.requests, ['POST /charge amount=100']);
  } finally {
    await server.close();
  }
});

test("a ky PUT answered 307 within the origin, whose hop finds the server gone, is not resent under resend: 'never' and fails as maybe sent", async () => {
  const server = await goneAfterRedirect(307, '/doc/2');
  try {
    const result = await failure(
      kyFor(server, 'never')
        .put(`${server.origin}/doc`, { json: { v: 2 } })
        .json(),
    );
    assert.deepEqual(result, MAYBE_RAN);
    assert.deepEqual(server.requests, ['PUT /doc {"v":2}']);
  } finally {
    await server.close();
  }
});

/** A server that answers a POST 303 to `/result` and anything else `"result"`, recording each request. */
async function redirecting(): Promise<{
  origin: string;
  requests: IncomingMessage[];
  close(): Promise<void>;
}> {
  const requests: IncomingMessage[] = [];
  const server = createServer((req, res) => {
    requests.push(req);
    req.resume();
    req.on('end', () => {
      if (req.method === 'POST') res.writeHead(303, { location: '/result' }).end();
      else res.end('"result"');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, HOST, resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://${HOST}:${port}`,
    requests,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

test('a ky POST answered 303 is followed to the GET with ky’s headers and the policy’s, and the answer says redirected', async () => {
  const server = await redirecting();
  try {
    const policy = definePolicy({ idempotencyKeys: true });
    const api = ky.create({ headers: { 'x-client': 'ky-test' } }).extend(kyOptions(policy));
    const response = await api.post(`${server.origin}/charge`, { json: { amount: 100 } });
    assert.deepEqual(await response.json(), 'result');
    assert.equal(response.redirected, true, 'response.redirected');
    assert.deepEqual(
      server.requests.map((req) => [
        req.method,
        req.url,
        req.headers['x-client'],
        req.headers['content-type'],
      ]),
      [
        ['POST', '/charge', 'ky-test', 'application/json'],
        ['GET', '/result', 'ky-test', undefined],
      ],
    );
    assert.match(String(server.requests[0]?.headers['idempotency-key']), /^"[0-9a-f-]{36}"$/);
  } finally {
    await server.close();
  }
});

test('a ky POST with redirect: manual gets the 303 back, not followed', async () => {
  const server = await redirecting();
  try {
    const api = ky.create(kyOptions(definePolicy({})));
    const response = await api.post(`${server.origin}/charge`, {
      body: 'amount=100',
      redirect: 'manual',
      throwHttpErrors: false,
    });
    assert.equal(response.status, 303);
    await response.body?.cancel();
    assert.deepEqual(
      server.requests.map((req) => `${req.method} ${req.url}`),
      ['POST /charge'],
    );
  } finally {
    await server.close();
  }
});

test('a user abort through ky’s signal of a POST waiting for its answer rejects with the abort’s reason, sent once', async () => {
  const requests: string[] = [];
  const server = createServer((req) => {
    requests.push(`${req.method} ${req.url}`);
    req.resume(); // never answers
  });
  await new Promise<void>((resolve) => server.listen(0, HOST, resolve));
  try {
    const { port } = server.address() as AddressInfo;
    const controller = new AbortController();
    const api = ky.create(kyOptions(definePolicy({})));
    const pending = api
      .post(`http://${HOST}:${port}/charge`, { json: { amount: 100 }, signal: controller.signal })
      .catch((error: unknown) => error);
    while (requests.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    controller.abort();
    assert.equal(await pending, controller.signal.reason, 'the runtime’s own abort reason, not wrapped');
    assert.deepEqual(requests, ['POST /charge']);
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});
