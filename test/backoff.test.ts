import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { type BackoffOptions, backoff, backoffSchema, type Jitter, withDefaults } from '../src/backoff.ts';
import { circuitBreaker } from '../src/breaker.ts';
import { createGate } from '../src/gate.ts';
import { definePolicy } from '../src/policy.ts';
import { retry } from '../src/retry.ts';

/** A `random` that always returns `value`. */
const fixed = (value: number) => (): number => value;
/** The largest double below 1: what `Math.random` can return at most. */
const almostOne = 1 - Number.EPSILON / 2;

test('without jitter the delays grow by factor from initialMs and stop at maxMs', () => {
  const delay = backoff({ initialMs: 500, factor: 2, maxMs: 32_000, jitter: 'none' });
  assert.deepEqual(
    [1, 2, 3, 4, 5, 6, 7, 8, 50].map((n) => delay(n)),
    [500, 1000, 2000, 4000, 8000, 16_000, 32_000, 32_000, 32_000],
  );
});

test('the defaults are 500 ms doubling to 32 s with decorrelated jitter', () => {
  assert.equal(backoff(undefined, fixed(0))(1), 500, 'decorrelated with random 0 starts at initialMs');
  assert.equal(backoff({ jitter: 'none' })(3), 2000);
  assert.equal(backoff({ jitter: 'none' })(100), 32_000);
});

test('full jitter spreads a delay over [0, base]', () => {
  const at = (r: number) => backoff({ initialMs: 1000, jitter: 'full' }, fixed(r))(3);
  assert.equal(at(0), 0);
  assert.equal(at(0.5), 2000);
  assert.equal(at(almostOne), 4000);
});

test('equal jitter spreads a delay over [base / 2, base]', () => {
  const at = (r: number) => backoff({ initialMs: 1000, jitter: 'equal' }, fixed(r))(3);
  assert.equal(at(0), 2000);
  assert.equal(at(0.5), 3000);
  assert.equal(at(almostOne), 4000);
});

test('a +x% spread stretches a delay by up to x percent', () => {
  const at = (r: number) => backoff({ initialMs: 1000, jitter: '+30%' }, fixed(r))(2);
  assert.equal(at(0), 2000);
  assert.equal(at(0.5), 2300);
  assert.equal(at(almostOne), 2600);
  assert.equal(backoff({ initialMs: 1000, jitter: '+12.5%' }, fixed(almostOne))(1), 1125);
  assert.equal(backoff({ initialMs: 1000, jitter: '+0%' }, fixed(almostOne))(1), 1000);
});

test('a +30% spread never pushes a delay past maxMs, near the cap or at it', () => {
  const options: BackoffOptions = { initialMs: 30_000, factor: 2, maxMs: 32_000, jitter: '+30%' };
  const top = backoff(options, fixed(almostOne));
  assert.equal(top(1), 32_000, '30 s + 30% would be 39 s');
  assert.equal(top(2), 32_000);
  assert.equal(top(10_000), 32_000);
  assert.equal(backoff(options, fixed(0))(1), 30_000, 'below the cap the base is kept');
  assert.equal(backoff({ initialMs: 20_000, maxMs: 25_000, jitter: '+1000%' }, fixed(0.5))(1), 25_000);
});

test('decorrelated jitter draws between initialMs and three times the previous delay', () => {
  const at = (r: number, previousMs?: number) =>
    backoff({ initialMs: 100, maxMs: 10_000, jitter: 'decorrelated' }, fixed(r))(2, previousMs);
  assert.equal(at(0, 4000), 100, 'random 0 is initialMs, whatever came before');
  assert.equal(at(0.5, 4000), 5050, 'halfway from 100 to min(10,000, 12,000)');
  assert.equal(at(almostOne, 1000), 3000);
  assert.equal(at(0.5, 1000), 1550);
  assert.equal(at(almostOne, 4000), 10_000, '3 × 4000 is capped at maxMs');
});

test('decorrelated jitter starts from initialMs on the first attempt', () => {
  const delay = backoff({ initialMs: 100, jitter: 'decorrelated' }, fixed(almostOne));
  assert.equal(delay(1), 300);
  assert.equal(delay(1, undefined), 300);
});

test('decorrelated jitter grows from the delays the caller actually used', () => {
  const delay = backoff({ initialMs: 100, maxMs: 5000, jitter: 'decorrelated' }, fixed(almostOne));
  const used: number[] = [];
  let previous: number | undefined;
  for (let attempt = 1; attempt <= 6; attempt++) {
    previous = delay(attempt, previous);
    used.push(previous);
  }
  assert.deepEqual(used, [300, 900, 2700, 5000, 5000, 5000]);
});

test('decorrelated jitter without a previous delay grows from the exponential step before', () => {
  const delay = backoff({ initialMs: 100, factor: 2, maxMs: 5000, jitter: 'decorrelated' }, fixed(almostOne));
  assert.equal(delay(3), 600, 'the step before attempt 3 is 200 ms; 3 × 200');
});

test('decorrelated jitter ignores a previous delay that is not a usable number', () => {
  const delay = backoff({ initialMs: 100, maxMs: 5000, jitter: 'decorrelated' }, fixed(almostOne));
  assert.equal(delay(2, Number.NaN), 300);
  assert.equal(delay(2, -50), 300);
  assert.equal(delay(2, Number.POSITIVE_INFINITY), 300);
  assert.equal(delay(2, 1e12), 5000);
});

test('delays stay finite at attempt 10,000, 100,000 and Number.MAX_SAFE_INTEGER in every mode', () => {
  const modes: Jitter[] = ['none', 'full', 'equal', 'decorrelated', '+30%', '+1000%'];
  for (const jitter of modes) {
    for (const options of [
      { maxMs: 32_000, jitter },
      { initialMs: 1, factor: 1e300, maxMs: 2 ** 31 - 1, jitter },
      { initialMs: 1e-300, factor: 1.000001, maxMs: 1e9, jitter },
    ]) {
      const delay = backoff(options, fixed(0.5));
      for (const attempt of [10_000, 100_000, Number.MAX_SAFE_INTEGER, Number.POSITIVE_INFINITY]) {
        const ms = delay(attempt, 1e9);
        assert.ok(Number.isInteger(ms) && ms >= 0 && ms <= options.maxMs, `${jitter} ${attempt}: ${ms}`);
      }
    }
  }
  assert.equal(backoff({ jitter: 'none' })(10_000), 32_000);
});

test('an attempt below 1, or NaN, counts as the first retry', () => {
  const delay = backoff({ initialMs: 250, jitter: 'none' });
  assert.equal(delay(0), 250);
  assert.equal(delay(-3), 250);
  assert.equal(delay(Number.NaN), 250);
  assert.equal(delay(2.9), 500, 'fractions round down');
});

test('factor 1 gives a constant delay, initialMs 0 gives no delay', () => {
  assert.equal(backoff({ initialMs: 700, factor: 1, jitter: 'none' })(1000), 700);
  assert.equal(backoff({ initialMs: 0, maxMs: 1000, jitter: 'equal' }, fixed(0.7))(20), 0);
});

test('an initialMs above the default cap raises the cap when maxMs is not given', () => {
  assert.equal(backoff({ initialMs: 60_000, jitter: 'none' })(5), 60_000);
});

test('a fractional maxMs never rounds a delay up past it', () => {
  assert.equal(backoff({ initialMs: 10, maxMs: 10.6, jitter: 'none' })(5), 10);
});

test('a random source outside [0, 1) cannot push a delay out of bounds', () => {
  for (const r of [-1, 1, 7, Number.NaN, Number.POSITIVE_INFINITY]) {
    const ms = backoff({ initialMs: 100, maxMs: 1000, jitter: '+50%' }, fixed(r))(3);
    assert.ok(Number.isInteger(ms) && ms >= 0 && ms <= 1000, `random ${r}: ${ms}`);
  }
});

const jitterArb: fc.Arbitrary<Jitter> = fc.oneof(
  fc.constantFrom<Jitter>('full', 'equal', 'decorrelated', 'none'),
  fc.integer({ min: 0, max: 1000 }).map((x): Jitter => `+${x}%`),
  fc.double({ min: 0, max: 1000, noNaN: true }).map((x): Jitter => `+${Number(x.toFixed(3))}%`),
);

const optionsArb: fc.Arbitrary<BackoffOptions & { maxMs: number }> = fc
  .record({
    initialMs: fc.oneof(fc.integer({ min: 0, max: 100_000 }), fc.double({ min: 0, max: 1e6, noNaN: true })),
    factor: fc.oneof(fc.constant(1), fc.double({ min: 1, max: 1e6, noNaN: true }), fc.constant(1e300)),
    extraMs: fc.oneof(fc.integer({ min: 0, max: 10_000_000 }), fc.double({ min: 0, max: 1e9, noNaN: true })),
    jitter: jitterArb,
  })
  .map(({ initialMs, factor, extraMs, jitter }) => ({
    initialMs,
    factor,
    maxMs: Math.min(2 ** 31 - 1, initialMs + extraMs),
    jitter,
  }));

test('property: every delay is a finite whole number in [0, maxMs], for any valid options and attempt', () => {
  fc.assert(
    fc.property(
      optionsArb,
      fc.integer({ min: 1, max: 100_000 }),
      fc.option(fc.double(), { nil: undefined }),
      fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
      (options, attempt, previousMs, r) => {
        const ms = backoff(options, fixed(r))(attempt, previousMs);
        return Number.isFinite(ms) && Number.isInteger(ms) && ms >= 0 && ms <= options.maxMs;
      },
    ),
    { numRuns: 300 },
  );
});

test('property: without jitter, delays never shrink as attempts grow', () => {
  fc.assert(
    fc.property(optionsArb, fc.integer({ min: 1, max: 100_000 }), (options, attempt) => {
      const delay = backoff({ ...options, jitter: 'none' });
      return delay(attempt + 1) >= delay(attempt);
    }),
    { numRuns: 300 },
  );
});

test('bad options are one TypeError naming every path and value', () => {
  assert.throws(
    () => backoff({ initialMs: -1, factor: 0.5, maxMs: Number.POSITIVE_INFINITY, jitter: '+2000%' }),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, 'error instanceof TypeError');
      assert.match(error.message, /backoff\(\)\.initialMs: .*\(got -1\)/);
      assert.match(error.message, /backoff\(\)\.factor: .*\(got 0\.5\)/);
      assert.match(error.message, /backoff\(\)\.maxMs: .*\(got Infinity\)/);
      assert.match(error.message, /backoff\(\)\.jitter: .*\(got "\+2000%"\)/);
      return true;
    },
  );
});

test('a jitter that is not one of the forms is a TypeError', () => {
  for (const jitter of ['fulll', '30%', '+-5%', '+x%', '+1e3%', '', ' +30%']) {
    assert.throws(() => backoff({ jitter: jitter as Jitter }), /backoff\(\)\.jitter: must be 'full'/, jitter);
  }
});

test('maxMs below initialMs is a TypeError naming maxMs', () => {
  assert.throws(
    () => backoff({ initialMs: 1000, maxMs: 500 }),
    /backoff\(\)\.maxMs: must be at least initialMs \(got 500\)/,
  );
});

test('maxMs below initialMs is named beside a sibling that fails on its type: a bad jitter, factor or unknown option', () => {
  const bad = [{ jitter: 'ful' }, { factor: '2' }, { intialMs: 5 }];
  for (const extra of bad) {
    assert.throws(
      () => backoff({ initialMs: 1000, maxMs: 10, ...extra } as never),
      /maxMs: must be at least initialMs \(got 10\)/,
      JSON.stringify(extra),
    );
  }
  assert.throws(
    () => definePolicy({ breaker: { open: { initialMs: 1000, maxMs: 10, jitter: '+30' as Jitter } } }),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, 'error instanceof TypeError');
      assert.match(error.message, /breaker\.open\.jitter: must be 'full'/);
      assert.match(error.message, /breaker\.open\.maxMs: must be at least initialMs/);
      return true;
    },
  );
});

test('unknown options and non-numbers are rejected', () => {
  assert.throws(() => backoff({ initialMS: 100 } as never), /unknown option "initialMS"/);
  assert.throws(() => backoff({ factor: '2' } as never), /backoff\(\)\.factor: .*\(got "2"\)/);
  assert.throws(() => backoff({ maxMs: 2 ** 31 } as never), /backoff\(\)\.maxMs: must be at most/);
  assert.throws(() => backoff(5 as never), TypeError);
});

test('backoffSchema accepts JSON config and rejects anything else', () => {
  const config = JSON.parse('{"initialMs":200,"factor":3,"maxMs":9000,"jitter":"+30%"}') as unknown;
  assert.deepEqual(backoffSchema.parse(config), { initialMs: 200, factor: 3, maxMs: 9000, jitter: '+30%' });
  assert.equal(backoffSchema.safeParse({ initialMs: () => 5 }).success, false);
  assert.equal(backoffSchema.safeParse({ jitter: 'sometimes' }).success, false);
});

test('a maxMs below the default initialMs brings initialMs down with it: retry(), the breaker, the gate and definePolicy() take { maxMs } alone, as backoff() does', () => {
  const schedule = { maxMs: 100 };
  // Each builds backoff(withDefaults(...)): a default initialMs of 500 over a cap of 100
  // was refused there, naming a backoff() the user never called.
  assert.doesNotThrow(() => retry({ backoff: schedule }));
  assert.doesNotThrow(() => circuitBreaker({ open: schedule }));
  assert.doesNotThrow(() => createGate({ schedule }));
  const policy = definePolicy({ retry: { backoff: schedule }, breaker: { open: schedule } });
  assert.equal(policy.resolved.retry.backoff.initialMs, 100);
  // The resolved schedule passes the schema it came from.
  assert.equal(backoffSchema.safeParse(policy.resolved.retry.backoff).success, true);
  assert.deepEqual(withDefaults(schedule, 'none'), { initialMs: 100, factor: 2, maxMs: 100, jitter: 'none' });
  assert.equal(backoff(schedule, fixed(0.5))(1), 100);
});

test('a random source that is no function is a TypeError at once, naming the argument', () => {
  // It was accepted, and the first delay threw "random is not a function".
  for (const [random, got] of [
    ['x', '"x"'],
    [5, '5'],
    [null, 'null'],
  ] as const) {
    assert.throws(
      () => backoff({}, random as never),
      (e: unknown) =>
        e instanceof TypeError &&
        e.message.endsWith(`\n  - backoff(options, random): must be a function (got ${got})`),
      `backoff({}, ${got}) throws at once`,
    );
  }
});
