import assert from 'node:assert/strict';
import { test } from 'node:test';
import { always, closedPort, sequence, withServer } from './helpers/server.ts';

test('the test server answers with the given status, headers and body, and records the request', async () => {
  await withServer(always({ status: 503, headers: { 'retry-after': '7' }, body: 'busy' }), async (server) => {
    const res = await fetch(`${server.origin}/x?y=1`, {
      method: 'POST',
      body: 'hello',
      headers: { 'x-a': 'b' },
    });
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('retry-after'), '7');
    assert.equal(await res.text(), 'busy');
    assert.equal(server.requests.length, 1);
    assert.equal(server.requests[0]?.method, 'POST');
    assert.equal(server.requests[0]?.url, '/x?y=1');
    assert.equal(server.requests[0]?.text, 'hello');
    assert.equal(server.requests[0]?.headers['x-a'], 'b');
  });
});

test('the test server answers a sequence in order and repeats the last behaviour', async () => {
  await withServer(sequence({ status: 500 }, { status: 201 }), async (server) => {
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await fetch(server.origin);
      await res.body?.cancel();
      statuses.push(res.status);
    }
    assert.deepEqual(statuses, [500, 201, 201]);
  });
});

test('the test server delays the response headers by delayMs', async () => {
  await withServer(always({ delayMs: 60 }), async (server) => {
    const started = performance.now();
    const res = await fetch(server.origin);
    await res.text();
    assert.ok(performance.now() - started >= 50, 'performance.now() - started >= 50');
  });
});

test('a server that resets before reading the request makes fetch reject', async () => {
  await withServer(
    always({}),
    async (server) => {
      await assert.rejects(fetch(server.origin));
      assert.equal(server.requests.length, 0);
      assert.ok(server.connections() >= 1, 'server.connections() >= 1');
    },
    { onConnect: 'reset' },
  );
});

test('a server that resets after reading the request makes fetch reject once the request arrived', async () => {
  await withServer(always({ reset: 'after-read' }), async (server) => {
    await assert.rejects(fetch(server.origin, { method: 'POST', body: 'x' }));
    assert.equal(server.requests.length, 1);
  });
});

test('a server that closes without a response makes fetch reject', async () => {
  await withServer(always({ close: 'no-response' }), async (server) => {
    await assert.rejects(fetch(server.origin));
    assert.equal(server.requests.length, 1);
  });
});

test('a server that resets mid-body delivers the headers and then breaks the body stream', async () => {
  await withServer(always({ reset: 'mid-body', status: 200, body: 'partial' }), async (server) => {
    const res = await fetch(server.origin);
    assert.equal(res.status, 200);
    await assert.rejects(res.text());
  });
});

test('a server that hangs never answers until the caller aborts', async () => {
  await withServer(always({ hang: true }), async (server) => {
    const controller = new AbortController();
    const pending = fetch(server.origin, { signal: controller.signal });
    setTimeout(() => controller.abort(new Error('caller gave up')), 30);
    await assert.rejects(pending, /caller gave up/);
  });
});

test('a port that was just closed refuses connections', async () => {
  const port = await closedPort();
  await assert.rejects(fetch(`http://127.0.0.1:${port}/`));
});
