import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import type { Call, Middleware, Next } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import { BreakwaterError } from '../src/errors.ts';
import { idempotencyKey, sfString } from '../src/idempotency-key.ts';
import { retry } from '../src/retry.ts';
import { always, sequence, withServer } from './helpers/server.ts';

/** A quoted UUID v4 (RFC 9562 §5.4: version 4, variant 10xx). */
const QUOTED_UUID_V4 = /^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$/;

/** A tiny retry: one resend after a 5xx. Placed outside idempotencyKey(). */
async function again(call: Call, next: Next): Promise<Response> {
  const r = await next(call);
  if (r.status >= 500) {
    await r.body?.cancel();
    call.attempt++;
    return next(call);
  }
  return r;
}

test('a POST gets one Idempotency-Key: a quoted UUID v4', async () => {
  await withServer(always({ status: 201 }), async (server) => {
    const fetch = createFetch({ use: [idempotencyKey()] });
    await (await fetch(`${server.origin}/charges`, { method: 'POST', body: '{}' })).text();
    assert.match(String(server.requests[0]?.headers['idempotency-key']), QUOTED_UUID_V4);
  });
});

test('a PATCH gets a key; GET, HEAD, PUT and DELETE do not', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [idempotencyKey()] });
    for (const method of ['PATCH', 'GET', 'HEAD', 'PUT', 'DELETE']) {
      await (await fetch(server.origin, { method })).arrayBuffer();
    }
    const keys = server.requests.map((r) => r.headers['idempotency-key']);
    assert.match(String(keys[0]), QUOTED_UUID_V4);
    assert.deepEqual(keys.slice(1), [undefined, undefined, undefined, undefined]);
  });
});

test('a key the caller set is kept, whatever its casing and headers form', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [idempotencyKey()] });
    const url = `${server.origin}/orders`;
    const forms: [string | Request, RequestInit | undefined][] = [
      [url, { method: 'POST', headers: { 'IDEMPOTENCY-KEY': '"mine-1"' } }],
      [url, { method: 'POST', headers: new Headers({ 'idempotency-key': '"mine-2"' }) }],
      [url, { method: 'POST', headers: [['Idempotency-Key', '"mine-3"']] }],
      [new Request(url, { method: 'POST', headers: { 'idempotency-Key': '"mine-4"' } }), undefined],
    ];
    for (const [input, init] of forms) await (await fetch(input, init)).text();
    assert.deepEqual(
      server.requests.map((r) => r.headers['idempotency-key']),
      ['"mine-1"', '"mine-2"', '"mine-3"', '"mine-4"'],
    );
  });
});

test('a blank key the caller set keys nothing: a POST retried after a 503 carries a generated key, not an empty one', async () => {
  // Every other request gets a 503, so each call is sent twice.
  await withServer(
    (_req, index) => ({ status: index % 2 === 0 ? 503 : 200 }),
    async (server) => {
      const fetch = createFetch({
        use: [retry({ backoff: { initialMs: 1, maxMs: 1, jitter: 'none' } }), idempotencyKey()],
      });
      const url = `${server.origin}/charges`;
      // Headers strips the blanks: the server would get `Idempotency-Key: ` (empty).
      for (const headers of [
        { 'Idempotency-Key': ' ' },
        [['idempotency-key', '\t ']],
        new Headers({ 'IDEMPOTENCY-KEY': '' }),
      ]) {
        const res = await fetch(url, {
          method: 'POST',
          body: '{"amount":100}',
          headers: headers as HeadersInit,
        });
        assert.equal(res.status, 200);
        await res.text();
      }
      const keys = server.requests.map((r) => r.headers['idempotency-key']);
      assert.equal(keys.length, 6);
      for (const key of keys) assert.match(String(key), QUOTED_UUID_V4);
      assert.deepEqual([keys[1], keys[3], keys[5]], [keys[0], keys[2], keys[4]]);
    },
  );
});

test('every attempt of a call carries the same key, even with the resend outside idempotencyKey()', async () => {
  await withServer(sequence({ status: 503 }, { status: 200, body: 'done' }), async (server) => {
    const fetch = createFetch({ use: [again, idempotencyKey()] });
    const res = await fetch(`${server.origin}/charges`, { method: 'POST', body: '{"amount":100}' });
    assert.equal(await res.text(), 'done');
    assert.equal(server.requests.length, 2);
    const [first, second] = server.requests.map((r) => r.headers['idempotency-key']);
    assert.match(String(first), QUOTED_UUID_V4);
    assert.equal(second, first);
  });
});

test('a call with a stamped key counts as idempotent', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const seen: boolean[] = [];
    const outer: Middleware = async function outer(call, next) {
      seen.push(call.isIdempotent);
      const res = await next(call);
      seen.push(call.isIdempotent);
      return res;
    };
    const fetch = createFetch({ use: [outer, idempotencyKey()] });
    await (await fetch(server.origin, { method: 'POST', body: 'x' })).text();
    assert.deepEqual(seen, [false, true], 'a POST is not idempotent until the key is stamped');
  });
});

test('two calls get two different keys', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [idempotencyKey()] });
    await (await fetch(server.origin, { method: 'POST' })).text();
    await (await fetch(server.origin, { method: 'POST' })).text();
    const [a, b] = server.requests.map((r) => r.headers['idempotency-key']);
    assert.match(String(a), QUOTED_UUID_V4);
    assert.match(String(b), QUOTED_UUID_V4);
    assert.notEqual(a, b);
  });
});

test('without crypto.randomUUID (a page on plain http, no secure context) a POST still gets a quoted UUID v4, the same on every attempt', async () => {
  // Browsers expose randomUUID only in secure contexts; getRandomValues everywhere.
  Object.defineProperty(crypto, 'randomUUID', { value: undefined, configurable: true });
  try {
    assert.equal(typeof crypto.randomUUID, 'undefined');
    await withServer(
      (_req, index) => ({ status: index % 2 === 0 ? 503 : 200 }),
      async (server) => {
        const fetch = createFetch({
          use: [
            retry({ backoff: { initialMs: 1, maxMs: 1, jitter: 'none' }, budget: false }),
            idempotencyKey(),
          ],
        });
        for (let i = 0; i < 20; i++) {
          const res = await fetch(server.origin, { method: 'POST', body: '{}' });
          assert.equal(res.status, 200);
          await res.text();
        }
        const keys = server.requests.map((r) => String(r.headers['idempotency-key']));
        assert.equal(keys.length, 40);
        for (const key of keys) assert.match(key, QUOTED_UUID_V4);
        for (let i = 0; i < 40; i += 2) assert.equal(keys[i + 1], keys[i], 'the resend carries the same key');
        assert.equal(new Set(keys).size, 20, 'each call has a key of its own');
      },
    );
  } finally {
    delete (crypto as { randomUUID?: unknown }).randomUUID;
  }
  assert.equal(typeof crypto.randomUUID, 'function');
});

test('the methods option chooses which methods get a key, in any case', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [idempotencyKey({ methods: ['put'] })] });
    await (await fetch(server.origin, { method: 'PUT' })).text();
    await (await fetch(server.origin, { method: 'POST' })).text();
    const [put, post] = server.requests.map((r) => r.headers['idempotency-key']);
    assert.match(String(put), QUOTED_UUID_V4);
    assert.equal(post, undefined);
  });
});

test('generate() supplies the content; quotes and backslashes are escaped', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [idempotencyKey({ generate: () => 'order-7 "a\\b"' })] });
    await (await fetch(server.origin, { method: 'POST' })).text();
    assert.equal(server.requests[0]?.headers['idempotency-key'], '"order-7 \\"a\\\\b\\""');
  });
});

test('a generated key outside printable ASCII fails the call before anything is sent', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    for (const generate of [() => 'ключ', () => 'a\nb', () => '', () => 7 as unknown as string]) {
      const fetch = createFetch({ use: [idempotencyKey({ generate })] });
      await assert.rejects(fetch(server.origin, { method: 'POST' }), (error: unknown) => {
        assert.ok(error instanceof BreakwaterError, 'error instanceof BreakwaterError');
        assert.ok(error.cause instanceof TypeError, 'error.cause instanceof TypeError');
        return true;
      });
    }
    assert.equal(server.requests.length, 0);
  });
});

test('a generate() that throws, or returns a promise, fails the call with a BreakwaterError before anything is sent', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const thrown = new Error('key service down');
    const cases: [() => string, (cause: unknown) => boolean][] = [
      [
        () => {
          throw thrown;
        },
        (cause) => cause === thrown,
      ],
      [() => Promise.resolve('k') as unknown as string, (cause) => cause instanceof TypeError],
    ];
    for (const [generate, isCause] of cases) {
      const fetch = createFetch({ use: [idempotencyKey({ generate })] });
      await assert.rejects(fetch(server.origin, { method: 'POST', body: '{}' }), (error: unknown) => {
        assert.ok(error instanceof BreakwaterError, 'error instanceof BreakwaterError');
        assert.ok(isCause(error.cause), 'the cause says what generate() did');
        return true;
      });
    }
    assert.equal(server.requests.length, 0);
  });
});

test('sfString quotes any printable ASCII so that unescaping gives it back', () => {
  fc.assert(
    fc.property(
      fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)) }),
      (s) => {
        const quoted = sfString(s);
        assert.ok(
          quoted.startsWith('"') && quoted.endsWith('"'),
          "quoted.startsWith('\"') && quoted.endsWith('\"')",
        );
        const inner = quoted.slice(1, -1);
        let unescaped = '';
        for (let i = 0; i < inner.length; i++) {
          const c = inner[i];
          if (c === '\\') {
            const escaped = inner[++i];
            assert.ok(escaped === '"' || escaped === '\\', 'only " and \\ are escaped');
            unescaped += escaped;
          } else {
            assert.notEqual(c, '"', 'no unescaped quote inside');
            unescaped += c;
          }
        }
        assert.equal(unescaped, s);
      },
    ),
  );
});

test('bad options are a TypeError listing every problem', () => {
  assert.throws(
    () => idempotencyKey({ methods: 'POST', generate: 'uuid', header: 'X-Key' } as never),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, 'error instanceof TypeError');
      assert.match(error.message, /idempotencyKey\(\)\.methods: /);
      assert.match(error.message, /idempotencyKey\(\)\.generate: must be a function/);
      assert.match(error.message, /unknown option "header"/);
      return true;
    },
  );
  assert.throws(
    () => idempotencyKey({ methods: ['PO ST'] }),
    /idempotencyKey\(\)\.methods\.0: must be a method name/,
  );
  assert.throws(() => idempotencyKey(5 as never), TypeError);
});

test('idempotencyKey is a named middleware', () => {
  assert.equal(idempotencyKey().name, 'idempotencyKey');
});
