/**
 * @module
 * `backoff()`: how long to wait before retry number n. Exponential growth from
 * `initialMs` by `factor`, capped at `maxMs`, spread by jitter so that many clients
 * failing together do not retry together (AWS Architecture Blog, "Exponential Backoff
 * and Jitter", 2015).
 *
 * Two promises hold for every input: the cap is a real cap (jitter never pushes a
 * delay past `maxMs`), and every delay is a finite whole number of milliseconds, even
 * at attempt 10,000 or `Number.MAX_SAFE_INTEGER`, where a naive `factor ** n` is
 * `Infinity` and `Infinity * 0` is `NaN`.
 */

import * as z from 'zod/mini';
import {
  DECORRELATED_GROWTH,
  DEFAULT_FACTOR,
  DEFAULT_INITIAL_MS,
  DEFAULT_MAX_MS,
  MAX_SPREAD_PERCENT,
} from './limits.ts';
import { functionOption, validate } from './options.ts';
import { MAX_DELAY_MS } from './timing.ts';

/** Jitter by default (retry's default; the breaker and the start gate pass `'+30%'`). */
export const DEFAULT_JITTER: Jitter = 'decorrelated';

/**
 * How a delay is spread around the exponential step `base`:
 * - `'none'`: exactly `base`.
 * - `'full'`: anywhere in `[0, base]`; spreads load best, may retry at once.
 * - `'equal'`: `base / 2` plus anywhere in `[0, base / 2]`; never less than half.
 * - `'decorrelated'`: anywhere between `initialMs` and 3× the previous delay, capped
 *   (AWS's "decorrelated jitter"); grows from the delay actually used, not from `attempt`.
 * - `` `+${x}%` ``: `base` stretched by up to x percent (`'+30%'`: `base` to `1.3 × base`),
 *   never past `maxMs`; `0 ≤ x ≤ 1000`.
 */
export type Jitter = 'full' | 'equal' | 'decorrelated' | 'none' | `+${number}%`;

/** Options for {@link backoff}. Plain JSON: a policy file can hold them. */
export interface BackoffOptions {
  /**
   * The delay before the first retry, in ms (the centre of it, with jitter).
   * Default 500, or `maxMs` when that is smaller. At least 0 and at most `maxMs`.
   */
  initialMs?: number | undefined;
  /**
   * How much each delay grows over the one before: `initialMs × factor^(attempt − 1)`.
   * Default 2 (doubling). At least 1; 1 means a constant delay.
   */
  factor?: number | undefined;
  /**
   * The longest delay, in ms, jitter included: a real cap. Default 32,000 (or
   * `initialMs` when that is larger and `maxMs` is not given). At most 2^31 − 1, the
   * longest delay `setTimeout` honours (a longer one fires at once).
   */
  maxMs?: number | undefined;
  /**
   * How delays are spread so clients that failed together do not retry together
   * (see {@link Jitter}). Default `'decorrelated'`.
   */
  jitter?: Jitter | undefined;
}

/**
 * The delay in ms before retry number `attempt` (1-based: attempt 1 waits about
 * `initialMs`). `previousMs` is the delay the caller used last time; only
 * `'decorrelated'` jitter reads it. Always a whole number in `[0, maxMs]`.
 */
export type BackoffSchedule = (attempt: number, previousMs?: number) => number;

/** `+x%` with a plain decimal x: anchored, no nested quantifiers, linear on any input. */
const SPREAD = /^\+(\d{1,4}(?:\.\d{1,6})?)%$/;

/** The jitters named by a word (the other form is `+x%`). */
const NAMED_JITTERS: readonly string[] = ['full', 'equal', 'decorrelated', 'none'];

/** The `x` of a `+x%` jitter, or undefined when `jitter` is not one. */
function spreadPercent(jitter: string): number | undefined {
  // No match reads as Number(undefined), NaN, which fails the bound.
  const percent = Number(SPREAD.exec(jitter)?.[1]);
  return percent <= MAX_SPREAD_PERCENT ? percent : undefined;
}

function isJitter(value: unknown): value is Jitter {
  return typeof value === 'string' && (NAMED_JITTERS.includes(value) || spreadPercent(value) !== undefined);
}

// Schemas are built in `/* @__PURE__ */` closures: zod's calls would otherwise stay
// in every bundle that imports this file, used or not (breakwater/hono imports a
// constant from retry.ts, which imports these). A bundler drops an unused schema,
// and inlines a used one at no cost (esbuild, minified).

/**
 * A delay in ms, as every schedule and wait cap takes it: 0 to 2^31 − 1, the longest
 * delay `setTimeout` honours (a longer one fires at once). Shared by retry, the
 * breaker and the start gate.
 */
export const delayMsSchema: z.ZodMiniNumber<number> = /* @__PURE__ */ (() =>
  z.number().check(z.minimum(0), z.maximum(MAX_DELAY_MS)))();

const msSchema = /* @__PURE__ */ (() => z.optional(delayMsSchema))();

/**
 * The schema of {@link BackoffOptions}: unknown keys are rejected, and `maxMs` must
 * not be below `initialMs`. Exported so `definePolicy()` validates `retry.backoff`
 * and `breaker.open` with the very same rules.
 */
export const backoffSchema: z.ZodMiniType<BackoffOptions> = /* @__PURE__ */ (() =>
  z
    .strictObject({
      initialMs: msSchema,
      factor: z.optional(z.number().check(z.minimum(1))),
      maxMs: msSchema,
      // A refinement, not z.custom(): a custom type's failure stops the object's own
      // checks (maxMs against initialMs), so a bad config would not list every path.
      jitter: z.optional(
        z
          .unknown()
          .check(
            z.refine(
              isJitter,
              `must be 'full', 'equal', 'decorrelated', 'none' or '+x%' (0 <= x <= ${MAX_SPREAD_PERCENT})`,
            ),
          ) as z.ZodMiniType<Jitter>,
      ),
    })
    .check(
      z.refine(
        (o) => typeof o.initialMs !== 'number' || typeof o.maxMs !== 'number' || o.maxMs >= o.initialMs,
        // Checked even when a sibling failed on its type (zod skips an object's refinements
        // then), so a bad config's one TypeError names every offending path.
        { message: 'must be at least initialMs', path: ['maxMs'], when: (p) => p.value instanceof Object },
      ),
    ))();

/**
 * Builds a backoff schedule: call it with the retry number (and, for decorrelated
 * jitter, the delay used last time) to get the next delay in ms.
 *
 * @param options - See {@link BackoffOptions}; bad values throw one `TypeError` naming each.
 * @param random - A source of numbers in `[0, 1)`; inject one to make tests exact.
 *
 * @example
 * ```ts
 * import { backoff } from 'breakwater';
 *
 * const delay = backoff({ initialMs: 200, maxMs: 10_000, jitter: 'full' });
 * let waited: number | undefined;
 * for (let attempt = 1; attempt <= 5; attempt++) {
 *   waited = delay(attempt, waited); // 0-200, 0-400, 0-800, ... never above 10 s
 * }
 * ```
 */
export function backoff(options?: BackoffOptions, random: () => number = Math.random): BackoffSchedule {
  // Checked here, not at the first draw ("random is not a function"), as circuitBreaker() checks its own.
  validate(functionOption(), random, 'backoff(options, random)');
  const valid = options === undefined ? undefined : validate(backoffSchema, options, 'backoff()');
  // An explicit maxMs is checked by the schema; a missing one follows initialMs (see withDefaults).
  const { initialMs, factor, maxMs, jitter } = withDefaults(valid, DEFAULT_JITTER);
  const spread = spreadPercent(jitter) ?? 0;
  // The exponent from which `initialMs × factor^n` is at or past the cap. Clamping to
  // it keeps `factor ** n` finite for any attempt; +1 absorbs rounding in the logs.
  const capExponent =
    initialMs > 0 && factor > 1 ? Math.ceil(Math.log(maxMs / initialMs) / Math.log(factor)) + 1 : 0;

  /** The exponential step for `attempt`, before jitter: in [initialMs, maxMs]. */
  function base(attempt: number): number {
    const exponent = Math.min(attempt - 1, capExponent);
    return Math.min(maxMs, initialMs * factor ** exponent);
  }

  /** A draw from `random`, forced into [0, 1] so a bad source (NaN, say) cannot break the bounds. */
  function draw(): number {
    const r = random();
    return r >= 0 ? Math.min(r, 1) : 0;
  }

  function spreadOut(attempt: number, previousMs: number | undefined): number {
    if (jitter === 'decorrelated') {
      // A caller that keeps no state gets the step before as its "previous" delay,
      // so the schedule still grows; attempt 1 starts from initialMs (AWS's formula).
      const previous = previousMs ?? (attempt > 1 ? base(attempt - 1) : initialMs);
      const from = Number.isFinite(previous) ? Math.min(maxMs, Math.max(initialMs, previous)) : initialMs;
      const upper = Math.min(maxMs, from * DECORRELATED_GROWTH);
      return initialMs + draw() * (upper - initialMs);
    }
    const step = base(attempt);
    if (jitter === 'none') return step;
    if (jitter === 'full') return draw() * step;
    if (jitter === 'equal') return step / 2 + draw() * (step / 2);
    return step * (1 + (draw() * spread) / 100);
  }

  return function backoffDelay(attempt: number, previousMs?: number): number {
    // A retry number below 1 (or NaN) is read as the first retry; fractions round down.
    const n = attempt >= 1 ? Math.floor(attempt) : 1;
    const delay = Math.round(spreadOut(n, previousMs));
    // The cap is a real cap: a fractional maxMs must not round up past itself.
    return Math.max(0, Math.min(delay, Math.floor(maxMs)));
  };
}

/** {@link BackoffOptions} with every field filled in. */
type Resolved = { [K in keyof BackoffOptions]-?: Exclude<BackoffOptions[K], undefined> };

/**
 * A user's schedule over the default one (500 ms ×2 to 32 s) with the caller's
 * default jitter, field by field: an undefined field keeps its default, an
 * `initialMs` above the default cap raises the cap with it, so `{ initialMs: 60_000 }`
 * alone is valid, and a `maxMs` below the default first delay brings that delay down
 * to it, so `{ maxMs: 100 }` alone is valid too (the resolved schedule passes
 * `backoffSchema`, which retry, the breaker and the gate check it against). Retry's
 * schedule, the breaker's open time and the start gate's window use it.
 */
export function withDefaults(given: BackoffOptions | undefined, jitter: Jitter): Resolved {
  const initialMs = given?.initialMs ?? Math.min(DEFAULT_INITIAL_MS, given?.maxMs ?? Infinity);
  return {
    initialMs,
    factor: given?.factor ?? DEFAULT_FACTOR,
    maxMs: given?.maxMs ?? Math.max(DEFAULT_MAX_MS, initialMs),
    jitter: given?.jitter ?? jitter,
  };
}
