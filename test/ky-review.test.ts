import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Hono } from 'hono';
import ky from 'ky';
import { kyOptions } from '../adapters/ky/index.ts';
import { HttpStatusError } from '../src/errors.ts';
import { definePolicy } from '../src/policy.ts';
import { withApp } from './helpers/hono-server.ts';

const fast = { initialMs: 5, maxMs: 20, jitter: 'none' } as const;

test('with errors: breakwater, a status the policy retries is reported retryable, as the policy judged it', async () => {
  let requests = 0;
  const app = new Hono();
  app.get('/calm', (c) => {
    requests++;
    return c.json({ error: { message: 'enhance your calm' } }, 420 as 400);
  });
  await withApp(app, async (server) => {
    const policy = definePolicy({ retry: { statuses: [420], backoff: fast } });
    const api = ky.create(kyOptions(policy, { errors: 'breakwater' }));
    await assert.rejects(api.get(`${server.origin}/calm`), (error: unknown) => {
      assert.ok(error instanceof HttpStatusError);
      assert.equal(error.status, 420);
      assert.equal(error.retryable, true, 'the policy retried it: it is retryable by its rules');
      return true;
    });
    assert.equal(requests, 3);
  });
});
