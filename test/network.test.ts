import assert from 'node:assert/strict';
import { connect, createServer as createTcpServer, type Server, type Socket } from 'node:net';
import { test } from 'node:test';
import { createServer as createTlsServer } from 'node:tls';
import { inspect } from 'node:util';
import { runInNewContext } from 'node:vm';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { limitedBody } from '../src/body-limit.ts';
import type { Middleware } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import { BreakwaterError, NetworkError, requestSummary } from '../src/errors.ts';
import { normalizeNetworkError } from '../src/network.ts';
import { definePolicy } from '../src/policy.ts';
import { always, type Behaviour, closedPort, type Handler, withServer } from './helpers/server.ts';

/**
 * Which runtime runs the suite, for the few rows where runtimes report a failure
 * differently. Read from globals by name only: the suite itself stays portable.
 */
const runtime: 'node' | 'deno' | 'bun' = 'Bun' in globalThis ? 'bun' : 'Deno' in globalThis ? 'deno' : 'node';

/** A name under `.invalid` (RFC 6761 §6.4): guaranteed never to resolve. */
const UNRESOLVABLE_URL = 'http://breakwater-test.invalid/';

/** Upper bound for the one DNS lookup: a `.invalid` lookup fails in milliseconds here. */
const DNS_LOOKUP_LIMIT_MS = 5_000;

/** How long the hanging server is left hanging before the caller aborts. */
const ABORT_AFTER_MS = 30;

/** Runs `fn`, expecting it to reject, and returns what it rejected with. */
async function rejection(fn: () => Promise<unknown>): Promise<unknown> {
  try {
    await fn();
  } catch (error) {
    return error;
  }
  assert.fail('expected a rejection');
}

/** Normalises `error` and checks that it became a NetworkError with these fields. */
function assertNetwork(
  error: unknown,
  expected: { code: string; phase: string; sent: string },
  stage?: 'headers' | 'body',
): NetworkError {
  const normalised = normalizeNetworkError(error, undefined, stage);
  assert.ok(normalised instanceof NetworkError, `not recognised as a network error: ${String(error)}`);
  assert.deepEqual({ code: normalised.code, phase: normalised.phase, sent: normalised.sent }, expected);
  assert.equal(normalised.cause, error);
  return normalised;
}

/** A `fetch failed` TypeError around `cause`, as undici (Node) throws it. */
function undici(cause: unknown): TypeError {
  return new TypeError('fetch failed', { cause });
}

/** A system error with Node's fields. */
function systemError(message: string, fields: Record<string, unknown>): Error {
  return Object.assign(new Error(message), fields);
}

// Real failures on real sockets, through the runtime's own fetch.

test('a refused connection is ECONNREFUSED during connect, not sent', async () => {
  const port = await closedPort();
  const error = await rejection(() => fetch(`http://127.0.0.1:${port}/`, { method: 'POST', body: 'x' }));
  assertNetwork(error, { code: 'ECONNREFUSED', phase: 'connect', sent: 'no' });
});

test('a name that does not resolve is ENOTFOUND during connect, not sent', async () => {
  // The only test that leaves loopback: one lookup of a .invalid name, which fails at
  // once. The abort only bounds a broken resolver; it fires in no normal run, and if
  // it did, its AbortError would not normalise and the test would fail loudly.
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), DNS_LOOKUP_LIMIT_MS);
  try {
    const error = await rejection(() => fetch(UNRESOLVABLE_URL, { signal: controller.signal }));
    assertNetwork(error, { code: 'ENOTFOUND', phase: 'connect', sent: 'no' });
  } finally {
    clearTimeout(timer);
  }
});

test('https to a plain-HTTP server is a TLS failure, not sent where the runtime says it came in connect', async () => {
  await withServer(always({}), async (server) => {
    const error = await rejection(() =>
      fetch(`https://127.0.0.1:${server.port}/`, { method: 'POST', body: 'x' }),
    );
    // Bun reports this exactly like a TLS failure after the request went out (EPROTO,
    // "The TLS handshake failed"; see the TLS tests below), so it gets the safe side.
    const expected =
      runtime === 'bun'
        ? { code: 'TLS', phase: 'send', sent: 'maybe' }
        : { code: 'TLS', phase: 'connect', sent: 'no' };
    assertNetwork(error, expected);
    assert.equal(server.requests.length, 0);
  });
});

test('a reset right after accept is ECONNRESET, not sent where the runtime says it came in connect', async () => {
  await withServer(
    always({}),
    async (server) => {
      const error = await rejection(() => fetch(server.origin, { method: 'POST', body: 'x' }));
      // Node reports `connect ECONNRESET` (syscall "connect") and Deno `client error
      // (Connect): tcp connect error: Connection reset by peer`: both failed before a
      // byte was written. Bun reports this exactly like a reset after the request was
      // read (code ECONNRESET, nothing else), so it gets the safe side.
      const expected =
        runtime === 'bun'
          ? { code: 'ECONNRESET', phase: 'send', sent: 'maybe' }
          : { code: 'ECONNRESET', phase: 'connect', sent: 'no' };
      assertNetwork(error, expected);
      assert.equal(server.requests.length, 0);
    },
    { onConnect: 'reset' },
  );
});

test('a reset after the server read the request is ECONNRESET during send, maybe sent', async () => {
  await withServer(always({ reset: 'after-read' }), async (server) => {
    const error = await rejection(() => fetch(server.origin, { method: 'POST', body: 'x' }));
    assertNetwork(error, { code: 'ECONNRESET', phase: 'send', sent: 'maybe' });
    assert.equal(server.requests.length, 1);
  });
});

test('a reset in the middle of the body breaks the body stream: response phase, maybe sent', async () => {
  await withServer(always({ reset: 'mid-body', body: 'partial' }), async (server) => {
    const response = await fetch(server.origin, { method: 'POST', body: 'x' });
    assert.equal(response.status, 200);
    const error = await rejection(() => response.text());
    // Node (`terminated`, cause `read ECONNRESET`) and Bun (code ECONNRESET) name the
    // reset; Deno only says `error reading a body from connection`.
    const code = runtime === 'deno' ? 'ENETWORK' : 'ECONNRESET';
    assertNetwork(error, { code, phase: 'response', sent: 'maybe' }, 'body');
  });
});

test('a server that closes without a response is ECLOSED during send, maybe sent', async () => {
  await withServer(always({ close: 'no-response' }), async (server) => {
    const error = await rejection(() => fetch(server.origin, { method: 'POST', body: 'x' }));
    // Node says `other side closed` (UND_ERR_SOCKET) and Deno `connection closed before
    // message completed`. Bun reports a clean close exactly like a reset (code
    // ECONNRESET): the code differs, the verdict (maybe sent) is the same.
    const code = runtime === 'bun' ? 'ECONNRESET' : 'ECLOSED';
    assertNetwork(error, { code, phase: 'send', sent: 'maybe' });
    assert.equal(server.requests.length, 1);
  });
});

test("a caller's abort of a hanging request comes back as its own reason and is not normalised", async () => {
  await withServer(always({ hang: true }), async (server) => {
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    const timer = setTimeout(() => controller.abort(reason), ABORT_AFTER_MS);
    try {
      const error = await rejection(() => fetch(server.origin, { signal: controller.signal }));
      assert.equal(error, reason);
      assert.equal(normalizeNetworkError(error), undefined);
    } finally {
      clearTimeout(timer);
    }
  });
});

test('an abort without a reason rejects with an AbortError, which is not normalised', async () => {
  await withServer(always({ hang: true }), async (server) => {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), ABORT_AFTER_MS);
    try {
      const error = await rejection(() => fetch(server.origin, { signal: controller.signal }));
      assert.equal((error as Error).name, 'AbortError');
      assert.equal(normalizeNetworkError(error), undefined);
    } finally {
      clearTimeout(timer);
    }
  });
});

test("a redirect loop is fetch's own refusal, not a network error", async () => {
  await withServer(always({ status: 302, headers: { location: '/' } }), async (server) => {
    const error = await rejection(() => fetch(server.origin));
    assert.equal(normalizeNetworkError(error), undefined);
  });
});

test('a normalised error names the request, redacted, and keeps the raw error as its cause', async () => {
  const port = await closedPort();
  const url = `http://user:secret@127.0.0.1:${port}/v1/things?token=abc`;
  const error = await rejection(() => fetch(`http://127.0.0.1:${port}/v1/things?token=abc`));
  const normalised = normalizeNetworkError(error, requestSummary('local', 'post', url));
  assert.ok(normalised instanceof NetworkError, 'normalised instanceof NetworkError');
  assert.equal(normalised.cause, error);
  assert.equal(normalised.request?.method, 'POST');
  assert.match(normalised.message, /POST .*\/v1\/things/);
  assert.match(normalised.message, /ECONNREFUSED during connect \(not sent\)/);
  assert.doesNotMatch(normalised.message, /secret|abc/);
});

// TLS on loopback. A self-signed certificate for IP 127.0.0.1 (P-256, CA:FALSE, valid
// 2000-2100), made once with `openssl ca -selfsign`; the key is a test key, used
// nowhere else.
const TEST_CERT = `-----BEGIN CERTIFICATE-----
MIIBfzCCASSgAwIBAgIBATAKBggqhkjOPQQDAjAUMRIwEAYDVQQDDAkxMjcuMC4w
LjEwIBcNMDAwMTAxMDAwMDAwWhgPMjEwMDAxMDEwMDAwMDBaMBQxEjAQBgNVBAMM
CTEyNy4wLjAuMTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABBOAGAAeHG9RGyMP
a1qisTgxaEMJeT+jr6aP7oyJTyKRWGY6rwlkQGCTO5K3MBRTQkGlTbn3V2q+k+k+
Hgjff6+jZTBjMA8GA1UdEQQIMAaHBH8AAAEwDAYDVR0TAQH/BAIwADATBgNVHSUE
DDAKBggrBgEFBQcDATAOBgNVHQ8BAf8EBAMCB4AwHQYDVR0OBBYEFHbvx5ZxVyQw
ThtU1vCrdLJ04gI7MAoGCCqGSM49BAMCA0kAMEYCIQDXki9pZTWTBnF1DLqBCY8H
c8yg0XvrXJPffBjBWtM4bgIhAOH5mgxBOm/AmTp76xC+CXCQnUb9qfY0s1D53FnL
pgaf
-----END CERTIFICATE-----
`;
const TEST_KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgIBE8PLKaxS8oH+ne
8J3V8Zr2TJlAqg3TceUn0Q/MggWhRANCAAQTgBgAHhxvURsjD2taorE4MWhDCXk/
o6+mj+6MiU8ikVhmOq8JZEBgkzuStzAUU0JBpU2591dqvpPpPh4I33+v
-----END PRIVATE KEY-----
`;

/** Starts `server` on 127.0.0.1, port 0, and returns the port. */
async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as { port: number }).port;
}

/**
 * A TLS server on loopback behind a TCP relay. Once the TLS server has read request
 * bytes, the relay stops passing its answer on and sends the client plain text
 * instead: a TLS failure that strikes after the request went out (a middlebox or a
 * broken server). Calls `run` with the relay's origin and how many request bytes
 * the TLS server got so far; closes everything afterwards.
 */
async function withTlsBrokenAfterRequest(
  run: (origin: string, received: () => number) => Promise<void>,
): Promise<void> {
  const sockets = new Set<Socket>();
  const track = (socket: Socket): Socket => {
    sockets.add(socket);
    socket.on('error', () => {});
    return socket;
  };
  let received = 0;
  let requestRead = (): void => {};
  const gotRequest = new Promise<void>((resolve) => {
    requestRead = resolve;
  });
  const tlsServer = createTlsServer({ cert: TEST_CERT, key: TEST_KEY }, (socket) => {
    track(socket).on('data', (chunk: Uint8Array) => {
      received += chunk.byteLength;
      requestRead();
    });
  });
  tlsServer.on('tlsClientError', () => {});
  const relay = createTcpServer((client) => {
    const upstream = track(connect(tlsPort, '127.0.0.1'));
    track(client).pipe(upstream);
    upstream.pipe(client);
    void gotRequest.then(() => {
      upstream.unpipe(client);
      client.end('HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n');
    });
  });
  const tlsPort = await listen(tlsServer);
  const relayPort = await listen(relay);
  try {
    await run(`https://127.0.0.1:${relayPort}/`, () => received);
  } finally {
    requestRead();
    for (const socket of sockets) socket.destroy();
    await Promise.all([tlsServer, relay].map((server) => new Promise((resolve) => server.close(resolve))));
  }
}

/**
 * Fetch options that make the runtime trust {@link TEST_CERT}, and a function that
 * releases them. Deno takes a client (`Deno.createHttpClient`), Bun a `tls` option;
 * Node's fetch has no per-request option, so there the certificate stays untrusted.
 */
function trustTestCert(): { init: RequestInit & { client?: unknown; tls?: unknown }; release(): void } {
  const deno = (globalThis as { Deno?: { createHttpClient(o: { caCerts: string[] }): { close(): void } } })
    .Deno;
  if (deno) {
    const client = deno.createHttpClient({ caCerts: [TEST_CERT] });
    return { init: { client }, release: () => client.close() };
  }
  return { init: runtime === 'bun' ? { tls: { ca: TEST_CERT } } : {}, release: () => {} };
}

test('a TLS failure after the server read the request is maybe sent: not sent only when nothing arrived', async () => {
  await withTlsBrokenAfterRequest(async (origin, received) => {
    const { init, release } = trustTestCert();
    try {
      const error = await rejection(() => fetch(origin, { ...init, method: 'POST', body: 'x' }));
      if (runtime === 'node') {
        // Node's fetch cannot be told to trust the certificate: the handshake fails
        // (DEPTH_ZERO_SELF_SIGNED_CERT) before a request byte is written.
        assertNetwork(error, { code: 'TLS', phase: 'connect', sent: 'no' });
        assert.equal(received(), 0);
      } else {
        // Deno says `received corrupt message of type InvalidContentType`, without
        // hyper's `(Connect)`; Bun says `EPROTO: The TLS handshake failed`, exactly as
        // for https to a plain-HTTP port. Either way the server had the request.
        assert.ok(received() > 0, 'the TLS server read the request');
        assertNetwork(error, { code: 'TLS', phase: 'send', sent: 'maybe' });
      }
    } finally {
      release();
    }
  });
});

test('an untrusted certificate is a TLS failure during connect, not sent', async () => {
  await withTlsBrokenAfterRequest(async (origin, received) => {
    const error = await rejection(() => fetch(origin, { method: 'POST', body: 'x' }));
    assertNetwork(error, { code: 'TLS', phase: 'connect', sent: 'no' });
    assert.equal(received(), 0);
  });
});

/** A body of varied JSON: each of its encodings is long enough (kilobytes) to corrupt mid-way. */
const PLAIN_BODY = Array.from({ length: 2_000 }, (_, i) => `{"id":${i},"result":${i * i}}`).join('\n');

/** A middleware that reads bodies through `limitedBody()`, as the MCP and A2A adapters do. */
const throughLimit: Middleware = async (call, next) => limitedBody(await next(call), 1_000_000, call);

test('a corrupt gzip, deflate or br body on an intact connection is no network failure: the error passes on, its URLs redacted', async () => {
  // Node says `terminated` with a zlib cause (Z_DATA_ERROR; brotli's ERR__ERROR_FORMAT_*),
  // Deno `deflate decompression error: ...` / `brotli error` / `unexpected end of file`,
  // Bun `ZlibError fetching "<url>"` (code ZlibError, BrotliDecompressionError). The
  // server answered in full and the connection is fine: a breaker must not count it as
  // a network failure, nor retry() resend on it.
  const garbage = new TextEncoder().encode('not compressed at all, not at all');
  const corrupt = (encoded: Uint8Array): Uint8Array =>
    new Uint8Array([...encoded.subarray(0, 30), ...garbage]);
  const gzip = gzipSync(PLAIN_BODY);
  // A valid stream cut short, the connection intact: its bytes are wrong, not the network.
  const truncated = gzip.subarray(0, gzip.length / 2);
  const cases: [coding: string, body: Uint8Array][] = [
    ['gzip', corrupt(gzip)],
    ['deflate', corrupt(deflateSync(PLAIN_BODY))],
    ['br', corrupt(brotliCompressSync(PLAIN_BODY))],
    ['gzip', truncated],
  ];
  for (const [coding, body] of cases) {
    await withServer(always({ headers: { 'content-encoding': coding }, body }), async ({ origin }) => {
      const url = `${origin}/v1/things?token=s3cret`;
      const what = `${coding}, ${body.length} bytes`;
      const plain = await createFetch({ use: [] })(url);
      const raw = await plain.text().then(
        () => undefined,
        (error: unknown) => error,
      );
      if (raw === undefined) {
        // Node's fetch reads what arrived of a cut-short stream without complaint; Deno's
        // decodes no deflate and hands its bytes on as they came.
        assert.ok(
          (runtime === 'node' && body === truncated) || (runtime === 'deno' && coding === 'deflate'),
          `${what}: read without an error`,
        );
        return;
      }
      assert.equal(normalizeNetworkError(raw, requestSummary('local', 'GET', url), 'body'), undefined, what);
      const limited = await createFetch({ use: [throughLimit] })(url);
      const error = await rejection(() => limited.text());
      assert.ok(error instanceof Error && !(error instanceof NetworkError), `${what}: ${String(error)}`);
      assert.equal(error.name, (raw as Error).name, what);
      assert.doesNotMatch(error.message, /s3cret/, what);
    });
  }
});

test('a gzip body cut short by the connection closing is a network failure: response phase, maybe sent', async () => {
  const gzip = gzipSync(PLAIN_BODY);
  const sockets = new Set<Socket>();
  const server = createTcpServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.once('data', () => {
      socket.write(`HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: ${gzip.length}\r\n\r\n`);
      // Half the stream, then the connection ends: the rest never comes.
      socket.end(gzip.subarray(0, gzip.length / 2));
    });
  });
  const port = await listen(server);
  try {
    const response = await createFetch({ use: [throughLimit] })(`http://127.0.0.1:${port}/`);
    const error = await rejection(() => response.text());
    // Node: `terminated` (UND_ERR_SOCKET or a Content-Length mismatch); Deno: `error
    // reading a body from connection`; Bun: ECONNRESET.
    assert.ok(error instanceof NetworkError, String(error));
    assert.deepEqual({ phase: error.phase, sent: error.sent }, { phase: 'response', sent: 'maybe' });
  } finally {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  }
});

// Constructed errors: shapes that cannot be provoked on loopback here (other
// runtimes, other platforms, failures that need a remote network).

test('constructed: browser fetch failures are ENETWORK during send, maybe sent', () => {
  for (const message of [
    'Failed to fetch', // Chromium
    'NetworkError when attempting to fetch resource.', // Firefox
    'Load failed', // Safari 17+
    'The network connection was lost.', // Safari
  ]) {
    assertNetwork(new TypeError(message), { code: 'ENETWORK', phase: 'send', sent: 'maybe' });
  }
});

test("constructed: workerd's Network connection lost, a plain Error, is ENETWORK during send, maybe sent", () => {
  // workerd 1.20261117 throws exactly this (an Error, not a TypeError, with an own
  // `retryable: true`) from fetch() for a refused connect, a reset before or after the
  // request was read and a close without a response, and from reading the body for a
  // reset mid-body: provoked on 127.0.0.1 through `workerd serve` in
  // test/network-workerd.test.ts, which runs the normaliser on workerd itself.
  const lost = () => Object.assign(new Error('Network connection lost.'), { retryable: true });
  assertNetwork(lost(), { code: 'ENETWORK', phase: 'send', sent: 'maybe' });
  assertNetwork(lost(), { code: 'ENETWORK', phase: 'response', sent: 'maybe' }, 'body');
  // The same words from anything else (an app's own error class) are not fetch's.
  const custom = Object.assign(new Error('Network connection lost.'), { name: 'UpstreamError' });
  assert.equal(normalizeNetworkError(custom), undefined);
});

test("constructed: workerd's `internal error; reference = <id>`, what its fetch throws for a name that does not resolve, is ENETWORK during send, maybe sent (it names no DNS failure)", () => {
  // workerd 1.20261117 logs `failed to lookup address information: Name or service not
  // known` and throws only this (an Error with no code, no cause, no `retryable`): provoked
  // with breakwater-test.invalid in test/network-workerd.test.ts. It says the same of other
  // faults inside workerd, so it is no proof that nothing was sent.
  const internal = () => new Error('internal error; reference = d8vmlhfeggcknivi19nsoa91');
  assertNetwork(internal(), { code: 'ENETWORK', phase: 'send', sent: 'maybe' });
  assertNetwork(internal(), { code: 'ENETWORK', phase: 'response', sent: 'maybe' }, 'body');
  // Not from fetch: another class, or the words elsewhere in a message.
  assert.equal(normalizeNetworkError(new TypeError('internal error; reference = abc')), undefined);
  assert.equal(normalizeNetworkError(new Error('an internal error; reference = abc')), undefined);
});

test('constructed: undici timeouts are ETIMEDOUT, not sent only when the connect timed out', () => {
  const connect = systemError(
    'Connect Timeout Error (attempted address: api.example.com:443, timeout: 10000ms)',
    {
      code: 'UND_ERR_CONNECT_TIMEOUT',
    },
  );
  assertNetwork(undici(connect), { code: 'ETIMEDOUT', phase: 'connect', sent: 'no' });
  const headers = systemError('Headers Timeout Error', { code: 'UND_ERR_HEADERS_TIMEOUT' });
  assertNetwork(undici(headers), { code: 'ETIMEDOUT', phase: 'send', sent: 'maybe' });
  const tcp = systemError('connect ETIMEDOUT 10.0.0.1:443', { code: 'ETIMEDOUT', syscall: 'connect' });
  assertNetwork(undici(tcp), { code: 'ETIMEDOUT', phase: 'connect', sent: 'no' });
});

test('constructed: a temporary DNS failure (EAI_AGAIN) is ENOTFOUND, not sent', () => {
  const cause = systemError('getaddrinfo EAI_AGAIN api.example.com', {
    code: 'EAI_AGAIN',
    syscall: 'getaddrinfo',
  });
  assertNetwork(undici(cause), { code: 'ENOTFOUND', phase: 'connect', sent: 'no' });
});

test('constructed: EPIPE while writing the request is EPIPE during send, maybe sent', () => {
  const cause = systemError('write EPIPE', { code: 'EPIPE', syscall: 'write' });
  assertNetwork(undici(cause), { code: 'EPIPE', phase: 'send', sent: 'maybe' });
});

test('constructed: certificate failures from Node and Bun are TLS during connect, not sent', () => {
  const node = systemError('certificate has expired', { code: 'CERT_HAS_EXPIRED' });
  assertNetwork(undici(node), { code: 'TLS', phase: 'connect', sent: 'no' });
  const altName = systemError("Hostname/IP does not match certificate's altnames", {
    code: 'ERR_TLS_CERT_ALTNAME_INVALID',
  });
  assertNetwork(undici(altName), { code: 'TLS', phase: 'connect', sent: 'no' });
  for (const code of [
    'DEPTH_ZERO_SELF_SIGNED_CERT',
    'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
    'HOSTNAME_MISMATCH',
  ]) {
    const bun = Object.assign(new TypeError('unable to verify the first certificate'), { code });
    assertNetwork(bun, { code: 'TLS', phase: 'connect', sent: 'no' });
  }
});

test('constructed: a TLS record error, which can strike after the request went out, is maybe sent', () => {
  const cause = systemError('decryption failed or bad record mac', {
    code: 'ERR_SSL_DECRYPTION_FAILED_OR_BAD_RECORD_MAC',
  });
  assertNetwork(undici(cause), { code: 'TLS', phase: 'send', sent: 'maybe' });
});

test('constructed: a peer that drops the TLS handshake is ECONNRESET during connect, not sent', () => {
  const cause = systemError(
    'Client network socket disconnected before secure TLS connection was established',
    {
      code: 'ECONNRESET',
    },
  );
  assertNetwork(undici(cause), { code: 'ECONNRESET', phase: 'connect', sent: 'no' });
});

test("constructed: Node's happy-eyeballs AggregateError of refused connects is ECONNREFUSED, not sent", () => {
  const aggregate = new AggregateError(
    [
      systemError('connect ECONNREFUSED ::1:8080', { code: 'ECONNREFUSED', syscall: 'connect' }),
      systemError('connect ECONNREFUSED 127.0.0.1:8080', { code: 'ECONNREFUSED', syscall: 'connect' }),
    ],
    '',
  );
  assertNetwork(undici(aggregate), { code: 'ECONNREFUSED', phase: 'connect', sent: 'no' });
});

test('constructed: when a chain holds a not-sent and a maybe-sent failure, maybe sent wins', () => {
  const aggregate = new AggregateError(
    [
      systemError('connect ECONNREFUSED ::1:8080', { code: 'ECONNREFUSED', syscall: 'connect' }),
      systemError('read ECONNRESET', { code: 'ECONNRESET', syscall: 'read' }),
    ],
    '',
  );
  assertNetwork(undici(aggregate), { code: 'ECONNRESET', phase: 'send', sent: 'maybe' });
});

test('constructed: an SDK error wrapping fetch failed wrapping the system error is read through', () => {
  const sdk = new Error('Connection error.', {
    cause: undici(
      systemError('connect ECONNREFUSED 127.0.0.1:1', { code: 'ECONNREFUSED', syscall: 'connect' }),
    ),
  });
  assertNetwork(sdk, { code: 'ECONNREFUSED', phase: 'connect', sent: 'no' });
});

test('constructed: an unknown cause of fetch failed is ENETWORK during send, maybe sent', () => {
  assertNetwork(undici(new Error('something new')), { code: 'ENETWORK', phase: 'send', sent: 'maybe' });
  assertNetwork(new TypeError('fetch failed'), { code: 'ENETWORK', phase: 'send', sent: 'maybe' });
});

test("constructed: Deno's messages on other platforms and for other failures are recognised", () => {
  const deno = (detail: string) =>
    undici(new Error(`error sending request for url (https://api.example.com/): ${detail}`));
  const cases: [string, { code: string; phase: string; sent: string }][] = [
    [
      'client error (Connect): tcp connect error: No connection could be made because the target machine actively refused it. (os error 10061)',
      { code: 'ECONNREFUSED', phase: 'connect', sent: 'no' },
    ],
    [
      'client error (Connect): dns error: failed to lookup address information: Temporary failure in name resolution',
      { code: 'ENOTFOUND', phase: 'connect', sent: 'no' },
    ],
    [
      'client error (Connect): invalid peer certificate: UnknownIssuer',
      { code: 'TLS', phase: 'connect', sent: 'no' },
    ],
    [
      'client error (Connect): tcp connect error: Connection timed out (os error 110)',
      { code: 'ETIMEDOUT', phase: 'connect', sent: 'no' },
    ],
    [
      'client error (SendRequest): connection error: Broken pipe (os error 32)',
      { code: 'EPIPE', phase: 'send', sent: 'maybe' },
    ],
    [
      'client error (SendRequest): connection error: An existing connection was forcibly closed by the remote host. (os error 10054)',
      { code: 'ECONNRESET', phase: 'send', sent: 'maybe' },
    ],
    ['client error (Connect): something unforeseen', { code: 'ENETWORK', phase: 'connect', sent: 'no' }],
  ];
  for (const [detail, expected] of cases) assertNetwork(deno(detail), expected);
  // Deno before 2.x: the whole story in the TypeError's own message, no cause.
  assertNetwork(
    new TypeError(
      'error sending request for url (http://127.0.0.1:1/): client error (Connect): tcp connect error: Connection refused (os error 111)',
    ),
    { code: 'ECONNREFUSED', phase: 'connect', sent: 'no' },
  );
});

test('constructed: words in the URL of a Deno message never decide the verdict', () => {
  const error = new TypeError(
    'error sending request for url (https://api.example.com/certificates/connection-refused): connection closed before message completed',
  );
  assertNetwork(error, { code: 'ECLOSED', phase: 'send', sent: 'maybe' });
});

test("constructed: Bun's older codes are recognised", () => {
  const bun = (code: string, message: string) =>
    Object.assign(new TypeError(message), { code, path: 'http://x/' });
  assertNetwork(bun('ConnectionRefused', 'Unable to connect. Is the computer able to access the url?'), {
    code: 'ECONNREFUSED',
    phase: 'connect',
    sent: 'no',
  });
  assertNetwork(bun('FailedToOpenSocket', 'Was there a typo in the url or port?'), {
    code: 'ENETWORK',
    phase: 'connect',
    sent: 'no',
  });
  assertNetwork(bun('ConnectionClosed', 'The socket connection was closed unexpectedly.'), {
    code: 'ECLOSED',
    phase: 'send',
    sent: 'maybe',
  });
});

test('constructed: aborts and signal timeouts are never network errors, wherever they sit in the chain', () => {
  assert.equal(
    normalizeNetworkError(new DOMException('This operation was aborted', 'AbortError')),
    undefined,
  );
  assert.equal(
    normalizeNetworkError(new DOMException('The operation was aborted due to timeout', 'TimeoutError')),
    undefined,
  );
  assert.equal(
    normalizeNetworkError(Object.assign(new Error('The operation was aborted'), { code: 'ABORT_ERR' })),
    undefined,
  );
  assert.equal(normalizeNetworkError(undici(new DOMException('aborted', 'AbortError'))), undefined);
  assert.equal(
    normalizeNetworkError(new DOMException('aborted', 'AbortError'), undefined, 'body'),
    undefined,
  );
});

test('constructed: programming errors and other failures are not network errors', () => {
  assert.equal(normalizeNetworkError(new TypeError('Failed to parse URL from not a url')), undefined);
  assert.equal(
    normalizeNetworkError(new TypeError('Body is unusable: Body has already been read'), undefined, 'body'),
    undefined,
  );
  assert.equal(
    normalizeNetworkError(new SyntaxError('Unexpected token < in JSON'), undefined, 'body'),
    undefined,
  );
  assert.equal(normalizeNetworkError(new Error('caller gave up')), undefined);
  assert.equal(normalizeNetworkError(new Error('Failed to fetch')), undefined);
});

test('constructed: a zstd body that fails to decode (Node 23.8+ fetch) is not a network error, wherever it sits in the chain', () => {
  const zstd = systemError('Corrupted block detected', { code: 'ZSTD_error_corruption_detected' });
  const terminated = new TypeError('terminated', { cause: zstd });
  assert.equal(normalizeNetworkError(terminated, undefined, 'body'), undefined);
  assert.equal(
    normalizeNetworkError(new Error('SDK read failed', { cause: terminated }), undefined, 'body'),
    undefined,
  );
});

test("constructed: fetch's own refusals (blocked port, unsupported scheme) are not network errors", () => {
  assert.equal(normalizeNetworkError(undici(new Error('bad port'))), undefined);
  assert.equal(normalizeNetworkError(undici(new Error('unknown scheme'))), undefined);
  assert.equal(
    normalizeNetworkError(new TypeError('Fetch failed: Requests to port 1 are blocked')),
    undefined,
  ); // Deno
  // `redirect: 'error'` against a 3xx, a body that fails the `integrity` option.
  assert.equal(normalizeNetworkError(undici(new Error('unexpected redirect'))), undefined);
  assert.equal(normalizeNetworkError(undici(new Error('integrity mismatch'))), undefined);
  assert.equal(
    normalizeNetworkError(
      new TypeError("Fetch failed: Encountered redirect while redirect mode is set to 'error'"),
    ),
    undefined,
  ); // Deno
  // A redirect to a URL with credentials (undici; Deno and Bun follow it).
  assert.equal(
    normalizeNetworkError(undici(new Error('cross origin not allowed for request mode "cors"'))),
    undefined,
  );
});

test('constructed: non-Error throwables give undefined without throwing', () => {
  const hostile = new Proxy(
    {},
    {
      get() {
        throw new Error('trap');
      },
    },
  );
  const cyclic: { name: string; message: string; cause?: unknown } = {
    name: 'TypeError',
    message: 'fetch failed',
  };
  cyclic.cause = cyclic;
  for (const value of ['Failed to fetch', null, undefined, 42, {}, [], hostile, Symbol('x')]) {
    assert.equal(normalizeNetworkError(value), undefined, String(typeof value));
  }
  // A cyclic chain ends: still a fetch failure, with nothing more specific to say.
  assertNetwork(cyclic, { code: 'ENETWORK', phase: 'send', sent: 'maybe' });
});

test('constructed: errors whose traps throw (revoked proxies, throwing getPrototypeOf) give undefined', () => {
  const revoked = Proxy.revocable({}, {});
  revoked.revoke();
  const noPrototype = new Proxy(
    {},
    {
      getPrototypeOf() {
        throw new Error('trap');
      },
    },
  );
  const aggregate = { name: 'TypeError', message: 'fetch failed', errors: revoked.proxy };
  for (const value of [revoked.proxy, noPrototype, aggregate]) {
    assert.doesNotThrow(() => normalizeNetworkError(value));
  }
  assert.equal(normalizeNetworkError(revoked.proxy), undefined);
  assert.equal(normalizeNetworkError(noPrototype), undefined);
});

test('constructed: a code such as constructor finds no prototype member', () => {
  assert.equal(normalizeNetworkError(Object.assign(new Error('x'), { code: 'constructor' })), undefined);
  assert.equal(normalizeNetworkError(Object.assign(new Error('x'), { code: '__proto__' })), undefined);
});

test('a NetworkError passes through unchanged', () => {
  const error = new NetworkError({ code: 'ECONNRESET', phase: 'send', sent: 'maybe' });
  assert.equal(normalizeNetworkError(error), error);
});

test('a body read through the response limit fails with its own error for a relative URL, as browsers and Deno --location resolve it', async () => {
  // A browser app fetches its own server by path ('/mcp', '/api/agent'); the fetch
  // resolves it. The limit's errors named the request by the parsed URL, whose parse
  // (no base) threw: the caller got the URL parser's TypeError, not the body's error.
  await withServer(always({ body: 'x'.repeat(100) }), async ({ origin }) => {
    const browserLike = (input: string | URL | Request, init?: RequestInit): Promise<Response> =>
      fetch(input instanceof Request ? input : new URL(String(input), origin), init);
    const limited: Middleware = async (call, next) => limitedBody(await next(call), 10, call);
    const response = await createFetch({ fetch: browserLike, use: [limited] })('/api/agent?token=s3cret');
    const error = await rejection(() => response.text());
    assert.ok(error instanceof BreakwaterError, String(error));
    assert.equal(error.code, 'RESPONSE_TOO_LARGE');
    assert.equal(error.message.includes('s3cret'), false, error.message);
  });
});

test('response headers too large for the runtime to read are no network failure: the same answer comes every time, so nothing resends it nor counts it against the server', async () => {
  // About 60 KB of headers: past undici's 16 KiB (UND_ERR_HEADERS_OVERFLOW), hyper's
  // "message head is too large" (Deno) and Bun's limit (Malformed_HTTP_Response). Node
  // and Deno made it an ENETWORK "maybe sent": a retry() resent a GET for the same
  // answer, and a breaker counted one endpoint's headers against the whole server.
  const headers: Record<string, string> = {};
  for (let i = 0; i < 2_000; i++) headers[`x-trace-${i}`] = 'v'.repeat(20);
  await withServer(always({ headers, body: 'ok' }), async ({ origin }) => {
    const url = `${origin}/v1/things?token=s3cret`;
    const raw = await rejection(() => fetch(url));
    assert.equal(normalizeNetworkError(raw, requestSummary('local', 'GET', url)), undefined, String(raw));
    const error = await rejection(() => createFetch({ use: [] })(url));
    assert.ok(error instanceof Error && !(error instanceof NetworkError), String(error));
    assert.doesNotMatch(error.message, /s3cret/);
  });
});

test("fetch's own refusal of a 3xx under redirect: 'error', or of a body that fails its integrity, passes on as it is: nothing resends it nor counts it against the server", async () => {
  // undici (Node) says `fetch failed` with the cause `unexpected redirect` or `integrity
  // mismatch`, Deno `Fetch failed: Encountered redirect while redirect mode is set to
  // 'error'`: both read as ENETWORK "maybe sent", so a policy sent the GET three times and
  // the breaker counted it against the server. Bun throws its own `UnexpectedRedirect`;
  // Deno and Bun ignore `integrity`.
  const policy = definePolicy({});
  const policyFetch = policy.fetch();
  const refusals: [Behaviour, RequestInit][] = [
    [{ status: 302, headers: { location: '/next' } }, { redirect: 'error' }],
    [{ body: 'ok' }, { integrity: `sha256-${'A'.repeat(43)}=` }],
  ];
  for (const [behaviour, init] of refusals) {
    await withServer(always(behaviour), async (server) => {
      const outcome = await policyFetch(`${server.origin}/v1/things`, init).catch((error: unknown) => error);
      if (outcome instanceof Response) {
        assert.notEqual(runtime, 'node', 'only Deno and Bun ignore integrity');
        await outcome.body?.cancel();
      } else {
        assert.ok(outcome instanceof TypeError && !(outcome instanceof BreakwaterError), String(outcome));
      }
      assert.equal(server.requests.length, 1);
      assert.equal(policy.stats(server.origin).breaker?.consecutiveFailures ?? 0, 0);
    });
  }
});

test("fetch's own refusal to resend a streamed request body after a 307 passes on as it is: the breaker does not count it against the server", async () => {
  // Deno says `Fetch failed: Can not redeliver a streaming request body after a redirect`,
  // Bun `Request body is a ReadableStream and cannot be replayed for this redirect`. Deno's
  // read as ENETWORK "maybe sent", which the breaker counted. Node's undici says `fetch
  // failed` with a bare Error (no message, no code) as its cause: read so too.
  const policy = definePolicy({});
  await withServer(always({ status: 307, headers: { location: '/next' } }), async (server) => {
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{}'));
        controller.close();
      },
    });
    const init = { method: 'POST', body, duplex: 'half' } as RequestInit;
    const outcome = await policy
      .fetch()(`${server.origin}/v1/upload`, init)
      .catch((error: unknown) => error);
    assert.equal(server.requests.length, 1);
    assert.ok(outcome instanceof TypeError && !(outcome instanceof BreakwaterError), String(outcome));
    assert.equal(policy.stats(server.origin).breaker?.consecutiveFailures ?? 0, 0);
  });
});

test("Node's fetch refusing a server's 407 (undici's bare Error cause, as for a streamed body's 307) is no network failure: a GET is not resent nor counted", async () => {
  // undici answers a 407 Proxy Authentication Required with `fetch failed` and a cause of no
  // message and no code: read as ENETWORK "maybe sent", a policy sent the GET three times
  // and its breaker counted three failures. Deno and Bun hand the 407 over.
  const policy = definePolicy({});
  await withServer(always({ status: 407 }), async (server) => {
    const outcome = await policy
      .fetch()(`${server.origin}/v1/models`)
      .catch((error: unknown) => error);
    assert.equal(server.requests.length, 1);
    assert.ok(!(outcome instanceof NetworkError), String(outcome));
    assert.equal(policy.stats(server.origin).breaker?.consecutiveFailures ?? 0, 0);
  });
});

test("fetch's own refusal of a redirect to a URL with credentials passes on as it is: nothing resends it nor counts it against the server", async () => {
  // undici (Node) refuses `Location: http://user:pass@host/...` itself, saying `fetch
  // failed` with the cause `cross origin not allowed for request mode "cors"`: it read as
  // ENETWORK "maybe sent", so a policy sent the GET three times and the breaker counted
  // three failures. Deno and Bun follow such a redirect.
  const policy = definePolicy({});
  const toCredentials: Handler = (req) =>
    req.url === '/next'
      ? {}
      : { status: 302, headers: { location: `http://user:pass@${req.headers.host}/next` } };
  await withServer(toCredentials, async (server) => {
    const outcome = await policy
      .fetch()(`${server.origin}/v1/things`)
      .catch((error: unknown) => error);
    if (runtime === 'node') {
      assert.ok(outcome instanceof TypeError && !(outcome instanceof BreakwaterError), String(outcome));
      assert.equal(server.requests.length, 1);
    } else {
      assert.ok(outcome instanceof Response, String(outcome));
      assert.equal(outcome.status, 200);
      await outcome.body?.cancel();
    }
    assert.equal(policy.stats(server.origin).breaker?.consecutiveFailures ?? 0, 0);
  });
});

test('a NetworkError logged whole (console.error, a logger printing its cause) shows no URL secret of the runtime’s own error', async () => {
  // Deno's raw error says `error sending request for url (<the URL>)` in its message and
  // stack, Bun's carries the URL as `path`: the NetworkError kept them as its cause, so
  // printing it (util.inspect, as console.error does; pino's cause chain) showed the key.
  const url = `http://127.0.0.1:${await closedPort()}/v1/models?api_key=sk-s3cret-123&user=u1`;
  const error = await rejection(() => createFetch({ use: [] })(url));
  assert.ok(error instanceof NetworkError, String(error));
  const shown = inspect(error, { depth: 10, showHidden: true });
  assert.doesNotMatch(shown, /s3cret/, shown);
  assert.doesNotMatch(JSON.stringify(error), /s3cret/);
});

test('a fetch error from another realm (Jest runs tests in a node:vm context, fetch lives outside it) shows no URL secret, frozen or not', async () => {
  // Node's fetch refuses a URL with credentials by quoting it: 'Request cannot be
  // constructed from a URL that includes credentials: http://user:PASSWORD@...'. An error
  // of another realm is no `instanceof Object` or `Error` of this one, so it went up the
  // chain unredacted, with the password and the key.
  const url = 'http://user:hunter2-s3cret@127.0.0.1:9/v1/models?api_key=sk-s3cret-123';
  for (const freeze of [false, true]) {
    const raw = runInNewContext(
      `const e = new TypeError('Request cannot be constructed from a URL that includes credentials: ${url}'); ${freeze ? 'Object.freeze(e)' : 'e'}`,
    ) as Error;
    assert.equal(raw instanceof Error, false, 'the error is of another realm');
    const error = await rejection(() =>
      createFetch({
        fetch: async () => {
          throw raw;
        },
        use: [],
      })('http://127.0.0.1:9/v1/models'),
    );
    assert.equal((error as Error).name, 'TypeError');
    const shown = inspect(error, { depth: 10, showHidden: true });
    assert.doesNotMatch(shown, /s3cret/, shown);
    assert.doesNotMatch(String(error), /s3cret/);
  }
});

test('constructed: a 20 MB message is normalised fast, from what it says first', () => {
  // Each message was lower-cased and split whole: 10,000,000 words, 2 to 6 s of the
  // caller's time on Node and Bun. Its first 64 KiB are read, where a runtime says what failed.
  const huge = ` ${'a '.repeat(10_000_000)}`;
  const refused = Object.assign(new Error(`connect ECONNREFUSED 127.0.0.1:9${huge}`), {
    code: 'ECONNREFUSED',
  });
  const cases: [string, unknown, string, string][] = [
    ['undici', new TypeError(`fetch failed${huge}`, { cause: refused }), 'ECONNREFUSED', 'no'],
    ['no code', new TypeError(`error sending request: connection refused${huge}`), 'ECONNREFUSED', 'no'],
  ];
  for (const [shape, error, code, sent] of cases) {
    const started = performance.now();
    const network = normalizeNetworkError(error, undefined, undefined, 'http://127.0.0.1:9/');
    const ms = performance.now() - started;
    assert.equal(network?.code, code, shape);
    assert.equal(network?.sent, sent, shape);
    // Generous: about 1 ms read so on a quiet machine.
    assert.ok(ms < 500, `${shape}: ${Math.round(ms)} ms`);
  }
});
