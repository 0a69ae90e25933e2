import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inspect } from 'node:util';
import { Hono } from 'hono';
import ky, { HTTPError, isHTTPError } from 'ky';
import { kyOptions } from '../adapters/ky/index.ts';
import { CircuitOpenError, HttpStatusError } from '../src/errors.ts';
import { definePolicy } from '../src/policy.ts';
import { retryDelay } from '../src/timing.ts';
import { withApp } from './helpers/hono-server.ts';

const fast = { initialMs: 5, maxMs: 20, jitter: 'none' } as const;

/** What one request looked like at the server. */
interface Seen {
  at: number;
  method: string;
  url: string;
  key: string | null;
  body: string;
  headers: Headers;
}

/**
 * An app that answers the first `failures` requests with `failure()` and the rest
 * with `ok()`, recording every request it got.
 */
function faulty(
  failures: number,
  failure: () => Response,
  ok: (seen: Seen) => Response = () => Response.json({ ok: true }),
) {
  const seen: Seen[] = [];
  const app = new Hono();
  app.all('*', async (c) => {
    const request = c.req.raw;
    const entry: Seen = {
      at: performance.now(),
      method: request.method,
      url: request.url,
      key: request.headers.get('idempotency-key'),
      body: await request.text(),
      headers: request.headers,
    };
    seen.push(entry);
    return seen.length <= failures ? failure() : ok(entry);
  });
  return { app, seen };
}

/** A 503 with a JSON error body and the given extra headers. */
function overloaded(headers: Record<string, string> = {}): Response {
  return Response.json({ error: { message: 'model overloaded' } }, { status: 503, headers });
}

test('a GET answered 503 with Retry-After once reaches the server twice, the wait honoured', async () => {
  const { app, seen } = faulty(1, () => overloaded({ 'retry-after': '1' }));
  await withApp(app, async (server) => {
    const api = ky
      .create({ prefixUrl: server.origin })
      .extend(kyOptions(definePolicy({ retry: { backoff: fast } })));
    assert.deepEqual(await api.get('things').json(), { ok: true });
    assert.equal(seen.length, 2, 'ky added no retry of its own');
    const gap = (seen[1] as Seen).at - (seen[0] as Seen).at;
    assert.ok(gap >= 950, `the server's 1 s was waited out (waited ${Math.round(gap)} ms)`);
  });
});

test('a GET answered 503 every time reaches the server exactly the policy’s attempts, not ky’s on top', async () => {
  const { app, seen } = faulty(Infinity, () => overloaded());
  await withApp(app, async (server) => {
    const api = ky.create(kyOptions(definePolicy({ retry: { attempts: 3, backoff: fast, budget: false } })));
    const error = await api.get(`${server.origin}/things`).catch((e: unknown) => e);
    assert.ok(isHTTPError(error), 'isHTTPError(error)');
    assert.equal(error.response.status, 503);
    await error.response.body?.cancel();
    // ky alone retries twice per call: 3 policy attempts × 3 ky tries would be 9.
    assert.equal(seen.length, 3);
  });
});

test('a POST answered 503 is sent once and ky throws its HTTPError by default', async () => {
  const { app, seen } = faulty(1, () => overloaded({ 'retry-after': '7' }));
  await withApp(app, async (server) => {
    const api = ky.create(kyOptions(definePolicy({ retry: { backoff: fast } })));
    const error = await api
      .post(`${server.origin}/orders`, { json: { item: 'book' } })
      .catch((e: unknown) => e);
    assert.ok(error instanceof HTTPError, 'error instanceof HTTPError');
    assert.equal(error.response.status, 503);
    assert.equal(retryDelay(error.response.headers), 7000, 'the server’s wait, read with the core’s parser');
    assert.deepEqual(await error.response.json(), { error: { message: 'model overloaded' } });
    assert.equal(seen.length, 1, 'a POST that may have run is not resent');
  });
});

test('with errors: breakwater, a POST answered 503 throws HttpStatusError with the status, wait and message', async () => {
  const { app, seen } = faulty(1, () => overloaded({ 'retry-after': '7', 'set-cookie': 'session=s3cret' }));
  await withApp(app, async (server) => {
    const api = ky.create(
      kyOptions(definePolicy({ name: 'orders', retry: { backoff: fast } }), { errors: 'breakwater' }),
    );
    const error = await api
      .post(`${server.origin}/orders`, { json: { item: 'book' }, searchParams: { token: 'hunter2' } })
      .catch((e: unknown) => e);
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.status, 503);
    assert.equal(error.retryAfterMs, 7000);
    assert.equal(error.serverMessage, 'model overloaded');
    assert.equal(error.retryable, true);
    assert.equal(error.headers['retry-after'], '7');
    assert.equal(error.headers['set-cookie'], undefined);
    assert.equal(error.request?.key, 'orders');
    assert.equal(error.request?.method, 'POST');
    assert.doesNotMatch(error.message, /hunter2/);
    assert.match(error.message, /server asked to retry after 7000 ms/);
    assert.equal(seen.length, 1);
  });
});

test('with errors: breakwater, a per-request throwHttpErrors: false still returns the response', async () => {
  const { app } = faulty(1, () => new Response('gone', { status: 410 }));
  await withApp(app, async (server) => {
    const api = ky.create(kyOptions(definePolicy({ retry: { backoff: fast } }), { errors: 'breakwater' }));
    const response = await api.get(`${server.origin}/old`, { throwHttpErrors: false });
    assert.equal(response.status, 410);
    assert.equal(await response.text(), 'gone');
  });
});

test('a keyed POST answered 503 once is resent whole with the same Idempotency-Key, and runs once', async () => {
  let runs = 0;
  const done = new Map<string, unknown>();
  const { app, seen } = faulty(
    1,
    () => overloaded(),
    (entry) => {
      // A server that honours keys: a repeated key gets the first result, not a second run.
      if (!done.has(entry.key as string)) {
        runs++;
        done.set(entry.key as string, { id: runs, ...JSON.parse(entry.body) });
      }
      return Response.json(done.get(entry.key as string), { status: 201 });
    },
  );
  await withApp(app, async (server) => {
    const api = ky.create(kyOptions(definePolicy({ idempotencyKeys: true, retry: { backoff: fast } })));
    const order = await api.post(`${server.origin}/orders`, { json: { item: 'book' } }).json();
    assert.deepEqual(order, { id: 1, item: 'book' });
    assert.equal(seen.length, 2);
    const [first, second] = seen as [Seen, Seen];
    assert.match(String(first.key), /^"[0-9a-f-]{36}"$/);
    assert.equal(second.key, first.key);
    assert.equal(first.body, '{"item":"book"}');
    assert.equal(second.body, '{"item":"book"}');
    assert.equal(second.headers.get('content-type'), 'application/json');
    assert.equal(runs, 1);
  });
});

test('a PUT with a json body answered 503 once is resent with the same body', async () => {
  const { app, seen } = faulty(
    1,
    () => overloaded(),
    (entry) => new Response(entry.body),
  );
  await withApp(app, async (server) => {
    const api = ky.create(kyOptions(definePolicy({ retry: { backoff: fast } })));
    const echoed = await api.put(`${server.origin}/things/1`, { json: { name: 'café ☕' } }).json();
    assert.deepEqual(echoed, { name: 'café ☕' });
    assert.deepEqual(
      seen.map((s) => s.body),
      ['{"name":"café ☕"}', '{"name":"café ☕"}'],
    );
  });
});

test('a user abort through ky’s signal during the server’s wait rejects with AbortError and no retry', async () => {
  const { app, seen } = faulty(Infinity, () => overloaded({ 'retry-after': '30' }));
  await withApp(app, async (server) => {
    const api = ky.create(kyOptions(definePolicy({ retry: { backoff: fast } })));
    const controller = new AbortController();
    const started = performance.now();
    const pending = api.get(`${server.origin}/slow`, { signal: controller.signal }).catch((e: unknown) => e);
    while (seen.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    controller.abort();
    const error = await pending;
    assert.equal((error as Error).name, 'AbortError');
    assert.equal(error, controller.signal.reason, 'the runtime’s own abort reason, not wrapped');
    assert.ok(performance.now() - started < 5000, 'the 30 s wait ended at once');
    assert.equal(seen.length, 1);
  });
});

test('the user’s hooks given before kyOptions run, and their beforeError sees ky’s HTTPError first', async () => {
  const { app, seen } = faulty(1, () => overloaded());
  const ran: string[] = [];
  await withApp(app, async (server) => {
    const api = ky
      .create({
        prefixUrl: server.origin,
        hooks: {
          beforeRequest: [(request) => request.headers.set('x-user', 'yes')],
          afterResponse: [
            (_request, _options, response) => void ran.push(`afterResponse ${response.status}`),
          ],
          beforeError: [
            (error) => {
              ran.push(`beforeError ${error instanceof HTTPError ? 'HTTPError' : 'other'}`);
              return error;
            },
          ],
        },
      })
      .extend(kyOptions(definePolicy({ retry: false }), { errors: 'breakwater' }));
    const error = await api.post('orders', { json: {} }).catch((e: unknown) => e);
    assert.ok(error instanceof HttpStatusError, 'error instanceof HttpStatusError');
    assert.deepEqual(ran, ['afterResponse 503', 'beforeError HTTPError']);
    assert.equal(seen[0]?.headers.get('x-user'), 'yes');
  });
});

test('the user’s hooks given after kyOptions run, and the policy still sends the request', async () => {
  const { app, seen } = faulty(1, () => overloaded({ 'retry-after-ms': '10' }));
  const ran: string[] = [];
  await withApp(app, async (server) => {
    const api = ky.create(kyOptions(definePolicy({ retry: { backoff: fast } }))).extend({
      prefixUrl: server.origin,
      hooks: {
        beforeRequest: [(request) => request.headers.set('x-user', 'yes')],
        afterResponse: [(_request, _options, response) => void ran.push(`afterResponse ${response.status}`)],
      },
    });
    assert.deepEqual(await api.put('things/1', { json: { n: 1 } }).json(), { ok: true });
    assert.deepEqual(ran, ['afterResponse 200'], 'ky saw only the final response');
    assert.deepEqual(
      seen.map((s) => [s.headers.get('x-user'), s.body]),
      [
        ['yes', '{"n":1}'],
        ['yes', '{"n":1}'],
      ],
    );
  });
});

test('ky’s prefixUrl, searchParams, headers and json reach the server as ky built them', async () => {
  const { app, seen } = faulty(0, () => overloaded());
  await withApp(app, async (server) => {
    const api = ky.create({ prefixUrl: `${server.origin}/v1` }).extend(kyOptions(definePolicy()));
    await api
      .post('things', { searchParams: { q: 'a b', n: 2 }, headers: { 'x-trace': 't1' }, json: [1, 2] })
      .json();
    const [request] = seen as [Seen];
    assert.equal(request.url, `${server.origin}/v1/things?q=a+b&n=2`);
    assert.equal(request.headers.get('x-trace'), 't1');
    assert.equal(request.headers.get('accept'), 'application/json');
    assert.equal(request.body, '[1,2]');
  });
});

test('a streamed body longer than the attempt timeout arrives whole, with ky’s download progress', async () => {
  const chunks = 6;
  const app = new Hono();
  app.get('/stream', () => {
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        await new Promise((resolve) => setTimeout(resolve, 40));
        controller.enqueue(new TextEncoder().encode(`chunk ${sent}\n`));
        if (++sent === chunks) controller.close();
      },
    });
    return new Response(body, { headers: { 'content-type': 'text/plain' } });
  });
  await withApp(app, async (server) => {
    const api = ky.create(kyOptions(definePolicy({ timeout: { attemptMs: 100, totalMs: 150 } })));
    let transferred = 0;
    const started = performance.now();
    const text = await api
      .get(`${server.origin}/stream`, {
        onDownloadProgress: (progress) => {
          transferred = progress.transferredBytes;
        },
      })
      .text();
    assert.ok(performance.now() - started >= 200, 'the body took longer than both deadlines');
    assert.equal(text, Array.from({ length: chunks }, (_, i) => `chunk ${i}\n`).join(''));
    assert.equal(transferred, text.length);
  });
});

test('kyOptions turns ky’s own timeout off, so a server wait longer than it is waited out', async () => {
  const { app, seen } = faulty(1, () => overloaded({ 'retry-after-ms': '300' }));
  await withApp(app, async (server) => {
    // A ky timeout of 100 ms would fire during the policy's 300 ms wait.
    const api = ky.create({ timeout: 100 }).extend(kyOptions(definePolicy({ retry: { backoff: fast } })));
    assert.deepEqual(await api.get(`${server.origin}/things`).json(), { ok: true });
    assert.equal(seen.length, 2);
  });
});

test('kyOptions with bad option types throws a TypeError naming every path', () => {
  const policy = definePolicy();
  assert.throws(
    () => kyOptions(policy, { errors: 'yes', fetch: 1, onEvent: 'log', extra: true } as never),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, 'error instanceof TypeError');
      assert.match(error.message, /kyOptions\(\)\.errors: must be "ky" or "breakwater" \(got "yes"\)/);
      assert.match(error.message, /kyOptions\(\)\.fetch: must be a function \(got 1\)/);
      assert.match(error.message, /kyOptions\(\)\.onEvent: must be a function/);
      assert.match(error.message, /unknown option "extra"/);
      return true;
    },
  );
  assert.throws(() => kyOptions({} as never), /kyOptions\(policy\): must be a policy from definePolicy\(\)/);
});

test('a keyed FormData POST is resent with its multipart boundary intact when the policy buffers stream bodies', async () => {
  const fields: string[] = [];
  const app = new Hono();
  let calls = 0;
  app.post('/upload', async (c) => {
    // Parsing fails if the Content-Type's boundary is not the one in the body.
    const form = await c.req.formData();
    fields.push(`${c.req.header('idempotency-key')} ${form.get('name')}`);
    return ++calls === 1 ? overloaded() : c.json({ ok: true });
  });
  await withApp(app, async (server) => {
    const policy = definePolicy({ idempotencyKeys: true, retry: { backoff: fast, replayBodyBytes: 65_536 } });
    const api = ky.create(kyOptions(policy));
    const body = new FormData();
    body.set('name', 'report.txt');
    assert.deepEqual(await api.post(`${server.origin}/upload`, { body }).json(), { ok: true });
    assert.equal(fields.length, 2);
    assert.equal(fields[0], fields[1]);
    assert.match(String(fields[0]), /^"[0-9a-f-]{36}" report\.txt$/);
  });
});

test('a keyed FormData POST is sent once when the policy does not buffer stream bodies', async () => {
  const { app, seen } = faulty(1, () => overloaded());
  await withApp(app, async (server) => {
    const api = ky.create(kyOptions(definePolicy({ idempotencyKeys: true, retry: { backoff: fast } })));
    const body = new FormData();
    body.set('name', 'report.txt');
    const error = await api.post(`${server.origin}/upload`, { body }).catch((e: unknown) => e);
    assert.ok(isHTTPError(error), 'isHTTPError(error)');
    await error.response.body?.cancel();
    assert.equal(seen.length, 1);
  });
});

test('an open circuit fails fast through ky with CircuitOpenError, nothing sent', async () => {
  const { app, seen } = faulty(Infinity, () => new Response('down', { status: 500 }));
  await withApp(app, async (server) => {
    const policy = definePolicy({ retry: false, breaker: { consecutiveFailures: 1 } });
    const api = ky.create(kyOptions(policy));
    const first = await api.get(`${server.origin}/things`).catch((e: unknown) => e);
    assert.ok(isHTTPError(first), 'isHTTPError(first)');
    await first.response.body?.cancel();
    const second = await api.get(`${server.origin}/things`).catch((e: unknown) => e);
    assert.ok(second instanceof CircuitOpenError, String(second));
    assert.equal(seen.length, 1);
  });
});

test('a forced ky.retry() from afterResponse still works with retry: { limit, shouldRetry: () => false }', async () => {
  let calls = 0;
  const app = new Hono();
  app.get('/job', (c) => c.json({ status: ++calls === 1 ? 'pending' : 'done' }));
  await withApp(app, async (server) => {
    const api = ky.create(kyOptions(definePolicy())).extend({
      retry: { limit: 1, shouldRetry: () => false },
      hooks: {
        afterResponse: [
          async (_request, _options, response) => {
            const { status } = (await response.json()) as { status: string };
            if (status === 'pending') return ky.retry({ delay: 5 });
          },
        ],
      },
    });
    assert.deepEqual(await api.get(`${server.origin}/job`).json(), { status: 'done' });
    assert.equal(calls, 2);
  });
});

test('a forced ky.retry() with a request of its own sends that request’s body, not the first one’s', async () => {
  const { app, seen } = faulty(0, () => overloaded());
  await withApp(app, async (server) => {
    const api = ky.create(kyOptions(definePolicy({ retry: { backoff: fast } }))).extend({
      retry: { limit: 1, shouldRetry: () => false },
      hooks: {
        afterResponse: [
          (request, _options, _response, state) => {
            if (state.retryCount > 0) return;
            const body = JSON.stringify({ attempt: 2 });
            const headers = request.headers;
            return ky.retry({
              request: new Request(request.url, { method: 'PUT', headers, body }),
              delay: 1,
            });
          },
        ],
      },
    });
    await api.put(`${server.origin}/things/1`, { json: { attempt: 1 } }).json();
    assert.deepEqual(
      seen.map((s) => s.body),
      ['{"attempt":1}', '{"attempt":2}'],
    );
  });
});

test('a later extend({ retry: { methods } }) keeps ky’s own retries off', async () => {
  const { app, seen } = faulty(Infinity, () => overloaded());
  await withApp(app, async (server) => {
    const policy = definePolicy({ retry: { attempts: 2, backoff: fast, budget: false } });
    const api = ky.create(kyOptions(policy)).extend({ retry: { methods: ['get', 'post'] } });
    const error = await api.get(`${server.origin}/things`).catch((e: unknown) => e);
    assert.ok(isHTTPError(error), 'isHTTPError(error)');
    await error.response.body?.cancel();
    assert.equal(seen.length, 2, 'the policy’s 2 attempts, no ky retry on top');
  });
});

test('a beforeRequest hook of yours that returns a new Request sends that request’s body', async () => {
  const { app, seen } = faulty(0, () => overloaded());
  await withApp(app, async (server) => {
    const api = ky.create(kyOptions(definePolicy())).extend({
      hooks: {
        beforeRequest: [
          (request) => new Request(request.url, { method: 'PUT', headers: request.headers, body: 'signed' }),
        ],
      },
    });
    await api.put(`${server.origin}/things/1`, { json: { n: 1 } }).json();
    assert.deepEqual(
      seen.map((s) => s.body),
      ['signed'],
    );
  });
});

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
      assert.ok(error instanceof HttpStatusError, 'error instanceof HttpStatusError');
      assert.equal(error.status, 420);
      assert.equal(error.retryable, true, 'the policy retried it: it is retryable by its rules');
      return true;
    });
    assert.equal(requests, 3);
  });
});

test('bytes or URLSearchParams the caller changes after the call starts are sent, and resent, as ky built them', async () => {
  // ky copies the body into its Request when the call starts, as fetch does; a caller
  // that reuses its buffer (or params) for the next call must not change this one.
  for (const [name, body, change, expected] of [
    ['bytes', new TextEncoder().encode('first'), (b: Uint8Array) => b.fill(88), 'first'],
    [
      'ArrayBuffer',
      new TextEncoder().encode('first').buffer,
      (b: ArrayBuffer) => new Uint8Array(b).fill(88),
      'first',
    ],
    ['URLSearchParams', new URLSearchParams({ n: '1' }), (b: URLSearchParams) => b.set('n', '2'), 'n=1'],
  ] as const) {
    const { app, seen } = faulty(1, () => overloaded());
    await withApp(app, async (server) => {
      const api = ky.create(kyOptions(definePolicy({ retry: { backoff: fast } })));
      const pending = api.put(`${server.origin}/things/1`, { body }).json();
      (change as (b: typeof body) => void)(body);
      assert.deepEqual(await pending, { ok: true });
      assert.deepEqual(
        seen.map((s) => s.body),
        [expected, expected],
        name,
      );
      if (name === 'URLSearchParams') {
        assert.match(String(seen[1]?.headers.get('content-type')), /^application\/x-www-form-urlencoded/);
      }
    });
  }
});

test('with errors: breakwater, the error inspected deeply or as JSON shows no Authorization, query value or body ky sent', async () => {
  const { app } = faulty(Infinity, () =>
    Response.json({ error: { message: 'no such key' } }, { status: 401 }),
  );
  await withApp(app, async (server) => {
    const api = ky.create(kyOptions(definePolicy({ retry: { backoff: fast } }), { errors: 'breakwater' }));
    const error = await api
      .post(`${server.origin}/orders`, {
        headers: { authorization: 'Bearer sk-kyheader-0123456789abcdef' },
        searchParams: { api_key: 'query-0123456789abcdef' },
        json: { password: 'body-0123456789abcdef' },
      })
      .catch((e: unknown) => e);
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.status, 401);
    // A logger walking `cause`, or util.inspect's default depth and more, shows nothing sent.
    for (const shown of [inspect(error, { depth: 8 }), JSON.stringify(error)]) {
      assert.doesNotMatch(shown, /0123456789abcdef/);
    }
  });
});

test('with errors: breakwater, a token the policy’s auth stamped and the server quoted back stays hidden when an afterResponse hook returns a new response', async () => {
  const token = 'Zq9opaqueTokenValue7781';
  const app = new Hono();
  app.all('*', (c) => c.text(`invalid credentials ${c.req.header('authorization')?.slice(7)} here`, 401));
  await withApp(app, async (server) => {
    const api = ky
      .create(
        kyOptions(definePolicy({ retry: { backoff: fast } }), { errors: 'breakwater', auth: { token } }),
      )
      .extend({
        hooks: {
          // A hook that rebuilds the response (ky's documented way to change it): the
          // chain's snapshot of the server's answer is not on the new one.
          afterResponse: [
            async (_request, _options, response) =>
              new Response(await response.text(), { status: response.status, headers: response.headers }),
          ],
        },
      });
    for (const send of [
      () => api.get(`${server.origin}/me`),
      () => api.post(`${server.origin}/orders`, { json: {} }),
    ]) {
      const error = await send().catch((e: unknown) => e);
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.status, 401);
      assert.equal(error.body, 'invalid credentials [redacted] here');
      assert.doesNotMatch(inspect(error, { depth: 8 }), new RegExp(token));
    }
  });
});

test('ky’s beforeRequest and afterResponse hooks run once per ky call, not per policy attempt: every attempt carries what beforeRequest set', async () => {
  const { app, seen } = faulty(1, () => overloaded({ 'retry-after': '0' }));
  await withApp(app, async (server) => {
    const ran: string[] = [];
    const api = ky.create(kyOptions(definePolicy({ retry: { backoff: fast } }))).extend({
      hooks: {
        beforeRequest: [
          (request, _options, state) => {
            ran.push(`beforeRequest ${state?.retryCount}`);
            request.headers.set('x-signed-at', String(ran.length));
          },
        ],
        afterResponse: [
          (_request, _options, response) => {
            ran.push(`afterResponse ${response.status}`);
          },
        ],
      },
    });
    assert.deepEqual(await api.get(`${server.origin}/things`).json(), { ok: true });
    assert.equal(seen.length, 2, 'the policy resent the 503');
    assert.deepEqual(ran, ['beforeRequest 0', 'afterResponse 200']);
    assert.deepEqual(
      seen.map((s) => s.headers.get('x-signed-at')),
      ['1', '1'],
    );
  });
});
