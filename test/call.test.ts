import assert from 'node:assert/strict';
import { type IncomingMessage, request } from 'node:http';
import { PassThrough, Readable } from 'node:stream';
import { test } from 'node:test';
import { createGunzip, gzipSync } from 'node:zlib';
import fc from 'fast-check';
import { Call, dropBody, type FetchLike, type Middleware } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import { retry } from '../src/retry.ts';
import { throwOnStatus } from '../src/status.ts';
import { timeout } from '../src/timeout.ts';
import { always, sequence, withServer } from './helpers/server.ts';

// What a Call reads from (input, init) is what fetch itself would send: the init's
// member, else the Request input's. These cases are the edges of that rule.

const URL_TEXT = 'http://127.0.0.1:9/things';

test('call.method is upper-case whether it comes from the init or a Request input', () => {
  // Request upper-cases only the six standard methods itself; PATCH stays as given.
  assert.equal(
    new Call(new Request(URL_TEXT, { method: 'patch' }), undefined, undefined, undefined).method,
    'PATCH',
  );
  assert.equal(new Call(URL_TEXT, { method: 'delete' }, undefined, undefined).method, 'DELETE');
  assert.equal(new Call(URL_TEXT, undefined, undefined, undefined).method, 'GET');
});

test('an init member set to undefined counts as absent: the Request input’s own is used', () => {
  const request = new Request(URL_TEXT, { method: 'PUT', body: 'x', headers: { 'x-a': '1' } });
  const call = new Call(
    request,
    // JS callers (and SDKs spreading their options) pass explicit undefineds.
    { method: undefined, body: undefined, headers: undefined } as unknown as RequestInit,
    undefined,
    undefined,
  );
  assert.equal(call.method, 'PUT');
  assert.equal(call.header('x-a'), '1');
  assert.ok(call.body instanceof ReadableStream, 'call.body instanceof ReadableStream');
});

test('init signal: null means no signal, even when the Request input carries one', () => {
  const controller = new AbortController();
  const request = new Request(URL_TEXT, { signal: controller.signal });
  assert.equal(new Call(request, undefined, undefined, undefined).signal, request.signal);
  assert.equal(new Call(request, { signal: null }, undefined, undefined).signal, undefined);
});

test('repeated header names in a plain array are joined with ", " as Headers joins them', () => {
  const call = new Call(
    URL_TEXT,
    {
      headers: [
        ['Accept', 'text/html'],
        ['accept', 'application/json'],
      ],
    },
    undefined,
    undefined,
  );
  assert.equal(call.header('accept'), 'text/html, application/json');
  assert.equal(call.header('accept'), new Headers(call.init?.headers).get('accept'));
});

test('the default key is the origin without a default port, and userinfo never reaches it', () => {
  assert.equal(
    new Call('HTTP://Example.COM:80/a', undefined, undefined, undefined).key,
    'http://example.com',
  );
  assert.equal(
    new Call('https://example.com:443/a?q=1', undefined, undefined, undefined).key,
    'https://example.com',
  );
  assert.equal(
    new Call('https://example.com:8443/a', undefined, undefined, undefined).key,
    'https://example.com:8443',
  );
  assert.equal(
    new Call('https://user:pw@example.com/a', undefined, undefined, undefined).key,
    'https://example.com',
  );
});

test('an empty Idempotency-Key does not make a POST idempotent', () => {
  for (const headers of [{ 'Idempotency-Key': '' }, new Headers({ 'Idempotency-Key': '' })]) {
    assert.equal(new Call(URL_TEXT, { method: 'POST', headers }, undefined, undefined).isIdempotent, false);
  }
  assert.equal(
    new Call(URL_TEXT, { method: 'POST', headers: { 'Idempotency-Key': 'k1' } }, undefined, undefined)
      .isIdempotent,
    true,
  );
});

test('the default key is what new URL(href).origin says, for hosts the URL parser rewrites too', () => {
  for (const href of [
    'https://bücher.example/a',
    'https://EXAMPLE.com/a',
    'https://ex%61mple.com/a',
    'https://example.com\\a',
    'https://exa\tmple.com/a',
    'https://example.com\n',
    ' https://example.com/a',
    'https://[::1]:443/a',
    'http://127.0.0.1:9/',
    'https://user@example.com:8443?x',
    'https://example.com#frag',
  ]) {
    assert.equal(
      new Call(href, undefined, undefined, undefined).key,
      new URL(href).origin,
      JSON.stringify(href),
    );
  }
});

test('headers given as a Map or as another library’s iterable Headers are read as fetch reads them', () => {
  const map = new Map([['Idempotency-Key', '"k1"']]);
  const foreign = {
    *[Symbol.iterator]() {
      yield ['idempotency-key', '"k2"'] as [string, string];
    },
  };
  for (const [headers, key] of [
    [map, '"k1"'],
    [foreign, '"k2"'],
  ] as const) {
    const call = new Call(
      URL_TEXT,
      { method: 'POST', headers: headers as unknown as HeadersInit },
      undefined,
      undefined,
    );
    assert.equal(call.header('idempotency-key'), key);
    assert.equal(call.isIdempotent, true);
    assert.equal(new Headers(headers as unknown as HeadersInit).get('idempotency-key'), key);
  }
});

/** The default key of a call to `href`. */
function keyOf(href: string): string {
  return new Call(href, undefined, undefined, undefined).key;
}

test('one server spelled as an IPv4 shorthand, in hex or octal, as long IPv6 or with a zero-padded port gets one key: its origin', () => {
  for (const spellings of [
    [
      'http://127.0.0.1/',
      'http://127.1/',
      'http://0x7f.0.0.1/',
      'http://0x7F.1/',
      'http://0177.0.0.1/',
      'http://2130706433/',
      'http://127.0.0.1./',
      'http://127.0.0.1:80/',
      'http://127.0.0.1:0080/',
      'http://127.0.0.1:/',
    ],
    ['http://[::1]/', 'http://[0:0:0:0:0:0:0:1]/', 'http://[0000::0001]:80/', 'http://[::0:1]/'],
    ['https://example.com:8443/', 'https://example.com:08443/', 'HTTPS://EXAMPLE.COM:008443/a'],
    ['http://example.com/', 'http:///example.com/', 'http://example.com:00080/'],
  ]) {
    const origin = new URL(spellings[0] as string).origin;
    for (const href of spellings) assert.equal(keyOf(href), origin, href);
  }
});

test('hosts and ports the URL parser keeps as written are keyed as written', () => {
  for (const [href, key] of [
    ['http://10.0.0.255:8080/x', 'http://10.0.0.255:8080'],
    ['http://node1:3000/', 'http://node1:3000'],
    ['https://api.example.com./', 'https://api.example.com.'],
    ['https://1e3.example/', 'https://1e3.example'],
    ['https://host:443', 'https://host'],
    ['http://host:443', 'http://host:443'],
  ]) {
    assert.equal(keyOf(href as string), key);
    assert.equal(new URL(href as string).origin, key);
  }
});

// Pieces of URLs: canonical spellings beside the ones the URL parser rewrites, and
// near misses of each (a label that only looks numeric, a port just out of range).
const SCHEMES = ['http', 'https', 'HTTP', 'hTtPs', 'ws', 'ftp', 'file', 'foo', 'http:', ' http', 'ht%74p'];
const SEPARATORS = ['://', ':///', ':/', ':', ':\\\\', '://user:pw@', '://@'];
const OCTETS = [
  '0',
  '1',
  '9',
  '10',
  '99',
  '127',
  '255',
  '256',
  '00',
  '01',
  '010',
  '0x0',
  '0x7f',
  '0X7F',
  '0x',
  '4294967295',
  '1e2',
];
const LABELS = [
  'a',
  'example',
  'EXAMPLE',
  'xn--nxasmq6b',
  'node1',
  '1node',
  '0x',
  '0xg',
  'a-b',
  '-a',
  'a_b',
  '',
  'localhost',
  'com',
  'b%61r',
  'bücher',
  'a b',
  'a\tb',
];
const IPV6 = [
  '[::1]',
  '[0:0:0:0:0:0:0:1]',
  '[::]',
  '[1:2:3:4:5:6:7:8]',
  '[1::]',
  '[::ffff:127.0.0.1]',
  '[ABCD::0]',
  '[0::0:1]',
  '[::1',
  '[1:2]',
];
const PORTS = [
  '',
  ':',
  ':0',
  ':00',
  ':1',
  ':80',
  ':080',
  ':443',
  ':0443',
  ':8080',
  ':65535',
  ':65536',
  ':99999',
  ':8a',
  ':-1',
];
const TAILS = ['', '/', '/a/b', '?q=1', '#f', '\\a', '/a?b#c', ' /a', '/%2e'];

test('the default key is new URL(href).origin for generated URLs, canonical and not', () => {
  const pick = (items: readonly string[]) => fc.constantFrom(...items);
  const host = fc.oneof(
    fc
      .array(pick(OCTETS), { minLength: 1, maxLength: 5 })
      .chain((octets) => fc.constantFrom(octets.join('.'), `${octets.join('.')}.`)),
    fc.array(pick(LABELS), { minLength: 1, maxLength: 4 }).map((labels) => labels.join('.')),
    pick(IPV6),
  );
  fc.assert(
    fc.property(pick(SCHEMES), pick(SEPARATORS), host, pick(PORTS), pick(TAILS), (...parts) => {
      const href = parts.join('');
      let origin: string;
      try {
        origin = new URL(href).origin;
      } catch {
        return; // fetch rejects it too; no key needed
      }
      assert.equal(keyOf(href), origin, JSON.stringify(href));
    }),
    { numRuns: 5_000 },
  );
});

test('a URL the parser rejects gets a key that names no server and no secret, instead of the parser’s TypeError', () => {
  for (const href of [
    'http://example.com:99999/?token=s3cret',
    'http://user:s3cret@example.com:x/',
    'http://1.2.3.4.5/?token=s3cret',
    'http://[::1/?token=s3cret',
  ]) {
    assert.throws(() => new URL(href), TypeError);
    // Keyed as written where that is plainly no secret (fetch rejects it anyway), else
    // by the fixed name.
    const key = keyOf(href);
    assert.ok(key === '(unparseable URL)' || key === 'http://example.com:99999', `${href}: ${key}`);
  }
});

test('a key function is not handed a URL the parser rejects: the key names no server, and no parser error carrying the URL reaches the caller', async () => {
  const href = 'http://user:s3cret@example.com:99999/?token=s3cret';
  const seen: URL[] = [];
  const byHost = (url: URL) => {
    seen.push(url);
    return url.host;
  };
  assert.equal(new Call(href, undefined, byHost, undefined).key, '(unparseable URL)');
  assert.deepEqual(seen, []);
  // Through the chain: what fetch throws names neither the password nor the token
  // (Node's parser error would carry the whole URL in its `input`).
  const fetch = createFetch({ key: byHost, use: [retry({ attempts: 2 })] });
  const error = await fetch(href).catch((thrown: unknown) => thrown);
  assert.ok(error instanceof TypeError, String(error));
  const shown = [
    String(error),
    String(error.stack),
    JSON.stringify(error),
    String((error as { input?: unknown }).input),
  ];
  for (const text of shown) assert.equal(text.includes('s3cret'), false, text);
});

/**
 * A signal of the shape node-fetch v2's `abort-controller` package (and older
 * polyfills) hands out: `aborted` and an `abort` event, but no `reason`.
 */
function polyfillSignal(): { signal: AbortSignal; abort: () => void } {
  const target = Object.assign(new EventTarget(), { aborted: false, reason: undefined });
  const abort = (): void => {
    target.aborted = true;
    target.dispatchEvent(new Event('abort'));
  };
  return { signal: target as unknown as AbortSignal, abort };
}

/**
 * A fetch that takes such a signal, as node-fetch v2 does: Deno's and Bun's own fetch
 * reject any signal that is not a real AbortSignal, so it follows the polyfill's
 * abort event with a real controller.
 */
const polyfillFetch: FetchLike = (input, init) => {
  const { signal: given, ...rest } = init ?? {};
  const controller = new AbortController();
  given?.addEventListener('abort', () => controller.abort(), { once: true });
  return globalThis.fetch(input, { ...rest, signal: controller.signal });
};

test('a polyfill signal without reason, aborted during a backoff wait, rejects the call with an AbortError, not undefined', async () => {
  const { signal, abort } = polyfillSignal();
  await withServer(sequence({ status: 503 }, {}), async (server) => {
    const fetch = createFetch({
      fetch: polyfillFetch,
      use: [retry({ backoff: { initialMs: 10_000, jitter: 'none' } })],
      // The abort lands while retry() waits out its 10 s backoff.
      onEvent: (event) => {
        if (event.type === 'retry') setTimeout(abort, 10);
      },
    });
    const started = performance.now();
    const error = await fetch(`${server.origin}/x`, { signal }).then(
      () => assert.fail('the call resolved'),
      (thrown: unknown) => thrown,
    );
    assert.ok(error instanceof Error, `rejected with ${String(error)}`);
    assert.equal(error.name, 'AbortError');
    assert.ok(performance.now() - started < 5_000, 'ended by the abort, not the backoff');
    assert.equal(server.requests.length, 1, 'no resend after the abort');
  });
});

test('a polyfill signal without reason, aborted before the call, is refused with an AbortError, not undefined', async () => {
  const { signal, abort } = polyfillSignal();
  abort();
  await withServer(sequence({}), async (server) => {
    const fetch = createFetch({ fetch: polyfillFetch, use: [retry()] });
    const error = await fetch(`${server.origin}/x`, { signal }).then(
      () => assert.fail('the call resolved'),
      (thrown: unknown) => thrown,
    );
    assert.ok(error instanceof Error, `rejected with ${String(error)}`);
    assert.equal(error.name, 'AbortError');
    assert.equal(server.requests.length, 0, 'nothing sent');
  });
});

test('init signal: null stays no signal on every attempt: the Request input’s own signal, aborted meanwhile, ends nothing', async () => {
  const stale = new AbortController();
  const request = new Request(URL_TEXT, { signal: stale.signal });
  // A timeout hands its signal over and back: "back" is no signal, not the Request's.
  const call = new Call(request, { signal: null }, undefined, undefined);
  call.signal = new AbortController().signal;
  call.signal = undefined;
  assert.equal(call.signal, undefined);
  // On the wire: the Request's signal aborts after the first answer (a 503), and the
  // resend still goes out and is answered, as fetch(request, { signal: null }) would be.
  await withServer(sequence({ status: 503 }, {}), async (server) => {
    const fetch = createFetch({
      use: [retry({ backoff: { initialMs: 1, jitter: 'none' } }), timeout({ attemptMs: 5_000 })],
      onEvent: (event) => {
        if (event.type === 'retry') stale.abort(new Error('the Request’s own signal'));
      },
    });
    const response = await fetch(new Request(`${server.origin}/x`, { signal: stale.signal }), {
      signal: null,
    });
    assert.equal(response.status, 200);
    await response.body?.cancel();
    assert.equal(server.requests.length, 2);
  });
});

/**
 * Resolves once `done()` holds, looked at every 10 ms, or once `ms` have passed: a check
 * that something happens within a bound ends when it happens, not when the bound does.
 */
async function within(ms: number, done: () => boolean): Promise<void> {
  const end = performance.now() + ms;
  while (!done() && performance.now() < end) await new Promise((resolve) => setTimeout(resolve, 10));
}

test('dropBody() of a Node stream that never ends (node-fetch v2: a pipe from the socket) stops reading within a bound and lets the socket go; a short one is read to its end', async () => {
  // A dropped body was read on (resume()) until it ended: an endless one (an event stream a
  // timeout() dropped) was read for good, and its connection never freed.
  let chunks = 0;
  const socket = new Readable({
    read() {
      chunks++;
      setTimeout(() => this.push('data: ping\n\n'), 1);
    },
  });
  const body = socket.pipe(new PassThrough());
  dropBody({ body } as never);
  try {
    // The bound is 1 s (MAX_DROP_READ_MS in call.ts).
    await within(1300, () => body.destroyed && socket.destroyed);
    assert.ok(body.destroyed && socket.destroyed, `still read: ${chunks} chunks`);
    const read = chunks;
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(chunks, read, 'read on after it was let go');
  } finally {
    socket.destroy();
  }

  const short = Readable.from(['a', 'b']).pipe(new PassThrough());
  let ended = false;
  short.on('end', () => {
    ended = true;
  });
  dropBody({ body: short } as never);
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.ok(ended, 'a short body was not read to its end');
});

test('dropBody() of a compressed body that never ends (node-fetch v2: socket, PassThrough, Gunzip) lets the socket go', async () => {
  // node-fetch v2 pipes a gzip answer twice (res.pipe(PassThrough).pipe(Gunzip)): only the
  // body and the stream piped into it were destroyed, so the socket's stream stayed paused
  // and the connection taken for good.
  await withServer(
    always({
      stall: 'mid-body',
      headers: { 'content-type': 'text/event-stream', 'content-encoding': 'gzip', 'content-length': '100' },
      // The start of a compressed event: the decoder waits for the rest.
      body: gzipSync('data: ping\n\n').subarray(0, 20) as never,
    }),
    async (server) => {
      const answer = await new Promise<IncomingMessage>((resolve, reject) => {
        request(server.origin, { agent: false }, resolve).on('error', reject).end();
      });
      dropBody({ body: answer.pipe(new PassThrough()).pipe(createGunzip()) } as never);
      // The bound is 1 s (MAX_DROP_READ_MS in call.ts).
      await within(1300, () => answer.socket?.destroyed ?? answer.destroyed);
      assert.ok(answer.socket?.destroyed ?? answer.destroyed, 'the connection is still taken');
    },
  );
});

test('dropBody() of a Node stream body whose clone is being read (node-fetch v2 and v3 pipe one stream into both) leaves the clone its stream to the end', async () => {
  // node-fetch's clone() pipes the body's stream into two: past the bound, the stream piped
  // into the dropped one was destroyed with it, and the clone's reader waited for good.
  // 12 chunks 100 ms apart: the stream runs past the bound (1 s, MAX_DROP_READ_MS).
  let sent = 0;
  const source = new Readable({
    read() {
      setTimeout(() => this.push(++sent > 12 ? null : `chunk ${sent}\n`), 100);
    },
  });
  const body = source.pipe(new PassThrough());
  const clone = source.pipe(new PassThrough());
  dropBody({ body } as never);
  let text = '';
  let timer: ReturnType<typeof setTimeout> | undefined;
  const ended = await new Promise<boolean>((resolve) => {
    clone.on('data', (chunk: Uint8Array) => {
      text += chunk;
    });
    clone.on('end', () => resolve(true));
    timer = setTimeout(() => resolve(false), 3000);
  });
  clearTimeout(timer);
  source.destroy();
  assert.ok(ended, `the clone's reader waits for good after: ${JSON.stringify(text)}`);
  assert.match(text, /chunk 12\n$/);
});

/**
 * Runs `body` as on a page at `href` (`globalThis.location`), or with a `location` whose
 * read throws (Deno 1 without `--location`), and puts the runtime's own back after.
 */
async function onPage<T>(href: string | (() => never), body: () => T | Promise<T>): Promise<T> {
  const own = Object.getOwnPropertyDescriptor(globalThis, 'location');
  Object.defineProperty(
    globalThis,
    'location',
    typeof href === 'string'
      ? { value: { href }, configurable: true, writable: true }
      : { get: href, configurable: true },
  );
  try {
    return await body();
  } finally {
    if (own) Object.defineProperty(globalThis, 'location', own);
    else delete (globalThis as { location?: unknown }).location;
  }
}

test('on a page, a relative URL is keyed and named by the server it goes to, as fetch resolves it against the page', async () => {
  await withServer(sequence({}, { status: 503 }), async (server) => {
    const origin = server.origin;
    await onPage(`${origin}/app/page?tab=1`, async () => {
      const keys: string[] = [];
      const look: Middleware = async function look(call, next) {
        keys.push(call.key);
        return next(call);
      };
      const urls: string[] = [];
      const given: unknown[] = [];
      // A browser's fetch resolves a relative URL against the page; Node's, Deno's and Bun's have none.
      const pageFetch: FetchLike = (input, init) => {
        given.push(input);
        return globalThis.fetch(new URL(String(input), `${origin}/app/page?tab=1`), init);
      };
      const fetch = createFetch({
        fetch: pageFetch,
        use: [throwOnStatus(), look],
        onEvent: (event) => {
          if (event.type === 'attempt') urls.push(event.url);
        },
      });
      await (await fetch('/api/x')).text();
      const error = await fetch('api/y?token=s3cret', { method: 'POST', body: 'b' }).catch((e: unknown) => e);
      assert.equal((error as { status?: number }).status, 503, String(error));
      assert.match(
        (error as Error).message,
        new RegExp(`POST ${origin}/app/api/y\\?token=\\[redacted\\] \\(server "${origin}"\\)`),
      );
      assert.deepEqual(keys, [origin, origin], 'one key, the origin, not "(unparseable URL)"');
      assert.deepEqual(urls, [`${origin}/api/x`, `${origin}/app/api/y?token=[redacted]`]);
      // The real fetch still gets the input as given: it resolves it itself.
      assert.deepEqual(given, ['/api/x', 'api/y?token=s3cret']);
      assert.deepEqual(
        server.requests.map((r) => r.url),
        ['/api/x', '/app/api/y?token=s3cret'],
      );
    });
  });
});

test('a relative URL is read against the page for href, url and the key (a key function too); an absolute one stays as given', async () => {
  const call = (href: string, key?: (url: URL) => string) => new Call(href, undefined, key, undefined);
  await onPage('https://app.example/a/b?q=1', () => {
    assert.equal(call('/x?y=1').href, 'https://app.example/x?y=1');
    assert.equal(call('c').url.pathname, '/a/c');
    assert.equal(call('?p=2').href, 'https://app.example/a/b?p=2');
    assert.equal(call('//cdn.example:8443/x').key, 'https://cdn.example:8443');
    assert.equal(call('/x').key, 'https://app.example');
    assert.equal(call('/x', (url) => url.host).key, 'app.example');
    // A special scheme without `//`: relative when the page has the same scheme, else not.
    assert.equal(call('https:x').href, 'https://app.example/a/x');
    assert.equal(call('https:x').key, 'https://app.example');
    assert.equal(call('http:x').key, 'http://x');
    // Not made canonical: an absolute URL is the caller's own spelling.
    assert.equal(call('HTTP://Example.COM:80/x').href, 'HTTP://Example.COM:80/x');
    assert.equal(call('HTTP://Example.COM:80/x').key, 'http://example.com');
  });
});

test("under a <base href>, a relative URL is read against the document's base URL (document.baseURI), as fetch reads it, not the location", async () => {
  const call = (href: string) => new Call(href, undefined, undefined, undefined);
  const own = Object.getOwnPropertyDescriptor(globalThis, 'document');
  const setDocument = (document: unknown): void => {
    Object.defineProperty(globalThis, 'document', { value: document, configurable: true, writable: true });
  };
  try {
    await onPage('https://app.example/a/b?q=1', () => {
      // <base href="https://cdn.example/static/"> on the page at https://app.example/a/b?q=1.
      setDocument({ baseURI: 'https://cdn.example/static/' });
      assert.equal(call('x?y=1').href, 'https://cdn.example/static/x?y=1');
      assert.equal(call('?p=2').href, 'https://cdn.example/static/?p=2');
      assert.equal(call('/x').key, 'https://cdn.example');
      assert.equal(call('/x').url.host, 'cdn.example');
      // An absolute URL stays as given.
      assert.equal(call('https://api.example/x').key, 'https://api.example');
      // A document whose baseURI is no string (a stub, a worker's polyfill) leaves the location's.
      for (const document of [
        {},
        { baseURI: null },
        { baseURI: { toString: () => 'https://evil.example/' } },
      ]) {
        setDocument(document);
        assert.equal(call('c').href, 'https://app.example/a/c', JSON.stringify(document));
        assert.equal(call('/x').key, 'https://app.example', JSON.stringify(document));
      }
    });
  } finally {
    if (own) Object.defineProperty(globalThis, 'document', own);
    else delete (globalThis as { document?: unknown }).document;
  }
  assert.equal('document' in globalThis, own !== undefined, "the runtime's own document is back");
});

test('without a page (a server, or a location whose read throws) a relative URL stays as given and names no server', async () => {
  const check = (): void => {
    const call = new Call('/api/x?token=s3cret', undefined, undefined, undefined);
    assert.equal(call.href, '/api/x?token=s3cret');
    assert.equal(call.key, '(unparseable URL)');
    assert.throws(() => call.url, TypeError);
  };
  check();
  await onPage(() => {
    throw new ReferenceError('Access to "location", run again with --location <href>.');
  }, check);
});
