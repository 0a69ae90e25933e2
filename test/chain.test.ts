import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inspect } from 'node:util';
import { RAN } from '../src/call.ts';
import {
  BreakwaterError,
  backoff,
  type Call,
  CircuitOpenError,
  circuitBreaker,
  createFetch,
  type FetchLike,
  HttpStatusError,
  idempotencyKey,
  type Middleware,
  NetworkError,
  RetryAfterTooLongError,
  retry,
  throwOnStatus,
  timeout,
} from '../src/index.ts';
import { always, closedPort, sequence, withServer } from './helpers/server.ts';

/** A middleware that does nothing but pass the call on: the chain itself is under test. */
const passThrough: Middleware = async function passThrough(call, next) {
  return next(call);
};

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);

function streamOf(...chunks: Uint8Array[]): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(chunk);
      controller.close();
    },
  });
}

test('an MCP-style call (URL, Headers, JSON body, long-lived signal, manual redirect) arrives as sent', async () => {
  await withServer(always({ status: 302, headers: { location: '/elsewhere' } }), async (server) => {
    const fetch = createFetch({ use: [passThrough] });
    const controller = new AbortController();
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
    const res = await fetch(new URL(`${server.origin}/mcp?session=abc`), {
      method: 'POST',
      headers: new Headers({
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      }),
      body,
      signal: controller.signal,
      redirect: 'manual',
    });
    assert.equal(res.status, 302, 'a manual redirect is returned, not followed');
    assert.equal(res.headers.get('location'), '/elsewhere');
    await res.body?.cancel();
    assert.equal(server.requests.length, 1);
    const got = server.requests[0];
    assert.equal(got?.method, 'POST');
    assert.equal(got?.url, '/mcp?session=abc');
    assert.equal(got?.headers['content-type'], 'application/json');
    assert.equal(got?.headers.accept, 'application/json, text/event-stream');
    assert.equal(got?.text, body);
    assert.equal(controller.signal.aborted, false);
  });
});

test('an OpenAI-style call (string URL, Headers, duplex half stream body, signal) arrives byte for byte', async () => {
  await withServer(always({ status: 200, body: 'ok' }), async (server) => {
    const fetch = createFetch({ use: [passThrough] });
    const head = bytes('{"model":"m",');
    const euro = new Uint8Array([0xe2, 0x82, 0xac]);
    const tail = bytes('"x":1}');
    const res = await fetch(`${server.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: new Headers({ 'content-type': 'application/json', authorization: 'Bearer sk-test' }),
      body: streamOf(head, euro, tail),
      duplex: 'half',
      signal: new AbortController().signal,
    } as RequestInit);
    assert.equal(await res.text(), 'ok');
    const got = server.requests[0];
    assert.deepEqual(got?.body, new Uint8Array([...head, ...euro, ...tail]));
    assert.equal(got?.headers.authorization, 'Bearer sk-test');
  });
});

test('an AI SDK / A2A JSON-RPC call (string URL, plain-object headers) arrives as sent', async () => {
  await withServer(always({ status: 200, body: '{}' }), async (server) => {
    const fetch = createFetch({ use: [passThrough] });
    const body = '{"jsonrpc":"2.0","id":"7","method":"message/send","params":{}}';
    const res = await fetch(`${server.origin}/a2a`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Trace': 't-1' },
      body,
    });
    await res.text();
    const got = server.requests[0];
    assert.equal(got?.method, 'POST');
    assert.equal(got?.headers['content-type'], 'application/json');
    assert.equal(got?.headers['x-trace'], 't-1');
    assert.equal(got?.text, body);
  });
});

test('an A2A agent-card fetch (URL and headers only, no method, no signal) is a GET', async () => {
  await withServer(always({ status: 200, body: '{"name":"agent"}' }), async (server) => {
    const fetch = createFetch({ use: [passThrough] });
    const res = await fetch(new URL(`${server.origin}/.well-known/agent-card.json`), {
      headers: { Accept: 'application/json' },
    });
    assert.deepEqual(await res.json(), { name: 'agent' });
    assert.equal(server.requests[0]?.method, 'GET');
    assert.equal(server.requests[0]?.url, '/.well-known/agent-card.json');
    assert.equal(server.requests[0]?.headers.accept, 'application/json');
  });
});

test('a ky / hono-proxy call (a single Request with a stream body) arrives byte for byte', async () => {
  await withServer(always({ status: 201, body: 'made' }), async (server) => {
    const fetch = createFetch({ use: [passThrough] });
    const request = new Request(`${server.origin}/items`, {
      method: 'PUT',
      headers: { 'x-a': '1' },
      body: streamOf(bytes('part one,'), bytes('part two')),
      duplex: 'half',
    } as RequestInit);
    const res = await fetch(request);
    assert.equal(res.status, 201);
    assert.equal(await res.text(), 'made');
    const got = server.requests[0];
    assert.equal(got?.method, 'PUT');
    assert.equal(got?.headers['x-a'], '1');
    assert.equal(got?.text, 'part one,part two');
  });
});

test('the happy path hands the caller’s own init object and input (a URL as its string) to the real fetch', async () => {
  const seen: unknown[][] = [];
  const stub: FetchLike = async (...args) => {
    seen.push(args);
    return new Response('ok');
  };
  const fetch = createFetch({ fetch: stub, use: [passThrough, passThrough] });
  const url = new URL('http://127.0.0.1:9/x');
  const init = { method: 'POST', body: 'b', headers: new Headers({ a: '1' }) };
  await fetch(url, init);
  const request = new Request('http://127.0.0.1:9/y');
  await fetch(request);
  // A URL goes as its string, read when called, as fetch itself reads it.
  assert.equal(seen[0]?.[0], url.href);
  assert.equal(seen[0]?.[1], init);
  assert.equal(seen[1]?.[0], request);
  assert.equal(seen[1]?.length, 1, 'no init is invented when the caller passed none');
});

test('a header set by middleware is sent without mutating the caller’s headers', async () => {
  await withServer(always({}), async (server) => {
    const stamp: Middleware = async function stamp(call, next) {
      call.setHeader('x-stamped', 'yes');
      return next(call);
    };
    const fetch = createFetch({ use: [stamp] });
    const headers = new Headers({ 'x-own': '1' });
    const init = { headers };
    await (await fetch(server.origin, init)).text();
    const request = new Request(server.origin, { headers: { 'x-req': '2' } });
    await (await fetch(request)).text();
    assert.equal(server.requests[0]?.headers['x-stamped'], 'yes');
    assert.equal(server.requests[0]?.headers['x-own'], '1');
    assert.equal(server.requests[1]?.headers['x-stamped'], 'yes');
    assert.equal(server.requests[1]?.headers['x-req'], '2');
    assert.equal(headers.has('x-stamped'), false);
    assert.equal(init.headers, headers);
    assert.equal(request.headers.has('x-stamped'), false);
  });
});

test('the call exposes method, URL, headers, key (the origin), attempt and signal to middleware', async () => {
  let seen: Call | undefined;
  const look: Middleware = async function look(call, next) {
    seen = call;
    return next(call);
  };
  const signal = new AbortController().signal;
  const fetch = createFetch({ fetch: async () => new Response('ok'), use: [look] });
  await fetch('HTTP://Example.COM:80/path?q=1', { method: 'patch', headers: [['X-One', '1']], signal });
  assert.equal(seen?.method, 'PATCH');
  assert.equal(seen?.key, 'http://example.com');
  assert.equal(seen?.url.pathname, '/path');
  assert.equal(seen?.header('x-one'), '1');
  assert.equal(seen?.attempt, 1);
  assert.equal(seen?.signal, signal);
});

test('the key option names the server, as a string or from the URL', async () => {
  const keys: string[] = [];
  const look: Middleware = async function look(call, next) {
    keys.push(call.key);
    return next(call);
  };
  const stub: FetchLike = async () => new Response('ok');
  await createFetch({ fetch: stub, use: [look], key: 'github-mcp' })('http://127.0.0.1:9/');
  await createFetch({ fetch: stub, use: [look], key: (url) => `svc:${url.pathname.split('/')[1]}` })(
    'http://127.0.0.1:9/billing/x',
  );
  assert.deepEqual(keys, ['github-mcp', 'svc:billing']);
});

test('a key function that returns no usable key rejects the call with a TypeError saying so, before anything is sent', async () => {
  let sent = 0;
  const stub: FetchLike = async () => {
    sent++;
    return new Response('ok');
  };
  const look: Middleware = async function look(call, next) {
    void call.key;
    return next(call);
  };
  for (const [bad, said] of [
    [42, 'number'],
    [{}, 'object'],
    ['', '""'],
    [undefined, 'undefined'],
    [10n, 'bigint'],
  ] as const) {
    const fetch = createFetch({ fetch: stub, use: [look], key: () => bad as unknown as string });
    await assert.rejects(
      fetch('http://127.0.0.1:9/'),
      (error: unknown) =>
        error instanceof TypeError &&
        error.message === `key function must return a non-empty string, got ${said}`,
    );
  }
  assert.equal(sent, 0);
});

test('middleware run outermost first, and unwind innermost first', async () => {
  const order: string[] = [];
  const tag = (name: string): Middleware =>
    async function tagged(call, next) {
      order.push(`${name}>`);
      const res = await next(call);
      order.push(`<${name}`);
      return res;
    };
  const fetch = createFetch({ fetch: async () => new Response('ok'), use: [tag('outer'), tag('inner')] });
  await fetch('http://127.0.0.1:9/');
  assert.deepEqual(order, ['outer>', 'inner>', '<inner', '<outer']);
});

test('a non-function fetch option is a TypeError naming the option and the value', () => {
  assert.throws(
    () => createFetch({ fetch: 'not a function' as unknown as FetchLike, use: [] }),
    (error: unknown) =>
      error instanceof TypeError &&
      /createFetch\(\)\.fetch/.test(error.message) &&
      /"not a function"/.test(error.message),
  );
});

test('unknown option keys and wrong types are all listed in one TypeError', () => {
  assert.throws(
    () => createFetch({ use: [42], retries: 3, key: 7 } as unknown as Parameters<typeof createFetch>[0]),
    (error: unknown) =>
      error instanceof TypeError &&
      /createFetch\(\)\.use\.0/.test(error.message) &&
      /got 42/.test(error.message) &&
      /"retries"/.test(error.message) &&
      /createFetch\(\)\.key/.test(error.message),
  );
});

test('a middleware that throws is reported by name, with the original error as cause', async () => {
  const boom = new Error('kaboom');
  const broken: Middleware = async function brokenAuth() {
    throw boom;
  };
  const fetch = createFetch({ fetch: async () => new Response('ok'), use: [broken] });
  await assert.rejects(fetch('http://127.0.0.1:9/'), (error: unknown) => {
    assert.ok(error instanceof BreakwaterError, 'error instanceof BreakwaterError');
    assert.equal(error.code, 'MIDDLEWARE_FAILED');
    assert.match(error.message, /middleware "brokenAuth" threw: kaboom/);
    assert.equal(error.cause, boom);
    return true;
  });
});

test('a middleware that throws does not show a credential its error quotes: neither util.inspect nor JSON.stringify of the MIDDLEWARE_FAILED', async () => {
  // The cause was the raw error: its message and stack (util.inspect, pino's cause walk)
  // quoted a token the runtime refused as a header value (Node and Deno quote it) or a URL
  // with its api_key, though the MIDDLEWARE_FAILED's own message hid them.
  const secret = 'Tok3nFromCliOutput9';
  const headersFromCli: Middleware = async function cliAuth(call, next) {
    new Headers({ authorization: `Bearer ${secret}\nwarning: update available` });
    return next(call);
  };
  const quotesUrl: Middleware = async function lookup() {
    throw new Error(`no route for https://api.example.com/v1/models?api_key=${secret}`);
  };
  for (const broken of [headersFromCli, quotesUrl]) {
    const fetch = createFetch({ fetch: async () => new Response('ok'), use: [broken] });
    const error = await fetch('http://127.0.0.1:9/').then(
      () => assert.fail('the middleware threw'),
      (thrown: unknown) => thrown,
    );
    assert.ok(error instanceof BreakwaterError && error.code === 'MIDDLEWARE_FAILED', String(error));
    for (const shown of [inspect(error, { depth: 5 }), JSON.stringify(error)]) {
      assert.ok(!shown.includes(secret), `the credential shown: ${shown}`);
    }
  }
});

test('a middleware that throws an AggregateError (a hedge: Promise.any) does not show a credential its members quote', async () => {
  // redactCauses() walked the cause links only: the members of an AggregateError, which
  // util.inspect prints whole (Deno's fetch quotes the URL, Bun's keeps it in path), kept theirs.
  const secret = 'Tok3nInTheQuery9';
  const url = `http://127.0.0.1:${await closedPort()}/v1/models?api_key=${secret}`;
  const hedge: Middleware = async function hedge() {
    return Promise.any([
      globalThis.fetch(url),
      Promise.reject(new Error(`mirror failed: GET ${url}`, { cause: new Error(`at ${url}`) })),
    ]);
  };
  const fetch = createFetch({ fetch: async () => new Response('ok'), use: [hedge] });
  const error = await fetch('http://127.0.0.1:9/').then(
    () => assert.fail('the hedge failed'),
    (thrown: unknown) => thrown,
  );
  assert.ok(error instanceof BreakwaterError && error.code === 'MIDDLEWARE_FAILED', String(error));
  const shown = inspect(error, { depth: 8 });
  assert.ok(!shown.includes(secret), `the credential shown: ${shown}`);
});

test('a middleware that throws an error whose message cannot be read is still reported as MIDDLEWARE_FAILED', async () => {
  // The message was read bare: a getter that throws (or a value String() cannot convert)
  // replaced MIDDLEWARE_FAILED with its own error.
  const unreadable = new Error('hidden');
  Object.defineProperty(unreadable, 'message', {
    get() {
      throw new Error('getter broke');
    },
  });
  for (const thrown of [unreadable, Object.create(null)]) {
    const broken: Middleware = async function broken() {
      throw thrown;
    };
    const fetch = createFetch({ fetch: async () => new Response('ok'), use: [broken] });
    const error = await fetch('http://127.0.0.1:9/').then(
      () => assert.fail('the middleware threw'),
      (caught: unknown) => caught,
    );
    assert.ok(error instanceof BreakwaterError && error.code === 'MIDDLEWARE_FAILED', String(error));
    assert.equal(error.cause, thrown);
  }
});

test('a middleware that returns something other than a Response is reported by name', async () => {
  const wrong = async function forgetful(call: Call, next: (call: Call) => Promise<Response>) {
    await next(call);
  } as unknown as Middleware;
  const fetch = createFetch({ fetch: async () => new Response('ok'), use: [wrong] });
  await assert.rejects(
    fetch('http://127.0.0.1:9/'),
    /middleware "forgetful" returned undefined instead of a Response/,
  );
});

test('calling next twice for the same attempt is rejected and the request is sent once', async () => {
  await withServer(always({}), async (server) => {
    const twice: Middleware = async function greedy(call, next) {
      const first = await next(call);
      await first.body?.cancel();
      return next(call);
    };
    const fetch = createFetch({ use: [twice] });
    await assert.rejects(fetch(server.origin), (error: unknown) => {
      assert.ok(error instanceof BreakwaterError, 'error instanceof BreakwaterError');
      assert.equal(error.code, 'NEXT_CALLED_TWICE');
      assert.match(error.message, /"greedy" called next\(\) twice for attempt 1/);
      return true;
    });
    assert.equal(server.requests.length, 1);
  });
});

test('a resending middleware that bumps the attempt may call next again', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const again: Middleware = async function again(call, next) {
      const first = await next(call);
      await first.body?.cancel();
      call.attempt++;
      return next(call);
    };
    const fetch = createFetch({ use: [again, passThrough] });
    const res = await fetch(server.origin);
    await res.body?.cancel();
    assert.equal(server.requests.length, 2);
  });
});

test('concurrent calls through one chain do not trip the double-next guard', async () => {
  await withServer(always({ delayMs: 10 }), async (server) => {
    const fetch = createFetch({ use: [passThrough] });
    const responses = await Promise.all(Array.from({ length: 8 }, () => fetch(server.origin)));
    await Promise.all(responses.map((r) => r.text()));
    assert.equal(server.requests.length, 8);
  });
});

test('a refused connection comes out of the chain as a typed NetworkError', async () => {
  const port = await closedPort();
  const fetch = createFetch({ use: [passThrough] });
  await assert.rejects(fetch(`http://127.0.0.1:${port}/`), (error: unknown) => {
    assert.ok(error instanceof NetworkError, 'error instanceof NetworkError');
    assert.equal(error.code, 'ECONNREFUSED');
    assert.equal(error.sent, 'no');
    return true;
  });
});

test('a breakwater fetch under another passes the inner one’s typed errors up unchanged', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const inner = createFetch({ use: [throwOnStatus()] });
    // The default key is the origin: its redacted form differs from the raw text, which
    // once made the outer chain re-wrap the inner error as a plain TypeError.
    const outer = createFetch({ fetch: inner, use: [passThrough] });
    const error = await outer(`${server.origin}/v1/things`).catch((e: unknown) => e);
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.status, 503);
  });
});

test('a breakwater fetch under another passes up the inner one’s errors that carry a Date (CircuitOpenError, RetryAfterTooLongError) unchanged, retryAt and all', async () => {
  // A Date field was taken for an object that might quote a secret: the outer chain made a
  // plain TypeError of the error, its class and retryAt lost (an outer retry could not wait).
  await withServer(always({ status: 503, headers: { 'retry-after': '3600' } }), async (server) => {
    const open = createFetch({
      fetch: createFetch({ use: [circuitBreaker({ consecutiveFailures: 1 })] }),
      use: [],
    });
    await (await open(server.origin)).text();
    const refused = await open(server.origin).catch((e: unknown) => e);
    assert.ok(refused instanceof CircuitOpenError, String(refused));
    assert.ok(refused.retryAt instanceof Date, 'retryAt');
    const tooLong = await createFetch({ fetch: createFetch({ use: [retry()] }), use: [] })(
      server.origin,
    ).catch((e: unknown) => e);
    assert.ok(tooLong instanceof RetryAfterTooLongError, String(tooLong));
    assert.equal(tooLong.retryAfterMs, 3_600_000);
  });
});

test('the caller’s abort reason comes back unwrapped', async () => {
  await withServer(always({ hang: true }), async (server) => {
    const controller = new AbortController();
    const reason = new Error('user pressed stop');
    const fetch = createFetch({ use: [passThrough] });
    const pending = fetch(server.origin, { signal: controller.signal });
    setTimeout(() => controller.abort(reason), 20);
    await assert.rejects(pending, (error: unknown) => error === reason);
  });
});

test('once the caller has aborted, the chain’s end sends nothing, even through a fetch that ignores the signal', async () => {
  // A resending middleware that does not look at the signal (nor at why its first
  // attempt failed: the late 503 ends with the abort too), over a fetch that drops it:
  // the end of the chain refuses the resend, with the caller's own AbortError.
  await withServer(always({ status: 503, delayMs: 60 }), async (server) => {
    const controller = new AbortController();
    let resent: unknown = 'not yet';
    const again: Middleware = async function again(call, next) {
      const first = await next(call).catch(() => undefined);
      await first?.body?.cancel();
      call.attempt++;
      return next(call).catch((error: unknown) => {
        resent = error;
        throw error;
      });
    };
    const fetch = createFetch({
      fetch: (input, { signal: _ignored, ...init } = {}) => globalThis.fetch(input, init),
      use: [again],
    });
    const pending = fetch(server.origin, { signal: controller.signal });
    setTimeout(() => controller.abort(), 20);
    await assert.rejects(pending, (error: unknown) => {
      assert.equal(error, controller.signal.reason, 'the caller’s own reason, unwrapped');
      assert.equal((error as Error).name, 'AbortError');
      return true;
    });
    assert.equal(resent, controller.signal.reason);
    assert.equal(server.requests.length, 1, 'requests the server received');
  });
});

test('an onEvent listener sees one attempt event per attempt, and a throwing listener breaks nothing', async () => {
  const events: string[] = [];
  const fetch = createFetch({
    fetch: async () => new Response('ok'),
    use: [passThrough],
    onEvent: (event) => {
      events.push(`${event.type}:${event.type === 'attempt' ? event.url : ''}`);
      throw new Error('listener bug');
    },
  });
  const res = await fetch('http://user:pw@127.0.0.1:9/x?token=secret');
  assert.equal(await res.text(), 'ok');
  assert.deepEqual(events, ['attempt:http://127.0.0.1:9/x?token=[redacted]']);
});

test("option errors keep breakwater's wording when the app has loaded zod's English locale", async () => {
  // Full `zod` installs its English messages process-wide; apps (and the MCP SDK)
  // load it. Validation must read the same either way.
  const zod = await import('zod');
  zod.config(zod.locales.en());
  assert.throws(
    () => createFetch({ use: [], key: '' } as never),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, 'error instanceof TypeError');
      assert.match(error.message, /createFetch\(\)\.key: must be a non-empty string/);
      return true;
    },
  );
  assert.throws(
    () => backoff({ initialMs: -1, factor: 'x' } as never),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, 'error instanceof TypeError');
      assert.match(error.message, /backoff\(\)\.initialMs: must be at least 0 \(got -1\)/);
      assert.match(error.message, /backoff\(\)\.factor: must be a number \(got "x"\)/);
      return true;
    },
  );
});

test('an option given as a bigint is shown with its n suffix, not as the number it is not', () => {
  assert.throws(
    () => backoff({ initialMs: 5n } as never),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, 'error instanceof TypeError');
      assert.match(error.message, /backoff\(\)\.initialMs: must be a number \(got 5n\)/);
      return true;
    },
  );
});

test('an input that is neither a Request nor a URL is read as fetch reads it, as its string: a URL-like object is fetched, a Symbol rejects with a TypeError', async () => {
  await withServer(always({ status: 200, body: 'ok' }), async (server) => {
    const fetch = createFetch({ use: [passThrough] });
    // Another realm's URL, a URL polyfill's (whatwg-url), or any object whose string is
    // a URL: fetch converts its input to a string (WebIDL USVString), so these work there.
    const urlLike = { toString: () => `${server.origin}/like?x=1` };
    const res = await fetch(urlLike as unknown as string);
    assert.equal(res.status, 200);
    assert.equal(await res.text(), 'ok');
    assert.equal(server.requests[0]?.url, '/like?x=1');
    // A Symbol has no string: fetch rejects (a promise, never a synchronous throw).
    let called: Promise<Response> | undefined;
    assert.doesNotThrow(() => {
      called = fetch(Symbol('x') as unknown as string);
    });
    await assert.rejects(called as Promise<Response>, TypeError);
    assert.equal(server.requests.length, 1);
  });
});

test('a URL the caller changes after the call (a loop setting searchParams) changes neither where the call goes nor where its retry goes', async () => {
  await withServer(
    sequence({ status: 503, headers: { 'retry-after': '0' } }, { status: 200 }),
    async (server) => {
      // A layer that waits before sending (a token read, a store), as auth() and pacing may.
      const later: Middleware = async function later(call, next) {
        await new Promise((resolve) => setTimeout(resolve, 1));
        return next(call);
      };
      const fetch = createFetch({ use: [retry({ backoff: { initialMs: 1, jitter: 'none' } }), later] });
      // fetch itself reads its input as a string when called: each call keeps its own id.
      const url = new URL(`${server.origin}/items`);
      const calls: Promise<Response>[] = [];
      for (const id of ['a', 'b', 'c']) {
        url.searchParams.set('id', id);
        calls.push(fetch(url));
      }
      for (const res of await Promise.all(calls)) {
        assert.equal(res.status, 200);
        await res.body?.cancel();
      }
      const sent = server.requests.map((r) => r.url);
      assert.equal(sent.length, 4, 'one 503 retried once');
      // The three calls reach the server in any order; the one answered 503 was sent again to its own id.
      assert.deepEqual(
        [...sent].sort(),
        ['/items?id=a', '/items?id=b', '/items?id=c', sent[0]].sort(),
        'each call, and the retry, went to its own id',
      );
    },
  );
});

test('createFetch() takes a middleware list written as const or held readonly (frozen too), and options passed through as undefined', async () => {
  await withServer(always({ status: 200, body: 'ok' }), async (server) => {
    const seen: string[] = [];
    const mark: Middleware = async function mark(call, next) {
      seen.push(call.key);
      return next(call);
    };
    // A user's own options, fields possibly unset (exactOptionalPropertyTypes: passed through as undefined).
    const given: { fetch?: FetchLike | undefined; key?: string | undefined; onEvent?: undefined } = {};
    const asConst = [mark, passThrough] as const;
    const held: readonly Middleware[] = Object.freeze([mark]);
    for (const use of [asConst, held]) {
      const fetch = createFetch({ use, fetch: given.fetch, key: given.key, onEvent: given.onEvent });
      assert.equal(await (await fetch(`${server.origin}/x`)).text(), 'ok');
    }
    assert.deepEqual(seen, [server.origin, server.origin]);
  });
});

test('a middleware error that cannot be redacted in place (frozen, a DOMException) or that quotes a refused header value after a prefix shows no credential in the MIDDLEWARE_FAILED', async () => {
  // The refused-value rule read only the start of the text ("request failed: Headers.append:
  // ..." kept the token), and a frozen error or Bun's DOMException (read-only message) kept
  // its secret in the cause that util.inspect and pino print whole.
  const secret = 'Tok3nFromCliOutput9';
  const middlewares: Middleware[] = [
    async function rethrows() {
      try {
        new Headers({ authorization: `Bearer ${secret}\nwarning: update available` });
      } catch (error) {
        throw new Error(`request failed: ${(error as Error).message}`);
      }
      throw new Error(`request failed: Headers.append: "Bearer ${secret}\n" is an invalid header value.`);
    },
    async function frozen() {
      throw Object.freeze(
        Object.assign(new Error(`no route for https://h/x?api_key=${secret}`), { code: 'E_ROUTE' }),
      );
    },
    async function domException() {
      throw new DOMException(`no route for https://h/x?api_key=${secret}`, 'NotFoundError');
    },
  ];
  for (const broken of middlewares) {
    const fetch = createFetch({ fetch: async () => new Response('ok'), use: [broken] });
    const error = await fetch('http://127.0.0.1:9/').then(
      () => assert.fail('the middleware threw'),
      (thrown: unknown) => thrown,
    );
    assert.ok(error instanceof BreakwaterError && error.code === 'MIDDLEWARE_FAILED', String(error));
    const cause = error.cause as Error & { code?: string };
    for (const shown of [
      inspect(error, { depth: 5 }),
      JSON.stringify(error),
      String(error),
      String(error.stack),
      String(cause.stack),
      String(cause.message),
    ]) {
      assert.ok(!shown.includes(secret), `${broken.name}: the credential shown: ${shown}`);
    }
    if (broken.name === 'frozen') assert.deepEqual([cause.name, cause.code], ['Error', 'E_ROUTE']);
    if (broken.name === 'domException') assert.equal(cause.name, 'NotFoundError');
  }
});

test('a middleware that throws a string or a plain object quoting a URL shows no query secret in the MIDDLEWARE_FAILED’s cause', async () => {
  // The message hid it, but the cause was kept as thrown: a string went up as it was, and an
  // object's `url` was never read; util.inspect, pino and JSON.stringify(error.cause) print them.
  const secret = 'Tok3nInTheQuery9';
  const url = `https://api.example.com/v1/models?api_key=${secret}`;
  for (const thrown of [`lookup failed for ${url}`, { message: `lookup failed for ${url}`, url }]) {
    const fetch = createFetch({
      fetch: async () => new Response('ok'),
      use: [
        async function lookup() {
          throw thrown;
        },
      ],
    });
    const error = await fetch('http://127.0.0.1:9/').then(
      () => assert.fail('the middleware threw'),
      (caught: unknown) => caught,
    );
    assert.ok(error instanceof BreakwaterError && error.code === 'MIDDLEWARE_FAILED', String(error));
    for (const shown of [inspect(error, { depth: 5 }), JSON.stringify(error.cause), String(error.cause)]) {
      assert.ok(!shown.includes(secret), `the credential shown: ${shown}`);
    }
    assert.match(inspect(error.cause), /api_key=\[redacted\]/);
  }
});

test('a caller’s abort before the answer, through a fetch that ignores the signal, still ends the call with the abort’s reason; the late answer is let go', async () => {
  // Plain fetch rejects once its signal aborts; a fetch that drops the signal answers
  // later, and that answer went to a caller who had already left (and was not captured).
  const deaf: FetchLike = (input, init) => {
    const { signal: _ignored, ...rest } = init ?? {};
    return globalThis.fetch(input, rest);
  };
  await withServer(always({ status: 200, body: 'late', delayMs: 150 }), async (server) => {
    const controller = new AbortController();
    const reason = new Error('the user left');
    setTimeout(() => controller.abort(reason), 20);
    const outcome = await createFetch({ fetch: deaf, use: [] })(server.origin, {
      signal: controller.signal,
    }).then(
      async (res) => `answered ${res.status}: ${await res.text()}`,
      (error: unknown) => error,
    );
    assert.equal(outcome, reason);
  });
});

/** A RequestInit whose members are getters on its class, as fetch (a WebIDL dictionary) reads them. */
class GetterInit {
  constructor(private readonly sent: string) {}
  get method(): string {
    return 'POST';
  }
  get body(): string {
    return this.sent;
  }
  get headers(): Record<string, string> {
    return { 'content-type': 'application/json', 'idempotency-key': `"${this.sent.length}"` };
  }
}

/** The init shapes whose members are not own properties: each works with raw fetch. */
function inheritedInits(): [string, () => RequestInit][] {
  return [
    ['a class with getters', () => new GetterInit('{"class":1}') as RequestInit],
    [
      'Object.create(proto)',
      () =>
        Object.create({
          method: 'POST',
          body: '{"proto":1}',
          headers: { 'content-type': 'application/json', 'idempotency-key': '"p"' },
        }) as RequestInit,
    ],
    [
      // As workers forward one: fetch(url, request).
      'a Request',
      () =>
        new Request('http://127.0.0.1:9/', {
          method: 'POST',
          body: '{"request":1}',
          headers: { 'content-type': 'application/json', 'idempotency-key': '"r"' },
        }),
    ],
  ];
}

test('an init whose members are inherited (a class’s getters, a prototype, a Request) arrives whole when a middleware sets a header: method, body and headers', async () => {
  await withServer(always({}), async (server) => {
    const stamp: Middleware = async function stamp(call, next) {
      call.setHeader('x-stamped', 'yes');
      return next(call);
    };
    const fetch = createFetch({ use: [stamp] });
    for (const [shape, make] of inheritedInits()) {
      // The premise: raw fetch reads these members.
      await (await globalThis.fetch(`${server.origin}/raw`, make())).text();
      await (await fetch(`${server.origin}/chain`, make())).text();
      const [raw, chained] = server.requests.splice(0);
      assert.equal(raw?.method, 'POST', `${shape}: raw fetch`);
      assert.equal(chained?.method, 'POST', shape);
      assert.equal(chained?.text, raw?.text, shape);
      assert.match(chained?.text ?? '', /^\{"/, shape);
      assert.equal(chained?.headers['content-type'], 'application/json', shape);
      assert.equal(chained?.headers['idempotency-key'], raw?.headers['idempotency-key'], shape);
      assert.equal(chained?.headers['x-stamped'], 'yes', shape);
    }
  });
});

test('an init whose members are inherited keeps them on a retry’s resend, through a per-attempt timeout’s copy', async () => {
  for (const [shape, make] of inheritedInits()) {
    // Not the Request: its stream body is sent once, never resent.
    if (shape === 'a Request') continue;
    await withServer(
      sequence({ status: 503, headers: { 'retry-after': '0' } }, { status: 200 }),
      async (server) => {
        const fetch = createFetch({
          use: [retry({ backoff: { initialMs: 1, jitter: 'none' } }), timeout({ attemptMs: 30_000 })],
        });
        const res = await fetch(server.origin, make());
        await res.text();
        assert.equal(res.status, 200, shape);
        assert.equal(server.requests.length, 2, `${shape}: one resend`);
        for (const sent of server.requests) {
          assert.equal(sent.method, 'POST', shape);
          assert.match(sent.text, /^\{"/, shape);
          assert.equal(sent.headers['content-type'], 'application/json', shape);
          assert.ok(sent.headers['idempotency-key'], shape);
        }
        assert.equal(server.requests[1]?.text, server.requests[0]?.text, shape);
      },
    );
  }
});

test('an init getter that throws rejects the call, as fetch rejects it, and never throws synchronously', async () => {
  const init = Object.create({
    get body(): string {
      throw new Error('body getter');
    },
  }) as RequestInit;
  let sent = 0;
  const fetch = createFetch({
    fetch: async () => {
      sent++;
      return new Response('ok');
    },
    use: [passThrough],
  });
  const pending = fetch('http://127.0.0.1:9/', init);
  await assert.rejects(pending, /body getter/);
  // A primitive init is refused as fetch refuses it, with a TypeError.
  await assert.rejects(fetch('http://127.0.0.1:9/', 'POST' as unknown as RequestInit), TypeError);
  assert.equal(sent, 0);
});

test('what a custom fetch or a middleware throws shows no credential of the call quoted alone: a cookie’s value, a token base64-encoded, a secret query value', async () => {
  // The chain hid the credential header values only where quoted whole, or after their scheme.
  const token = 'tok3nValue9917abc';
  const sid = 'S1dCookieValue42';
  const key = 'AIzaQueryKey0042';
  const headers = { authorization: `Bearer ${token}`, cookie: `theme=dark; sid="${sid}"` };
  const said = `rejected ${btoa(token)} / ${btoa(`Bearer ${token}`)}, session ${sid}, key ${key} (theme dark)`;
  const viaFetch = createFetch({
    fetch: async () => {
      throw Object.assign(new Error(`connect ECONNREFUSED 127.0.0.1:9 ${said}`), {
        code: 'ECONNREFUSED',
        config: { said },
      });
    },
    use: [passThrough],
  });
  const viaMiddleware = createFetch({
    fetch: async () => new Response('ok'),
    use: [
      async function broken() {
        throw new Error(said);
      },
    ],
  });
  for (const [shape, fetch, code] of [
    ['a custom fetch', viaFetch, 'ECONNREFUSED'],
    ['a middleware', viaMiddleware, 'MIDDLEWARE_FAILED'],
  ] as const) {
    const error = await fetch(`http://127.0.0.1:9/v1?key=${key}&alt=json`, { headers }).then(
      () => assert.fail(`${shape}: the call succeeded`),
      (caught: unknown) => caught,
    );
    assert.ok(error instanceof BreakwaterError && error.code === code, `${shape}: ${String(error)}`);
    const shown = `${error.message} ${inspect(error, { depth: 8 })} ${JSON.stringify(error)}`;
    for (const secret of [token, btoa(token).replace(/=+$/, ''), sid, key])
      assert.ok(!shown.includes(secret), `${shape}: ${secret} shown: ${shown}`);
    assert.ok(shown.includes('(theme dark)'), `${shape}: what is no credential is kept: ${shown}`);
  }
});

test('what a middleware throws keeps the plain words its prose shares with a cookie’s name or value, and still hides the session id', async () => {
  // Every word of 8 characters or more of a credential header was hidden wherever the error
  // said it: a cookie `language=english; consent=rejected` took "language" and "rejected".
  const sid = 's3ss10nId0042abcdef';
  const fetch = createFetch({
    fetch: async () => new Response('ok'),
    use: [
      async function broken() {
        throw new Error(`request rejected: language unsupported for session ${sid}`);
      },
    ],
  });
  const error = await fetch('http://127.0.0.1:9/v1', {
    headers: { cookie: `language=english; consent=rejected; sid=${sid}` },
  }).then(
    () => assert.fail('the call succeeded'),
    (caught: unknown) => caught,
  );
  assert.ok(error instanceof BreakwaterError && error.code === 'MIDDLEWARE_FAILED', String(error));
  assert.equal(
    error.message,
    'middleware "broken" threw: request rejected: language unsupported for session [redacted]',
  );
});

test('the chain’s end marks a call whose answer fetch reached through a redirect as may-have-run (RAN), and no other', async () => {
  // A middleware below retry() may rebuild the answer (`new Response(body, response)` says
  // redirected: false): retry() reads the mark the chain's end set from fetch's own answer.
  await withServer(
    (req) => (req.url === '/orders' ? { status: 303, headers: { location: '/orders/1' } } : { body: 'ok' }),
    async (server) => {
      const marked: string[] = [];
      const fetch = createFetch({
        use: [
          async function read(call, next) {
            const response = await next(call);
            marked.push(`${call.url.pathname} ${call.bag.has(RAN)}`);
            return response;
          },
        ],
      });
      for (const path of ['/orders', '/orders/1']) {
        const response = await fetch(`${server.origin}${path}`, { method: 'POST', body: 'order' });
        await response.body?.cancel();
      }
      assert.deepEqual(marked, ['/orders true', '/orders/1 false']);
    },
  );
});

/** One policy's client under another's: the inner one stamps an Idempotency-Key per call and resends on it once. */
function nestedClients(fetch?: FetchLike): FetchLike {
  const fast = { backoff: { initialMs: 1, jitter: 'none' as const } };
  const inner = createFetch({
    ...(fetch && { fetch }),
    use: [retry({ attempts: 2, ...fast }), idempotencyKey()],
  });
  return createFetch({ fetch: inner, use: [retry({ attempts: 3, ...fast })] });
}

test('a breakwater fetch under another’s retry: a keyed POST the inner one resent after a 503, then answered 429, is not resent by the outer one under a new key', async () => {
  await withServer(
    sequence({ status: 503 }, { status: 429, headers: { 'retry-after': '0' } }, { status: 201 }),
    async (server) => {
      const response = await nestedClients()(`${server.origin}/orders`, { method: 'POST', body: 'order' });
      await response.body?.cancel();
      assert.equal(response.status, 429, 'the inner client’s last answer, not a resend’s');
      const keys = new Set(server.requests.map((r) => r.headers['idempotency-key']));
      assert.equal(server.requests.length, 2, 'the 503 may have run it: no third request');
      assert.equal(keys.size, 1, 'one key for the call');
    },
  );
});

test('a breakwater fetch under another’s retry: a keyed POST the inner one resent after a 503, whose resend met a refused connection, is not resent by the outer one, and reads as maybe sent', async () => {
  const refused = `http://127.0.0.1:${await closedPort()}`;
  await withServer(always({ status: 503 }), async (server) => {
    let sends = 0;
    // The inner client's passes alternate between the server and a port that refuses.
    const fetch = nestedClients((input, init) =>
      globalThis.fetch(sends++ % 2 === 0 ? input : `${refused}/orders`, init),
    );
    const error = await fetch(`${server.origin}/orders`, { method: 'POST', body: 'order' }).then(
      () => assert.fail('resolved'),
      (e: unknown) => e,
    );
    assert.ok(error instanceof NetworkError, `${error}`);
    assert.equal(error.code, 'ECONNREFUSED');
    assert.equal(error.sent, 'maybe', 'the call’s first pass reached the server');
    assert.equal(server.requests.length, 1, 'the outer retry sent no second call under a new key');
  });
});
