import assert from 'node:assert/strict';
import type { Readable } from 'node:stream';
import { test } from 'node:test';
import { auth } from '../src/auth.ts';
import { circuitBreaker } from '../src/breaker.ts';
import type { Call, FetchLike, Middleware } from '../src/call.ts';
import { captureStatus } from '../src/capture.ts';
import { createFetch } from '../src/chain.ts';
import { DEFAULT_RETRYABLE_STATUSES } from '../src/classify.ts';
import {
  CircuitOpenError,
  GateClosedError,
  HttpStatusError,
  NetworkError,
  RetryAfterTooLongError,
  TimeoutError,
} from '../src/errors.ts';
import type { BreakwaterEvent, RetryEvent } from '../src/events.ts';
import { definePolicy } from '../src/policy.ts';
import { retry } from '../src/retry.ts';
import { sleep } from '../src/sleep.ts';
import { throwOnStatus } from '../src/status.ts';
import { timeout } from '../src/timeout.ts';
import { nodeFetchOverHttp, nodeFetchShaped } from './helpers/node-fetch.ts';
import {
  always,
  closedPort,
  type Handler,
  lateFirstAnswer,
  sequence,
  type TestServer,
  withServer,
} from './helpers/server.ts';
import { withTrickledAnswer } from './helpers/trickle.ts';

/** Short schedules: the behaviour is under test, not the default timings. */
const fast = { initialMs: 5, factor: 2, maxMs: 20, jitter: 'none' } as const;

test('a 503 with Retry-After: 1 then a 200 is retried exactly once, after the server’s delay', async () => {
  await withServer(
    sequence({ status: 503, headers: { 'retry-after': '1' } }, { status: 200, body: 'ok' }),
    async (server) => {
      const fetch = createFetch({ use: [retry()] });
      const started = performance.now();
      const res = await fetch(server.origin);
      const elapsed = performance.now() - started;
      assert.equal(await res.text(), 'ok');
      assert.equal(server.requests.length, 2);
      assert.ok(elapsed >= 1000, `waited ${elapsed} ms`);
      // The server's delay exactly, not a backoff step on top: the default backoff's
      // shortest step is 500 ms, so 1,500 ms would mean both. (1,300 ms failed under load.)
      assert.ok(elapsed < 1490, `waited ${elapsed} ms`);
    },
  );
});

/**
 * One call through `createFetch({ use })` to a 503 with `Retry-After: 1` whose body trickles,
 * then a 200: how long after the 503's headers the one resend came, and the retry event.
 */
async function resendAfterTrickle(use: Middleware[]): Promise<{ gap: number; wait?: RetryEvent }> {
  const events: BreakwaterEvent[] = [];
  const { headersSent, later } = await withTrickledAnswer(503, async (origin) => {
    const res = await createFetch({ use, onEvent: (event) => events.push(event) })(origin);
    assert.equal(await res.text(), 'ok');
  });
  assert.equal(later.length, 1, 'one resend');
  const gap = (later[0] as number) - headersSent;
  assert.ok(gap >= 990, `resent ${gap.toFixed(0)} ms after the headers: sooner than asked`);
  const wait = events.find((e): e is RetryEvent => e.type === 'retry');
  assert.equal(wait?.delaySource, 'server');
  return { gap, ...(wait ? { wait } : {}) };
}

test('a Retry-After: 1 whose body trickles is resent 1 s after the headers arrived, not 1 s after captureStatus() gave up reading the body', async () => {
  const { gap, wait } = await resendAfterTrickle([retry(), captureStatus({ bodyWaitMs: 500 })]);
  // The body read took 500 ms of the server's 1,000: the resend went after the other 500,
  // not a full second after the read (1,500 ms after the headers).
  assert.ok(gap < 1_350, `resent ${gap.toFixed(0)} ms after the headers, not about 1,000`);
  assert.ok((wait?.delayMs ?? 0) <= 600, `the retry event's wait is what was left: ${wait?.delayMs} ms`);
});

test('a Retry-After: 1 whose body trickles, thrown as an HttpStatusError by throwOnStatus(), is resent 1 s after the headers arrived, not 1 s after the body read', async () => {
  // No capture: throwOnStatus() reads the body's start itself, for its default bodyWaitMs
  // (1 s), then throws. The error's retryAfterMs was waited out in full from its throw.
  const { gap, wait } = await resendAfterTrickle([retry(), throwOnStatus([503])]);
  assert.ok(
    gap < 1_450,
    `resent ${gap.toFixed(0)} ms after the headers, not about 1,000 (2,000: after the read)`,
  );
  assert.ok((wait?.delayMs ?? 1_000) <= 100, `the retry event's wait is what was left: ${wait?.delayMs} ms`);
});

test('a Retry-After past maxRetryAfterMs fails at once even when what is left of it after the body read is within the cap', async () => {
  // Retry-After: 1 under a cap of 800 ms, 500 ms of which the capture spent reading the
  // body: what was left (500 ms) was within the cap, and the call slept and resent.
  const { later } = await withTrickledAnswer(503, async (origin) => {
    const fetch = createFetch({ use: [retry({ maxRetryAfterMs: 800 }), captureStatus({ bodyWaitMs: 500 })] });
    const error = await fetch(origin).catch((e: unknown) => e);
    assert.ok(error instanceof RetryAfterTooLongError, String(error));
    assert.equal(error.retryAfterMs, 1_000);
  });
  assert.equal(later.length, 0, 'not resent');
});

test('a Retry-After beyond the cap fails at once with RetryAfterTooLongError after one request', async () => {
  await withServer(
    always({ status: 503, headers: { 'retry-after': '3600' }, body: 'maintenance' }),
    async (server) => {
      const fetch = createFetch({ use: [retry(), captureStatus()], key: 'svc' });
      const started = performance.now();
      await assert.rejects(fetch(`${server.origin}/x?token=abc`), (error: unknown) => {
        assert.ok(error instanceof RetryAfterTooLongError, 'error instanceof RetryAfterTooLongError');
        assert.equal(error.retryAfterMs, 3_600_000);
        assert.ok(error.cause instanceof HttpStatusError, 'error.cause instanceof HttpStatusError');
        assert.equal((error.cause as HttpStatusError).status, 503);
        assert.equal((error.cause as HttpStatusError).serverMessage, 'maintenance');
        assert.match(error.message, /3600000 ms, longer than the 60000 ms allowed/);
        assert.doesNotMatch(error.message, /abc/);
        return true;
      });
      assert.ok(performance.now() - started < 500, 'performance.now() - started < 500');
      assert.equal(server.requests.length, 1);
    },
  );
});

test('a RetryAfterTooLongError’s retryAt is when the server’s wait ends, not that plus the read of the body start for its message', async () => {
  // The 429's body never ends: retry() reads its start for the cause's message for up to
  // a second (bodyWaitMs). retryAt was taken after that read, a second past the wait.
  await withServer(
    always({ stall: 'mid-body', status: 429, headers: { 'retry-after': '120' }, body: '{"error":' }),
    async (server) => {
      const fetch = createFetch({ use: [retry()] });
      const before = Date.now();
      const error = await fetch(server.origin).then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.ok(error instanceof RetryAfterTooLongError, 'error instanceof RetryAfterTooLongError');
      assert.equal(error.retryAfterMs, 120_000);
      const late = error.retryAt.getTime() - before - 120_000;
      assert.ok(late < 500, `retryAt is ${late} ms past the server's wait`);
    },
  );
});

test('a server delay longer than the call’s remaining deadline fails at once', async () => {
  await withServer(always({ status: 429, headers: { 'retry-after': '5' } }), async (server) => {
    const fetch = createFetch({ use: [timeout({ totalMs: 2000 }), retry()] });
    const started = performance.now();
    await assert.rejects(fetch(server.origin), RetryAfterTooLongError);
    assert.ok(performance.now() - started < 500, 'performance.now() - started < 500');
    assert.equal(server.requests.length, 1);
  });
});

test('a POST answered 500 is not retried: it may have run', async () => {
  await withServer(always({ status: 500 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast })] });
    const res = await fetch(server.origin, { method: 'POST', body: '{}' });
    await res.body?.cancel();
    assert.equal(res.status, 500);
    assert.equal(server.requests.length, 1);
  });
});

test('a POST whose connection was refused is retried: it never left', async () => {
  const refused = `http://127.0.0.1:${await closedPort()}/`;
  await withServer(always({ status: 201, body: 'made' }), async (server) => {
    let sends = 0;
    // The first attempt goes to a port that refuses, the second to the real server.
    const flaky: FetchLike = (input, init) => globalThis.fetch(sends++ === 0 ? refused : input, init);
    const fetch = createFetch({ fetch: flaky, use: [retry({ backoff: fast })] });
    const res = await fetch(server.origin, { method: 'POST', body: '{"a":1}' });
    assert.equal(await res.text(), 'made');
    assert.equal(sends, 2);
    assert.equal(server.requests[0]?.text, '{"a":1}');
  });
});

test('a POST with an Idempotency-Key answered 502 is retried', async () => {
  await withServer(sequence({ status: 502 }, { status: 200 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast })] });
    const res = await fetch(server.origin, {
      method: 'POST',
      body: 'x',
      headers: { 'Idempotency-Key': '"k-1"' },
    });
    await res.body?.cancel();
    assert.equal(res.status, 200);
    assert.equal(server.requests.length, 2);
    assert.equal(server.requests[1]?.text, 'x');
  });
});

test('a POST with a blank Idempotency-Key answered 503 is not resent: an empty key keys nothing', async () => {
  // fetch trims the value, so the server sees an empty key: it cannot dedupe a resend.
  await withServer(always({ status: 503 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast })] });
    for (const key of [' ', '\t \t']) {
      const res = await fetch(server.origin, {
        method: 'POST',
        body: 'x',
        headers: { 'Idempotency-Key': key },
      });
      await res.body?.cancel();
      assert.equal(res.status, 503);
    }
    assert.equal(server.requests.length, 2, 'one request per call');
    assert.equal(server.requests[0]?.headers['idempotency-key'], '');
  });
});

test('a PUT answered 503 is retried', async () => {
  await withServer(sequence({ status: 503 }, { status: 204 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast })] });
    const res = await fetch(server.origin, { method: 'PUT', body: 'v' });
    assert.equal(res.status, 204);
    assert.equal(server.requests.length, 2);
  });
});

test('a POST reset after the server read it is not retried, and the NetworkError says it may have been sent', async () => {
  await withServer(always({ reset: 'after-read' }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast })] });
    await assert.rejects(fetch(server.origin, { method: 'POST', body: 'x' }), (error: unknown) => {
      assert.ok(error instanceof NetworkError, 'error instanceof NetworkError');
      assert.equal(error.sent, 'maybe');
      return true;
    });
    assert.equal(server.requests.length, 1);
  });
});

test('resend: never does not resend even an idempotent GET that may have run', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast, resend: 'never' })] });
    const res = await fetch(server.origin);
    await res.body?.cancel();
    assert.equal(server.requests.length, 1);
  });
});

test('resend: always resends a POST answered 503', async () => {
  await withServer(sequence({ status: 503 }, { status: 200 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast, resend: 'always' })] });
    const res = await fetch(server.origin, { method: 'POST', body: 'x' });
    await res.body?.cancel();
    assert.equal(res.status, 200);
    assert.equal(server.requests.length, 2);
  });
});

test('attempts counts every attempt: attempts 3 sends three times, then returns the last response', async () => {
  await withServer(always({ status: 503, body: 'down' }), async (server) => {
    const events: BreakwaterEvent[] = [];
    const fetch = createFetch({ use: [retry({ backoff: fast })], onEvent: (e) => events.push(e) });
    const res = await fetch(server.origin);
    assert.equal(res.status, 503);
    assert.equal(await res.text(), 'down');
    assert.equal(server.requests.length, 3);
    assert.deepEqual(
      events.filter((e) => e.type === 'retry' || e.type === 'give-up').map((e) => e.type),
      ['retry', 'retry', 'give-up'],
    );
  });
});

test('with throwOnStatus inside, running out of attempts throws the last HttpStatusError', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast }), throwOnStatus()] });
    await assert.rejects(
      fetch(server.origin),
      (error: unknown) => error instanceof HttpStatusError && error.status === 503,
    );
    assert.equal(server.requests.length, 3);
  });
});

test('4xx other than 408 and 429 are returned at once', async () => {
  await withServer(always({ status: 404 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast })] });
    const res = await fetch(server.origin);
    await res.body?.cancel();
    assert.equal(res.status, 404);
    assert.equal(server.requests.length, 1);
  });
});

test('x-should-retry: false stops a retry the status would allow', async () => {
  await withServer(always({ status: 503, headers: { 'x-should-retry': 'false' } }), async (server) => {
    const res = await createFetch({ use: [retry({ backoff: fast })] })(server.origin);
    await res.body?.cancel();
    assert.equal(server.requests.length, 1);
  });
});

test('a stream body is sent once and never resent', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast })] });
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('stream'));
        controller.close();
      },
    });
    const res = await fetch(server.origin, { method: 'PUT', body, duplex: 'half' } as RequestInit);
    await res.body?.cancel();
    assert.equal(server.requests.length, 1);
  });
});

/** A stream body of `chunks`, then its end. */
function streamOf<T>(...chunks: T[]): ReadableStream<T> {
  return new ReadableStream<T>({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(chunk);
      controller.close();
    },
  });
}

/** PUTs `body` through retry() (replayBodyBytes 1024) to a server answering 503 then 200: both attempts carry `text`. */
async function assertResentWhole(body: ReadableStream, text: string): Promise<void> {
  await withServer(sequence({ status: 503 }, { status: 200 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast, replayBodyBytes: 1024 })] });
    const res = await fetch(server.origin, { method: 'PUT', body, duplex: 'half' } as RequestInit);
    await res.body?.cancel();
    assert.equal(res.status, 200);
    assert.deepEqual(
      server.requests.map((r) => r.text),
      [text, text],
    );
  });
}

test('a stream body under replayBodyBytes is buffered and resent byte for byte', async () => {
  const encode = (text: string): Uint8Array => new TextEncoder().encode(text);
  await assertResentWhole(streamOf(encode('part-1;'), encode('part-2')), 'part-1;part-2');
});

test('a stream body over replayBodyBytes is still sent whole, once', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast, replayBodyBytes: 4 })] });
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('0123'));
        controller.enqueue(new TextEncoder().encode('4567'));
        controller.enqueue(new TextEncoder().encode('89'));
        controller.close();
      },
    });
    const res = await fetch(server.origin, { method: 'PUT', body, duplex: 'half' } as RequestInit);
    await res.body?.cancel();
    assert.deepEqual(
      server.requests.map((r) => r.text),
      ['0123456789'],
    );
  });
});

test('a stream body of string chunks is not buffered past replayBodyBytes: the cap counts them', async () => {
  // Node's and Bun's fetch send string chunks (as UTF-8); Readable.toWeb() of a stream
  // with an encoding gives them. 1,000 chunks of 100 characters: 100 KB.
  let pulled = 0;
  const body = new ReadableStream<string>({
    pull(controller) {
      if (++pulled > 1000) controller.close();
      else controller.enqueue('x'.repeat(100));
    },
  });
  let pulledBeforeSend = -1;
  await withServer(always({ status: 503 }), async (server) => {
    const fetch = createFetch({
      fetch: (input, init) => {
        pulledBeforeSend = pulled;
        return globalThis.fetch(input, init);
      },
      use: [retry({ backoff: fast, replayBodyBytes: 1024 })],
    });
    // Deno's fetch refuses string chunks: the call may fail, once the body goes out as it is.
    await fetch(server.origin, { method: 'PUT', body, duplex: 'half' } as RequestInit).then(
      (res) => res.body?.cancel(),
      () => {},
    );
    assert.ok(server.requests.length <= 1, `sent ${server.requests.length} times`);
  });
  assert.ok(pulledBeforeSend >= 0 && pulledBeforeSend < 20, `${pulledBeforeSend} chunks read before sending`);
});

test('a stream body of string chunks under replayBodyBytes is resent as its UTF-8 bytes', async () => {
  await assertResentWhole(streamOf('héllo, ', 'wörld'), 'héllo, wörld');
});

/** A stream body that sends 'first part;' and never ends; `cancelled()` says whether it was told to stop. */
function stalledBody(): { body: ReadableStream<Uint8Array>; cancelled: () => boolean } {
  let cancelled = false;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode('first part;'));
    },
    cancel() {
      cancelled = true;
    },
  });
  return { body, cancelled: () => cancelled };
}

test('an abort while a stream body is buffered for replay rejects at once with the caller’s reason', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast, replayBodyBytes: 1024 })] });
    // A small body whose end is slow to come (an upload being relayed, say).
    const { body } = stalledBody();
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    setTimeout(() => controller.abort(reason), 20);
    const started = performance.now();
    await assert.rejects(
      fetch(server.origin, { method: 'PUT', body, duplex: 'half', signal: controller.signal } as RequestInit),
      (error: unknown) => error === reason,
    );
    assert.ok(performance.now() - started < 500, `${performance.now() - started} ms`);
    assert.equal(server.requests.length, 0);
  });
});

test('under definePolicy(), a stream body whose end never comes is buffered for replay no longer than the total deadline', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    // definePolicy()'s total deadline has no timer of its own: its attempt timeout sits inside retry().
    const fetch = definePolicy({ retry: { replayBodyBytes: 1024 }, timeout: { totalMs: 100 } }).fetch();
    // A small body whose end never comes (an upload being relayed from a client that stalled).
    const { body, cancelled } = stalledBody();
    // The caller's own abort, far later, ends the test if the deadline does not.
    const controller = new AbortController();
    const giveUp = setTimeout(() => controller.abort(new Error('not ended by the deadline')), 2000);
    const started = performance.now();
    try {
      await assert.rejects(
        fetch(server.origin, {
          method: 'PUT',
          body,
          duplex: 'half',
          signal: controller.signal,
        } as RequestInit),
        (error: unknown) => {
          assert.ok(error instanceof TimeoutError, String(error));
          assert.equal(error.scope, 'total');
          return true;
        },
      );
    } finally {
      clearTimeout(giveUp);
    }
    assert.ok(performance.now() - started < 1000, `${performance.now() - started} ms`);
    assert.equal(server.requests.length, 0);
    // The caller's stream is told to stop, not left locked and open.
    assert.ok(cancelled(), 'cancelled()');
  });
});

test('a Request input with a string body is buffered under replayBodyBytes and resent intact', async () => {
  await withServer(sequence({ status: 503 }, { status: 200 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast, replayBodyBytes: 1024 })] });
    const res = await fetch(new Request(server.origin, { method: 'PUT', body: 'hello' }));
    await res.body?.cancel();
    assert.equal(res.status, 200);
    assert.deepEqual(
      server.requests.map((r) => `${r.method} ${r.text}`),
      ['PUT hello', 'PUT hello'],
    );
  });
});

test('a Request input without a body is resent', async () => {
  await withServer(sequence({ status: 503 }, { status: 200 }), async (server) => {
    const fetch = createFetch({ use: [retry({ backoff: fast })] });
    const res = await fetch(new Request(server.origin, { headers: { 'x-a': '1' } }));
    await res.body?.cancel();
    assert.equal(res.status, 200);
    assert.equal(server.requests[1]?.headers['x-a'], '1');
  });
});

test('the dropped response’s body is cancelled before the retry', async () => {
  let cancelled = 0;
  let sends = 0;
  const stub: FetchLike = async () => {
    sends++;
    if (sends === 1) {
      const body = new ReadableStream({
        pull(controller) {
          controller.enqueue(new Uint8Array(1024));
        },
        cancel() {
          cancelled++;
        },
      });
      return new Response(body, { status: 503 });
    }
    return new Response('ok');
  };
  const res = await createFetch({ fetch: stub, use: [retry({ backoff: fast })] })('http://127.0.0.1:9/');
  assert.equal(await res.text(), 'ok');
  assert.equal(cancelled, 1);
});

test('a header set inside retry persists, and makes a POST safe to resend', async () => {
  await withServer(sequence({ status: 503 }, { status: 200 }), async (server) => {
    const stampKey: Middleware = async function stampKey(call, next) {
      if (call.header('idempotency-key') === null) call.setHeader('Idempotency-Key', '"fixed"');
      return next(call);
    };
    const fetch = createFetch({ use: [retry({ backoff: fast }), stampKey] });
    const res = await fetch(server.origin, { method: 'POST', body: 'x' });
    await res.body?.cancel();
    assert.equal(server.requests.length, 2);
    assert.equal(server.requests[1]?.headers['idempotency-key'], '"fixed"');
  });
});

/**
 * A server in process for the budget's 1,000-call storms: every request answered
 * `status` with `headers` at once, and counted. The budget counts attempts, not
 * sockets: 1,000 calls over loopback took a second of each runtime's suite.
 */
function inProcess(
  status: number,
  headers: Record<string, string> = {},
): { fetch: FetchLike; requests: () => number } {
  let requests = 0;
  const fetch: FetchLike = async () => {
    requests++;
    return new Response('failing', { status, headers });
  };
  return { fetch, requests: () => requests };
}

test('the retry budget stops a storm: 1,000 failing calls send at most about 10% extra requests', async () => {
  const server = inProcess(503);
  const policy = retry({ backoff: { initialMs: 1, maxMs: 1, jitter: 'none' } });
  const fetch = createFetch({ fetch: server.fetch, use: [policy], key: 'storm' });
  for (let batch = 0; batch < 50; batch++) {
    const responses = await Promise.all(Array.from({ length: 20 }, () => fetch('http://127.0.0.1:9/')));
    await Promise.all(responses.map((r) => r.body?.cancel()));
  }
  const extra = server.requests() - 1000;
  assert.ok(extra <= 100, `${extra} extra requests`);
  assert.ok(extra >= 1, 'some retries happened before the budget ran dry');
  assert.ok((policy.stats('storm')?.tokens ?? 10) <= 5, "(policy.stats('storm')?.tokens ?? 10) <= 5");
});

test('successes refill the budget', async () => {
  await withServer(
    (_req, index) => (index < 12 ? { status: 503 } : { status: 200 }),
    async (server) => {
      const policy = retry({ attempts: 2, backoff: fast, budget: { tokens: 4, refund: 1 } });
      const fetch = createFetch({ use: [policy], key: 'k' });
      for (let i = 0; i < 20; i++) await (await fetch(server.origin)).body?.cancel();
      assert.equal(server.requests.length, 21, '11 failing calls (the first retried once), then 9 successes');
      assert.equal(policy.stats('k')?.tokens, 4);
    },
  );
});

test('the budget’s token count is exact after refunds: ten refunds of 0.1 after a failure fill a bucket of 10 to 10, not 9.999999999999996', async () => {
  let status = 503;
  const fetch503: FetchLike = async () => new Response(null, { status });
  const policy = retry({ attempts: 1 });
  const fetch = createFetch({ fetch: fetch503, use: [policy], key: 'k' });
  await fetch('http://127.0.0.1:9/');
  assert.equal(policy.stats('k')?.tokens, 9);
  status = 200;
  const counts: Array<number | undefined> = [];
  for (let i = 0; i < 10; i++) {
    await fetch('http://127.0.0.1:9/');
    counts.push(policy.stats('k')?.tokens);
  }
  assert.deepEqual(counts, [9.1, 9.2, 9.3, 9.4, 9.5, 9.6, 9.7, 9.8, 9.9, 10]);
  // Any refund to the thousandth: 143 refunds of 0.007 after two failures is 9.001.
  const fine = retry({ attempts: 1, budget: { tokens: 10, refund: 0.007 } });
  const fineFetch = createFetch({ fetch: fetch503, use: [fine], key: 'k' });
  status = 503;
  await fineFetch('http://127.0.0.1:9/');
  await fineFetch('http://127.0.0.1:9/');
  status = 200;
  for (let i = 0; i < 143; i++) await fineFetch('http://127.0.0.1:9/');
  assert.equal(fine.stats('k')?.tokens, 9.001);
  await fineFetch('http://127.0.0.1:9/');
  assert.equal(fine.stats('k')?.tokens, 9.008);
});

test('a bucket refilled to exactly half by refunds refuses the next retry: float drift must not lift it above half', async () => {
  // A bucket of 4 (half: 2), refund 0.1. One call and its retry fail (4 → 2), ten
  // successes put back 1 (→ 3), then a failure takes one (→ 2): at half, so no retry.
  // Summed in floats the ten refunds made 3.000000000000001, and the retry went.
  let requests = 0;
  let status = 503;
  const fetchOf: FetchLike = async () => {
    requests++;
    return new Response(null, { status });
  };
  const policy = retry({ attempts: 2, backoff: fast, budget: { tokens: 4, refund: 0.1 } });
  const fetch = createFetch({ fetch: fetchOf, use: [policy], key: 'k' });
  await fetch('http://127.0.0.1:9/');
  assert.equal(requests, 2, 'the first failure is retried once');
  status = 200;
  for (let i = 0; i < 10; i++) await fetch('http://127.0.0.1:9/');
  assert.equal(policy.stats('k')?.tokens, 3);
  status = 503;
  requests = 0;
  const res = await fetch('http://127.0.0.1:9/');
  assert.equal(res.status, 503);
  assert.equal(requests, 1, 'the bucket is at half: the failure is not retried');
  assert.equal(policy.stats('k')?.tokens, 2);
});

test('with budget: false, stats report no budget (tokens undefined), not an empty one', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const policy = retry({ attempts: 2, backoff: fast, budget: false });
    const fetch = createFetch({ use: [policy], key: 'k' });
    for (let i = 0; i < 3; i++) await (await fetch(server.origin)).body?.cancel();
    assert.equal(server.requests.length, 6, 'every failing call retried: no budget refuses');
    assert.deepEqual(policy.stats('k'), { tokens: undefined, retries: 3, giveUps: 3 });
    // Through a policy too, and in what a dashboard would serialise: no tokens field.
    const fromPolicy = definePolicy({ retry: { attempts: 2, backoff: fast, budget: false } });
    await (await fromPolicy.fetch(undefined, { key: 'p' })(server.origin)).body?.cancel();
    assert.equal(JSON.stringify(fromPolicy.stats('p').retry), '{"retries":1,"giveUps":1}');
  });
});

test('an abort during a 30 s backoff rejects within 50 ms with the caller’s reason', async () => {
  await withServer(always({ status: 503, headers: { 'retry-after': '30' } }), async (server) => {
    const controller = new AbortController();
    const reason = new Error('agent turn cancelled');
    let backingOff: () => void = () => {};
    const backoffBegins = new Promise<void>((resolve) => {
      backingOff = resolve;
    });
    const fetch = createFetch({
      use: [retry()],
      onEvent: (e) => {
        if (e.type === 'retry') backingOff();
      },
    });
    const pending = fetch(server.origin, { signal: controller.signal });
    // The first 503 has arrived and the 30 s sleep is about to begin (the event comes just before it).
    await backoffBegins;
    const started = performance.now();
    controller.abort(reason);
    await assert.rejects(pending, (error: unknown) => error === reason);
    assert.ok(performance.now() - started < 50, 'performance.now() - started < 50');
    assert.equal(server.requests.length, 1);
  });
});

test('sleep rejects at once for an already aborted signal', async () => {
  const controller = new AbortController();
  controller.abort(new Error('already'));
  await assert.rejects(sleep(10_000, controller.signal), /already/);
});

test('retry({ backoff: { initialMs } }) above the default cap raises the cap rather than throwing', () => {
  assert.doesNotThrow(() => retry({ backoff: { initialMs: 60_000 } }));
  assert.throws(
    () => retry({ backoff: { initialMs: 60_000, maxMs: 1_000 } }),
    /maxMs: must be at least initialMs/,
  );
});

test('bad retry options are a TypeError listing each one', () => {
  assert.throws(
    () => retry({ attempts: 0, resend: 'sometimes', backoff: { jitter: 'lots' } } as never),
    (error: unknown) =>
      error instanceof TypeError &&
      /retry\(\)\.attempts/.test(error.message) &&
      /retry\(\)\.resend/.test(error.message) &&
      /retry\(\)\.backoff\.jitter/.test(error.message),
  );
  assert.throws(() => retry({ tries: 3 } as never), /unknown option "tries"/);
});

test('retries the server invited with a delay neither take budget tokens nor are refused by the budget', async () => {
  await withServer(
    (_req, index) =>
      index % 2 === 0 ? { status: 429, headers: { 'retry-after-ms': '1' } } : { status: 200 },
    async (server) => {
      const policy = retry({ backoff: fast, budget: { tokens: 2, refund: 0 } });
      const fetch = createFetch({ use: [policy], key: 'paced' });
      for (let i = 0; i < 10; i++) {
        const res = await fetch(server.origin);
        await res.body?.cancel();
        assert.equal(res.status, 200);
      }
      assert.equal(server.requests.length, 20);
      assert.equal(policy.stats('paced')?.tokens, 2);
    },
  );
});

test('a Retry-After of 0 is no invitation past the budget: 1,000 calls answered so send few extra requests', async () => {
  const server = inProcess(503, { 'retry-after': '0' });
  const policy = retry({ backoff: fast });
  const fetch = createFetch({ fetch: server.fetch, use: [policy], key: 'zero' });
  for (let batch = 0; batch < 50; batch++) {
    const responses = await Promise.all(Array.from({ length: 20 }, () => fetch('http://127.0.0.1:9/')));
    await Promise.all(responses.map((r) => r.body?.cancel()));
  }
  const extra = server.requests() - 1000;
  assert.ok(extra <= 100, `${extra} extra requests`);
  assert.ok((policy.stats('zero')?.tokens ?? 10) <= 5, "(policy.stats('zero')?.tokens ?? 10) <= 5");
});

test('the HttpStatusError under a RetryAfterTooLongError is retryable by the retry statuses the caller set', async () => {
  await withServer(always({ status: 420, headers: { 'retry-after': '3600' } }), async (server) => {
    const fetch = createFetch({ use: [retry({ statuses: [420] })] });
    await assert.rejects(fetch(server.origin), (error: unknown) => {
      assert.ok(error instanceof RetryAfterTooLongError, 'error instanceof RetryAfterTooLongError');
      assert.ok(error.cause instanceof HttpStatusError, 'error.cause instanceof HttpStatusError');
      assert.equal(error.cause.status, 420);
      assert.equal(error.cause.retryable, true);
      return true;
    });
  });
});

test('an abort while a stream body is buffered for replay cancels the caller’s stream', async () => {
  // The upload's source (a relayed request body, a file) must be told to stop: left
  // locked by the tee and never cancelled, it stays open for as long as it likes.
  const { body, cancelled } = stalledBody();
  const controller = new AbortController();
  const reason = new Error('caller gave up');
  const fetch = createFetch({
    fetch: async () => new Response('never sent'),
    use: [retry({ backoff: fast, replayBodyBytes: 1024 })],
  });
  setTimeout(() => controller.abort(reason), 20);
  await assert.rejects(
    fetch('http://127.0.0.1:9/', {
      method: 'PUT',
      body,
      duplex: 'half',
      signal: controller.signal,
    } as RequestInit),
    (error: unknown) => error === reason,
  );
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(cancelled(), true, 'the source stream was cancelled');
});

/** A custom fetch that drops `init.signal`: an abort or a deadline never reaches the request. */
const deafFetch: FetchLike = (input, init) => {
  const { signal: _ignored, ...rest } = init ?? {};
  return globalThis.fetch(input, rest);
};

test('a retry() left running below an ended attempt deadline ends its wait for a late 503 at once', async () => {
  // The caller has its TimeoutError; the late 503 still reaches the retry below, which
  // must not hold a backoff or server delay (up to 32 s or 60 s: a timer that keeps
  // the process up) before a resend the chain's end refuses anyway.
  for (const late of [{}, { 'retry-after': '5' }]) {
    await withServer(sequence({ status: 503, headers: late, delayMs: 100 }, {}), async (server) => {
      let arrived = 0;
      let ended = 0;
      const retries: BreakwaterEvent[] = [];
      const watch: Middleware = async function watch(call, next) {
        try {
          return await next(call);
        } finally {
          ended = performance.now();
        }
      };
      const fetch = createFetch({
        fetch: deafFetch,
        onEvent: (event) => {
          if (event.type === 'retry') retries.push(event);
        },
        use: [
          timeout({ attemptMs: 30 }),
          watch,
          retry({ backoff: { initialMs: 5000, jitter: 'none' } }),
          async function late(call, next) {
            const response = await next(call);
            arrived = performance.now();
            return response;
          },
        ],
      });
      await assert.rejects(fetch(`${server.origin}/x`), TimeoutError);
      await new Promise((resolve) => setTimeout(resolve, 250));
      assert.ok(arrived > 0, 'the late 503 arrived');
      assert.ok(ended > 0, `the retry still waits (${JSON.stringify(late)})`);
      assert.ok(ended - arrived < 100, `ended ${ended - arrived} ms after the late 503`);
      assert.equal(server.requests.length, 1);
      assert.deepEqual(retries, [], 'no retry event for a call that is over');
    });
  }
});

test('a retry() left running below an ended attempt deadline does not resend during the next attempt a retry above started', async () => {
  // [retry, timeout({ attemptMs }), retry]: the first attempt's 503 arrives (through a
  // fetch that ignores the signal) while the second attempt runs; the inner retry of
  // the first attempt must not add a request of its own to it.
  await withServer(lateFirstAnswer({ status: 503 }), async (server) => {
    const fetch = createFetch({
      fetch: deafFetch,
      use: [
        retry({ attempts: 2, backoff: { initialMs: 1, jitter: 'none' } }),
        timeout({ attemptMs: 100 }),
        retry({ attempts: 3, backoff: { initialMs: 1, jitter: 'none' } }),
      ],
    });
    const response = await fetch(`${server.origin}/x`);
    assert.equal(response.status, 200);
    await response.text();
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(server.requests.length, 2, 'requests the server received');
  });
});

test('a caller signal from an AbortSignal polyfill (no throwIfAborted) still gets its retry', async () => {
  // Custom fetches (node-fetch) take the abort-controller package's signals, which have
  // aborted, reason and listeners, and nothing newer.
  const polyfilled = Object.assign(new EventTarget(), { aborted: false, reason: undefined });
  await withServer(sequence({ status: 503 }, {}), async (server) => {
    const fetch = createFetch({ fetch: deafFetch, use: [retry({ backoff: fast })] });
    const response = await fetch(`${server.origin}/x`, { signal: polyfilled as unknown as AbortSignal });
    assert.equal(response.status, 200);
    await response.text();
    assert.equal(server.requests.length, 2);
  });
});

test('a call a timeout above retry() has ended gets no give-up or retry event for its late answer, and takes no budget token', async () => {
  // The caller has its TimeoutError (or its abort) from the timeout above; what still
  // reaches retry() later (a 503 through a fetch that ignores the signal, or the aborted
  // fetch's own rejection) is no failure retry() gave up on or refused to resend: metrics
  // would count a give-up, with a misleading reason ('deadline', 'not-retryable'), for a
  // call already reported as a timeout, and the server's budget would pay for it.
  const untouched = { tokens: 10, retries: 0, giveUps: 0 };
  for (const { end, method, fetch: base } of [
    { end: 'deadline', method: 'GET', fetch: deafFetch },
    { end: 'deadline', method: 'GET', fetch: globalThis.fetch },
    { end: 'abort', method: 'POST', fetch: deafFetch },
    { end: 'abort', method: 'GET', fetch: deafFetch },
  ]) {
    const controller = new AbortController();
    const handler = () => {
      if (end === 'abort') controller.abort(new Error('agent turn cancelled'));
      return { status: 503, delayMs: 100 };
    };
    await withServer(handler, async (server) => {
      const events: string[] = [];
      let answered: () => void = () => {};
      const answer = new Promise<void>((resolve) => {
        answered = resolve;
      });
      const policy = retry({ backoff: fast });
      const fetch = createFetch({
        fetch: base,
        key: 'k',
        onEvent: (event) => events.push(event.type),
        use: [
          timeout({ totalMs: end === 'deadline' ? 30 : 5000 }),
          policy,
          async function late(call, next) {
            try {
              return await next(call);
            } finally {
              answered();
            }
          },
        ],
      });
      const init = end === 'abort' ? { method, signal: controller.signal } : { method };
      await assert.rejects(fetch(`${server.origin}/x`, init));
      await answer;
      await new Promise((resolve) => setTimeout(resolve, 10));
      const label = `${end}, ${method}, ${base === deafFetch ? 'a fetch that ignores the signal' : 'fetch'}`;
      assert.deepEqual(events, ['attempt'], label);
      assert.deepEqual(policy.stats('k') ?? untouched, untouched, label);
      assert.equal(server.requests.length, 1, label);
    });
  }
});

test('a resend the caller left during its backoff is not counted in stats as one made', async () => {
  // The 503 came while the call was live: its token is taken (every failed attempt takes
  // one). The resend never happens: the caller aborts, or a timeout above ends the call,
  // during the 5 s wait, so `retries` ("resends made") must not count it.
  for (const end of ['abort', 'deadline']) {
    await withServer(always({ status: 503 }), async (server) => {
      const controller = new AbortController();
      const policy = retry({ backoff: { initialMs: 5000, jitter: 'none' } });
      const fetch = createFetch({
        key: 'k',
        onEvent: (event) => {
          if (event.type === 'retry' && end === 'abort') controller.abort(new Error('agent turn cancelled'));
        },
        use: [timeout({ attemptMs: end === 'deadline' ? 50 : 5000 }), policy],
      });
      await assert.rejects(fetch(`${server.origin}/x`, { signal: controller.signal }));
      assert.equal(server.requests.length, 1, end);
      assert.deepEqual(policy.stats('k'), { tokens: 9, retries: 0, giveUps: 0 }, end);
    });
  }
});

test('a caller who aborts gets its own abort reason from retry() even when the fetch below ignores the signal', async () => {
  // No timeout above: retry() is the last layer between the caller and a late 503 that a
  // deaf fetch returns after the abort. User aborts stay the runtime's own reason (DESIGN
  // §4), never the answer the caller no longer waits for, and nothing is resent.
  const controller = new AbortController();
  const reason = new Error('agent turn cancelled');
  await withServer(
    () => {
      controller.abort(reason);
      return { status: 503, delayMs: 20 };
    },
    async (server) => {
      const fetch = createFetch({ fetch: deafFetch, key: 'k', use: [retry({ backoff: fast })] });
      await assert.rejects(
        fetch(`${server.origin}/x`, { signal: controller.signal }),
        (error) => error === reason,
      );
      assert.equal(server.requests.length, 1);
    },
  );
});

test('a call whose total deadline passes during an attempt of definePolicy()’s chain gives up for the deadline, not as not retryable', async () => {
  // definePolicy() sets the total deadline without a timer (deadline()): the attempt
  // timeout inside retry() ends the last attempt at it, with a TimeoutError of scope
  // 'total'. retry() is the layer that stops there, and what stopped it is the deadline:
  // the give-up must say so, as it does when a backoff wait would pass the deadline.
  for (const first of [{ hang: true } as const, { status: 503 }]) {
    await withServer(sequence(first, { hang: true }), async (server) => {
      const events: BreakwaterEvent[] = [];
      const policy = definePolicy({
        name: 'k',
        retry: { backoff: fast },
        timeout: { attemptMs: 1000, totalMs: 100 },
      });
      const fetch = policy.fetch(undefined, { onEvent: (event) => events.push(event) });
      await assert.rejects(fetch(`${server.origin}/x`), (error: unknown) => {
        assert.ok(error instanceof TimeoutError, 'error instanceof TimeoutError');
        assert.equal(error.scope, 'total');
        return true;
      });
      const label = `first answer ${JSON.stringify(first)}`;
      const giveUps = events.filter((event) => event.type === 'give-up');
      assert.deepEqual(
        giveUps.map(({ why, reason }) => ({ why, reason })),
        [{ why: 'deadline', reason: 'TIMEOUT' }],
        label,
      );
      const retried = 'status' in first ? 1 : 0;
      assert.deepEqual(
        policy.stats('k').retry,
        { tokens: 10 - retried, retries: retried, giveUps: 1 },
        label,
      );
      assert.equal(server.requests.length, 1 + retried, label);
    });
  }
});

test('a caller’s abort ends retry() at once even when the dropped answer’s body is slow to cancel', async () => {
  // A body's cancel() settles only when its source's cancel does: a custom fetch that
  // relays another stream (a proxy, a mock) may take long or never. Nobody reads that
  // answer, and the caller left: retry() must not wait for the cancel, whether the abort
  // came while the attempt ran (a fetch that ignores the signal) or during the cancel.
  for (const when of ['attempt', 'cancel']) {
    const controller = new AbortController();
    const reason = new Error('agent turn cancelled');
    let sends = 0;
    const relay: FetchLike = async () => {
      sends++;
      if (when === 'attempt') controller.abort(reason);
      const body = new ReadableStream({
        cancel() {
          if (when === 'cancel') controller.abort(reason);
          return new Promise<void>(() => {});
        },
      });
      return new Response(body, { status: 503 });
    };
    const fetch = createFetch({
      fetch: relay,
      use: [retry({ backoff: { initialMs: 5000, jitter: 'none' } })],
    });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const outcome = await Promise.race([
      fetch('http://127.0.0.1:9/x', { signal: controller.signal }).then(
        () => 'a response',
        (error: unknown) => (error === reason ? 'the caller’s reason' : String(error)),
      ),
      new Promise((resolve) => {
        timer = setTimeout(() => resolve('still waiting after 200 ms'), 200);
      }),
    ]);
    clearTimeout(timer);
    assert.equal(outcome, 'the caller’s reason', `abort during the ${when}`);
    assert.equal(sends, 1, `abort during the ${when}`);
  }
});

test('a caller who aborts while retry() reads the body of an answer whose Retry-After is too long gets its own reason, not RetryAfterTooLongError', async () => {
  // retry() gave up on a live call (the event and giveUps stand), then reads the body
  // start for the error's message, up to a second. A caller who aborts during that read
  // is no longer waiting for a rate-limit error: user aborts stay their own reason
  // (DESIGN §4), as they do during a backoff wait.
  const controller = new AbortController();
  const reason = new Error('agent turn cancelled');
  await withServer(
    always({ stall: 'mid-body', status: 503, headers: { 'retry-after': '3600' }, body: 'maint' }),
    async (server) => {
      const policy = retry({ backoff: fast });
      const fetch = createFetch({
        key: 'k',
        onEvent: (event) => {
          if (event.type === 'give-up') controller.abort(reason);
        },
        use: [policy],
      });
      await assert.rejects(
        fetch(`${server.origin}/x`, { signal: controller.signal }),
        (error) => error === reason,
      );
      assert.equal(server.requests.length, 1);
      assert.deepEqual(policy.stats('k'), { tokens: 10, retries: 0, giveUps: 1 });
    },
  );
});

test('a caller signal from an AbortSignal polyfill does not break buffering a stream body for replay', async () => {
  // pipeTo() takes only a real AbortSignal: Deno and Bun reject anything else (Node lets
  // it through), so a polyfill's signal (node-fetch's abort-controller) failed every call
  // with a stream body under replayBodyBytes before a byte was sent.
  const polyfilled = Object.assign(new EventTarget(), { aborted: false, reason: undefined });
  await withServer(sequence({ status: 503 }, {}), async (server) => {
    const fetch = createFetch({ fetch: deafFetch, use: [retry({ backoff: fast, replayBodyBytes: 1024 })] });
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('part-1'));
        controller.close();
      },
    });
    const init = { method: 'PUT', body, duplex: 'half', signal: polyfilled as unknown as AbortSignal };
    const response = await fetch(`${server.origin}/x`, init as RequestInit);
    assert.equal(response.status, 200);
    await response.text();
    assert.deepEqual(
      server.requests.map((request) => request.text),
      ['part-1', 'part-1'],
    );
  });
});

test('an async iterable body (a generator, a Node Readable) is never resent: a keyed POST answered 503 gives up as body-not-replayable', async () => {
  // Node, Deno and Bun's fetch take one (with duplex: 'half') and read it once: a resend
  // of the spent iterable went out empty, and with an Idempotency-Key the server took the
  // empty POST as the real one.
  await withServer(sequence({ status: 503 }, { status: 200, body: 'ok' }), async (server) => {
    const why: string[] = [];
    const fetch = createFetch({
      onEvent: (event) => {
        if (event.type === 'give-up') why.push(event.why);
      },
      use: [retry({ backoff: fast })],
    });
    async function* chunks(): AsyncGenerator<Uint8Array> {
      yield new TextEncoder().encode('order #1');
    }
    const init = { method: 'POST', headers: { 'idempotency-key': '"k1"' }, body: chunks(), duplex: 'half' };
    const res = await fetch(server.origin, init as unknown as RequestInit);
    assert.equal(res.status, 503);
    await res.body?.cancel();
    assert.deepEqual(
      server.requests.map((r) => r.text),
      ['order #1'],
    );
    assert.deepEqual(why, ['body-not-replayable']);
  });
});

test('resends an open circuit below refused are not counted in stats as made: retries match the server’s count', async () => {
  // 20 callers meet a 503 that asks for 20 ms: each waits it out and resends, but the first
  // 503 opened the circuit (for a minute) meanwhile, and the breaker refuses every resend
  // before it is sent. All 20 are let through before any answer is read, so the server
  // sees exactly 20. (Opening on in-flight 503s alone stopped working with 16adf09: a
  // shedding server's storm counts once, and some calls ended with the 503 instead.) Open
  // for 2 minutes: past maxRetryAfterMs, so retry does not wait for it.
  await withServer(always({ status: 503, headers: { 'retry-after-ms': '20' } }), async (server) => {
    const policy = definePolicy({
      name: 'k',
      breaker: { consecutiveFailures: 1, open: { initialMs: 120_000, jitter: 'none' } },
    });
    let resends = 0;
    const fetch = policy.fetch(undefined, {
      onEvent: (event) => {
        if (event.type === 'retry') resends++;
      },
    });
    const outcomes = await Promise.allSettled(Array.from({ length: 20 }, () => fetch(server.origin)));
    // How each call ended, by name: a bare assert.ok() that fails under tsx has Node
    // re-parse this file for its message, for minutes of CPU before the run ends.
    const codes = outcomes.map((o) =>
      o.status === 'rejected' ? (o.reason as { code?: string }).code : o.status,
    );
    assert.deepEqual(codes, Array(20).fill('CIRCUIT_OPEN'));
    assert.equal(resends, 20, 'each call waited the 503 out to resend');
    assert.equal(server.requests.length, 20);
    assert.equal(policy.stats('k').retry?.retries, 0);
  });
});

test('auth()’s resend after a 401 that an open circuit refuses leaves retry’s count of resends at 0, not -1', async () => {
  // auth() below retry numbers its resend as attempt 2; retry made none. The circuit
  // opens during the refresh: another call meets the server's 503.
  await withServer(
    (req) => (req.url === '/down' ? { status: 503 } : { status: 401 }),
    async (server) => {
      const policy = definePolicy({ name: 'k', breaker: { consecutiveFailures: 1 } });
      const fetch: FetchLike = policy.fetch(undefined, {
        auth: {
          token: 'old-token-value',
          refresh: async () => {
            await (await fetch(`${server.origin}/down`, { method: 'POST' })).text();
            return 'new-token-value';
          },
        },
      });
      await assert.rejects(fetch(`${server.origin}/x`, { method: 'POST' }), { code: 'CIRCUIT_OPEN' });
      assert.equal(server.requests.length, 2);
      assert.equal(policy.stats('k').retry?.retries, 0);
    },
  );
});

test('a base fetch whose body is a Node stream (node-fetch v2, v3): a 503 then a 200 resolves 200 after 2 requests', async () => {
  // Dropping the 503 called body.cancel(), which a Node Readable lacks: MIDDLEWARE_FAILED
  // 'cancel is not a function' instead of a resend.
  await withServer(sequence({ status: 503, body: 'busy' }, { status: 200, body: 'ok' }), async (server) => {
    const fetch = createFetch({ fetch: nodeFetchShaped, use: [retry({ backoff: fast })] });
    const response = await fetch(server.origin);
    assert.equal(response.status, 200);
    assert.equal(server.requests.length, 2);
  });
});

test('statuses takes a readonly array: DEFAULT_RETRYABLE_STATUSES, or a policy written `as const`', async () => {
  // A type test first: tsc and deno check refused both while `statuses` was `number[]`.
  const config = { retry: { statuses: [503], backoff: fast } } as const;
  const fetch = createFetch({ use: [retry({ statuses: DEFAULT_RETRYABLE_STATUSES, backoff: fast })] });
  for (const send of [definePolicy(config).fetch(), fetch]) {
    await withServer(sequence({ status: 503 }, { status: 200 }), async (server) => {
      const response = await send(server.origin);
      await response.body?.cancel();
      assert.equal(response.status, 200);
      assert.equal(server.requests.length, 2);
    });
  }
});

test('retry’s resend answered 401, whose auth() resend an open circuit refuses, is counted as made: it reached the server', async () => {
  // The resend went (the server answered it 401); auth() refreshed and resent it, and the
  // circuit, opened by other calls during the refresh, refused that one. Judged by the
  // pass's last outcome alone, retry's resend read as refused unsent: retries 0, not 1.
  // Open for 2 minutes: past maxRetryAfterMs, so retry does not wait for it.
  let calls = 0;
  await withServer(
    (req) => (req.url === '/down' || ++calls === 1 ? { status: 503 } : { status: 401 }),
    async (server) => {
      const policy = definePolicy({
        name: 'k',
        retry: { backoff: fast },
        breaker: { consecutiveFailures: 2, open: { initialMs: 120_000, jitter: 'none' } },
      });
      const fetch: FetchLike = policy.fetch(undefined, {
        auth: {
          token: 'old-token-value',
          refresh: async () => {
            for (let i = 0; i < 2; i++)
              await (await fetch(`${server.origin}/down`, { method: 'POST' })).text();
            return 'new-token-value';
          },
        },
      });
      await assert.rejects(fetch(`${server.origin}/x`), { code: 'CIRCUIT_OPEN' });
      assert.deepEqual(
        server.requests.map((r) => r.url),
        ['/x', '/x', '/down', '/down'],
      );
      assert.equal(policy.stats('k').retry?.retries, 1);
    },
  );
});

test('options passed through as undefined (exactOptionalPropertyTypes) are the defaults, in retry() and in a policy', async () => {
  // A type test first: tsc and deno check refused `{ attempts: settings.attempts }` with an
  // unset setting while the fields did not take undefined.
  const settings: { attempts?: number; tokens?: number } = {};
  const given = { attempts: settings.attempts, budget: { tokens: settings.tokens }, backoff: fast };
  assert.deepEqual(definePolicy({ retry: given }).resolved.retry.budget, { tokens: 10, refund: 0.1 });
  for (const send of [definePolicy({ retry: given }).fetch(), createFetch({ use: [retry(given)] })]) {
    await withServer(sequence({ status: 503 }, { status: 503 }, { status: 200 }), async (server) => {
      const response = await send(server.origin);
      await response.body?.cancel();
      assert.equal(response.status, 200);
      assert.equal(server.requests.length, 3);
    });
  }
});

test("a base fetch whose body is a Node stream (node-fetch v2): a dropped 503's connection is let go, its 1 MiB body read to its end, not left open", async () => {
  // Dropping the 503 skipped the body's cancel(), which a Node stream has not, and the body
  // was neither read nor let go: each retried failure kept its connection for good.
  const nodeFetch = nodeFetchOverHttp();
  const body = 'x'.repeat(1024 * 1024);
  await withServer(
    sequence({ status: 503, body }, { status: 503, body }, { status: 200 }),
    async (server) => {
      const fetch = createFetch({ fetch: nodeFetch.fetch, use: [retry({ backoff: fast })] });
      const response = await fetch(server.origin);
      assert.equal(response.status, 200);
      (response.body as unknown as Readable).resume();
      assert.equal(await nodeFetch.open(), 0, 'a connection left open');
    },
  );
});

test('a resend an open circuit below refused waits for its retryAt, then reaches the server: the refusal uses no attempt', async () => {
  // Two 503s open the circuit for 150 ms. retry()'s 10 ms backoff ends first: its resend
  // is refused unsent. It used to end the call there (CircuitOpenError after 2 of the 3
  // attempts, none of them the third); now retry waits until the refusal's retryAt and
  // sends the third attempt, the breaker's probe, which the recovered server answers.
  await withServer(sequence({ status: 503 }, { status: 503 }, { status: 200 }), async (server) => {
    const why: string[] = [];
    const retrying = retry({ attempts: 3, backoff: { initialMs: 10, factor: 1, maxMs: 10, jitter: 'none' } });
    const fetch = createFetch({
      use: [retrying, circuitBreaker({ consecutiveFailures: 2, open: { initialMs: 150, jitter: 'none' } })],
      key: 'k',
      onEvent: (event) => {
        if (event.type === 'give-up') why.push(event.why);
      },
    });
    const response = await fetch(server.origin);
    await response.body?.cancel();
    assert.equal(response.status, 200);
    assert.equal(server.requests.length, 3);
    assert.deepEqual(why, []);
    // Two resends went; the refused one is not counted, and took no budget token (10, less one per 503, plus 0.1 for the success).
    assert.deepEqual(retrying.stats('k'), { tokens: 8.1, retries: 2, giveUps: 0 });
  });
});

test('a new call an open circuit refuses fails fast with the CircuitOpenError: retry waits only for a refused resend', async () => {
  // The breaker's point: an agent's turn goes on without a server that is down, at once.
  await withServer(always({ status: 503 }), async (server) => {
    const why: string[] = [];
    const fetch = createFetch({
      use: [
        retry({ backoff: fast }),
        circuitBreaker({ consecutiveFailures: 1, open: { initialMs: 10_000, jitter: 'none' } }),
      ],
      onEvent: (event) => {
        if (event.type === 'give-up') why.push(event.why);
      },
    });
    await (await fetch(server.origin, { method: 'POST' })).body?.cancel();
    const started = Date.now();
    await assert.rejects(fetch(server.origin), CircuitOpenError);
    assert.ok(Date.now() - started < 5_000, 'no wait for the circuit to close');
    assert.equal(server.requests.length, 1);
    assert.deepEqual(why, ['unsafe-to-resend', 'not-retryable']);
  });
});

test('a refusal whose retryAt is past maxRetryAfterMs fails at once with the CircuitOpenError itself, as a too-long Retry-After does', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const why: string[] = [];
    const fetch = createFetch({
      use: [
        retry({ backoff: fast, maxRetryAfterMs: 100 }),
        circuitBreaker({ consecutiveFailures: 1, open: { initialMs: 10_000, jitter: 'none' } }),
      ],
      onEvent: (event) => {
        if (event.type === 'give-up') why.push(event.why);
      },
    });
    const started = Date.now();
    const error = await fetch(server.origin).catch((e: unknown) => e);
    assert.ok(error instanceof CircuitOpenError, String(error));
    assert.ok(Date.now() - started < 5_000, 'no wait for the circuit to close');
    assert.equal(server.requests.length, 1);
    assert.deepEqual(why, ['retry-after-too-long']);
  });
});

test('a refusal whose retryAt is past the call’s deadline fails at once with the CircuitOpenError', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const fetch = createFetch({
      use: [
        timeout({ totalMs: 2_000 }),
        retry({ backoff: fast }),
        circuitBreaker({ consecutiveFailures: 1, open: { initialMs: 10_000, jitter: 'none' } }),
      ],
    });
    const started = Date.now();
    await assert.rejects(fetch(server.origin), { code: 'CIRCUIT_OPEN' });
    assert.ok(Date.now() - started < 1_500, 'no wait to the deadline');
    assert.equal(server.requests.length, 1);
  });
});

/**
 * A stand-in for a breaker or gate below retry() that refuses resends unsent (a circuit
 * other callers' probes keep reopening): the passes `refused` picks (every one after the
 * first, by default) are refused with `refusal(call)`, the others sent on.
 */
function refusingResends(
  refusal: (call: Call) => Error,
  refused = (pass: number) => pass > 1,
): Middleware & { passes(): number } {
  let passes = 0;
  const refuse: Middleware = async function refuse(call, next) {
    if (!refused(++passes)) return next(call);
    throw refusal(call);
  };
  return Object.assign(refuse, { passes: () => passes });
}

test('refusals are capped at attempts apart: a circuit that stays open ends the call after that many', async () => {
  // A circuit reopened by every probe another caller sends: this call's resends are all
  // refused. A fake clock-free stand-in: a layer that refuses every pass after the first.
  await withServer(always({ status: 503 }), async (server) => {
    const refuse = refusingResends(
      (call) =>
        new CircuitOpenError({ key: call.key, retryAt: new Date(Date.now() + 5), reason: 'for the test' }),
    );
    const why: string[] = [];
    const fetch = createFetch({
      use: [retry({ attempts: 3, backoff: fast }), refuse],
      onEvent: (event) => {
        if (event.type === 'give-up') why.push(event.why);
      },
    });
    await assert.rejects(fetch(server.origin), { code: 'CIRCUIT_OPEN' });
    assert.equal(server.requests.length, 1);
    assert.equal(refuse.passes(), 4, 'one send, then three refusals');
    assert.deepEqual(why, ['attempts']);
  });
});

/**
 * A client whose calls a first middleware marks idempotent (an MCP tool's idempotentHint),
 * the mark taken back at the first `retry` event `during` accepts (tools/list_changed
 * during the wait), with `use` after it; `why` collects the give-ups' reasons.
 */
function markTakenBack(
  use: Middleware[],
  during: (event: RetryEvent) => boolean,
): { fetch: FetchLike; why: string[] } {
  let marked: Call | undefined;
  const why: string[] = [];
  const fetch = createFetch({
    use: [
      (call, next) => {
        call.idempotent = true;
        marked = call;
        return next(call);
      },
      ...use,
    ],
    onEvent: (event) => {
      if (event.type === 'give-up') why.push(event.why);
      if (event.type === 'retry' && during(event) && marked) marked.idempotent = false;
    },
  });
  return { fetch, why };
}

test('a resend waited out after a refusal does not go once the mark that made it safe is taken back: an earlier pass may have run it', async () => {
  // A POST marked idempotent (an MCP tool's idempotentHint) answered 503 twice opens the
  // circuit; the resend it refuses is waited out. During that wait the mark is taken back
  // (tools/list_changed made the tool destructive). The refusal proves only its own pass
  // unrun, not the 503s: the resend must not go. It went, judged on the refusal alone.
  await withServer(always({ status: 503 }), async (server) => {
    const { fetch, why } = markTakenBack(
      [
        retry({ attempts: 3, backoff: { initialMs: 10, factor: 1, maxMs: 10, jitter: 'none' } }),
        circuitBreaker({ consecutiveFailures: 2, open: { initialMs: 300, jitter: 'none' } }),
      ],
      // The wait for the circuit's retryAt (the 503s' waits are backoff steps).
      (event) => event.delaySource === 'breaker',
    );
    await assert.rejects(fetch(server.origin, { method: 'POST' }), CircuitOpenError);
    assert.equal(server.requests.length, 2);
    assert.deepEqual(why, ['unsafe-to-resend']);
  });
});

test('an answer whose resend a mark taken back during the wait stops comes back readable: its status and headers, not a body that throws', async () => {
  // A POST marked idempotent (an MCP tool's idempotentHint) answered 503; during the
  // backoff wait the mark is taken back (tools/list_changed), so retry() gives the 503
  // back. Its body was let go when the wait began (to free the connection): handed back
  // as it was, reading it threw 'Body is unusable' (Node), 'Body already used' (Bun),
  // 'Body already consumed' (Deno) where the SDK reads the failure's text.
  await withServer(
    always({ status: 503, headers: { 'x-request-id': 'req-1' }, body: '{"error":"overloaded"}' }),
    async (server) => {
      const { fetch, why } = markTakenBack([retry({ attempts: 3, backoff: fast })], () => true);
      const response = await fetch(server.origin, { method: 'POST', body: '{}' });
      assert.equal(response.status, 503);
      assert.equal(response.headers.get('x-request-id'), 'req-1');
      assert.equal(response.bodyUsed, false, 'the body handed back is unread');
      assert.equal(typeof (await response.text()), 'string', 'reading it does not throw');
      assert.equal(server.requests.length, 1);
      assert.deepEqual(why, ['unsafe-to-resend']);
    },
  );
});

test('a refusal whose retryAt is an Invalid Date is waited out for the backoff step, not resent at once', async () => {
  // retryAt is a plain field a user's layer may set; NaN as the wait made every resend go
  // with no wait at all (delayMs NaN in the retry events).
  await withServer(always({ status: 503 }), async (server) => {
    const refuse = refusingResends((call) => {
      const error = new CircuitOpenError({ key: call.key, retryAt: new Date(), reason: 'for the test' });
      (error as { retryAt: Date }).retryAt = new Date(Number.NaN);
      return error;
    });
    const delays: number[] = [];
    const fetch = createFetch({
      use: [retry({ attempts: 3, backoff: { initialMs: 20, factor: 1, maxMs: 20, jitter: 'none' } }), refuse],
      onEvent: (event) => {
        if (event.type === 'retry') delays.push(event.delayMs);
      },
    });
    await assert.rejects(fetch(server.origin), { code: 'CIRCUIT_OPEN' });
    assert.deepEqual(delays, [20, 20, 20]);
    assert.equal(server.requests.length, 1);
  });
});

/** retry()'s story in a call's events, one line each: attempt, retry and give-up events only. */
function retryStory(events: BreakwaterEvent[]): string[] {
  return events.flatMap((event) =>
    event.type === 'attempt'
      ? [`attempt ${event.attempt}`]
      : event.type === 'retry'
        ? [`retry ${event.attempt} ${event.delaySource} ${event.reason}`]
        : event.type === 'give-up'
          ? [`give-up ${event.attempt} ${event.why} ${event.reason}`]
          : [],
  );
}

test('the wait for a refused resend’s retryAt is a retry event with delaySource breaker: the other retry events match stats.retries', async () => {
  // 503, 503 (opens the circuit for 300 ms), the resend refused unsent, then 200. The
  // refusal's wait said 'server' (as if the server had asked for it): three retry events
  // for the two resends stats counts. Attempt numbers count passes, the refused one (3)
  // included: the chain needs a new number per pass, so the sends are 1, 2 and 4.
  await withServer(sequence({ status: 503 }, { status: 503 }, { status: 200 }), async (server) => {
    const events: BreakwaterEvent[] = [];
    const retrying = retry({ attempts: 3, backoff: { initialMs: 10, factor: 1, maxMs: 10, jitter: 'none' } });
    const fetch = createFetch({
      use: [retrying, circuitBreaker({ consecutiveFailures: 2, open: { initialMs: 300, jitter: 'none' } })],
      key: 'k',
      onEvent: (event) => events.push(event),
    });
    const response = await fetch(server.origin);
    await response.body?.cancel();
    assert.equal(response.status, 200);
    assert.deepEqual(retryStory(events), [
      'attempt 1',
      'retry 1 backoff HTTP 503',
      'attempt 2',
      'retry 2 backoff HTTP 503',
      'retry 3 breaker CIRCUIT_OPEN',
      'attempt 4',
    ]);
    const retries = events.flatMap((event) => (event.type === 'retry' ? [event] : []));
    const wait = retries[2]?.delayMs ?? 0;
    assert.ok(wait > 10 && wait <= 300, `waited for retryAt: ${wait} ms`);
    const resends = retries.filter((event) => event.delaySource !== 'breaker').length;
    assert.equal(resends, retrying.stats('k')?.retries);
    assert.equal(server.requests.length, 3);
  });
});

test('a refusal whose retryAt has passed is waited out for the backoff step and still says breaker, a GateClosedError too', async () => {
  // The wait is the backoff step, but the pass was refused unsent, not sent and failed:
  // it said 'backoff', as a resend that reached the server. Refusals capped at attempts.
  await withServer(always({ status: 503 }), async (server) => {
    const refuse = refusingResends((call) => new GateClosedError({ key: call.key, retryAt: new Date() }));
    const events: BreakwaterEvent[] = [];
    const retrying = retry({ attempts: 3, backoff: { initialMs: 20, factor: 1, maxMs: 20, jitter: 'none' } });
    const fetch = createFetch({ use: [retrying, refuse], key: 'k', onEvent: (event) => events.push(event) });
    await assert.rejects(fetch(server.origin), GateClosedError);
    assert.deepEqual(retryStory(events), [
      'attempt 1',
      'retry 1 backoff HTTP 503',
      'retry 2 breaker GATE_CLOSED',
      'retry 3 breaker GATE_CLOSED',
      'give-up 4 attempts GATE_CLOSED',
    ]);
    assert.deepEqual(
      events.flatMap((event) => (event.type === 'retry' ? [event.delayMs] : [])),
      [20, 20, 20],
    );
    assert.equal(retrying.stats('k')?.retries, 0);
    assert.equal(server.requests.length, 1);
  });
});

test('a refused resend whose retryAt is too far gives up retry-after-too-long on the refused pass, reason CIRCUIT_OPEN', async () => {
  // Pins what the give-up says: the pass refused unsent (2, which no attempt event has),
  // the refusal as reason, and no resend counted; the one retry event announced it.
  await withServer(always({ status: 503 }), async (server) => {
    const events: BreakwaterEvent[] = [];
    const retrying = retry({ backoff: fast, maxRetryAfterMs: 100 });
    const fetch = createFetch({
      use: [
        retrying,
        circuitBreaker({ consecutiveFailures: 1, open: { initialMs: 10_000, jitter: 'none' } }),
      ],
      key: 'k',
      onEvent: (event) => events.push(event),
    });
    await assert.rejects(fetch(server.origin), CircuitOpenError);
    assert.deepEqual(retryStory(events), [
      'attempt 1',
      'retry 1 backoff HTTP 503',
      'give-up 2 retry-after-too-long CIRCUIT_OPEN',
    ]);
    assert.equal(retrying.stats('k')?.retries, 0);
    assert.equal(server.requests.length, 1);
  });
});

test('retry’s resend answered 401, whose auth() resend an open circuit refuses, then waited out: retry events other than breaker match stats.retries', async () => {
  // /x: 503, then 401 (auth() refreshes; the refresh's two 503s open the circuit for
  // 100 ms, so auth()'s resend is refused unsent), then 200 after retry waits the circuit
  // out. Retry's resends 2 and 4 both reached the server (stats.retries 2); the wait before
  // 4 said 'breaker', which announces a refused resend of retry's own again: one event
  // for two resends. The refused send was auth()'s, so 4 is a resend of its own.
  let calls = 0;
  await withServer(
    (req) => (req.url === '/down' || ++calls === 1 ? { status: 503 } : calls === 2 ? { status: 401 } : {}),
    async (server) => {
      const policy = definePolicy({
        name: 'k',
        retry: { backoff: fast },
        breaker: { consecutiveFailures: 2, open: { initialMs: 100, jitter: 'none' } },
      });
      const events: BreakwaterEvent[] = [];
      const fetch: FetchLike = policy.fetch(undefined, {
        onEvent: (event) => events.push(event),
        auth: {
          token: 'old-token-value',
          refresh: async () => {
            for (let i = 0; i < 2; i++)
              await (await fetch(`${server.origin}/down`, { method: 'POST' })).text();
            return 'new-token-value';
          },
        },
      });
      const response = await fetch(`${server.origin}/x`);
      await response.body?.cancel();
      assert.equal(response.status, 200);
      assert.deepEqual(
        server.requests.map((r) => r.url),
        ['/x', '/x', '/down', '/down', '/x'],
      );
      const retries = events.flatMap((event) => (event.type === 'retry' ? [event] : []));
      assert.deepEqual(
        retries.map((event) => `${event.attempt} ${event.reason}`),
        ['1 HTTP 503', '3 CIRCUIT_OPEN'],
      );
      const resends = retries.filter((event) => event.delaySource !== 'breaker').length;
      assert.equal(policy.stats('k').retry?.retries, 2);
      assert.equal(resends, 2, 'one retry event other than breaker per resend made');
    },
  );
});

test('the waits for one call’s refused resends together stay within maxRetryAfterMs: a circuit that keeps reopening ends the call', async () => {
  // A circuit reopened by other callers' probes refuses every resend for 40 ms more (a
  // stand-in layer, as above). Each wait is within maxRetryAfterMs: 100 on its own, so the
  // call waited 4 × 40 ms, and with attempts: 5 and maxRetryAfterMs: 60_000, 4 minutes.
  // Now the third wait would take the call's waits past 100 ms: it fails at once.
  await withServer(always({ status: 503 }), async (server) => {
    const refuse = refusingResends(
      (call) =>
        new CircuitOpenError({ key: call.key, retryAt: new Date(Date.now() + 40), reason: 'for the test' }),
    );
    const events: BreakwaterEvent[] = [];
    const fetch = createFetch({
      use: [retry({ attempts: 5, backoff: fast, maxRetryAfterMs: 100 }), refuse],
      onEvent: (event) => events.push(event),
    });
    await assert.rejects(fetch(server.origin), CircuitOpenError);
    const waits = events.flatMap((event) =>
      event.type === 'retry' && event.delaySource === 'breaker' ? [event.delayMs] : [],
    );
    assert.equal(waits.length, 2, `waits: ${waits}`);
    assert.ok(waits.reduce((sum, ms) => sum + ms, 0) <= 100, `waits: ${waits}`);
    assert.deepEqual(
      events.flatMap((event) => (event.type === 'give-up' ? [`${event.why} ${event.reason}`] : [])),
      ['retry-after-too-long CIRCUIT_OPEN'],
    );
    assert.equal(refuse.passes(), 4, 'one send, two refusals waited out, the third failed at once');
    assert.equal(server.requests.length, 1);
  });
});

/** A POST answered 303 See Other to /orders/1, whose GET is answered 429 (10 ms). */
const seeOtherThen429: Handler = (req) =>
  req.method === 'POST'
    ? { status: 303, headers: { location: '/orders/1' } }
    : { status: 429, headers: { 'retry-after-ms': '10' } };

/**
 * POSTs an order through `fetch` to {@link seeOtherThen429}'s `server`: the 429 comes
 * back, and the server got the POST and the GET after its 303 only, nothing resent.
 */
async function postOrderOnce(fetch: FetchLike, server: TestServer): Promise<Response> {
  const response = await fetch(`${server.origin}/orders`, { method: 'POST', body: 'order' });
  await response.body?.cancel();
  assert.equal(response.status, 429);
  assert.deepEqual(
    server.requests.map((r) => `${r.method} ${r.url}`),
    ['POST /orders', 'GET /orders/1'],
  );
  return response;
}

/** A middleware of the user's own that rebuilds each answer: `new Response()` says `redirected: false`. */
const rebuild: Middleware = async function rebuild(call, next) {
  const response = await next(call);
  return new Response(response.body, response);
};

test('a POST whose redirect (303 See Other) led to a 429 is not resent: the POST ran, the 429 answered the GET', async () => {
  // fetch follows the 303 itself, so retry sees only the last answer: a 429, which says
  // its own request did not run. That request was the GET; the POST had run, and resending
  // it placed the order twice. Only the last answer is seen, so any redirect counts (as
  // in auth()).
  await withServer(seeOtherThen429, async (server) => {
    const why: string[] = [];
    const fetch = createFetch({
      use: [retry({ backoff: fast })],
      onEvent: (event) => {
        if (event.type === 'give-up') why.push(event.why);
      },
    });
    await postOrderOnce(fetch, server);
    assert.deepEqual(why, ['unsafe-to-resend']);
  });
});

for (const resend of ['safe', 'never'] as const) {
  test(`a POST whose 303 led to a 429 is not resent (resend: '${resend}') when a middleware between retry() and the fetch rebuilds the answer, which then says redirected: false`, async () => {
    // A logger or body wrapper of the user's own below retry(): `new Response(body, response)`
    // keeps status and headers, not `redirected`. retry() read the redirect off the answer
    // only, so it took the 429 for the POST's own and placed the order again.
    await withServer(seeOtherThen429, async (server) => {
      const why: string[] = [];
      const fetch = createFetch({
        use: [retry({ backoff: fast, resend }), rebuild],
        onEvent: (event) => {
          if (event.type === 'give-up') why.push(event.why);
        },
      });
      const response = await postOrderOnce(fetch, server);
      assert.equal(response.redirected, false, 'the answer as the middleware rebuilt it');
      assert.deepEqual(why, ['unsafe-to-resend']);
    });
  });
}

test('a GET redirected to a 429 is still resent: repeating it is harmless', async () => {
  await withServer(
    (req, index) =>
      req.url === '/a'
        ? { status: 302, headers: { location: '/b' } }
        : index === 1
          ? { status: 429, headers: { 'retry-after-ms': '10' } }
          : { body: 'ok' },
    async (server) => {
      const fetch = createFetch({ use: [retry({ backoff: fast })] });
      const response = await fetch(`${server.origin}/a`);
      assert.equal(await response.text(), 'ok');
      assert.equal(server.requests.length, 4);
    },
  );
});

test('a refused resend whose retryAt is short is waited out even when the backoff step is past maxRetryAfterMs: the cap is on the breaker’s say-so, not retry’s own schedule', async () => {
  // maxRetryAfterMs caps waits on a server's or breaker's say-so; retry's own backoff has
  // its own cap (backoff.maxMs). A circuit refusing for 5 ms, met when the backoff step is
  // 40 ms, was given up on at once (its wait counted as 40 ms against a cap of 30), where
  // a plain 503 with no delay waits those 40 ms and resends.
  await withServer(sequence({ status: 503 }, { body: 'ok' }), async (server) => {
    const refuse = refusingResends(
      (call) =>
        new CircuitOpenError({ key: call.key, retryAt: new Date(Date.now() + 5), reason: 'for the test' }),
      (pass) => pass === 2,
    );
    const events: BreakwaterEvent[] = [];
    const fetch = createFetch({
      use: [
        retry({
          attempts: 3,
          backoff: { initialMs: 40, factor: 1, maxMs: 40, jitter: 'none' },
          maxRetryAfterMs: 30,
        }),
        refuse,
      ],
      onEvent: (event) => events.push(event),
    });
    const response = await fetch(server.origin);
    assert.equal(await response.text(), 'ok');
    assert.equal(refuse.passes(), 3, 'one send, one refusal waited out, one resend');
    assert.equal(server.requests.length, 2);
    assert.deepEqual(
      events.flatMap((event) => (event.type === 'give-up' ? [event.why] : [])),
      [],
      'no give-up',
    );
  });
});

test('a POST answered 303 See Other, whose GET (auth() following it, for a token in x-api-key) meets a refused connection, is not resent: the POST ran', async () => {
  // auth() with a header of its own follows redirects itself, each hop a call of its own:
  // the hop's refused connection reads as "never sent", and retry, which never saw the 303,
  // resent the POST (placing the order again) on that hop's say-so.
  const gone = await closedPort();
  await withServer(
    always({ status: 303, headers: { location: `http://127.0.0.1:${gone}/orders/1` } }),
    async (server) => {
      const why: string[] = [];
      const fetch = createFetch({
        use: [retry({ backoff: fast }), auth({ token: 'k', header: 'x-api-key', scheme: '' })],
        onEvent: (event) => {
          if (event.type === 'give-up') why.push(event.why);
        },
      });
      const error = await fetch(`${server.origin}/orders`, { method: 'POST', body: 'order' }).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(error instanceof NetworkError, `the hop's refused connection, not ${String(error)}`);
      assert.equal(server.requests.length, 1, 'the POST went once');
      assert.deepEqual(why, ['unsafe-to-resend']);
    },
  );
});

test('a POST answered 303 See Other whose GET (auth() following it) met a 429 is not resent when a middleware between retry() and auth() rebuilds the answer', async () => {
  // auth() marks the answer it followed to as redirected; `new Response(body, response)`
  // above it says false, and the chain's end saw only the 303 (redirect: 'manual').
  await withServer(seeOtherThen429, async (server) => {
    const fetch = createFetch({
      use: [retry({ backoff: fast }), rebuild, auth({ token: 'k', header: 'x-api-key', scheme: '' })],
    });
    await postOrderOnce(fetch, server);
  });
});
