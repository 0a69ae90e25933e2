import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Call } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import { classify, DEFAULT_RETRYABLE_STATUSES, isRetryableStatus } from '../src/classify.ts';
import {
  CircuitOpenError,
  GateClosedError,
  HttpStatusError,
  NetworkError,
  type NetworkPhase,
  RetryAfterTooLongError,
  type SentState,
  TimeoutError,
} from '../src/errors.ts';
import { retry } from '../src/retry.ts';
import { wrapHttpError } from '../src/status.ts';
import { always, withServer } from './helpers/server.ts';

const URL_ = 'http://127.0.0.1:9/v1/things';

function callWith(init?: RequestInit, input: string | URL | Request = URL_): Call {
  return new Call(input, init, undefined, undefined);
}

const post = (): Call => callWith({ method: 'POST', body: '{}' });
const get = (): Call => callWith();

/** A response outcome: no body, so nothing is left unconsumed. */
function respond(status: number, headers?: Record<string, string>): { response: Response } {
  return { response: new Response(null, { status, ...(headers ? { headers } : {}) }) };
}

function network(code: string, phase: NetworkPhase, sent: SentState): { error: NetworkError } {
  return { error: new NetworkError({ code, phase, sent }) };
}

// --- network failures before anything was sent: safe always ---

test('a DNS failure (not sent) is transient, retryable and safe to resend even for a POST', () => {
  assert.deepEqual(classify(network('ENOTFOUND', 'connect', 'no'), post()), {
    kind: 'transient',
    retryable: true,
    notRun: true,
    safeToResend: true,
  });
});

test('a refused connection (not sent) is retryable and safe to resend even for a POST', () => {
  const verdict = classify(network('ECONNREFUSED', 'connect', 'no'), post());
  assert.equal(verdict.retryable, true);
  assert.equal(verdict.safeToResend, true);
});

test('a connect timeout (not sent) is retryable and safe to resend even for a POST', () => {
  const verdict = classify(network('ETIMEDOUT', 'connect', 'no'), post());
  assert.equal(verdict.retryable, true);
  assert.equal(verdict.safeToResend, true);
});

test('a TLS handshake failure (not sent) is safe to resend even for a POST', () => {
  const verdict = classify(network('TLS', 'connect', 'no'), post());
  assert.equal(verdict.kind, 'transient');
  assert.equal(verdict.safeToResend, true);
});

test('a network failure that was not sent is safe to resend without any call', () => {
  assert.equal(classify(network('ECONNREFUSED', 'connect', 'no')).safeToResend, true);
});

// --- network failures that may have reached the server: safe only if idempotent ---

test('a connection reset after sending a POST is retryable but not safe to resend', () => {
  assert.deepEqual(classify(network('ECONNRESET', 'send', 'maybe'), post()), {
    kind: 'transient',
    retryable: true,
    notRun: false,
    safeToResend: false,
  });
});

test('an EPIPE while sending a POST is not safe to resend', () => {
  assert.equal(classify(network('EPIPE', 'send', 'maybe'), post()).safeToResend, false);
});

test('a connection reset after sending a GET is safe to resend', () => {
  assert.equal(classify(network('ECONNRESET', 'send', 'maybe'), get()).safeToResend, true);
});

test('a body stream that broke on a POST response is not safe to resend', () => {
  assert.equal(classify(network('ECONNRESET', 'response', 'maybe'), post()).safeToResend, false);
});

test('a maybe-sent network failure with no call is not safe to resend', () => {
  assert.equal(classify(network('ECONNRESET', 'send', 'maybe')).safeToResend, false);
});

// --- responses rejected before execution: safe always ---

test('a 401 on a POST is auth-recoverable, not retryable by status, and safe to resend', () => {
  assert.deepEqual(classify(respond(401), post()), {
    kind: 'auth-recoverable',
    retryable: false,
    notRun: true,
    safeToResend: true,
  });
});

test('a 407 on a POST is auth-recoverable, not retryable by status, and safe to resend', () => {
  assert.deepEqual(classify(respond(407), post()), {
    kind: 'auth-recoverable',
    retryable: false,
    notRun: true,
    safeToResend: true,
  });
});

test('a 403 on a POST is auth-user: safe to resend but never retried', () => {
  assert.deepEqual(classify(respond(403), post()), {
    kind: 'auth-user',
    retryable: false,
    notRun: true,
    safeToResend: true,
  });
});

test('a 403 is never retried, even when the server sends x-should-retry: true', () => {
  const verdict = classify(respond(403, { 'x-should-retry': 'true' }), post());
  assert.equal(verdict.kind, 'auth-user');
  assert.equal(verdict.retryable, false);
});

test('isRetryableStatus agrees with classify: a 401, 403 or 407 is not retryable even with x-should-retry: true, so neither is the HttpStatusError built from it', () => {
  const headers = new Headers({ 'x-should-retry': 'true' });
  for (const status of [401, 403, 407]) {
    assert.equal(
      classify(respond(status, { 'x-should-retry': 'true' }), get()).retryable,
      false,
      `classify ${status}`,
    );
    assert.equal(isRetryableStatus(status, headers), false, `isRetryableStatus ${status}`);
    assert.equal(isRetryableStatus(status, headers, [401, 403, 407]), false, `listed in statuses: ${status}`);
    // A retryable HttpStatusError arms a start gate and invites a caller's own requeue.
    assert.equal(wrapHttpError(status, headers).retryable, false, `wrapHttpError ${status}`);
  }
  // The header still overrides the status rule both ways for every other status.
  assert.equal(isRetryableStatus(400, headers), true);
  assert.equal(isRetryableStatus(503, new Headers({ 'x-should-retry': 'false' })), false);
});

test('a 408 on a POST is transient, retryable and safe to resend', () => {
  assert.deepEqual(classify(respond(408), post()), {
    kind: 'transient',
    retryable: true,
    notRun: true,
    safeToResend: true,
  });
});

test('a 429 on a POST is rate-limited, retryable and safe to resend', () => {
  assert.deepEqual(classify(respond(429), post()), {
    kind: 'rate-limited',
    retryable: true,
    notRun: true,
    safeToResend: true,
  });
});

// --- x-should-retry ---

test('x-should-retry: true makes a 400 on a POST retryable and safe to resend', () => {
  const verdict = classify(respond(400, { 'x-should-retry': 'true' }), post());
  assert.equal(verdict.kind, 'transient');
  assert.equal(verdict.retryable, true);
  assert.equal(verdict.safeToResend, true);
});

test('x-should-retry: true makes a 500 on a POST safe to resend', () => {
  const verdict = classify(respond(500, { 'x-should-retry': 'true' }), post());
  assert.equal(verdict.retryable, true);
  assert.equal(verdict.safeToResend, true);
});

test('x-should-retry: true makes a 501 and a 520 retryable and safe to resend', () => {
  for (const status of [501, 520]) {
    const verdict = classify(respond(status, { 'x-should-retry': 'true' }), post());
    assert.equal(verdict.retryable, true, `status ${status}`);
    assert.equal(verdict.safeToResend, true, `status ${status}`);
  }
});

test('x-should-retry: false makes a 503 not retryable', () => {
  const verdict = classify(respond(503, { 'x-should-retry': 'false' }), get());
  assert.equal(verdict.kind, 'fatal');
  assert.equal(verdict.retryable, false);
});

test('x-should-retry: false makes a 429 not retryable', () => {
  const verdict = classify(respond(429, { 'x-should-retry': 'false' }), get());
  assert.equal(verdict.kind, 'rate-limited');
  assert.equal(verdict.retryable, false);
});

test('x-should-retry: false does not make a 503 on a POST safe to resend', () => {
  assert.equal(classify(respond(503, { 'x-should-retry': 'false' }), post()).safeToResend, false);
});

test('x-should-retry is read case-insensitively and trimmed', () => {
  assert.equal(classify(respond(400, { 'X-Should-Retry': ' TRUE ' }), post()).retryable, true);
});

test('an unrecognised x-should-retry value leaves the status rule in charge', () => {
  assert.equal(classify(respond(503, { 'x-should-retry': 'maybe' }), get()).retryable, true);
  assert.equal(classify(respond(400, { 'x-should-retry': 'yes' }), get()).retryable, false);
});

// --- server errors: retryable, safe only if idempotent ---

test('500, 502, 503, 504 and 529 on a POST are transient and retryable but not safe to resend', () => {
  for (const status of [500, 502, 503, 504, 529]) {
    assert.deepEqual(
      classify(respond(status), post()),
      { kind: 'transient', retryable: true, notRun: false, safeToResend: false },
      `status ${status}`,
    );
  }
});

test('500, 502, 503, 504 and 529 on a GET are safe to resend', () => {
  for (const status of [500, 502, 503, 504, 529]) {
    assert.equal(classify(respond(status), get()).safeToResend, true, `status ${status}`);
  }
});

test('a 503 with no call is not safe to resend', () => {
  assert.equal(classify(respond(503)).safeToResend, false);
});

test('501 and 505 are fatal, not retryable', () => {
  for (const status of [501, 505]) {
    assert.deepEqual(
      classify(respond(status), get()),
      { kind: 'fatal', retryable: false, notRun: false, safeToResend: true },
      `status ${status}`,
    );
  }
});

test('Cloudflare 520-527 are fatal, not retryable', () => {
  for (let status = 520; status <= 527; status++) {
    const verdict = classify(respond(status), get());
    assert.equal(verdict.kind, 'fatal', `status ${status}`);
    assert.equal(verdict.retryable, false, `status ${status}`);
  }
});

test('other 4xx (400, 404, 409, 422) are fatal and not retryable', () => {
  for (const status of [400, 404, 409, 422]) {
    const verdict = classify(respond(status), post());
    assert.equal(verdict.kind, 'fatal', `status ${status}`);
    assert.equal(verdict.retryable, false, `status ${status}`);
    assert.equal(verdict.safeToResend, false, `status ${status}`);
  }
});

test('2xx and 3xx responses are ok, not retryable', () => {
  for (const status of [200, 201, 204, 301, 302, 304, 307]) {
    assert.deepEqual(
      classify(respond(status), post()),
      { kind: 'ok', retryable: false, notRun: false, safeToResend: true },
      `status ${status}`,
    );
  }
});

test('the default retryable statuses are exactly 408, 429, 500, 502, 503, 504 and 529', () => {
  assert.deepEqual([...DEFAULT_RETRYABLE_STATUSES].sort(), [408, 429, 500, 502, 503, 504, 529]);
  for (let status = 400; status <= 599; status++) {
    assert.equal(isRetryableStatus(status), DEFAULT_RETRYABLE_STATUSES.includes(status), `status ${status}`);
  }
});

// --- retryAfterMs ---

test('retryAfterMs comes from a response’s Retry-After header', () => {
  assert.equal(classify(respond(503, { 'retry-after': '7' }), get()).retryAfterMs, 7_000);
});

test('retryAfterMs comes from a response’s retry-after-ms header first', () => {
  const verdict = classify(respond(429, { 'retry-after-ms': '1500', 'retry-after': '9' }), post());
  assert.equal(verdict.retryAfterMs, 1_500);
});

test('a response with no timing headers has no retryAfterMs', () => {
  assert.equal('retryAfterMs' in classify(respond(503), get()), false);
});

test('retryAfterMs is kept on a non-retryable response that asks for a wait', () => {
  assert.equal(classify(respond(403, { 'retry-after': '3' }), get()).retryAfterMs, 3_000);
});

// --- the statuses option ---

test('the statuses option replaces the retryable set: a 503 outside it is fatal', () => {
  assert.deepEqual(classify(respond(503), get(), { statuses: [500] }), {
    kind: 'fatal',
    retryable: false,
    notRun: false,
    safeToResend: true,
  });
});

test('the statuses option replaces the retryable set: a 501 inside it is transient and retryable', () => {
  const verdict = classify(respond(501), get(), { statuses: [501] });
  assert.equal(verdict.kind, 'transient');
  assert.equal(verdict.retryable, true);
});

test('the statuses option does not make a 429 retryable when left out, but it stays rate-limited', () => {
  const verdict = classify(respond(429), get(), { statuses: [503] });
  assert.equal(verdict.kind, 'rate-limited');
  assert.equal(verdict.retryable, false);
});

test('x-should-retry still overrides the statuses option', () => {
  assert.equal(classify(respond(503, { 'x-should-retry': 'true' }), get(), { statuses: [] }).retryable, true);
});

test('the statuses option passed through as undefined (exactOptionalPropertyTypes) is the default set', () => {
  // A caller's own setting, possibly unset, handed on as it is.
  const settings: { statuses?: readonly number[] | undefined } = {};
  assert.equal(classify(respond(503), get(), { statuses: settings.statuses }).retryable, true);
  assert.equal(classify(respond(501), get(), { statuses: settings.statuses }).retryable, false);
});

// --- idempotency ---

test('GET, HEAD, OPTIONS, TRACE, PUT and DELETE are idempotent: a 503 is safe to resend', () => {
  for (const method of ['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']) {
    const call = callWith({ method });
    assert.equal(call.isIdempotent, true, method);
    assert.equal(classify(respond(503), call).safeToResend, true, method);
  }
});

test('POST and PATCH are not idempotent: a 503 is not safe to resend', () => {
  for (const method of ['POST', 'PATCH']) {
    const call = callWith({ method });
    assert.equal(call.isIdempotent, false, method);
    assert.equal(classify(respond(503), call).safeToResend, false, method);
  }
});

test('methods are matched case-insensitively (put is idempotent, post is not)', () => {
  assert.equal(classify(respond(503), callWith({ method: 'put' })).safeToResend, true);
  assert.equal(classify(respond(503), callWith({ method: 'post' })).safeToResend, false);
});

test('a call with no init is a GET and so idempotent', () => {
  assert.equal(classify(respond(503), callWith(undefined)).safeToResend, true);
});

test('a POST with an Idempotency-Key in a Headers object is safe to resend', () => {
  const call = callWith({ method: 'POST', headers: new Headers({ 'Idempotency-Key': 'k-1' }) });
  assert.equal(classify(respond(503), call).safeToResend, true);
});

test('a POST with an Idempotency-Key in a plain object with odd casing is safe to resend', () => {
  const call = callWith({
    method: 'POST',
    headers: { 'iDEMPOTENCY-kEY': 'k-1', 'content-type': 'text/plain' },
  });
  assert.equal(classify(respond(502), call).safeToResend, true);
});

test('a POST with an Idempotency-Key in header array pairs is safe to resend', () => {
  const call = callWith({
    method: 'POST',
    headers: [
      ['content-type', 'application/json'],
      ['Idempotency-Key', 'k-1'],
    ],
  });
  assert.equal(classify(respond(500), call).safeToResend, true);
});

test('a POST Request input with an Idempotency-Key is safe to resend', () => {
  const request = new Request(URL_, { method: 'POST', headers: { 'Idempotency-Key': 'k-1' } });
  assert.equal(classify(respond(503), callWith(undefined, request)).safeToResend, true);
});

test('a POST Request input without an Idempotency-Key is not safe to resend', () => {
  const request = new Request(URL_, { method: 'POST', headers: { 'content-type': 'application/json' } });
  assert.equal(classify(respond(503), callWith(undefined, request)).safeToResend, false);
});

test('a PATCH with an Idempotency-Key is safe to resend after a connection reset', () => {
  const call = callWith({ method: 'PATCH', headers: { 'Idempotency-Key': 'k-1' } });
  assert.equal(classify(network('ECONNRESET', 'send', 'maybe'), call).safeToResend, true);
});

test('an Idempotency-Key added by a middleware (call.setHeader) makes a POST safe to resend', () => {
  const call = post();
  call.setHeader('Idempotency-Key', 'k-1');
  assert.equal(classify(respond(503), call).safeToResend, true);
});

test('a POST the caller marked idempotent is safe to resend', () => {
  const call = post();
  call.idempotent = true;
  assert.equal(call.isIdempotent, true);
  assert.equal(classify(respond(503), call).safeToResend, true);
  assert.equal(classify(network('ECONNRESET', 'send', 'maybe'), call).safeToResend, true);
});

// --- cancellation ---

test('an abort with the signal’s own reason is cancelled, not retryable', () => {
  const controller = new AbortController();
  const reason = new Error('the user gave up');
  controller.abort(reason);
  const call = callWith({ method: 'GET', signal: controller.signal });
  assert.deepEqual(classify({ error: reason }, call), {
    kind: 'cancelled',
    retryable: false,
    notRun: false,
    safeToResend: false,
  });
});

test('an abort with a non-Error reason (a string) is cancelled', () => {
  const controller = new AbortController();
  controller.abort('stop');
  const call = callWith({ signal: controller.signal });
  assert.equal(classify({ error: 'stop' }, call).kind, 'cancelled');
});

test('an abort reason on a Request input’s signal is cancelled', () => {
  const controller = new AbortController();
  const reason = new Error('closed the tab');
  controller.abort(reason);
  const call = callWith(undefined, new Request(URL_, { signal: controller.signal }));
  assert.equal(classify({ error: reason }, call).kind, 'cancelled');
});

test('the default abort reason (an AbortError DOMException) is cancelled', () => {
  const controller = new AbortController();
  controller.abort();
  const call = callWith({ signal: controller.signal });
  assert.equal(classify({ error: controller.signal.reason }, call).kind, 'cancelled');
});

test('an AbortError DOMException is cancelled even without a call', () => {
  assert.deepEqual(classify({ error: new DOMException('The operation was aborted.', 'AbortError') }), {
    kind: 'cancelled',
    retryable: false,
    notRun: false,
    safeToResend: false,
  });
});

test('a signal’s TimeoutError reason (AbortSignal.timeout) is cancelled, not a breakwater timeout', () => {
  const signal = AbortSignal.abort(new DOMException('The operation timed out.', 'TimeoutError'));
  const call = callWith({ signal });
  assert.equal(classify({ error: signal.reason }, call).kind, 'cancelled');
});

test('a caller’s AbortSignal.timeout() is cancelled even without a call, as an AbortError is; another library’s TimeoutError is not', async () => {
  // fetch rejects with the signal's reason, a TimeoutError DOMException: a caller who
  // classifies what its fetch threw (no call at hand) got 'fatal' for its own timeout.
  await withServer(always({ hang: true }), async ({ origin }) => {
    const fetch = createFetch({ use: [] });
    const error = await fetch(origin, { signal: AbortSignal.timeout(20) }).catch((e: unknown) => e);
    assert.equal((error as Error).name, 'TimeoutError');
    assert.deepEqual(classify({ error }), {
      kind: 'cancelled',
      retryable: false,
      notRun: false,
      safeToResend: false,
    });
  });
  // ky's TimeoutError (its own deadline passed), a plain Error: not the caller's abort.
  class TimeoutError extends Error {
    override name = 'TimeoutError';
  }
  assert.equal(classify({ error: new TimeoutError() }).kind, 'fatal');
});

test('an error that is not the signal’s reason is not cancelled just because the signal aborted', () => {
  const controller = new AbortController();
  controller.abort(new Error('user'));
  const call = callWith({ signal: controller.signal });
  assert.equal(classify(network('ECONNREFUSED', 'connect', 'no'), call).kind, 'transient');
});

// --- timeouts ---

test('an attempt timeout is transient and retryable, safe only if idempotent', () => {
  const error = new TimeoutError({ scope: 'attempt', ms: 5_000 });
  assert.deepEqual(classify({ error }, post()), {
    kind: 'transient',
    retryable: true,
    notRun: false,
    safeToResend: false,
  });
  assert.equal(classify({ error }, get()).safeToResend, true);
});

test('a total timeout is not retryable: the whole budget is spent', () => {
  const error = new TimeoutError({ scope: 'total', ms: 60_000 });
  const verdict = classify({ error }, get());
  assert.equal(verdict.kind, 'transient');
  assert.equal(verdict.retryable, false);
});

// --- local fail-fast errors ---

test('a CircuitOpenError is not retryable, safe to resend, with retryAfterMs until retryAt', () => {
  const error = new CircuitOpenError({
    key: 'api',
    retryAt: new Date(Date.now() + 5_000),
    reason: 'after 5 consecutive failures',
  });
  const verdict = classify({ error }, post());
  assert.equal(verdict.kind, 'transient');
  assert.equal(verdict.retryable, false);
  assert.equal(verdict.safeToResend, true);
  assert.ok(
    verdict.retryAfterMs !== undefined && verdict.retryAfterMs > 4_000 && verdict.retryAfterMs <= 5_000,
    `retryAfterMs ${verdict.retryAfterMs}`,
  );
});

test('a CircuitOpenError whose retryAt has passed has retryAfterMs 0, never negative', () => {
  const error = new CircuitOpenError({ key: 'api', retryAt: new Date(Date.now() - 10_000), reason: 'paced' });
  assert.equal(classify({ error }, post()).retryAfterMs, 0);
});

test('a refusal whose retryAt is no time (an Invalid Date set on it, none at all) has retryAfterMs 0, not NaN, and classify() does not throw', () => {
  // The constructors reject an Invalid Date (its message prints retryAt), but retryAt is a
  // plain field: a user's layer may set it, or build the error some other way. NaN here
  // made retry() resend a refused pass at once, without its backoff step.
  for (const retryAt of [new Date(Number.NaN), undefined, 'soon']) {
    for (const error of [
      new CircuitOpenError({ key: 'api', retryAt: new Date(), reason: 'open' }),
      new GateClosedError({ key: 'mcp', retryAt: new Date() }),
    ]) {
      (error as { retryAt: unknown }).retryAt = retryAt;
      assert.equal(classify({ error }, post()).retryAfterMs, 0, String(retryAt));
    }
  }
});

test('a GateClosedError is not retryable and safe to resend, with retryAfterMs until retryAt', () => {
  const error = new GateClosedError({ key: 'mcp', retryAt: new Date(Date.now() + 2_000) });
  const verdict = classify({ error }, post());
  assert.equal(verdict.retryable, false);
  assert.equal(verdict.safeToResend, true);
  assert.ok(
    verdict.retryAfterMs !== undefined && verdict.retryAfterMs > 1_000 && verdict.retryAfterMs <= 2_000,
    'verdict.retryAfterMs !== undefined && verdict.retryAfterMs > 1_000 && verdict.retryAfterMs <= 2_000',
  );
});

test('a RetryAfterTooLongError is rate-limited, not retryable, with the server’s retryAfterMs', () => {
  const error = new RetryAfterTooLongError({ retryAfterMs: 120_000, limitMs: 60_000 });
  assert.deepEqual(classify({ error }, post()), {
    kind: 'rate-limited',
    retryable: false,
    notRun: true,
    safeToResend: true,
    retryAfterMs: 120_000,
  });
});

// --- HttpStatusError outcomes ---

test('an HttpStatusError is classified by its status like the response it came from', () => {
  const error = new HttpStatusError({ status: 503, statusText: 'Service Unavailable', retryAfterMs: 4_000 });
  assert.deepEqual(classify({ error }, post()), {
    kind: 'transient',
    retryable: true,
    notRun: false,
    safeToResend: false,
    retryAfterMs: 4_000,
  });
});

test('an HttpStatusError keeps x-should-retry from its safe headers', () => {
  const error = new HttpStatusError({ status: 400, headers: new Headers({ 'x-should-retry': 'true' }) });
  const verdict = classify({ error }, post());
  assert.equal(verdict.retryable, true);
  assert.equal(verdict.safeToResend, true);
});

test('an HttpStatusError 429 is rate-limited and safe to resend', () => {
  const error = new HttpStatusError({ status: 429 });
  assert.deepEqual(classify({ error }, post()), {
    kind: 'rate-limited',
    retryable: true,
    notRun: true,
    safeToResend: true,
  });
});

// --- notRun: the server provably did not run it ---

test('a 503 on a POST is notRun false while a 429 on a POST is notRun true', () => {
  const unavailable = classify(respond(503), post());
  assert.equal(unavailable.notRun, false);
  assert.equal(unavailable.safeToResend, false);
  const limited = classify(respond(429), post());
  assert.equal(limited.notRun, true);
  assert.equal(limited.safeToResend, true);
});

test('401, 403, 407, 408 and 429 are notRun: rejected before executing', () => {
  for (const status of [401, 403, 407, 408, 429]) {
    assert.equal(classify(respond(status), post()).notRun, true, `status ${status}`);
  }
});

test('other 4xx and 5xx are not notRun: the server may have run it', () => {
  for (const status of [400, 404, 409, 422, 500, 501, 502, 503, 504, 505, 520, 529]) {
    assert.equal(classify(respond(status), post()).notRun, false, `status ${status}`);
  }
});

test('x-should-retry: true on a 500 makes it notRun', () => {
  const verdict = classify(respond(500, { 'x-should-retry': 'true' }), post());
  assert.equal(verdict.notRun, true);
  assert.equal(verdict.safeToResend, true);
});

test('x-should-retry: true on a 400 and on an HttpStatusError makes it notRun', () => {
  assert.equal(classify(respond(400, { 'x-should-retry': 'true' }), post()).notRun, true);
  const error = new HttpStatusError({ status: 502, headers: new Headers({ 'x-should-retry': 'true' }) });
  assert.equal(classify({ error }, post()).notRun, true);
});

test('x-should-retry: true on a 403 makes it notRun but still not retryable', () => {
  const verdict = classify(respond(403, { 'x-should-retry': 'true' }), post());
  assert.equal(verdict.notRun, true);
  assert.equal(verdict.retryable, false);
});

test('x-should-retry: false leaves a 503 notRun false and a 429 notRun true', () => {
  assert.equal(classify(respond(503, { 'x-should-retry': 'false' }), post()).notRun, false);
  const limited = classify(respond(429, { 'x-should-retry': 'false' }), post());
  assert.equal(limited.notRun, true);
  assert.equal(limited.retryable, false);
});

test('an unrecognised x-should-retry value on a 500 does not make it notRun', () => {
  assert.equal(classify(respond(500, { 'x-should-retry': 'yes' }), post()).notRun, false);
});

test('a 503 on a GET is safe to resend but not notRun', () => {
  const verdict = classify(respond(503), get());
  assert.equal(verdict.safeToResend, true);
  assert.equal(verdict.notRun, false);
});

test('a POST with an Idempotency-Key is safe to resend after a 500 but not notRun', () => {
  const call = callWith({ method: 'POST', headers: { 'Idempotency-Key': 'k-1' } });
  const verdict = classify(respond(500), call);
  assert.equal(verdict.safeToResend, true);
  assert.equal(verdict.notRun, false);
});

test('a 2xx is not notRun, even for a GET: the server ran it', () => {
  assert.equal(classify(respond(200), get()).notRun, false);
  assert.equal(classify(respond(204), post()).notRun, false);
});

test('a network failure is notRun exactly when it was not sent, whatever the method', () => {
  assert.equal(classify(network('ECONNREFUSED', 'connect', 'no'), post()).notRun, true);
  assert.equal(classify(network('ECONNREFUSED', 'connect', 'no')).notRun, true);
  assert.equal(classify(network('ECONNRESET', 'send', 'maybe'), get()).notRun, false);
  assert.equal(classify(network('ECONNRESET', 'response', 'maybe'), post()).notRun, false);
});

test('attempt and total timeouts are not notRun, even on a GET that is safe to resend', () => {
  for (const scope of ['attempt', 'total'] as const) {
    const verdict = classify({ error: new TimeoutError({ scope, ms: 1_000 }) }, get());
    assert.equal(verdict.notRun, false, scope);
    assert.equal(verdict.safeToResend, true, scope);
  }
});

test('a RetryAfterTooLongError is notRun as its answer says: not after a 503, which may have run; after a 429, which did not', () => {
  const after = (status: number) =>
    new RetryAfterTooLongError({
      retryAfterMs: 120_000,
      limitMs: 60_000,
      cause: wrapHttpError(status, new Headers({ 'retry-after': '120' })),
    });
  assert.deepEqual(classify({ error: after(503) }, post()), {
    kind: 'rate-limited',
    retryable: false,
    notRun: false,
    safeToResend: false,
    retryAfterMs: 120_000,
  });
  assert.equal(classify({ error: after(503) }, get()).safeToResend, true, 'a GET is idempotent');
  assert.equal(classify({ error: after(429) }, post()).notRun, true, 'a 429 was refused before it ran');
});

test('a POST answered 503 with a Retry-After past the cap gives up with an error that says it may have run', async () => {
  await withServer(
    always({ status: 503, headers: { 'retry-after': '120' } }),
    async ({ origin, requests }) => {
      const fetch = createFetch({ use: [retry({ resend: 'always', maxRetryAfterMs: 1_000 })] });
      const error = await fetch(origin, { method: 'POST', body: 'charge' }).catch((e: unknown) => e);
      assert.ok(error instanceof RetryAfterTooLongError, String(error));
      assert.equal(requests.length, 1);
      const verdict = classify({ error }, callWith({ method: 'POST' }, origin));
      assert.equal(verdict.notRun, false);
      assert.equal(verdict.safeToResend, false);
    },
  );
});

test('CircuitOpenError, GateClosedError and RetryAfterTooLongError are notRun: nothing was sent', () => {
  const retryAt = new Date(Date.now() + 1_000);
  const errors = [
    new CircuitOpenError({ key: 'api', retryAt, reason: 'open' }),
    new GateClosedError({ key: 'mcp', retryAt }),
    new RetryAfterTooLongError({ retryAfterMs: 120_000, limitMs: 60_000 }),
  ];
  for (const error of errors) {
    assert.equal(classify({ error }, post()).notRun, true, error.name);
    assert.equal(classify({ error }).notRun, true, error.name);
  }
});

test('cancelled and unknown-error outcomes are not notRun', () => {
  assert.equal(classify({ error: new DOMException('aborted', 'AbortError') }, get()).notRun, false);
  assert.equal(classify({ error: new TypeError('x is not a function') }, post()).notRun, false);
});

test('for every failed response, network, timeout and local error, safeToResend is notRun or idempotent', () => {
  const retryAt = new Date(Date.now() + 1_000);
  const outcomes = [
    ...Array.from({ length: 200 }, (_, i) => respond(400 + i)),
    respond(500, { 'x-should-retry': 'true' }),
    respond(429, { 'x-should-retry': 'false' }),
    network('ENOTFOUND', 'connect', 'no'),
    network('ECONNRESET', 'send', 'maybe'),
    { error: new TimeoutError({ scope: 'attempt', ms: 1_000 }) },
    { error: new TimeoutError({ scope: 'total', ms: 1_000 }) },
    { error: new CircuitOpenError({ key: 'api', retryAt, reason: 'open' }) },
    { error: new GateClosedError({ key: 'mcp', retryAt }) },
    { error: new RetryAfterTooLongError({ retryAfterMs: 120_000, limitMs: 60_000 }) },
  ];
  for (const outcome of outcomes) {
    for (const call of [post(), get(), undefined]) {
      const verdict = classify(outcome, call);
      const label = `${'response' in outcome ? outcome.response.status : String(outcome.error)} ${call?.method}`;
      assert.equal(verdict.safeToResend, verdict.notRun || (call?.isIdempotent ?? false), label);
    }
  }
});

// --- anything else ---

test('an unknown error (a programming error) is fatal, not retryable, not safe', () => {
  assert.deepEqual(classify({ error: new TypeError('x is not a function') }, get()), {
    kind: 'fatal',
    retryable: false,
    notRun: false,
    safeToResend: false,
  });
});

test('non-Error throwables (null, a string, a number) are fatal and do not throw', () => {
  for (const error of [null, undefined, 'boom', 42]) {
    assert.equal(classify({ error }, get()).kind, 'fatal', String(error));
  }
});

test('an error whose name cannot be read (a revoked Proxy, a throwing getter) is fatal, and createFetch passes it on as thrown, not a TypeError of its own', async () => {
  // isAbort() read `name` outside any guard: classify() threw, and the chain's catch
  // replaced what the fetch threw with "Cannot perform 'get' on a proxy that has been revoked".
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  const getter = Object.defineProperty(new Error('x'), 'name', {
    get() {
      throw new Error('name read');
    },
  });
  for (const error of [proxy, getter]) {
    assert.equal(classify({ error }).kind, 'fatal');
    // Caught, not returned from .catch(): resolving with a revoked Proxy reads its `then`.
    let thrown: unknown;
    try {
      await createFetch({
        fetch: async () => {
          throw error;
        },
        use: [],
      })('http://127.0.0.1:9/');
    } catch (caught) {
      thrown = caught;
    }
    assert.ok(thrown === error, 'thrown === error');
  }
});

test('an outcome that is no object (null, a string) is a TypeError naming the argument', () => {
  // `'response' in null` threw "Cannot use 'in' operator to search for 'response' in null".
  for (const [outcome, got] of [
    [null, 'null'],
    [undefined, 'undefined'],
    ['x', '"x"'],
  ] as const) {
    assert.throws(
      () => classify(outcome as never),
      (e: unknown) =>
        e instanceof TypeError &&
        e.message === `classify(outcome): must be { response } or { error } (got ${got})`,
      `classify(${got}) names the argument`,
    );
  }
});
