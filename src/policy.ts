/**
 * @module
 * `definePolicy()`: one validated, JSON-serialisable description of how to treat a
 * server, from which `policy.fetch()` builds the client chain in the standard order
 * (and `breakwater/hono` reads the same object server-side):
 *
 *   total timeout → retry → idempotency key → auth → pacing/breaker → attempt timeout → capture
 *
 * Outermost first: the total deadline covers every retry and wait; each retry
 * attempt gets the same Idempotency-Key and a current token, passes the breaker (so
 * an open circuit or a paused key stops resends too), and has its own deadline; the
 * capture, closest to the wire, sees every failure response as the server sent it.
 */

import * as z from 'zod/mini';
import { type AuthOptions, auth } from './auth.ts';
import { withDefaults } from './backoff.ts';
import {
  type BreakerConfig,
  type BreakerStats,
  breakerSchema,
  type CircuitBreaker,
  circuitBreaker,
} from './breaker.ts';
import type { FetchLike, KeyOption, Middleware } from './call.ts';
import {
  type CaptureStatus,
  captureSchema,
  captureStatus,
  DEFAULT_BODY_BYTES,
  DEFAULT_BODY_WAIT_MS,
  type StatusSnapshot,
} from './capture.ts';
import { createFetch } from './chain.ts';
import { DEFAULT_RETRYABLE_STATUSES } from './classify.ts';
import type { BreakwaterEvent } from './events.ts';
import { idempotencyKey } from './idempotency-key.ts';
import {
  DEFAULT_ATTEMPT_MS,
  DEFAULT_ATTEMPTS,
  DEFAULT_MAX_RETRY_AFTER_MS,
  DEFAULT_TOTAL_MS,
} from './limits.ts';
import { authOptionSchema, functionOption, keyOptionSchema, onEventSchema, validate } from './options.ts';
import {
  DEFAULT_BUDGET,
  DEFAULT_RETRY_JITTER,
  type Retry,
  type RetryOptions,
  type RetryStats,
  retry,
  retrySchema,
} from './retry.ts';
import { type Store, storeSchema } from './store.ts';
import { deadline, type TimeoutOptions, timeout, timeoutSchema } from './timeout.ts';

/** What a policy file holds. Every field is optional; `{}` is a good default for an agent talking to a remote server. */
export interface PolicyConfig {
  /** The server's name (the key for breakers, pacing, budgets, messages). Default: the URL's origin. */
  name?: string | undefined;
  /** Retry options, or `false` for none. Default: 3 attempts, safe resends, server delays up to 60 s, budget 10 tokens. */
  retry?: RetryOptions | false | undefined;
  /** Breaker and pacing options, or `false` for none. Default: opens after 5 failures in a row or 50% of 20+ calls in 30 s. */
  breaker?: BreakerConfig | false | undefined;
  /**
   * Deadlines for response headers, or `false` for none. Default: 30 s per attempt, 120 s
   * in all. An `attemptMs` longer than `totalMs` is no error (`{ totalMs: 10_000 }` alone
   * keeps the 30 s default): each attempt is also bounded by the time the total leaves it,
   * which then ends it (`TimeoutError`, scope `'total'`).
   */
  timeout?: TimeoutOptions | false | undefined;
  /**
   * Stamp an `Idempotency-Key` on POST and PATCH. Default `false`. Only for servers
   * that honour the header: a keyed request counts as idempotent and may be resent.
   */
  idempotencyKeys?: boolean | undefined;
  /** Status capture options. Default: keep 2048 body bytes of each failure response. */
  capture?: { bodyBytes?: number | undefined; bodyWaitMs?: number | undefined } | undefined;
}

/** `T` as TypeScript types it in a JSON file: its words widened to `string`, its `false` to `boolean`. */
type Widened<T> = T extends string
  ? string
  : T extends boolean
    ? boolean
    : T extends readonly (infer E)[]
      ? readonly Widened<E>[]
      : T extends object
        ? { [K in keyof T]: Widened<T[K]> }
        : T;

/**
 * A {@link PolicyConfig} as TypeScript types one read from a JSON file
 * (`import config from './policy.json' with { type: 'json' }`): `'never'` is a `string`
 * there and `false` a `boolean`. `definePolicy()` takes it as it is and checks its
 * values at run time, as it checks every config.
 */
export type PolicyJson = Widened<PolicyConfig>;

/**
 * `C` (a config typed in code, or read from JSON) with the words it spells out checked
 * against `P`, the {@link PolicyConfig} type at that place: a word typed only as
 * `string` or `boolean` (read from JSON) is left to the run-time check, but a typo
 * spelt out in code (`resend: 'nevr'`) or an unknown key stays a compile error.
 */
type WordsChecked<C, P> = [C] extends [string]
  ? string extends C
    ? C
    : Extract<P, string>
  : [C] extends [boolean]
    ? boolean extends C
      ? C
      : Extract<P, boolean>
    : C extends readonly unknown[]
      ? C
      : C extends object
        ? {
            [K in keyof C]: K extends keyof Extract<P, object>
              ? WordsChecked<C[K], Extract<P, object>[K]>
              : never;
          }
        : C;

/** The config with every default filled in: what the chain is built from. */
export interface ResolvedPolicyConfig {
  /**
   * The policy's `name` as given: its clients' key unless `policy.fetch()` is given one.
   * Undefined when not set: each call's key is then its URL's origin.
   */
  name: string | undefined;
  // Each field set (`-?` and `Exclude`: a field typed `?: T | undefined` keeps its undefined under Required).
  /**
   * Retry options with every default filled in (see {@link PolicyConfig.retry}); `budget`
   * is `false` when turned off, `replayBodyBytes` only when given. `retry: false` resolves
   * to `attempts: 1` (no `retry()` is built), and `maxRetryAfterMs` still caps the breaker's
   * waits unless the breaker sets its own.
   */
  retry: {
    [K in Exclude<keyof RetryOptions, 'budget' | 'replayBodyBytes'>]-?: Exclude<RetryOptions[K], undefined>;
  } & Pick<RetryOptions, 'replayBodyBytes'> & { budget: { tokens: number; refund: number } | false };
  /**
   * The breaker options as given, or `false` for none. Not filled in: `circuitBreaker()`
   * applies its own defaults, and takes `retry.maxRetryAfterMs` as its cap unless set here.
   */
  breaker: BreakerConfig | false;
  /** Both deadlines, defaults filled in, or `false` for none. */
  timeout: { attemptMs: number; totalMs: number } | false;
  /** Whether clients stamp an `Idempotency-Key` on POST and PATCH (`idempotencyKey()`); `false` unless set. */
  idempotencyKeys: boolean;
  /**
   * `captureStatus()` options, both filled in: `bodyBytes` (default 2048) and `bodyWaitMs`
   * (default 1000), which the MCP and A2A adapters also end the SDK's read of a failure
   * body at.
   */
  capture: { bodyBytes: number; bodyWaitMs: number };
}

/** What a policy's clients share that does not belong in a policy file. */
export interface PolicyOptions {
  /**
   * Where the breaker shares its pauses and open circuits (`circuitBreaker({ store })`):
   * the clients of every policy given the same store (one Redis-backed `Store` for a
   * fleet of workers) hold off a server together when it asks any of them to wait, and
   * stop sending to it together when one's circuit opens. Default: none, the policy's
   * clients pace alone. Ignored with `breaker: false`.
   */
  store?: Store | undefined;
}

/** Per-client pieces that do not belong in a policy file. */
export interface PolicyFetchOptions {
  /** Stamps and refreshes a token (`auth()` options): a 401 is refreshed and resent once. Default: none. */
  auth?: AuthOptions | undefined;
  /** Receives typed events from this client's calls (`attempt`, `retry`, `breaker`, ...). Default: none. */
  onEvent?: ((event: BreakwaterEvent) => void) | undefined;
  /** The server's name (breaker, pacing, budget, messages), or a function of the URL. Default: the policy's `name`, else the URL's origin. */
  key?: KeyOption | undefined;
  /**
   * Middleware run outermost, before the total timeout and retry: where an adapter
   * marks calls (`call.idempotent` for a read-only MCP or A2A method) so that retry's
   * resend rule sees the mark. Default: none. Readonly: a list written `as const` is taken as it is.
   */
  use?: readonly Middleware[] | undefined;
}

/**
 * The options every adapter passes on to `policy.fetch()` for one client: the base
 * fetch and the per-client pieces. Adapters' option types extend it.
 */
export interface PolicyClientOptions extends Omit<PolicyFetchOptions, 'use'> {
  /** The fetch under the policy's chain (a proxy-aware fetch, a test double). Default: the global `fetch`, looked up per call. */
  fetch?: FetchLike | undefined;
}

/** What a policy knows about one server right now. */
export interface PolicyStats {
  /**
   * The key's retry budget and counters. Undefined only when the policy does not retry
   * (`retry: false`, `attempts: 1`). A key with no failure yet (or never seen, or whose
   * counters were forgotten: retry keeps the 1000 keys that failed most recently) has its
   * full budget and no counts: `{ tokens: 10, retries: 0, giveUps: 0 }` by default.
   */
  retry: RetryStats | undefined;
  /**
   * The key's circuit and pacing state. Undefined with `breaker: false`, or for a key
   * never seen or forgotten (the registry keeps the `maxKeys` most recent, default 1000).
   */
  breaker: BreakerStats | undefined;
  /** The latest failure response seen for the key. */
  lastFailure: StatusSnapshot | undefined;
}

/** A validated policy: build clients from it, read its state, serialise it. */
export interface Policy {
  /** The config as given (validated, frozen): what `JSON.stringify(policy)` writes. */
  readonly config: Readonly<PolicyConfig>;
  /** The config with defaults filled in. */
  readonly resolved: Readonly<ResolvedPolicyConfig>;
  /**
   * The status capture every client of this policy shares: `capture.scope(fetch)` for one
   * operation's snapshots, naming the client's fetch (without it, only while the policy
   * has built one client: with several, which one is meant is the caller's to say).
   */
  readonly capture: CaptureStatus;
  /**
   * A fetch with the policy's chain around `base` (default: the global fetch).
   * Clients of one policy share its breaker, pacing, budgets and captures.
   */
  fetch(base?: FetchLike, options?: PolicyFetchOptions): FetchLike;
  /** Counters and state for one server key. */
  stats(key: string): PolicyStats;
  /** The config as given, for `JSON.stringify`. */
  toJSON(): PolicyConfig;
}

/** A section that may be given, or turned off with `false`. */
function orFalse<T>(schema: z.ZodMiniType<T>): z.ZodMiniType<T | false> {
  return z.union([z.literal(false), schema]);
}

// Every section may be left out: `z.partial()` says so once.
const policySchema = z.partial(
  z.strictObject({
    name: z.string().check(z.minLength(1, 'must be a non-empty string')),
    retry: orFalse(retrySchema),
    breaker: orFalse(breakerSchema),
    timeout: orFalse(timeoutSchema),
    idempotencyKeys: z.boolean(),
    capture: captureSchema,
  }),
);

/**
 * `policy.fetch()`'s options. Strict, as the policy's own config is: a misspelt
 * `auth` or `onEvent` would otherwise be dropped in silence (no token sent, no
 * events). `auth()` checks its own options in full.
 */
const fetchOptionsSchema = z.strictObject({
  use: z._default(z.array(functionOption<Middleware>()), []),
  auth: authOptionSchema,
  onEvent: onEventSchema,
  key: keyOptionSchema,
});

/** `definePolicy()`'s options. Strict: a misspelt `store` must not leave a fleet pacing alone unawares. */
const policyOptionsSchema = z.optional(z.strictObject({ store: z.optional(storeSchema) }));

/**
 * `policy.fetch()`'s first argument, checked here: left to `createFetch()`, a base URL or
 * options passed first (`policy.fetch({ onEvent })`) were told as `createFetch().fetch`,
 * an option of a function the caller never called.
 */
const baseSchema = z.optional(functionOption<FetchLike>('must be a fetch function; options go second'));

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object') {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

function resolve(config: PolicyConfig): ResolvedPolicyConfig {
  const given = config.retry === false ? { attempts: 1 } : (config.retry ?? {});
  const retry: ResolvedPolicyConfig['retry'] = {
    attempts: given.attempts ?? DEFAULT_ATTEMPTS,
    backoff: withDefaults(given.backoff, DEFAULT_RETRY_JITTER),
    statuses: given.statuses ?? [...DEFAULT_RETRYABLE_STATUSES],
    maxRetryAfterMs: given.maxRetryAfterMs ?? DEFAULT_MAX_RETRY_AFTER_MS,
    // Field by field, as retry() reads it: `{ tokens: 20 }` keeps the default refund.
    // The schema has dropped fields given as undefined, so the spread keeps the defaults.
    budget:
      given.budget === false ? false : ({ ...DEFAULT_BUDGET, ...given.budget } as typeof DEFAULT_BUDGET),
    resend: given.resend ?? 'safe',
  };
  if (given.replayBodyBytes !== undefined) retry.replayBodyBytes = given.replayBodyBytes;
  return {
    name: config.name,
    retry,
    breaker: config.breaker === false ? false : { ...config.breaker },
    // Both deadlines are always set when timeouts are on: definePolicy relies on it.
    timeout:
      config.timeout === false
        ? false
        : {
            attemptMs: config.timeout?.attemptMs ?? DEFAULT_ATTEMPT_MS,
            totalMs: config.timeout?.totalMs ?? DEFAULT_TOTAL_MS,
          },
    idempotencyKeys: config.idempotencyKeys ?? false,
    capture: {
      bodyBytes: config.capture?.bodyBytes ?? DEFAULT_BODY_BYTES,
      bodyWaitMs: config.capture?.bodyWaitMs ?? DEFAULT_BODY_WAIT_MS,
    },
  };
}

/**
 * Validates a policy config and returns a {@link Policy}. Bad config throws one
 * `TypeError` listing every offending path and value; unknown keys are rejected.
 * A config read from JSON ({@link PolicyJson}: its words typed `string`) is taken
 * without a cast, and checked the same way.
 *
 * @example
 * ```ts
 * import { definePolicy } from 'breakwater';
 *
 * const policy = definePolicy({ name: 'github-mcp', retry: { attempts: 4 } });
 * const fetch = policy.fetch();
 * const res = await fetch('https://api.githubcopilot.com/mcp/', { method: 'POST', body: '…' });
 * const { retry, breaker, lastFailure } = policy.stats('github-mcp'); // budget, circuit, last failure
 * ```
 */
export function definePolicy(config?: PolicyConfig, options?: PolicyOptions): Policy;
/**
 * Validates a policy config read from JSON (`import config from './policy.json' with
 * { type: 'json' }`), whose words TypeScript types as `string`: they are checked at run
 * time, and bad config throws one `TypeError` listing every offending path and value.
 * Words spelt out in code are still checked at compile time.
 */
export function definePolicy<const C extends PolicyJson>(
  config: C & WordsChecked<C, PolicyConfig>,
  options?: PolicyOptions,
): Policy;
export function definePolicy(config: PolicyConfig | PolicyJson = {}, options?: PolicyOptions): Policy {
  // A copy through JSON, not structuredClone: the policy is exactly what its JSON says.
  // A field given as undefined (optional fields built in code) is dropped as JSON drops
  // it, so it can no longer override a default the chain derives from another section
  // (the breaker's maxRetryAfterMs from retry's), and a config and its JSON behave alike.
  const valid = deepFreeze(
    JSON.parse(JSON.stringify(validate(policySchema, config, 'definePolicy()'))) as PolicyConfig,
  );
  const resolved = deepFreeze(resolve(valid));
  const { store } = validate(policyOptionsSchema, options, 'definePolicy(config, options)') ?? {};

  const { retry: retryConfig, timeout: deadlines } = resolved;
  // One attempt needs no retry(), but `resend: 'never'` must still bind auth()'s resend after
  // a 401 (a GET answered 303 ran): retry() marks the call so (NO_RESEND), and resends nothing.
  const retries: Retry | undefined =
    retryConfig.attempts > 1 || retryConfig.resend === 'never' ? retry(retryConfig) : undefined;
  const breaker: CircuitBreaker | undefined =
    resolved.breaker === false
      ? undefined
      : circuitBreaker({ maxRetryAfterMs: retryConfig.maxRetryAfterMs, ...resolved.breaker, store });
  const capture = captureStatus(resolved.capture);
  // resolve() sets both deadlines whenever timeouts are on. With an attempt timeout
  // inside, the total deadline needs no timer of its own: each attempt is bounded by
  // the time left, and retry and pacing never wait past it.
  const [total, perAttempt] =
    deadlines === false ? [] : [deadline(deadlines.totalMs), timeout({ attemptMs: deadlines.attemptMs })];
  const keys = resolved.idempotencyKeys ? idempotencyKey() : undefined;

  return Object.freeze({
    config: valid,
    resolved,
    capture,
    fetch(base?: FetchLike, options: PolicyFetchOptions = {}): FetchLike {
      validate(baseSchema, base, 'policy.fetch(base)');
      const valid = validate(fetchOptionsSchema, options, 'policy.fetch()');
      const use = [
        ...valid.use,
        total,
        retries,
        keys,
        valid.auth && auth(valid.auth),
        breaker,
        perAttempt,
        capture,
      ].filter((m): m is Middleware => m !== undefined);
      // createFetch's schema takes an absent option as undefined, so no spreads are needed.
      return createFetch({ use, fetch: base, key: valid.key ?? resolved.name, onEvent: valid.onEvent });
    },
    stats(key: string): PolicyStats {
      return {
        retry: retryConfig.attempts > 1 ? retries?.stats(key) : undefined,
        breaker: breaker?.stats(key),
        lastFailure: capture.last(key),
      };
    },
    toJSON(): PolicyConfig {
      return valid;
    },
  });
}
