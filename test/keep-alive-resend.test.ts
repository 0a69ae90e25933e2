import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { test } from 'node:test';
import { Hono } from 'hono';
import { idempotency, REPLAYED_HEADER } from '../adapters/hono/idempotency.ts';
import { definePolicy } from '../src/policy.ts';
import { withApp } from './helpers/hono-server.ts';

const fast = { initialMs: 5, maxMs: 20, jitter: 'none' } as const;

/**
 * An order API whose first POST runs (and, with `idempotency()`, is recorded), then
 * loses its connection before the answer goes out: the socket is destroyed by an
 * outer middleware once the handler and the idempotency record are done. GET / is
 * answered normally, so a client's keep-alive connection is reused for the POST.
 */
function droppingOrdersApp(keyed: boolean) {
  let runs = 0;
  let dropped = false;
  const posts: (string | null)[] = [];
  const app = new Hono<{ Bindings: { incoming: IncomingMessage } }>();
  app.use('/orders', async (c, next) => {
    posts.push(c.req.header('idempotency-key') ?? null);
    await next();
    if (!dropped) {
      dropped = true;
      c.env.incoming.socket.destroy();
    }
  });
  if (keyed) app.use('/orders', idempotency());
  app.get('/', (c) => c.text('up'));
  app.post('/orders', async (c) => {
    await c.req.text();
    runs++;
    return c.json({ order: runs }, 201);
  });
  return { app, runs: () => runs, posts };
}

test('a keyed POST whose reused connection drops after the server ran it runs once, whoever resends it', async () => {
  const { app, runs, posts } = droppingOrdersApp(true);
  await withApp(app, async ({ origin }) => {
    const fetch = definePolicy({ retry: { backoff: fast }, idempotencyKeys: true }).fetch();
    assert.equal(await (await fetch(origin)).text(), 'up');
    const res = await fetch(`${origin}/orders`, { method: 'POST', body: '{"item":"book"}' });
    assert.equal(res.status, 201);
    assert.deepEqual(await res.json(), { order: 1 });
    // Node and Bun throw a reset, which retry resends with the same key; Deno resends
    // on its own, below fetch. Either way the server saw the key twice and ran it once.
    assert.equal(res.headers.get(REPLAYED_HEADER), 'true');
    assert.equal(posts.length, 2);
    assert.equal(posts[0], posts[1]);
    assert.equal(runs(), 1);
  });
});

test('an unkeyed POST whose reused connection drops after the server ran it is not resent by breakwater; only Deno’s own fetch resends it', async () => {
  const { app, runs } = droppingOrdersApp(false);
  await withApp(app, async ({ origin }) => {
    const fetch = definePolicy({ retry: { backoff: fast } }).fetch();
    assert.equal(await (await fetch(origin)).text(), 'up');
    const outcome = await fetch(`${origin}/orders`, { method: 'POST', body: '{"item":"book"}' }).then(
      async (res) => ({ status: res.status, body: await res.text() }),
      (error: unknown) => ({ error: (error as Error).name, sent: (error as { sent?: string }).sent }),
    );
    if ('Deno' in globalThis) {
      // Deno's HTTP client retries a request whose reused connection closed without an
      // answer, POST included, after the server had read it whole: the order ran twice
      // and nothing in the Response says so. README "Runtimes" warns of this; keys fix it.
      assert.deepEqual(outcome, { status: 201, body: '{"order":2}' });
      assert.equal(runs(), 2);
    } else {
      assert.deepEqual(outcome, { error: 'NetworkError', sent: 'maybe' });
      assert.equal(runs(), 1);
    }
  });
});
