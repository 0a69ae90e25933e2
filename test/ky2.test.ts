/**
 * `breakwater/ky` with ky 2 (installed as `ky2`, an npm alias: the rest of the suite runs
 * ky 1 as `ky`). ky 2 hands each hook one state object (`{ request, options, error,
 * retryCount }`) where ky 1 passes arguments, runs every `beforeRequest` hook even after
 * one returned a new `Request`, calls `beforeError` for every error, reads a failure's body
 * into `HTTPError.data` before those hooks run, and renamed `prefixUrl` to `prefix`.
 * kyOptions before it took ky 2's state for a request: every call failed before it was sent
 * ("Invalid value used as weak map key").
 *
 * ky 2 needs Node >= 22 (its `engines`): on an older Node each test says NOT RUN and
 * returns, as test/demo.test.ts does without Chromium (Deno's node:test shim takes
 * `test(name, fn)` only, and every runtime runs the same number of tests). Deno and Bun
 * run them.
 */

import assert from 'node:assert/strict';
import process from 'node:process';
import { test } from 'node:test';
import { Hono } from 'hono';
import type { KyInstance, Options as KyTwoOptions } from 'ky2';
import { kyOptions } from '../adapters/ky/index.ts';
import { CircuitOpenError, HttpStatusError } from '../src/errors.ts';
import { definePolicy } from '../src/policy.ts';
import { withApp } from './helpers/hono-server.ts';

const fast = { initialMs: 5, maxMs: 20, jitter: 'none' } as const;

/** ky 2's engines: node >= 22. Deno and Bun report a Node version of their own, and run it. */
const MIN_NODE_MAJOR = 22;
const onOldNode =
  process.versions.deno === undefined &&
  process.versions.bun === undefined &&
  Number(process.versions.node.split('.')[0]) < MIN_NODE_MAJOR;

/** ky 2's module, or undefined (said on the console) where its engines rule this runtime out. */
async function ky2(name: string): Promise<typeof import('ky2') | undefined> {
  if (onOldNode) {
    console.log(
      `ky 2 test NOT RUN on Node ${process.versions.node} (ky 2 needs Node >= ${MIN_NODE_MAJOR}; Deno and Bun run it): ${name}`,
    );
    return undefined;
  }
  return import('ky2');
}

/** What one request looked like at the server. */
interface Seen {
  at: number;
  method: string;
  key: string | null;
  body: string;
}

/**
 * An app that answers the first `failures` requests with `failure()` and the rest
 * with `ok()`, recording every request it got.
 */
function faulty(
  failures: number,
  failure: () => Response,
  ok: (seen: Seen) => Response = () => Response.json({ ok: true }),
) {
  const seen: Seen[] = [];
  const app = new Hono();
  app.all('*', async (c) => {
    const request = c.req.raw;
    const entry: Seen = {
      at: performance.now(),
      method: request.method,
      key: request.headers.get('idempotency-key'),
      body: await request.text(),
    };
    seen.push(entry);
    return seen.length <= failures ? failure() : ok(entry);
  });
  return { app, seen };
}

/** A failure with a JSON error body and the given extra headers. */
function failed(status: number, headers: Record<string, string> = {}): Response {
  return Response.json({ error: { message: 'model overloaded' } }, { status, headers });
}

/**
 * kyOptions as ky 2's `Options`. Its declared return type is `Options` from `ky`, which in
 * this repository is ky 1 (an app on ky 2 gets ky 2's: checked with tsc against the built
 * package); the hooks take either ky's form.
 */
function kyTwoOptions(...args: Parameters<typeof kyOptions>): KyTwoOptions {
  return kyOptions(...args) as unknown as KyTwoOptions;
}

/** `ky.create(base).extend(kyTwoOptions(policy, options))`, as README shows it. */
function client(
  ky: KyInstance,
  base: KyTwoOptions,
  policy = definePolicy({ retry: { backoff: fast } }),
  options?: Parameters<typeof kyOptions>[1],
): KyInstance {
  return ky.create(base).extend(kyTwoOptions(policy, options));
}

test('ky 2: a GET answered 429 with retry-after-ms, then 200, reaches the server twice, the wait honoured', async () => {
  const kyModule = await ky2('429 then 200');
  if (!kyModule) return;
  const { app, seen } = faulty(1, () => failed(429, { 'retry-after-ms': '120' }));
  await withApp(app, async (server) => {
    const api = client(kyModule.default, { prefix: server.origin });
    assert.deepEqual(await api.get('models').json(), { ok: true });
    assert.equal(seen.length, 2, 'one resend after the 429');
    const waited = (seen[1] as Seen).at - (seen[0] as Seen).at;
    assert.ok(waited >= 100, `the server's 120 ms were waited out (waited ${waited} ms)`);
  });
});

test('ky 2: a GET answered 503 once, then 200, is resent once', async () => {
  const kyModule = await ky2('503 then 200');
  if (!kyModule) return;
  const { app, seen } = faulty(1, () => failed(503));
  await withApp(app, async (server) => {
    const api = client(kyModule.default, { baseUrl: `${server.origin}/v1/` });
    assert.deepEqual(await api.get('things').json(), { ok: true });
    assert.equal(seen.length, 2);
  });
});

test('ky 2: a GET answered 503 every time reaches the server exactly the policy’s attempts, not ky’s on top', async () => {
  const kyModule = await ky2('503 every time');
  if (!kyModule) return;
  const { app, seen } = faulty(Infinity, () => failed(503));
  await withApp(app, async (server) => {
    const policy = definePolicy({ retry: { attempts: 2, backoff: fast, budget: false } });
    const api = client(kyModule.default, { prefix: server.origin }, policy);
    const error = await api.get('things').catch((e: unknown) => e);
    assert.ok(kyModule.isHTTPError(error), String(error));
    assert.equal(error.response.status, 503);
    assert.equal(seen.length, 2, 'the policy’s 2 attempts, no ky retry on top');
  });
});

test('ky 2: a POST answered 500 is sent once and ky throws its HTTPError, the body in error.data', async () => {
  const kyModule = await ky2('POST 500 once');
  if (!kyModule) return;
  const { app, seen } = faulty(1, () => failed(500));
  await withApp(app, async (server) => {
    const api = client(kyModule.default, { prefix: server.origin });
    const error = await api.post('orders', { json: { item: 'book' } }).catch((e: unknown) => e);
    assert.ok(error instanceof kyModule.HTTPError, String(error));
    assert.equal(error.response.status, 500);
    assert.deepEqual(error.data, { error: { message: 'model overloaded' } });
    assert.equal(seen.length, 1, 'a POST that may have run is not resent');
  });
});

test('ky 2: with errors: breakwater, a POST answered 503 throws HttpStatusError with the status, wait and message', async () => {
  const kyModule = await ky2('errors: breakwater');
  if (!kyModule) return;
  const { app, seen } = faulty(1, () => failed(503, { 'retry-after': '7' }));
  const sawFirst: string[] = [];
  await withApp(app, async (server) => {
    const policy = definePolicy({ name: 'orders', retry: { backoff: fast } });
    // A beforeError hook given before kyOptions sees ky's own HTTPError, as with ky 1.
    const api = kyModule.default
      .create({
        prefix: server.origin,
        hooks: {
          beforeError: [
            ({ error }) => {
              sawFirst.push(error.name);
              return error;
            },
          ],
        },
      })
      .extend(kyTwoOptions(policy, { errors: 'breakwater' }));
    const error = await api
      .post('orders', { json: { item: 'book' }, searchParams: { token: 'hunter2' } })
      .catch((e: unknown) => e);
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.status, 503);
    assert.equal(error.retryAfterMs, 7000);
    assert.equal(error.serverMessage, 'model overloaded');
    assert.equal(error.request?.key, 'orders');
    assert.doesNotMatch(error.message, /hunter2/);
    assert.deepEqual(sawFirst, ['HTTPError']);
    assert.equal(seen.length, 1);
  });
});

test('ky 2: with errors: breakwater, an open circuit still reaches the caller as CircuitOpenError (ky 2 runs beforeError for every error)', async () => {
  const kyModule = await ky2('open circuit');
  if (!kyModule) return;
  const { app, seen } = faulty(Infinity, () => new Response('down', { status: 500 }));
  await withApp(app, async (server) => {
    const policy = definePolicy({ retry: false, breaker: { consecutiveFailures: 1 } });
    const api = client(kyModule.default, { prefix: server.origin }, policy, { errors: 'breakwater' });
    const first = await api.get('things').catch((e: unknown) => e);
    assert.ok(first instanceof HttpStatusError, String(first));
    const second = await api.get('things').catch((e: unknown) => e);
    assert.ok(second instanceof CircuitOpenError, String(second));
    assert.equal(seen.length, 1);
  });
});

test('ky 2: a keyed POST answered 503 once is resent whole with the same Idempotency-Key', async () => {
  const kyModule = await ky2('keyed POST');
  if (!kyModule) return;
  const { app, seen } = faulty(
    1,
    () => failed(503),
    (entry) => new Response(entry.body, { status: 201 }),
  );
  await withApp(app, async (server) => {
    const policy = definePolicy({ idempotencyKeys: true, retry: { backoff: fast } });
    const api = client(kyModule.default, { prefix: server.origin }, policy);
    assert.deepEqual(await api.post('orders', { json: { item: 'book' } }).json(), { item: 'book' });
    const [first, second] = seen as [Seen, Seen];
    assert.equal(seen.length, 2);
    assert.match(String(first.key), /^"[0-9a-f-]{36}"$/);
    assert.equal(second.key, first.key, 'the same key on the resend');
    assert.deepEqual(
      seen.map((s) => s.body),
      ['{"item":"book"}', '{"item":"book"}'],
    );
  });
});

test('ky 2: a beforeRequest hook given before kyOptions that returns a Request with a body of its own sends that body, not ky’s', async () => {
  const kyModule = await ky2('hook replaces the request');
  if (!kyModule) return;
  const { app, seen } = faulty(0, () => failed(503));
  await withApp(app, async (server) => {
    // ky 2 runs the hooks after one that returned a Request (ky 1 stops): kyOptions' own
    // must not take ky's options' body for this request's.
    const api = kyModule.default
      .create({
        prefix: server.origin,
        hooks: {
          beforeRequest: [
            ({ request }) =>
              new Request(request.url, { method: 'PUT', headers: request.headers, body: 'signed' }),
          ],
        },
      })
      .extend(kyTwoOptions(definePolicy({ retry: { backoff: fast } })));
    await api.put('things/1', { json: { n: 1 } }).json();
    assert.deepEqual(
      seen.map((s) => s.body),
      ['signed'],
    );
  });
});

test('ky 2: bytes the caller changes after the call starts are sent, and resent, as ky built them', async () => {
  const kyModule = await ky2('bytes changed after the call starts');
  if (!kyModule) return;
  const { app, seen } = faulty(1, () => failed(503));
  await withApp(app, async (server) => {
    const api = client(kyModule.default, { prefix: server.origin });
    const bytes = new TextEncoder().encode('first');
    const pending = api.put('blobs/1', { body: bytes }).text();
    bytes.set(new TextEncoder().encode('later'));
    await pending;
    assert.deepEqual(
      seen.map((s) => s.body),
      ['first', 'first'],
    );
  });
});

test('ky 2: a user abort through ky’s signal during the server’s wait rejects with AbortError and no retry', async () => {
  const kyModule = await ky2('user abort');
  if (!kyModule) return;
  const { app, seen } = faulty(Infinity, () => failed(503, { 'retry-after': '30' }));
  await withApp(app, async (server) => {
    const api = client(kyModule.default, { prefix: server.origin });
    const controller = new AbortController();
    const started = performance.now();
    let settled = false;
    const pending = api
      .get('slow', { signal: controller.signal })
      .catch((e: unknown) => e)
      .finally(() => {
        settled = true;
      });
    // Until the server has the request (or the call ended without sending it: no hang).
    while (seen.length === 0 && !settled) await new Promise((resolve) => setTimeout(resolve, 5));
    controller.abort();
    const error = await pending;
    assert.equal((error as Error).name, 'AbortError');
    assert.equal(error, controller.signal.reason, 'the runtime’s own abort reason, not wrapped');
    assert.ok(performance.now() - started < 5000, 'the 30 s wait ended at once');
    assert.equal(seen.length, 1);
  });
});

test('ky 2: with errors: breakwater, a body ky read into error.data keeps the server’s message, the token the policy’s auth stamped hidden, when an afterResponse hook returns a new response', async () => {
  const kyModule = await ky2('afterResponse rebuilds the response');
  if (!kyModule) return;
  const token = 'Zq9opaqueTokenValue7781';
  const app = new Hono();
  app.all('*', (c) => c.text(`invalid credentials ${c.req.header('authorization')?.slice(7)} here`, 401));
  await withApp(app, async (server) => {
    const api = client(
      kyModule.default,
      { prefix: server.origin },
      definePolicy({ retry: { backoff: fast } }),
      {
        errors: 'breakwater',
        auth: { token },
      },
    ).extend({
      hooks: {
        // ky 2 reads the failure's body into HTTPError.data before beforeError hooks run,
        // and the chain's snapshot is not on this new response.
        afterResponse: [
          async ({ response }) =>
            new Response(await response.text(), { status: response.status, headers: response.headers }),
        ],
      },
    });
    const error = await api.get('me').catch((e: unknown) => e);
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.status, 401);
    assert.equal(error.body, 'invalid credentials [redacted] here');
    assert.equal(error.serverMessage, 'invalid credentials [redacted] here');
    assert.doesNotMatch(JSON.stringify(error), new RegExp(token));
  });
});
