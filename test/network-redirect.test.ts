/**
 * A connect failure at a redirect hop, after the request ran: a POST answered 303 (or 307)
 * whose `Location` refuses the connection or does not resolve. fetch follows the redirect
 * and throws the hop's connect error; read as "never sent", retry() resent the POST and it
 * ran again (a reviewer's reproduction: three times). Real servers on 127.0.0.1 only; the
 * one name looked up is under `.invalid` (RFC 6761 §6.4), which never resolves.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type FetchLike, RAN } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import { BreakwaterError, NetworkError, requestSummary } from '../src/errors.ts';
import { idempotencyKey } from '../src/idempotency-key.ts';
import { fetchFailure, normalizeNetworkError } from '../src/network.ts';
import { retry } from '../src/retry.ts';
import { DENO, start } from './helpers/runtime-process.ts';
import { always, closedPort, withServer } from './helpers/server.ts';

/** Which runtime runs the suite (read from globals by name only). */
const runtime: 'node' | 'deno' | 'bun' = 'Bun' in globalThis ? 'bun' : 'Deno' in globalThis ? 'deno' : 'node';

/** A retry that would resend at once, twice, whatever it is allowed to resend. */
/** retry(), 3 attempts 1 ms apart; `resend` as given (default 'safe'). */
const quickRetry = (resend?: 'never') =>
  retry({ attempts: 3, backoff: { initialMs: 1, maxMs: 1, jitter: 'none' }, ...(resend ? { resend } : {}) });

/** Runs `fn`, expecting it to reject, and returns what it rejected with. */
async function rejection(fn: () => Promise<unknown>): Promise<unknown> {
  try {
    await fn();
  } catch (error) {
    return error;
  }
  assert.fail('expected a rejection');
}

/** The code, phase and sent of a NetworkError, for one deepEqual. */
function verdict(error: unknown): { code: string; phase: string; sent: string } {
  assert.ok(error instanceof NetworkError, `not a NetworkError: ${String(error)}`);
  return { code: error.code, phase: error.phase, sent: error.sent };
}

test('a POST answered 303 to a port that refuses the connection reaches the server once, and its error says maybe sent', async () => {
  const dead = await closedPort();
  await withServer(
    always({ status: 303, headers: { location: `http://127.0.0.1:${dead}/orders/1` } }),
    async (server) => {
      // On Bun the chain follows the redirect itself (see the next test): resent, it ran 3 times.
      const fetch = createFetch({ use: [quickRetry()] });
      const error = await rejection(() =>
        fetch(`${server.origin}/orders`, { method: 'POST', body: 'order' }),
      );
      assert.equal(server.requests.filter((request) => request.method === 'POST').length, 1);
      assert.deepEqual(verdict(error), { code: 'ECONNREFUSED', phase: 'send', sent: 'maybe' });
    },
  );
});

test("Bun's own fetch names no target when a redirect hop refuses the connection, so the chain follows a POST's redirects itself there", async () => {
  if (runtime !== 'bun') return;
  const dead = await closedPort();
  await withServer(
    always({ status: 303, headers: { location: `http://127.0.0.1:${dead}/orders/1` } }),
    async (server) => {
      // Its `path` is the request's URL: nothing tells it from a refusal of that URL. (Node's
      // and Deno's name a hop within the origin as they name the request: the chain follows a
      // POST's redirects itself on all three; see test/redirect-server-gone.test.ts.)
      const url = `${server.origin}/orders`;
      const raw = await rejection(() => globalThis.fetch(url, { method: 'POST', body: 'order' }));
      const { code, path, address, port, hostname } = raw as Record<string, unknown>;
      assert.deepEqual(
        { code, path, address, port, hostname },
        { code: 'ECONNREFUSED', path: url, address: undefined, port: undefined, hostname: undefined },
      );
    },
  );
});

test("a POST's 303 followed to another origin answers as fetch's own: redirected, the last URL and status, a GET without body, Authorization and Cookie dropped", async () => {
  await withServer(always({ status: 201, headers: { 'x-hop': 'last' }, body: 'receipt' }), async (other) => {
    await withServer(
      always({ status: 303, headers: { location: `${other.origin}/receipts/1` } }),
      async (server) => {
        const fetch = createFetch({ use: [] });
        const response = await fetch(`${server.origin}/orders`, {
          method: 'POST',
          body: 'order',
          headers: {
            'content-type': 'text/plain',
            authorization: 'Bearer s3cret',
            cookie: 'sid=1',
            'x-trace': 't',
          },
        });
        assert.deepEqual(
          [response.status, response.redirected, response.url, response.headers.get('x-hop')],
          [201, true, `${other.origin}/receipts/1`, 'last'],
        );
        assert.equal(response.clone().redirected, true, 'a clone says redirected too');
        assert.equal(await response.text(), 'receipt');
        const [hop] = other.requests;
        assert.ok(hop, 'the hop reached the other origin');
        const { authorization, cookie, 'content-type': type, 'x-trace': trace } = hop.headers;
        assert.deepEqual(
          { method: hop.method, url: hop.url, bytes: hop.body.length, authorization, cookie, type, trace },
          {
            method: 'GET',
            url: '/receipts/1',
            bytes: 0,
            authorization: undefined,
            cookie: undefined,
            type: undefined,
            trace: 't',
          },
        );
        assert.equal(server.requests.length, 1);
      },
    );
  });
});

test('a POST with a stream body answered 307 is rejected, not followed without its body', async () => {
  await withServer(always({ status: 307, headers: { location: '/orders/2' } }), async (server) => {
    const fetch = createFetch({ use: [] });
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('order'));
        controller.close();
      },
    });
    const init = { method: 'POST', body, duplex: 'half' } as RequestInit;
    const error = await rejection(() => fetch(`${server.origin}/orders`, init));
    assert.deepEqual(
      server.requests.map((request) => request.url),
      ['/orders'],
    );
    // The chain follows a POST's redirects itself on Node, Deno and Bun, and names why.
    assert.match(String(error), /307 not followed: a stream body goes once/);
  });
});

test('a PUT of bytes answered 307 is followed with them on every runtime (Node 20 fetch fails on such a body: the chain follows it)', async () => {
  await withServer(
    (req) =>
      req.url === '/a'
        ? { status: 307, headers: { location: '/b' } }
        : { body: `got ${req.body.byteLength}` },
    async (server) => {
      const fetch = createFetch({ use: [quickRetry()] });
      const sent = fetch(`${server.origin}/a`, { method: 'PUT', body: new Uint8Array([1, 2, 3]) });
      assert.equal(await (await sent).text(), 'got 3');
      assert.deepEqual(
        server.requests.map((r) => `${r.method} ${r.url} ${r.body.byteLength}`),
        ['PUT /a 3', 'PUT /b 3'],
      );
    },
  );
});

test('a POST redirected by 307s without end is refused after 20 redirects, as the Fetch standard says', async () => {
  await withServer(always({ status: 307, headers: { location: '/orders' } }), async (server) => {
    const fetch = createFetch({ use: [] });
    const error = await rejection(() => fetch(`${server.origin}/orders`, { method: 'POST', body: 'order' }));
    // The chain follows a POST's redirects itself (Bun's own fetch allows 127).
    assert.match(String(error), /307 not followed: too many redirects/);
    assert.equal(server.requests.length, 21);
  });
});

test('a GET or a POST answered 302, 303 or 307 with a Location that does not parse fails as BAD_REDIRECT on every runtime, marked as may-have-run, and is not resent', async () => {
  // Node's fetch said ENETWORK, maybe sent (retry() resent a GET twice, a breaker counted
  // it), Deno's a bare TypeError, Bun's a TypeError of code RedirectURLInvalid, and the
  // chain's follower on Bun (a POST) one of its own words.
  for (const status of [302, 303, 307]) {
    await withServer(always({ status, headers: { location: 'http://[::1' } }), async (server) => {
      for (const method of ['GET', 'POST']) {
        const init = method === 'GET' ? {} : { method, body: 'order' };
        const seen: boolean[] = [];
        const fetch = createFetch({
          use: [
            quickRetry(),
            async function read(call, next) {
              try {
                return await next(call);
              } finally {
                seen.push(call.bag.has(RAN));
              }
            },
          ],
        });
        const before = server.requests.length;
        const error = await rejection(() => fetch(`${server.origin}/orders`, init));
        const what = `${method} answered ${status}: ${String(error)}`;
        assert.ok(error instanceof BreakwaterError, what);
        assert.deepEqual(
          [
            error.code,
            error.request?.method,
            /failed: redirect not followed: bad Location$/.test(error.message),
          ],
          ['BAD_REDIRECT', method, true],
          what,
        );
        assert.deepEqual(seen, [true], `${what}: marked as may-have-run`);
        assert.equal(server.requests.length - before, 1, `${what}: sent once, not resent`);
      }
    });
  }
});

test("each runtime's words for a Location that does not parse are BAD_REDIRECT; a URL given to fetch itself that does not parse is not", () => {
  const request = requestSummary('k', 'POST', 'http://127.0.0.1:1/orders');
  const invalid = () => Object.assign(new TypeError('Invalid URL'), { code: 'ERR_INVALID_URL' });
  const code = (error: unknown) => (error instanceof BreakwaterError ? error.code : 'none');
  const node = new TypeError('fetch failed', { cause: invalid() });
  const deno = new TypeError("Invalid URL: 'http://[::1' with base 'http://127.0.0.1:1/orders'");
  const bun = Object.assign(
    new TypeError('RedirectURLInvalid: Redirect URL in Location header is invalid.'),
    {
      code: 'RedirectURLInvalid',
    },
  );
  const follower = new TypeError('redirect 303 not followed: bad Location');
  for (const error of [node, deno, bun, follower]) {
    assert.equal(code(fetchFailure(error, request)), 'BAD_REDIRECT', String(error));
    assert.equal(normalizeNetworkError(error, request), undefined, `${String(error)}: no network failure`);
  }
  // fetch's refusal of its own input, as each runtime words it: the caller's mistake.
  const nodeOwn = new TypeError('Failed to parse URL from http://[::1', { cause: invalid() });
  const denoOwn = new TypeError("Invalid URL: 'http://[::1'");
  const bunOwn = Object.assign(new TypeError('fetch() URL is invalid'), { code: 'ERR_INVALID_URL' });
  for (const error of [nodeOwn, denoOwn, bunOwn]) assert.equal(code(fetchFailure(error, request)), 'none');
});

test('under deno --location, a call whose own URL does not parse fails as fetch refuses it (never sent), not as a redirect the server never sent; a relative URL and the location itself answered with a bad Location are BAD_REDIRECT', async () => {
  // Deno reads a fetch's URL against the location and refuses one that does not parse as it
  // refuses a redirect's Location read against the hop's URL: `Invalid URL: '<x>' with base
  // '<y>'`. Both read as BAD_REDIRECT, marked as may-have-run. One child process, from any runtime.
  await withServer(always({ status: 302, headers: { location: 'http://[::1' } }), async (server) => {
    const page = `${server.origin}/orders`;
    const child = start(
      DENO,
      [
        'run',
        '--no-lock',
        `--location=${page}`,
        '--allow-net=127.0.0.1',
        '--allow-read',
        '--import-map=test/deno-import-map.json',
        'test/helpers/deno-location.ts',
      ],
      {},
    );
    try {
      assert.equal((await child.closed).code, 0, child.output());
    } finally {
      await child.stop();
    }
    const line = /^\{.*\}$/m.exec(child.output())?.[0];
    assert.ok(line, child.output());
    const refused = { name: 'TypeError', ran: false, secret: false };
    const redirect = {
      name: 'BreakwaterError',
      code: 'BAD_REDIRECT',
      key: server.origin,
      ran: true,
      secret: false,
    };
    assert.deepEqual(JSON.parse(line), {
      'http://[::1': refused,
      '//[::1/x': refused,
      '/orders?token=s3cret': { ...redirect, url: `${page}?token=[redacted]` },
      [page]: { ...redirect, url: page },
    });
    assert.deepEqual(
      server.requests.map((request) => request.url),
      ['/orders?token=s3cret', '/orders'],
    );
  });
});

test("Deno's Invalid URL with a base is the call's own only when its URL does not parse and the base is the page's location: a bad Location read against the location's own URL, or against a hop of the caller's own fetch, is BAD_REDIRECT", () => {
  const code = (error: unknown) => (error instanceof BreakwaterError ? error.code : 'none');
  const deno = (base: string) => new TypeError(`Invalid URL: 'http://[::1' with base '${base}'`);
  const own = Object.getOwnPropertyDescriptor(globalThis, 'location');
  const onPage = (location: PropertyDescriptor) => Object.defineProperty(globalThis, 'location', location);
  try {
    onPage({ value: { href: 'http://127.0.0.1:1/orders' }, configurable: true });
    const page = deno('http://127.0.0.1:1/orders');
    assert.equal(code(fetchFailure(page, requestSummary('k', 'GET', 'http://[::1'))), 'none');
    assert.equal(
      code(fetchFailure(page, requestSummary('k', 'GET', 'http://127.0.0.1:1/orders'))),
      'BAD_REDIRECT',
    );
    assert.equal(
      code(fetchFailure(deno('http://api.test/x'), requestSummary('k', 'GET', '/x'))),
      'BAD_REDIRECT',
    );
    // Deno 1 without --location: reading location throws.
    onPage({ get: () => assert.fail('no location'), configurable: true });
    assert.equal(
      code(fetchFailure(deno('http://api.test/x'), requestSummary('k', 'GET', '/x'))),
      'BAD_REDIRECT',
    );
  } finally {
    if (own) Object.defineProperty(globalThis, 'location', own);
    else delete (globalThis as { location?: unknown }).location;
  }
});

test('a POST answered 307 to a host that does not resolve reaches the server once, and its error says maybe sent', async () => {
  await withServer(
    always({ status: 307, headers: { location: 'http://breakwater-test.invalid/orders/1' } }),
    async (server) => {
      const fetch = createFetch({ use: [quickRetry()] });
      const error = await rejection(() =>
        fetch(`${server.origin}/orders`, { method: 'POST', body: 'order' }),
      );
      assert.equal(server.requests.length, 1);
      assert.deepEqual(verdict(error), { code: 'ENOTFOUND', phase: 'send', sent: 'maybe' });
    },
  );
});

test('a POST keyed by its caller, answered 303 to a port that refuses the connection, says maybe sent: retry({ resend: "never" }) does not resend it', async () => {
  const dead = await closedPort();
  await withServer(
    always({ status: 303, headers: { location: `http://127.0.0.1:${dead}/orders/1` } }),
    async (server) => {
      // The key makes it safe to resend, not unsent: on Bun the chain followed only calls
      // that were not, and Bun's refusal at the hop read as never sent (resent twice).
      const fetch = createFetch({ use: [quickRetry('never')] });
      const init = { method: 'POST', body: 'order', headers: { 'idempotency-key': 'order-1' } };
      const error = await rejection(() => fetch(`${server.origin}/orders`, init));
      assert.deepEqual(verdict(error), { code: 'ECONNREFUSED', phase: 'send', sent: 'maybe' });
      assert.equal(server.requests.length, 1, 'the POST that ran is not resent');
    },
  );
});

test('a GET answered 302, 303 or 307 to a port that refuses the connection says maybe sent: retry({ resend: "never" }) does not resend it', async () => {
  const dead = await closedPort();
  for (const status of [302, 303, 307]) {
    await withServer(
      always({ status, headers: { location: `http://127.0.0.1:${dead}/orders/1` } }),
      async (server) => {
        // The caller said never: on Bun, whose own fetch followed a GET and named no hop, the
        // refusal read as never sent, and the GET that ran went twice more.
        const fetch = createFetch({ use: [quickRetry('never')] });
        const error = await rejection(() => fetch(`${server.origin}/orders`));
        assert.deepEqual(verdict(error), { code: 'ECONNREFUSED', phase: 'send', sent: 'maybe' }, `${status}`);
        assert.equal(server.requests.length, 1, `${status}: the GET that ran is not resent`);
      },
    );
  }
});

test('a Request without a body (as ky sends a GET) answered 303 to a port that refuses the connection says maybe sent: retry({ resend: "never" }) does not resend it', async () => {
  const dead = await closedPort();
  await withServer(
    always({ status: 303, headers: { location: `http://127.0.0.1:${dead}/orders/1` } }),
    async (server) => {
      // On Bun the chain left a Request to Bun's fetch, whose refusal at the hop names no
      // target: it read as never sent, and the GET that ran went twice more.
      const fetch = createFetch({ use: [quickRetry('never')] });
      const error = await rejection(() => fetch(new Request(`${server.origin}/orders`)));
      assert.deepEqual(verdict(error), { code: 'ECONNREFUSED', phase: 'send', sent: 'maybe' });
      assert.equal(server.requests.length, 1, 'the GET that ran is not resent');
    },
  );
});

test("a Request without a body followed to another origin answers as fetch's own: redirected, the last URL, its headers on the hop but Authorization", async () => {
  await withServer(always({ status: 200, body: 'done' }), async (other) => {
    await withServer(
      always({ status: 302, headers: { location: `${other.origin}/done` } }),
      async (server) => {
        const fetch = createFetch({ use: [] });
        const request = new Request(`${server.origin}/start`, {
          headers: { authorization: 'Bearer s3cret', 'x-trace': 't' },
        });
        const response = await fetch(request);
        assert.deepEqual(
          [response.status, response.redirected, response.url, await response.text()],
          [200, true, `${other.origin}/done`, 'done'],
        );
        const [hop] = other.requests;
        assert.ok(hop, 'the hop reached the other origin');
        assert.deepEqual(
          { authorization: hop.headers.authorization, trace: hop.headers['x-trace'] },
          { authorization: undefined, trace: 't' },
        );
      },
    );
  });
});

test("a Request's own redirect mode is kept: 'manual' hands back the 3xx, 'error' rejects", async () => {
  await withServer(always({ status: 302, headers: { location: '/elsewhere' } }), async (server) => {
    const fetch = createFetch({ use: [] });
    const manual = await fetch(new Request(`${server.origin}/start`, { redirect: 'manual' }));
    assert.equal(manual.status, 302);
    await manual.body?.cancel();
    await rejection(() => fetch(new Request(`${server.origin}/start`, { redirect: 'error' })));
    assert.deepEqual(
      server.requests.map((request) => request.url),
      ['/start', '/start'],
    );
  });
});

test('a Request with a text body answered 307 is sent again with its body, as fetch does', async () => {
  let n = 0;
  await withServer(
    () => (n++ === 0 ? { status: 307, headers: { location: '/orders/2' } } : { status: 201 }),
    async (server) => {
      const fetch = createFetch({ use: [] });
      const response = await fetch(new Request(`${server.origin}/orders`, { method: 'POST', body: 'order' }));
      assert.equal(response.status, 201);
      await response.body?.cancel();
      assert.deepEqual(
        server.requests.map((request) => [request.method, request.url, request.text]),
        [
          ['POST', '/orders', 'order'],
          ['POST', '/orders/2', 'order'],
        ],
      );
    },
  );
});

test('a breakwater fetch under another’s retry: a POST its own idempotencyKey() keyed, answered 303 to a port that refuses the connection, is not resent under a new key', async () => {
  const dead = await closedPort();
  await withServer(
    always({ status: 303, headers: { location: `http://127.0.0.1:${dead}/orders/1` } }),
    async (server) => {
      const inner = createFetch({ use: [quickRetry(), idempotencyKey()] });
      const fetch = createFetch({ fetch: inner, use: [quickRetry()] });
      const error = await rejection(() =>
        fetch(`${server.origin}/orders`, { method: 'POST', body: 'order' }),
      );
      assert.equal(verdict(error).sent, 'maybe');
      // The inner retry may resend under its key (the server dedupes on it); the outer one,
      // which knows no key, must not: each of its resends is a new key, a new order.
      const keys = new Set(server.requests.map((request) => request.headers['idempotency-key']));
      assert.equal(keys.size, 1, `one key, one order: got ${keys.size}`);
    },
  );
});

test('a POST refused at its own URL is still not sent, and resent', async () => {
  const url = `http://127.0.0.1:${await closedPort()}/orders`;
  let attempts = 0;
  const fetch = createFetch({
    use: [quickRetry()],
    onEvent: (event) => {
      if (event.type === 'attempt') attempts++;
    },
  });
  const error = await rejection(() => fetch(url, { method: 'POST', body: 'order' }));
  assert.equal(attempts, 3);
  assert.deepEqual(verdict(error), { code: 'ECONNREFUSED', phase: 'connect', sent: 'no' });
});

test("a POST refused through a fetch of the caller's own that sends elsewhere cannot be told: not sent", async () => {
  // The caller's fetch may send elsewhere than the call's URL (a service map, a sidecar):
  // a refusal there is not compared with the call's URL.
  const dead = `http://127.0.0.1:${await closedPort()}/orders`;
  const elsewhere: FetchLike = (_input, init) => globalThis.fetch(dead, init);
  const fetch = createFetch({ fetch: elsewhere, use: [] });
  const error = await rejection(() => fetch('http://127.0.0.1:9/orders', { method: 'POST', body: 'order' }));
  assert.deepEqual(verdict(error), { code: 'ECONNREFUSED', phase: 'connect', sent: 'no' });
});

test('a POST whose own host does not resolve is still not sent', async () => {
  const fetch = createFetch({ use: [] });
  const error = await rejection(() =>
    fetch('http://breakwater-test.invalid/orders', { method: 'POST', body: 'x' }),
  );
  assert.deepEqual(verdict(error), { code: 'ENOTFOUND', phase: 'connect', sent: 'no' });
});

/** undici's `fetch failed` around a connect refusal at `address`:`port`. */
function refusedAt(address: string, port: number): TypeError {
  const cause = Object.assign(new Error(`connect ECONNREFUSED ${address}:${port}`), {
    code: 'ECONNREFUSED',
    syscall: 'connect',
    address,
    port,
  });
  return new TypeError('fetch failed', { cause });
}

/** What `error` normalises to for a POST to `url`. */
function against(url: string, error: unknown): { code: string; phase: string; sent: string } {
  return verdict(normalizeNetworkError(error, requestSummary('k', 'POST', url), undefined, url));
}

const MAYBE = { code: 'ECONNREFUSED', phase: 'send', sent: 'maybe' };
const NO = { code: 'ECONNREFUSED', phase: 'connect', sent: 'no' };

test("undici's refusal at another address than an IP-literal host's, on the same port, was a redirect hop's", () => {
  assert.deepEqual(against('http://10.0.0.1/x', refusedAt('10.0.0.2', 80)), MAYBE);
  assert.deepEqual(against('https://[::1]/x', refusedAt('::2', 443)), MAYBE);
});

test("undici's refusal at the request's own address and effective port is not sent", () => {
  assert.deepEqual(against('http://10.0.0.1/x', refusedAt('10.0.0.1', 80)), NO);
  assert.deepEqual(against('https://[::1]/x', refusedAt('::1', 443)), NO);
  assert.deepEqual(against('http://127.0.0.1:8080/x?token=s3cret', refusedAt('127.0.0.1', 8080)), NO);
});

test("undici's refusal at a named host's port but any address cannot be told from its own: not sent", () => {
  assert.deepEqual(against('https://api.example.com/x', refusedAt('203.0.113.9', 443)), NO);
  assert.deepEqual(against('http://localhost/x', refusedAt('/var/run/docker.sock', 80)), NO);
});

test("undici's refusal at another port than a named host's was a redirect hop's", () => {
  assert.deepEqual(against('https://api.example.com/x', refusedAt('203.0.113.9', 80)), MAYBE);
});

test("Deno's refusal naming another origin was a redirect hop's; its own origin, not sent", () => {
  const deno = (url: string) =>
    new TypeError('fetch failed', {
      cause: new Error(
        `error sending request for url (${url}): client error (Connect): tcp connect error: Connection refused (os error 111)`,
      ),
    });
  assert.deepEqual(against('https://api.example.com/orders', deno('https://other.example.com/done')), MAYBE);
  assert.deepEqual(against('https://api.example.com/orders', deno('http://api.example.com/orders')), MAYBE);
  assert.deepEqual(
    against('https://api.example.com/orders?k=v', deno('https://api.example.com/orders?k=v')),
    NO,
  );
  assert.deepEqual(against('https://API.example.com:443/orders', deno('https://api.example.com/orders')), NO);
});

test('without the URL fetch was called with, a refusal is not compared: not sent', () => {
  const error = refusedAt('10.0.0.2', 81);
  assert.deepEqual(verdict(normalizeNetworkError(error)), NO);
  assert.deepEqual(
    verdict(normalizeNetworkError(error, requestSummary('k', 'POST', 'http://10.0.0.1/x'))),
    NO,
  );
});

test("undici's refusal at a named host that ends in a digit (a compose service, a StatefulSet pod) cannot be told from its own: not sent", () => {
  // Such a name is no IP literal (WHATWG URL parses a host as IPv4 only when its last label
  // is a number): it resolves anywhere, as any name does. Read as an IP literal, every
  // refusal of `http://mcp-server-1:3000` said "maybe sent", and its POSTs were not resent.
  assert.deepEqual(against('http://mcp-server-1:3000/mcp', refusedAt('172.18.0.5', 3000)), NO);
  assert.deepEqual(against('http://worker2/x', refusedAt('10.0.0.7', 80)), NO);
  assert.deepEqual(against('https://api.v2/x', refusedAt('::1', 443)), NO);
  // An IPv4 host however written is parsed to its dotted form, and compared.
  assert.deepEqual(against('http://2130706433:3000/x', refusedAt('127.0.0.1', 3000)), NO);
  assert.deepEqual(against('http://127.0.0.1.:3000/x', refusedAt('127.0.0.2', 3000)), MAYBE);
});
