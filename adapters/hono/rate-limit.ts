/**
 * @module
 * `rateLimit()`: a fixed-window request quota per client, kept in a {@link Store},
 * that tells clients exactly where they stand. Every response it touches carries
 * `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers); a
 * rejection is a 429 problem+json with `Retry-After` in delay-seconds, the same
 * number as the `RateLimit` field's `t`, so breakwater's `retryDelay()` (and any
 * RFC 9110 client) waits until the window resets and not a moment less.
 */

import type { Context, MiddlewareHandler } from 'hono';
import * as z from 'zod/mini';
import { functionOption, isFunction, validate } from '../../src/options.ts';
import { memoryStore, type Store } from '../../src/store.ts';
import { MAX_DELAY_MS, retryDelay } from '../../src/timing.ts';
import { sha256Hex } from './digest.ts';
import { answer, exposeClientHeaders, problemResponse, retryAfterSeconds } from './problem.ts';

/**
 * The policy name the headers used for every unnamed limiter before names came from
 * the quota. No longer used: two stacked unnamed limiters both said `"default"`, and
 * a client could not tell their members apart (the draft's policy name identifies a
 * quota policy). An unnamed limiter is now named after its quota, `"100-per-60s"`.
 * @deprecated Name the policy (`policyName`) or let the quota name it.
 */
export const DEFAULT_POLICY_NAME = 'default';
/**
 * How long the store may take to count a request (1 s) before it counts as failed
 * (`onStoreError`). A Redis-like store answers in milliseconds; one that hangs (a
 * network partition, a stuck connection pool) would otherwise hang every request
 * with it, and neither failure mode would apply.
 */
const DEFAULT_STORE_TIMEOUT_MS = 1000;
/** The wait advertised when the store is down and `onStoreError: 'closed'` rejects (1 s). */
const STORE_DOWN_RETRY_AFTER_MS = 1000;
/**
 * The longest client identity taken from a header. An IPv6 address is at most 45
 * characters; anything far longer is not an address, and would only bloat store keys.
 */
const MAX_IDENTITY_CHARS = 256;
/**
 * The longest client id kept in store keys as it is (64 characters: a UUID, a user id,
 * an API key's id, an IPv6 /64). A longer one, which `key(c)` may read from anything
 * the client sends (a header, a path, a token), is kept as its SHA-256 digest: else a
 * client sending megabyte ids would make each store entry a megabyte, in memory or
 * over the wire to a shared store.
 */
const MAX_PLAIN_ID_CHARS = 64;
/**
 * What a digest stands behind in store keys. `sha256:` and 64 hex digits are longer than
 * {@link MAX_PLAIN_ID_CHARS}, so no id kept as it is can spell a digest's text.
 */
const DIGEST_PREFIX = 'sha256:';
/**
 * The largest `limit`: it is sent as `q` and `r`, structured-field Integers, which
 * hold at most 15 digits (RFC 9651 §3.3.1); a parser fails a field with a larger one,
 * and with it every other limiter's member.
 */
const MAX_LIMIT = 999_999_999_999_999;
/**
 * The groups of an IPv6 address that name the client's network: the first 4, its /64.
 * A subscriber gets at least a /64 (RFC 4291 §2.5.4's interface ids, RFC 6177), so
 * keyed by address one client could send `limit` requests from each of 2^64 addresses.
 */
const IPV6_NETWORK_GROUPS = 4;
/** IPv6 networks whose addresses carry an IPv4 client (or none): each counts on its own. */
const EMBEDS_IPV4 = /^(0:0:0:0$|64:ff9b:)/;
/**
 * An address with the client's port after it, as some edges write it (Azure Application
 * Gateway's `X-Forwarded-For: 203.0.113.7:50912`, `[2001:db8::1]:50912`): the port is new
 * on every connection, so keyed with it a client would get a fresh bucket per connection.
 * Unbracketed IPv6 has two colons or more, so a port is read off IPv4, bracketed text,
 * and IPv6 text that ends in an IPv4 address (`::ffff:203.0.113.7:50912`, as a dual-stack
 * Node edge writes its remoteAddress and remotePort): an IPv4 address ends IPv6 text
 * (RFC 4291 §2.2), so a colon after one starts a port. `2001:db8::1:8080` is an address.
 * Linear time: each group after a colon is tried once.
 */
const WITH_PORT = /^\[([^\]]*)\](?::\d+)?$|^([\d.]+|[\da-f:]*:[\d.]*\.\d+):\d+$/i;
/** The window is advertised in whole seconds (`w`, `t` and `Retry-After` are integers). */
const MS_PER_SECOND = 1000;

/** Where a rate-limit store error leaves the request. */
export type StoreFailureMode = 'open' | 'closed';

/** Options for {@link rateLimit}. */
export interface RateLimitOptions {
  /**
   * Requests each client may make per window: a whole number from 1 to
   * 999,999,999,999,999 (the largest structured-field Integer, as which it is sent). Required.
   */
  limit: number;
  /**
   * The window length in ms: a whole number of seconds, at least 1000. Required.
   * Whole seconds because the draft's `w` and `t` and RFC 9110's `Retry-After` are
   * integer seconds: a window of 1.5 s could not be advertised truthfully.
   * Windows are aligned to the epoch (`floor(now / windowMs)`), so every server of
   * a fleet sharing a store agrees on where a window starts.
   */
  windowMs: number;
  /**
   * The client's identity: a function of the request (an API key's id, a user id).
   * Give this or `trustedHeader`, not both. There is no default: a limiter without
   * one would put every client in one global bucket, and one noisy client would
   * lock out everybody. A function that returns `undefined`, `null` or `''` gets a 400;
   * one that returns anything else but a string throws a `TypeError` (for `app.onError`).
   * An id over 64 characters is kept in the store as its SHA-256 digest, so a client
   * that controls what the id is read from cannot make store entries of any size.
   */
  key?: ((c: Context) => string | undefined | Promise<string | undefined>) | undefined;
  /**
   * The header your edge sets to the client's IP, e.g. `'cf-connecting-ip'`
   * (Cloudflare), `'fly-client-ip'`, `'x-real-ip'`; for a list such as
   * `'x-forwarded-for'`, the first entry is used. Name only a header your proxy
   * **overwrites**: a header it merely passes on (or appends to) is whatever the
   * client says, and a client could then pick a fresh bucket per request.
   * An IPv6 address counts by its /64 (the least any subscriber is given), so a client
   * cannot take a fresh bucket per address of its own network; IPv4 counts per address.
   * A port after the address (`203.0.113.7:50912`, `[2001:db8::1]:50912`, as Azure
   * Application Gateway sends) is left out: it is new on every connection.
   * A request without it (or with an empty one, or one over 256 characters) gets a
   * 400 problem ("no usable client identity header") rather than sharing a bucket
   * with every other such request.
   */
  trustedHeader?: string | undefined;
  /**
   * Where the counters live. Default: a fresh `memoryStore()` per middleware (one
   * process). Pass a shared store so a fleet enforces one quota.
   */
  store?: Store | undefined;
  /**
   * The policy's name in `RateLimit-Policy` and `RateLimit` (and the store keys).
   * Default: named after the quota, `` `${limit}-per-${windowMs / 1000}s` `` (e.g.
   * `"100-per-60s"`), so stacked limiters left unnamed (a burst and a daily quota)
   * send members a client can tell apart: the draft's name identifies the policy
   * its `r` and `t` belong to. Printable ASCII: it is sent as a structured-field
   * String. Limiters that share a store and a name share counters: give two with the
   * same limit and window distinct names unless they are meant to share one quota.
   */
  policyName?: string | undefined;
  /**
   * What happens when the store throws (or takes over `storeTimeoutMs`). Default `'open'`: the request goes through
   * without rate-limit headers, because a rate limiter protects capacity, and
   * refusing every request while a Redis restarts costs more availability than the
   * quota saves. `'closed'`: a 503 problem with `Retry-After: 1` and
   * `x-should-retry: true` (the handler did not run).
   */
  onStoreError?: StoreFailureMode | undefined;
  /**
   * How long the store may take to count a request, in ms, before it counts as a store
   * error (`onStoreError`). Default 1000: a store that hangs would otherwise hang every
   * request, failing neither open nor closed. A count that lands later is kept.
   */
  storeTimeoutMs?: number | undefined;
  /** The clock, epoch ms. Default `Date.now`; inject one in tests (and give your store the same one). */
  now?: (() => number) | undefined;
}

/** RFC 9110 §5.1 field name (a `token`). */
const FIELD_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** RFC 8941 §3.3.3: a String holds printable ASCII (0x20-0x7E). */
const PRINTABLE_ASCII = /^[\x20-\x7e]+$/;

const optionsSchema = z.strictObject({
  limit: z.number().check(z.int('must be a whole number'), z.minimum(1), z.maximum(MAX_LIMIT)),
  windowMs: z.number().check(
    z.minimum(MS_PER_SECOND),
    z.maximum(MAX_DELAY_MS),
    // RateLimit's w and t are integers.
    z.multipleOf(MS_PER_SECOND, 'must be a whole number of seconds'),
  ),
  key: z.optional(functionOption<(c: Context) => string | undefined | Promise<string | undefined>>()),
  trustedHeader: z.optional(z.string().check(z.regex(FIELD_NAME, 'must be a header name'))),
  store: z.optional(
    z.custom<Store>(
      (value) => isFunction((value as Partial<Store> | null)?.increment),
      'must be a Store (with increment())',
    ),
  ),
  policyName: z.optional(z.string().check(z.regex(PRINTABLE_ASCII, 'must be non-empty printable ASCII'))),
  onStoreError: z.optional(z.enum(['open', 'closed'])),
  storeTimeoutMs: z.optional(z.number().check(z.gt(0), z.maximum(MAX_DELAY_MS))),
  now: z.optional(functionOption<() => number>()),
});

/**
 * The /64 an IPv6 address (RFC 4291 §2.2 text, any case or compression) belongs to,
 * as `2001:db8:1:2/64`, or `id` itself when it is not one: IPv4 and IPv4-mapped
 * addresses (`::ffff:192.0.2.1`, also in hex) stay one bucket per address.
 */
function clientNetwork(id: string): string {
  if (!id.includes(':') || id.includes('.')) return id;
  let host: string;
  try {
    // The URL parser reads any valid IPv6 text (no zone) and writes it canonical, RFC 5952.
    host = new URL(`http://[${id}]`).hostname.slice(1, -1);
  } catch {
    return id;
  }
  // `::` written out as the groups it stands for (7 colons in all), then the first 4,
  // each zero as 0 whether `::` held it or not.
  const network = host
    .replace('::', ':'.repeat(10 - host.split(':').length))
    .split(':', IPV6_NETWORK_GROUPS)
    .map((group) => group || '0')
    .join(':');
  // ::/64 (loopback, IPv4-mapped and -compatible) and NAT64's 64:ff9b:: (RFC 6052, 8215)
  // hold IPv4 clients, or none: one bucket per address there.
  return EMBEDS_IPV4.test(network) ? host : `${network}/64`;
}

/**
 * A fixed-window rate limiter: each client gets `limit` requests per `windowMs`.
 *
 * - Every response (passed or rejected) carries `RateLimit-Policy: "name";q=limit;w=seconds`
 *   and `RateLimit: "name";r=remaining;t=seconds-until-reset`, the name being
 *   `policyName` or, by default, the quota's (`"100-per-60s"`).
 * - Request `limit + 1` in a window gets a 429 `application/problem+json` with
 *   `Retry-After: t` (delay-seconds, rounded up): the client that waits that long
 *   arrives in the next window.
 * - While this quota is used up (`r=0`), a shorter wait set inside it (a stacked
 *   limiter's 429 for a shorter window, `shed()`'s 503, a proxied upstream's refusal) is
 *   raised to `t`, so the client does not come back into this limiter's refusal: its
 *   `Retry-After` (delay-seconds or an HTTP-date) is set to `t` and a `retry-after-ms`,
 *   which clients read first, is dropped.
 * - The client is named by `key(c)` or `trustedHeader`; one of them is required. A
 *   request without an identity gets a 400 problem.
 * - A store error, or a store that takes over `storeTimeoutMs` (1 s), lets the request
 *   through (`onStoreError: 'open'`, the default) or answers 503 (`'closed'`).
 *
 * @example
 * ```ts
 * import { Hono } from 'hono';
 * import { rateLimit } from 'breakwater/hono';
 *
 * const app = new Hono();
 * app.use('/api/*', rateLimit({ limit: 100, windowMs: 60_000, trustedHeader: 'cf-connecting-ip' }));
 * app.get('/api/things', (c) => c.json({ things: [] }));
 * // 101st request in a minute: 429, Retry-After: 17, RateLimit: "100-per-60s";r=0;t=17
 * ```
 */
export function rateLimit(options: RateLimitOptions): MiddlewareHandler {
  const valid = validate(optionsSchema, options, 'rateLimit()');
  // Without a client identity every client would share one bucket; with two, which counts?
  if ((valid.key === undefined) === (valid.trustedHeader === undefined)) {
    throw new TypeError(
      `invalid options for rateLimit():\n  - ${valid.key ? 'set key or trustedHeader, not both' : 'key (a function of the request) or trustedHeader (e.g. "cf-connecting-ip") is required'}`,
    );
  }
  const { limit } = valid;
  // multipleOf allows for floating-point error (0.29 * 3_600_000 is 1043999.9999999999):
  // taken as the whole seconds it means, or the name, w and window starts would carry the error.
  const windowSeconds = Math.round(valid.windowMs / MS_PER_SECOND);
  const windowMs = windowSeconds * MS_PER_SECOND;
  const keyOf = valid.key;
  const header = valid.trustedHeader?.toLowerCase();
  const store = valid.store ?? memoryStore();
  const name = valid.policyName ?? `${limit}-per-${windowSeconds}s`;
  // Unset is 'open' (availability over strictness): only 'closed' refuses.
  const failClosed = valid.onStoreError === 'closed';
  const storeTimeoutMs = valid.storeTimeoutMs ?? DEFAULT_STORE_TIMEOUT_MS;
  const now = valid.now ?? Date.now;
  // An RFC 9651 sf-string: quoted, `\` and `"` escaped. For printable ASCII (a policyName
  // is checked to be; a quota's name is) that is what JSON.stringify writes.
  const quotedName = JSON.stringify(name);
  const policyHeader = `${quotedName};q=${limit};w=${windowSeconds}`;

  async function identity(c: Context): Promise<string | undefined> {
    if (keyOf) {
      const id: unknown = await keyOf(c);
      // Anything else (a numeric user id) is the app's bug: told as one, not as a 400 that
      // blames every client ("no client identity") while the limiter refuses them all.
      if (id == null || typeof id === 'string') return id || undefined;
      throw new TypeError(`rateLimit(): key() must return a string (got ${typeof id})`);
    }
    // The first entry of a list (`x-forwarded-for: client, proxy1`), trimmed; none when absent.
    const id = c.req.raw.headers
      .get(header as string)
      ?.split(',', 1)[0]
      ?.trim()
      .replace(WITH_PORT, '$1$2');
    return !id || id.length > MAX_IDENTITY_CHARS ? undefined : clientNetwork(id);
  }

  return async function rateLimit(c, next) {
    exposeClientHeaders(c);
    const given = await identity(c);
    if (given === undefined) {
      return answer(
        c,
        problemResponse({
          status: 400,
          title: 'Bad Request',
          detail: keyOf ? 'no client identity' : `no usable client identity header "${header}"`,
        }),
      );
    }

    // Short ids skip the digest (and its await): the common case stays as fast as before.
    // A long one goes into store keys as `sha256:` and the hex SHA-256 of its JSON text.
    // JSON, not the id as UTF-8: UTF-8 writes every lone surrogate as U+FFFD, so two ids
    // differing only there would share a bucket; JSON escapes them (ES2019).
    const id =
      given.length > MAX_PLAIN_ID_CHARS ? DIGEST_PREFIX + (await sha256Hex(JSON.stringify(given))) : given;
    const at = now();
    const windowStart = Math.floor(at / windowMs) * windowMs;
    const resetMs = windowStart + windowMs - at;
    // 0 until the store counts: no count is a failure, as below.
    let count = 0;
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      // Number(): a count as text (a Redis reply) is still a count.
      count = Number(
        await Promise.race([
          // The quoted name ends at its closing quote, so no name and id pair can spell another's key.
          store.increment(`rl:${quotedName}:${id}:${windowStart}`, 1, resetMs),
          new Promise<never>((_, reject) => {
            timer = setTimeout(reject, storeTimeoutMs);
          }),
        ]),
      );
    } catch {
      // Answered below, once the timer is cleared: it must not outlive a store that threw.
    }
    clearTimeout(timer);
    // Not a whole number of requests (NaN, a reply object, null, 0, 1.5) is a failure
    // too: the quota is unknown, and `r` must be an sf-integer.
    if (!(count > 0 && Number.isInteger(count))) {
      if (!failClosed) {
        await next();
        return;
      }
      return answer(
        c,
        problemResponse(
          {
            status: 503,
            title: 'Service Unavailable',
            detail: 'the rate limit store is unreachable; not processed',
          },
          STORE_DOWN_RETRY_AFTER_MS,
          { 'x-should-retry': 'true' },
        ),
      );
    }

    let resetSeconds = retryAfterSeconds(resetMs);
    const remaining = Math.max(0, limit - count);
    if (count > limit) {
      return answer(
        c,
        problemResponse(
          {
            status: 429,
            title: 'Too Many Requests',
            detail: `quota of ${limit} requests per ${windowSeconds} s used up; retry in ${resetSeconds} s`,
          },
          resetMs,
          { 'ratelimit-policy': policyHeader, ratelimit: `${quotedName};r=0;t=${resetSeconds}` },
        ),
      );
    }
    await next();
    // t counts from when the answer is sent, not from when the request came in: a
    // handler that took 40 s (a model call) would otherwise send its client away 40 s
    // too long. One that outlasted the window answers after the reset: t=0.
    const sent = now();
    resetSeconds = retryAfterSeconds(windowStart + windowMs - sent);
    // Appended, not set: both fields are Lists, and stacked limiters (a burst and a
    // daily quota) each add their member, so a client sees whichever is used up.
    // c.header() copies a finalized response first, so immutable headers (a proxied
    // fetch response) are fine; an error response from onError gets them too.
    c.header('ratelimit-policy', policyHeader, { append: true });
    c.header('ratelimit', `${quotedName};r=${remaining};t=${resetSeconds}`, { append: true });
    // This quota is used up until its reset: an answer that asks for a shorter wait (an
    // inner limiter's 429 for its shorter window, shed()'s 503) would send the client
    // back into a refusal, as Retry-After is read before RateLimit. It waits for both.
    // The wait read as clients read it: retry-after-ms first (a proxied OpenAI-style
    // upstream's, which goes, as Retry-After now says more), an HTTP-date; with none of
    // them, this RateLimit member, never shorter than t.
    if (remaining === 0 && (retryDelay(c.res.headers, sent) as number) < +resetSeconds * MS_PER_SECOND) {
      c.header('retry-after', resetSeconds);
      c.header('retry-after-ms', undefined);
    }
  };
}
