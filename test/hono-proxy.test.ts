import assert from 'node:assert/strict';
import { createServer, request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { type Context, Hono } from 'hono';
import { cors } from 'hono/cors';
import { requestId } from 'hono/request-id';
import OpenAI from 'openai';
import { idempotency, REPLAYED_HEADER } from '../adapters/hono/idempotency.ts';
import { type ProxyHeaders, proxy } from '../adapters/hono/proxy.ts';
import { definePolicy, type Policy } from '../src/policy.ts';
import { assertClosedSoon, hangingUpstream, withApp } from './helpers/hono-server.ts';
import { always, closedPort, sequence, type TestServer, withServer } from './helpers/server.ts';

/** Reads a problem response: status, Retry-After and body. */
async function problemOf(
  res: Response,
): Promise<{ status: number; retryAfter: string | null; body: Record<string, unknown>; text: string }> {
  const text = await res.text();
  assert.equal(res.headers.get('content-type'), 'application/problem+json');
  return { status: res.status, retryAfter: res.headers.get('retry-after'), body: JSON.parse(text), text };
}

/** An app that proxies `/api/*` to `origin` + the rest of the path and the query. */
function proxyApp(origin: string, policy: Policy, extra: Partial<Parameters<typeof proxy>[1]> = {}): Hono {
  const app = new Hono();
  app.all(
    '/api/*',
    proxy(
      (c) => {
        const url = new URL(c.req.url);
        return `${origin}${url.pathname.slice('/api'.length)}${url.search}`;
      },
      { policy, ...extra },
    ),
  );
  return app;
}

/** An app whose POST `/api/<path>` first reads the body through Hono with `reads[path]` (as a validator does), then proxies to `origin/<path>`. */
function readFirstApp(
  origin: string,
  policy: Policy,
  reads: Record<string, (c: Context) => Promise<void>>,
): Hono {
  const app = new Hono();
  for (const [path, read] of Object.entries(reads)) {
    app.post(
      `/api/${path}`,
      async (c, next) => {
        await read(c);
        await next();
      },
      proxy(`${origin}/${path}`, { policy }),
    );
  }
  return app;
}

test('proxy forwards the method, path, query, headers and body, and returns the upstream response', async () => {
  await withServer(
    always({
      status: 201,
      headers: { 'x-upstream': 'yes', 'content-type': 'application/json' },
      body: '{"id":7}',
    }),
    async (up) => {
      const policy = definePolicy({ name: 'things' });
      await withApp(proxyApp(up.origin, policy), async (server) => {
        const res = await fetch(`${server.origin}/api/things?limit=2`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-trace': 'abc' },
          body: '{"name":"kettle"}',
        });
        assert.equal(res.status, 201);
        assert.equal(res.headers.get('x-upstream'), 'yes');
        assert.deepEqual(await res.json(), { id: 7 });
      });
      const seen = up.requests[0];
      assert.equal(up.requests.length, 1);
      assert.equal(seen?.method, 'POST');
      assert.equal(seen?.url, '/things?limit=2');
      assert.equal(seen?.text, '{"name":"kettle"}');
      assert.equal(seen?.headers['x-trace'], 'abc');
      assert.equal(seen?.headers['content-type'], 'application/json');
      assert.equal(
        seen?.headers.host,
        up.origin.slice('http://'.length),
        'Host names the upstream, not the proxy',
      );
    },
  );
});

test('a body an earlier middleware already read through Hono (a validator: c.req.json(), c.req.formData()) is still forwarded whole', async () => {
  await withServer(always({ status: 201, body: 'created' }), async (up) => {
    const policy = definePolicy({ name: 'things' });
    // What hono/validator does: reads the body through Hono, which keeps it.
    const app = readFirstApp(up.origin, policy, {
      json: async (c) => assert.deepEqual(await c.req.json(), { name: 'kettle' }),
      form: async (c) => assert.equal((await c.req.formData()).get('name'), 'kettle'),
    });
    const form = new FormData();
    form.set('name', 'kettle');
    await withApp(app, async (server) => {
      for (const [path, body] of [
        ['json', '{"name":"kettle"}'],
        ['form', form],
      ] as const) {
        const res = await fetch(`${server.origin}/api/${path}`, {
          method: 'POST',
          ...(typeof body === 'string' ? { headers: { 'content-type': 'application/json' } } : {}),
          body,
        });
        assert.equal(res.status, 201, path);
        assert.equal(await res.text(), 'created');
      }
    });
    assert.equal(up.requests.length, 2);
    assert.equal(up.requests[0]?.text, '{"name":"kettle"}');
    assert.match(String(up.requests[0]?.headers['content-type']), /^application\/json/);
    // Hono rebuilds a form it read with a new boundary: the forwarded type names that one.
    const sent = up.requests[1];
    const parsed = await new Response(sent?.text, {
      headers: { 'content-type': String(sent?.headers['content-type']) },
    }).formData();
    assert.equal(parsed.get('name'), 'kettle');
  });
});

test('a form an earlier middleware read with c.req.formData() goes on as the client sent it: urlencoded stays urlencoded, and a multipart form from another encoder (curl) arrives whole, file bytes included, under its new length', async () => {
  // Hono keeps only the parsed FormData of a form read so: its bytes are sent anew.
  await withServer(always({ status: 201, body: 'created' }), async (up) => {
    const policy = definePolicy({ name: 'things', timeout: { attemptMs: 2000 } });
    const app = new Hono();
    app.post(
      '/api/*',
      async (c, next) => {
        await c.req.formData();
        await next();
      },
      proxy((c) => `${up.origin}${new URL(c.req.url).pathname}`, { policy }),
    );
    // curl's boundary is longer than any runtime's own: a form rebuilt here is not the
    // length the client declared.
    const boundary = '------------------------d74496d66958873e';
    const file = [0, 0xff, 0x80, 0x0d, 0x0a, 0xc3];
    const multipart = new Uint8Array([
      ...new TextEncoder().encode(
        `--${boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nkettle\r\n` +
          `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.bin"\r\n` +
          'Content-Type: application/octet-stream\r\n\r\n',
      ),
      ...file,
      ...new TextEncoder().encode(`\r\n--${boundary}--\r\n`),
    ]);
    await withApp(app, async (server) => {
      for (const [path, type, body] of [
        ['/token', 'application/x-www-form-urlencoded', 'grant_type=client_credentials&scope=read+write'],
        ['/upload', `multipart/form-data; boundary=${boundary}`, multipart],
      ] as const) {
        const res = await fetch(`${server.origin}/api${path}`, {
          method: 'POST',
          headers: { 'content-type': type },
          body,
        });
        assert.equal(res.status, 201, path);
        assert.equal(await res.text(), 'created');
      }
    });
    assert.equal(up.requests.length, 2);
    // Deno's fetch sends a stream body chunked; Node's sends the length it is given.
    for (const { headers, body, url } of up.requests) {
      assert.ok([undefined, String(body.byteLength)].includes(headers['content-length'] as string), url);
    }
    // An OAuth token endpoint (RFC 6749 §4.4.2) takes nothing but urlencoded.
    const [token, upload] = up.requests;
    assert.equal(token?.headers['content-type'], 'application/x-www-form-urlencoded');
    assert.equal(token?.text, 'grant_type=client_credentials&scope=read+write');
    const parsed = await new Response(new Uint8Array(upload?.body ?? []), {
      headers: { 'content-type': String(upload?.headers['content-type']) },
    }).formData();
    assert.equal(parsed.get('name'), 'kettle');
    const part = parsed.get('file') as File;
    assert.equal(part.name, 'a.bin');
    assert.deepEqual([...new Uint8Array(await part.arrayBuffer())], file);
  });
});

test('a body an earlier middleware read as JSON or text goes on byte for byte, with its Content-Type as the client sent it', async () => {
  // A signed request (AWS SigV4, HTTP Message Signatures) may cover both.
  await withServer(always({ status: 201, body: 'created' }), async (up) => {
    const policy = definePolicy({ name: 'things' });
    const app = readFirstApp(up.origin, policy, {
      json: async (c) => assert.deepEqual(await c.req.json(), { name: 'kettle' }),
      text: async (c) => {
        await c.req.text();
      },
    });
    const sentBodies = { json: '{ "name" : "kettle" }\n', text: 'caf\u00e9 \u2603\n' };
    const types = { json: 'application/json; charset=UTF-8', text: 'Text/Plain; Charset="utf-8"' };
    await withApp(app, async (server) => {
      for (const path of ['json', 'text'] as const) {
        const res = await fetch(`${server.origin}/api/${path}`, {
          method: 'POST',
          headers: { 'content-type': types[path] },
          body: sentBodies[path],
        });
        assert.equal(res.status, 201, path);
        await res.text();
      }
    });
    assert.equal(up.requests.length, 2);
    for (const [index, path] of (['json', 'text'] as const).entries()) {
      const sent = up.requests[index];
      assert.equal(sent?.text, sentBodies[path], path);
      assert.equal(sent?.headers['content-type'], types[path], path);
      assert.ok(
        [undefined, String(sent?.body.byteLength)].includes(sent?.headers['content-length'] as string),
        "[undefined, String(sent?.body.byteLength)].includes(sent?.headers['content-length'] as string)",
      );
    }
  });
});

test('proxy headers option sets and removes forwarded headers', async () => {
  await withServer(always({ status: 200 }), async (up) => {
    const policy = definePolicy({ name: 'things' });
    const app = proxyApp(up.origin, policy, {
      headers: (c) => ({
        cookie: undefined,
        'x-debug': null as unknown as undefined,
        authorization: 'Bearer upstream-token',
        'x-client': c.req.header('x-id'),
      }),
    });
    await withApp(app, async (server) => {
      const res = await fetch(`${server.origin}/api/x`, {
        headers: {
          cookie: 'session=user-secret',
          authorization: 'Bearer user-token',
          'x-id': '42',
          'x-debug': 'on',
        },
      });
      await res.text();
      assert.equal(res.status, 200);
    });
    const seen = up.requests[0]?.headers;
    assert.equal(seen?.cookie, undefined);
    assert.equal(seen?.['x-debug'], undefined, 'null removes a header, as in hono/proxy');
    assert.equal(seen?.authorization, 'Bearer upstream-token');
    assert.equal(seen?.['x-client'], '42');
  });
});

test('proxy headers option may be an async function: the changes it resolves to are applied', async () => {
  await withServer(always({ status: 200 }), async (up) => {
    const policy = definePolicy({ name: 'things' });
    const app = proxyApp(up.origin, policy, {
      headers: async () => ({ authorization: 'Bearer upstream-token', cookie: undefined }),
    });
    await withApp(app, async (server) => {
      const res = await fetch(`${server.origin}/api/x`, {
        headers: { authorization: 'Bearer user-token', cookie: 'session=user-secret' },
      });
      await res.text();
      assert.equal(res.status, 200);
    });
    const seen = up.requests[0]?.headers;
    assert.equal(
      seen?.authorization,
      'Bearer upstream-token',
      'not the client’s token, forwarded as it came',
    );
    assert.equal(seen?.cookie, undefined);
  });
});

test('a proxy headers function returning what is not a plain record fetch can send fails the request with a TypeError naming its kind, forwarding nothing', async () => {
  await withServer(always({ status: 200 }), async (up) => {
    const policy = definePolicy({ name: 'things' });
    const returns: Record<string, unknown> = {
      headers: new Headers({ authorization: 'Bearer upstream-secret' }),
      map: new Map([['authorization', 'Bearer upstream-secret']]),
      null: null,
      string: 'authorization: Bearer upstream-secret',
      unsendable: { authorization: 'Bearer upstream-secret\nx-injected: 1' },
    };
    const kinds = { headers: 'Headers', map: 'Map', null: 'null', string: 'string', unsendable: 'Object' };
    const app = new Hono();
    const errors: string[] = [];
    app.onError((error, c) => {
      errors.push(`${error.name}: ${error.message}`);
      return c.text('app error', 500);
    });
    for (const name of Object.keys(returns)) {
      app.all(`/${name}`, proxy(up.origin, { policy, headers: () => returns[name] as ProxyHeaders }));
    }
    await withApp(app, async (server) => {
      for (const name of Object.keys(returns)) {
        const res = await fetch(`${server.origin}/${name}`, {
          headers: { authorization: 'Bearer user-token' },
        });
        assert.equal(await res.text(), 'app error', name);
      }
    });
    assert.equal(up.requests.length, 0, 'nothing forwarded with the client’s own headers');
    assert.deepEqual(
      errors,
      Object.values(kinds).map(
        (kind) =>
          `TypeError: proxy({ headers }): the function returned ${kind}, not a plain record of header changes fetch can send`,
      ),
    );
    assert.doesNotMatch(errors.join(), /secret/, 'no header value in the message');
  });
});

test('an upstream 503 with Retry-After is retried after that wait when the policy allows', async () => {
  await withServer(
    sequence({ status: 503, headers: { 'retry-after': '1' }, body: 'busy' }, { status: 200, body: 'fresh' }),
    async (up) => {
      const policy = definePolicy({ name: 'models', retry: { attempts: 2 } });
      await withApp(proxyApp(up.origin, policy), async (server) => {
        const started = Date.now();
        const res = await fetch(`${server.origin}/api/v1/models`);
        assert.equal(res.status, 200);
        assert.equal(await res.text(), 'fresh');
        const waited = Date.now() - started;
        assert.ok(waited >= 950 && waited < 1500, `waited ${waited} ms`);
      });
      assert.equal(up.requests.length, 2);
    },
  );
});

test('an upstream 503 the policy does not retry reaches the client as sent, Retry-After included', async () => {
  await withServer(always({ status: 503, headers: { 'retry-after': '7' }, body: 'busy' }), async (up) => {
    const policy = definePolicy({ name: 'models', retry: { attempts: 1 } });
    await withApp(proxyApp(up.origin, policy), async (server) => {
      const res = await fetch(`${server.origin}/api/v1/models`);
      assert.equal(res.status, 503);
      assert.equal(res.headers.get('retry-after'), '7');
      assert.equal(await res.text(), 'busy');
    });
  });
});

test('a request that came with no body (a DELETE, an OPTIONS, a PUT of Content-Length: 0) goes on with none, so an idempotent one is retried after a 503', async () => {
  // @hono/node-server gives every request but GET and HEAD a body stream, empty or not:
  // forwarded, it made the request unreplayable (and Deno's fetch sent it chunked).
  const requests: [string, Record<string, string>][] = [
    ['DELETE', {}],
    ['OPTIONS', {}],
    ['PUT', { 'content-length': '0' }],
  ];
  for (const [method, headers] of requests) {
    await withServer(
      sequence({ status: 503, headers: { 'retry-after': '0' }, body: 'busy' }, { status: 200, body: 'done' }),
      async (up) => {
        const policy = definePolicy({ name: 'files', retry: { attempts: 2 } });
        await withApp(proxyApp(up.origin, policy), async (server) => {
          const res = await rawRequest(`${server.origin}/api/files/7`, method, headers);
          assert.equal(res.status, 200, `${method}: ${res.text}`);
          assert.equal(res.text, 'done');
        });
        assert.equal(up.requests.length, 2, method);
        for (const seen of up.requests) {
          assert.equal(seen.headers['transfer-encoding'], undefined, `${method} was sent chunked`);
          assert.equal(seen.body.length, 0);
        }
      },
    );
  }
});

/** Sends `method` with `headers` and no body through node:http (fetch adds its own framing headers). */
function rawRequest(
  url: string,
  method: string,
  headers: Record<string, string>,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

test('a request with Expect: 100-continue is forwarded without it (undici refuses the header)', async () => {
  await withServer(always({ status: 200, body: 'stored' }), async (up) => {
    const policy = definePolicy({ name: 'files', retry: { attempts: 1 } });
    // The server in front already answered the client's 100-continue; curl sends it with large bodies.
    const res = await proxyApp(up.origin, policy).request('/api/files', {
      method: 'POST',
      headers: { expect: '100-continue', 'content-type': 'text/plain' },
      body: 'x'.repeat(2048),
    });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), 'stored');
    assert.equal(up.requests[0]?.headers.expect, undefined);
    assert.equal(up.requests[0]?.text.length, 2048);
  });
});

test('an upstream redirect reaches the client as sent: the proxy does not follow it', async () => {
  await withServer(
    sequence(
      { status: 302, headers: { location: '/login' }, body: 'moved' },
      { status: 200, body: 'login page' },
    ),
    async (up) => {
      const policy = definePolicy({ name: 'app' });
      await withApp(proxyApp(up.origin, policy), async (server) => {
        const res = await fetch(`${server.origin}/api/account`, { redirect: 'manual' });
        await res.text();
        assert.equal(res.status, 302);
        assert.equal(res.headers.get('location'), '/login');
      });
      assert.deepEqual(
        up.requests.map((r) => r.url),
        ['/account'],
      );
    },
  );
});

test("an upstream's absolute Location (and Content-Location) on its own origin reaches the client relative, so it stays on the proxy; other origins' and relative ones pass as sent", async () => {
  let upstreamOrigin = '';
  const up = new Hono();
  up.get('/moved', (c) => c.redirect(`${upstreamOrigin}/orders/7?view=full#top`, 301));
  up.get('/network-path', (c) => c.redirect(`${upstreamOrigin.replace('http:', '')}/orders/8`));
  up.get('/two-slashes', (c) => c.redirect(`${upstreamOrigin}//evil.example/x`));
  up.get('/elsewhere', (c) => c.redirect('https://login.example/sso?next=%2F'));
  up.get('/relative', (c) => c.redirect('../login'));
  up.post('/orders', (c) =>
    c.json({ id: 9 }, 201, {
      location: `${upstreamOrigin}/orders/9`,
      'content-location': `${upstreamOrigin}/orders/9`,
    }),
  );
  up.get('/orders/7', (c) => c.text('order 7'));
  await withApp(up, async (upstream) => {
    upstreamOrigin = upstream.origin;
    await withApp(proxyApp(upstream.origin, definePolicy({ name: 'app' })), async (server) => {
      const locationOf = async (path: string, init?: RequestInit): Promise<string | null> => {
        const res = await fetch(`${server.origin}/api${path}`, { redirect: 'manual', ...init });
        await res.body?.cancel();
        return res.headers.get('location');
      };
      assert.equal(await locationOf('/moved'), '/orders/7?view=full#top');
      assert.equal(await locationOf('/network-path'), '/orders/8');
      // As sent, "//evil.example/x" would name another host; the client must stay on the proxy.
      const twoSlashes = await locationOf('/two-slashes');
      assert.equal(new URL(twoSlashes ?? '', server.origin).origin, server.origin);
      assert.equal(new URL(twoSlashes ?? '', server.origin).pathname, '//evil.example/x');
      assert.equal(await locationOf('/elsewhere'), 'https://login.example/sso?next=%2F');
      assert.equal(await locationOf('/relative'), '../login');
      const created = await fetch(`${server.origin}/api/orders`, { method: 'POST' });
      assert.equal(created.status, 201);
      assert.equal(created.headers.get('location'), '/orders/9');
      assert.equal(created.headers.get('content-location'), '/orders/9');
      assert.deepEqual(await created.json(), { id: 9 });
      // Followed, the redirect stays on the proxy (its path as the upstream wrote it: not mapped to /api).
      const followed = await fetch(`${server.origin}/api/moved`);
      await followed.body?.cancel();
      // (Bun's response.url keeps the fragment, Node's and Deno's do not.)
      const at = new URL(followed.url);
      assert.equal(`${at.origin}${at.pathname}${at.search}`, `${server.origin}/orders/7?view=full`);
    });
  });
});

test('an upstream Retry-After that reaches the client is delay-seconds, at most maxRetryAfterMs', async () => {
  const inAnHour = new Date(Date.now() + 3_600_000).toUTCString();
  await withServer(
    sequence(
      { status: 503, headers: { 'retry-after': '86400' } },
      { status: 429, headers: { 'retry-after': inAnHour, 'retry-after-ms': '3600000' } },
      { status: 503, headers: { 'retry-after': '3' } },
    ),
    async (up) => {
      // A POST's stream body is not resent, and without a breaker nothing paces the key:
      // each upstream answer comes back.
      const policy = definePolicy({ name: 'models', retry: { maxRetryAfterMs: 5000 }, breaker: false });
      await withApp(proxyApp(up.origin, policy), async (server) => {
        const post = { method: 'POST', body: '{}' };
        const day = await fetch(`${server.origin}/api/v1/chat`, post);
        await day.text();
        assert.equal(day.status, 503);
        assert.equal(day.headers.get('retry-after'), '5');
        const hour = await fetch(`${server.origin}/api/v1/chat`, post);
        await hour.text();
        assert.equal(hour.status, 429);
        assert.equal(hour.headers.get('retry-after'), '5');
        assert.equal(hour.headers.get('retry-after-ms'), '5000');
        const short = await fetch(`${server.origin}/api/v1/chat`, post);
        await short.text();
        assert.equal(short.headers.get('retry-after'), '3', 'a wait under the cap is kept');
      });
      assert.equal(up.requests.length, 3);
    },
  );
});

test('an upstream wait longer than the policy allows becomes a 503 problem capped at maxRetryAfterMs', async () => {
  await withServer(always({ status: 503, headers: { 'retry-after': '3600' } }), async (up) => {
    const policy = definePolicy({ name: 'models', retry: { attempts: 3, maxRetryAfterMs: 5000 } });
    await withApp(proxyApp(up.origin, policy), async (server) => {
      const problem = await problemOf(await fetch(`${server.origin}/api/v1/models?api_key=SECRET`));
      assert.equal(problem.status, 503);
      assert.equal(problem.retryAfter, '5');
      assert.equal(problem.body.code, 'RETRY_AFTER_TOO_LONG');
      assert.equal(problem.body.upstream, 'models');
      assert.ok(!problem.text.includes('SECRET'), "!problem.text.includes('SECRET')");
    });
    assert.equal(up.requests.length, 1, 'no pointless wait, no resend');
  });
});

test('an unreachable upstream becomes a 502 problem naming it', async () => {
  const port = await closedPort();
  const policy = definePolicy({ name: 'models', retry: { attempts: 1 } });
  await withApp(proxyApp(`http://127.0.0.1:${port}`, policy), async (server) => {
    const problem = await problemOf(await fetch(`${server.origin}/api/v1/models`));
    assert.equal(problem.status, 502);
    assert.equal(problem.body.upstream, 'models');
    assert.equal(problem.body.code, 'ECONNREFUSED');
  });
});

test("with no name for the upstream, its problems (502, then the open circuit's 503) show no internal address: the key is then the target's origin", async () => {
  const port = await closedPort();
  const policy = definePolicy({ retry: { attempts: 1 }, breaker: { consecutiveFailures: 1 } });
  await withApp(proxyApp(`http://127.0.0.1:${port}`, policy), async (server) => {
    for (const [status, code] of [
      [502, 'ECONNREFUSED'],
      [503, 'CIRCUIT_OPEN'],
    ] as const) {
      const problem = await problemOf(await fetch(`${server.origin}/api/v1/models`));
      assert.equal(problem.status, status);
      assert.equal(problem.body.code, code);
      assert.ok(!problem.text.includes(String(port)), `leaked the upstream address: ${problem.text}`);
      assert.equal(problem.body.upstream, undefined);
    }
  });
});

test('an open circuit answers 503 with Retry-After without calling the upstream', async () => {
  await withServer(always({ status: 500 }), async (up) => {
    const policy = definePolicy({
      name: 'models',
      retry: { attempts: 1 },
      breaker: { consecutiveFailures: 1, open: { initialMs: 3000, factor: 2, maxMs: 8000, jitter: 'none' } },
    });
    await withApp(proxyApp(up.origin, policy), async (server) => {
      const first = await fetch(`${server.origin}/api/x`);
      await first.text();
      assert.equal(first.status, 500, 'a failure response passes through');
      const problem = await problemOf(await fetch(`${server.origin}/api/x`));
      assert.equal(problem.status, 503);
      assert.equal(problem.retryAfter, '3');
      assert.equal(problem.body.code, 'CIRCUIT_OPEN');
    });
    assert.equal(up.requests.length, 1);
  });
});

test('errors that are not breakwater errors go on to app.onError', async () => {
  const app = new Hono();
  app.get(
    '/',
    proxy(
      () => {
        throw new Error('no route for this tenant');
      },
      { policy: definePolicy({}) },
    ),
  );
  app.onError((err, c) => c.text(`onError: ${err.message}`, 500));
  const res = await app.request('/');
  assert.equal(await res.text(), 'onError: no route for this tenant');
});

test("an upstream answer whose headers Node's fetch refuses (over undici's 16 KiB) is a 502 problem naming no URL, not onError's 500; Deno and Bun read it and pass it on", async () => {
  // Tracing headers and cookies: ~20 KB, under the 64 KB Deno and Bun read.
  const headers = { 'x-trace': 'a'.repeat(20_000) };
  await withServer(always({ status: 200, headers, body: 'ok' }), async (up) => {
    const app = proxyApp(up.origin, definePolicy({ name: 'models', retry: { attempts: 1 } }));
    app.onError((err, c) => c.text(`onError: ${err.message}`, 500));
    await withApp(app, async (server) => {
      for (const method of ['GET', 'POST']) {
        const res = await fetch(`${server.origin}/api/v1/models?token=s3cr3t-value`, {
          method,
          ...(method === 'POST' ? { body: '{}' } : {}),
        });
        if (typeof process.versions.bun === 'string' || 'Deno' in globalThis) {
          assert.equal(res.status, 200);
          assert.equal(res.headers.get('x-trace'), headers['x-trace']);
          assert.equal(await res.text(), 'ok');
          continue;
        }
        const problem = await problemOf(res);
        assert.equal(problem.status, 502);
        assert.ok(!problem.text.includes(String(up.port)), `leaked the upstream address: ${problem.text}`);
        assert.ok(!problem.text.includes('s3cr3t'), problem.text);
        // The upstream ran the POST: a resend would run it again.
        assert.equal(res.headers.get('x-should-retry'), method === 'POST' ? 'false' : null);
      }
    });
    assert.equal(up.requests.length, 2, 'sent once each, not retried');
  });
});

test("a deflate or x-gzip answer cut off in its first bytes (read before it is passed on) is a 502 problem naming no URL, not onError's 500", async () => {
  // The proxy reads 3 bytes ahead to tell whether fetch decoded these codings: an
  // upstream that dies there broke that read, which went to app.onError (on Bun with
  // the upstream's URL in its message).
  const upstream = createServer((req, res) => {
    const coding = new URL(String(req.url), 'http://upstream').pathname.slice(1);
    res.writeHead(200, { 'content-encoding': coding });
    res.write(new Uint8Array([coding === 'deflate' ? 0x78 : 0x1f]));
    setTimeout(() => res.socket?.destroy(), 20);
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = upstream.address() as AddressInfo;
    const app = proxyApp(`http://127.0.0.1:${port}`, definePolicy({ name: 'files', retry: { attempts: 1 } }));
    app.onError((err, c) => c.text(`onError: ${err.message}`, 500));
    await withApp(app, async (server) => {
      for (const coding of ['deflate', 'x-gzip']) {
        for (const method of ['GET', 'POST']) {
          const res = await fetch(`${server.origin}/api/${coding}?token=s3cr3t-value`, {
            method,
            ...(method === 'POST' ? { body: '{}' } : {}),
          });
          const problem = await problemOf(res);
          assert.equal(problem.status, 502, `${method} ${coding}: ${problem.text}`);
          assert.ok(!problem.text.includes(String(port)), `leaked the upstream address: ${problem.text}`);
          assert.ok(!problem.text.includes('s3cr3t'), problem.text);
          // The upstream ran the POST: a resend would run it again.
          assert.equal(res.headers.get('x-should-retry'), method === 'POST' ? 'false' : null, method);
        }
      }
    });
  } finally {
    upstream.closeAllConnections();
    await new Promise((resolve) => upstream.close(resolve));
  }
});

test('proxy() rejects bad options with a TypeError', () => {
  assert.throws(
    () => proxy('http://127.0.0.1:1', {} as never),
    (e: unknown) => e instanceof TypeError && /proxy\(\)\.policy/.test(e.message),
  );
  assert.throws(
    () => proxy(42 as never, { policy: definePolicy({}) }),
    (e: unknown) => e instanceof TypeError && /proxy\(target\)/.test(e.message),
  );
  // A header change fetch cannot send would fail every request with a 500, not the app's start.
  // A Headers or a Map would be ignored whole (no own entries): refused rather than dropped.
  for (const headers of [
    { 'bad name': 'x' },
    { 'x-tenant': 'a\r\nx-admin: 1' },
    new Headers({ 'x-tenant': 'a' }),
    new Map([['x-tenant', 'a']]),
    [['x-tenant', 'a']],
  ] as never[]) {
    assert.throws(
      () => proxy('http://127.0.0.1:1', { policy: definePolicy({}), headers }),
      (e: unknown) => e instanceof TypeError && /proxy\(\)\.headers/.test(e.message),
    );
  }
  // So would a relative target.
  assert.throws(
    () => proxy('/v1/models', { policy: definePolicy({}) }),
    (e: unknown) => e instanceof TypeError && /proxy\(target\)/.test(e.message),
  );
  assert.throws(
    () => proxy('http://127.0.0.1:1', { policy: definePolicy({}), customFetch: fetch } as never),
    (e: unknown) => e instanceof TypeError && /unknown option "customFetch"/.test(e.message),
  );
});

test('a client that goes away aborts the proxied upstream call', async () => {
  const { app: upstreamApp, received, closed } = hangingUpstream('/slow');
  await withApp(upstreamApp, async (up) => {
    const policy = definePolicy({ name: 'slow', retry: { attempts: 1 } });
    await withApp(proxyApp(up.origin, policy), async (server) => {
      const controller = new AbortController();
      const call = fetch(`${server.origin}/api/slow`, { signal: controller.signal });
      await received;
      const abortedAt = Date.now();
      controller.abort();
      await assert.rejects(call);
      await assertClosedSoon(closed, abortedAt);
    });
  });
});

test('a request that comes back to the same proxy gets a 508 problem instead of being forwarded again', async () => {
  let self = '';
  let forwarded = 0;
  const app = new Hono();
  app.use('/api/*', async (_c, next) => {
    forwarded++;
    await next();
  });
  // The target resolves to this very server: without loop detection every hop forwards again.
  app.all(
    '/api/*',
    proxy(() => `${self}/api/again`, { policy: definePolicy({ name: 'self', retry: { attempts: 1 } }) }),
  );
  await withApp(app, async (server) => {
    self = server.origin;
    const res = await fetch(`${server.origin}/api/start`);
    const problem = await problemOf(res);
    assert.equal(problem.status, 508);
    assert.equal(problem.body.title, 'Loop Detected');
  });
  assert.equal(forwarded, 2);
});

test('each proxy adds its own Via entry, so a chain of two proxies is not taken for a loop', async () => {
  await withServer(always({ status: 200, body: 'ok' }), async (up) => {
    await withApp(proxyApp(up.origin, definePolicy({ name: 'inner' })), async (inner) => {
      await withApp(proxyApp(`${inner.origin}/api`, definePolicy({ name: 'outer' })), async (outer) => {
        const res = await fetch(`${outer.origin}/api/x`, { headers: { via: '1.1 edge' } });
        assert.equal(res.status, 200);
        assert.equal(await res.text(), 'ok');
      });
    });
    const via = up.requests[0]?.headers.via;
    assert.match(String(via), /^1\.1 edge, 1\.1 breakwater-[0-9a-f]{8}, 1\.1 breakwater-[0-9a-f]{8}$/);
  });
});

/** Sends a chunked POST with `headers` over a real connection; resolves with the status, headers and body. */
function chunkedPost(
  origin: string,
  headers: Record<string, string>,
): Promise<{ status: number; headers: Record<string, unknown>; text: string }> {
  const { hostname, port } = new URL(origin);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: hostname, port, method: 'POST', path: '/api/x', headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.write('hello ');
    req.end('upstream');
  });
}

test('hop-by-hop headers reach neither side, even when headers copies the incoming ones', async () => {
  // RFC 9110 §7.6.1: Proxy-Connection, Keep-Alive, TE, Transfer-Encoding and Upgrade are
  // hop-by-hop even when Connection does not name them; Proxy-Authorization is this hop's credential.
  const hopByHop = {
    'proxy-connection': 'keep-alive',
    'proxy-authorization': 'Basic cHJveHk6cHJveHktc2VjcmV0',
    te: 'trailers',
    'keep-alive': '300',
    'transfer-encoding': 'chunked',
  };
  // hono/proxy's documented way to forward every incoming header, plus one of the app's own.
  const copies = (c: Context): ProxyHeaders => ({ ...c.req.header(), 'x-tenant': 't1' });
  for (const headers of [undefined, copies]) {
    await withServer(
      always({ status: 200, headers: { 'proxy-connection': 'keep-alive', 'x-ok': '1' }, body: 'stored' }),
      async (up) => {
        const policy = definePolicy({ name: 'files', retry: { attempts: 1 } });
        await withApp(proxyApp(up.origin, policy, { headers }), async (server) => {
          const res = await chunkedPost(server.origin, hopByHop);
          assert.equal(res.status, 200, res.text);
          assert.equal(res.text, 'stored');
          assert.equal(res.headers['x-ok'], '1');
          assert.equal(res.headers['proxy-connection'], undefined, 'Proxy-Connection came back');
        });
        const seen = up.requests[0];
        assert.equal(seen?.text, 'hello upstream');
        if (headers !== undefined) assert.equal(seen?.headers['x-tenant'], 't1');
        for (const name of ['proxy-connection', 'proxy-authorization', 'te', 'keep-alive']) {
          assert.equal(seen?.headers[name], undefined, `${name} reached the upstream`);
        }
      },
    );
  }
});

test("httpoxy's Proxy request header never reaches the upstream, nor Proxy-Authentication-Info (this hop's, as Proxy-Authenticate) the client", async () => {
  await withServer(
    always({
      status: 200,
      headers: { 'proxy-authentication-info': 'nextnonce="n1"', 'proxy-status': 'edge', 'x-ok': '1' },
      body: 'ok',
    }),
    async (up) => {
      const policy = definePolicy({ name: 'cgi', retry: { attempts: 1 } });
      await withApp(proxyApp(up.origin, policy), async (server) => {
        // CVE-2016-5385 and kin: a CGI upstream turns `Proxy` into HTTP_PROXY for its own calls.
        const res = await rawGet(`${server.origin}/api/x`, { proxy: 'http://attacker.test:8080' });
        assert.equal(res.status, 200);
        assert.equal(res.headers['x-ok'], '1');
        assert.equal(
          res.headers['proxy-authentication-info'],
          undefined,
          'Proxy-Authentication-Info came back',
        );
        // RFC 9209: Proxy-Status is for the client, each intermediary adding its entry.
        assert.equal(res.headers['proxy-status'], 'edge');
      });
      assert.equal(up.requests[0]?.headers.proxy, undefined, 'Proxy reached the upstream');
    },
  );
});

/** The body every encoding test sends, before its content coding. */
const PLAIN = 'the proxied body, the proxied body, the proxied body';
/** PLAIN as one zstd frame (the zstd 1.5 CLI's): Node 20's node:zlib has no zstd, so the bytes are written out. */
const PLAIN_ZSTD = Uint8Array.from(
  '28b52ffd0458c50000907468652070726f7869656420626f64792c200100ca9961e6d87006'.match(/../g) ?? [],
  (hex) => Number.parseInt(hex, 16),
);
/** A content coding no runtime knows: the body's bytes reversed. */
const xCustom = (bytes: Uint8Array): Uint8Array => Uint8Array.from(bytes).reverse();
const plainBytes = new TextEncoder().encode(PLAIN);

/** PLAIN in each Content-Encoding an upstream may send (a list is applied left to right), as plain Uint8Arrays. */
const ENCODED: Record<string, Uint8Array> = Object.fromEntries(
  Object.entries({
    gzip: gzipSync(PLAIN),
    br: brotliCompressSync(PLAIN),
    'x-gzip': gzipSync(PLAIN),
    GZIP: gzipSync(PLAIN),
    'X-Gzip': gzipSync(PLAIN),
    deflate: deflateSync(PLAIN),
    DEFLATE: deflateSync(PLAIN),
    ' Deflate ': deflateSync(PLAIN),
    zstd: PLAIN_ZSTD,
    'x-custom': xCustom(plainBytes),
    identity: plainBytes,
    'gzip, br': brotliCompressSync(gzipSync(PLAIN)),
    'gzip, identity': gzipSync(PLAIN),
    'gzip,': gzipSync(PLAIN),
    'x-custom, gzip': gzipSync(xCustom(plainBytes)),
    'deflate, gzip': gzipSync(deflateSync(PLAIN)),
  }).map(([coding, bytes]) => [coding, new Uint8Array(bytes)]),
);

/**
 * An upstream that ignores Accept-Encoding: it answers `/enc?coding=...` with PLAIN in
 * that Content-Encoding, its Content-Length the encoded size.
 */
function encodingUpstream(req: { url: string }): { headers: Record<string, string>; body: Uint8Array } {
  const coding = new URL(req.url, 'http://upstream').searchParams.get('coding') ?? '';
  const body = ENCODED[coding] ?? new Uint8Array();
  return {
    headers: {
      'content-type': 'text/plain',
      'content-encoding': coding,
      'content-length': String(body.length),
    },
    body,
  };
}

/**
 * GET through node:http, which decodes nothing: the status, headers and the bytes
 * exactly as the proxy sent them (a fetch() client would decode them first).
 */
function rawGet(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: IncomingHttpHeaders; body: Uint8Array }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { headers }, (res) => {
      const chunks: Uint8Array[] = [];
      res.on('data', (chunk: Uint8Array) => chunks.push(chunk));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: new Uint8Array(Buffer.concat(chunks)),
        }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

test('whatever Content-Encoding an upstream that ignores Accept-Encoding sends, the client never gets still-encoded bytes without their label', async () => {
  await withServer(encodingUpstream, async (up) => {
    const policy = definePolicy({ name: 'files', retry: { attempts: 1 } });
    await withApp(proxyApp(up.origin, policy), async (server) => {
      for (const [coding, encoded] of Object.entries(ENCODED)) {
        const res = await rawGet(`${server.origin}/api/enc?coding=${encodeURIComponent(coding)}`);
        if (res.status === 502) {
          assert.equal(res.headers['content-type'], 'application/problem+json', coding);
          continue;
        }
        assert.equal(res.status, 200, coding);
        const label = res.headers['content-encoding'];
        if (label === undefined) {
          // Decoded by the runtime's fetch: the label is rightly gone.
          assert.equal(
            new TextDecoder().decode(res.body),
            PLAIN,
            `${coding}: unlabelled bytes are not the plain body`,
          );
        } else {
          // Not decoded: the upstream's bytes under the upstream's label.
          assert.equal(label, coding);
          assert.deepEqual(res.body, encoded, coding);
        }
      }
    });
  });
});

test('a coding no runtime decodes (x-custom, or any list holding one) passes through with its Content-Encoding and Content-Length', async () => {
  await withServer(encodingUpstream, async (up) => {
    const policy = definePolicy({ name: 'files', retry: { attempts: 1 } });
    await withApp(proxyApp(up.origin, policy), async (server) => {
      for (const coding of ['x-custom', 'x-custom, gzip']) {
        const res = await rawGet(`${server.origin}/api/enc?coding=${encodeURIComponent(coding)}`);
        assert.equal(res.status, 200, coding);
        assert.equal(res.headers['content-encoding'], coding);
        assert.equal(res.headers['content-length'], String(ENCODED[coding]?.length));
        assert.deepEqual(res.body, ENCODED[coding], coding);
      }
    });
  });
});

test('the upstream is asked for gzip or br only, what every runtime decodes, whatever the client or headers ask, and those answers reach the client decoded', async () => {
  await withServer(encodingUpstream, async (up) => {
    const policy = definePolicy({ name: 'files', retry: { attempts: 1 } });
    // identity alone is the one value headers may forward (see the tests below); any other is overridden.
    for (const headers of [undefined, { 'accept-encoding': 'deflate, zstd' }]) {
      await withApp(proxyApp(up.origin, policy, { headers }), async (server) => {
        for (const coding of ['gzip', 'br']) {
          const res = await rawGet(`${server.origin}/api/enc?coding=${coding}`, {
            'accept-encoding': 'zstd',
          });
          assert.equal(res.status, 200, coding);
          assert.equal(res.headers['content-encoding'], undefined, coding);
          assert.equal(new TextDecoder().decode(res.body), PLAIN, coding);
        }
      });
    }
    assert.equal(up.requests.length, 4);
    for (const seen of up.requests) assert.equal(seen.headers['accept-encoding'], 'gzip, br');
  });
});

test('an upstream that ignores Accept-Encoding and answers deflate (the zlib format) or gzip under another spelling (x-gzip, any case, a list around identity) reaches the client decoded and unlabelled on every runtime, as gzip does', async () => {
  // Node's and Bun's fetch decode deflate, Deno's and workerd's do not: the proxy used to
  // answer 502 on every runtime. x-gzip: Node and Bun decode it, Deno and workerd do not;
  // GZIP: workerd decodes gzip in lower case only; a list around identity: only Bun decodes
  // it. Each used to be a 502 on every runtime.
  await withServer(
    (req) => ({ ...encodingUpstream(req), status: req.url.includes('missing') ? 404 : 200 }),
    async (up) => {
      const policy = definePolicy({ name: 'files', retry: { attempts: 1 } });
      await withApp(proxyApp(up.origin, policy), async (server) => {
        for (const coding of [
          'deflate',
          'DEFLATE',
          ' Deflate ',
          'x-gzip',
          'X-Gzip',
          'GZIP',
          'gzip, identity',
          'gzip,',
        ]) {
          for (const path of ['enc', 'missing']) {
            const url = `${server.origin}/api/${path}?coding=${encodeURIComponent(coding)}`;
            const res = await rawGet(url);
            assert.equal(res.status, path === 'enc' ? 200 : 404, `${coding} ${path}`);
            assert.equal(res.headers['content-encoding'], undefined, coding);
            // The encoded length would cut the body short.
            assert.ok([undefined, String(plainBytes.length)].includes(res.headers['content-length']), coding);
            assert.equal(res.headers['content-type'], 'text/plain', coding);
            assert.equal(new TextDecoder().decode(res.body), PLAIN, `${coding} ${path}`);
            assert.equal(await (await fetch(url)).text(), PLAIN, `${coding} ${path} by fetch`);
          }
        }
      });
    },
  );
});

test('a deflate or x-gzip answer streamed in chunks (the first one byte long) reaches the client whole and decoded, its other headers handled as for any answer', async () => {
  const text = 'a line of the streamed body\n'.repeat(20_000);
  const encoded: Record<string, Uint8Array> = { deflate: deflateSync(text), 'x-gzip': gzipSync(text) };
  const upstream = createServer((req, res) => {
    const coding = String(req.url).slice(1);
    const bytes = encoded[coding] ?? new Uint8Array();
    res.writeHead(200, { 'content-encoding': coding, 'retry-after': '86400', 'x-upstream': 'yes' });
    res.write(bytes.subarray(0, 1));
    setImmediate(() => {
      for (let at = 1; at < bytes.length; at += 1000) res.write(bytes.subarray(at, at + 1000));
      res.end();
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = upstream.address() as AddressInfo;
    const policy = definePolicy({ name: 'files', retry: { attempts: 1, maxRetryAfterMs: 5_000 } });
    await withApp(proxyApp(`http://127.0.0.1:${port}`, policy), async (server) => {
      for (const coding of Object.keys(encoded)) {
        const res = await rawGet(`${server.origin}/api/${coding}`);
        assert.equal(res.status, 200, coding);
        assert.equal(res.headers['content-encoding'], undefined, coding);
        assert.equal(res.headers['x-upstream'], 'yes', coding);
        // Capped as any answer's wait is.
        assert.equal(res.headers['retry-after'], '5', coding);
        assert.equal(res.body.length, text.length, coding);
        assert.equal(new TextDecoder().decode(res.body), text, coding);
      }
    });
  } finally {
    upstream.closeAllConnections();
    await new Promise((resolve) => upstream.close(resolve));
  }
});

test('a coding some runtime decodes and another does not, whose bytes cannot tell (zstd, a list of codings) was not asked for: a 502 problem on every runtime', async () => {
  await withServer(encodingUpstream, async (up) => {
    const policy = definePolicy({ name: 'files', retry: { attempts: 1 } });
    await withApp(proxyApp(up.origin, policy), async (server) => {
      for (const coding of ['zstd', 'gzip, br', 'deflate, gzip']) {
        const res = await fetch(`${server.origin}/api/enc?coding=${encodeURIComponent(coding)}`);
        const problem = await problemOf(res);
        assert.equal(problem.status, 502, coding);
        assert.match(String(problem.body.detail), /content coding/, coding);
      }
    });
  });
});

test('an answer with no body (to HEAD, a 204, a 304) gets no 502 whatever its Content-Encoding: it has no bytes to be left encoded', async () => {
  // The same upstream that ignores Accept-Encoding, answering HEAD, DELETE (204) and a
  // conditional GET (304) with the label of the body it would send.
  const bodiless = (req: { method: string; url: string; headers: Record<string, unknown> }) => {
    const { headers, body } = encodingUpstream(req);
    if (req.method === 'DELETE')
      return { status: 204, headers: { 'content-encoding': headers['content-encoding'] ?? '' } };
    if (req.headers['if-none-match'] === '"v1"') {
      return {
        status: 304,
        headers: { 'content-encoding': headers['content-encoding'] ?? '', etag: '"v1"' },
      };
    }
    return { headers: { ...headers, etag: '"v1"' }, body };
  };
  await withServer(bodiless, async (up) => {
    const policy = definePolicy({ name: 'files', retry: { attempts: 1 } });
    await withApp(proxyApp(up.origin, policy), async (server) => {
      for (const coding of ['deflate', 'x-gzip', 'zstd', 'GZIP', 'gzip, br']) {
        const url = `${server.origin}/api/enc?coding=${encodeURIComponent(coding)}`;
        const head = await fetch(url, { method: 'HEAD' });
        assert.equal(head.status, 200, `HEAD ${coding}`);
        const deleted = await fetch(url, { method: 'DELETE' });
        assert.equal(deleted.status, 204, `DELETE ${coding}`);
        const notModified = await fetch(url, { headers: { 'if-none-match': '"v1"' } });
        assert.equal(notModified.status, 304, `304 ${coding}`);
        assert.equal(notModified.headers.get('etag'), '"v1"', coding);
        // As for gzip: a cache that updates its stored copy's headers from a 304 must
        // not relabel the decoded body it keeps (RFC 9111 §3.2).
        assert.equal(notModified.headers.get('content-encoding'), null, coding);
      }
    });
  });
});

test('the 502 for a content coding the proxy cannot pass on says x-should-retry: false: the upstream ran the request and answers a resend the same', async () => {
  await withServer(encodingUpstream, async (up) => {
    const policy = definePolicy({ name: 'files', retry: { attempts: 1 } });
    await withApp(proxyApp(up.origin, policy), async (server) => {
      const client = definePolicy({
        name: 'client',
        retry: { attempts: 3, backoff: { initialMs: 1, maxMs: 5 } },
      }).fetch();
      const res = await client(`${server.origin}/api/enc?coding=zstd`);
      assert.equal(res.status, 502);
      await res.body?.cancel();
      // One upstream request: each resend would run it again, for the same 502.
      assert.equal(up.requests.length, 1);
      assert.equal(res.headers.get('x-should-retry'), 'false');
    });
  });
});

test('the 502 for an upstream answer to retry (a 503, a 429) in such a coding does not forbid a resend: that answer did not run the request', async () => {
  await withServer(
    (req) => {
      const status = Number(new URL(req.url, 'http://upstream').searchParams.get('status'));
      return { ...encodingUpstream(req), status };
    },
    async (up) => {
      const policy = definePolicy({ name: 'files', retry: { attempts: 1 } });
      await withApp(proxyApp(up.origin, policy), async (server) => {
        for (const status of [503, 429]) {
          const res = await fetch(`${server.origin}/api/enc?coding=zstd&status=${status}`);
          assert.equal(res.status, 502, String(status));
          assert.equal(res.headers.get('x-should-retry'), null, String(status));
          await res.body?.cancel();
        }
        // The same coding on an answer a resend would only repeat still forbids one.
        for (const status of [200, 404]) {
          const res = await fetch(`${server.origin}/api/enc?coding=zstd&status=${status}`);
          assert.equal(res.headers.get('x-should-retry'), 'false', String(status));
          await res.body?.cancel();
        }
      });
    },
  );
});

/**
 * An upstream that honours Accept-Encoding at `/neg` (gzip when the request accepts it,
 * else the plain body) and ignores it elsewhere, as {@link encodingUpstream} does (a
 * `status` query sets the status).
 */
function negotiatingUpstream(req: {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
}): { status: number; headers: Record<string, string>; body?: Uint8Array } {
  const url = new URL(req.url, 'http://upstream');
  const status = Number(url.searchParams.get('status') ?? 200);
  if (url.pathname !== '/neg') return { ...encodingUpstream(req), status };
  const gzip = String(req.headers['accept-encoding']).includes('gzip');
  const body = gzip ? new Uint8Array(gzipSync(PLAIN)) : plainBytes;
  return {
    status,
    headers: {
      'content-type': 'text/plain',
      ...(gzip ? { 'content-encoding': 'gzip' } : {}),
      'content-length': String(body.length),
    },
    body,
  };
}

/** Every form of the opt-out: a record in any case and spacing, or a function. */
const IDENTITY_HEADERS: Parameters<typeof proxy>[1]['headers'][] = [
  { 'accept-encoding': 'identity' },
  { 'Accept-Encoding': ' IDENTITY ' },
  () => ({ 'accept-encoding': 'Identity' }),
];

test('headers setting Accept-Encoding: identity (any case, any spacing, record or function) is forwarded as identity, and the plain answer reaches the client as sent', async () => {
  await withServer(negotiatingUpstream, async (up) => {
    const policy = definePolicy({ name: 'files', retry: { attempts: 1 } });
    for (const headers of IDENTITY_HEADERS) {
      await withApp(proxyApp(up.origin, policy, { headers }), async (server) => {
        // The client's own Accept-Encoding counts for nothing, as before.
        const res = await rawGet(`${server.origin}/api/neg`, { 'accept-encoding': 'gzip' });
        assert.equal(res.status, 200);
        assert.equal(res.headers['content-encoding'], undefined);
        assert.equal(res.headers['content-length'], String(plainBytes.length));
        assert.equal(new TextDecoder().decode(res.body), PLAIN);
      });
    }
    assert.equal(up.requests.length, IDENTITY_HEADERS.length);
    for (const seen of up.requests) assert.equal(seen.headers['accept-encoding'], 'identity');
  });
});

test('an answer coded anyway to Accept-Encoding: identity (gzip, br, deflate) gets the 502 problem, x-should-retry as for any coding the proxy cannot pass on; x-custom and bodiless answers pass as usual', async () => {
  await withServer(negotiatingUpstream, async (up) => {
    const policy = definePolicy({ name: 'files', retry: { attempts: 1 } });
    for (const headers of IDENTITY_HEADERS) {
      await withApp(proxyApp(up.origin, policy, { headers }), async (server) => {
        // Deno's fetch leaves gzip and br encoded when the request said identity, Node's
        // and Bun's decode them: which the proxy got cannot be told.
        for (const coding of ['gzip', 'br', 'deflate', 'gzip, br']) {
          const url = `${server.origin}/api/enc?coding=${encodeURIComponent(coding)}`;
          const res = await rawGet(url);
          assert.equal(res.status, 502, coding);
          assert.equal(res.headers['content-type'], 'application/problem+json', coding);
          assert.match(new TextDecoder().decode(res.body), /content coding/, coding);
          assert.equal(res.headers['x-should-retry'], 'false', coding);
          // An upstream 503 did not run the request: no word against a resend.
          const busy = await rawGet(`${url}&status=503`);
          assert.equal(busy.status, 502, `503 ${coding}`);
          assert.equal(busy.headers['x-should-retry'], undefined, `503 ${coding}`);
          // No body, no bytes in question.
          const head = await fetch(url, { method: 'HEAD' });
          assert.equal(head.status, 200, `HEAD ${coding}`);
          assert.equal(head.headers.get('content-encoding'), null, `HEAD ${coding}`);
        }
        // No runtime decodes these: the upstream's bytes under the upstream's label.
        for (const coding of ['x-custom', 'identity']) {
          const res = await rawGet(`${server.origin}/api/enc?coding=${coding}`);
          assert.equal(res.status, 200, coding);
          assert.equal(res.headers['content-encoding'], coding);
          assert.equal(res.headers['content-length'], String(ENCODED[coding]?.length));
          assert.deepEqual(res.body, ENCODED[coding], coding);
        }
      });
    }
  });
});

test('any other Accept-Encoding headers sets (weighted or listed identity, deflate, br alone, empty) is still overridden to gzip, br, and the gzip answer reaches the client decoded', async () => {
  const values = ['identity;q=1', 'identity, gzip;q=0', 'gzip, identity', 'deflate', 'br', '', 'identityx'];
  await withServer(negotiatingUpstream, async (up) => {
    const policy = definePolicy({ name: 'files', retry: { attempts: 1 } });
    for (const value of values) {
      await withApp(
        proxyApp(up.origin, policy, { headers: { 'accept-encoding': value } }),
        async (server) => {
          const res = await rawGet(`${server.origin}/api/neg`);
          assert.equal(res.status, 200, value);
          assert.equal(res.headers['content-encoding'], undefined, value);
          assert.equal(new TextDecoder().decode(res.body), PLAIN, value);
        },
      );
    }
    assert.deepEqual(
      up.requests.map((seen) => seen.headers['accept-encoding']),
      values.map(() => 'gzip, br'),
    );
  });
});

test('a POST the upstream may have run (reset after it was sent, or timed out) gets its 502 / 504 with x-should-retry: false: the openai SDK does not run it twice; an idempotent or unsent one stays retryable', async () => {
  await withServer(always({ reset: 'after-read' }), async (up) => {
    const policy = definePolicy({ name: 'models', retry: { attempts: 1 } });
    await withApp(proxyApp(up.origin, policy), async (server) => {
      const client = new OpenAI({ apiKey: 'sk-test', baseURL: `${server.origin}/api/v1`, maxRetries: 1 });
      await assert.rejects(
        client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
        (error: unknown) => (error as { status?: number }).status === 502,
      );
      // The SDK resends a 502 on any method unless told not to: the upstream ran it once.
      assert.equal(up.requests.length, 1);
      // A keyed POST and a PUT may be resent: no word against it.
      for (const init of [
        { method: 'POST', headers: { 'idempotency-key': 'k1' } },
        { method: 'PUT' },
      ] as const) {
        const res = await fetch(`${server.origin}/api/v1/x`, { ...init, body: 'b' });
        assert.equal(res.status, 502, init.method);
        assert.equal(res.headers.get('x-should-retry'), null, init.method);
        await res.body?.cancel();
      }
    });
  });
  await withServer(always({ hang: true }), async (up) => {
    const policy = definePolicy({ name: 'models', retry: { attempts: 1 }, timeout: { attemptMs: 50 } });
    await withApp(proxyApp(up.origin, policy), async (server) => {
      const res = await fetch(`${server.origin}/api/slow`, { method: 'PATCH', body: 'b' });
      assert.equal(res.status, 504);
      assert.equal(res.headers.get('x-should-retry'), 'false');
      await res.body?.cancel();
    });
  });
  // Never sent: a resend is safe.
  const port = await closedPort();
  const policy = definePolicy({ name: 'models', retry: { attempts: 1 } });
  await withApp(proxyApp(`http://127.0.0.1:${port}`, policy), async (server) => {
    const res = await fetch(`${server.origin}/api/v1/x`, { method: 'POST', body: 'b' });
    assert.equal(res.status, 502);
    assert.equal(res.headers.get('x-should-retry'), 'true');
    await res.body?.cancel();
  });
});

test('an answer given before the upstream got the request (an open circuit, a refused connection) says x-should-retry: true: idempotency() in front frees the key, and the resend reaches the upstream instead of a replayed 503', async () => {
  await withServer(sequence({ status: 500 }, { status: 201, body: 'created' }), async (up) => {
    const openMs = 200;
    const policy = definePolicy({
      name: 'orders',
      retry: { attempts: 1 },
      breaker: {
        consecutiveFailures: 1,
        open: { initialMs: openMs, factor: 2, maxMs: openMs, jitter: 'none' },
      },
    });
    const app = new Hono();
    app.use('/api/*', idempotency());
    app.all(
      '/api/*',
      proxy((c) => `${up.origin}${new URL(c.req.url).pathname}`, { policy }),
    );
    await withApp(app, async (server) => {
      // An unkeyed GET's 500 opens the circuit.
      await (await fetch(`${server.origin}/api/warm`)).arrayBuffer();
      const order = { method: 'POST', body: '{"item":"tea"}', headers: { 'idempotency-key': '"k1"' } };
      const refused = await fetch(`${server.origin}/api/orders`, order);
      assert.equal(refused.status, 503);
      assert.equal(refused.headers.get('x-should-retry'), 'true');
      assert.equal((await refused.json()).code, 'CIRCUIT_OPEN');
      await new Promise((resolve) => setTimeout(resolve, openMs + 50));
      const resent = await fetch(`${server.origin}/api/orders`, order);
      assert.equal(resent.headers.get(REPLAYED_HEADER), null);
      assert.deepEqual([resent.status, await resent.text()], [201, 'created']);
    });
    assert.deepEqual(
      up.requests.map((r) => r.url),
      ['/api/warm', '/api/orders'],
    );
  });
});

test('an upstream wait too long to wait out, for a request the policy would have resent, says x-should-retry: true: idempotency() in front frees the key, and the resend after the wait reaches the upstream', async () => {
  await withServer(
    sequence({ status: 429, headers: { 'retry-after': '3600' } }, { status: 201, body: 'created' }),
    async (up) => {
      const policy = definePolicy({
        name: 'orders',
        retry: { maxRetryAfterMs: 1000, replayBodyBytes: 1024 },
        breaker: false,
      });
      const app = new Hono();
      app.use('/api/*', idempotency());
      app.all(
        '/api/*',
        proxy((c) => `${up.origin}${new URL(c.req.url).pathname}`, { policy }),
      );
      await withApp(app, async (server) => {
        const order = { method: 'POST', body: '{"item":"tea"}', headers: { 'idempotency-key': '"k2"' } };
        const refused = await fetch(`${server.origin}/api/orders`, order);
        assert.equal(refused.status, 503);
        assert.equal(refused.headers.get('x-should-retry'), 'true');
        assert.equal((await refused.json()).code, 'RETRY_AFTER_TOO_LONG');
        const resent = await fetch(`${server.origin}/api/orders`, order);
        assert.equal(resent.headers.get(REPLAYED_HEADER), null);
        assert.deepEqual([resent.status, await resent.text()], [201, 'created']);
      });
      assert.equal(up.requests.length, 2);
    },
  );
});

test("behind hono's cors(), an upstream's 429 reaches a page on another origin with its Retry-After and RateLimit named in Access-Control-Expose-Headers", async () => {
  await withServer(
    always({ status: 429, headers: { 'retry-after': '7', ratelimit: '"q";r=0;t=7' }, body: 'slow down' }),
    async (up) => {
      const app = new Hono();
      app.use('*', cors());
      app.all('*', proxy(up.origin, { policy: definePolicy({ name: 'things', retry: { attempts: 1 } }) }));
      await withApp(app, async ({ origin }) => {
        const response = await fetch(`${origin}/x`, { headers: { origin: 'http://127.0.0.1:1' } });
        await response.text();
        assert.equal(response.status, 429);
        assert.equal(response.headers.get('retry-after'), '7');
        const names = (response.headers.get('access-control-expose-headers') ?? '')
          .toLowerCase()
          .split(/\s*,\s*/);
        assert.ok(names.includes('retry-after') && names.includes('ratelimit'), `exposed: ${names}`);
      });
    },
  );
});

test("behind hono's cors(), the names an upstream exposes stay exposed beside breakwater's", async () => {
  await withServer(
    always({ status: 200, headers: { 'access-control-expose-headers': 'X-Up-Trace' }, body: 'ok' }),
    async (up) => {
      const app = new Hono();
      app.use('*', cors({ exposeHeaders: ['X-Front'] }));
      app.all('*', proxy(up.origin, { policy: definePolicy({ name: 'things' }) }));
      const plain = new Hono();
      plain.use('*', cors());
      plain.all('*', proxy(up.origin, { policy: definePolicy({ name: 'things' }) }));
      for (const [front, names] of [
        [app, ['x-front', 'x-up-trace', 'retry-after']],
        [plain, ['x-up-trace', 'retry-after']],
      ] as const) {
        await withApp(front, async ({ origin }) => {
          const response = await fetch(`${origin}/x`, { headers: { origin: 'http://127.0.0.1:1' } });
          await response.text();
          const exposed = (response.headers.get('access-control-expose-headers') ?? '')
            .toLowerCase()
            .split(/\s*,\s*/);
          for (const name of names) assert.ok(exposed.includes(name), `${name} in ${exposed}`);
        });
      }
    },
  );
});

/** The Access-Control-* names on a response, lower case, sorted. */
const corsNames = (res: Response): string[] =>
  [...res.headers.keys()].filter((name) => name.startsWith('access-control-')).sort();

test("an upstream's own Access-Control-* headers never reach the client: who may read the proxy's answers is its cors()'s to say; the names the upstream exposes stay for origins cors() allows", async () => {
  // An upstream that lets any origin read, with credentials (it echoes the Origin), and
  // answers preflights itself.
  await withServer(
    (req) => ({
      status: req.method === 'OPTIONS' ? 204 : 200,
      headers: {
        'access-control-allow-origin': String(req.headers.origin ?? '*'),
        'access-control-allow-credentials': 'true',
        'access-control-allow-methods': 'GET, POST, DELETE',
        'access-control-allow-headers': 'authorization',
        'access-control-max-age': '86400',
        'access-control-allow-private-network': 'true',
        'access-control-expose-headers': 'X-Up-Trace',
        'x-up-trace': 't1',
      },
      body: req.method === 'OPTIONS' ? '' : 'private data',
    }),
    async (up) => {
      const policy = definePolicy({ name: 'things', retry: { attempts: 1 } });
      const front = new Hono();
      front.use('*', cors({ origin: 'http://allowed.example' }));
      front.all('*', proxy(up.origin, { policy }));
      // No cors() at all: a same-origin app, or a server-to-server gateway.
      const bare = new Hono();
      bare.all('*', proxy(up.origin, { policy }));
      await withApp(front, async ({ origin }) => {
        // A page cors() refuses: before, the upstream's echo let it read, with cookies.
        const refused = await fetch(`${origin}/x`, { headers: { origin: 'http://evil.example' } });
        assert.equal(await refused.text(), 'private data');
        assert.deepEqual(corsNames(refused), []);
        assert.equal(refused.headers.get('x-up-trace'), 't1');
        // The page cors() allows: cors()'s answer, without the upstream's credentials.
        const allowed = await fetch(`${origin}/x`, { headers: { origin: 'http://allowed.example' } });
        await allowed.text();
        assert.equal(allowed.headers.get('access-control-allow-origin'), 'http://allowed.example');
        assert.deepEqual(corsNames(allowed), [
          'access-control-allow-origin',
          'access-control-expose-headers',
        ]);
        const exposed = String(allowed.headers.get('access-control-expose-headers'))
          .toLowerCase()
          .split(/\s*,\s*/);
        assert.ok(exposed.includes('x-up-trace') && exposed.includes('retry-after'), `${exposed}`);
      });
      await withApp(bare, async ({ origin }) => {
        const res = await fetch(`${origin}/x`, { headers: { origin: 'http://evil.example' } });
        assert.equal(await res.text(), 'private data');
        assert.deepEqual(corsNames(res), []);
        // A preflight reaches the upstream (no cors() answers it), and its answer no page.
        const preflight = await fetch(`${origin}/x`, {
          method: 'OPTIONS',
          headers: {
            origin: 'http://evil.example',
            'access-control-request-method': 'DELETE',
            'access-control-request-headers': 'authorization',
          },
        });
        await preflight.body?.cancel();
        assert.equal(preflight.status, 204);
        assert.deepEqual(corsNames(preflight), []);
      });
      assert.equal(up.requests.filter((seen) => seen.method === 'OPTIONS').length, 1);
    },
  );
});

test("behind cors({ credentials: true }), an allowed origin gets cors()'s Access-Control-Allow-Credentials, whatever the upstream says", async () => {
  await withServer(
    always({ status: 200, headers: { 'access-control-allow-origin': '*' }, body: 'ok' }),
    async (up) => {
      const front = new Hono();
      front.use('*', cors({ origin: 'http://allowed.example', credentials: true }));
      front.all('*', proxy(up.origin, { policy: definePolicy({ name: 'things', retry: { attempts: 1 } }) }));
      await withApp(front, async ({ origin }) => {
        const res = await fetch(`${origin}/x`, { headers: { origin: 'http://allowed.example' } });
        assert.equal(await res.text(), 'ok');
        assert.equal(res.headers.get('access-control-allow-origin'), 'http://allowed.example');
        assert.equal(res.headers.get('access-control-allow-credentials'), 'true');
      });
    },
  );
});

test('a POST the policy resent only on its own Idempotency-Key (idempotencyKeys) or resend: always, whose resend met a wait too long or an open circuit, does not say x-should-retry: true: its first attempt may have run upstream', async () => {
  // The policy's own key makes its resends of the POST safe (the same key each time), but
  // the client's resend is a new call with a new key: told x-should-retry: true, the
  // OpenAI SDK (or idempotency() in front) sent it again and the upstream ran it twice.
  const cases: [string, Parameters<typeof definePolicy>[0]][] = [
    ['keys, too long', { idempotencyKeys: true, retry: {}, breaker: false }],
    ['always, too long', { retry: { resend: 'always' }, breaker: false }],
    [
      'keys, open circuit',
      {
        idempotencyKeys: true,
        breaker: {
          consecutiveFailures: 1,
          open: { initialMs: 5000, factor: 2, maxMs: 5000, jitter: 'none' },
        },
      },
    ],
  ];
  for (const [name, config] of cases) {
    await withServer(
      sequence({ status: 503 }, { status: 429, headers: { 'retry-after': '3600' } }),
      async (up) => {
        const policy = definePolicy({
          ...config,
          name: 'orders',
          retry: {
            ...(config.retry as object),
            maxRetryAfterMs: 1000,
            replayBodyBytes: 1024,
            backoff: { initialMs: 5, maxMs: 5, jitter: 'none' },
          },
        });
        const app = proxyApp(up.origin, policy);
        await withApp(app, async (server) => {
          const res = await fetch(`${server.origin}/api/orders`, { method: 'POST', body: '{"item":"tea"}' });
          await res.arrayBuffer();
          assert.equal(res.status, 503, name);
          assert.notEqual(res.headers.get('x-should-retry'), 'true', name);
        });
        assert.ok(up.requests.length >= 1, `${name}: the upstream got the POST`);
      },
    );
  }
});

/** Policies that resend a POST the client could not (its own key, or resend: 'always'). */
const resendingPolicies: [string, Parameters<typeof definePolicy>[0]][] = [
  ['keys', { idempotencyKeys: true, breaker: false }],
  ['always', { retry: { resend: 'always' }, breaker: false }],
];

/**
 * POSTs an order through a proxy to `up` under `config` (waits past 1 s too long):
 * the 503 RETRY_AFTER_TOO_LONG it answers, and its `x-should-retry`.
 */
async function tooLongVerdict(
  up: TestServer,
  name: string,
  config: Parameters<typeof definePolicy>[0],
): Promise<string | null> {
  const policy = definePolicy({
    ...config,
    name: 'orders',
    retry: { ...(config.retry as object), maxRetryAfterMs: 1000, replayBodyBytes: 1024 },
  });
  return withApp(proxyApp(up.origin, policy), async (server) => {
    const res = await fetch(`${server.origin}/api/orders`, { method: 'POST', body: '{"item":"tea"}' });
    assert.equal(res.status, 503, name);
    assert.equal((await res.json()).code, 'RETRY_AFTER_TOO_LONG', name);
    return res.headers.get('x-should-retry');
  });
}

test("a POST whose only attempt met the upstream's own 503 asking for a wait too long, which the policy would have resent only on its own Idempotency-Key or resend: always, does not say x-should-retry: true: that 503 may have run it", async () => {
  // Retry ends it as RetryAfterTooLongError, as for a 429, but the upstream answered this
  // attempt itself: the client's resend (a new key of the policy's) would run it again.
  for (const [name, config] of resendingPolicies) {
    await withServer(always({ status: 503, headers: { 'retry-after': '3600' } }), async (up) => {
      assert.equal(await tooLongVerdict(up, name, config), 'false', name);
      assert.equal(up.requests.length, 1, `${name}: the upstream got the POST once`);
    });
  }
});

test('a POST the policy resent only on its own Idempotency-Key or resend: always, every attempt of which met a refused connection, says x-should-retry: true: none of them reached the upstream', async () => {
  // The attempt count alone said "resent, so an earlier attempt may have run it", and the
  // client was told not to resend a POST the upstream never got.
  const port = await closedPort();
  for (const [name, config] of resendingPolicies) {
    const policy = definePolicy({
      ...config,
      name: 'orders',
      retry: {
        ...(config.retry as object),
        attempts: 3,
        replayBodyBytes: 1024,
        backoff: { initialMs: 5, maxMs: 5, jitter: 'none' },
      },
    });
    const attempts: number[] = [];
    const app = proxyApp(`http://127.0.0.1:${port}`, policy, {
      onEvent: (event) => {
        if (event.type === 'attempt') attempts.push(event.attempt);
      },
    });
    await withApp(app, async (server) => {
      const res = await fetch(`${server.origin}/api/orders`, { method: 'POST', body: '{"item":"tea"}' });
      assert.equal(res.status, 502, name);
      await res.body?.cancel();
      assert.deepEqual(attempts, [1, 2, 3], `${name}: the policy resent it`);
      assert.equal(res.headers.get('x-should-retry'), 'true', name);
    });
  }
});

test('a POST the policy resent only on its own Idempotency-Key or resend: always after a 429, whose resend met a 429 asking for a wait too long, says x-should-retry: true: a 429 is refused before it runs (RFC 6585 §4)', async () => {
  for (const [name, config] of resendingPolicies) {
    await withServer(
      sequence(
        { status: 429, headers: { 'retry-after-ms': '5' } },
        { status: 429, headers: { 'retry-after': '3600' } },
      ),
      async (up) => {
        assert.equal(await tooLongVerdict(up, name, config), 'true', name);
        assert.equal(up.requests.length, 2, `${name}: the policy resent it once`);
      },
    );
  }
});

test("a proxied answer and a problem in its stead carry the headers set in front for this request (hono/request-id's X-Request-Id); the upstream's own headers win", async () => {
  const port = await closedPort();
  await withServer(always({ body: 'up', headers: { 'x-upstream': 'yes' } }), async (up) => {
    const app = new Hono();
    app.use(requestId());
    app.get('/up', proxy(`${up.origin}/x`, { policy: definePolicy({ name: 'up' }) }));
    app.get(
      '/down',
      proxy(`http://127.0.0.1:${port}/x`, { policy: definePolicy({ name: 'down', retry: { attempts: 1 } }) }),
    );
    app.get(
      '/own',
      async (c, next) => {
        c.header('x-upstream', 'front');
        await next();
      },
      proxy(`${up.origin}/x`, { policy: definePolicy({ name: 'own' }) }),
    );
    await withApp(app, async ({ origin }) => {
      const proxied = await fetch(`${origin}/up`, { headers: { 'x-request-id': 'proxied' } });
      assert.equal(await proxied.text(), 'up');
      assert.deepEqual(
        [proxied.headers.get('x-request-id'), proxied.headers.get('x-upstream')],
        ['proxied', 'yes'],
      );
      const down = await fetch(`${origin}/down`, { headers: { 'x-request-id': 'down' } });
      const problem = await problemOf(down);
      assert.deepEqual([problem.status, down.headers.get('x-request-id')], [502, 'down']);
      const own = await fetch(`${origin}/own`, { headers: { 'x-request-id': 'own' } });
      await own.text();
      assert.deepEqual([own.headers.get('x-request-id'), own.headers.get('x-upstream')], ['own', 'yes']);
    });
  });
});

test("a proxied answer carries the cookies set in front before the upstream's own, as a c.json() answer carries them before the handler's: of two cookies of one name, a browser keeps the last, the upstream's", async () => {
  await withServer(
    always({ body: 'up', headers: { 'set-cookie': 'sid=upstream; Path=/', 'content-type': 'text/plain' } }),
    async (up) => {
      const app = new Hono();
      app.use(async (c, next) => {
        c.header('set-cookie', 'sid=front; Path=/', { append: true });
        c.header('set-cookie', 'theme=dark; Path=/', { append: true });
        await next();
      });
      app.get(
        '/p',
        proxy(`${up.origin}/x`, { policy: definePolicy({ name: 'up', retry: { attempts: 1 } }) }),
      );
      app.get('/json', (c) => {
        c.header('set-cookie', 'sid=handler; Path=/', { append: true });
        return c.json({ ok: true });
      });
      await withApp(app, async ({ origin }) => {
        const json = await fetch(`${origin}/json`);
        await json.text();
        const proxied = await fetch(`${origin}/p`);
        assert.equal(await proxied.text(), 'up');
        assert.deepEqual(json.headers.getSetCookie(), [
          'sid=front; Path=/',
          'theme=dark; Path=/',
          'sid=handler; Path=/',
        ]);
        assert.deepEqual(proxied.headers.getSetCookie(), [
          'sid=front; Path=/',
          'theme=dark; Path=/',
          'sid=upstream; Path=/',
        ]);
      });
    },
  );
});
