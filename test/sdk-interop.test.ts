import assert from 'node:assert/strict';
import { test } from 'node:test';
import ky from 'ky';
import { definePolicy } from '../src/policy.ts';
import { sequence, withServer } from './helpers/server.ts';

const fast = { initialMs: 5, maxMs: 20, jitter: 'none' } as const;

test('ky with breakwater’s fetch: the policy waits out a 503 and ky sees the 200', async () => {
  await withServer(
    sequence({ status: 503, headers: { 'retry-after-ms': '30' } }, { status: 200, body: '{"ok":true}' }),
    async (server) => {
      const fetch = definePolicy({ retry: { backoff: fast } }).fetch();
      // ky's own retry is off: one layer decides, and it is the one that reads Retry-After.
      const body = await ky.get(`${server.origin}/things`, { fetch, retry: 0 }).json();
      assert.deepEqual(body, { ok: true });
      assert.equal(server.requests.length, 2);
    },
  );
});

test('ky with breakwater’s fetch: a keyed POST body (a Request with a stream body) arrives whole', async () => {
  await withServer(sequence({ status: 201, body: '{"id":1}' }), async (server) => {
    const fetch = definePolicy({ idempotencyKeys: true }).fetch();
    const body = await ky.post(`${server.origin}/orders`, { fetch, json: { item: 'book' }, retry: 0 }).json();
    assert.deepEqual(body, { id: 1 });
    assert.equal(server.requests[0]?.text, '{"item":"book"}');
    assert.match(String(server.requests[0]?.headers['idempotency-key']), /^"[0-9a-f-]{36}"$/);
  });
});
