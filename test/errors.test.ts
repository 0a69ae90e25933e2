import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inspect } from 'node:util';
import {
  BreakwaterError,
  CircuitOpenError,
  GateClosedError,
  HttpStatusError,
  NetworkError,
  RetryAfterTooLongError,
  requestSummary,
  TimeoutError,
} from '../src/errors.ts';
// From the package's entry, as an app imports it: it loads the inspect hook (src/network.ts).
import { wrapHttpError } from '../src/index.ts';
import { withBundle } from './helpers/bundle.ts';
import { always, withServer } from './helpers/server.ts';

// Every date-dependent test uses this instant: 2026-11-29T17:03:12Z is the retry time.
const RETRY_AT = new Date('2026-11-29T17:03:12.000Z');
const NOW = RETRY_AT.getTime() - 4_200;

/** A request whose URL carries credentials in every place a URL can. */
const INFO = requestSummary(
  'openai',
  'post',
  'https://user:hunter2-pw@api.example.com/v1/chat?api_key=sk-live-123#frag',
);
const REDACTED_URL = 'https://api.example.com/v1/chat?api_key=[redacted]';

/** One instance of every error class, built with a request where the class takes one. */
function everyError(cause?: unknown): BreakwaterError[] {
  const c = cause === undefined ? {} : { cause };
  return [
    new BreakwaterError('something broke', 'SOMETHING', { ...c, request: INFO }),
    new HttpStatusError({ status: 503, statusText: 'Service Unavailable', request: INFO, ...c }),
    new NetworkError({ code: 'ECONNREFUSED', phase: 'connect', sent: 'no', request: INFO, ...c }),
    new TimeoutError({ scope: 'attempt', ms: 5_000, request: INFO, ...c }),
    new CircuitOpenError({
      key: 'openai',
      retryAt: RETRY_AT,
      reason: 'after 5 consecutive failures',
      now: NOW,
      ...c,
    }),
    new GateClosedError({ key: 'openai', retryAt: RETRY_AT, now: NOW, ...c }),
    new RetryAfterTooLongError({ retryAfterMs: 120_000, limitMs: 60_000, request: INFO, now: NOW, ...c }),
  ];
}

/** The class names of {@link everyError}'s errors, in its order. */
const CLASS_NAMES = [
  'BreakwaterError',
  'HttpStatusError',
  'NetworkError',
  'TimeoutError',
  'CircuitOpenError',
  'GateClosedError',
  'RetryAfterTooLongError',
];

// --- the hierarchy ---

test('every error class extends BreakwaterError and Error', () => {
  for (const error of everyError()) {
    assert.ok(error instanceof BreakwaterError, error.name);
    assert.ok(error instanceof Error, error.name);
  }
});

test('every error’s name is its class name', () => {
  assert.deepEqual(
    everyError().map((error) => error.name),
    CLASS_NAMES,
  );
  for (const error of everyError()) assert.equal(error.name, error.constructor.name);
});

test('every error class has its stable code', () => {
  assert.deepEqual(
    everyError().map((error) => error.code),
    [
      'SOMETHING',
      'HTTP_STATUS',
      'ECONNREFUSED',
      'TIMEOUT',
      'CIRCUIT_OPEN',
      'GATE_CLOSED',
      'RETRY_AFTER_TOO_LONG',
    ],
  );
});

test('a NetworkError’s code is the normalised network code it was given', () => {
  for (const code of ['ECONNREFUSED', 'ENOTFOUND', 'ECONNRESET', 'ETIMEDOUT', 'TLS', 'EPIPE']) {
    assert.equal(new NetworkError({ code, phase: 'send', sent: 'maybe' }).code, code);
  }
});

test('every error keeps its cause as is', () => {
  const cause = new TypeError('fetch failed');
  for (const error of everyError(cause)) assert.equal(error.cause, cause, error.name);
});

test('an error built without a cause has no cause', () => {
  for (const error of everyError()) {
    assert.equal(error.cause, undefined, error.name);
    assert.equal(Object.hasOwn(error, 'cause'), false, error.name);
  }
});

test('an error has a stack trace that starts with its name', () => {
  const error = new HttpStatusError({ status: 500 });
  assert.equal(typeof error.stack, 'string');
  assert.ok(error.stack?.includes('HttpStatusError'), error.stack);
});

// --- requestSummary ---

test('requestSummary upper-cases the method and redacts the URL', () => {
  assert.deepEqual(INFO, { key: 'openai', method: 'POST', url: REDACTED_URL });
});

test('requestSummary accepts a URL object', () => {
  assert.equal(
    requestSummary('k', 'get', new URL('http://a:b@example.com/x?q=1')).url,
    'http://example.com/x?q=[redacted]',
  );
});

// --- messages ---

test('messages of errors about a request name the key, the method and the redacted URL', () => {
  for (const error of everyError()) {
    // The base class takes its message as written; circuits and gates are about a key, not a request.
    if (error.constructor === BreakwaterError) continue;
    if (error instanceof CircuitOpenError || error instanceof GateClosedError) continue;
    assert.ok(error.message.includes('"openai"'), `${error.name}: ${error.message}`);
    assert.ok(error.message.includes('POST'), `${error.name}: ${error.message}`);
    assert.ok(error.message.includes(REDACTED_URL), `${error.name}: ${error.message}`);
  }
});

test('messages never contain URL userinfo, query values or the fragment', () => {
  for (const error of everyError()) {
    for (const secret of ['hunter2-pw', 'user:', 'sk-live-123', 'frag']) {
      assert.equal(error.message.includes(secret), false, `${error.name} shows ${secret}: ${error.message}`);
    }
  }
});

test('an HttpStatusError message has the status, the server’s message and its requested wait', () => {
  const error = new HttpStatusError({
    status: 429,
    statusText: 'Too Many Requests',
    serverMessage: 'Rate limit reached for requests',
    retryAfterMs: 7_000,
    request: INFO,
  });
  assert.equal(
    error.message,
    `POST ${REDACTED_URL} (server "openai") failed with HTTP 429 Too Many Requests: ` +
      'Rate limit reached for requests; server asked to retry after 7000 ms',
  );
});

test('an HttpStatusError with only a status says so plainly', () => {
  assert.equal(new HttpStatusError({ status: 500 }).message, 'request failed with HTTP 500');
});

test('a NetworkError message has the code, the phase and whether it was sent', () => {
  const notSent = new NetworkError({ code: 'ECONNREFUSED', phase: 'connect', sent: 'no', request: INFO });
  assert.equal(
    notSent.message,
    `POST ${REDACTED_URL} (server "openai") failed: network error ECONNREFUSED during connect (not sent)`,
  );
  const maybe = new NetworkError({ code: 'ECONNRESET', phase: 'send', sent: 'maybe' });
  assert.equal(
    maybe.message,
    'request failed: network error ECONNRESET during send (may have reached the server)',
  );
});

test('a TimeoutError message has the scope and the deadline', () => {
  const error = new TimeoutError({ scope: 'total', ms: 120_000, request: INFO });
  assert.equal(
    error.message,
    `POST ${REDACTED_URL} (server "openai") timed out: total deadline of 120000 ms passed`,
  );
  assert.equal(error.scope, 'total');
  assert.equal(error.ms, 120_000);
});

test('a CircuitOpenError message says why, when and how long until the next attempt', () => {
  const error = new CircuitOpenError({
    key: 'github-mcp',
    retryAt: RETRY_AT,
    reason: 'circuit open after 5 consecutive failures (last: HTTP 503 Service Unavailable)',
    now: NOW,
  });
  assert.equal(
    error.message,
    'request (server "github-mcp") not sent, circuit open after 5 consecutive failures (last: HTTP 503 Service Unavailable); ' +
      'next attempt at 2026-11-29T17:03:12.000Z (in 4.2 s)',
  );
  assert.equal(error.key, 'github-mcp');
  assert.equal(error.retryAt, RETRY_AT);
});

test('a CircuitOpenError whose retryAt has passed says "in 0.0 s", never a negative wait', () => {
  const error = new CircuitOpenError({ key: 'k', retryAt: RETRY_AT, reason: 'paced', now: NOW + 60_000 });
  assert.ok(error.message.endsWith('(in 0.0 s)'), error.message);
});

test('a GateClosedError message names the gate, the last failure and the next attempt', () => {
  const error = new GateClosedError({
    key: 'mcp-start',
    retryAt: RETRY_AT,
    now: NOW,
    cause: new Error('connect refused'),
  });
  assert.equal(
    error.message,
    'start gate "mcp-start" is closed after: connect refused; next attempt at 2026-11-29T17:03:12.000Z (in 4.2 s)',
  );
});

test('a GateClosedError message redacts URLs in its cause’s message', () => {
  const cause = new Error(
    'Failed to fetch Agent Card from https://u:pw-123@agent.example/card.json?token=tk-456: 503',
  );
  const error = new GateClosedError({ key: 'a2a', retryAt: RETRY_AT, now: NOW, cause });
  assert.ok(error.message.includes('https://agent.example/card.json?token=[redacted]: 503'), error.message);
  assert.equal(error.message.includes('tk-456'), false);
  assert.equal(error.message.includes('pw-123'), false);
});

test('a RetryAfterTooLongError names the wait and the limit, and sets retryAt from now', () => {
  const error = new RetryAfterTooLongError({
    retryAfterMs: 120_000,
    limitMs: 60_000,
    request: INFO,
    now: NOW,
  });
  assert.equal(
    error.message,
    `POST ${REDACTED_URL} (server "openai"): server asked to wait 120000 ms, longer than the 60000 ms allowed; not waiting`,
  );
  assert.equal(error.retryAfterMs, 120_000);
  assert.equal(error.retryAt.getTime(), NOW + 120_000);
});

// --- fields ---

test('a BreakwaterError keeps its message as written and its request, redacted', () => {
  const error = new BreakwaterError('middleware "auth" threw: kaboom', 'MIDDLEWARE_FAILED', {
    request: INFO,
  });
  assert.equal(error.message, 'middleware "auth" threw: kaboom');
  assert.equal(error.code, 'MIDDLEWARE_FAILED');
  assert.deepEqual(error.request, { key: 'openai', method: 'POST', url: REDACTED_URL });
});

test('an HttpStatusError keeps its fields, with defaults for the ones not given', () => {
  const full = new HttpStatusError({
    status: 503,
    statusText: 'Service Unavailable',
    retryable: true,
    retryAfterMs: 2_000,
    body: '{"error":{"message":"overloaded"}}',
    serverMessage: 'overloaded',
  });
  assert.equal(full.status, 503);
  assert.equal(full.statusText, 'Service Unavailable');
  assert.equal(full.retryable, true);
  assert.equal(full.retryAfterMs, 2_000);
  assert.equal(full.body, '{"error":{"message":"overloaded"}}');
  assert.equal(full.serverMessage, 'overloaded');
  const bare = new HttpStatusError({ status: 404 });
  assert.equal(bare.statusText, '');
  assert.equal(bare.retryable, false);
  assert.equal(bare.retryAfterMs, undefined);
  assert.equal(bare.body, '');
  assert.equal(bare.serverMessage, undefined);
  assert.deepEqual(bare.headers, {});
  assert.equal(bare.request, undefined);
});

test('a NetworkError keeps its phase and sent state', () => {
  const error = new NetworkError({ code: 'ECONNRESET', phase: 'response', sent: 'maybe' });
  assert.equal(error.phase, 'response');
  assert.equal(error.sent, 'maybe');
});

test('HttpStatusError.headers keeps only the allowlisted headers, frozen', () => {
  const error = new HttpStatusError({
    status: 429,
    headers: new Headers({
      authorization: 'Bearer sk-secret-1',
      'proxy-authorization': 'Basic c2VjcmV0',
      cookie: 'session=secret-2',
      'set-cookie': 'session=secret-3; HttpOnly',
      'x-api-key': 'secret-4',
      'api-key': 'secret-5',
      'x-internal-token': 'secret-6',
      'content-type': 'application/json',
      'retry-after': '7',
      'x-should-retry': 'true',
      'x-request-id': 'req_1',
      'x-ratelimit-remaining-requests': '0',
      'anthropic-ratelimit-tokens-reset': '2026-11-29T17:03:12Z',
      ratelimit: '"default";r=0;t=7',
    }),
  });
  assert.deepEqual(error.headers, {
    'anthropic-ratelimit-tokens-reset': '2026-11-29T17:03:12Z',
    'content-type': 'application/json',
    ratelimit: '"default";r=0;t=7',
    'retry-after': '7',
    'x-ratelimit-remaining-requests': '0',
    'x-request-id': 'req_1',
    'x-should-retry': 'true',
  });
  assert.ok(Object.isFrozen(error.headers), 'Object.isFrozen(error.headers)');
});

// --- toJSON ---

test('JSON.stringify(HttpStatusError) shows name, code, message, request and every field', () => {
  const error = new HttpStatusError({
    status: 503,
    statusText: 'Service Unavailable',
    retryable: true,
    retryAfterMs: 7_000,
    body: '{"error":{"message":"overloaded"}}',
    serverMessage: 'overloaded',
    headers: new Headers({ 'retry-after': '7', authorization: 'Bearer sk-secret' }),
    at: 1_795_971_600_000,
    request: INFO,
    cause: new Error('SSE stream disconnected'),
  });
  assert.deepEqual(JSON.parse(JSON.stringify(error)), {
    name: 'HttpStatusError',
    code: 'HTTP_STATUS',
    message: error.message,
    request: { key: 'openai', method: 'POST', url: REDACTED_URL },
    status: 503,
    statusText: 'Service Unavailable',
    retryable: true,
    retryAfterMs: 7_000,
    at: 1_795_971_600_000,
    body: '{"error":{"message":"overloaded"}}',
    serverMessage: 'overloaded',
    headers: { 'retry-after': '7' },
    cause: { name: 'Error', message: 'SSE stream disconnected' },
  });
});

test('toJSON leaves out fields that are undefined', () => {
  const error = new HttpStatusError({ status: 404 });
  assert.deepEqual(error.toJSON(), {
    name: 'HttpStatusError',
    code: 'HTTP_STATUS',
    message: 'request failed with HTTP 404',
    status: 404,
    statusText: '',
    retryable: false,
    at: error.at,
    body: '',
    headers: {},
  });
});

test('an HttpStatusError says when its response arrived (at), by default when it was built: its retryAfterMs counts from then', () => {
  const before = Date.now();
  const error = new HttpStatusError({ status: 503, retryAfterMs: 1_000 });
  assert.ok(error.at >= before && error.at <= Date.now(), `at ${error.at} is when it was built`);
  assert.equal(
    new HttpStatusError({ status: 503, retryAfterMs: 1_000, at: 1_795_971_600_000 }).at,
    1_795_971_600_000,
  );
  // The wait stays what the server asked: the time since is not taken off it.
  assert.equal(
    new HttpStatusError({ status: 503, retryAfterMs: 1_000, at: before - 400 }).retryAfterMs,
    1_000,
  );
});

test('JSON.stringify(NetworkError) shows its code, phase, sent state and request', () => {
  const error = new NetworkError({ code: 'ECONNRESET', phase: 'send', sent: 'maybe', request: INFO });
  assert.deepEqual(JSON.parse(JSON.stringify(error)), {
    name: 'NetworkError',
    code: 'ECONNRESET',
    message: error.message,
    request: { key: 'openai', method: 'POST', url: REDACTED_URL },
    phase: 'send',
    sent: 'maybe',
  });
});

test('JSON.stringify(TimeoutError) shows its scope and deadline', () => {
  const error = new TimeoutError({ scope: 'attempt', ms: 5_000 });
  assert.deepEqual(JSON.parse(JSON.stringify(error)), {
    name: 'TimeoutError',
    code: 'TIMEOUT',
    message: error.message,
    scope: 'attempt',
    ms: 5_000,
  });
});

test('JSON.stringify(CircuitOpenError) shows key and retryAt as an ISO date', () => {
  const error = new CircuitOpenError({ key: 'github-mcp', retryAt: RETRY_AT, reason: 'paced', now: NOW });
  assert.deepEqual(JSON.parse(JSON.stringify(error)), {
    name: 'CircuitOpenError',
    code: 'CIRCUIT_OPEN',
    message: error.message,
    key: 'github-mcp',
    retryAt: '2026-11-29T17:03:12.000Z',
  });
});

test('JSON.stringify(GateClosedError) shows key, retryAt and the cause summarised', () => {
  const error = new GateClosedError({
    key: 'mcp',
    retryAt: RETRY_AT,
    now: NOW,
    cause: new TypeError('fetch failed'),
  });
  assert.deepEqual(JSON.parse(JSON.stringify(error)), {
    name: 'GateClosedError',
    code: 'GATE_CLOSED',
    message: error.message,
    key: 'mcp',
    retryAt: '2026-11-29T17:03:12.000Z',
    cause: { name: 'TypeError', message: 'fetch failed' },
  });
});

test('JSON.stringify(RetryAfterTooLongError) shows the wait and retryAt', () => {
  const error = new RetryAfterTooLongError({ retryAfterMs: 90_000, limitMs: 60_000, now: NOW });
  assert.deepEqual(JSON.parse(JSON.stringify(error)), {
    name: 'RetryAfterTooLongError',
    code: 'RETRY_AFTER_TOO_LONG',
    message: error.message,
    retryAfterMs: 90_000,
    retryAt: new Date(NOW + 90_000).toISOString(),
  });
});

test('JSON.stringify(RetryAfterTooLongError) of a wait past any date (a hand-built HttpStatusError’s Infinity) does not throw: retryAt is null', () => {
  // breaker.ts keeps an Infinity retryAfterMs (every use caps it), and retry() passes a
  // server delay on as this error's wait: new Date(now + Infinity) is an Invalid Date,
  // whose toISOString() threw a RangeError out of JSON.stringify (a logger's, say).
  const error = new RetryAfterTooLongError({ retryAfterMs: Infinity, limitMs: 60_000, now: NOW });
  const json = JSON.parse(JSON.stringify(error)) as Record<string, unknown>;
  assert.equal(json.retryAt, null);
  assert.equal(json.retryAfterMs, null);
  assert.equal(json.code, 'RETRY_AFTER_TOO_LONG');
});

test('toJSON summarises the cause by name and message only, dropping its other fields', () => {
  const cause = Object.assign(new Error('Error POSTing to endpoint (HTTP 503)'), {
    headers: { authorization: 'Bearer sk-cause-secret' },
    request: { url: 'https://api.example.com/?key=cause-secret' },
  });
  const json = JSON.stringify(new HttpStatusError({ status: 503, cause }));
  assert.equal(json.includes('cause-secret'), false, json);
  assert.deepEqual(JSON.parse(json).cause, {
    name: 'Error',
    message: 'Error POSTing to endpoint (HTTP 503)',
  });
});

test('toJSON redacts URLs in the cause’s message (Deno and SDKs put the request URL there)', () => {
  const cause = new TypeError(
    'error sending request for url (http://u:pw-789@127.0.0.1:8080/mcp?token=tk-789): client error (Connect)',
  );
  const json = JSON.stringify(
    new NetworkError({ code: 'ECONNREFUSED', phase: 'connect', sent: 'no', cause }),
  );
  assert.equal(json.includes('tk-789'), false, json);
  assert.equal(json.includes('pw-789'), false, json);
  assert.equal(
    JSON.parse(json).cause.message,
    'error sending request for url (http://127.0.0.1:8080/mcp?token=[redacted]): client error (Connect)',
  );
});

test('toJSON leaves out a cause that is not an Error', () => {
  assert.equal('cause' in new TimeoutError({ scope: 'attempt', ms: 1, cause: 'a string' }).toJSON(), false);
});

test('toJSON never contains URL userinfo or query values', () => {
  for (const error of everyError(new Error('boom'))) {
    const json = JSON.stringify(error);
    for (const secret of ['hunter2-pw', 'sk-live-123', 'frag']) {
      assert.equal(json.includes(secret), false, `${error.name} shows ${secret}: ${json}`);
    }
  }
});

test('an HttpStatusError never shows the userinfo or query values of a URL the server’s body echoed', () => {
  // Servers quote the request URL back ("invalid URL https://..."), with its credentials.
  const echoed = 'invalid callback https://user:hunter2-pw@hooks.example.com/cb?api_key=sk-live-123';
  const error = new HttpStatusError({ status: 400, serverMessage: echoed, body: `{"error":"${echoed}"}` });
  for (const shown of [error.message, error.serverMessage ?? '', error.body, JSON.stringify(error)]) {
    for (const secret of ['hunter2-pw', 'user:', 'sk-live-123']) {
      assert.equal(shown.includes(secret), false, `shows ${secret}: ${shown}`);
    }
  }
  assert.equal(error.serverMessage, 'invalid callback https://hooks.example.com/cb?api_key=[redacted]');
});

test('a hand-built HttpStatusError shows no secret of a URL in its statusText, in its message, statusText or JSON', () => {
  // A proxy or an old app server may quote a URL in its reason phrase; whoever builds
  // the error may pass that phrase on as it came.
  const error = new HttpStatusError({
    status: 503,
    statusText: 'Unavailable: https://admin:hunter2-pw@db.internal/x?token=tk-st-1 at /a2a?api_key=sk-st-2',
  });
  for (const shown of [error.message, error.statusText, JSON.stringify(error)]) {
    for (const secret of ['hunter2-pw', 'admin', 'tk-st-1', 'sk-st-2']) {
      assert.equal(shown.includes(secret), false, `shows ${secret}: ${shown}`);
    }
  }
  assert.equal(
    error.statusText,
    'Unavailable: https://db.internal/x?token=[redacted] at /a2a?api_key=[redacted]',
  );
  assert.equal(error.message, `request failed with HTTP 503 ${error.statusText}`);
  // An ordinary reason phrase stays as it is.
  assert.equal(
    new HttpStatusError({ status: 503, statusText: 'Service Unavailable' }).statusText,
    'Service Unavailable',
  );
});

test('toJSON() of an error whose cause has a message that is no text, or throws when read, still serialises', () => {
  // Any error may become a cause (a gate's isCrashLoop accepts what it likes): a message
  // of 42 or a throwing getter must not make JSON.stringify (a logger) throw.
  for (const cause of [
    Object.assign(new Error('x'), { message: 42 }),
    Object.defineProperty(new Error('x'), 'message', {
      get() {
        throw new Error('no message here');
      },
    }),
  ]) {
    const error = new BreakwaterError('it failed', 'X', { cause });
    const json = JSON.parse(JSON.stringify(error));
    assert.deepEqual(json.cause, { name: 'Error', message: '' });
  }
});

test('toJSON() of an error whose cause is a Proxy that throws on every read, or whose name is no text, still serialises', () => {
  // A cause from another library may be a Proxy (a mock, an observable wrapper) whose
  // reads throw, or carry a name that is not a string: the name is read as the message is.
  const throwing = new Proxy(new Error('x'), {
    get() {
      throw new Error('no reads here');
    },
  });
  const badName = Object.defineProperty(new Error('x'), 'name', {
    get() {
      throw new Error('no name here');
    },
  });
  const objectName = Object.assign(new Error('x'), {
    name: {
      toJSON() {
        throw new Error('no JSON here');
      },
    },
  });
  for (const cause of [throwing, badName, objectName]) {
    const json = JSON.parse(JSON.stringify(new BreakwaterError('it failed', 'X', { cause })));
    assert.deepEqual(json.cause, { name: '', message: cause === throwing ? '' : 'x' });
  }
});

test('an error whose cause is a revoked Proxy (every operation throws, reading its prototype too) still builds and serialises', () => {
  // `instanceof Error` reads the prototype: on a revoked Proxy (a mock or wrapper that was
  // torn down) that throws, and the GateClosedError built for it, or toJSON(), threw a
  // TypeError in its place.
  const { proxy, revoke } = Proxy.revocable(new Error('x'), {});
  revoke();
  const gate = new GateClosedError({ key: 'openai', retryAt: RETRY_AT, now: NOW, cause: proxy });
  assert.match(gate.message, /^start gate "openai" is closed/);
  for (const error of [gate, new HttpStatusError({ status: 503, cause: proxy })]) {
    const json = JSON.parse(JSON.stringify(error)) as { cause?: unknown };
    assert.deepEqual(json.cause, { name: '', message: '' });
  }
});

// --- printing (util.inspect, console.log, console.error) ---

/** An SDK's error that quotes credentials in its message, its fields and its own cause. */
class SdkError extends Error {
  readonly url = 'https://user:pw-sdk-S3cret9@api.example.com/v1/mcp?api_key=sk-sdk-S3cret9';
  readonly detail = 'sent Authorization: Bearer sk-sdk-S3cret9';
  constructor() {
    super('Error POSTing to https://api.example.com/v1/mcp?api_key=sk-sdk-S3cret9 (HTTP 429)', {
      cause: new TypeError('fetch failed for https://api.example.com/?token=sk-sdk-S3cret9'),
    });
    this.name = 'SdkError';
  }
}

/** What Node's `console.error` / `console.log` print (Deno's and Bun's use the same hook). */
function printed(value: unknown): string {
  return inspect(value, { depth: Number.POSITIVE_INFINITY });
}

test('util.inspect (what console.log and console.error print) of every error shows its cause redacted, and the cause stays the caller’s error, unchanged', () => {
  for (const error of everyError(new SdkError())) {
    const shown = printed(error);
    assert.equal(shown.includes('sk-sdk-S3cret9'), false, `${error.name} printed: ${shown}`);
    assert.equal(shown.includes('pw-sdk-S3cret9'), false, `${error.name} printed: ${shown}`);
    assert.match(shown, /api_key=\[redacted\] \(HTTP 429\)/, error.name);
    assert.ok(error.cause instanceof SdkError, `${error.name}: its cause is the SDK's error`);
    assert.match(error.cause.message, /api_key=sk-sdk-S3cret9/, 'the cause is not changed');
    assert.match(error.cause.url, /pw-sdk-S3cret9/, 'the cause’s fields are not changed');
  }
});

test('wrapHttpError() keeps the SDK’s error as cause (instanceof holds), and printing the HttpStatusError shows no secret of it', () => {
  const cause = new SdkError();
  const error = wrapHttpError(429, { 'retry-after': '3' }, cause);
  assert.equal(error.cause, cause);
  for (const shown of [printed(error), printed({ failures: [error] }), String(error)]) {
    assert.equal(shown.includes('sk-sdk-S3cret9'), false, shown);
    assert.equal(shown.includes('pw-sdk-S3cret9'), false, shown);
  }
  // Printed as the error it is: its stack, its fields, then the cause's redacted stack.
  const shown = printed(error);
  assert.match(shown, /^HttpStatusError: request failed with HTTP 429/, shown);
  assert.match(shown, /retryAfterMs: 3000/, shown);
  // Node prints the redacted copy as `TypeError [SdkError]: ...`, Deno and Bun as `SdkError: ...`.
  assert.match(
    shown,
    /SdkError\]?: Error POSTing to https:\/\/api\.example\.com\/v1\/mcp\?api_key=\[redacted\]/,
    shown,
  );
});

test('printing an error whose cause is a breakwater error with a secret cause of its own shows no secret', () => {
  const status = wrapHttpError(503, undefined, new SdkError());
  const open = new CircuitOpenError({
    key: 'openai',
    retryAt: RETRY_AT,
    reason: 'after 5 failures',
    now: NOW,
    cause: status,
  });
  const shown = printed(open);
  assert.equal(shown.includes('sk-sdk-S3cret9'), false, shown);
  assert.equal(open.cause, status);
});

test('printing an error whose cause has no secret shows that cause as it is, and an error without a cause shows none', () => {
  const cause = new TypeError('fetch failed');
  const shown = printed(new NetworkError({ code: 'ECONNREFUSED', phase: 'connect', sent: 'no', cause }));
  assert.ok(shown.includes(printed(cause).split('\n')[0] as string), shown);
  assert.equal(printed(new TimeoutError({ scope: 'total', ms: 1 })).includes('[cause]'), false);
});

test('printing an error whose cause is a string or a frozen error shows no secret, and leaves the frozen error as it was', () => {
  const frozen = Object.freeze(new Error('failed https://h.example/?key=sk-frozen-S3cret9'));
  for (const cause of ['GET https://h.example/?key=sk-string-S3cret9 failed', frozen]) {
    const shown = printed(new GateClosedError({ key: 'g', retryAt: RETRY_AT, now: NOW, cause }));
    assert.equal(/S3cret9/.test(shown), false, shown);
  }
  assert.match(frozen.message, /sk-frozen-S3cret9/, 'the frozen cause is as it was');
});

test('every error keeps its class name in a bundle minified as apps ship it (esbuild --minify renames classes)', async () => {
  // A Worker, a Vite or an esbuild production build minifies breakwater with the app:
  // names read from the class (`new.target.name`) came out as 'W', 'Q', ... there, so
  // `error.name`, its stack header, String(error) and toJSON() named no class.
  await withBundle<typeof import('../src/errors.ts')>(
    'src/index.ts',
    { format: 'esm', minify: true },
    (minified) => {
      const errors = [
        new minified.BreakwaterError('something broke', 'SOMETHING'),
        new minified.HttpStatusError({ status: 503 }),
        new minified.NetworkError({ code: 'ECONNREFUSED', phase: 'connect', sent: 'no' }),
        new minified.TimeoutError({ scope: 'attempt', ms: 5_000 }),
        new minified.CircuitOpenError({
          key: 'openai',
          retryAt: RETRY_AT,
          reason: 'after 5 failures',
          now: NOW,
        }),
        new minified.GateClosedError({ key: 'openai', retryAt: RETRY_AT, now: NOW }),
        new minified.RetryAfterTooLongError({ retryAfterMs: 120_000, limitMs: 60_000, now: NOW }),
      ];
      assert.deepEqual(
        errors.map((error) => error.name),
        CLASS_NAMES,
      );
      assert.deepEqual(
        errors.map((error) => error.toJSON().name),
        CLASS_NAMES,
      );
      // A subclass of the app's own keeps its name as before.
      class QuotaError extends minified.BreakwaterError {}
      assert.equal(new QuotaError('over quota', 'QUOTA').name, 'QuotaError');
    },
  );
});

test('an error thrown by the CommonJS build is an instance of the ESM build’s class, so retry() and classify() judge it (dual package hazard)', async () => {
  // An app that both imports and requires breakwater (an ESM app, a CommonJS dependency)
  // loads two copies; each has its own classes, and instanceof failed across them: the
  // CommonJS fetch's 503 was a 'fatal' error to the ESM retry(), not resent.
  type Breakwater = typeof import('../src/index.ts');
  await withBundle<Breakwater>('src/index.ts', { format: 'esm' }, (esm) =>
    withBundle<Breakwater>('src/index.ts', { format: 'cjs' }, async (cjs) => {
      assert.notEqual(esm.HttpStatusError, cjs.HttpStatusError);

      const fromCjs = new cjs.HttpStatusError({ status: 503 });
      assert.ok(fromCjs instanceof esm.HttpStatusError, 'fromCjs instanceof esm.HttpStatusError');
      assert.ok(fromCjs instanceof esm.BreakwaterError, 'fromCjs instanceof esm.BreakwaterError');
      assert.equal(fromCjs instanceof esm.NetworkError, false);
      assert.ok(
        new cjs.NetworkError({ code: 'ECONNRESET', phase: 'send', sent: 'maybe' }) instanceof
          esm.NetworkError,
        "new cjs.NetworkError({ code: 'ECONNRESET', phase: 'send', sent: 'maybe' }) instanceof esm.NetworkErr...",
      );
      // Another library's error of the same name is not breakwater's.
      class TimeoutError extends Error {}
      assert.equal(new TimeoutError() instanceof esm.TimeoutError, false);
      assert.equal(new TimeoutError() instanceof esm.BreakwaterError, false);
      assert.equal((null as unknown) instanceof esm.BreakwaterError, false);
      assert.equal(esm.classify({ error: fromCjs }).kind, 'transient');

      await withServer(always({ status: 503 }), async (server) => {
        const inner = cjs.createFetch({ use: [cjs.throwOnStatus()] });
        const outer = esm.createFetch({
          fetch: inner,
          use: [esm.retry({ attempts: 2, backoff: { initialMs: 1, maxMs: 1 } })],
        });
        const error = await outer(`${server.origin}/v1/things`).catch((e: unknown) => e);
        assert.ok(error instanceof esm.HttpStatusError, String(error));
        assert.equal(server.requests.length, 2, 'the 503 was not retried');
      });
    }),
  );
});

test('two subclasses an app wrote that share a name (anonymous, or made by one factory) are not instances of each other, nor is an app’s own class named as a breakwater class', () => {
  // cd8091f's name match is for another copy of breakwater (the dual package hazard);
  // within one copy the prototype decides, as plain instanceof does. Anonymous classes are
  // all named '', a factory's classes share their name, and minifiers reuse short names.
  const RateLimited = (() => class extends HttpStatusError {})();
  const Dropped = (() => class extends NetworkError {})();
  const dropped = new Dropped({ code: 'ECONNRESET', phase: 'send', sent: 'maybe' });
  assert.equal(dropped instanceof RateLimited, false);
  assert.ok(dropped instanceof NetworkError, 'dropped instanceof NetworkError');
  const factory = () => class ApiError extends HttpStatusError {};
  const First = factory();
  const Second = factory();
  assert.equal(new Second({ status: 500 }) instanceof First, false);
  assert.ok(new First({ status: 500 }) instanceof First, 'new First({ status: 500 }) instanceof First');
  // An app's own class named HttpStatusError, derived from breakwater's base only.
  const Own = class HttpStatusError extends BreakwaterError {};
  assert.equal(Own.name, 'HttpStatusError');
  assert.equal(new Own('no status here', 'OWN') instanceof HttpStatusError, false);
  assert.ok(
    new Own('no status here', 'OWN') instanceof BreakwaterError,
    "new Own('no status here', 'OWN') instanceof BreakwaterError",
  );
  // A subclass both ways, and a bare prototype, as plain instanceof answers.
  class MyError extends HttpStatusError {}
  assert.ok(
    new MyError({ status: 500 }) instanceof HttpStatusError,
    'new MyError({ status: 500 }) instanceof HttpStatusError',
  );
  assert.equal(new HttpStatusError({ status: 500 }) instanceof MyError, false);
  assert.ok(
    Object.create(HttpStatusError.prototype) instanceof HttpStatusError,
    'Object.create(HttpStatusError.prototype) instanceof HttpStatusError',
  );
});

test('breakwater loads and its errors keep their names where class fields are assigned, not defined (useDefineForClassFields: false, Babel loose)', async () => {
  // TypeScript before target ES2022, Angular's tsconfig and Babel's loose class properties
  // (React Native's preset) assign a static field: `HttpStatusError.name = '...'`. A
  // function's name and Function.prototype[Symbol.hasInstance] are read-only, so that
  // assignment threw a TypeError while breakwater loaded: the app could not import it.
  const options = { format: 'esm', minify: true, assignClassFields: true } as const;
  await withBundle<typeof import('../src/errors.ts')>('src/index.ts', options, (assigned) => {
    const error = new assigned.HttpStatusError({ status: 503 });
    assert.equal(error.name, 'HttpStatusError');
    assert.equal(assigned.NetworkError.name, 'NetworkError');
    assert.ok(error instanceof assigned.BreakwaterError, 'error instanceof assigned.BreakwaterError');
    assert.equal(error instanceof assigned.NetworkError, false);
  });
});

/** A check that `fn` throws a TypeError whose message holds each of `parts`. */
function rejectsInit(fn: () => unknown, parts: string[]): void {
  assert.throws(
    fn,
    (e: unknown) => e instanceof TypeError && parts.every((part) => e.message.includes(part)),
    `a TypeError naming ${parts.join(', ')}`,
  );
}

test('each error built by hand without its init is a TypeError naming the class and init, not "Cannot read properties of undefined"', () => {
  const classes = {
    HttpStatusError,
    NetworkError,
    TimeoutError,
    CircuitOpenError,
    GateClosedError,
    RetryAfterTooLongError,
  } as Record<string, new (init?: unknown) => unknown>;
  for (const [name, Class] of Object.entries(classes)) {
    rejectsInit(() => new Class(), [`new ${name}(init): must be an object (got undefined)`]);
  }
});

test('new HttpStatusError() checks its status: a number, an integer from 100 to 599', () => {
  // { status: 'x' } made the message "request failed with HTTP x".
  const build = (status: unknown) => () => new HttpStatusError({ status: status as number });
  rejectsInit(build('x'), ['new HttpStatusError(init).status: must be a number (got "x")']);
  rejectsInit(build(undefined), ['new HttpStatusError(init).status: must be a number (got undefined)']);
  rejectsInit(build(42), ['new HttpStatusError(init).status: must be at least 100 (got 42)']);
  rejectsInit(build(600), ['new HttpStatusError(init).status: must be at most 599 (got 600)']);
  rejectsInit(build(503.5), ['new HttpStatusError(init).status:', '(got 503.5)']);
  assert.equal(new HttpStatusError({ status: 418 }).status, 418, 'a valid status is taken');
});

test('the other errors check their required fields, naming each that is wrong and its value', () => {
  const at = new Date(NOW);
  rejectsInit(
    () => new NetworkError({ code: 'ECONNRESET', phase: 'connected', sent: 'yes' } as never),
    [
      'new NetworkError(init).phase: must be "connect" or "send" or "response" (got "connected")',
      'new NetworkError(init).sent: must be "no" or "maybe" (got "yes")',
    ],
  );
  rejectsInit(() => new NetworkError({ phase: 'connect', sent: 'no' } as never), ['.code: must be a string']);
  rejectsInit(
    () => new TimeoutError({ scope: 'request', ms: '5s' } as never),
    [
      'new TimeoutError(init).scope: must be "attempt" or "total" (got "request")',
      'new TimeoutError(init).ms: must be a number, at least 0 (got "5s")',
    ],
  );
  rejectsInit(
    () => new CircuitOpenError({ key: 'api', retryAt: NOW, reason: 'open' } as never),
    [`new CircuitOpenError(init).retryAt: must be a date (got ${NOW})`],
  );
  // An Invalid Date is no time to print: its toISOString() threw a RangeError.
  rejectsInit(
    () => new GateClosedError({ key: 'mcp', retryAt: new Date(Number.NaN) }),
    ['new GateClosedError(init).retryAt: must be a date'],
  );
  rejectsInit(
    () => new GateClosedError({ retryAt: at } as never),
    ['.key: must be a string (got undefined)'],
  );
  rejectsInit(
    () => new RetryAfterTooLongError({ retryAfterMs: Number.NaN, limitMs: -1 }),
    [
      'new RetryAfterTooLongError(init).retryAfterMs: must be a number, at least 0 (got NaN)',
      '.limitMs: must be a number, at least 0 (got -1)',
    ],
  );
});
