import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Hono } from 'hono';
import { idempotency, REPLAYED_HEADER } from '../adapters/hono/idempotency.ts';
import { type JsonValue, memoryStore, type Store } from '../src/store.ts';
import { withApp } from './helpers/hono-server.ts';

const KEY = '"0b7e3a52-9d0e-4d61-a2a4-0f0c1b2a3d4e"';

/** A promise and the function that resolves it. */
function signal(): { promise: Promise<void>; fire: () => void } {
  let fire = (): void => {};
  const promise = new Promise<void>((resolve) => {
    fire = resolve;
  });
  return { promise, fire };
}

/** A memory store that fires `recorded` once a final record (not a claim) is written. */
function watchedStore(): Store & { recorded: Promise<void> } {
  const inner = memoryStore<JsonValue>();
  const recorded = signal();
  return {
    ...inner,
    get: (key) => inner.get(key),
    delete: (key) => inner.delete(key),
    recorded: recorded.promise,
    async compareAndSet(key, expected, next, ttlMs) {
      const done = await inner.compareAndSet(key, expected, next, ttlMs);
      if (done && (next as { state?: string }).state !== 'running') recorded.fire();
      return done;
    },
  };
}

test('a client that gives up before the answer finds it recorded when it retries with the same key, over a real server', async () => {
  let runs = 0;
  const entered = signal();
  const release = signal();
  const store = watchedStore();
  const app = new Hono();
  app.use('/orders', idempotency({ store }));
  app.post('/orders', async (c) => {
    runs++;
    entered.fire();
    await release.promise;
    return c.json({ order: runs }, 201);
  });
  await withApp(app, async ({ origin }) => {
    const send = (abort?: AbortSignal): Promise<Response> =>
      fetch(`${origin}/orders`, {
        method: 'POST',
        body: '{}',
        headers: { 'idempotency-key': KEY },
        signal: abort ?? null,
      });
    const controller = new AbortController();
    const first = send(controller.signal);
    await entered.promise;
    controller.abort();
    await assert.rejects(first);
    release.fire();
    await store.recorded;
    const again = await send();
    assert.equal(again.status, 201);
    assert.equal(again.headers.get(REPLAYED_HEADER), 'true');
    assert.deepEqual(await again.json(), { order: 1 });
  });
  assert.equal(runs, 1);
});
