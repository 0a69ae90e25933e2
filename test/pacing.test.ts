import assert from 'node:assert/strict';
import { test } from 'node:test';
import { auth } from '../src/auth.ts';
import { type CircuitBreaker, type CircuitBreakerOptions, circuitBreaker } from '../src/breaker.ts';
import type { FetchLike, Middleware } from '../src/call.ts';
import { captureStatus } from '../src/capture.ts';
import { createFetch } from '../src/chain.ts';
import { CircuitOpenError, HttpStatusError, NetworkError, TimeoutError } from '../src/errors.ts';
import type { BreakwaterEvent, PacedEvent } from '../src/events.ts';
import { definePolicy } from '../src/policy.ts';
import { retry } from '../src/retry.ts';
import { throwOnStatus } from '../src/status.ts';
import { timeout } from '../src/timeout.ts';
import { countedSignal } from './helpers/counted-signal.ts';
import { assertNoToken, refusedAfter, withReasonPhrase } from './helpers/reason-phrase.ts';
import { refusedRetryAt } from './helpers/refused.ts';
import {
  always,
  type Behaviour,
  type Handler,
  sequence,
  type TestServer,
  withServer,
} from './helpers/server.ts';
import { withTrickledAnswer } from './helpers/trickle.ts';

/** A short, exact schedule for the pauses a 429 without a delay imposes. */
const OPEN = { initialMs: 100, factor: 2, maxMs: 10_000, jitter: 'none' } as const;

/** Sends one call and consumes the body; resolves to the status. */
async function send(fetch: FetchLike, url: string, init?: RequestInit): Promise<number> {
  const res = await fetch(url, init);
  await res.text();
  return res.status;
}

/** 2026-11-29T17:03:00.000Z: a fixed start for the hand-moved clock. */
const START = Date.UTC(2026, 10, 29, 17, 3, 0);

/** A breaker (on {@link OPEN}, and `options`) on key `model`, and the events it reported. */
function pacedClient(options: CircuitBreakerOptions = {}): {
  fetch: FetchLike;
  events: BreakwaterEvent[];
  breaker: CircuitBreaker;
} {
  const events: BreakwaterEvent[] = [];
  const breaker = circuitBreaker({ open: OPEN, ...options });
  const fetch = createFetch({ use: [breaker], key: 'model', onEvent: (e) => events.push(e) });
  return { fetch, events, breaker };
}

/** A {@link pacedClient} on a hand-moved clock, starting at {@link START}. */
function clockedClient(options: CircuitBreakerOptions = {}) {
  const clock = { t: START };
  return { clock, ...pacedClient({ now: () => clock.t, ...options }) };
}

/**
 * Through a fresh paced client: one call whose answer (`status`) pauses the key, then
 * `waiters` calls at once, every one of which must end in a 200 (nobody earned a 429
 * or a 503). Resolves to the client's events.
 */
async function pausedThenWaiters(url: string, status: number, waiters: number): Promise<BreakwaterEvent[]> {
  const { fetch, events } = pacedClient();
  assert.equal(await send(fetch, url), status);
  assert.deepEqual(await concurrently(fetch, url, waiters), Array(waiters).fill(200));
  return events;
}

/** Sends `n` calls at once; resolves to their statuses, in call order. */
function concurrently(fetch: FetchLike, url: string, n: number): Promise<number[]> {
  return Promise.all(Array.from({ length: n }, () => send(fetch, url)));
}

/**
 * `callers` closed-loop callers, each sending its next of `calls` calls when its last one
 * is answered; resolves to every status, in the order they came.
 */
async function closedLoop(fetch: FetchLike, url: string, callers: number, calls: number): Promise<number[]> {
  const statuses: number[] = [];
  await Promise.all(
    Array.from({ length: callers }, async () => {
      for (let i = 0; i < calls; i++) statuses.push(await send(fetch, url));
    }),
  );
  return statuses;
}

const tooMany = (delayMs: number) => ({ status: 429, headers: { 'retry-after-ms': String(delayMs) } });
const unavailable = (delayMs: number) => ({ status: 503, headers: { 'retry-after-ms': String(delayMs) } });

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * A handler that stamps each request's arrival at the server (`arrivals[n]`, epoch
 * ms, in the order the handler sees them) and answers the n-th with `answer(n)`.
 * It counts for itself: the helper's index is read before the body, so concurrent
 * requests may share one. The server runs in this process, so its clock is the test's.
 */
function stamped(answer: (index: number) => Behaviour | Promise<Behaviour>): {
  arrivals: number[];
  handler: Handler;
} {
  const arrivals: number[] = [];
  const handler: Handler = () => answer(arrivals.push(Date.now()) - 1);
  return { arrivals, handler };
}

/** The arrival of request `index`, which must have arrived. */
function at(arrivals: number[], index: number): number {
  const t = arrivals[index];
  assert.ok(t !== undefined, `request ${index} arrived`);
  return t;
}

/** Sets a deadline 100 ms out, as `timeout({ totalMs })` would, before the breaker sees the call. */
const deadline: Middleware = async function deadline(call, next) {
  call.deadline = Date.now() + 100;
  return next(call);
};

test('one 429 with retry-after-ms: 250 holds all 20 concurrent callers on the key, then lets them all through', async () => {
  await withServer(sequence(tooMany(250), { status: 200, body: 'ok' }), async (server) => {
    const { fetch, events } = pacedClient();
    const started = Date.now();
    assert.equal(await send(fetch, server.origin), 429);
    const elapsed = await Promise.all(
      Array.from({ length: 20 }, async () => {
        assert.equal(await send(fetch, server.origin), 200);
        return Date.now() - started;
      }),
    );
    assert.equal(server.requests.length, 21, 'every caller reached the server after the pause');
    for (const ms of elapsed) {
      assert.ok(ms >= 250, `waited ${ms} ms`);
      // Released by the pace probe's answer, not by a timer of their own: a waiter's next
      // one is its maxRetryAfterMs (60 s), which a bound this far below tells apart however
      // loaded the machine. That there was exactly one pause is checked below, by its events;
      // that the release is at once, in 'when a pause ends, exactly one of 20 waiters ...'.
      assert.ok(ms < 10_000, `waited ${ms} ms`);
    }
    const paced = events.filter((e): e is PacedEvent => e.type === 'paced');
    assert.equal(paced.filter((e) => e.phase === 'start').length, 1);
    assert.equal(paced.find((e) => e.phase === 'start')?.delayMs, 250);
    assert.equal(paced.filter((e) => e.phase === 'wait').length, 20);
  });
});

test('a paused key does not hold another key', async () => {
  await withServer(always(tooMany(1000)), async (paused) => {
    await withServer(always({ status: 200 }), async (other) => {
      const breaker = circuitBreaker({ open: OPEN });
      const fetch = createFetch({ use: [breaker] });
      assert.equal(await send(fetch, paused.origin), 429);
      assert.notEqual(breaker.stats(paused.origin)?.pausedUntil, undefined);
      const started = Date.now();
      assert.equal(await send(fetch, other.origin), 200);
      assert.ok(Date.now() - started < 200, 'the other server answered at once');
      assert.equal(breaker.stats(other.origin)?.pausedUntil, undefined);
    });
  });
});

test('a pause the server wants longer than maxRetryAfterMs fails the next call fast', async () => {
  await withServer(always(tooMany(5000)), async (server) => {
    const breaker = circuitBreaker({ open: OPEN, maxRetryAfterMs: 200 });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    assert.equal(await send(fetch, server.origin), 429);
    const pausedUntil = breaker.stats('model')?.pausedUntil;
    const started = Date.now();
    await assert.rejects(fetch(server.origin), (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
      assert.equal(e.key, 'model');
      assert.equal(e.retryAt.getTime(), pausedUntil?.getTime(), 'retryAt is the end of the (capped) pause');
      assert.match(
        e.message,
        /^GET http:\/\/127\.0\.0\.1:\d+\/ \(server "model"\) not sent, paced: the server asked to wait \(HTTP 429 Too Many Requests\): 5000 ms is longer than the 200 ms allowed; next attempt at /,
      );
      assert.ok(e.cause instanceof HttpStatusError, 'e.cause instanceof HttpStatusError');
      assert.equal(e.cause.status, 429);
      return true;
    });
    assert.ok(Date.now() - started < 50, 'failed at once');
    assert.equal(server.requests.length, 1);
  });
});

test('a pause longer than the call’s remaining deadline fails the call fast', async () => {
  await withServer(always(tooMany(500)), async (server) => {
    const fetch = createFetch({ use: [deadline, circuitBreaker({ open: OPEN })], key: 'model' });
    assert.equal(await send(fetch, server.origin), 429);
    const started = Date.now();
    await assert.rejects(fetch(server.origin), (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
      assert.match(
        e.message,
        /not sent, paced: the server asked to wait \(HTTP 429 Too Many Requests\), past this call's deadline;/,
      );
      assert.ok(e.retryAt.getTime() - Date.now() > 300, 'e.retryAt.getTime() - Date.now() > 300');
      return true;
    });
    assert.ok(Date.now() - started < 50, 'failed at once');
    assert.equal(server.requests.length, 1);
  });
});

test('an abort during a pause wait rejects within 50 ms with the caller’s reason', async () => {
  await withServer(always(tooMany(1000)), async (server) => {
    const fetch = createFetch({ use: [circuitBreaker({ open: OPEN })] });
    assert.equal(await send(fetch, server.origin), 429);
    const controller = new AbortController();
    const reason = new Error('the user closed the chat');
    const waiting = fetch(server.origin, { signal: controller.signal });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const abortedAt = Date.now();
    controller.abort(reason);
    await assert.rejects(waiting, (e: unknown) => e === reason);
    assert.ok(Date.now() - abortedAt < 50, `rejected ${Date.now() - abortedAt} ms after the abort`);
    assert.equal(server.requests.length, 1, 'nothing was sent');
  });
});

test('a 429 without a delay pauses the key for the next step of the open schedule', async () => {
  await withServer(sequence({ status: 429 }, { status: 429 }, { status: 200 }), async (server) => {
    const events: BreakwaterEvent[] = [];
    const fetch = createFetch({ use: [circuitBreaker({ open: OPEN })], onEvent: (e) => events.push(e) });
    const started = Date.now();
    assert.equal(await send(fetch, server.origin), 429);
    assert.equal(await send(fetch, server.origin), 429, 'sent after waiting 100 ms');
    assert.equal(await send(fetch, server.origin), 200, 'sent after waiting 200 ms more');
    assert.ok(Date.now() - started >= 300, 'Date.now() - started >= 300');
    const starts = events.filter((e): e is PacedEvent => e.type === 'paced' && e.phase === 'start');
    assert.deepEqual(
      starts.map((e) => e.delayMs),
      [100, 200],
    );
  });
});

test('8 concurrent calls that all meet a 429 without a delay pause the key for the first step, not the eighth', async () => {
  // They were all sent before the first 429 paused the key: one refusal, told 8 times.
  // As the open schedule ignores failures of calls sent before it opened, the pause
  // schedule steps up only for a 429 that meets an unpaused key (the pace probe's, say).
  await withServer(always({ status: 429 }), async (server) => {
    const { clock, events, breaker, fetch } = clockedClient();
    assert.deepEqual(await concurrently(fetch, server.origin, 8), Array(8).fill(429));
    assert.equal(breaker.stats('model')?.pausedUntil?.getTime(), clock.t + 100);
    const starts = events.filter((e): e is PacedEvent => e.type === 'paced' && e.phase === 'start');
    assert.deepEqual(
      starts.map((e) => e.delayMs),
      [100],
    );
    clock.t += 100;
    assert.equal(await send(fetch, server.origin), 429, 'the pace probe meets another 429');
    assert.equal(breaker.stats('model')?.pausedUntil?.getTime(), clock.t + 200, 'the next step');
  });
});

test('429s without a delay of calls sent before the pause began step nothing even when they arrive after it ended; the pace probe’s steps up', async () => {
  // A loaded server answers a burst slowly: its 429s arrive spread over more than the
  // first step. Each is still the refusal the first one told (sent before any pause),
  // so the schedule steps up once, then again only for the pace probe's 429.
  const answers: Array<(behaviour: Behaviour) => void> = [];
  const handler: Handler = () => new Promise<Behaviour>((resolve) => answers.push(resolve));
  await withServer(handler, async (server) => {
    const { clock, events, breaker, fetch } = clockedClient();
    let settled = 0;
    const burst = Array.from({ length: 4 }, () => send(fetch, server.origin).finally(() => settled++));
    while (answers.length < 4) await delay(2);
    for (const [i, answer] of answers.splice(0).entries()) {
      answer({ status: 429 });
      while (settled === i) await delay(2);
      clock.t += 1_000; // the pause (100 ms, if this 429 set one) has ended
    }
    assert.deepEqual(await Promise.all(burst), Array(4).fill(429));
    const starts = () =>
      events.filter((e): e is PacedEvent => e.type === 'paced' && e.phase === 'start').map((e) => e.delayMs);
    assert.deepEqual(starts(), [100], 'one refusal, one step');
    const probe = send(fetch, server.origin);
    while (answers.length < 1) await delay(2);
    answers[0]?.({ status: 429 });
    assert.equal(await probe, 429);
    assert.deepEqual(starts(), [100, 200], 'the pace probe’s 429 takes the next step');
    assert.equal(breaker.stats('model')?.pausedUntil?.getTime(), clock.t + 200);
  });
});

test('a 429 or 503 to a call sent before a pause began, answered after the pace probe’s 200 ended that pause, pauses nothing: the probe’s answer is newer', async () => {
  // Two calls are on the wire when a third's 429 pauses the key; the pause ends, its pace
  // probe is answered 200 and releases the key. Then the two old calls are answered: a
  // refusal from before that pause, which the probe's 200 has since superseded. Before,
  // each started a new pause (or stepped the schedule up), holding every caller again.
  for (const stale of [tooMany(1_000), { status: 429 }, unavailable(1_000)]) {
    const answers: Array<(behaviour: Behaviour) => void> = [];
    const handler: Handler = (_req, index) =>
      index === 0
        ? new Promise<Behaviour>((resolve) => answers.push(resolve))
        : index === 1
          ? tooMany(50)
          : {};
    await withServer(handler, async (server) => {
      const { fetch, events, breaker } = pacedClient();
      const early = send(fetch, server.origin);
      while (answers.length < 1) await delay(2);
      assert.equal(await send(fetch, server.origin), 429, 'pauses the key');
      assert.equal(await send(fetch, server.origin), 200, 'the pace probe');
      answers[0]?.(stale);
      assert.equal(await early, stale.status);
      assert.equal(breaker.stats('model')?.pausedUntil, undefined, `${JSON.stringify(stale)} paused the key`);
      const starts = events.filter((e) => e.type === 'paced' && e.phase === 'start');
      assert.equal(starts.length, 1, 'one pause, the 429’s');
      assert.equal(await send(fetch, server.origin), 200);
    });
  }
});

test('429s never open the circuit', async () => {
  await withServer(always(tooMany(0)), async (server) => {
    const breaker = circuitBreaker({ open: OPEN, consecutiveFailures: 2, minimumThroughput: 2 });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    for (let i = 0; i < 10; i++) assert.equal(await send(fetch, server.origin), 429);
    const stats = breaker.stats('model');
    assert.equal(stats?.state, 'closed');
    assert.equal(stats?.consecutiveFailures, 0);
    assert.equal(stats?.windowFailures, 0);
    assert.equal(server.requests.length, 10);
  });
});

test('a 503 with a delay both pauses the key and counts as a failure', async () => {
  const unavailable = { status: 503, headers: { 'retry-after-ms': '300' } };
  await withServer(sequence(unavailable, { status: 200 }), async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    const started = Date.now();
    assert.equal(await send(fetch, server.origin), 503);
    const stats = breaker.stats('model');
    assert.equal(stats?.state, 'closed');
    assert.equal(stats?.consecutiveFailures, 1);
    assert.equal(stats?.windowFailures, 1);
    assert.notEqual(stats?.pausedUntil, undefined);
    assert.equal(await send(fetch, server.origin), 200);
    assert.ok(Date.now() - started >= 300, 'the second call waited out the pause');
    assert.equal(breaker.stats('model')?.consecutiveFailures, 0);
  });
});

test('a 529 with a delay both pauses the key and counts as a failure, as a 503 does', async () => {
  // Anthropic's "overloaded": retryable as a 503 is (DESIGN §5), and its Retry-After is the
  // same request for quiet. Before, only a 503 paced: a 529's waiters were all sent into it.
  const overloaded = { status: 529, headers: { 'retry-after-ms': '300' } };
  await withServer(sequence(overloaded, { status: 200 }), async (server) => {
    const { fetch, events, breaker } = pacedClient();
    const started = Date.now();
    assert.equal(await send(fetch, server.origin), 529);
    const stats = breaker.stats('model');
    assert.equal(stats?.consecutiveFailures, 1);
    assert.notEqual(stats?.pausedUntil, undefined, 'the key is paused');
    assert.equal(await send(fetch, server.origin), 200);
    assert.ok(Date.now() - started >= 300, 'the second call waited out the pause');
    const starts = events.filter((e): e is PacedEvent => e.type === 'paced' && e.phase === 'start');
    assert.deepEqual(
      starts.map((e) => e.delayMs),
      [300],
    );
  });
});

/**
 * A handler that holds the first `n` requests until all `n` have arrived, then answers
 * each with `shed`; every later request gets a 200. A server that starts shedding with
 * `n` calls on the wire.
 */
function shedsInFlight(n: number, shed: Behaviour): Handler {
  const held: Array<() => void> = [];
  return (_req, index) => {
    if (index >= n) return { status: 200 };
    return new Promise<Behaviour>((resolve) => {
      held.push(() => resolve(shed));
      if (held.length === n) for (const go of held) go();
    });
  };
}

test('a shedding server’s 503s with a delay to 32 calls already in flight count as one failure: the circuit stays closed, and later calls wait the pause out', async () => {
  // The demo's storm (e196b1e): 32 calls on the wire when the server starts shedding. The
  // first 503 read pauses the key; the other 31 were sent before that pause began, the same
  // refusal told again. Each counted, they made 32 failures in a row (and 32 of 32 in the
  // window) and opened the circuit: the calls that should have waited failed fast.
  await withServer(shedsInFlight(32, unavailable(200)), async (server) => {
    const { fetch, events, breaker } = pacedClient();
    assert.deepEqual(await concurrently(fetch, server.origin, 32), Array(32).fill(503));
    const stats = breaker.stats('model');
    assert.equal(stats?.state, 'closed');
    assert.equal(stats?.consecutiveFailures, 1, 'the storm counts once');
    assert.equal(stats?.windowFailures, 1);
    assert.deepEqual(await concurrently(fetch, server.origin, 32), Array(32).fill(200), 'none failed fast');
    assert.deepEqual(
      events.filter((e) => e.type === 'breaker'),
      [],
    );
  });
});

test('a server that keeps shedding with a delay still opens the circuit: the 503 of each call sent after a pause began counts', async () => {
  // Only answers to calls sent before the key's latest pause began count for nothing: each
  // pace probe's 503 is a new failure, so 8 in flight and then 4 probes make 5 in a row.
  await withServer(always(unavailable(20)), async (server) => {
    const { fetch, breaker } = pacedClient();
    assert.deepEqual(await concurrently(fetch, server.origin, 8), Array(8).fill(503));
    for (let failures = 2; failures <= 5; failures++) {
      assert.equal(await send(fetch, server.origin), 503);
      assert.equal(breaker.stats('model')?.consecutiveFailures, failures);
    }
    assert.equal(breaker.stats('model')?.state, 'open');
    await assert.rejects(send(fetch, server.origin), CircuitOpenError);
    assert.equal(server.requests.length, 12);
  });
});

test('when a pause ends, exactly one of 20 waiters reaches the server first, and the others only after its response: all at once when it answered slower than the pause lasted', async () => {
  let answeredAt = 0;
  // The other 19 are held at the server until all of them are there: released together,
  // they all are; released one by one, the first is answered only after 5 s (time paid only
  // when the test fails; no machine's load delays 19 concurrent sends that long).
  let held = 0;
  let heldWhenAnswered = 0;
  let answerHeld: () => void = () => {};
  const allHeld = new Promise<void>((resolve) => {
    answerHeld = resolve;
  });
  let fallback: ReturnType<typeof setTimeout> | undefined;
  const { arrivals, handler } = stamped(async (index) => {
    if (index === 0) return unavailable(200);
    if (index === 1) {
      // Slower than the 200 ms pause: a slow server, not one short of quota.
      await delay(250);
      answeredAt = Date.now();
      return { status: 200 };
    }
    if (++held === 1) fallback = setTimeout(answerHeld, 5_000);
    if (held === 19) {
      clearTimeout(fallback);
      answerHeld();
    }
    await allHeld;
    heldWhenAnswered ||= held;
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const events = await pausedThenWaiters(server.origin, 503, 20);
    assert.equal(server.requests.length, 21);
    const probeAt = at(arrivals, 1);
    assert.ok(
      probeAt - at(arrivals, 0) >= 190,
      `the probe went ${probeAt - at(arrivals, 0)} ms after the 503`,
    );
    assert.ok(answeredAt - probeAt >= 249, 'the probe took 250 ms to answer');
    const rest = arrivals.slice(2);
    assert.equal(rest.length, 19);
    for (const t of rest) {
      assert.ok(t >= answeredAt, `a request arrived ${answeredAt - t} ms before the probe was answered`);
    }
    assert.equal(heldWhenAnswered, 19, 'the other 19 were released together: all in flight at once');
    const paced = events.filter((e): e is PacedEvent => e.type === 'paced');
    assert.equal(paced.filter((e) => e.phase === 'start').length, 1);
    assert.equal(paced.filter((e) => e.phase === 'wait').length, 20);
  });
});

test('a pace probe answered with another 503 and a delay sends nobody else, and every waiter waits the new pause out', async () => {
  let firstAnsweredAt = 0;
  let secondAnsweredAt = 0;
  const { arrivals, handler } = stamped(async (index) => {
    if (index === 0) return unavailable(150);
    if (index === 1) {
      await delay(50);
      firstAnsweredAt = Date.now();
      return unavailable(150);
    }
    if (index === 2) {
      await delay(50);
      secondAnsweredAt = Date.now();
    }
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const events: BreakwaterEvent[] = [];
    const breaker = circuitBreaker({ open: OPEN });
    const fetch = createFetch({ use: [breaker], key: 'model', onEvent: (e) => events.push(e) });
    assert.equal(await send(fetch, server.origin), 503);
    const statuses = await concurrently(fetch, server.origin, 10);
    assert.deepEqual(
      [...statuses].sort((a, b) => a - b),
      [...Array(9).fill(200), 503],
      'the first probe got the 503, everyone else a 200',
    );
    assert.equal(server.requests.length, 11, 'one 503, two probes, then the other 8');
    const secondProbeAt = at(arrivals, 2);
    assert.ok(
      secondProbeAt - firstAnsweredAt >= 140,
      `the next request went ${secondProbeAt - firstAnsweredAt} ms after the probe's 503, not after the new pause`,
    );
    for (const t of arrivals.slice(3)) {
      assert.ok(
        t >= secondAnsweredAt,
        `a request arrived ${secondAnsweredAt - t} ms before the second probe's answer`,
      );
    }
    const starts = events.filter((e): e is PacedEvent => e.type === 'paced' && e.phase === 'start');
    assert.deepEqual(
      starts.map((e) => e.delayMs),
      [150, 150],
    );
    assert.equal(breaker.stats('model')?.state, 'closed', 'two 503s do not open the circuit');
  });
});

test('a pace probe that meets a network error hands the probe to the next waiter', async () => {
  let failedAt = 0;
  let secondAnsweredAt = 0;
  const { arrivals, handler } = stamped(async (index) => {
    // `connection: close`, so the probe gets a fresh connection: Deno and Bun silently
    // resend a request whose reused keep-alive connection closed under it.
    if (index === 0) return { status: 503, headers: { 'retry-after-ms': '100', connection: 'close' } };
    if (index === 1) {
      await delay(50);
      failedAt = Date.now();
      return { close: 'no-response' };
    }
    if (index === 2) {
      await delay(50);
      secondAnsweredAt = Date.now();
    }
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const { fetch } = pacedClient();
    assert.equal(await send(fetch, server.origin), 503);
    const outcomes = await Promise.allSettled(Array.from({ length: 6 }, () => send(fetch, server.origin)));
    const failed = outcomes.filter((o) => o.status === 'rejected');
    assert.equal(failed.length, 1, 'only the first probe failed');
    assert.ok(failed[0]?.reason instanceof NetworkError, 'failed[0]?.reason instanceof NetworkError');
    assert.deepEqual(
      outcomes.filter((o) => o.status === 'fulfilled').map((o) => o.value),
      Array(5).fill(200),
    );
    assert.equal(server.requests.length, 7);
    assert.ok(at(arrivals, 2) >= failedAt, 'the second probe went after the first one failed');
    for (const t of arrivals.slice(3)) {
      assert.ok(
        t >= secondAnsweredAt,
        `a request arrived ${secondAnsweredAt - t} ms before the second probe's answer`,
      );
    }
  });
});

/** What {@link withHeldProbe} hands its test: the client, its server, and the probe in flight. */
type HeldProbe = ReturnType<typeof clockedClient> & {
  server: TestServer;
  /** The pace probe's status, once answered. */
  probe: Promise<number>;
  /** Answers the probe; every later call gets a 200. */
  answer: (behaviour: Behaviour) => void;
};

/**
 * Runs `fn` while the pace probe of a key is in flight: a {@link clockedClient} (with
 * `options`) whose first call the server answers `first` (a 429 pausing the key 100 ms:
 * OPEN's first step, or its own delay), then, the clock moved past that pause, the probe,
 * which the server has received and holds until `answer` is called.
 */
async function withHeldProbe(
  first: Behaviour,
  options: CircuitBreakerOptions,
  fn: (held: HeldProbe) => Promise<void>,
): Promise<void> {
  let answer: (behaviour: Behaviour) => void = () => {};
  const held = new Promise<Behaviour>((resolve) => {
    answer = resolve;
  });
  const handler: Handler = (_req, index) => (index === 0 ? first : index === 1 ? held : {});
  await withServer(handler, async (server) => {
    const client = clockedClient(options);
    assert.equal(await send(client.fetch, server.origin), 429); // pauses the key for 100 ms
    client.clock.t += 100;
    const probe = send(client.fetch, server.origin);
    while (server.requests.length < 2) await delay(2);
    await fn({ ...client, server, probe, answer });
  });
}

test('a call refused while the pace probe is in flight gets a retryAt one pause on, not now, and never past the probe’s lease', async () => {
  // maxRetryAfterMs: 0 waits for nothing: the call is refused at once, and a retryAt of
  // now had a client that sleeps until it spin until the probe answered.
  const options = { maxRetryAfterMs: 0 };
  await withHeldProbe({ status: 429 }, options, async ({ server, clock, fetch, probe, answer }) => {
    const probeAt = clock.t;
    const retryAt = () => refusedRetryAt(fetch(server.origin), CircuitOpenError);
    try {
      assert.equal(await retryAt(), clock.t + 100, 'the pause just served, again');
      clock.t += 1_000;
      assert.equal(await retryAt(), clock.t + 1_000, 'as long again as the probe has been in flight');
      clock.t = probeAt + 60_000 - 10;
      assert.equal(await retryAt(), probeAt + 60_000, 'never past the lease');
    } finally {
      answer({ status: 200 });
      assert.equal(await probe, 200);
    }
  });
});

/**
 * NTP steps the clock back 10 s while the pace probe of a key paused by `first` is in
 * flight and a call waits for its answer; then the probe is answered `probeAnswer`. The key
 * must be paused `pausedMs` from the stepped-back clock (`why`), the waiter not sent until
 * that pause ends, and sent then.
 */
async function probeAnsweredAfterClockStepBack(step: {
  first: Behaviour;
  probeAnswer: Behaviour;
  pausedMs: number;
  why: string;
}): Promise<void> {
  await withHeldProbe(step.first, {}, async ({ server, clock, breaker, fetch, probe, answer }) => {
    const waiter = send(fetch, server.origin); // waits for the probe's answer
    waiter.catch(() => {}); // awaited below; a failure above must not leave it unhandled
    await delay(10);
    clock.t -= 10_000;
    answer(step.probeAnswer);
    assert.equal(await probe, 429);
    assert.equal(breaker.stats('model')?.pausedUntil?.getTime(), clock.t + step.pausedMs, step.why);
    await delay(10);
    assert.equal(server.requests.length, 2, 'the waiter was not sent');
    clock.t += step.pausedMs;
    assert.equal(await waiter, 200, 'it went once the new pause ended');
  });
}

test('a pace probe answered 429 with a delay after the clock stepped back pauses the key again, and its waiter waits', async () => {
  // NTP steps the clock back while the probe is in flight: the pause it probed, ended,
  // is again ahead of the clock (by at most its length). The probe's 429 is the server's
  // word now; read as shorter than that old pause, it paused nothing, and its answer
  // released every waiter into a server that had just said wait.
  await probeAnsweredAfterClockStepBack({
    first: tooMany(100),
    probeAnswer: tooMany(50),
    pausedMs: 50,
    why: 'paused again for 50 ms',
  });
});

test('a pace probe answered 429 without a delay after the clock stepped back takes the next step, and its waiter waits', async () => {
  // As with a delay (above): the pause it probed is ahead of the clock again, and its
  // 429 read as one meeting a paused key stepped nothing up and released every waiter.
  await probeAnsweredAfterClockStepBack({
    first: { status: 429 },
    probeAnswer: { status: 429 },
    pausedMs: 200,
    why: 'paused for the next step',
  });
});

test('a call whose deadline passes while it waits for the pace probe fails fast with CircuitOpenError then', async () => {
  const { handler } = stamped(async (index) => {
    if (index === 0) return unavailable(50);
    if (index === 1) await delay(300);
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const plain = createFetch({ use: [breaker], key: 'model' });
    const hurried = createFetch({ use: [deadline, breaker], key: 'model' });
    assert.equal(await send(plain, server.origin), 503);
    const probe = send(plain, server.origin);
    await delay(80); // the pause is over and the probe is in flight
    const started = Date.now();
    await assert.rejects(send(hurried, server.origin), (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
      assert.match(e.message, /pace probe is still in flight at this call's deadline/);
      assert.ok(e.cause instanceof HttpStatusError, 'e.cause instanceof HttpStatusError');
      assert.equal(e.cause.status, 503);
      return true;
    });
    const waited = Date.now() - started;
    assert.ok(waited >= 90 && waited < 200, `failed after ${waited} ms, at its 100 ms deadline`);
    assert.equal(await probe, 200);
    assert.equal(await send(hurried, server.origin), 200, 'the key is released');
    assert.equal(server.requests.length, 3, 'the hurried call was never sent');
  });
});

test('an abort while waiting for the pace probe rejects at once with the caller’s reason', async () => {
  const { handler } = stamped(async (index) => {
    if (index === 0) return unavailable(50);
    if (index === 1) await delay(300);
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const { fetch } = pacedClient();
    assert.equal(await send(fetch, server.origin), 503);
    const probe = send(fetch, server.origin);
    await delay(80);
    const controller = new AbortController();
    const reason = new Error('the user closed the chat');
    const waiting = fetch(server.origin, { signal: controller.signal });
    await delay(20);
    const abortedAt = Date.now();
    controller.abort(reason);
    await assert.rejects(waiting, (e: unknown) => e === reason);
    assert.ok(Date.now() - abortedAt < 50, `rejected ${Date.now() - abortedAt} ms after the abort`);
    assert.equal(await probe, 200);
    assert.equal(server.requests.length, 2, 'the aborted call was never sent');
  });
});

/** A 200 that reports OpenAI's request quota: `remaining` left, restored in `resetMs`. */
const quota = (remaining: number, resetMs: number) => ({
  status: 200,
  headers: {
    'x-ratelimit-limit-requests': '3',
    'x-ratelimit-remaining-requests': String(remaining),
    'x-ratelimit-reset-requests': `${resetMs}ms`,
  },
});

test('a 200 that says the quota is used up pauses the key until the reset, so the next call waits instead of earning a 429', async () => {
  const { arrivals, handler } = stamped((index) => (index === 0 ? quota(0, 150) : { status: 200 }));
  await withServer(handler, async (server) => {
    const events: BreakwaterEvent[] = [];
    const breaker = circuitBreaker({ open: OPEN });
    const fetch = createFetch({ use: [breaker], key: 'model', onEvent: (e) => events.push(e) });
    assert.equal(await send(fetch, server.origin), 200);
    assert.notEqual(breaker.stats('model')?.pausedUntil, undefined, 'the key is paced');
    assert.equal(await send(fetch, server.origin), 200);
    const gap = at(arrivals, 1) - at(arrivals, 0);
    assert.ok(gap >= 140, `the second call went ${gap} ms after the first, before the reset`);
    const starts = events.filter((e): e is PacedEvent => e.type === 'paced' && e.phase === 'start');
    assert.deepEqual(
      starts.map((e) => e.delayMs),
      [150],
    );
    assert.equal(starts[0]?.reason, 'paced: the server said its quota is used up (HTTP 200 OK)');
    assert.equal(breaker.stats('model')?.consecutiveFailures, 0, 'a used-up quota is not a failure');
  });
});

test('a call that cannot wait out a used-up quota fails fast with a CircuitOpenError that says so, and is not sent', async () => {
  await withServer(sequence(quota(0, 500), { status: 200 }), async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const plain = createFetch({ use: [breaker], key: 'model' });
    const hurried = createFetch({ use: [deadline, breaker], key: 'model' });
    assert.equal(await send(plain, server.origin), 200);
    await assert.rejects(send(hurried, server.origin), (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
      assert.match(
        e.message,
        /the server said its quota is used up \(HTTP 200 OK\), past this call's deadline/,
      );
      assert.equal(e.cause, undefined, 'a 200 is no failure to blame');
      return true;
    });
    assert.equal(server.requests.length, 1);
  });
});

test('quota headers that leave requests, or a reset with no remaining count, pause nothing', async () => {
  const answers = [
    quota(1, 5_000),
    { status: 200, headers: { RateLimit: '"default";r=5;t=30' } },
    // GitHub sends its reset on every response; without a remaining count it says nothing.
    { status: 200, headers: { 'X-RateLimit-Reset': String(Math.floor(Date.now() / 1000) + 3600) } },
    { status: 200, headers: { 'x-ratelimit-remaining-requests': '0' } },
  ];
  await withServer(sequence(...answers, { status: 200 }), async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    for (let i = 0; i <= answers.length; i++) {
      assert.equal(await send(fetch, server.origin), 200);
      assert.equal(breaker.stats('model')?.pausedUntil, undefined, `answer ${i} paused the key`);
    }
  });
});

test('when the pace probe’s answer leaves 2 requests in the quota, 2 of 9 waiters go at once and the rest wait for the reset', async () => {
  let probeAnsweredAt = 0;
  let secondProbeAnsweredAt = 0;
  const { arrivals, handler } = stamped(async (index) => {
    if (index === 0) return tooMany(100);
    if (index === 1) {
      await delay(20);
      probeAnsweredAt = Date.now();
      return quota(2, 200);
    }
    // After the reset, the next request is a new pace probe; its plain 200 releases the rest.
    if (index === 4) {
      await delay(20);
      secondProbeAnsweredAt = Date.now();
    }
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const events = await pausedThenWaiters(server.origin, 429, 10);
    assert.equal(server.requests.length, 11);
    const allowed = arrivals.slice(2, 4);
    for (const t of allowed) {
      assert.ok(
        t >= probeAnsweredAt && t - probeAnsweredAt < 150,
        'the 2 allowed went right after the answer',
      );
    }
    const secondProbeAt = at(arrivals, 4);
    assert.ok(
      secondProbeAt - probeAnsweredAt >= 190,
      `the third went ${secondProbeAt - probeAnsweredAt} ms after the answer, before the quota's reset`,
    );
    for (const t of arrivals.slice(5)) {
      assert.ok(t >= secondProbeAnsweredAt, 'the rest went after the second probe was answered');
    }
    const starts = events.filter((e): e is PacedEvent => e.type === 'paced' && e.phase === 'start');
    assert.deepEqual(
      starts.map((e) => e.delayMs),
      [100, 200],
    );
  });
});

test('a used-up quota that resets later than maxRetryAfterMs pauses nothing: a 200 is a forecast, and the server enforces its own limit', async () => {
  await withServer(sequence(quota(0, 5_000), { status: 200 }), async (server) => {
    const breaker = circuitBreaker({ open: OPEN, maxRetryAfterMs: 1_000 });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    assert.equal(await send(fetch, server.origin), 200);
    assert.equal(breaker.stats('model')?.pausedUntil, undefined);
    assert.equal(await send(fetch, server.origin), 200, 'the next call went, and the server served it');
    assert.equal(server.requests.length, 2);
  });
});

test('a 200 that says a quota is used up pauses the key until its reset even when another quota at 0 names a reset too far off to trust', async () => {
  // A gateway's X-RateLimit-Reset that reads as the longest wait (15 digits: epoch seconds
  // millennia away; or digits too long to read) beside the real quota, OpenAI's, at 0
  // until 300 ms from now. Taken as the tightest quota, the far reset hid the near one: the
  // 200 paused nothing, and every call sent before the reset earned a 429 (whose far reset
  // then failed it fast with RetryAfterTooLongError).
  for (const farReset of ['999999999999999', '9'.repeat(5_000)]) {
    const usedUp = (resetMs: number) => ({
      'x-ratelimit-remaining-requests': '0',
      'x-ratelimit-reset-requests': `${resetMs}ms`,
      'X-RateLimit-Remaining': '0',
      'X-RateLimit-Reset': farReset,
    });
    let resetAt = 0;
    const { arrivals, handler } = stamped(() => {
      const t = Date.now();
      if (!resetAt) {
        resetAt = t + 300;
        return { status: 200, headers: usedUp(300) };
      }
      return t < resetAt ? { status: 429, headers: usedUp(resetAt - t) } : { status: 200 };
    });
    await withServer(handler, async (server) => {
      const fetch = createFetch({ use: [retry(), circuitBreaker({ open: OPEN })], key: 'model' });
      assert.equal(await send(fetch, server.origin), 200);
      assert.deepEqual(await concurrently(fetch, server.origin, 4), [200, 200, 200, 200]);
      assert.equal(server.requests.length, 5, 'no call was sent before the reset');
      for (const t of arrivals.slice(1))
        assert.ok(t >= resetAt, `a call went ${resetAt - t} ms before the reset`);
    });
  }
});

test('a 200 whose headers throw when read reaches its caller: the breaker’s quota check reads them as absent', async () => {
  class Hostile extends Headers {
    override forEach(): void {
      throw new Error('forEach');
    }
  }
  // A middleware inside the breaker (or a fetch mock) that hands back odd headers.
  const oddHeaders: Middleware = async function oddHeaders(call, next) {
    const response = await next(call);
    Object.defineProperty(response, 'headers', { value: new Hostile(response.headers) });
    return response;
  };
  await withServer(always(quota(0, 100)), async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const fetch = createFetch({ use: [breaker, oddHeaders], key: 'model' });
    assert.equal(await send(fetch, server.origin), 200);
    assert.equal(breaker.stats('model')?.pausedUntil, undefined);
  });
});

test('a pace probe’s answer with one quota just restored and another with 2 left lets 2 of 6 waiters go, not all', async () => {
  const { arrivals, handler } = stamped(async (index) => {
    if (index === 0) return tooMany(50);
    if (index === 1) {
      await delay(20);
      return {
        status: 200,
        // Two request quotas (token quotas count only once used up): one just restored,
        // one with 2 left for another 200 ms.
        headers: {
          'x-ratelimit-remaining-requests': '0',
          'x-ratelimit-reset-requests': '0s',
          'anthropic-ratelimit-requests-remaining': '2',
          'anthropic-ratelimit-requests-reset': new Date(Date.now() + 200).toISOString(),
        },
      };
    }
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const { fetch } = pacedClient();
    assert.equal(await send(fetch, server.origin), 429);
    const statuses = await concurrently(fetch, server.origin, 7);
    assert.deepEqual(statuses, Array(7).fill(200));
    const answeredAt = at(arrivals, 1) + 20;
    const early = arrivals.slice(2).filter((t) => t - answeredAt < 150);
    assert.equal(early.length, 2, 'only the 2 the quota had left went before its reset');
  });
});

test('a 429 during a quota pause ends what is left of its allowance: a fresh call waits for the reset instead of going', async () => {
  // Leftover allowance: the pace probe's answer said 2 of the quota were left for 400 ms
  // (fewer than the 3 waiters), and in the same turn an early call's 500 opened the
  // circuit, so the 3 woken waiters failed fast and took none of it.
  const held = new Map<string, (response: Response) => void>();
  const arrived: Record<string, number> = {};
  const stub: FetchLike = (input) => {
    const path = new URL(String(input)).pathname;
    arrived[path] = Date.now();
    if (path === '/limit') return Promise.resolve(new Response(null, tooMany(50)));
    if (path === '/half-open') return Promise.resolve(new Response(null, tooMany(20)));
    if (path === '/slow' || path === '/probe') return new Promise((resolve) => held.set(path, resolve));
    return Promise.resolve(new Response(null, { status: 200 }));
  };
  const breaker = circuitBreaker({ open: OPEN, consecutiveFailures: 1 });
  const fetch = createFetch({ fetch: stub, use: [breaker], key: 'model' });
  const url = (path: string) => `http://model.test${path}`;
  const slow = send(fetch, url('/slow')); // admitted before the pause; its 500 opens the circuit
  assert.equal(await send(fetch, url('/limit')), 429);
  await delay(60);
  const probe = send(fetch, url('/probe')); // the pace probe
  await delay(5);
  const waiters = Promise.allSettled([1, 2, 3].map(() => send(fetch, url('/wait'))));
  await delay(5);
  const answer = (path: string, response: Response): void => {
    const resolve = held.get(path);
    assert.ok(resolve, `${path} is on the wire`);
    resolve(response);
  };
  answer('/probe', new Response(null, quota(2, 400)));
  answer('/slow', new Response(null, { status: 500 }));
  const probeAnsweredAt = Date.now();
  assert.equal(await probe, 200);
  assert.equal(await slow, 500);
  assert.deepEqual(
    (await waiters).map((w) => (w.status === 'fulfilled' ? w.value : (w.reason as Error).name)),
    ['CircuitOpenError', 'CircuitOpenError', 'CircuitOpenError'],
  );
  assert.equal(arrived['/wait'], undefined, 'no waiter was sent');
  await delay(120); // the open time (100 ms) has passed: this call takes 1 of the 2 and probes
  assert.equal(await send(fetch, url('/half-open')), 429);
  assert.equal(await send(fetch, url('/fresh')), 200);
  const freshAt = arrived['/fresh'] ?? 0;
  assert.ok(
    freshAt - probeAnsweredAt >= 390,
    `the fresh call went ${freshAt - probeAnsweredAt} ms after the quota said 2 left for 400 ms, after a 429`,
  );
});

test('a pace probe’s answer with a few tokens left releases every waiter: tokens left are not calls left', async () => {
  const { arrivals, handler } = stamped(async (index) => {
    if (index === 0) return tooMany(50);
    if (index === 1) {
      return {
        status: 200,
        headers: { 'x-ratelimit-remaining-tokens': '2', 'x-ratelimit-reset-tokens': '300ms' },
      };
    }
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const { fetch } = pacedClient();
    assert.equal(await send(fetch, server.origin), 429);
    const statuses = await concurrently(fetch, server.origin, 7);
    assert.deepEqual(statuses, Array(7).fill(200));
    const probeAt = at(arrivals, 1);
    for (const t of arrivals.slice(2)) {
      assert.ok(
        t - probeAt < 200,
        `a waiter went ${t - probeAt} ms after the probe, held for the token reset`,
      );
    }
  });
});

test('with quotaPacing: false a 200 that says the quota is used up pauses nothing, for a server whose headers are wrong', async () => {
  await withServer(sequence(quota(0, 5_000), { status: 200 }), async (server) => {
    const breaker = circuitBreaker({ open: OPEN, quotaPacing: false });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    assert.equal(await send(fetch, server.origin), 200);
    assert.equal(breaker.stats('model')?.pausedUntil, undefined);
    assert.equal(await send(fetch, server.origin), 200);
  });
});

test('definePolicy passes breaker.quotaPacing to the breaker, and rejects a value that is not a boolean', async () => {
  await withServer(sequence(quota(0, 5_000), { status: 200 }), async (server) => {
    const policy = definePolicy({ name: 'model', breaker: { quotaPacing: false }, retry: false });
    const fetch = policy.fetch();
    assert.equal(await send(fetch, server.origin), 200);
    assert.equal(policy.stats('model').breaker?.pausedUntil, undefined);
  });
  assert.throws(
    () => definePolicy({ breaker: { quotaPacing: 'no' as never } }),
    (error: unknown) => error instanceof TypeError && /breaker\.quotaPacing/.test(error.message),
  );
});

test('a 500 whose headers say the quota is used up pauses nothing: on a failure the server’s delay is retryDelay()’s, as retry() reads it', async () => {
  const usedUp500 = { ...quota(0, 5_000), status: 500 };
  await withServer(sequence(usedUp500, { status: 200 }), async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    assert.equal(await send(fetch, server.origin), 500);
    assert.equal(breaker.stats('model')?.pausedUntil, undefined);
    assert.equal(await send(fetch, server.origin), 200);
  });
});

test('a call whose signal has already aborted reports no wait on a paused key, and rejects at once with its reason', async () => {
  await withServer(always({ status: 429, headers: { 'retry-after': '5' } }), async (server) => {
    const { fetch, events } = pacedClient();
    assert.equal(await send(fetch, server.origin), 429);
    const reason = new Error('the agent shut down');
    const started = Date.now();
    await assert.rejects(fetch(server.origin, { signal: AbortSignal.abort(reason) }), (e) => e === reason);
    assert.ok(Date.now() - started < 50, `rejected after ${Date.now() - started} ms`);
    assert.deepEqual(
      events.filter((e): e is PacedEvent => e.type === 'paced').map((e) => e.phase),
      ['start'],
      'no wait reported for a call that does not wait',
    );
    assert.equal(server.requests.length, 1);
  });
});

/** A custom fetch that drops `init.signal`: a deadline never reaches the request. */
const deafFetch: FetchLike = (input, init) => {
  const { signal: _ignored, ...rest } = init ?? {};
  return globalThis.fetch(input, rest);
};

test('a call a hand-written resender brings back after a timeout above ended its pass does not wait out the pause', async () => {
  // [timeout({ attemptMs }), resender, breaker] through a fetch that ignores the signal:
  // the late 429 (Retry-After: 5) pauses the key, and the resender (which does not look
  // at the signal) sends the call again at once. Waiting would hold a timer for the
  // pause (up to maxRetryAfterMs) on no signal, for a resend the end of the chain refuses.
  await withServer(
    sequence({ status: 429, headers: { 'retry-after': '5' }, delayMs: 150 }, {}),
    async (server) => {
      const events: BreakwaterEvent[] = [];
      let resent: (outcome: unknown) => void = () => {};
      const again = new Promise<unknown>((resolve) => {
        resent = resolve;
      });
      let resentAt = 0;
      const resender: Middleware = async function resender(call, next) {
        const response = await next(call);
        await response.body?.cancel();
        call.attempt++;
        resentAt = Date.now();
        const sent = next(call);
        sent.then(resent, resent);
        return sent;
      };
      const fetch = createFetch({
        fetch: deafFetch,
        onEvent: (e) => events.push(e),
        use: [timeout({ attemptMs: 50 }), resender, circuitBreaker({ open: OPEN })],
      });
      await assert.rejects(fetch(`${server.origin}/x`), (e: unknown) => (e as Error).name === 'TimeoutError');
      let timer: ReturnType<typeof setTimeout> | undefined;
      const outcome = await Promise.race([
        again,
        new Promise((resolve) => {
          timer = setTimeout(resolve, 1000, 'still waiting');
        }),
      ]);
      clearTimeout(timer);
      assert.equal((outcome as Error).name, 'AbortError', `the resend is refused (got ${String(outcome)})`);
      assert.ok(Date.now() - resentAt < 50, `refused ${Date.now() - resentAt} ms after the resend`);
      assert.deepEqual(
        events.filter((e): e is PacedEvent => e.type === 'paced').map((e) => e.phase),
        ['start'],
        'no wait reported for a call that is over',
      );
      assert.equal(server.requests.length, 1);
    },
  );
});

test('an open circuit on a paused key fails fast with retryAt at the end of the pause, not at the earlier end of its open time, and its open event says so', async () => {
  // An overloaded server answers a 429 (wait 2 s) and, to calls already in flight, 500s
  // that open the circuit for 100 ms: nothing goes before the pause ends.
  const handler: Handler = (req) => (req.url === '/limit' ? tooMany(2000) : { status: 500, delayMs: 100 });
  await withServer(handler, async (server) => {
    const breaker = circuitBreaker({ consecutiveFailures: 2, open: OPEN });
    const opened: (Date | undefined)[] = [];
    const fetch = createFetch({
      use: [breaker],
      key: 'model',
      onEvent: (event) => {
        if (event.type === 'breaker' && event.state === 'open') opened.push(event.retryAt);
      },
    });
    const failing = [send(fetch, `${server.origin}/a`), send(fetch, `${server.origin}/b`)];
    await delay(20);
    assert.equal(await send(fetch, `${server.origin}/limit`), 429);
    assert.deepEqual(await Promise.all(failing), [500, 500]);
    const stats = breaker.stats('model');
    assert.equal(stats?.state, 'open');
    const pausedUntil = stats?.pausedUntil?.getTime() ?? 0;
    assert.ok(pausedUntil > (stats?.retryAt?.getTime() ?? 0), 'the pause outlasts the open time');
    await assert.rejects(fetch(server.origin), (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
      assert.equal(e.retryAt.getTime(), pausedUntil, 'no call may go before the pause ends');
      return true;
    });
    // The event's "when the next probe may go" too: a dashboard showed the open time's end.
    assert.deepEqual(
      opened.map((at) => at?.getTime()),
      [pausedUntil],
    );
    assert.equal(server.requests.length, 3);
  });
});

test('reset(key) while a call waits out a pause lets that call go at once', async () => {
  await withServer(sequence(tooMany(5000), { status: 200 }), async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    assert.equal(await send(fetch, server.origin), 429);
    const waiting = send(fetch, server.origin);
    await delay(50);
    const started = Date.now();
    breaker.reset('model');
    assert.equal(await waiting, 200);
    assert.ok(Date.now() - started < 1000, `went ${Date.now() - started} ms after the reset`);
  });
});

test('reset(key) from an onEvent listener as a call starts waiting out a pause lets that call go at once', async () => {
  // The listener runs before the call's wait begins: the wait must already be one that a
  // reset ends, not a timer on the forgotten circuit that only the pause's end ends.
  await withServer(sequence(tooMany(5000), { status: 200 }), async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const fetch = createFetch({
      use: [breaker],
      key: 'model',
      onEvent: (e) => {
        if (e.type === 'paced' && e.phase === 'wait') breaker.reset('model');
      },
    });
    assert.equal(await send(fetch, server.origin), 429);
    // Gives up at 2 s (the old code waited out the 5 s pause), within the test's time.
    const controller = new AbortController();
    const giveUp = setTimeout(() => controller.abort(new Error('still waiting after 2 s')), 2000);
    const started = Date.now();
    try {
      assert.equal(await send(fetch, server.origin, { signal: controller.signal }), 200);
    } finally {
      clearTimeout(giveUp);
    }
    assert.ok(Date.now() - started < 1000, `went ${Date.now() - started} ms after the reset`);
  });
});

test('a call waiting out a pause fails fast as soon as a response stretches it past what the call may wait', async () => {
  // A call already in flight answers later with a wait longer than maxRetryAfterMs.
  const handler: Handler = (req) =>
    req.url === '/slow' ? { ...tooMany(3_600_000), delayMs: 100 } : tooMany(2000);
  await withServer(handler, async (server) => {
    const breaker = circuitBreaker({ open: OPEN, maxRetryAfterMs: 10_000 });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    const slow = send(fetch, `${server.origin}/slow`);
    await delay(20);
    assert.equal(await send(fetch, server.origin), 429);
    const waiting = fetch(server.origin);
    assert.equal(await slow, 429);
    const started = Date.now();
    await assert.rejects(waiting, (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
      assert.match(e.message, /3600000 ms is longer than the 10000 ms allowed/);
      return true;
    });
    assert.ok(Date.now() - started < 1000, `failed ${Date.now() - started} ms after the stretch`);
    assert.equal(server.requests.length, 2);
  });
});

test('a 200 whose X-RateLimit-Remaining: 0 came on two lines (fetch joins them: "0, 0") pauses the key until the reset', async () => {
  // A proxy that adds its own copy of the origin's rate-limit headers sends each twice.
  const twice = {
    status: 200,
    headers: { 'x-ratelimit-remaining': ['0', '0'], 'x-ratelimit-reset': ['1', '1'] },
  };
  await withServer(sequence(twice, { status: 200 }), async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    const res = await fetch(server.origin);
    await res.text();
    assert.equal(res.headers.get('x-ratelimit-remaining'), '0, 0');
    assert.notEqual(breaker.stats('model')?.pausedUntil, undefined, 'the key is paced until the reset');
  });
});

test('a reason phrase that quotes the credential the call sent shows none of it in the pause’s error, cause or event', async () => {
  const answer = { status: 429, phrase: 'Slow down token', headers: { 'retry-after': '5' } };
  await withReasonPhrase(answer, async (origin) => {
    const events: BreakwaterEvent[] = [];
    // A pause longer than allowed: the next call fails fast, with the pause's reason and cause.
    const breaker = circuitBreaker({ open: OPEN, maxRetryAfterMs: 200 });
    const fetch = createFetch({ use: [breaker], key: 'model', onEvent: (e) => events.push(e) });
    const error = await refusedAfter(fetch, origin, 429);
    const shown = [error.message, error.cause.message, error.cause.statusText, JSON.stringify(error)];
    assertNoToken([...shown, JSON.stringify(events)]);
    if (error.cause.statusText !== 'Too Many Requests')
      assert.match(error.message, /\(HTTP 429 Slow down token \[redacted\]\)/);
  });
});

test('a paused key its callers wait on is not pushed out of a full registry by other keys: they stay held until the pause ends', async () => {
  // An agent keeps talking to other servers while one asked for quiet: the least recently
  // used key is the paused one (its callers wait, they use nothing), and forgetting it
  // sent every waiter at once into the server that had just said 429.
  const { arrivals, handler } = stamped((n) => (n === 0 ? tooMany(250) : { status: 200 }));
  await withServer(handler, async (server) => {
    const breaker = circuitBreaker({ open: OPEN, maxKeys: 2 });
    const fetch = createFetch({ use: [breaker], key: (url) => url.pathname });
    assert.equal(await send(fetch, `${server.origin}/paused`), 429);
    const until = breaker.stats('/paused')?.pausedUntil?.getTime() ?? 0;
    const waiters = concurrently(fetch, `${server.origin}/paused`, 5);
    await delay(20);
    for (const other of ['/b', '/c', '/d']) assert.equal(await send(fetch, `${server.origin}${other}`), 200);
    assert.deepEqual(await waiters, Array(5).fill(200));
    const toPaused = server.requests.flatMap((r, i) => (r.url === '/paused' ? [at(arrivals, i)] : []));
    assert.equal(toPaused.length, 6);
    // A timer may fire a little early against the wall clock.
    for (const t of toPaused.slice(1))
      assert.ok(t >= until - 20, `a waiter went ${until - t} ms before the pause ended`);
    assert.equal(breaker.size(), 2);
  });
});

test('a pace probe answered with a 503 that names no delay hands the probe to the next waiter: the server is still failing, so the rest are not all sent', async () => {
  // A 429 paused the key; the first call after it meets a plain 503. That is no green
  // light: as after a network error, one more waiter probes, and the rest wait for it.
  let secondAnsweredAt = 0;
  const { arrivals, handler } = stamped(async (index) => {
    if (index === 0) return tooMany(150);
    if (index === 1) return { status: 503 };
    if (index === 2) {
      await delay(50);
      secondAnsweredAt = Date.now();
    }
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    assert.equal(await send(fetch, server.origin), 429);
    const statuses = await concurrently(fetch, server.origin, 10);
    assert.deepEqual(
      [...statuses].sort((a, b) => a - b),
      [...Array(9).fill(200), 503],
    );
    assert.equal(server.requests.length, 11);
    for (const t of arrivals.slice(3)) {
      assert.ok(
        t >= secondAnsweredAt,
        `a request arrived ${secondAnsweredAt - t} ms before the next probe's answer`,
      );
    }
  });
});

test('a registry outgrown while every key had waiters shrinks back to maxKeys once they are gone: the next new key evicts the excess', async () => {
  // With every key's callers waiting, a new key is kept beside them (size 3 of 2). Each
  // later new key evicted one key only, so the registry stayed 3 long after the waits
  // ended: a burst of paused keys from URLs kept them all, past maxKeys, for good.
  const handler: Handler = (req) => (req.url.endsWith('/again') ? { status: 200 } : tooMany(100));
  await withServer(handler, async (server) => {
    const breaker = circuitBreaker({ open: OPEN, maxKeys: 2 });
    const fetch = createFetch({ use: [breaker], key: (url) => url.pathname.split('/')[1] ?? '' });
    const waits: Promise<number>[] = [];
    for (const key of ['a', 'b', 'c']) {
      assert.equal(await send(fetch, `${server.origin}/${key}`), 429);
      waits.push(send(fetch, `${server.origin}/${key}/again`));
      await delay(5);
    }
    assert.equal(breaker.size(), 3);
    assert.deepEqual(await Promise.all(waits), [200, 200, 200]);
    assert.equal(await send(fetch, `${server.origin}/d/again`), 200);
    assert.equal(breaker.size(), 2);
  });
});

test('50 callers waiting on a key whose server answers every call 429 are each woken a few times, not once for every pause', async () => {
  // Each pace probe's 429 starts a new pause. Waking every waiter for each of them (to
  // look at the key again and wait anew) made 50 waiters report 1,000 waits, and 1,000
  // of them cost seconds of CPU: quadratic. One waiter is woken to wait the pause out and
  // probe it; the others wait on for that probe.
  await withServer(always(tooMany(2)), async (server) => {
    const { fetch, events } = pacedClient();
    assert.equal(await send(fetch, server.origin), 429);
    const statuses = await concurrently(fetch, server.origin, 50);
    assert.deepEqual(statuses, Array(50).fill(429), 'each went once, as a pace probe, and got its 429');
    assert.equal(server.requests.length, 51);
    const waits = events.filter((e) => e.type === 'paced' && e.phase === 'wait').length;
    // A few each: 100 to 150 on an idle machine, 159 in a loaded fresh-clone run (late
    // timers end more pauses under a waiter); the quadratic wake-up made 1,000.
    assert.ok(waits <= 300, `50 callers reported ${waits} waits`);
  });
});

test('of the calls waiting for the pace probe, one whose deadline falls within the pause its 429 starts fails fast at once, while the others wait on', async () => {
  const { handler } = stamped(async (index) => {
    if (index === 0) return unavailable(30);
    if (index === 1) {
      await delay(30);
      // Longer than the hurried call's 100 ms deadline, however loaded the machine.
      return tooMany(300);
    }
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const plain = createFetch({ use: [breaker], key: 'model' });
    const hurried = createFetch({ use: [deadline, breaker], key: 'model' });
    assert.equal(await send(plain, server.origin), 503);
    await delay(40); // the pause is over
    const probe = send(plain, server.origin);
    const patient = [send(plain, server.origin), send(plain, server.origin)];
    const started = Date.now();
    await assert.rejects(send(hurried, server.origin), (e: unknown) => {
      assert.ok(e instanceof CircuitOpenError, 'e instanceof CircuitOpenError');
      assert.match(e.message, /past this call's deadline/);
      return true;
    });
    const waited = Date.now() - started;
    assert.ok(
      waited >= 20 && waited < 90,
      `failed after ${waited} ms: at the probe's 429, not at its 100 ms deadline`,
    );
    assert.equal(await probe, 429);
    assert.deepEqual(await Promise.all(patient), [200, 200], 'the others waited the 300 ms pause out');
    assert.equal(server.requests.length, 4);
  });
});

test('when the waiter woken to wait out a new pause and probe it is aborted, the next waiter takes its place: the rest go when the pause ends', async () => {
  let probeArrived: () => void = () => {};
  const arrived = new Promise<void>((resolve) => {
    probeArrived = resolve;
  });
  const { handler } = stamped(async (index) => {
    if (index === 0) return tooMany(50);
    if (index === 1) {
      probeArrived();
      await delay(30);
      return tooMany(100);
    }
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    // maxRetryAfterMs bounds a wait for a probe that never comes: the test fails in 1 s, not 60.
    const { fetch } = pacedClient({ maxRetryAfterMs: 1000 });
    assert.equal(await send(fetch, server.origin), 429);
    const controller = new AbortController();
    const probe = send(fetch, server.origin);
    // The others join while the probe is in flight: a pause's timers fire in any order, so
    // one added before could be the probe (Deno, 1 run in about 20 under load).
    await arrived;
    // Its outcome taken at once (a rejection left for later is an unhandled one on Deno).
    const first = send(fetch, server.origin, { signal: controller.signal }).catch((e: Error) => e.name);
    const rest = [send(fetch, server.origin), send(fetch, server.origin)];
    assert.equal(await probe, 429); // the new pause wakes `first` alone, to wait it out
    const started = Date.now();
    controller.abort();
    assert.equal(await first, 'AbortError');
    assert.deepEqual(await Promise.all(rest), [200, 200]);
    assert.ok(Date.now() - started < 500, `the others went ${Date.now() - started} ms after the abort`);
  });
});

test('a call waiting for pace probes through many pauses is not refused after maxRetryAfterMs while each of those probes was answered in time', async () => {
  // Every probe's 429 starts a new pause; a waiter not woken for it waits on. The limit
  // on a wait for a probe is for one probe that hangs, not for the queue ahead of it.
  const handler: Handler = async () => {
    await delay(100);
    return tooMany(20);
  };
  await withServer(handler, async (server) => {
    const { fetch } = pacedClient({ maxRetryAfterMs: 150 });
    assert.equal(await send(fetch, server.origin), 429);
    const statuses = await Promise.all(
      Array.from({ length: 6 }, () => send(fetch, server.origin).catch((e: Error) => e.message)),
    );
    assert.deepEqual(statuses, Array(6).fill(429), 'each went once, as a pace probe');
  });
});

test('calls refused on a paused key (their deadline comes first) make no call that waits it out report its wait again', async () => {
  await withServer(sequence(tooMany(300), { status: 200 }), async (server) => {
    const events: BreakwaterEvent[] = [];
    const breaker = circuitBreaker({ open: OPEN });
    const onEvent = (e: BreakwaterEvent) => events.push(e);
    const plain = createFetch({ use: [breaker], key: 'model', onEvent });
    const hurried = createFetch({ use: [deadline, breaker], key: 'model', onEvent });
    assert.equal(await send(plain, server.origin), 429);
    const waiting = send(plain, server.origin);
    for (let i = 0; i < 5; i++) await assert.rejects(send(hurried, server.origin), CircuitOpenError);
    assert.equal(await waiting, 200);
    const waits = events.filter((e) => e.type === 'paced' && e.phase === 'wait');
    assert.equal(waits.length, 1, 'one call waited the pause out, once');
  });
});

/**
 * A server on loopback that allows `limit` requests per fixed window of `windowMs` (from
 * the first request after the last window ended), and answers the rest 429 with
 * `retry-after-ms` until the window's end, as a quota per window does. Its first window
 * starts used up (others used it), so the first request's 429 asks for all of it.
 * `refused[n]` is how many 429s its n-th window gave.
 */
function quotaServer(limit: number, windowMs: number): { handler: Handler; refused: number[] } {
  let windowStart = 0;
  let used = 0;
  const refused: number[] = [];
  const handler: Handler = (req) => {
    // Not counted: opens the connection the next calls reuse.
    if (req.url === '/warm') return { status: 200 };
    const t = Date.now();
    if (t - windowStart >= windowMs) {
      windowStart = t;
      used = refused.length ? 0 : limit;
      refused.push(0);
    }
    if (++used <= limit) return { status: 200 };
    refused[refused.length - 1] = (refused.at(-1) ?? 0) + 1;
    return tooMany(windowStart + windowMs - t);
  };
  return { handler, refused };
}

test('after a fast pace probe’s 200, 30 callers of a server allowing 4 calls per 250 ms go in doubling steps: far fewer 429s, and fewer callers ending on one, than if all went at once', async () => {
  const quota = quotaServer(4, 250);
  await withServer(quota.handler, async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const prime = createFetch({ use: [breaker], key: 'model' });
    // No retry budget: every caller makes its 3 attempts, so how many end on a 429 is the
    // pacing's doing alone.
    const fetch = createFetch({ use: [retry({ budget: false }), breaker], key: 'model' });
    // A connection open, then a 429 that pauses the key for a whole window: a probe slower
    // than the pause would release every waiter (a pause cut short by a slow loop that used
    // the window up did, on a loaded CI machine). The 30 wait it out.
    await send(prime, `${server.origin}/warm`);
    assert.equal(await send(prime, server.origin), 429);
    const windows = quota.refused.length;
    const statuses = await concurrently(fetch, server.origin, 30);
    const refused = quota.refused.slice(windows);
    const total = refused.reduce((a, b) => a + b, 0);
    const endedOn429 = statuses.filter((s) => s === 429).length;
    assert.deepEqual(
      statuses.filter((s) => s !== 200 && s !== 429),
      [],
      'every caller ended on a 200 or a 429',
    );
    // All 29 at once after the probe: 26 429s in its window, then 22 and 18 as the
    // callers' retries meet the next windows, also at once: 66 in all, 18 callers ending on
    // one. In doubling steps (the probe's 200 lets 2 go, each 200 2 more) about 5 a window,
    // when a 429 pauses the key again: 30 to 32 in all, 4 to 6 ending on one.
    assert.ok(total <= 45, `${total} 429s (each window's: ${refused})`);
    assert.ok(Math.max(...refused) <= 13, `429s in each window after the pause: ${refused}`);
    assert.ok(endedOn429 <= 11, `${endedOn429} callers ended on a 429`);
  });
});

/**
 * A server whose first answer is a 429 pausing the key 250 ms, whose second (the pace
 * probe) is a 200 at once (faster than the pause, even on a loaded machine: a slow start;
 * after `probe()` settles, if given), and whose later ones are `later`, sent after `ms`. `inFlight()` is the most
 * requests it held at once after the probe; `beforeAnAnswer()` how many arrived after the
 * probe before the first of them was answered.
 */
function fastProbe(
  later: Behaviour,
  ms: number,
  probe?: () => Promise<void>,
): { handler: Handler; inFlight: () => number; beforeAnAnswer: () => number } {
  let holding = 0;
  let most = 0;
  let before = 0;
  let answers = 0;
  const { handler } = stamped(async (index) => {
    if (index === 0) return tooMany(250);
    if (index === 1) {
      await probe?.();
      return { status: 200 };
    }
    if (answers === 0) before++;
    most = Math.max(most, ++holding);
    await delay(ms);
    holding--;
    answers++;
    return later;
  });
  return { handler, inFlight: () => most, beforeAnAnswer: () => before };
}

test('after a pace probe answered faster than the pause lasted, its 200 lets 2 waiters go and each 200 2 more: the calls in flight double every round trip', async () => {
  const { handler, inFlight, beforeAnAnswer } = fastProbe({ status: 200 }, 150);
  await withServer(handler, async (server) => {
    const { fetch } = pacedClient();
    assert.equal(await send(fetch, server.origin), 429);
    // 1 probe and 14 waiters: 2, then 4, then 8 (all at once: 14 in flight).
    assert.deepEqual(await concurrently(fetch, server.origin, 15), Array(15).fill(200));
    assert.equal(server.requests.length, 16);
    assert.equal(beforeAnAnswer(), 2, 'the probe’s 200 let 2 go');
    assert.equal(inFlight(), 8, 'at most 8 in flight: 2, then 4, then 8');
  });
});

test('a pace probe answered 429 with a pause of 1 ms (it came just before a quota window ended) still has the next probe’s 200 start slow: its round trip is weighed against the 250 ms the waiters were held', async () => {
  let holding = 0;
  let most = 0;
  const { handler } = stamped(async (index) => {
    if (index === 0) return tooMany(250);
    if (index === 1) return tooMany(1);
    // The next probe: 20 ms, longer than the 1 ms pause, far shorter than 250 ms.
    if (index === 2) await delay(20);
    else {
      most = Math.max(most, ++holding);
      await delay(150);
      holding--;
    }
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const { fetch } = pacedClient();
    assert.equal(await send(fetch, server.origin), 429);
    // The first probe's caller gets its 429 (no retry here); the second probe's 200 lets
    // 2 of the 13 left go, then 4, then the 7 left. All 13 at once before: a 1 ms pause
    // that ended a 250 ms wait made a 20 ms probe look slow.
    const statuses = await concurrently(fetch, server.origin, 15);
    assert.deepEqual([...statuses].sort(), [200, ...Array(13).fill(200), 429].sort());
    assert.equal(server.requests.length, 16);
    assert.ok(most <= 8, `${most} in flight at once after the probe’s 200`);
  });
});

test('waiters of a pause whose timers fire after the pace probe’s 200 released the key are held by slow start as the others are, not all sent at once', async () => {
  let holding = 0;
  let most = 0;
  const { handler } = stamped(async (index) => {
    if (index === 0) return tooMany(250);
    if (index === 1) return { status: 200 };
    most = Math.max(most, ++holding);
    await delay(300);
    holding--;
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const { clock, fetch } = clockedClient();
    assert.equal(await send(fetch, server.origin), 429);
    // 12 wait the whole 250 ms out. One more joins 200 ms on by the breaker's clock: its
    // timer fires 200 ms before theirs, so it probes, and its 200 comes before their
    // timers fire (timers of one pause fire some ms apart on a busy machine: the same).
    const held = concurrently(fetch, server.origin, 12);
    await delay(20);
    clock.t += 200;
    const statuses = await Promise.all([send(fetch, server.origin), held]);
    assert.deepEqual(statuses.flat(), Array(13).fill(200));
    assert.equal(server.requests.length, 14);
    // The probe's 200 lets 2 go (held 300 ms at the server); the 10 whose timers fire
    // meanwhile wait for their answers: 4 go, then 2 for each answer (6 to 8 in flight,
    // as the answers and the next arrivals interleave). Before: those 10 went as their
    // timers fired, 12 in flight at once.
    assert.ok(most <= 8, `${most} in flight at once after the probe’s 200`);
  });
});

test('a new call while a slow start holds waiters takes its place behind them: it neither goes at once nor overtakes the calls that waited the pause out', async () => {
  const { handler, beforeAnAnswer } = fastProbe({ status: 200 }, 150);
  /**
   * Which calls the breaker let go after the probe, in that order: `w` a waiter of the
   * pause, `n` a new call. Taken below the breaker: the server sees calls let go together
   * in the order their connections happen to open.
   */
  const order: string[] = [];
  let slowStarted: () => void = () => {};
  const started = new Promise<void>((resolve) => {
    slowStarted = resolve;
  });
  const noting: Middleware = async function noting(call, next) {
    order.push(call.href.slice(-1));
    return next(call);
  };
  await withServer(
    (req, index) => {
      if (index === 2) slowStarted();
      return handler(req, index);
    },
    async (server) => {
      const fetch = createFetch({ use: [circuitBreaker({ open: OPEN }), noting], key: 'model' });
      assert.equal(await send(fetch, server.origin), 429);
      order.length = 0;
      // 1 probe and 11 waiters; 10 new calls once the probe's 200 has let the first waiter go.
      const waiters = Promise.all(Array.from({ length: 12 }, () => send(fetch, `${server.origin}/w`)));
      await started;
      const fresh = Promise.all(Array.from({ length: 10 }, () => send(fetch, `${server.origin}/n`)));
      assert.deepEqual([...(await waiters), ...(await fresh)], Array(22).fill(200));
      assert.equal(server.requests.length, 23);
      // Before: the 10 new calls went at once, 12 in flight before the slow start's first
      // answer, ahead of 9 held waiters.
      assert.equal(beforeAnAnswer(), 2, 'the probe’s 200 let 2 go, and nothing else went before an answer');
      // The probe, then the 11 other waiters, then the 10 new calls.
      assert.equal(order.join(''), `${'w'.repeat(12)}${'n'.repeat(10)}`);
    },
  );
});

test('waiters a slow start holds still end at once on their abort, and by their deadline; every other caller goes', async () => {
  let probeArrived: () => void = () => {};
  const arrived = new Promise<void>((resolve) => {
    probeArrived = resolve;
  });
  let answerProbe: () => void = () => {};
  const answered = new Promise<void>((resolve) => {
    answerProbe = resolve;
  });
  const { handler } = fastProbe({ status: 200 }, 200, () => {
    probeArrived();
    return answered;
  });
  await withServer(handler, async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    assert.equal(await send(fetch, server.origin), 429);
    // The probe and 5 more wait the pause out; the probe's 200 lets 2 go, held 200 ms at
    // the server, and holds 3.
    const plain = Array.from({ length: 6 }, () => send(fetch, server.origin));
    await arrived;
    // Two more join while the probe is in flight: they wait for it, behind those 5 (whose
    // timers at the pause's end have all fired by then).
    await delay(10);
    const controller = new AbortController();
    const reason = new Error('the user left');
    const aborted = send(fetch, `${server.origin}/aborted`, { signal: controller.signal });
    const bounded = createFetch({ use: [timeout({ totalMs: 150 }), breaker], key: 'model' });
    const late = send(bounded, `${server.origin}/late`);
    await delay(20);
    answerProbe();
    await delay(50);
    controller.abort(reason);
    const [abortedOutcome, lateOutcome, ...rest] = await Promise.allSettled([aborted, late, ...plain]);
    assert.deepEqual(abortedOutcome, { status: 'rejected', reason });
    // Held past its deadline (150 ms; the first 200s come 200 ms after the probe's): its
    // timeout ends it, or the breaker refuses it then (whichever timer fires first).
    assert.ok(
      lateOutcome?.status === 'rejected' &&
        (lateOutcome.reason instanceof TimeoutError || lateOutcome.reason instanceof CircuitOpenError),
      String(lateOutcome?.status === 'rejected' ? lateOutcome.reason : lateOutcome?.value),
    );
    assert.deepEqual(rest, Array(6).fill({ status: 'fulfilled', value: 200 }));
    assert.deepEqual(
      server.requests.filter((r) => r.url !== '/').map((r) => r.url),
      [],
      'neither the aborted call nor the late one was sent',
    );
  });
});

test('a waiter a slow start holds until its deadline is refused then, not sent with no time left', async () => {
  let probeArrived: () => void = () => {};
  const arrived = new Promise<void>((resolve) => {
    probeArrived = resolve;
  });
  const { handler } = fastProbe({ status: 200 }, 200, async () => {
    probeArrived();
    await delay(40);
  });
  await withServer(handler, async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    assert.equal(await send(fetch, server.origin), 429);
    const plain = Array.from({ length: 6 }, () => send(fetch, server.origin));
    await arrived;
    await delay(10);
    // Joins while the probe is in flight, behind 5 others (whose timers at the pause's end
    // have all fired by then): its deadline (100 ms, with no
    // timer of its own, as definePolicy()'s total deadline) comes while it is held, before
    // the first 200s the probe's let go (200 ms on) let more go.
    const late = createFetch({ use: [deadline, breaker], key: 'model' });
    await assert.rejects(send(late, `${server.origin}/late`), (error: unknown) => {
      assert.ok(error instanceof CircuitOpenError, String(error));
      assert.match(error.message, /past this call's deadline/);
      return true;
    });
    assert.deepEqual(await Promise.all(plain), Array(6).fill(200));
    assert.ok(!server.requests.some((r) => r.url === '/late'), 'the late call was not sent');
  });
});

test('waiters a slow start holds go when the calls it let go fail: each failure lets one more go, so none is left waiting', async () => {
  const { handler } = fastProbe({ status: 500 }, 50);
  await withServer(handler, async (server) => {
    const breaker = circuitBreaker({ open: OPEN, consecutiveFailures: 100 });
    const fetch = createFetch({ use: [breaker], key: 'model' });
    assert.equal(await send(fetch, server.origin), 429);
    // A deadline far past the 5 rounds of 50 ms they need, far short of maxRetryAfterMs
    // (60 s), when a waiter left behind would go: it ends in a TimeoutError instead.
    const bounded = createFetch({ use: [timeout({ totalMs: 3_000 }), breaker], key: 'model' });
    const statuses = await concurrently(bounded, server.origin, 10);
    assert.deepEqual([...statuses].sort(), [200, ...Array(9).fill(500)]);
    assert.equal(server.requests.length, 11);
    assert.equal(breaker.stats('model')?.state, 'closed');
  });
});

test('waiters a slow start holds that are aborted let no other held waiter go: only the answers of calls in flight do', async () => {
  let probeArrived: () => void = () => {};
  const arrived = new Promise<void>((resolve) => {
    probeArrived = resolve;
  });
  const { handler, inFlight } = fastProbe({ status: 200 }, 300, async () => {
    probeArrived();
    await delay(40);
  });
  await withServer(handler, async (server) => {
    const { fetch } = pacedClient();
    assert.equal(await send(fetch, server.origin), 429);
    const controller = new AbortController();
    // Outcomes are taken at once (a rejection left for later is an unhandled one on Deno).
    const outcome = (call: Promise<number>) => call.catch((error: Error) => error.name);
    // The probe, the 2 its 200 lets go (at the server for 300 ms), and 4 held; then 6 held
    // that the user aborts meanwhile, added while the probe is in flight (a pause's timers
    // fire in any order: one of them could be the probe). Each abort woke the next held
    // waiter, which went: all 4 at once, 6 in flight where the slow start allows 2.
    const plain = Array.from({ length: 7 }, () => outcome(send(fetch, server.origin)));
    await arrived;
    const aborted = Array.from({ length: 6 }, () =>
      outcome(send(fetch, `${server.origin}/aborted`, { signal: controller.signal })),
    );
    await delay(140); // the probe answered 100 ms ago: 2 in flight for 300 ms
    controller.abort();
    assert.deepEqual(await Promise.all(aborted), Array(6).fill('AbortError'));
    assert.deepEqual(await Promise.all(plain), Array(7).fill(200));
    // 2, then the 4 their two 200s let go.
    assert.equal(inFlight(), 4, 'at most 4 in flight: 2, then 4');
  });
});

test('a call waiting out a pause reports its wait once when another waiter of that pause is aborted', async () => {
  await withServer(sequence(tooMany(300), { status: 200 }), async (server) => {
    const { fetch, events } = pacedClient();
    assert.equal(await send(fetch, server.origin), 429);
    const controller = new AbortController();
    const aborted = send(fetch, server.origin, { signal: controller.signal });
    const waiting = send(fetch, server.origin);
    await delay(50);
    controller.abort();
    await assert.rejects(aborted, { name: 'AbortError' });
    assert.equal(await waiting, 200);
    const waits = events.filter((e) => e.type === 'paced' && e.phase === 'wait');
    assert.equal(waits.length, 2, 'each of the 2 calls reported its wait once');
  });
});

test('a pace probe answered by a redirect auth() follows releases the key as its answer would: the waiters are not sent one at a time, each behind the last one’s redirect', async () => {
  const log: string[] = [];
  let paused = false;
  const handler: Handler = async (req) => {
    log.push(req.url ?? '');
    if (!paused) {
      paused = true;
      return tooMany(100);
    }
    await delay(50);
    return req.url === '/a' ? { status: 302, headers: { location: '/b' } } : { status: 200 };
  };
  await withServer(handler, async (server) => {
    const breaker = circuitBreaker({ open: OPEN });
    // A key in another header than Authorization: auth() follows redirects itself.
    const fetch = createFetch({
      use: [auth({ token: 'k-1234567890', header: 'x-api-key', scheme: '' }), breaker],
      key: 'model',
    });
    assert.equal(await send(fetch, `${server.origin}/a`), 429);
    assert.deepEqual(await concurrently(fetch, `${server.origin}/a`, 8), Array(8).fill(200));
    // The probe's 302 counted for nothing, so it handed the probe on to the next waiter,
    // whose 302 handed it on again: all 8 /a one at a time (each 50 ms), then the hops.
    // As the redirect it is, its hop goes at once, and the slow start lets 2 waiters go.
    assert.ok(log.indexOf('/b') <= 5, `arrivals: ${log.join(' ')}`);
  });
});

test('a slow start past the ceiling an earlier refusal set grows by 1 call a round trip once ten pauses have gone: closed-loop callers reach the room a recovered server has, not the ceiling for good', async () => {
  // The server: a 429 pausing the key 60 ms, then a fast 200 (a slow start), then room
  // for 2 calls at once, refusing a third with a 60 ms pause (which sets the ceiling at 1
  // or 2), and after that refusal room for all: each call held 20 ms.
  let holding = 0;
  let recovered = false;
  /** The most calls the server held at once after it had room for all. */
  let most = 0;
  const { handler } = stamped(async (index) => {
    if (index === 0) return tooMany(60);
    if (index === 1) return { status: 200 };
    if (!recovered && holding >= 2) {
      recovered = true;
      return tooMany(60);
    }
    holding++;
    if (recovered) most = Math.max(most, holding);
    await delay(20);
    holding--;
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const { fetch } = pacedClient();
    assert.equal(await send(fetch, server.origin), 429);
    // 12 callers, each sending its next call when the last one is answered: 360 calls.
    // Their next calls queue behind the held ones, so the queue never drains by itself.
    const statuses = await closedLoop(fetch, server.origin, 12, 30);
    assert.ok(recovered, 'a call met the server’s first limit');
    assert.ok(statuses.filter((s) => s !== 200).length <= 1, `statuses: ${statuses}`);
    // Before: each answer past the ceiling let exactly 1 go, so the calls out stayed at
    // the ceiling (2 or 3 in flight at once) for all 360 calls. Now, 600 ms (ten pauses)
    // after the pace probe, 1 more per round trip: to 12 in about 10 round trips.
    assert.ok(most >= 8, `${most} in flight at once after the server had room`);
  });
});

test('a slow start that grew past its ceiling 1 call at a time and met a refusal doubles next up to 1 call short of that, not half: a server with room for 6 keeps about 6 in flight between probes', async () => {
  // Room for 6 at once; a 7th is refused with a 40 ms pause. Each call is held 20 ms.
  let holding = 0;
  let refusals = 0;
  /** Calls the server held at each arrival after its second refusal (the first past a grown ceiling, or the second overshoot). */
  const seen: number[] = [];
  const { handler } = stamped(async (index) => {
    if (index === 0) return tooMany(40);
    if (holding >= 6) {
      refusals++;
      return tooMany(40);
    }
    holding++;
    if (refusals >= 2) seen.push(holding);
    await delay(20);
    holding--;
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const { fetch } = pacedClient();
    assert.equal(await send(fetch, server.origin), 429);
    // 16 closed-loop callers, 40 calls each.
    await closedLoop(fetch, server.origin, 16, 40);
    assert.ok(refusals >= 2, `${refusals} refusals`);
    const high = seen.filter((n) => n >= 4).length / seen.length;
    const counts = JSON.stringify([1, 2, 3, 4, 5, 6].map((n) => seen.filter((x) => x === n).length));
    // Halving after each probe held 3 for the ten pauses between probes: about 1 arrival
    // in 6 found 4 or more in flight (Node: 1, 2, ... 6 in flight at 150, 174, 186, 51,
    // 30, 26 arrivals). 1 short of the limit: about 6 in 10 (70, 79, 78, 137, 118, 137).
    assert.ok(
      high >= 0.4,
      `${Math.round(high * 100)}% of ${seen.length} arrivals found 4 or more in flight (${refusals} refusals; 1 to 6 in flight: ${counts})`,
    );
  });
});

test('a slow start past its ceiling waits ten of the longest pause its waiters were held for before it grows, not ten of a 1 ms pause a pace probe met just before a quota window ended', async () => {
  // A 429 pausing 250 ms; the pace probe's fast 200 starts slow; a third call at once is
  // refused with a 200 ms pause (the ceiling: 2 or 3). That pause's probe meets a 429 of 1 ms
  // (a quota window ending), and the next probe's 200 starts slow again: from then on,
  // each call held 30 ms.
  let holding = 0;
  let refusedAt = 0;
  let quick = false;
  /** The most calls the server held at once after the 1 ms pause. */
  let most = 0;
  const { handler } = stamped(async (index) => {
    if (index === 0) return tooMany(250);
    if (index === 1) return { status: 200 };
    if (!refusedAt && holding >= 2) {
      refusedAt = Date.now();
      return tooMany(200);
    }
    // The first call after that pause: its pace probe.
    if (refusedAt && !quick && Date.now() - refusedAt >= 150) {
      quick = true;
      return tooMany(1);
    }
    holding++;
    if (quick) most = Math.max(most, holding);
    await delay(30);
    holding--;
    return { status: 200 };
  });
  await withServer(handler, async (server) => {
    const { fetch } = pacedClient();
    assert.equal(await send(fetch, server.origin), 429);
    const statuses = await concurrently(fetch, server.origin, 48);
    assert.ok(quick, 'a probe met the 1 ms pause');
    assert.equal(statuses.filter((s) => s === 429).length, 2, `statuses: ${statuses}`);
    // The waiters were held 200 ms: growth waits 2 s, past this test's end, and each
    // answer lets 1 go (2 in flight). Before: ten 1 ms pauses, 10 ms after the probe, so it
    // grew at once, 1 call a round trip: 4 or more in flight.
    assert.ok(most <= 3, `${most} in flight at once after the 1 ms pause`);
  });
});

test('answers to calls sent before the pause, arriving after the pace probe’s 200 released the key, let none of the waiters a slow start holds go: 10 late 429s sent none of them at once', async () => {
  /** Calls that reached the server after the probe before the first of them was answered. */
  let before = 0;
  let answered = false;
  let probed = false;
  await withServer(
    async (req) => {
      // 10 calls the server holds 400 ms and refuses (sent before the pause), one refused at
      // once (the pause: 250 ms), the pace probe's 200 at once, then each call held 300 ms.
      if (req.url === '/late') {
        await delay(400);
        return tooMany(250);
      }
      if (req.url === '/first') return tooMany(250);
      if (!probed) {
        probed = true;
        return { status: 200 };
      }
      if (!answered) before++;
      await delay(300);
      answered = true;
      return { status: 200 };
    },
    async (server) => {
      const { fetch } = pacedClient();
      const late = concurrently(fetch, `${server.origin}/late`, 10);
      await delay(30);
      assert.equal(await send(fetch, `${server.origin}/first`), 429);
      // The probe and 13 held: 3 rounds of 300 ms (2, 4, 7), where 29 took 4.
      const waiters = concurrently(fetch, `${server.origin}/w`, 14);
      assert.deepEqual(await late, Array(10).fill(429));
      assert.deepEqual(await waiters, Array(14).fill(200));
      // The probe's 200 let 2 go, and the late 429s (at 400 ms, before their first answer at
      // about 580 ms) none. Before: each let 2 more go, all 13 in flight before an answer.
      assert.equal(before, 2, `${before} went before the first answer`);
    },
  );
});

test('a 200 saying the quota is used up during a slow start lowers no ceiling: a quota is not a limit on calls at once, and after its reset the calls out double back up', async () => {
  // No limit on calls at once: a 429 pausing the key 60 ms first, then 200s held 20 ms
  // each, one of which (the 21st request) says the request quota is used up for 60 ms.
  let holding = 0;
  let quotaAt = 0;
  /** Calls the server held at each of the first 60 arrivals after the quota's reset. */
  const after: number[] = [];
  const { handler } = stamped(async (index) => {
    if (index === 0) return tooMany(60);
    holding++;
    if (quotaAt && Date.now() >= quotaAt + 60 && after.length < 60) after.push(holding);
    await delay(20);
    holding--;
    if (index !== 20) return { status: 200 };
    quotaAt = Date.now();
    return {
      status: 200,
      headers: { 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '60ms' },
    };
  });
  await withServer(handler, async (server) => {
    const { fetch } = pacedClient();
    assert.equal(await send(fetch, server.origin), 429);
    // 240 calls: the 60 arrivals measured have come by about the 90th request (40 each
    // made 480, the last 390 measured by nothing).
    const statuses = await closedLoop(fetch, server.origin, 12, 20);
    assert.deepEqual(new Set(statuses), new Set([200]));
    assert.equal(after.length, 60, 'the quota answer was sent, and 60 calls came after its reset');
    // Before, the quota's pause set the ceiling at half the calls out (4 to 6), where the
    // slow start after the reset stopped doubling for ten pauses: at most 5 held at once
    // in those 60 arrivals. Now it doubles back to all 12 callers within a few round trips.
    const most = Math.max(...after);
    assert.ok(
      most >= 10,
      `at most ${most} in flight in the 60 arrivals after the reset (${after.join(' ')})`,
    );
  });
});

test('calls that wait a pause out with one shared signal (the MCP SDK’s) add one abort listener to it, not one each, and an abort still ends them all', async () => {
  // 20 MCP tool calls held by one 429 put 20 listeners on the transport's one signal, and
  // Node printed MaxListenersExceededWarning at the 11th.
  await withServer(sequence(tooMany(60_000), { status: 200 }), async (server) => {
    const { fetch } = pacedClient();
    assert.equal(await send(fetch, server.origin), 429);
    const { controller, signal, most } = countedSignal();
    const calls = Array.from({ length: 20 }, () =>
      fetch(server.origin, { signal }).catch((error: unknown) => error),
    );
    await delay(10);
    assert.equal(most(), 1, 'abort listeners on the shared signal while 20 calls wait out the pause');
    const reason = new Error('user left');
    controller.abort(reason);
    assert.deepEqual(await Promise.all(calls), Array(20).fill(reason));
    assert.equal(server.requests.length, 1);
  });
});

test('a 429 with Retry-After: 1 whose body trickles pauses the key until 1 s after its headers arrived, not 1 s after captureStatus() gave up reading the body', async () => {
  const events: BreakwaterEvent[] = [];
  const { headersSent, later } = await withTrickledAnswer(429, async (origin) => {
    const fetch = createFetch({
      use: [circuitBreaker(), captureStatus({ bodyWaitMs: 500 })],
      key: 'model',
      onEvent: (event) => events.push(event),
    });
    const refused = await fetch(origin);
    assert.equal(refused.status, 429);
    await refused.body?.cancel();
    // Sent at once: it waits out the key's pause, then goes.
    assert.equal(await send(fetch, origin), 200);
  });
  assert.equal(later.length, 1, 'the second call went once');
  const gap = (later[0] as number) - headersSent;
  // The body read took 500 ms of the server's 1,000: the pause ended 500 ms after it, not
  // a full second after it (1,500 ms after the headers).
  assert.ok(gap >= 990, `sent ${gap.toFixed(0)} ms after the 429's headers: inside its window`);
  assert.ok(gap < 1_350, `sent ${gap.toFixed(0)} ms after the 429's headers, not about 1,000`);
  const start = events.find((e): e is PacedEvent => e.type === 'paced' && e.phase === 'start');
  assert.ok((start?.delayMs ?? 0) <= 600, `the pause is what was left of the wait: ${start?.delayMs} ms`);
});

test('a 429 with Retry-After: 1 whose body trickles, thrown by a throwOnStatus() below the breaker, pauses the key until 1 s after its headers arrived, not 1 s after the throw', async () => {
  const { headersSent, later } = await withTrickledAnswer(429, async (origin) => {
    const fetch = createFetch({ use: [circuitBreaker(), throwOnStatus()], key: 'model' });
    const refused = await fetch(origin).catch((e: unknown) => e);
    assert.ok(refused instanceof HttpStatusError, String(refused));
    // Sent at once: it waits out the key's pause, then goes.
    assert.equal(await send(fetch, origin), 200);
  });
  assert.equal(later.length, 1, 'the second call went once');
  const gap = (later[0] as number) - headersSent;
  // throwOnStatus() read the body's start for a second (bodyWaitMs) before it threw: the
  // pause was a full second from the throw, 2,000 ms after the headers.
  assert.ok(gap >= 990, `sent ${gap.toFixed(0)} ms after the 429's headers: inside its window`);
  assert.ok(gap < 1_500, `sent ${gap.toFixed(0)} ms after the 429's headers, not about 1,000`);
});
