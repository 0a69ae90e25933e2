import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Hono } from 'hono';
import { withApp } from './helpers/hono-server.ts';

test('probe reset', async () => {
  let ran = 0;
  let after = 0;
  const app = new Hono<{ Bindings: { incoming: { socket: { destroy(): void } }; outgoing: { destroy(): void } } }>();
  app.post('/x', async (c) => {
    ran++;
    const body = await c.req.text();
    const keys = Object.keys(c.env ?? {});
    console.log('env keys', keys, typeof c.env?.incoming?.socket?.destroy, body.length);
    c.env.incoming.socket.destroy();
    after++;
    return c.text('ok');
  });
  await withApp(app, async (server) => {
    for (let i = 0; i < 3; i++) {
      try {
        const res = await fetch(`${server.origin}/x`, { method: 'POST', body: 'hello' });
        console.log('got', res.status, await res.text());
      } catch (e) {
        const err = e as Error & { cause?: { code?: string; message?: string } };
        console.log('error', err.name, err.message, err.cause?.code, err.cause?.message);
      }
    }
  });
  console.log('ran', ran, 'after', after);
  assert.ok(true);
});
