import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Hono } from 'hono';
import { idempotency } from '../adapters/hono/idempotency.ts';
import { proxy } from '../adapters/hono/proxy.ts';
import { definePolicy } from '../src/policy.ts';
import { withApp } from './helpers/hono-server.ts';
import { always, withServer } from './helpers/server.ts';

const SECRET = 'hunter2pass';

test('proxy() refuses a fixed target with userinfo or a scheme fetch does not send to, with a TypeError that shows no password', () => {
  const policy = definePolicy({ name: 'svc' });
  for (const target of [
    `http://svc:${SECRET}@127.0.0.1:1/`,
    new URL(`http://svc:${SECRET}@127.0.0.1:1/`),
    `http://:${SECRET}@127.0.0.1:1/`,
    `http://${SECRET}@127.0.0.1:1/`,
    'ftp://127.0.0.1:1/',
    'file:///etc/hosts',
    'data:,hello',
  ]) {
    assert.throws(
      () => proxy(target, { policy }),
      (e: unknown) =>
        e instanceof TypeError &&
        /proxy\(target\): must be an http\(s\) URL without userinfo/.test(e.message) &&
        !e.message.includes(SECRET),
      String(target).replace(SECRET, '…'),
    );
  }
  // Schemes in any case, and https, are fine.
  for (const target of ['https://127.0.0.1:1/', 'HTTP://127.0.0.1:1/', new URL('http://127.0.0.1:1/')]) {
    assert.equal(typeof proxy(target, { policy }), 'function', String(target));
  }
});

test("a target function's URL with userinfo or another scheme gets a 500 problem naming no URL nor secret, and nothing reaches the upstream or app.onError", async () => {
  await withServer(always({ status: 200, body: 'upstream ran' }), async (up) => {
    const policy = definePolicy({ name: 'svc', retry: { attempts: 1 } });
    const targets: Record<string, string> = {
      userinfo: `http://svc:${SECRET}@127.0.0.1:${up.port}/x`,
      user: `http://${SECRET}@127.0.0.1:${up.port}/x`,
      ftp: `ftp://127.0.0.1:${up.port}/x`,
      relative: `/x?token=${SECRET}`,
    };
    const app = new Hono();
    const errors: unknown[] = [];
    app.onError((error, c) => {
      errors.push(error);
      return c.text('app error', 500);
    });
    app.all(
      '/:name',
      proxy((c) => targets[c.req.param('name') as string] as string, { policy }),
    );
    await withApp(app, async (server) => {
      for (const name of Object.keys(targets)) {
        for (const method of ['GET', 'POST']) {
          const res = await fetch(`${server.origin}/${name}`, {
            method,
            ...(method === 'POST' ? { body: '{}' } : {}),
          });
          const text = await res.text();
          assert.equal(res.status, 500, `${method} ${name}: ${text}`);
          assert.equal(res.headers.get('content-type'), 'application/problem+json', name);
          const body = JSON.parse(text);
          assert.equal(body.title, 'Internal Server Error', text);
          assert.match(body.detail, /^the upstream URL must be an http\(s\) URL without userinfo/);
          assert.ok(!text.includes(SECRET), `${name} leaked the secret: ${text}`);
          assert.ok(!text.includes(String(up.port)), `${name} leaked the upstream address: ${text}`);
          // The same target answers a resend the same way until it is fixed.
          assert.equal(res.headers.get('x-should-retry'), 'false', name);
        }
      }
    });
    assert.deepEqual(errors, [], 'the refusal is the proxy’s answer, not an error for app.onError');
    assert.equal(up.requests.length, 0, 'nothing forwarded');
  });
});

test("behind idempotency(), a keyed request refused for its target's URL frees its key: the resend with the same key runs once the target is fixed", async () => {
  await withServer(always({ status: 201, body: 'created' }), async (up) => {
    const policy = definePolicy({ name: 'orders', retry: { attempts: 1 } });
    let target = `http://svc:${SECRET}@127.0.0.1:${up.port}/orders`;
    const app = new Hono();
    app.use('/orders', idempotency());
    app.post(
      '/orders',
      proxy(() => target, { policy }),
    );
    const send = () =>
      app.request('/orders', {
        method: 'POST',
        headers: { 'idempotency-key': '"order-1"', 'content-type': 'application/json' },
        body: '{"sku":"a"}',
      });
    const refused = await send();
    assert.equal(refused.status, 500, await refused.text());
    target = `http://127.0.0.1:${up.port}/orders`;
    const resent = await send();
    assert.equal(resent.status, 201, 'not the 500 replayed');
    assert.equal(await resent.text(), 'created');
    assert.equal(up.requests.length, 1);
  });
});
