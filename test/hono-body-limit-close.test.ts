import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Hono } from 'hono';
import { idempotency } from '../adapters/hono/idempotency.ts';
import { withApp } from './helpers/hono-server.ts';

const KEY = '"5f0c2a7e-1b3d-4c8e-9a6f-2d4b8e1c7a90"';

/**
 * How long @hono/node-server drains a request body left unread (its DRAIN_TIMEOUT_MS), and a
 * margin. On Deno its timer outlives the closed connection, and the sanitizer would flag it.
 */
const NODE_SERVER_DRAIN_MS = 500 + 100;

/** Waits out @hono/node-server's drain timer on Deno (elsewhere it leaves nothing behind that a test sees). */
async function drainTimerDone(): Promise<void> {
  if ('Deno' in globalThis) await new Promise((resolve) => setTimeout(resolve, NODE_SERVER_DRAIN_MS));
}

/** A body of `chunks` 64 KiB chunks sent as a stream: no Content-Length, so the server learns its size only by reading it. */
function streamedBody(chunks: number): ReadableStream<Uint8Array> {
  const chunk = new Uint8Array(64 * 1024).fill(0x61);
  let sent = 0;
  return new ReadableStream({
    pull(controller) {
      if (sent++ < chunks) controller.enqueue(chunk);
      else controller.close();
    },
  });
}

/** Sends `count` small POSTs one after another (each reuses the kept-alive connection) and returns what each got. */
async function plainPosts(origin: string, count: number): Promise<string[]> {
  const got: string[] = [];
  for (let i = 0; i < count; i++) {
    try {
      const res = await fetch(`${origin}/orders`, { method: 'POST', body: `plain ${i}` });
      got.push(`${res.status} ${await res.text()}`);
    } catch (error) {
      got.push(`threw ${(error as { cause?: { code?: string } }).cause?.code ?? error}`);
    }
  }
  return got;
}

test("idempotency()'s 413 for a streamed keyed body over maxBodyBytes closes the connection, so the client's next requests on it succeed, over a real server (kept alive, @hono/node-server killed it unannounced, and the next request failed: other side closed)", async () => {
  let runs = 0;
  const app = new Hono();
  app.use('/orders', idempotency());
  app.post('/orders', async (c) => {
    runs++;
    return c.text(await c.req.text());
  });
  await withApp(app, async ({ origin }) => {
    const big = await fetch(`${origin}/orders`, {
      method: 'POST',
      headers: { 'idempotency-key': KEY },
      body: streamedBody(16),
      duplex: 'half',
    } as RequestInit);
    assert.equal(big.status, 413);
    await big.text();
    assert.deepEqual(await plainPosts(origin, 4), [
      '200 plain 0',
      '200 plain 1',
      '200 plain 2',
      '200 plain 3',
    ]);
  });
  await drainTimerDone();
  assert.equal(runs, 4);
});
