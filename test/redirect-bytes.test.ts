/**
 * A PUT (or any call) whose body is bytes, a typed array or an ArrayBuffer, answered 307 or
 * 308. Node 20's fetch (undici) fails it: it sends the bytes again from a buffer it has
 * detached ("Cannot perform ArrayBuffer.prototype.slice on a detached ArrayBuffer"), where
 * Deno's and Bun's go on with them. The chain holds those bytes, so it follows such a call's
 * redirects itself, and the PUT goes on as on Deno and Bun. Real servers on 127.0.0.1 only.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createFetch } from '../src/chain.ts';
import { retry } from '../src/retry.ts';
import { withServer } from './helpers/server.ts';

test('a PUT of bytes, a typed array or an ArrayBuffer answered 307 or 308 goes on with them, on Node as on Deno and Bun', async () => {
  await withServer(
    (req) =>
      req.url === '/a'
        ? { status: req.method === 'PUT' ? 307 : 308, headers: { location: '/b' } }
        : { body: `${req.method} ${[...req.body].join(',')}` },
    async (server) => {
      const fetch = createFetch({
        use: [retry({ attempts: 3, backoff: { initialMs: 1, maxMs: 1, jitter: 'none' } })],
      });
      for (const [method, body] of [
        ['PUT', new Uint8Array([1, 2, 3])],
        ['PUT', new Uint16Array([0x0201, 0x0003]).buffer],
        ['PATCH', new DataView(new Uint8Array([1, 2, 3]).buffer)],
      ] as const) {
        const before = server.requests.length;
        const response = await fetch(`${server.origin}/a`, { method, body });
        const sent = new Uint8Array(ArrayBuffer.isView(body) ? body.buffer : body).join(',');
        assert.deepEqual(
          [response.status, response.redirected, await response.text()],
          [200, true, `${method} ${sent}`],
          `${method} ${body.constructor.name}`,
        );
        assert.deepEqual(
          server.requests.slice(before).map((r) => `${r.method} ${r.url} ${r.body.byteLength}`),
          [`${method} /a ${sent.split(',').length}`, `${method} /b ${sent.split(',').length}`],
          `${method} ${body.constructor.name}: sent once to each`,
        );
      }
    },
  );
});
