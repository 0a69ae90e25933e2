import assert from 'node:assert/strict';
import process from 'node:process';
import { test } from 'node:test';
import { circuitBreaker } from '../src/breaker.ts';
import { createFetch } from '../src/chain.ts';
import {
  BreakwaterError,
  CircuitOpenError,
  GateClosedError,
  HttpStatusError,
  NetworkError,
  RetryAfterTooLongError,
  TimeoutError,
} from '../src/errors.ts';
import { createGate, type GateOptions } from '../src/gate.ts';
import { refusedRetryAt } from './helpers/refused.ts';
import { always, closedPort, withServer } from './helpers/server.ts';

const START = Date.UTC(2025, 0, 1);

/** A gate on a hand-moved clock with an exact schedule: 500 ms doubling, no jitter. */
function fixture(options: GateOptions = {}) {
  const clock = { t: START };
  const gate = createGate({
    key: 'mcp:github',
    schedule: { initialMs: 500, factor: 2, maxMs: 32_000, jitter: 'none' },
    now: () => clock.t,
    ...options,
  });
  let calls = 0;
  /** Runs an operation through the gate that fails with `error` (or succeeds when undefined). */
  const attempt = (error?: unknown): Promise<string> =>
    gate.run(async () => {
      calls++;
      if (error !== undefined) throw error;
      return 'connected';
    });
  return { clock, gate, attempt, calls: () => calls };
}

const unavailable = (retryAfterMs?: number): HttpStatusError =>
  new HttpStatusError({
    status: 503,
    retryable: true,
    ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
  });
const refused = (): NetworkError => new NetworkError({ code: 'ECONNREFUSED', phase: 'connect', sent: 'no' });

/** A promise with its settle functions outside, for holding an operation in flight. */
function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

test('a retryable HttpStatusError arms the gate, and comes back to the caller unchanged', async () => {
  const { gate, attempt } = fixture();
  const error = unavailable();
  await assert.rejects(attempt(error), (e) => e === error);
  const state = gate.state();
  assert.equal(state.armed, true);
  assert.equal(state.failures, 1);
  assert.equal(state.retryAt?.getTime(), START + 500);
  assert.equal(state.cause, error);
});

test('while armed, run rejects with GateClosedError and does not call fn', async () => {
  const { clock, attempt, calls } = fixture();
  await assert.rejects(attempt(unavailable()), HttpStatusError);
  assert.equal(calls(), 1);
  clock.t += 499;
  await assert.rejects(attempt(), GateClosedError);
  await assert.rejects(attempt(), GateClosedError);
  assert.equal(calls(), 1, 'fn was not called inside the window');
});

test('the GateClosedError carries the key, retryAt and the failure that armed the gate', async () => {
  const { clock, attempt } = fixture();
  const error = unavailable();
  await assert.rejects(attempt(error));
  clock.t += 100;
  await assert.rejects(attempt(), (e: unknown) => {
    assert.ok(e instanceof GateClosedError, 'e instanceof GateClosedError');
    assert.ok(e instanceof BreakwaterError, 'e instanceof BreakwaterError');
    assert.equal(e.code, 'GATE_CLOSED');
    assert.equal(e.key, 'mcp:github');
    assert.equal(e.retryAt.getTime(), START + 500);
    assert.equal(e.cause, error);
    assert.match(e.message, /start gate "mcp:github" is closed/);
    assert.match(e.message, /HTTP 503/);
    assert.match(e.message, /\(in 0\.4 s\)/);
    return true;
  });
});

test('an auth failure (401, not retryable) never arms the gate', async () => {
  const { gate, attempt, calls } = fixture();
  const error = new HttpStatusError({ status: 401, retryable: false });
  await assert.rejects(attempt(error), (e) => e === error);
  await assert.rejects(attempt(new HttpStatusError({ status: 403 })), HttpStatusError);
  await assert.rejects(attempt(error), (e) => e === error);
  assert.equal(calls(), 3);
  assert.deepEqual(gate.state(), { armed: false, failures: 0, probing: false });
});

test('a TypeError (a config or programming error) never arms the gate', async () => {
  const { gate, attempt, calls } = fixture();
  const error = new TypeError('invalid URL');
  await assert.rejects(attempt(error), (e) => e === error);
  await assert.rejects(attempt(error), (e) => e === error);
  assert.equal(calls(), 2);
  assert.equal(gate.state().armed, false);
});

test('a user abort never arms the gate', async () => {
  const { gate, attempt, calls } = fixture({ isCrashLoop: () => true });
  const controller = new AbortController();
  controller.abort();
  await assert.rejects(attempt(controller.signal.reason), { name: 'AbortError' });
  await assert.rejects(attempt(new DOMException('stop', 'AbortError')), { name: 'AbortError' });
  assert.equal(calls(), 2);
  assert.equal(gate.state().armed, false);
  assert.equal(gate.state().failures, 0);
});

test('a non-arming error leaves an armed gate as it was', async () => {
  const { clock, gate, attempt } = fixture();
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  const auth = new HttpStatusError({ status: 401 });
  await assert.rejects(attempt(auth), (e) => e === auth);
  const state = gate.state();
  assert.equal(state.failures, 1);
  assert.equal(state.retryAt?.getTime(), START + 500);
  assert.equal(state.armed, false, 'the window has passed; the next run may try');
});

test('a NetworkError arms the gate', async () => {
  const { gate, attempt } = fixture();
  await assert.rejects(attempt(refused()), NetworkError);
  assert.equal(gate.state().armed, true);
  assert.equal(gate.state().failures, 1);
});

test('a TimeoutError arms the gate', async () => {
  const { gate, attempt } = fixture();
  await assert.rejects(attempt(new TimeoutError({ scope: 'attempt', ms: 30_000 })), TimeoutError);
  assert.equal(gate.state().armed, true);
});

test('an error isCrashLoop accepts arms the gate; others pass through', async () => {
  const seen: unknown[] = [];
  const { gate, attempt } = fixture({
    isCrashLoop: (error) => {
      seen.push(error);
      return error instanceof Error && error.message === 'server process exited with code 1';
    },
  });
  await assert.rejects(attempt(new Error('bad tool schema')));
  assert.equal(gate.state().armed, false);
  const crash = new Error('server process exited with code 1');
  await assert.rejects(attempt(crash), (e) => e === crash);
  assert.equal(gate.state().armed, true);
  assert.equal(gate.state().cause, crash);
  assert.equal(seen.length, 2);
});

test('isCrashLoop is not asked about HTTP statuses: a 401 stays non-arming', async () => {
  const { gate, attempt } = fixture({ isCrashLoop: () => true });
  await assert.rejects(attempt(new HttpStatusError({ status: 401 })));
  assert.equal(gate.state().armed, false);
});

test('an isCrashLoop that throws does not arm the gate nor replace the error', async () => {
  const { gate, attempt } = fixture({
    isCrashLoop: () => {
      throw new Error('predicate bug');
    },
  });
  const error = new Error('exited');
  await assert.rejects(attempt(error), (e) => e === error);
  assert.equal(gate.state().armed, false);
});

test("a server's Retry-After stretches the window beyond the backoff step", async () => {
  const { gate, attempt } = fixture();
  await assert.rejects(attempt(unavailable(5000)));
  const retryAt = gate.state().retryAt?.getTime() ?? 0;
  assert.ok(retryAt >= START + 5000, `retryAt ${retryAt - START} ms from now`);
  assert.equal(retryAt, START + 5000);
});

test('a Retry-After shorter than the backoff step does not shorten the window', async () => {
  const { gate, attempt } = fixture();
  await assert.rejects(attempt(unavailable(100)));
  assert.equal(gate.state().retryAt?.getTime(), START + 500);
});

test('a Retry-After is capped at maxRetryAfterMs', async () => {
  const { gate, attempt } = fixture({ maxRetryAfterMs: 10_000 });
  await assert.rejects(attempt(unavailable(3_600_000)));
  assert.equal(gate.state().retryAt?.getTime(), START + 10_000);
});

test('the default Retry-After cap is 60 s', async () => {
  const { gate, attempt } = fixture();
  await assert.rejects(attempt(unavailable(3_600_000)));
  assert.equal(gate.state().retryAt?.getTime(), START + 60_000);
});

test('consecutive failures grow the window along the schedule', async () => {
  const { clock, gate, attempt } = fixture();
  const windows: number[] = [];
  for (let n = 1; n <= 4; n++) {
    await assert.rejects(attempt(unavailable()), HttpStatusError);
    const retryAt = gate.state().retryAt?.getTime() ?? 0;
    windows.push(retryAt - clock.t);
    clock.t = retryAt;
  }
  assert.deepEqual(windows, [500, 1000, 2000, 4000]);
  assert.equal(gate.state().failures, 4);
});

test('a success after the window clears the gate, and the next window starts small again', async () => {
  const { clock, gate, attempt, calls } = fixture();
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  await assert.rejects(attempt(unavailable()));
  clock.t += 1000;
  assert.equal(await attempt(), 'connected');
  assert.equal(calls(), 3);
  assert.deepEqual(gate.state(), { armed: false, failures: 0, probing: false });
  await assert.rejects(attempt(refused()));
  assert.equal(gate.state().retryAt?.getTime(), clock.t + 500);
});

test('reset() clears an armed gate at once', async () => {
  const { gate, attempt, calls } = fixture();
  await assert.rejects(attempt(unavailable(30_000)));
  gate.reset();
  assert.deepEqual(gate.state(), { armed: false, failures: 0, probing: false });
  assert.equal(await attempt(), 'connected');
  assert.equal(calls(), 2);
});

test('after the window one probe runs; concurrent callers fail fast until it settles', async () => {
  const { clock, gate, attempt } = fixture();
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  const held = deferred<string>();
  let probes = 0;
  const probe = gate.run(() => {
    probes++;
    return held.promise;
  });
  assert.equal(gate.state().probing, true);
  assert.equal(gate.state().armed, true);
  let others = 0;
  await assert.rejects(
    gate.run(async () => {
      others++;
    }),
    (e: unknown) => e instanceof GateClosedError && e.retryAt.getTime() === clock.t + 500,
  );
  assert.equal(others, 0, 'a concurrent caller was not let through');
  held.resolve('connected');
  assert.equal(await probe, 'connected');
  assert.equal(probes, 1);
  assert.deepEqual(gate.state(), { armed: false, failures: 0, probing: false });
  assert.equal(await attempt(), 'connected');
});

test('callers refused while the probe is in flight get a retryAt one window step on, later the longer it hangs, never past its lease', async () => {
  // A client that sleeps until retryAt must not spin: a retryAt of now refused it again
  // at once, for as long as the probe hung (up to its 60 s lease). As the breaker does.
  const refusedAt: number[] = [];
  const { clock, gate, attempt } = fixture({
    onEvent: (event) => {
      if (event.state === 'refused') refusedAt.push(event.retryAt?.getTime() as number);
    },
  });
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  const probeAt = clock.t;
  void gate.run(() => new Promise<string>(() => {})); // a connect that never returns
  const retryAt = () => refusedRetryAt(attempt(), GateClosedError);
  assert.equal(await retryAt(), clock.t + 500, 'at first: the window step just served (500 ms)');
  clock.t += 2_000;
  assert.equal(await retryAt(), clock.t + 2_000, 'after 2 s in flight: as long again');
  clock.t = probeAt + 60_000 - 10;
  assert.equal(await retryAt(), probeAt + 60_000, 'never past the lease, when the next run probes');
  assert.deepEqual(
    refusedAt,
    [probeAt + 500, probeAt + 4_000, probeAt + 60_000],
    "'refused' events say the same",
  );
  clock.t = probeAt + 60_000;
  assert.equal(await attempt(), 'connected', 'the next run probes at the lease end');
});

test('a failed probe arms the next, longer window', async () => {
  const { clock, gate, attempt } = fixture();
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  await assert.rejects(attempt(refused()), NetworkError);
  assert.equal(gate.state().probing, false);
  assert.equal(gate.state().failures, 2);
  assert.equal(gate.state().retryAt?.getTime(), clock.t + 1000);
});

test('a probe that never settles holds the gate for at most 60 s; then the next caller probes', async () => {
  const { clock, gate, attempt, calls } = fixture();
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  void gate.run(() => new Promise<string>(() => {})); // a connect that never returns
  clock.t += 59_999;
  await assert.rejects(attempt(), GateClosedError, 'the probe still holds its slot');
  assert.equal(gate.state().probing, true);
  clock.t += 1;
  assert.deepEqual(
    { armed: gate.state().armed, probing: gate.state().probing },
    { armed: false, probing: false },
    'state() says what run() does: the next caller may probe',
  );
  assert.equal(await attempt(), 'connected', 'the lease ran out: this call probes instead');
  assert.equal(calls(), 2);
  assert.deepEqual(gate.state(), { armed: false, failures: 0, probing: false });
});

test('a probe that fails without arming lets the next caller probe again', async () => {
  const { clock, gate, attempt, calls } = fixture();
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  await assert.rejects(attempt(new TypeError('bad config')), TypeError);
  assert.equal(gate.state().probing, false);
  assert.equal(await attempt(), 'connected');
  assert.equal(calls(), 3);
});

test('without a window, concurrent runs all go through; a late failure never shortens the window', async () => {
  const { gate } = fixture();
  const first = deferred<string>();
  const second = deferred<string>();
  const a = gate.run(() => first.promise);
  const b = gate.run(() => second.promise);
  first.reject(unavailable(5000));
  await assert.rejects(a, HttpStatusError);
  second.reject(unavailable());
  await assert.rejects(b, HttpStatusError);
  assert.equal(gate.state().failures, 1, 'in flight when the gate armed: the same failure told again');
  assert.equal(gate.state().retryAt?.getTime(), START + 5000, 'not cut to the 1000 ms step');
});

test('a success clears the gate even if a concurrent call armed it meanwhile', async () => {
  const { gate } = fixture();
  const slow = deferred<string>();
  const ok = gate.run(() => slow.promise);
  await assert.rejects(
    gate.run(async () => {
      throw unavailable();
    }),
  );
  assert.equal(gate.state().armed, true);
  slow.resolve('connected');
  assert.equal(await ok, 'connected');
  assert.equal(gate.state().armed, false);
});

test('a success while a probe runs clears the gate: state() says what run() does', async () => {
  const { clock, gate, attempt } = fixture();
  const slow = deferred<string>();
  const early = gate.run(() => slow.promise); // started before the gate armed
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  const held = deferred<string>();
  const probe = gate.run(() => held.promise);
  slow.resolve('connected');
  assert.equal(await early, 'connected');
  assert.deepEqual(gate.state(), { armed: false, failures: 0, probing: false });
  assert.equal(await attempt(), 'connected', 'run() goes through, as state() says');
  held.resolve('connected');
  assert.equal(await probe, 'connected');
});

test("a RetryAfterTooLongError arms the gate for the server's delay, up to maxRetryAfterMs", async () => {
  // retry() fails fast with it when a 429 asks for a longer wait than it may sleep: the
  // server asked for quiet, so the next start must not go before then either.
  const tooLong = (retryAfterMs: number): RetryAfterTooLongError =>
    new RetryAfterTooLongError({ retryAfterMs, limitMs: 1_000, cause: unavailable(retryAfterMs) });
  const { gate, attempt, calls } = fixture({ maxRetryAfterMs: 20_000 });
  await assert.rejects(attempt(tooLong(5_000)), RetryAfterTooLongError);
  assert.equal(gate.state().retryAt?.getTime(), START + 5_000);
  await assert.rejects(attempt(), GateClosedError);
  assert.equal(calls(), 1);
  const capped = fixture({ maxRetryAfterMs: 20_000 });
  await assert.rejects(capped.attempt(tooLong(300_000)), RetryAfterTooLongError);
  assert.equal(capped.gate.state().retryAt?.getTime(), START + 20_000);
});

test('a reset during a probe lets callers through, and the old probe cannot end a new one', async () => {
  const { clock, gate, attempt } = fixture();
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  const old = deferred<string>();
  const oldProbe = gate.run(() => old.promise);
  gate.reset();
  assert.equal(await attempt(), 'connected');
  old.resolve('late');
  assert.equal(await oldProbe, 'late');
  assert.deepEqual(gate.state(), { armed: false, failures: 0, probing: false });
});

test('a hung probe that fails after a newer probe cleared the gate does not arm it again', async () => {
  // The breaker's epochs: an outcome counts only where it was sent. The stale probe's
  // failure is older news than the newer probe's success, so the next connect must go.
  const { clock, gate, attempt, calls } = fixture();
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  const hung = deferred<string>();
  const stale = gate.run(() => hung.promise);
  clock.t += 60_000; // its lease runs out
  assert.equal(await attempt(), 'connected', 'the newer probe clears the gate');
  const error = refused();
  hung.reject(error);
  await assert.rejects(stale, (e) => e === error, 'its error still comes back unchanged');
  assert.deepEqual(gate.state(), { armed: false, failures: 0, probing: false });
  assert.equal(await attempt(), 'connected', 'the next connect is not refused');
  assert.equal(calls(), 3);
});

test('a run that started before reset() and fails after it does not arm the gate', async () => {
  const { gate, attempt } = fixture();
  const slow = deferred<string>();
  const before = gate.run(() => slow.promise);
  gate.reset();
  slow.reject(unavailable(30_000));
  await assert.rejects(before, HttpStatusError);
  assert.deepEqual(gate.state(), { armed: false, failures: 0, probing: false });
  assert.equal(await attempt(), 'connected');
});

test('a run that started before the last success still clears the gate when it succeeds', async () => {
  // A success is news from its end (the server just answered), a failure may be news
  // from its start (a hang that ended in a timeout): so a stale success still clears.
  const { gate, attempt } = fixture();
  const slow = deferred<string>();
  const early = gate.run(() => slow.promise);
  assert.equal(await attempt(), 'connected');
  await assert.rejects(attempt(refused()), NetworkError);
  assert.equal(gate.state().armed, true, 'a run started after the success arms it');
  slow.resolve('connected');
  assert.equal(await early, 'connected');
  assert.deepEqual(gate.state(), { armed: false, failures: 0, probing: false });
});

test('fn throwing synchronously is a rejection, not a throw from run', async () => {
  const { gate } = fixture();
  const error = refused();
  const result = gate.run(() => {
    throw error;
  });
  await assert.rejects(result, (e) => e === error);
  assert.equal(gate.state().armed, true);
});

test('the defaults: key "gate", 500 ms first window with up to +30% spread, real clock', async () => {
  const gate = createGate();
  const before = Date.now();
  await assert.rejects(
    gate.run(async () => {
      throw unavailable();
    }),
  );
  const after = Date.now();
  const retryAt = gate.state().retryAt?.getTime() ?? 0;
  assert.ok(retryAt >= before + 500 && retryAt <= after + 650, `window ${retryAt - before} ms`);
  await assert.rejects(
    gate.run(async () => 1),
    /start gate "gate" is closed/,
  );
});

test('bad createGate options are one TypeError naming every path and value', () => {
  assert.throws(
    () =>
      createGate({
        key: '',
        maxRetryAfterMs: -1,
        schedule: { factor: 0, jitter: 'often' as never },
        now: 5 as never,
      }),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, 'error instanceof TypeError');
      assert.match(error.message, /createGate\(\)\.key: .*\(got ""\)/);
      assert.match(error.message, /createGate\(\)\.maxRetryAfterMs: .*\(got -1\)/);
      assert.match(error.message, /createGate\(\)\.schedule\.factor: .*\(got 0\)/);
      assert.match(error.message, /createGate\(\)\.schedule\.jitter: .*\(got "often"\)/);
      assert.match(error.message, /createGate\(\)\.now: must be a function/);
      return true;
    },
  );
  assert.throws(() => createGate({ isCrashloop: () => true } as never), /unknown option "isCrashloop"/);
  assert.throws(() => createGate({ isCrashLoop: true } as never), /createGate\(\)\.isCrashLoop/);
});

test('a schedule initialMs above the default cap raises the cap rather than failing', async () => {
  const clock = { t: START };
  const gate = createGate({ schedule: { initialMs: 45_000, jitter: 'none' }, now: () => clock.t });
  await assert.rejects(gate.run(() => Promise.reject(refused())));
  assert.equal(gate.state().retryAt?.getTime(), START + 45_000);
});

test('a gate reports armed, refused and cleared through onEvent', async () => {
  let time = 1_000_000;
  const events: string[] = [];
  const gate = createGate({
    key: 'mcp-start',
    schedule: { initialMs: 100, jitter: 'none' },
    now: () => time,
    onEvent: (event) => events.push(`${event.key}:${event.state}`),
  });
  await assert.rejects(gate.run(() => Promise.reject(new HttpStatusError({ status: 503, retryable: true }))));
  await assert.rejects(
    gate.run(() => Promise.resolve('not called')),
    GateClosedError,
  );
  time += 200;
  assert.equal(await gate.run(() => Promise.resolve('ok')), 'ok');
  assert.deepEqual(events, ['mcp-start:armed', 'mcp-start:refused', 'mcp-start:cleared']);
});

test('a clock that steps back stretches neither a window nor a hung probe’s 60 s lease', async () => {
  // NTP correcting a clock that ran fast, or a VM resumed: the breaker rebases its open
  // time and probe lease on such a step; the gate must too, or a probe that hangs holds
  // every start back for the step (an hour here) on top of the lease.
  const { clock, gate, attempt, calls } = fixture();
  await assert.rejects(attempt(unavailable()));
  clock.t -= 3_600_000; // inside the 500 ms window, the clock steps back an hour
  await assert.rejects(attempt(), GateClosedError, 'still inside the window');
  clock.t += 500;
  assert.equal(gate.state().armed, false, 'the window is still 500 ms long');
  void gate.run(() => new Promise<string>(() => {})); // a connect that never returns
  clock.t -= 3_600_000; // while it hangs, another step back
  await assert.rejects(attempt(), GateClosedError, 'the probe still holds its slot');
  clock.t += 60_000;
  assert.equal(gate.state().probing, false, 'the lease is still 60 s long');
  assert.equal(await attempt(), 'connected', 'the lease ran out: this call probes instead');
  assert.equal(calls(), 2);
});

test('a failure after the clock stepped back arms the next window from now, not the step later', async () => {
  // arm() kept the old window's end (now an hour ahead) and took its distance as the
  // window's length, so rebase() never cut it: the gate stayed armed for the step.
  const { clock, gate, attempt } = fixture();
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  const held = deferred<string>();
  const probe = gate.run(() => held.promise);
  clock.t -= 3_600_000; // while the probe runs, the clock steps back an hour
  held.reject(refused());
  await assert.rejects(probe, NetworkError);
  assert.equal(gate.state().retryAt?.getTime(), clock.t + 1000, 'the second window: 1000 ms');
  clock.t += 1000;
  assert.equal(await attempt(), 'connected');
});

test('a retryAfterMs that is not a number arms the backoff step, not a window of NaN', async () => {
  // HttpStatusError is public: a caller may build one with Number(header) of a garbage
  // header. A NaN window compared false with every time, so the gate never refused.
  const { gate, attempt, calls } = fixture();
  await assert.rejects(attempt(unavailable(Number.NaN)), HttpStatusError);
  assert.equal(gate.state().retryAt?.getTime(), START + 500);
  await assert.rejects(attempt(), GateClosedError);
  assert.equal(calls(), 1);
});

test("a listener told 'cleared' finds the gate cleared, and may run at once", async () => {
  // An agent may reconnect its other servers on 'cleared'; the event came before the
  // state changed, so state() still said armed and run() refused.
  const seen: unknown[] = [];
  let inside: Promise<string> | undefined;
  const { clock, gate, attempt } = fixture({
    onEvent: (event) => {
      if (event.state !== 'cleared') return;
      seen.push(gate.state());
      inside = gate.run(async () => 'reconnected');
    },
  });
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  assert.equal(await attempt(), 'connected');
  assert.deepEqual(seen, [{ armed: false, failures: 0, probing: false }]);
  assert.equal(await inside, 'reconnected');
});

test('an async onEvent listener that rejects (a log sink that is down) is ignored as one that throws is: no unhandled rejection', async () => {
  // An unhandled rejection ends a Node process: an observer must not take the agent down.
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown): void => {
    unhandled.push(reason);
  };
  process.on('unhandledRejection', onUnhandled);
  try {
    const { clock, attempt } = fixture({
      onEvent: async () => {
        throw new Error('log sink down');
      },
    });
    await assert.rejects(attempt(unavailable()), HttpStatusError);
    await assert.rejects(attempt(), GateClosedError);
    clock.t += 500;
    assert.equal(await attempt(), 'connected');
    await new Promise((resolve) => setTimeout(resolve, 10));
    assert.deepEqual(unhandled, []);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});

test('a rejection the gate cannot inspect comes back unchanged, and isCrashLoop alone judges whether it arms', async () => {
  // fn's own error must come back, as with a throwing isCrashLoop: reading a garbage
  // rejection (a throwing name getter, a revoked Proxy) must not replace it. Unreadable, it
  // is no abort (9353bb2): isCrashLoop, which here says every failure arms, decides.
  const getter = {
    get name(): string {
      throw new Error('getter');
    },
  };
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  for (const garbage of [getter, proxy]) {
    const { gate, attempt } = fixture({ isCrashLoop: () => true });
    // Not assert.rejects: it reads the rejection, which a revoked Proxy refuses.
    assert.equal(await attempt(garbage).catch((e: unknown) => e === garbage), true);
    assert.equal(gate.state().armed, true);
    // The refusal that follows is built around it as its cause.
    await assert.rejects(attempt(), GateClosedError);
  }
  const { gate, attempt } = fixture({ isCrashLoop: () => false });
  assert.equal(await attempt(proxy).catch((e: unknown) => e === proxy), true);
  assert.equal(gate.state().armed, false);
});

test('a probe past its lease that settles without arming leaves the newer probe holding the slot', async () => {
  const { clock, gate, attempt } = fixture();
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  const stale = deferred<string>();
  const old = gate.run(() => stale.promise);
  clock.t += 60_000;
  const held = deferred<string>();
  const probe = gate.run(() => held.promise); // the newer probe
  stale.reject(new TypeError('bad config'));
  await assert.rejects(old, TypeError);
  assert.equal(gate.state().probing, true);
  await assert.rejects(attempt(), GateClosedError, 'still one probe at a time');
  held.resolve('connected');
  assert.equal(await probe, 'connected');
});

test("a listener told 'armed' by a failed probe finds no probe in flight", async () => {
  const seen: boolean[] = [];
  const { clock, gate, attempt } = fixture({
    onEvent: (event) => {
      if (event.state === 'armed') seen.push(gate.state().probing);
    },
  });
  await assert.rejects(attempt(unavailable()));
  clock.t += 500;
  await assert.rejects(attempt(refused()), NetworkError);
  assert.deepEqual(seen, [false, false]);
});

test('a retryAfterMs that throws when read or is no number counts as no delay: the caller gets its own error back, the gate arms for the step', async () => {
  // As a NaN does. HttpStatusError is public: a JS caller may build one with a getter,
  // the Retry-After header's text (an HTTP-date) or a BigInt. The gate must neither
  // replace fn's error with its own TypeError or the getter's, nor set a window of NaN
  // (refusing nothing) or count a failure without its window.
  const throwing = unavailable();
  Object.defineProperty(throwing, 'retryAfterMs', {
    get(): number {
      throw new Error('getter');
    },
  });
  const garbage: unknown[] = ['soon', 'Wed, 21 Oct 2015 07:28:00 GMT', {}, 10n];
  const errors = [throwing, ...garbage.map((value) => unavailable(value as number))];
  for (const [index, error] of errors.entries()) {
    const { gate, attempt, calls } = fixture();
    await assert.rejects(attempt(error), (e) => e === error, `case ${index}`);
    const state = gate.state();
    assert.equal(state.armed, true, `case ${index}`);
    assert.equal(state.failures, 1, `case ${index}`);
    assert.equal(state.retryAt?.getTime(), START + 500, `case ${index}`);
    assert.equal(state.cause, error, `case ${index}`);
    await assert.rejects(attempt(), GateClosedError, `case ${index}`);
    assert.equal(calls(), 1, `case ${index}`);
  }
});

test('a gate armed by an error whose message cannot be read still refuses with GateClosedError carrying it', async () => {
  // isCrashLoop may accept any error: one whose message is a getter that throws, or not
  // text at all. GateClosedError's message quotes the cause's; a refused run got the
  // getter's error or a TypeError instead, which the caller's `instanceof
  // GateClosedError` check (README's example) passed on as a crash.
  const throwing = new Error('crashed');
  Object.defineProperty(throwing, 'message', {
    get(): string {
      throw new Error('getter');
    },
  });
  const failures = [
    throwing,
    Object.assign(new Error(), { message: 42 }),
    Object.assign(new Error(), { message: undefined }),
  ];
  for (const [index, failure] of failures.entries()) {
    const { gate, attempt, calls } = fixture({ isCrashLoop: () => true });
    await assert.rejects(attempt(failure), (e) => e === failure, `case ${index}`);
    const refused = await attempt().catch((e: unknown) => e);
    assert.ok(refused instanceof GateClosedError, `case ${index}: ${refused}`);
    assert.equal(refused.cause, failure, `case ${index}`);
    assert.equal(refused.retryAt.getTime(), START + 500, `case ${index}`);
    assert.equal(refused.key, 'mcp:github', `case ${index}`);
    assert.equal(calls(), 1, `case ${index}`);
    assert.equal(gate.state().armed, true, `case ${index}`);
  }
});

test('runs in flight together when the gate arms arm it once: 20 sessions connecting during a blip get the first window, not the twentieth', async () => {
  // An agent runtime's sessions share the gate of one server, and all connect when it
  // drops: their refusals are one failure told 20 times, as a breaker counts the calls
  // in flight when it opens. Stepped once each, the window was 32 s, not 500 ms.
  const { clock, gate } = fixture();
  const port = await closedPort();
  const fetch = createFetch({ use: [] });
  const connect = () => fetch(`http://127.0.0.1:${port}/mcp`, { method: 'POST', body: '{}' });
  const outcomes = await Promise.allSettled(Array.from({ length: 20 }, () => gate.run(connect)));
  assert.ok(
    outcomes.every((o) => o.status === 'rejected' && o.reason instanceof NetworkError),
    "outcomes.every((o) => o.status === 'rejected' && o.reason instanceof NetworkError)",
  );
  assert.equal(gate.state().failures, 1);
  assert.equal(gate.state().retryAt?.getTime(), START + 500);
  clock.t += 500;
  await assert.rejects(gate.run(connect), NetworkError, 'the probe goes after the first window');
  assert.equal(gate.state().retryAt?.getTime(), clock.t + 1000, 'and its failure steps the window up');
});

test('a run in flight when the gate armed still lengthens the window to the delay its server asked for (503 + Retry-After: 30 s), without a step', async () => {
  // Its failure is no new step (0fbe7a8), but its Retry-After is the server's word: dropped,
  // the gate let a connect through after 500 ms into a server that had asked for 30 s.
  const { clock, gate, attempt } = fixture();
  const inFlight = deferred<string>();
  const slow = gate.run(() => inFlight.promise);
  await assert.rejects(attempt(refused()), NetworkError);
  assert.equal(gate.state().retryAt?.getTime(), START + 500);
  inFlight.reject(unavailable(30_000));
  await assert.rejects(slow, HttpStatusError);
  assert.equal(gate.state().failures, 1);
  assert.equal(gate.state().retryAt?.getTime(), START + 30_000);
  clock.t += 500;
  await assert.rejects(attempt(), GateClosedError, 'no connect before the server’s 30 s');
  // A run in flight before a success says nothing: the gate stays clear.
  gate.reset();
  const stale = deferred<string>();
  const before = gate.run(() => stale.promise);
  assert.equal(await attempt(), 'connected');
  stale.reject(unavailable(30_000));
  await assert.rejects(before, HttpStatusError);
  assert.equal(gate.state().armed, false);
});

test('a CircuitOpenError arms the gate until its retryAt: the breaker knows the server is down until then', async () => {
  const open = (retryAt: number): CircuitOpenError =>
    new CircuitOpenError({ key: 'mcp', retryAt: new Date(retryAt), reason: 'after 5 consecutive failures' });
  const { gate, attempt, calls } = fixture({ maxRetryAfterMs: 20_000 });
  await assert.rejects(attempt(open(START + 5_000)), CircuitOpenError);
  assert.equal(gate.state().retryAt?.getTime(), START + 5_000);
  await assert.rejects(attempt(), GateClosedError);
  assert.equal(calls(), 1);
  // Never shorter than the backoff step, never longer than maxRetryAfterMs.
  const soon = fixture();
  await assert.rejects(soon.attempt(open(START + 100)), CircuitOpenError);
  assert.equal(soon.gate.state().retryAt?.getTime(), START + 500);
  const far = fixture({ maxRetryAfterMs: 20_000 });
  await assert.rejects(far.attempt(open(START + 300_000)), CircuitOpenError);
  assert.equal(far.gate.state().retryAt?.getTime(), START + 20_000);
});

test('a GateClosedError from an inner gate arms the outer one until its retryAt', async () => {
  const { gate, attempt } = fixture();
  const inner = new GateClosedError({ key: 'inner', retryAt: new Date(START + 4_000) });
  await assert.rejects(attempt(inner), GateClosedError);
  assert.equal(gate.state().armed, true);
  assert.equal(gate.state().retryAt?.getTime(), START + 4_000);
});

test('the gate’s own refusal out of fn (a re-entrant run) arms nothing: it says nothing about the server', async () => {
  // A probe whose fn starts the gate again (a reconnect handler calling ensureConnected())
  // is refused by that probe: its GateClosedError came out of the probe's fn and, since
  // 40d2dd2, armed the next, longer window. Each round stepped the schedule up with no
  // request sent (500 ms, 1 s, 2 s, 4 s, ...), and nested the refusals' messages.
  const { clock, gate, attempt } = fixture();
  await assert.rejects(attempt(refused()), NetworkError);
  for (let round = 0; round < 3; round++) {
    clock.t = (gate.state().retryAt?.getTime() as number) + 1;
    const error = await gate.run(() => gate.run(async () => 'inner')).catch((e: unknown) => e);
    assert.ok(error instanceof GateClosedError, String(error));
    assert.equal(gate.state().failures, 1, `round ${round}`);
    assert.ok(!(error.cause instanceof GateClosedError), error.message);
  }
  // The next run is the probe, and its success clears the gate.
  assert.equal(await attempt(), 'connected');
  assert.equal(gate.state().armed, false);
});

test('a connect refused by an open circuit arms the gate until the breaker’s retryAt, on a real chain', async () => {
  // Another caller of the key met the 503 that opened the circuit (for 5 s): the next start
  // is refused unsent by the breaker, and the gate holds the starts after it until then.
  await withServer(always({ status: 503 }), async (server) => {
    const fetch = createFetch({
      use: [circuitBreaker({ consecutiveFailures: 1, open: { initialMs: 5_000, jitter: 'none' } })],
    });
    await (await fetch(server.origin)).body?.cancel();
    const gate = createGate({ schedule: { initialMs: 50, jitter: 'none' } });
    const error = await gate.run(() => fetch(server.origin)).catch((e: unknown) => e);
    assert.ok(error instanceof CircuitOpenError, String(error));
    const state = gate.state();
    assert.equal(state.armed, true);
    assert.equal(state.retryAt?.getTime(), error.retryAt.getTime());
    await assert.rejects(
      gate.run(() => fetch(server.origin)),
      GateClosedError,
    );
    assert.equal(server.requests.length, 1);
  });
});

test('an AbortSignal.timeout() out of fn arms the gate: the operation’s deadline passed, the server did not answer', async () => {
  // A connect bounded the standard way, against a server that never answers. The gate has
  // no caller signal to tell a caller's own deadline by: what comes out of fn is the
  // operation's failure, as breakwater's own TimeoutError is. isCrashLoop is not asked.
  await withServer(always({ hang: true }), async (server) => {
    let asked = 0;
    const gate = createGate({
      schedule: { initialMs: 5_000, jitter: 'none' },
      isCrashLoop: () => {
        asked++;
        return false;
      },
    });
    const error = await gate
      .run(() => fetch(server.origin, { signal: AbortSignal.timeout(50) }))
      .catch((e: unknown) => e);
    assert.ok(error instanceof DOMException && error.name === 'TimeoutError', String(error));
    assert.equal(gate.state().armed, true);
    assert.equal(asked, 0);
    let called = false;
    await assert.rejects(
      gate.run(async () => {
        called = true;
      }),
      GateClosedError,
    );
    assert.equal(called, false);
  });
});

test('a user’s abort of fn never arms the gate, a TimeoutError DOMException does (fixture clock)', async () => {
  const { gate, attempt } = fixture({ isCrashLoop: () => true });
  const controller = new AbortController();
  controller.abort();
  await assert.rejects(attempt(controller.signal.reason), { name: 'AbortError' });
  assert.equal(gate.state().armed, false);
  const signal = AbortSignal.timeout(0);
  // Node's AbortSignal.timeout() timer does not hold the event loop open: awaited alone, the
  // test was cancelled ("the event loop has already resolved") when nothing else was pending.
  while (!signal.aborted) await new Promise((resolve) => setTimeout(resolve, 1));
  await assert.rejects(attempt(signal.reason), { name: 'TimeoutError' });
  assert.equal(gate.state().armed, true);
  assert.equal(gate.state().retryAt?.getTime(), START + 500);
});

test('run() with no function is a TypeError naming the argument, armed or not, and takes no probe slot', async () => {
  // It was "fn is not a function" from inside the run, or a GateClosedError while armed.
  const { clock, gate, attempt } = fixture();
  const notAFunction = (e: unknown) =>
    e instanceof TypeError && e.message.endsWith('\n  - gate.run(fn): must be a function (got "x")');
  await assert.rejects(gate.run('x' as never), notAFunction, 'a clear gate: TypeError');
  await assert.rejects(attempt(refused()), NetworkError);
  await assert.rejects(
    gate.run('x' as never),
    notAFunction,
    'inside the window: TypeError, not GateClosedError',
  );
  clock.t += 500;
  await assert.rejects(gate.run('x' as never), notAFunction, 'after the window: TypeError');
  assert.equal(gate.state().probing, false, 'no probe in flight for it');
  assert.equal(await attempt(), 'connected', 'the next run is the probe');
});
