/**
 * A `Request` of a method that is not idempotent, handed to a breakwater fetch as is (as
 * hono/proxy's `customFetch` gets one), answered with a redirect whose hop finds the server
 * gone. The chain left such a call's redirects to the runtime's fetch, whose hop's refusal
 * read as "never sent" (Bun names the request's own URL; Node and Deno, within the origin,
 * the request's own address and port): retry() and definePolicy() resent a POST that had
 * run. The chain now follows them itself: a 303 goes on as a GET, and a 307 or 308, which
 * needs the body again, fails as fetch fails a stream body's (to the chain a Request's body is
 * a stream), unless retry's `replayBodyBytes` buffered it. Real servers on 127.0.0.1 only.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { proxy } from 'hono/proxy';
import { auth } from '../src/auth.ts';
import { type FetchLike, type Middleware, RAN } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import { classify } from '../src/classify.ts';
import { definePolicy } from '../src/policy.ts';
import { retry } from '../src/retry.ts';
import { failure, type GoneServer, goneAfterRedirect, MAYBE_RAN } from './helpers/gone-server.ts';
import { always, closedPort, withServer } from './helpers/server.ts';

/** Brings the server back before any resend: one that happens reaches it, and counts. */
function backBeforeResend(server: GoneServer): Middleware {
  return async function back(call, next) {
    if (call.attempt > 1) await server.back();
    return next(call);
  };
}

/** retry(), 3 attempts 1 ms apart. */
const quickRetry = () => retry({ attempts: 3, backoff: { initialMs: 1, maxMs: 1, jitter: 'none' } });

/** A POST `Request` to `url` with a text body. */
const post = (url: string) => new Request(url, { method: 'POST', body: '{"amount":100}' });

/** A stream body of `text`. */
function streamOf(text: string): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(controller) {
      controller.enqueue(new TextEncoder().encode(text));
      controller.close();
    },
  });
}

/** A stream body of `size` bytes, in 64 KiB chunks. */
function bytesOf(size: number): ReadableStream<Uint8Array> {
  let left = size;
  return new ReadableStream({
    pull(controller) {
      const chunk = new Uint8Array(Math.min(left, 64 * 1024)).fill(97);
      left -= chunk.byteLength;
      controller.enqueue(chunk);
      if (left === 0) controller.close();
    },
  });
}

/** Buffers a stream body of up to 1 KiB, so a 307 can send it again. */
const replaying = () =>
  retry({ attempts: 3, backoff: { initialMs: 1, maxMs: 1, jitter: 'none' }, replayBodyBytes: 1024 });

/** What a call settled with, and whether the chain marked it as may have run (seen by the outermost middleware). */
async function settled(
  fetch: (use: Middleware[]) => FetchLike,
  send: (fetch: FetchLike) => Promise<unknown>,
): Promise<{ error: unknown; ran: boolean }> {
  let ran = false;
  const marked: Middleware = async function marked(call, next) {
    try {
      return await next(call);
    } finally {
      ran = call.bag.has(RAN);
    }
  };
  let error: unknown;
  await send(fetch([marked])).catch((e: unknown) => {
    error = e;
  });
  return { error, ran };
}

test('a POST Request answered 303 to another origin that is gone reaches the server once and fails as maybe sent: through definePolicy({}).fetch() and createFetch({ use: [retry()] })', async () => {
  const dead = await closedPort();
  for (const [name, fetch] of [
    ['definePolicy', definePolicy({}).fetch()],
    ['retry', createFetch({ use: [quickRetry()] })],
  ] as const) {
    await withServer(
      always({ status: 303, headers: { location: `http://127.0.0.1:${dead}/charges/1` } }),
      async (server) => {
        // On Bun the runtime's own fetch followed it, and its refusal named the request's URL:
        // read as never sent, the POST ran again on each resend.
        assert.deepEqual(await failure(fetch(post(`${server.origin}/charges`))), MAYBE_RAN, name);
        assert.deepEqual(
          server.requests.map((r) => `${r.method} ${r.text}`),
          ['POST {"amount":100}'],
          `${name}: reached once`,
        );
      },
    );
  }
});

test('a POST Request answered 303 within the origin, whose GET finds the server gone, runs once and fails as maybe sent', async () => {
  const server = await goneAfterRedirect(303, '/result');
  try {
    const fetch = createFetch({ use: [quickRetry(), backBeforeResend(server)] });
    assert.deepEqual(await failure(fetch(post(`${server.origin}/charges`))), MAYBE_RAN);
    assert.deepEqual(server.requests, ['POST /charges {"amount":100}'], 'ran once');
  } finally {
    await server.close();
  }
});

test('hono/proxy with a breakwater fetch as customFetch runs the upstream POST once when its 303 finds the server gone', async () => {
  const server = await goneAfterRedirect(303, '/result');
  try {
    const customFetch = createFetch({ use: [quickRetry(), backBeforeResend(server)] });
    const result = await failure(
      proxy(`${server.origin}/charges`, { method: 'POST', body: '{"amount":100}', customFetch }),
    );
    assert.deepEqual(result, MAYBE_RAN);
    assert.deepEqual(server.requests, ['POST /charges {"amount":100}']);
  } finally {
    await server.close();
  }
});

test('a POST Request answered 307 or 308 within the origin or to another that is gone goes on with its body, and fails as maybe sent: it ran once', async () => {
  const dead = await closedPort();
  for (const status of [307, 308]) {
    for (const [where, location] of [
      ['within the origin', '/charges/2'],
      ['to another origin', `http://127.0.0.1:${dead}/charges/2`],
    ]) {
      const server = await goneAfterRedirect(status, location as string);
      try {
        // The runtime's fetch followed it; its hop's refusal read as never sent on Node and Deno
        // within the origin, and on Bun anywhere: the POST ran again.
        const fetch = createFetch({ use: [quickRetry(), backBeforeResend(server)] });
        const result = await failure(fetch(post(`${server.origin}/charges`)));
        assert.deepEqual(result, MAYBE_RAN, `${status} ${where}`);
        assert.deepEqual(server.requests, ['POST /charges {"amount":100}'], `${status} ${where}: ran once`);
      } finally {
        await server.close();
      }
    }
  }
});

test("a POST Request's body of text, a form or a short stream, answered 307, goes on to the Location with it, as fetch sends text again", async () => {
  await withServer(
    (req) => (req.url === '/a' ? { status: 307, headers: { location: '/b' } } : { body: 'done' }),
    async (server) => {
      const form = new FormData();
      form.set('amount', '100');
      const fetch = createFetch({ use: [] });
      for (const [name, body] of [
        ['text', '{"amount":100}'],
        ['form', form],
        ['stream', streamOf('{"amount":100}')],
      ] as const) {
        const before = server.requests.length;
        const request = new Request(`${server.origin}/a`, {
          method: 'POST',
          body,
          duplex: 'half',
        } as RequestInit);
        const response = await fetch(request);
        assert.deepEqual(
          [response.status, response.redirected, await response.text()],
          [200, true, 'done'],
          name,
        );
        const [first, hop] = server.requests.slice(before);
        assert.ok(first && hop, `${name}: sent to /a, then to /b`);
        assert.ok(first.text.includes('100'), `${name}: the body went`);
        // A form goes again with the boundary its Content-Type names.
        assert.deepEqual(
          [hop.method, hop.url, hop.text, hop.headers['content-type']],
          ['POST', '/b', first.text, first.headers['content-type']],
          name,
        );
      }
    },
  );
});

test('a POST Request whose stream body is over 1 MB, answered 307, is not sent again: it fails as fetch fails a stream body it cannot follow, marked as may have run', async () => {
  await withServer(always({ status: 307, headers: { location: '/b' } }), async (server) => {
    const size = 1_500_000;
    const { error, ran } = await settled(
      (use) => createFetch({ use: [quickRetry(), ...use] }),
      (fetch) =>
        fetch(
          new Request(`${server.origin}/a`, {
            method: 'POST',
            body: bytesOf(size),
            duplex: 'half',
          } as RequestInit),
        ),
    );
    assert.match(String(error), /307 not followed: a stream body goes once/);
    assert.equal(classify({ error }).notRun, false, 'not read as unsent');
    assert.ok(ran, 'marked as may have run');
    assert.deepEqual(
      server.requests.map((r) => `${r.url} ${r.body.byteLength}`),
      [`/a ${size}`],
    );
  });
});

test('auth({ header }) follows a POST Request answered 307 to another origin with its body, and without its key', async () => {
  await withServer(always({ status: 200, body: 'done' }), async (other) => {
    await withServer(always({ status: 307, headers: { location: `${other.origin}/b` } }), async (server) => {
      const fetch = createFetch({
        use: [auth({ token: 'k3y-0123456789', header: 'x-api-key', scheme: '' })],
      });
      const response = await fetch(post(`${server.origin}/a`));
      assert.deepEqual([response.status, await response.text()], [200, 'done']);
      const [hop] = other.requests;
      assert.deepEqual(
        [hop?.method, hop?.text, hop?.headers['x-api-key']],
        ['POST', '{"amount":100}', undefined],
      );
      assert.equal(server.requests[0]?.headers['x-api-key'], 'k3y-0123456789');
    });
  });
});

test('a POST Request whose body retry({ replayBodyBytes }) buffered, answered 307, goes on with its body: to another origin that is gone it fails as maybe sent; to a live one it is answered', async () => {
  const dead = await closedPort();
  await withServer(
    always({ status: 307, headers: { location: `http://127.0.0.1:${dead}/charges/1` } }),
    async (server) => {
      const fetch = createFetch({ use: [replaying()] });
      assert.deepEqual(await failure(fetch(post(`${server.origin}/charges`))), MAYBE_RAN);
      assert.equal(server.requests.length, 1, 'reached once');
    },
  );
  await withServer(
    (req) => (req.url === '/a' ? { status: 307, headers: { location: '/b' } } : { body: `got ${req.text}` }),
    async (server) => {
      const fetch = createFetch({ use: [replaying()] });
      for (const body of ['{"amount":100}', streamOf('{"amount":100}')]) {
        const request = new Request(`${server.origin}/a`, {
          method: 'POST',
          body,
          duplex: 'half',
        } as RequestInit);
        const response = await fetch(request);
        assert.deepEqual(
          [response.status, response.redirected, await response.text()],
          [200, true, 'got {"amount":100}'],
          typeof body,
        );
      }
      assert.deepEqual(
        server.requests.map((r) => `${r.method} ${r.url} ${r.text}`),
        [
          'POST /a {"amount":100}',
          'POST /b {"amount":100}',
          'POST /a {"amount":100}',
          'POST /b {"amount":100}',
        ],
      );
    },
  );
});

test("a POST Request's own redirect mode stays its own: 'manual' gets the 303 back, 'error' rejects", async () => {
  await withServer(always({ status: 303, headers: { location: '/b' } }), async (server) => {
    const fetch = createFetch({ use: [] });
    const manual = await fetch(
      new Request(`${server.origin}/a`, { method: 'POST', body: 'x', redirect: 'manual' }),
    );
    assert.equal(manual.status, 303);
    await manual.body?.cancel();
    await assert.rejects(
      fetch(new Request(`${server.origin}/a`, { method: 'POST', body: 'x', redirect: 'error' })),
    );
    assert.equal(server.requests.length, 2, 'no hop followed');
  });
});
