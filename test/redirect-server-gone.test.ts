/**
 * A redirect within the origin whose hop finds the server gone: a POST answered 303 (or
 * 307) with `Connection: close`, and the server stops listening right after (a deploy, a
 * crash), so the hop's connection is refused at the request's own address and port. fetch
 * followed the redirect itself and threw that refusal, which read as "never sent": retry()
 * sent the POST again, and once the server was back it ran twice (a reviewer's
 * reproduction, on Node). Real servers on 127.0.0.1 only.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Middleware } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import { definePolicy } from '../src/policy.ts';
import { retry } from '../src/retry.ts';
import { failure, type GoneServer, goneAfterRedirect, MAYBE_RAN } from './helpers/gone-server.ts';

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

test('a POST answered 303 within the origin, whose GET finds the server gone, runs once and fails as maybe sent: to a URL string, or a URL object (as the MCP SDK sends its JSON-RPC)', async () => {
  for (const url of [
    (origin: string) => `${origin}/charge`,
    (origin: string) => new URL('/charge', origin),
  ]) {
    const server = await goneAfterRedirect(303, '/result');
    try {
      const fetch = createFetch({ use: [quickRetry(), backBeforeResend(server)] });
      const result = await failure(fetch(url(server.origin), { method: 'POST', body: '{"amount":100}' }));
      assert.deepEqual(result, MAYBE_RAN, String(url(server.origin)));
      assert.deepEqual(server.requests, ['POST /charge {"amount":100}']);
    } finally {
      await server.close();
    }
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
    assert.deepEqual(server.requests, ['POST /charge {"amount":100}']);
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
    assert.deepEqual(server.requests, ['POST /charge x']);
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
