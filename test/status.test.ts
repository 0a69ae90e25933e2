import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { auth } from '../src/auth.ts';
import { circuitBreaker } from '../src/breaker.ts';
import type { Call } from '../src/call.ts';
import { captureStatus, type StatusSnapshot } from '../src/capture.ts';
import { createFetch } from '../src/chain.ts';
import { CircuitOpenError, HttpStatusError, RetryAfterTooLongError } from '../src/errors.ts';
import type { BreakwaterEvent } from '../src/events.ts';
import { definePolicy } from '../src/policy.ts';
import {
  charsetDecoder,
  readSaid,
  SNAPSHOT,
  sdkFailureBody,
  throwOnStatus,
  wrapHttpError,
} from '../src/status.ts';
import { timeout } from '../src/timeout.ts';
import { nodeFetchOverHttp, nodeFetchShaped } from './helpers/node-fetch.ts';
import { withReasonPhrase } from './helpers/reason-phrase.ts';
import { always, type Behaviour, withServer } from './helpers/server.ts';
import { abortWhileFailureBodyRead, withTrickledAnswer } from './helpers/trickle.ts';

const utf8Bytes = (text: string): number => new TextEncoder().encode(text).byteLength;

/** Fetches `path` once from a server answering `behaviour`, through `throwOnStatus()`; returns what was thrown. */
async function thrownBy(behaviour: Behaviour, path = '/v1/things'): Promise<HttpStatusError> {
  return withServer(always(behaviour), async (server) => {
    const fetch = createFetch({ use: [throwOnStatus()] });
    const error = await fetch(`${server.origin}${path}`).then(
      async (res) => {
        await res.body?.cancel();
        assert.fail(`expected a throw, got HTTP ${res.status}`);
      },
      (thrown: unknown) => thrown,
    );
    assert.ok(error instanceof HttpStatusError, String(error));
    return error;
  });
}

function jsonError(status: number, body: unknown): Behaviour {
  return { status, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
}

// --- throwOnStatus(): what passes ---

test('throwOnStatus() passes a 200 response through with its body unread', async () => {
  await withServer(always({ status: 200, body: 'fine' }), async (server) => {
    const res = await createFetch({ use: [throwOnStatus()] })(`${server.origin}/ok`);
    assert.equal(res.status, 200);
    assert.equal(await res.text(), 'fine');
  });
});

test('throwOnStatus() passes a 204 response through', async () => {
  await withServer(always({ status: 204 }), async (server) => {
    const res = await createFetch({ use: [throwOnStatus()] })(`${server.origin}/ok`);
    assert.equal(res.status, 204);
    await res.body?.cancel();
  });
});

test('throwOnStatus() passes a 3xx response (manual redirect) through', async () => {
  await withServer(
    always({ status: 302, headers: { location: '/elsewhere' }, body: 'moved' }),
    async (server) => {
      const res = await createFetch({ use: [throwOnStatus()] })(`${server.origin}/old`, {
        redirect: 'manual',
      });
      assert.equal(res.status, 302);
      assert.equal(res.headers.get('location'), '/elsewhere');
      await res.body?.cancel();
    },
  );
});

// --- throwOnStatus(): what throws ---

test('throwOnStatus() throws an HttpStatusError for a 404 with status and statusText', async () => {
  const error = await thrownBy({ status: 404, body: 'no such thing' });
  assert.equal(error.status, 404);
  assert.equal(error.statusText, 'Not Found');
  assert.equal(error.code, 'HTTP_STATUS');
  assert.equal(error.retryable, false);
});

test('throwOnStatus() throws for a 503 with the wait from Retry-After, retryable', async () => {
  const error = await thrownBy({ status: 503, headers: { 'retry-after': '7' }, body: 'busy' });
  assert.equal(error.status, 503);
  assert.equal(error.statusText, 'Service Unavailable');
  assert.equal(error.retryAfterMs, 7_000);
  assert.equal(error.retryable, true);
});

test('throwOnStatus() leaves retryAfterMs undefined when the server asked for no wait', async () => {
  const error = await thrownBy({ status: 500, body: 'oops' });
  assert.equal(error.retryAfterMs, undefined);
});

test('throwOnStatus() honours x-should-retry: false when judging retryable', async () => {
  const error = await thrownBy({ status: 503, headers: { 'x-should-retry': 'false' } });
  assert.equal(error.retryable, false);
});

test('throwOnStatus() errors name the key, the method and the redacted URL', async () => {
  const error = await thrownBy({ status: 500 }, '/v1/things?api_key=sk-status-secret');
  assert.equal(error.request?.method, 'GET');
  assert.ok(error.request?.url.endsWith('/v1/things?api_key=[redacted]'), error.request?.url);
  assert.ok(error.message.includes('(server "http://127.0.0.1:'), error.message);
  assert.equal(error.message.includes('sk-status-secret'), false, error.message);
});

test('throwOnStatus() keeps only the allowlisted response headers on the error', async () => {
  const error = await thrownBy({
    status: 429,
    headers: { 'retry-after': '1', 'x-request-id': 'req_9', 'set-cookie': 'session=s3cr3t-cookie' },
  });
  assert.equal(error.headers['retry-after'], '1');
  assert.equal(error.headers['x-request-id'], 'req_9');
  assert.equal('set-cookie' in error.headers, false);
});

// --- serverMessage from JSON error bodies ---

test('serverMessage comes from an OpenAI-style {error:{message}} body', async () => {
  const error = await thrownBy(
    jsonError(429, { error: { message: 'Rate limit reached', type: 'requests' } }),
  );
  assert.equal(error.serverMessage, 'Rate limit reached');
  assert.ok(error.message.includes(': Rate limit reached'), error.message);
});

test('serverMessage comes from an Anthropic-style {type:"error",error:{message}} body', async () => {
  const error = await thrownBy(
    jsonError(529, { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }),
  );
  assert.equal(error.serverMessage, 'Overloaded');
});

test('serverMessage comes from an {error:"..."} body', async () => {
  const error = await thrownBy(jsonError(400, { error: 'invalid_request: missing model' }));
  assert.equal(error.serverMessage, 'invalid_request: missing model');
});

test('serverMessage comes from a {message} body', async () => {
  const error = await thrownBy(jsonError(502, { message: 'upstream connect error' }));
  assert.equal(error.serverMessage, 'upstream connect error');
});

test('serverMessage comes from a JSON-RPC {error:{code,message}} body', async () => {
  const error = await thrownBy(
    jsonError(500, { jsonrpc: '2.0', id: 1, error: { code: -32603, message: 'Internal error' } }),
  );
  assert.equal(error.serverMessage, 'Internal error');
});

test('serverMessage comes from the JSON array of one error Google’s streaming endpoints answer ([{error:{code,message,status}}])', async () => {
  // Vertex AI's and Gemini's streamGenerateContent (without alt=sse) answer a 429 so.
  const message = 'Resource exhausted. Please try again later.';
  const error = await thrownBy(
    jsonError(429, [{ error: { code: 429, message, status: 'RESOURCE_EXHAUSTED' } }]),
  );
  assert.equal(error.serverMessage, message);
  assert.ok(error.message.includes(`: ${message}`), error.message);
});

test('serverMessage of an OAuth 2.0 error body (RFC 6749 §5.2 {error, error_description}) has its code and its description', async () => {
  // What a token endpoint answers a refresh (an MCP client's OAuth) that cannot succeed.
  const error = await thrownBy(
    jsonError(400, { error: 'invalid_grant', error_description: 'The refresh token has expired' }),
  );
  assert.equal(error.serverMessage, 'invalid_grant: The refresh token has expired');
  const bare = await thrownBy(jsonError(401, { error: 'invalid_client' }));
  assert.equal(bare.serverMessage, 'invalid_client');
});

// --- the body snippet ---

test('the error keeps the start of the body on one line, at most 2048 bytes', async () => {
  const error = await thrownBy({
    status: 500,
    body: `line one\nline two\r\n\tline three ${'x'.repeat(5_000)}`,
  });
  assert.ok(error.body.startsWith('line one line two line three xxx'), error.body.slice(0, 40));
  assert.equal(/[\r\n]/.test(error.body), false);
  assert.ok(utf8Bytes(error.body) <= 2048, `${utf8Bytes(error.body)} bytes`);
  assert.ok(utf8Bytes(error.body) >= 2000, `${utf8Bytes(error.body)} bytes`);
});

test('a multi-byte body cut at 2048 bytes stays within 2048 bytes (no half character)', async () => {
  const error = await thrownBy({ status: 500, body: '€'.repeat(1_000) });
  assert.ok(utf8Bytes(error.body) <= 2048, `${utf8Bytes(error.body)} bytes`);
  assert.equal(error.body.includes('\uFFFD'), false);
  assert.equal(error.body, '€'.repeat(682));
});

test('a short body is kept whole', async () => {
  const error = await thrownBy({ status: 500, body: 'database is locked' });
  assert.equal(error.body, 'database is locked');
});

/** `text` in UTF-16LE, as a .NET or Windows service may answer. */
const utf16le = (text: string): Uint8Array =>
  new Uint8Array(Uint16Array.from(text, (c) => c.charCodeAt(0)).buffer);
/** `text` in ISO-8859-1, as Apache's and old Java servers' error pages are. */
const latin1 = (text: string): Uint8Array => Uint8Array.from(text, (c) => c.charCodeAt(0));

test('a failure body in the charset its Content-Type names (ISO-8859-1, UTF-16), quoted or not, in any case, is decoded in it: body and serverMessage read as the server wrote them', async () => {
  // Read as UTF-8, 'é' was U+FFFD and UTF-16 JSON had a NUL after every letter (no serverMessage).
  for (const type of ['text/plain; charset=ISO-8859-1', 'text/html;CHARSET="iso-8859-1"']) {
    const error = await thrownBy({
      status: 503,
      headers: { 'content-type': type },
      body: latin1('Réessayez plus tard'),
    });
    assert.equal(error.body, 'Réessayez plus tard', type);
    assert.ok(error.message.endsWith(': Réessayez plus tard'), error.message);
  }
  const json = '{"error":{"message":"Modèle surchargé"}}';
  for (const type of ['application/json; charset="utf-16le"', 'application/json;  Charset=" UTF-16LE "']) {
    const error = await thrownBy({ status: 529, headers: { 'content-type': type }, body: utf16le(json) });
    assert.equal(error.serverMessage, 'Modèle surchargé', type);
    assert.equal(error.body, json, type);
  }
  // Cut at bodyBytes (2048 bytes: 1,024 UTF-16 characters), with no half character.
  const long = await thrownBy({
    status: 500,
    headers: { 'content-type': 'text/plain; charset=utf-16le' },
    body: utf16le('é'.repeat(3000)),
  });
  assert.equal(long.body, 'é'.repeat(1024));
});

/** `text`'s UTF-16 code units written out again as bytes, little- and big-endian, read one character a byte. */
const bytesOfUtf16 = (text: string): string[] =>
  [0, 8].map((low) =>
    Array.from(text, (c) =>
      String.fromCharCode((c.charCodeAt(0) >> low) & 0xff, (c.charCodeAt(0) >> (8 - low)) & 0xff),
    ).join(''),
  );

test('a UTF-8 body mislabelled charset=utf-16 that quotes the API key back reads as UTF-8, so the key is hidden: read as UTF-16 it was CJK characters that encoded again gave the key back', async () => {
  const key = 'sk-live-ABCDEFGHIJKLMNOPQRSTUVWX1234';
  for (const charset of ['utf-16', 'utf-16le', 'UTF-16BE']) {
    await withServer(
      (req) => ({
        status: 401,
        headers: { 'content-type': `application/json; charset=${charset}` },
        body: JSON.stringify({ error: { message: `Invalid API key: ${req.headers.authorization}` } }),
      }),
      async (server) => {
        const fetch = createFetch({ use: [throwOnStatus()] });
        const error = await fetch(server.origin, { headers: { authorization: `Bearer ${key}` } }).catch(
          (e: unknown) => e,
        );
        assert.ok(error instanceof HttpStatusError, String(error));
        assert.equal(error.serverMessage, 'Invalid API key: [redacted]', charset);
        // No reading of what was shown holds the key: as it is, or encoded again in UTF-16.
        for (const shown of [error.body, error.serverMessage, error.message]) {
          for (const text of [shown, ...bytesOfUtf16(String(shown))]) {
            assert.ok(!text?.includes(key), `${charset}: ${text}`);
          }
        }
      },
    );
  }
  // A body that is UTF-16 (a NUL in its first two bytes, or a byte-order mark) is read so.
  const bom = new Uint8Array([0xff, 0xfe, ...utf16le('Modèle surchargé')]);
  for (const body of [utf16le('Modèle surchargé'), bom]) {
    const error = await thrownBy({
      status: 503,
      headers: { 'content-type': 'text/plain; charset=utf-16' },
      body,
    });
    assert.equal(error.body, 'Modèle surchargé');
  }
});

test('a charset no decoder knows, another parameter ending in charset, or a hostile Content-Type (kilobytes of quotes, backslashes and parameters) reads as UTF-8, never throwing or stalling', async () => {
  const hostile = `text/plain; charset="${'\\"; charset=;'.repeat(400)}`;
  for (const type of ['text/plain; charset=x-no-such-charset', 'text/plain; x-charset=iso-8859-1', hostile]) {
    const error = await thrownBy({ status: 500, headers: { 'content-type': type }, body: 'café fermé' });
    assert.equal(error.body, 'café fermé', type.slice(0, 40));
  }
  // A header no HTTP server would pass on, a megabyte long: read in linear time.
  const started = performance.now();
  for (const type of [
    ';'.repeat(1e6),
    `;${' '.repeat(1e6)}`,
    `; charset="${'a'.repeat(1e6)}`,
    `; charset=${'; charset= '.repeat(1e5)}`,
    `${'; charset=\\'.repeat(1e5)}"`,
  ])
    assert.equal(charsetDecoder(type, new Uint8Array()).encoding, 'utf-8');
  const took = performance.now() - started;
  assert.ok(took < 2000, `took ${Math.round(took)} ms`);
});

test('a failure body or JSON message holding control characters (terminal escapes, NUL, a binary body) or Unicode line breaks reaches no log line as such: each control is U+FFFD, U+2028 and U+2029 a space', async () => {
  // A JSON message's escapes decode to real controls: ESC [2J clears a terminal that prints
  // the logged error, ESC ]0; retitles it, \b rubs out what came before; U+2028, U+2029 and
  // NEL break the line in log viewers and JS source. A binary body (a gzip a proxy sent
  // without its Content-Encoding, a protobuf) decodes to NUL and other controls.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding them is the point.
  const controlOrBreak = /[\0-\x08\x0e-\x1f\x7f-\x9f\u2028\u2029]/;
  const json = await thrownBy(
    jsonError(503, {
      error: { message: 'model\u001b[2J\u001b]0;pwned\u0007 down\b\u2028retry\u0085later\u2029' },
    }),
  );
  assert.equal(json.serverMessage, 'model\uFFFD[2J\uFFFD]0;pwned\uFFFD down\uFFFD retry\uFFFDlater');
  for (const text of [json.message, json.body, json.statusText])
    assert.ok(!controlOrBreak.test(text), JSON.stringify(text));
  const binary = await thrownBy({
    status: 502,
    headers: { 'content-type': 'application/octet-stream' },
    body: new Uint8Array([0x1f, 0x8b, 0x08, 0x00, 0x00, 0x1b, 0x5b, 0x48, 0x7f, 0x4f, 0x4b]),
  });
  for (const text of [binary.message, binary.body, binary.serverMessage ?? ''])
    assert.ok(!controlOrBreak.test(text), JSON.stringify(text));
  assert.ok(binary.body.endsWith('[H\uFFFDOK'), JSON.stringify(binary.body));
  // Built by hand, the body is kept on one line so too.
  const built = new HttpStatusError({ status: 500, body: 'a\u001b[2Kb\u2028c' });
  assert.equal(built.body, 'a\uFFFD[2Kb c');
});

test('throwOnStatus() cancels the failure body so the connection is freed', async () => {
  // 1 MiB: far more than the socket buffers hold, so only a cancel lets the connection go.
  await withServer(always({ status: 503, body: 'z'.repeat(1024 * 1024) }), async (server) => {
    let seen: Response | undefined;
    const fetch = createFetch({
      fetch: async (input, init) => {
        seen = await globalThis.fetch(input, init);
        return seen;
      },
      use: [throwOnStatus()],
    });
    await assert.rejects(fetch(`${server.origin}/big`), HttpStatusError);
    assert.ok(seen !== undefined, 'seen !== undefined');
    assert.equal(seen.bodyUsed, true, 'the body was cancelled');
    await assert.rejects(seen.text(), TypeError);
  });
});

test('throwOnStatus() outside captureStatus() reuses its snapshot', async () => {
  await withServer(always(jsonError(503, { error: { message: 'warming up' } })), async (server) => {
    const capture = captureStatus();
    const fetch = createFetch({ use: [throwOnStatus(), capture] });
    const error = await fetch(`${server.origin}/x`).catch((thrown: unknown) => thrown);
    assert.ok(error instanceof HttpStatusError, 'error instanceof HttpStatusError');
    const snapshot = capture.last(server.origin);
    assert.equal(snapshot?.serverMessage, 'warming up');
    assert.equal(error.serverMessage, snapshot?.serverMessage);
    assert.equal(error.body, snapshot?.body);
  });
});

test('throwOnStatus()’s error says its answer’s headers arrived (at) before it read the body’s start, so its wait counts from then', async () => {
  // The body trickles and never ends: throwOnStatus() reads its start for a second
  // (bodyWaitMs) before it throws. Its retryAfterMs is the server's, counted from `at`.
  const wall = Date.now() - performance.now();
  let error: unknown;
  let thrownAt = Number.NaN;
  const { headersSent } = await withTrickledAnswer(503, async (origin) => {
    error = await createFetch({ use: [throwOnStatus()] })(origin).catch((thrown: unknown) => thrown);
    thrownAt = performance.now();
  });
  assert.ok(error instanceof HttpStatusError, String(error));
  assert.equal(error.retryAfterMs, 1_000, 'the wait the server asked for');
  assert.ok(
    thrownAt - headersSent >= 900,
    `thrown ${(thrownAt - headersSent).toFixed(0)} ms after the headers`,
  );
  const late = error.at - (wall + headersSent);
  assert.ok(late > -50 && late < 250, `at is ${late.toFixed(0)} ms after the headers went, not the throw`);
});

test('wrapHttpError() says when the answer’s headers arrived: a snapshot’s at, or a captured response’s, not when the SDK failed', async () => {
  const at = Date.now() - 700;
  const said: StatusSnapshot = {
    key: 'mcp',
    method: 'POST',
    url: 'https://mcp.example/rpc',
    status: 503,
    statusText: '',
    retryAfterMs: 1_000,
    body: '',
    serverMessage: undefined,
    headers: { 'retry-after': '1' },
    at,
  };
  const wrapped = wrapHttpError(503, said);
  assert.equal(wrapped.at, at);
  assert.equal(wrapped.retryAfterMs, 1_000, 'the wait the server asked for');
  // A response a capture saw: its wait read as of then (an HTTP-date 30 s after `at`).
  const response = new Response(null, {
    status: 503,
    headers: { 'retry-after': new Date(Math.ceil((at + 30_000) / 1000) * 1000).toUTCString() },
  });
  Reflect.set(response, SNAPSHOT, { at });
  const error = wrapHttpError(503, response);
  assert.equal(error.at, at);
  assert.ok(
    (error.retryAfterMs ?? 0) >= 30_000 && (error.retryAfterMs ?? 0) <= 31_000,
    `${error.retryAfterMs} ms from when the headers came, not from now`,
  );
  // Headers alone say nothing of when they came: now.
  const before = Date.now();
  assert.ok(wrapHttpError(503, new Headers({ 'retry-after': '1' })).at >= before, 'now');
});

test('a base fetch whose body is a Node stream (node-fetch v2, v3): captureStatus() snapshots the 503 and its Retry-After, throwOnStatus() throws its HttpStatusError, no body read', async () => {
  const behaviour = { status: 503, headers: { 'retry-after': '7' }, body: '{"error":{"message":"busy"}}' };
  await withServer(always(behaviour), async (server) => {
    const capture = captureStatus();
    const captured = await createFetch({ fetch: nodeFetchShaped, use: [capture] })(server.origin);
    assert.equal(captured.status, 503);
    assert.equal(capture.last(server.origin)?.retryAfterMs, 7000);
    const error = await createFetch({ fetch: nodeFetchShaped, use: [throwOnStatus()] })(server.origin).catch(
      (thrown: unknown) => thrown,
    );
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.status, 503);
    assert.equal(error.retryAfterMs, 7000);
  });
});

// --- throwOnStatus(statuses) ---

test('throwOnStatus([503]) throws for a 503', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const fetch = createFetch({ use: [throwOnStatus([503])] });
    await assert.rejects(
      fetch(server.origin),
      (error) => error instanceof HttpStatusError && error.status === 503,
    );
  });
});

test('throwOnStatus([503]) passes a 500 and a 404 through', async () => {
  for (const status of [500, 404]) {
    await withServer(always({ status, body: 'not thrown' }), async (server) => {
      const res = await createFetch({ use: [throwOnStatus([503])] })(server.origin);
      assert.equal(res.status, status);
      assert.equal(await res.text(), 'not thrown');
    });
  }
});

test('throwOnStatus() with a bad statuses argument throws a TypeError naming it', () => {
  for (const bad of [503, '503', [99], [600], [503.5], [Number.NaN], null, { 503: true }]) {
    assert.throws(
      () => throwOnStatus(bad as never),
      (error) => error instanceof TypeError && error.message.includes('throwOnStatus(statuses)'),
      `for ${JSON.stringify(bad)}`,
    );
  }
});

test('throwOnStatus() says what is wrong with each bad status', () => {
  assert.throws(() => throwOnStatus([503, 99, 12.5]), {
    name: 'TypeError',
    message:
      /throwOnStatus\(statuses\)\.1: must be at least 100 \(got 99\)[\s\S]*\.2: must be an int(?:eger)? \(got 12\.5\)/,
  });
});

// --- wrapHttpError() ---

test('wrapHttpError() from a Response takes statusText, Retry-After and the safe headers', () => {
  const response = new Response(null, {
    status: 429,
    statusText: 'Too Many Requests',
    headers: { 'retry-after': '3', authorization: 'Bearer sk-wrap-secret', 'x-request-id': 'req_1' },
  });
  const error = wrapHttpError(429, response);
  assert.equal(error.status, 429);
  assert.equal(error.statusText, 'Too Many Requests');
  assert.equal(error.retryAfterMs, 3_000);
  assert.equal(error.retryable, true);
  assert.deepEqual(error.headers, { 'retry-after': '3', 'x-request-id': 'req_1' });
});

test('wrapHttpError() from a captureStatus() snapshot keeps the server’s message, the body and the request', async () => {
  const behaviour = {
    status: 503,
    headers: { 'retry-after': '7', 'content-type': 'application/json' },
    body: '{"error":{"message":"model overloaded"}}',
  };
  await withServer(always(behaviour), async (server) => {
    const capture = captureStatus();
    const fetch = createFetch({ use: [capture], key: 'mcp' });
    await (await fetch(`${server.origin}/rpc?token=hunter2`, { method: 'POST', body: '{}' })).body?.cancel();
    const said = capture.last('mcp');
    assert.ok(said, 'said');
    const cause = new Error('Streamable HTTP error: 503');
    const error = wrapHttpError(said.status, said, cause);
    assert.equal(error.status, 503);
    assert.equal(error.retryAfterMs, 7_000);
    assert.equal(error.serverMessage, 'model overloaded');
    assert.match(error.body, /model overloaded/);
    assert.equal(error.request?.key, 'mcp');
    assert.equal(error.request?.method, 'POST');
    assert.doesNotMatch(error.message, /hunter2/);
    assert.equal(error.cause, cause);
  });
});

test('wrapHttpError() from a Headers reads the wait from its timing headers', () => {
  const error = wrapHttpError(503, new Headers({ 'retry-after-ms': '1500' }));
  assert.equal(error.retryAfterMs, 1_500);
  assert.equal(error.statusText, '');
  assert.deepEqual(error.headers, { 'retry-after-ms': '1500' });
});

test('wrapHttpError() from a plain object matches names in any case and joins array values', () => {
  const error = wrapHttpError(503, { 'Retry-After': '2', 'X-Request-Id': ['a', 'b'], Cookie: 'c=secret' });
  assert.equal(error.retryAfterMs, 2_000);
  assert.deepEqual(error.headers, { 'retry-after': '2', 'x-request-id': 'a, b' });
});

test('wrapHttpError() from [name, value] pairs reads them like headers', () => {
  const error = wrapHttpError(429, [['retry-after', '4']]);
  assert.equal(error.retryAfterMs, 4_000);
});

test('wrapHttpError() skips a malformed header and keeps the others', () => {
  const error = wrapHttpError(503, { 'bad header name': 'x', 'retry-after': '5', 'x-request-id': 'req_2' });
  assert.equal(error.retryAfterMs, 5_000);
  assert.equal(error.headers['x-request-id'], 'req_2');
});

test('wrapHttpError() from undefined has no wait and no headers', () => {
  const error = wrapHttpError(502, undefined);
  assert.equal(error.status, 502);
  assert.equal(error.retryAfterMs, undefined);
  assert.deepEqual(error.headers, {});
  assert.equal(error.message, 'request failed with HTTP 502');
});

test('wrapHttpError() from null (an SDK error without headers) has no wait and no headers', () => {
  // An SDK error's `headers` field is often null when the response never arrived.
  const error = wrapHttpError(503, null as unknown as undefined);
  assert.equal(error.status, 503);
  assert.equal(error.retryable, true);
  assert.equal(error.retryAfterMs, undefined);
  assert.deepEqual(error.headers, {});
});

test('wrapHttpError() sets retryable per status', () => {
  for (const [status, retryable] of [
    [408, true],
    [429, true],
    [500, true],
    [503, true],
    [529, true],
    [400, false],
    [401, false],
    [404, false],
    [501, false],
    [522, false],
  ] as const) {
    assert.equal(wrapHttpError(status, undefined).retryable, retryable, `status ${status}`);
  }
});

test('wrapHttpError() lets x-should-retry override retryable', () => {
  assert.equal(wrapHttpError(400, { 'x-should-retry': 'true' }).retryable, true);
  assert.equal(wrapHttpError(503, { 'x-should-retry': 'false' }).retryable, false);
});

test('wrapHttpError() keeps the SDK error as cause', () => {
  const cause = new Error('Failed to fetch Agent Card: 503');
  const error = wrapHttpError(503, undefined, cause);
  assert.equal(error.cause, cause);
  assert.ok(error instanceof HttpStatusError, 'error instanceof HttpStatusError');
});

test('wrapHttpError() with a bad status throws a TypeError naming it', () => {
  for (const bad of [99, 600, 503.5, Number.NaN, '503']) {
    assert.throws(
      () => wrapHttpError(bad as number, undefined),
      (error) => error instanceof TypeError && /wrapHttpError\(status\): must be/.test(error.message),
      `for ${String(bad)}`,
    );
  }
});

test('a body cut inside a URL’s userinfo shows no part of the password: the unfinished URL is left out', async () => {
  const body = 'cannot reach postgres://admin:12345678@db.internal:5432/app right now';
  const cut = body.indexOf('5678'); // the limit falls inside the password
  await withServer(
    always({ status: 503, headers: { 'content-type': 'text/plain' }, body }),
    async (server) => {
      const capture = captureStatus({ bodyBytes: cut });
      const fetch = createFetch({ use: [throwOnStatus(), capture] });
      const error = await fetch(server.origin).then(
        () => assert.fail('expected an HttpStatusError'),
        (e: unknown) => e,
      );
      assert.ok(error instanceof HttpStatusError, 'error instanceof HttpStatusError');
      const snapshot = capture.last(server.origin);
      for (const shown of [
        snapshot?.body,
        snapshot?.serverMessage,
        error.body,
        error.serverMessage,
        error.message,
      ]) {
        assert.ok(!shown?.includes('1234'), `no part of the password in ${JSON.stringify(shown)}`);
      }
      assert.ok(snapshot?.body.startsWith('cannot reach'), 'the text before the URL is kept');
    },
  );
});

test('a body read to its end keeps a URL that ends the text', async () => {
  const body = 'moved to https://api.example.com/v2';
  await withServer(always({ status: 410, body }), async (server) => {
    const capture = captureStatus();
    const fetch = createFetch({ use: [capture] });
    await (await fetch(server.origin)).arrayBuffer();
    assert.equal(capture.last(server.origin)?.body, body);
  });
});

/** The body snapshot `captureStatus({ bodyBytes })` takes of a 503 whose body is `body`. */
async function capturedBody(body: string, bodyBytes: number): Promise<string | undefined> {
  return withServer(
    always({ status: 503, headers: { 'content-type': 'text/plain' }, body }),
    async (server) => {
      const capture = captureStatus({ bodyBytes });
      const fetch = createFetch({ use: [capture] });
      await (await fetch(server.origin)).body?.cancel();
      return capture.last(server.origin)?.body;
    },
  );
}

test('a body cut inside the password of a URL whose user name holds a quote shows no part of the password', async () => {
  // Redaction reads `o'brien` as one user name (WHATWG URL keeps a `'` there as it is),
  // so the unfinished URL starts at its scheme, not after the quote.
  const body = "cannot reach postgres://o'brien:12345678@db.internal:5432/app right now";
  const shown = await capturedBody(body, body.indexOf('5678'));
  assert.ok(!shown?.includes('1234'), `no part of the password in ${JSON.stringify(shown)}`);
  assert.ok(shown?.startsWith('cannot reach'), `the text before the URL is kept: ${JSON.stringify(shown)}`);
});

test('a long body of one word cut inside a URL keeps the text before the URL, and the URL up to the cut once its server is named', async () => {
  // No space anywhere: leaving out the whole last word left out the whole body ('…').
  const inPath = `error=upstream_failed;status=https://status.example.com/incidents/${'a'.repeat(3000)}`;
  const shownInPath = await capturedBody(inPath, 2048);
  assert.ok(
    shownInPath?.startsWith('error=upstream_failed;status=https://status.example.com/incidents/aaa'),
    `the error and the URL's server are kept: ${JSON.stringify(shownInPath)}`,
  );
  const inPassword = `${'x'.repeat(2000)};error=db_unreachable;db=postgres://admin:12345678@db.internal/app`;
  const shownInPassword = await capturedBody(inPassword, inPassword.indexOf('5678'));
  assert.ok(
    !shownInPassword?.includes('1234'),
    `no part of the password in ${JSON.stringify(shownInPassword)}`,
  );
  assert.ok(
    shownInPassword?.endsWith(';error=db_unreachable;db=postgres…'),
    `the text before the URL is kept: ${JSON.stringify(shownInPassword?.slice(-60))}`,
  );
});

test('a body cut inside the password of a percent-encoded or \\u003A-escaped URL shows no part of the password', async () => {
  // Redaction finds these spellings too; cut inside the userinfo, they must go as a plain URL does.
  for (const url of [
    'https%3A%2F%2Fadmin%3A12345678%40db.internal%2Fapp',
    'postgres\\u003A//admin:12345678@db.internal/app',
  ]) {
    const body = `{"error":"cannot reach ${url} now"}`;
    const shown = await capturedBody(body, body.indexOf('5678'));
    assert.ok(!shown?.includes('1234'), `no part of the password in ${JSON.stringify(shown)}`);
    assert.ok(
      shown?.startsWith('{"error":"cannot reach'),
      `the text before the URL is kept: ${JSON.stringify(shown)}`,
    );
  }
});

test('a body cut inside the password of a percent-encoded URL, past a URL encoded once more in the password, shows no part of it', async () => {
  // The password holds '://' (u:1234://5678@h as written): the last separator before the
  // cut is the password's, and the URL left out must be the one it is part of.
  const body =
    '{"error":"cannot reach https%3A%2F%2Fadmin%3A1234%253A%252F%252F5678%40db.internal%2Fapp now"}';
  const shown = await capturedBody(body, body.indexOf('5678'));
  assert.ok(!shown?.includes('1234'), `no part of the password in ${JSON.stringify(shown)}`);
  assert.ok(
    shown?.startsWith('{"error":"cannot reach'),
    `the text before the URL is kept: ${JSON.stringify(shown)}`,
  );
});

test('a reason phrase that quotes a URL shows none of its secrets in the error, the snapshot or the events', async () => {
  // Node's and Bun's fetch hand the reason phrase on as the server wrote it (Deno's gives the
  // standard phrase for the status); a proxy or an old app server may quote a URL in it.
  const phrase = 'Unavailable: https://admin:hunter2@db.internal/x?token=tk-secret';
  const server = createServer((_request, response) => {
    response.writeHead(503, phrase, { 'content-type': 'application/json' });
    response.end('{}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/x`;
    const capture = captureStatus();
    const events: BreakwaterEvent[] = [];
    const fetch = createFetch({
      onEvent: (e) => events.push(e),
      use: [throwOnStatus(), circuitBreaker({ consecutiveFailures: 1 }), capture],
    });
    const thrown = await fetch(url).catch((e: unknown) => e);
    assert.ok(thrown instanceof HttpStatusError, String(thrown));
    const open = await fetch(url).catch((e: unknown) => e);
    assert.ok(open instanceof CircuitOpenError, String(open));
    const plain = await globalThis.fetch(url);
    await plain.body?.cancel();
    const wrapped = wrapHttpError(503, plain);
    const shown = [
      thrown.message,
      thrown.statusText,
      JSON.stringify(thrown),
      open.message,
      (open.cause as Error).message,
      JSON.stringify(capture.last(url.slice(0, url.indexOf('/x')))),
      JSON.stringify(events),
      wrapped.message,
      wrapped.statusText,
    ];
    for (const text of shown) {
      assert.ok(!/hunter2|tk-secret/.test(text), `a secret shown: ${text}`);
    }
    if (plain.statusText === phrase) {
      assert.match(thrown.statusText, /^Unavailable: https:\/\/db\.internal\/x\?token=\[redacted\]$/);
    }
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

test('wrapHttpError() with headers that are not an object (a raw header block, a number) builds the error without them, and echoes none of it', () => {
  // An SDK error's `headers` is typed by the SDK, not checked at run time: a raw header
  // block in a string reached `in`, whose TypeError quoted it, token and all, from the
  // caller's error handler, and the SDK error was lost.
  const cause = new Error('the SDK’s error');
  for (const source of ['retry-after: 5\r\nauthorization: Bearer sk-live-1', 42, true, Symbol('headers')]) {
    const error = wrapHttpError(503, source as unknown as Headers, cause);
    assert.ok(error instanceof HttpStatusError, 'error instanceof HttpStatusError');
    assert.equal(error.status, 503);
    assert.equal(error.retryAfterMs, undefined);
    assert.equal(error.cause, cause);
    assert.ok(!JSON.stringify(error).includes('sk-live-1'), "!JSON.stringify(error).includes('sk-live-1')");
  }
});

test('throwOnStatus() below timeout({ attemptMs }) throws the HttpStatusError of a 429 whose body stalls, not a TimeoutError', async () => {
  await withServer(
    always({ stall: 'mid-body', status: 429, headers: { 'retry-after': '1' }, body: 'slow down' }),
    async (server) => {
      const fetch = createFetch({ use: [timeout({ attemptMs: 100 }), throwOnStatus()] });
      await assert.rejects(fetch(server.origin, { method: 'POST', body: '{}' }), (error: unknown) => {
        assert.ok(error instanceof HttpStatusError, String(error));
        assert.equal(error.status, 429);
        assert.equal(error.retryAfterMs, 1000);
        assert.equal(error.body, 'slow down');
        return true;
      });
    },
  );
});

test('throwOnStatus() throws at once even when the failure body is slow to cancel (a relayed stream)', async () => {
  // A custom fetch that relays the body (a proxy, a recording wrapper) may have a cancel
  // that settles late or never: the error must not wait on it, only start it.
  let cancelled = false;
  const relay: typeof fetch = async () =>
    new Response(
      new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('x'.repeat(4096)));
        },
        cancel() {
          cancelled = true;
          return new Promise<void>(() => {});
        },
      }),
      { status: 503, headers: { 'retry-after': '7' } },
    );
  const fetch = createFetch({ fetch: relay, use: [throwOnStatus()] });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const outcome = await Promise.race([
    fetch('http://127.0.0.1:9/x').then(
      () => 'resolved',
      (error) => error,
    ),
    new Promise((resolve) => {
      timer = setTimeout(() => resolve('still waiting after 300 ms'), 300);
    }),
  ]);
  clearTimeout(timer);
  assert.ok(outcome instanceof HttpStatusError, String(outcome));
  assert.equal(outcome.retryAfterMs, 7000);
  assert.equal(cancelled, true);
});

// --- credentials a server quotes back ---

/** Credentials a call sends: a token holding '/' (escaped '\/' by some JSON encoders), an API key, a cookie. */
const TOKEN = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ2VudCJ9.s1gn/atur3+xQ';
const API_KEY = 'sk-ant-api03-Qw3rTy/uIoP-asdfgh';
const AZURE_KEY = 'az0123456789abcdef';
const PROXY_CREDENTIAL = 'dXNlcjpwcm94eXBhc3N3b3Jk';
const SESSION = 'sess-9f8e7d6c5b4a3210';
const CREDENTIALS = [TOKEN, API_KEY, AZURE_KEY, PROXY_CREDENTIAL, SESSION];
const SENT_HEADERS = {
  authorization: `Bearer ${TOKEN}`,
  'x-api-key': API_KEY,
  'api-key': AZURE_KEY,
  'proxy-authorization': `Basic ${PROXY_CREDENTIAL}`,
  cookie: `theme=dark; session=${SESSION}`,
};

/**
 * A server that quotes the request's credentials back: `/plain` in a 401 text body, `/json` in
 * an OpenAI-style 429 JSON body with '/' escaped as '\/' (PHP's json_encode), `/anthropic` in an
 * Anthropic-style 401, `/cut` at the end of a 401 body cut at 2048 bytes inside the token.
 */
const echoCredentials: Parameters<typeof withServer>[0] = (req) => {
  const h = (name: string): string => String(req.headers[name] ?? '');
  const quoted = `${h('authorization')} ${h('x-api-key')} ${h('api-key')} ${h('proxy-authorization')} ${h('cookie')}`;
  const json = (status: number, body: unknown): Behaviour => ({
    status,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body).replaceAll('/', '\\/'),
  });
  if (req.url === '/json') {
    return json(429, {
      error: { message: `Incorrect API key provided: ${quoted}`, type: 'invalid_request_error' },
    });
  }
  if (req.url === '/anthropic') {
    return json(401, {
      type: 'error',
      error: { type: 'authentication_error', message: `key ${quoted} is revoked` },
    });
  }
  const cut = req.url === '/cut' ? 'x'.repeat(2048 - 'invalid token Bearer '.length - 20) : '';
  return { status: 401, headers: { 'content-type': 'text/plain' }, body: `${cut}invalid token ${quoted}` };
};

/** Fails unless no credential, nor the first 8 characters of one (a body cut inside it), is in `shown`. */
function assertNoCredential(shown: readonly unknown[]): void {
  for (const value of shown) {
    const text = typeof value === 'string' ? value : JSON.stringify(value);
    for (const credential of CREDENTIALS) {
      for (const form of [credential, credential.replaceAll('/', '\\/'), credential.slice(0, 8)]) {
        assert.ok(!text?.includes(form), `${credential.slice(0, 8)}… shown in ${text}`);
      }
    }
  }
}

test('a failure body quoting the credentials the call sent (Authorization, x-api-key, api-key, Proxy-Authorization, cookies) shows none of them in the error, the snapshot or the captured event', async () => {
  await withServer(echoCredentials, async (server) => {
    for (const path of ['/plain', '/json', '/anthropic', '/cut']) {
      const capture = captureStatus();
      const events: BreakwaterEvent[] = [];
      const captured = createFetch({ onEvent: (e) => events.push(e), use: [throwOnStatus(), capture] });
      const alone = createFetch({ use: [throwOnStatus()] });
      for (const fetch of [captured, alone]) {
        const error = await fetch(`${server.origin}${path}`, { headers: SENT_HEADERS }).catch(
          (e: unknown) => e,
        );
        assert.ok(error instanceof HttpStatusError, String(error));
        assert.match(error.body, /\[redacted\]/, `${path}: ${error.body}`);
        assertNoCredential([error.message, error.body, error.serverMessage, error]);
      }
      const snapshot = capture.last(server.origin);
      assert.ok(snapshot, 'snapshot');
      assertNoCredential([snapshot, events]);
      if (path === '/json') {
        assert.match(snapshot.serverMessage ?? '', /^Incorrect API key provided: \[redacted\] \[redacted\]/);
      }
    }
  });
});

test('definePolicy().fetch(url, { auth }) hides the token its auth stamped when the server quotes it back, in the 401, in a RetryAfterTooLongError and in the policy’s last failure', async () => {
  await withServer(echoCredentials, async (server) => {
    const policy = definePolicy({ retry: { attempts: 2 } });
    const events: BreakwaterEvent[] = [];
    const bearer = policy.fetch(undefined, {
      auth: { token: TOKEN },
      onEvent: (e) => events.push(e),
      use: [throwOnStatus()],
    });
    const anthropic = policy.fetch(undefined, {
      auth: { token: API_KEY, header: 'x-api-key', scheme: '' },
      onEvent: (e) => events.push(e),
      use: [throwOnStatus()],
    });
    for (const fetch of [bearer, anthropic]) {
      const unauthorized = await fetch(`${server.origin}/plain`).catch((e: unknown) => e);
      assert.ok(unauthorized instanceof HttpStatusError, String(unauthorized));
      assert.equal(unauthorized.status, 401);
      assertNoCredential([unauthorized.message, unauthorized.body, unauthorized.serverMessage, unauthorized]);
      assertNoCredential([policy.stats(server.origin).lastFailure]);
    }
  });
  // A 429 asking for an hour: retry gives up with the server's answer as the cause.
  await withServer(
    (req) => ({
      status: 429,
      headers: { 'retry-after': '3600', 'content-type': 'application/json' },
      body: JSON.stringify({ error: { message: `Rate limit reached for ${req.headers.authorization}` } }),
    }),
    async (server) => {
      const policy = definePolicy({ retry: { attempts: 2 } });
      const events: BreakwaterEvent[] = [];
      const fetch = policy.fetch(undefined, { auth: { token: TOKEN }, onEvent: (e) => events.push(e) });
      const error = await fetch(server.origin).catch((e: unknown) => e);
      assert.ok(error instanceof RetryAfterTooLongError, String(error));
      const cause = error.cause as HttpStatusError;
      assert.equal(cause.serverMessage, 'Rate limit reached for [redacted]');
      assertNoCredential([error.message, error, cause.message, cause.body, cause, events]);
      assertNoCredential([policy.stats(server.origin).lastFailure]);
    },
  );
});

test('a Gemini key in x-goog-api-key, stamped by auth() or set by hand (as the Google SDK does), is hidden when the server quotes it back', async () => {
  await withServer(
    (req) => ({
      status: 400,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ error: { message: `API key not valid: ${req.headers['x-goog-api-key']}` } }),
    }),
    async (server) => {
      const policy = definePolicy({ retry: false });
      const stamped = policy.fetch(undefined, {
        auth: { token: API_KEY, header: 'x-goog-api-key', scheme: '' },
        use: [throwOnStatus()],
      });
      const byHand = createFetch({ use: [throwOnStatus()] });
      for (const send of [
        () => stamped(server.origin),
        () => byHand(server.origin, { headers: { 'x-goog-api-key': API_KEY } }),
      ]) {
        const error = await send().catch((e: unknown) => e);
        assert.ok(error instanceof HttpStatusError, String(error));
        assert.equal(error.serverMessage, 'API key not valid: [redacted]');
        assertNoCredential([error.message, error.body, error]);
      }
      assertNoCredential([policy.stats(server.origin).lastFailure]);
    },
  );
});

test('the tokens of two auth() in one chain, each in a header of another name, are both hidden when the server quotes them back', async () => {
  // A gateway's key outside, the API's key inside: one call sends both.
  const gatewayKey = 'gw-key-9f8e7d6c5b4a3210';
  const apiKey = 'api-key-0123456789abcdef';
  await withServer(
    (req) => ({
      status: 400,
      body: `gateway ${req.headers['x-gateway-key']} api ${req.headers['x-goog-api-key']}`,
    }),
    async (server) => {
      const fetch = createFetch({
        use: [
          throwOnStatus(),
          auth({ token: gatewayKey, header: 'x-gateway-key', scheme: '' }),
          auth({ token: apiKey, header: 'x-goog-api-key', scheme: '' }),
        ],
      });
      const error = await fetch(server.origin).catch((e: unknown) => e);
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.serverMessage, 'gateway [redacted] api [redacted]');
      assert.ok(!JSON.stringify(error).includes(gatewayKey), JSON.stringify(error));
    },
  );
});

test('a credential that holds a shorter one the call also sent is hidden whole, not around the shorter one', async () => {
  // An API that takes the session id as a bearer token, and the signed session cookie
  // (express-session's '<id>.<signature>') that holds it.
  const id = 'sess-12345678';
  const signed = `${id}.s1gnatur3XYZ`;
  await withServer(
    (req) => ({ status: 401, body: `invalid session ${String(req.headers.cookie).split('=')[1]}` }),
    async (server) => {
      const fetch = createFetch({ use: [throwOnStatus()] });
      const error = await fetch(server.origin, {
        headers: { authorization: `Bearer ${id}`, cookie: `session=${signed}` },
      }).catch((e: unknown) => e);
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.serverMessage, 'invalid session [redacted]');
      assert.ok(!JSON.stringify(error).includes('s1gnatur3'), JSON.stringify(error));
    },
  );
});

test('a quoted cookie value (sid="…") is hidden where the server quotes it back without the quotes', async () => {
  // RFC 6265 §4.1.1 lets a cookie value be quoted; servers (Python's http.cookies,
  // Go's net/http) read it without the quotes, and quote it back so.
  const sid = 'abcdefgh12345678';
  await withServer(
    (req) => ({ status: 401, body: `session ${String(req.headers.cookie).split('"')[1]} expired` }),
    async (server) => {
      const fetch = createFetch({ use: [throwOnStatus()] });
      const error = await fetch(server.origin, { headers: { cookie: `theme=dark; sid="${sid}"` } }).catch(
        (e: unknown) => e,
      );
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.serverMessage, 'session [redacted] expired');
      assert.ok(!JSON.stringify(error).includes(sid), JSON.stringify(error));
    },
  );
});

test('a token after its scheme and a tab (Authorization: Bearer<TAB>…) is hidden where the server quotes the token alone', async () => {
  // Servers split the scheme off at any whitespace (Go's strings.Fields, a split on /\s+/).
  await withServer(
    (req) => ({ status: 401, body: `invalid token ${String(req.headers.authorization).split(/\s+/)[1]}` }),
    async (server) => {
      const fetch = createFetch({ use: [throwOnStatus()] });
      const error = await fetch(server.origin, { headers: { authorization: `Bearer\t${TOKEN}` } }).catch(
        (e: unknown) => e,
      );
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.serverMessage, 'invalid token [redacted]');
      assertNoCredential([error.message, error.body, error]);
    },
  );
});

test('a credential quoted back in a JSON body with a \\u escape (.NET escapes + as \\u002B) is hidden in the body too, not only in serverMessage', async () => {
  await withServer(
    (req) => ({
      status: 401,
      headers: { 'content-type': 'application/json' },
      // System.Text.Json's default encoder escapes '+' (and <, >, &, ', ") as \u002B.
      body: JSON.stringify({ error: { message: `invalid token ${req.headers.authorization}` } }).replaceAll(
        '+',
        '\\u002B',
      ),
    }),
    async (server) => {
      const fetch = createFetch({ use: [throwOnStatus()] });
      const error = await fetch(server.origin, { headers: { authorization: `Bearer ${TOKEN}` } }).catch(
        (e: unknown) => e,
      );
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.serverMessage, 'invalid token [redacted]');
      assert.equal(error.body, '{"error":{"message":"invalid token [redacted]"}}');
      assertNoCredential([error.message, error]);
    },
  );
});

test('a credential quoted back percent-encoded (encodeURIComponent, a form, lower-case escapes) is hidden, and so is a percent-encoded cookie quoted back decoded', async () => {
  // A server that puts the token it was sent in a URL or a form it quotes back encodes its
  // '/', '+' and '='; express keeps a signed cookie percent-encoded (s%3A<id>.<signature>)
  // and quotes it back decoded.
  const cookie = 's%3Asess-0a1b2c3d.s1gnatur3Q';
  await withServer(
    (req) => {
      const token = String(req.headers.authorization).split(' ')[1] as string;
      const encoded = encodeURIComponent(token);
      return {
        status: 401,
        body: `login at /x?token=${encoded} or ${encoded.replace(/%[\dA-F]{2}/g, (hex) => hex.toLowerCase())} (${new URLSearchParams({ t: token })}), session ${decodeURIComponent(cookie)}`,
      };
    },
    async (server) => {
      const fetch = createFetch({ use: [throwOnStatus()] });
      const error = await fetch(server.origin, {
        headers: { authorization: `Bearer ${TOKEN}`, cookie: `sid=${cookie}` },
      }).catch((e: unknown) => e);
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(
        error.serverMessage,
        'login at /x?token=[redacted] or [redacted] (t=[redacted]), session [redacted]',
      );
      for (const shown of ['s1gn/atur3', 's1gn%2Fatur3', 's1gn%2fatur3', 's1gnatur3Q']) {
        assert.ok(!JSON.stringify(error).includes(shown), JSON.stringify(error));
      }
    },
  );
});

test('the password of a Basic Authorization or Proxy-Authorization is hidden where the server quotes it back decoded, alone or as user:password', async () => {
  const password = 'Sup3r-s3cret-pw';
  await withServer(
    (req) => {
      const [user, pw] = atob(String(req.headers['proxy-authorization']).split(' ')[1] as string).split(':');
      const decoded = atob(String(req.headers.authorization).split(' ')[1] as string);
      return { status: 401, body: `bad credentials ${decoded}; proxy user ${user} password ${pw}` };
    },
    async (server) => {
      const fetch = createFetch({ use: [throwOnStatus()] });
      const error = await fetch(server.origin, {
        headers: {
          authorization: `Basic ${btoa(`alice:${password}`)}`,
          'proxy-authorization': `basic ${btoa(`proxy-bob:${password}!`)}`,
        },
      }).catch((e: unknown) => e);
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(
        error.serverMessage,
        'bad credentials [redacted]; proxy user proxy-bob password [redacted]',
      );
      assert.ok(!JSON.stringify(error).includes(password), JSON.stringify(error));
    },
  );
});

test('the password of a Basic Authorization sent as UTF-8 (RFC 7617 charset="UTF-8") is hidden where the server quotes it back decoded', async () => {
  const password = 'Pässwört-geheim-42';
  const base64 = btoa(String.fromCharCode(...new TextEncoder().encode(`jörg:${password}`)));
  await withServer(
    (req) => {
      const bytes = Uint8Array.from(atob(String(req.headers.authorization).split(' ')[1] as string), (c) =>
        c.charCodeAt(0),
      );
      return {
        status: 401,
        headers: { 'content-type': 'text/plain; charset=utf-8' },
        body: `bad credentials ${new TextDecoder().decode(bytes)}`,
      };
    },
    async (server) => {
      const fetch = createFetch({ use: [throwOnStatus()] });
      const error = await fetch(server.origin, { headers: { authorization: `Basic ${base64}` } }).catch(
        (e: unknown) => e,
      );
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.serverMessage, 'bad credentials [redacted]');
    },
  );
});

/** The serverMessage of the 401 a loopback server answers a call sending `headers` with, its text `say(request headers)`. */
async function quotedBack(
  headers: Record<string, string>,
  say: (h: (name: string) => string) => string,
): Promise<string | undefined> {
  return withServer(
    (req) => ({ status: 401, body: say((name) => String(req.headers[name] ?? '')) }),
    async (server) => {
      const error = await createFetch({ use: [throwOnStatus()] })(server.origin, { headers }).catch(
        (e: unknown) => e,
      );
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.serverMessage, error.body);
      return error.serverMessage;
    },
  );
}

/** Base64 without its `=` padding, and in base64url's alphabet. */
const unpadded = (base64: string): string => base64.replace(/=+$/, '');
const base64url = (base64: string): string => unpadded(base64).replaceAll('+', '-').replaceAll('/', '_');

test('a bearer token or a Basic credential quoted back base64-encoded (padded or not, in base64url too) is hidden', async () => {
  // '?>' makes base64 hold '/' and '+', which base64url writes '_' and '-'.
  const token = 'tok-a?>a?>-012345678';
  const basic = btoa('alice:a?>Secret!');
  const padded = 'QmVhcmVyIHNlY3JldC10b2tlbg=='; // a token that is base64 itself, padded
  const said = await quotedBack(
    { authorization: `Bearer ${token}`, 'proxy-authorization': `Basic ${basic}`, 'x-api-key': padded },
    (h) => {
      const bearer = h('authorization');
      const b64 = btoa(bearer.slice('Bearer '.length));
      return [
        `key ${unpadded(h('x-api-key'))}`,
        `token ${b64} ${unpadded(b64)} ${base64url(b64)}`,
        `header ${btoa(bearer)}`,
        `basic ${unpadded(basic)} ${base64url(basic)}.`,
      ].join('; ');
    },
  );
  assert.equal(
    said,
    'key [redacted]; token [redacted]= [redacted] [redacted]; header [redacted]; basic [redacted] [redacted].',
  );
});

test('a credential base64-encoded inside a longer base64 text, at any byte offset and with more bytes after it, is hidden', async () => {
  // A server that echoes a request (or a token it minted around the one sent) in a base64
  // blob puts the credential at any byte offset: each offset mod 3 has its own characters,
  // and with bytes after it the last one differs from the credential's own base64 too.
  const token = 'tok-a?>a?>-0123456789x'; // 22 bytes: its own base64 ends in a partial group
  const befores = ['', 'a', 'ab', 'abc'];
  const blobs = befores.map((before) => btoa(`${before}${token}zz`));
  const said = await quotedBack({ authorization: `Bearer ${token}` }, () => `blobs ${blobs.join(' ')}`);
  // Only the characters that also encode a byte around the token stay: 4 characters a 3 bytes.
  const expected = befores.map((before, i) => {
    const blob = blobs[i] as string;
    return `${blob.slice(0, Math.ceil((before.length * 4) / 3))}[redacted]${blob.slice(Math.floor(((before.length + token.length) * 4) / 3))}`;
  });
  assert.equal(said, `blobs ${expected.join(' ')}`);
});

test('a cookie value or a secret query value quoted back base64-encoded is hidden, as a header credential is', async () => {
  const sid = 'sess-9f8e7d6c5b4a3210';
  const key = 'AIzaSyD-0123456789abcdef';
  await withServer(
    () => ({ status: 401, body: `session ${btoa(sid)}, key ${btoa(key)}` }),
    async (server) => {
      const fetch = createFetch({ use: [throwOnStatus()] });
      const error = await fetch(`${server.origin}/v1?key=${key}`, {
        headers: { cookie: `theme=dark; sid=${sid}` },
      }).catch((e: unknown) => e);
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.serverMessage, 'session [redacted], key [redacted]');
    },
  );
});

test('an Authorization of a scheme alone (Bearer with no token), or with a placeholder token (undefined, null), hides no word of the body: neither is a secret', async () => {
  // A client whose token came out empty sends `Authorization: Bearer`; the server's answer
  // names the scheme, and hiding it would blank the very words that say what is wrong.
  const said = await quotedBack(
    { authorization: 'Bearer', 'proxy-authorization': 'Basic', 'x-api-key': 'Token' },
    () => 'Bearer token required (send Authorization: Bearer <token>); Basic realm; Token missing',
  );
  assert.equal(
    said,
    'Bearer token required (send Authorization: Bearer <token>); Basic realm; Token missing',
  );
  // `Bearer ${token}` given no token: hiding `null` blanked every null of the body.
  for (const placeholder of ['undefined', 'null']) {
    const body = `error: null; detail: token undefined is not valid; auth: Bearer ${placeholder}`;
    assert.equal(await quotedBack({ authorization: `Bearer ${placeholder}` }, () => body), body);
  }
});

test('a header credential of 4 to 7 characters (a short API key, a Basic password) is hidden where it stands as a word, never inside one; shorter ones, and cookie values under 8, stay', async () => {
  // The rule: 8 characters or more, hidden wherever quoted (as before). A header's credential
  // of 4 to 7 is hidden where no letter, digit, '-' or '+' is next to it: a password 'pass'
  // leaves 'password' alone. Under 4, nothing is hidden: 'abc' would blank every word 'abc'.
  // Cookie values under 8 are no secret as a rule ('theme=dark') and stay.
  const said = await quotedBack(
    {
      authorization: `Basic ${btoa('alice:hunter2')}`,
      'x-api-key': 'k3y7',
      'api-key': 'abc',
      'x-goog-api-key': 'Ab3dE6g8',
      cookie: 'theme=dark',
    },
    () =>
      'password hunter2 ("hunter2"), key k3y7. not hunter22, my-hunter2, k3y7s; ' +
      'abc abcdef; theme dark; long key Ab3dE6g8 and xAb3dE6g8x',
  );
  assert.equal(
    said,
    'password [redacted] ("[redacted]"), key [redacted]. not hunter22, my-hunter2, k3y7s; ' +
      'abc abcdef; theme dark; long key [redacted] and x[redacted]x',
  );
});

test('a body cut inside an escape of a credential it quotes (%2F, \\u002B) shows no part of the credential', async () => {
  // The snippet ends at 2048 bytes: here in the middle of the '%2F' or the '\u002B' of the token.
  const encoded = encodeURIComponent(TOKEN);
  const escaped = TOKEN.replace('+', '\\u002B');
  const cutAfter = (quoted: string, end: string): string => {
    const kept = `token=${quoted.slice(0, quoted.indexOf(end) + end.length)}`;
    return `${'x'.repeat(2048 - kept.length)}token=${quoted} and more`;
  };
  await withServer(
    (req) => ({
      status: 401,
      body: req.url === '/percent' ? cutAfter(encoded, 's1gn%2') : cutAfter(escaped, 'atur3\\u00'),
    }),
    async (server) => {
      const fetch = createFetch({ use: [throwOnStatus()] });
      for (const path of ['/percent', '/json']) {
        const error = await fetch(`${server.origin}${path}`, {
          headers: { authorization: `Bearer ${TOKEN}` },
        }).catch((e: unknown) => e);
        assert.ok(error instanceof HttpStatusError, String(error));
        assert.match(error.body, /xtoken=\[redacted\]$/, `${path}: ${error.body.slice(-80)}`);
        assert.ok(!JSON.stringify(error).includes('eyJhbGci'), `${path}: ${error.body.slice(-80)}`);
      }
    },
  );
});

test('a reason phrase that quotes the credential the call sent shows none of it in the error', async () => {
  // Node's and Bun's fetch hand the reason phrase on as the server wrote it (Deno's gives the
  // standard phrase for the status): an old app server may put its message there.
  await withReasonPhrase({ status: 401, phrase: 'Invalid token' }, async (origin) => {
    const headers = { authorization: `Bearer ${TOKEN}` };
    // With a snapshot to reuse, and without.
    const captured = createFetch({ use: [throwOnStatus(), captureStatus()] });
    const alone = createFetch({ use: [throwOnStatus()] });
    for (const fetch of [captured, alone]) {
      const error = await fetch(origin, { headers }).catch((e: unknown) => e);
      assert.ok(error instanceof HttpStatusError, String(error));
      assertNoCredential([error.message, error.statusText, error]);
      if (error.statusText !== 'Unauthorized') assert.equal(error.statusText, 'Invalid token [redacted]');
    }
  });
});

test('an API key the call sent in its query (?key=) is hidden where the server quotes it back', async () => {
  // Gemini, Maps and many others take the key as a query parameter; a query value is
  // redacted in every URL shown, and so it is where the body quotes it alone.
  const key = 'AIzaSyD-q9Xq3Lm0kP2vR7tW1zY4bN6cH8jE5fG';
  await withServer(
    (req) => ({
      status: 400,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        error: {
          message: `API key not valid: ${new URL(req.url ?? '', 'http://h').searchParams.get('key')}`,
        },
      }),
    }),
    async (server) => {
      const fetch = createFetch({ use: [throwOnStatus()] });
      const error = await fetch(`${server.origin}/v1/models?key=${key}&alt=json`).catch((e: unknown) => e);
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.serverMessage, 'API key not valid: [redacted]');
      assert.ok(!JSON.stringify(error).includes(key.slice(0, 8)), JSON.stringify(error));
    },
  );
});

test('a query value that is no credential (Azure’s api-version, a date) stays in the server’s message that names it', async () => {
  await withServer(
    () => ({
      status: 400,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        error: {
          code: 'InvalidApiVersionParameter',
          message: "The api-version '2024-13-01' is invalid; quota resets at 2026-11-30T13:00:00Z.",
        },
      }),
    }),
    async (server) => {
      const fetch = createFetch({ use: [throwOnStatus()] });
      const error = await fetch(
        `${server.origin}/openai/deployments/d/chat/completions?api-version=2024-13-01&since=2026-11-30`,
      ).catch((e: unknown) => e);
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(
        error.serverMessage,
        "The api-version '2024-13-01' is invalid; quota resets at 2026-11-30T13:00:00Z.",
      );
    },
  );
});

test('sdkFailureBody() gives a JSON body the snapshot cut whole, hidden and redacted as readSaid() reads it, and another body’s start as readSaid() does', async () => {
  const token = 'sk-sdk-body-0123456789abcdef';
  // Past 2 KiB, escaped as PHP writes JSON (`\/`), quoting the credential and a URL's secret.
  const whole = JSON.stringify({
    error: {
      message: `bad token Bearer ${token}`,
      trace: `${'x'.repeat(3000)} https://u:p4ssw0rd-secret@api.example.com/v1?sig=s3cr3t-sig`,
    },
  }).replaceAll('/', '\\/');
  await withServer(always({ status: 200, body: 'ok' }), async (server) => {
    let seen: Call | undefined;
    const fetch = createFetch({
      use: [
        (call, next) => {
          seen = call;
          return next(call);
        },
      ],
    });
    await (await fetch(server.origin, { headers: { authorization: `Bearer ${token}` } })).text();
    const call = seen as Call;
    const cut = await readSaid(call, new Response(whole));
    const body = await sdkFailureBody(call, cut.body, () => whole);
    assert.equal(body, (await readSaid(call, new Response(whole), Infinity)).body);
    assert.ok(body.length > 3000 && !body.includes(token) && !body.includes('s3cr3t-sig'), body);
    assert.doesNotThrow(() => JSON.parse(body));
    // A snapshot that is JSON is handed over unread; a body that is not JSON gives its start.
    const small = await readSaid(call, new Response('{"error":"slow down"}'));
    assert.equal(await sdkFailureBody(call, small.body, () => assert.fail('read')), small.body);
    const text = `${'y'.repeat(3000)} Bearer ${token}`;
    assert.equal(
      await sdkFailureBody(call, undefined, () => text),
      (await readSaid(call, new Response(text))).body,
    );
    assert.equal(await sdkFailureBody(call, cut.body, () => text), cut.body);
  });
});

test("throwOnStatus() rejects with the caller's abort reason at once while a failure body stalls behind a fetch that ignores the signal", async () => {
  await withServer(always({ stall: 'mid-body', status: 503, body: 'busy' }), async (server) => {
    // A custom fetch that drops init.signal: only breakwater's own read can hear the abort.
    const deaf: typeof fetch = (input, init) => globalThis.fetch(input, { ...init, signal: null });
    const fetch = createFetch({ fetch: deaf, use: [throwOnStatus()] });
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    setTimeout(() => controller.abort(reason), 50);
    const started = Date.now();
    await assert.rejects(fetch(server.origin, { signal: controller.signal }), (error: unknown) => {
      assert.equal(error, reason);
      return true;
    });
    assert.ok(Date.now() - started < 300, `took ${Date.now() - started} ms`);
  });
});

test("throwOnStatus() lets go of a failure's connection on a base fetch whose body is a Node stream (node-fetch v2): it is read to its end, not left open", async () => {
  const nodeFetch = nodeFetchOverHttp();
  const body = 'x'.repeat(256 * 1024);
  await withServer(always({ status: 500, body }), async (server) => {
    const fetch = createFetch({ fetch: nodeFetch.fetch, use: [throwOnStatus()] });
    for (let i = 0; i < 3; i++) await assert.rejects(fetch(`${server.origin}/v1/items`), HttpStatusError);
    assert.equal(await nodeFetch.open(), 0, 'a connection left open');
  });
});

test('a caller’s abort while throwOnStatus() reads a failure body lets that body go, through a fetch that ignores the signal too', async () => {
  // With no capture in the chain, throwOnStatus() reads the body itself: the abort ends
  // that read and rejects the call, and the answer's connection must be freed.
  const outcome = await abortWhileFailureBodyRead(throwOnStatus());
  assert.equal(outcome, 'closed', 'the connection was still held 3 s after the abort');
});

test('a long serverMessage is cut between characters: never half of an emoji’s surrogate pair', async () => {
  // A non-JSON body's message is cut at 400 UTF-16 units; an emoji there is two of them.
  const text = `${'x'.repeat(399)}😀 and more after the cut`;
  const error = await thrownBy({ status: 503, body: text });
  assert.ok(error instanceof HttpStatusError, String(error));
  assert.equal(error.serverMessage, `${'x'.repeat(399)}…`);
  assert.equal(error.body, text);
});
