import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Hono } from 'hono';
import { withApp } from './helpers/hono-server.ts';

test('probe abort', async () => {
  let sawAbort: (v: string) => void = () => {};
  const aborted = new Promise<string>((r) => { sawAbort = r; });
  const app = new Hono();
  app.get('/', async (c) => {
    await new Promise<void>((resolve) => c.req.raw.signal.addEventListener('abort', () => { sawAbort(String(c.req.raw.signal.reason)); resolve(); }));
    return c.text('late');
  });
  await withApp(app, async (server) => {
    const ctl = new AbortController();
    const p = fetch(server.origin, { signal: ctl.signal });
    await new Promise((r) => setTimeout(r, 100));
    ctl.abort();
    await assert.rejects(p);
    const t = Date.now();
    const reason = await Promise.race([aborted, new Promise<string>((r) => setTimeout(() => r('TIMEOUT'), 1000))]);
    console.log('reason', reason, Date.now() - t);
  });
});
