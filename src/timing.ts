/**
 * @module
 * Timing headers: how long a server asked us to wait, and what it said about its
 * rate limits. Reads `retry-after-ms`, `Retry-After` (RFC 9110 §10.2.3), `RateLimit`
 * and `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers), the older
 * `RateLimit-Reset` / `X-RateLimit-Reset` family, and the OpenAI and Anthropic
 * rate-limit headers.
 *
 * Every value here comes from a server we do not control, so every parser is
 * total (garbage yields `undefined`, never a throw), linear-time (anchored or
 * sticky patterns without nested quantifiers over overlapping characters), and
 * never returns NaN, Infinity or a negative delay.
 */

/**
 * The longest delay {@link retryDelay} ever returns: 2^31 - 1 ms (about 24.8 days).
 *
 * This is the largest delay `setTimeout` honours on every runtime; anything longer
 * overflows a signed 32-bit integer and fires after 1 ms (Node warns with
 * `TimeoutOverflowWarning`), which would turn "wait a month" into "retry now".
 * Larger requested delays, including absurd ones like a 400-digit Retry-After,
 * are clamped to this value so callers can compare it with their own caps.
 */
export const MAX_DELAY_MS: number = 2 ** 31 - 1;

/**
 * Header values longer than this many characters are ignored (treated as absent),
 * except a `retry-after-ms`, `Retry-After` or `RateLimit-Reset`-family reset whose
 * first this-many characters are digits: that is a delay too long to read, and reads
 * as {@link MAX_DELAY_MS}.
 *
 * No legitimate timing header comes near it (an IMF-fixdate is 29 characters, a
 * `RateLimit` field with a dozen policies a few hundred), and it bounds the work
 * any single value can cost us, on top of the parsers being linear-time.
 */
export const MAX_HEADER_CHARS: number = 4096;

/**
 * `RateLimit-Reset`-style values at or above this are epoch seconds, below it a
 * delay in seconds: 1704067200 is 2024-01-01T00:00:00Z. GitHub sends epoch
 * seconds in `X-RateLimit-Reset`; the early ratelimit-headers drafts send delay
 * seconds; nobody asks for a 54-year wait. At or above this times 1000 they are epoch
 * milliseconds (some gateways and model routers send those): read as seconds, a reset
 * 30 s away was a wait of 54,000 years, which failed the call and paused its key.
 */
const EPOCH_RESET_THRESHOLD_SECONDS = 1_704_067_200;

/**
 * RFC 9110 §5.6.7: an rfc850-date two-digit year that appears to be more than this
 * many years in the future means the most recent past year with those digits.
 */
const TWO_DIGIT_YEAR_FUTURE_WINDOW = 50;

/**
 * Fraction digits beyond this are below a nanosecond for every Go unit up to `h` and are
 * dropped, as Go does. (Up here with the other numbers: esbuild inlines a constant only
 * above a module's first other statement.)
 */
const MAX_FRACTION_DIGITS = 13;

/**
 * The most comma-separated pieces of a timing value read (`Retry-After`, `retry-after-ms`,
 * a quota's reset or remaining count; an IMF-fixdate is two). Copies come from the origin
 * and a proxy or two, so a handful is every real case; past this a value is hostile or
 * broken, and its further pieces are not read: the work per value stays a few dozen
 * anchored matches, whatever it holds.
 */
const MAX_DELAY_PIECES = 32;

/**
 * A rate-limit value that may read 0 (see mentionsRateLimit): a copy that starts with `0`,
 * or a `RateLimit` member's `r=0`. Each start tries a comma (or the value's start) and the
 * whitespace after it once: linear.
 */
const USED_UP = /(?:^|,)[\t ]*0|r=0/;

/** Capture groups of a bare item in SF_ITEM and SF_PARAMETER (see SF_BARE_ITEM). */
const SF_INTEGER = 2;
const SF_STRING = 3;
const SF_TOKEN = 4;
const SF_BYTES = 5;

/**
 * Go `time.Duration` units (as sent by OpenAI), in nanoseconds. Go sums terms in
 * integer nanoseconds; so do we, because float milliseconds would turn `0.007s`
 * into 7.000000000000001 ms and round it up to 8.
 */
const GO_DURATION_UNITS_NS: Readonly<Record<string, number>> = {
  ns: 1,
  us: 1e3,
  '\u00b5s': 1e3, // µs, MICRO SIGN (what Go prints)
  '\u03bcs': 1e3, // μs, GREEK SMALL LETTER MU (Go accepts it too)
  ms: 1e6,
  s: 1e9,
  m: 6e10,
  h: 3.6e12,
};

/**
 * One Go duration term: `[digits][.digits]unit`. The units alternative tries
 * `ms` before `m`. Each quantifier is followed by a character it cannot match,
 * so a failed match backtracks at most once over each digit.
 */
const GO_DURATION_TERM = /(\d*)(?:\.(\d*))?([nu\u00b5\u03bcm]?s|m|h)/y;

/** A quota header field: the window's size, what is left of it, and when it is restored. */
export type QuotaField = 'limit' | 'remaining' | 'reset';

/**
 * A family of per-quota headers: its quota names, the header name of each field of a
 * quota, and how its reset reads (as the wait from `now` in ms, NaN when unreadable)
 * from the value as held: untrimmed, of any length (over {@link MAX_HEADER_CHARS}
 * only the legacy family reads one, as its delay too long to read), or `undefined`. A
 * reset sent more than once reads as its longest readable copy (see longestCopy).
 */
export type QuotaHeaders = readonly [
  names: readonly string[],
  header: (name: string, field: QuotaField) => string,
  parseReset: (value: string | undefined, now: number) => number,
];

/**
 * The legacy `X-RateLimit-*` family: delay seconds, or epoch seconds when ≥ 2024-01-01,
 * or epoch milliseconds when that many ms.
 * Bare digits, like `Retry-After`: one too long to read is the longest wait (see
 * readDelayNumber), the `-Remaining` veto still applying.
 */
const LEGACY_QUOTAS: QuotaHeaders = [
  ['ratelimit', 'x-ratelimit', 'x-rate-limit'],
  (prefix, field) => `${prefix}-${field}`,
  (value, now) =>
    longestCopy(value, now, (copy) => {
      const reset = readDelayNumber(DIGITS, copy);
      return reset >= EPOCH_RESET_THRESHOLD_SECONDS * 1000
        ? reset - now
        : reset * 1000 - (reset >= EPOCH_RESET_THRESHOLD_SECONDS ? now : 0);
    }),
];

/**
 * The model providers' families: OpenAI's `x-ratelimit-<field>-<quota>` (Go durations)
 * and Anthropic's `anthropic-ratelimit-<quota>-<field>` (RFC 3339 timestamps).
 */
export const PROVIDER_QUOTAS: readonly QuotaHeaders[] = [
  [
    ['requests', 'tokens'],
    (name, field) => `x-ratelimit-${field}-${name}`,
    (value, now) => longestCopy(value, now, parseGoDuration),
  ],
  [
    ['requests', 'tokens', 'input-tokens', 'output-tokens'],
    (name, field) => `anthropic-ratelimit-${name}-${field}`,
    (value, now) => longestCopy(value, now, parseRfc3339),
  ],
];

/**
 * Response headers in any shape a fetch-based client is likely to hold them:
 * a `Headers` instance, a plain object (names matched case-insensitively, as in
 * Node's `IncomingHttpHeaders`; array values are joined with `", "` like repeated
 * field lines), or any iterable of `[name, value]` pairs (a `Map`, an array).
 */
export type HeadersLike =
  | Headers
  | Iterable<readonly [string, string]>
  | { readonly [name: string]: string | readonly string[] | undefined };

/** One member of the `RateLimit` field: the current state of one quota policy. */
export interface RateLimitStatus {
  /** The policy's name (the member's String or Token), matching a {@link RateLimitPolicy.policy}. */
  policy: string;
  /** `r`: quota units still available in the current window (non-negative integer). */
  remaining: number;
  /** `t`: seconds until the quota is restored. Absent when the server did not send a valid one. */
  resetSeconds?: number;
  /** `pk`: the partition key this state applies to, as the base64 text of the Byte Sequence (not decoded: it is an opaque id). */
  partitionKey?: string;
}

/** One member of the `RateLimit-Policy` field: a quota the server enforces. */
export interface RateLimitPolicy {
  /** The policy's name (the member's String or Token). */
  policy: string;
  /** `q`: quota units allowed per window (non-negative integer). */
  quota: number;
  /** `qu`: what the quota counts, e.g. `"request"`, `"content-bytes"`, `"concurrency"`. Absent means requests (the draft's default). */
  quotaUnit?: string;
  /** `w`: the window length in seconds. Absent when the server did not send a valid one. */
  windowSeconds?: number;
  /** `pk`: the partition key, as the base64 text of the Byte Sequence (not decoded). */
  partitionKey?: string;
}

/** What the `RateLimit` and `RateLimit-Policy` fields said (draft-ietf-httpapi-ratelimit-headers). */
export interface RateLimitInfo {
  /** Valid members of `RateLimit`, in field order (empty when absent). */
  limits: RateLimitStatus[];
  /** Valid members of `RateLimit-Policy`, in field order (empty when absent). */
  policies: RateLimitPolicy[];
}

/**
 * The server's requested wait before the next request, in milliseconds.
 *
 * Sources, first one that yields a number wins:
 * 1. `retry-after-ms`: decimal milliseconds (OpenAI, Anthropic), rounded up.
 * 2. `Retry-After`: delay-seconds or an HTTP-date (RFC 9110 §10.2.3); past dates give 0.
 *    For both, and for 4., digits past {@link MAX_HEADER_CHARS} read as the longest wait, not none.
 *    Either sent more than once (`Retry-After: 30, 120`: fetch joins repeated lines with
 *    `, `) reads as its longest readable copy; so does a reset of 4. to 6., and a
 *    remaining count sent more than once as its fewest.
 * 3. `RateLimit`: the largest `t` among policies with `r=0` (draft-ietf-httpapi-ratelimit-headers).
 * 4. `RateLimit-Reset`, `X-RateLimit-Reset`, `X-Rate-Limit-Reset`: delay seconds, or epoch
 *    seconds when ≥ 2024-01-01, or epoch milliseconds when ≥ 2024-01-01 in ms; skipped when the matching `-Remaining` says quota is left.
 * 5. `x-ratelimit-reset-requests` / `-tokens` (OpenAI, Go durations) whose matching remaining is 0.
 * 6. `anthropic-ratelimit-*-reset` (RFC 3339) whose matching remaining is 0.
 *
 * @param headers - The response headers.
 * @param now - The current time in epoch milliseconds, for date-valued headers; defaults to `Date.now()`.
 * @returns An integer in `[0, MAX_DELAY_MS]`, or `undefined` when no header asks for a wait.
 *
 * @example
 * ```ts
 * const res = await fetch(url);
 * if (res.status === 429) {
 *   const waitMs = retryDelay(res.headers) ?? 1_000;
 * }
 * ```
 */
export function retryDelay(headers: HeadersLike, now: number = Date.now()): number | undefined {
  return (
    clampDelay(
      longestCopy(readRawHeader(headers, 'retry-after-ms'), now, (copy) => readDelayNumber(DECIMAL, copy)),
    ) ??
    clampDelay(longestCopy(readRawHeader(headers, 'retry-after'), now, fromRetryAfter)) ??
    fromQuotas(headers, now, rateLimitFieldQuotas) ??
    fromQuotas(headers, now, legacyQuotas) ??
    fromQuotas(headers, now, openaiQuotas) ??
    fromQuotas(headers, now, anthropicQuotas)
  );
}

/**
 * The tightest quota a response reports: the fewest requests (or tokens) left, and how
 * long until that quota is restored, in ms. Read from a response of any status (a 200
 * included) and from every source of {@link retryDelay} that carries a remaining count
 * beside its reset: `RateLimit` (`r`, `t`), the `RateLimit-Reset` family with its
 * `-Remaining`, OpenAI's `x-ratelimit-*-requests` / `-tokens` and Anthropic's
 * `anthropic-ratelimit-*`. A reset without a remaining count says nothing here (GitHub
 * sends one on every response), nor does one whose reset has come (it is restored),
 * nor one whose reset is further off than `maxResetMs`. Between quotas with the same
 * count, the later reset wins. A token quota with tokens left reads as `Infinity` left:
 * how many calls fit in them is unknown.
 *
 * The breaker paces a key on it: a quota at 0 pauses the key until its reset (the next
 * call would only earn a 429), and after a pause only as many waiting calls go as the
 * pace probe's answer says are left.
 *
 * @param usedUpOnly - Only a quota at 0 is wanted: skip the reads (up to 19 header
 *   lookups, 6 to 11 µs on Node 20) unless some rate-limit header reads 0, which a
 *   `Headers` tells in one pass over its fields. The breaker asks this on every answer.
 * @param maxResetMs - The furthest reset, in ms, worth knowing about; default: any. The
 *   breaker passes its `maxRetryAfterMs`, past which it leaves a quota to the server's own
 *   429. Passed over, such a quota cannot hide one that resets in time: an
 *   `X-RateLimit-Reset` at 0 that reads as {@link MAX_DELAY_MS} (15 digits, or too many to
 *   read) was the later reset beside OpenAI's request quota at 0 for 2 s, so the breaker
 *   paced nothing and every call in those 2 s earned a 429.
 */
export function quotaLeft(
  headers: HeadersLike,
  now: number = Date.now(),
  usedUpOnly = false,
  maxResetMs: number = Infinity,
): { remaining: number; resetMs: number } | undefined {
  if (!mentionsRateLimit(headers, usedUpOnly)) return undefined;
  let tightest: { remaining: number; resetMs: number } | undefined;
  for (const read of QUOTA_FAMILIES) {
    for (const [remaining, reset] of read(headers, now)) {
      // No readable reset says nothing, and a reset that has come means the quota is
      // restored, whatever its count said: neither is the tightest. Nor is one past the bound.
      const resetMs = clampDelay(reset) ?? 0;
      const { remaining: least = Infinity, resetMs: latest = 0 } = tightest ?? {};
      if (
        resetMs > 0 &&
        resetMs <= maxResetMs &&
        remaining <= least &&
        (remaining < least || resetMs > latest)
      ) {
        tightest = { remaining, resetMs };
      }
    }
  }
  return tightest;
}

/**
 * Whether a rate-limit header (with `usedUpOnly`, one that reads 0, or a `RateLimit`
 * with `r=0`) may be there. One pass over a `Headers` costs less than the lookups it
 * spares (each `get` on Node 20 is about 0.3 µs); a false alarm only costs those.
 * The pass is `forEach`, not the iterator: Deno's iterator costs about 2 µs a header
 * (25 µs for an OpenAI answer's dozen, on every answer), its `forEach` a tenth of that.
 * Other shapes say true: read them.
 */
function mentionsRateLimit(headers: HeadersLike, usedUpOnly: boolean): boolean {
  let found = true;
  try {
    if (typeof Headers === 'function' && headers instanceof Headers) {
      found = false;
      headers.forEach((value, name) => {
        found ||=
          (name.includes('ratelimit') || name.includes('rate-limit')) &&
          // Any copy, not value === '0': a proxy adding its own copy sends `0, 0` or `7, 0`
          // (fetch joins repeated lines); a false alarm ("0.5", "05") only costs the full read.
          (!usedUpOnly || USED_UP.test(value));
      });
    }
  } catch {
    // A Headers whose forEach throws (Node's and Bun's do on a Proxy): garbage, read as no
    // quota. A proxy trap that throws on `instanceof` leaves it to readHeader, which copes.
  }
  return found;
}

/**
 * The server's explicit verdict on retrying, from `x-should-retry` (OpenAI, Anthropic).
 *
 * @param headers - The response headers.
 * @returns `true` or `false` for those values (case-insensitive, whitespace trimmed), else `undefined`.
 *
 * @example
 * ```ts
 * if (shouldRetryHeader(res.headers) === false) throw new Error('server says do not retry');
 * ```
 */
export function shouldRetryHeader(headers: HeadersLike): boolean | undefined {
  const value = readHeader(headers, 'x-should-retry')?.toLowerCase();
  return value === 'true' ? true : value === 'false' ? false : undefined;
}

/**
 * The structured contents of the `RateLimit` and `RateLimit-Policy` fields
 * (draft-ietf-httpapi-ratelimit-headers: RFC 8941 Lists of Items with parameters
 * `r`, `t`, `pk` and `q`, `qu`, `w`, `pk`).
 *
 * Lenient where it is safe to be: unknown parameters are ignored, a malformed
 * member is skipped (up to the next top-level comma) rather than discarding the
 * whole field as strict RFC 8941 parsing would, and Token policy names from
 * earlier drafts are accepted alongside Strings.
 *
 * @param headers - The response headers.
 * @returns The valid members of both fields, or `undefined` when neither has any.
 *
 * @example
 * ```ts
 * // RateLimit: "default";r=0;t=30   RateLimit-Policy: "default";q=100;w=60
 * parseRateLimit(res.headers);
 * // { limits: [{ policy: 'default', remaining: 0, resetSeconds: 30 }],
 * //   policies: [{ policy: 'default', quota: 100, windowSeconds: 60 }] }
 * ```
 */
export function parseRateLimit(headers: HeadersLike): RateLimitInfo | undefined {
  const limits = rateLimitStatuses(headers);
  const policies = sfMembers<RateLimitPolicy>(headers, 'ratelimit-policy', 'quota', toPolicy);
  return limits.length > 0 || policies.length > 0 ? { limits, policies } : undefined;
}

// ---------------------------------------------------------------------------
// Sources for retryDelay, in precedence order (retry-after-ms is read inline).
// Internally "no value" is NaN: it survives the arithmetic (`NaN * 1000`,
// `NaN - now`), compares false (`NaN > 0`), and clampDelay turns it into
// `undefined` on the way out.

/**
 * The longest wait a timing `value` asks for, from `now`, in ms, each comma-separated
 * copy read by `read` (which takes a value as held, as {@link QuotaHeaders}' resets do);
 * NaN when it names none.
 *
 * `Retry-After`, `retry-after-ms` and the quota resets are singletons, yet a proxy that
 * adds its own copy to the origin's (or its own quota's reset beside the origin's) sends
 * two field lines, and fetch joins them with `, ` (RFC 9110 §5.3; an intermediary may
 * write `30,30` or `30 , 30`). Copies that differ (`30, 120`: the origin's and the
 * proxy's, each asking for a wait) read as the longest: only that one honours both, where
 * reading none sent the resend on retry's own backoff, sooner than either asked. An
 * IMF-fixdate or rfc850-date holds a comma after its weekday (`Wed, 21 Oct 2015 07:28:00
 * GMT`), so a piece that is no value on its own is read again joined to the next one, as
 * a date. (None of the other forms holds a comma: a join is never one of them. The
 * structured `RateLimit` field is a List, whose copies are its members: see sfMembers.)
 *
 * A copy that is no value at all (`30, soon`, an empty piece) is passed over, not taken
 * to spoil the others: it says nothing about them, and the value read as absent would
 * again resend sooner than the readable copy asked (a wait too long fails fast under
 * `maxRetryAfterMs`, one too short earns another refusal). A copy meant as a longer wait
 * in a form not read here (a date in `UTC`) is not waited out either way. A value without
 * a comma, or over {@link MAX_HEADER_CHARS}, is one copy (read as `read` reads an over-long
 * one: absent, or a delay too long to read). Only the first {@link MAX_DELAY_PIECES}
 * pieces are read, each by `read` at most three times (alone, joined to the piece before
 * and to the one after), and `read` is linear, so the read is too.
 */
function longestCopy(
  value: string | undefined,
  now: number,
  read: (copy: string | undefined, now: number) => number,
): number {
  if (value === undefined || value.length > MAX_HEADER_CHARS || !value.includes(',')) return read(value, now);
  const pieces = value.split(',', MAX_DELAY_PIECES);
  let longest = -Infinity;
  for (let at = 0; at < pieces.length; at++) {
    let ms = read(pieces[at], now);
    // Not a value alone: perhaps the weekday of a date that goes on past the comma (past
    // the last piece, `undefined` joins it: no date either).
    if (Number.isNaN(ms)) {
      ms = read(`${pieces[at]},${pieces[at + 1]}`, now);
      if (!Number.isNaN(ms)) at++;
    }
    if (ms > longest) longest = ms;
  }
  return longest > -Infinity ? longest : NaN;
}

/**
 * The fewest a quota's remaining count `value` says are left: its least readable copy, or
 * NaN. Copies that differ (`5, 0`: a proxy's quota and the origin's) read as the fewest,
 * the tightest quota, as a reset reads as its longest copy (see {@link longestCopy}, whose
 * read this is, negated): a layer at 0 asks for its reset whatever the other has left.
 */
function fewestLeft(value: string | undefined): number {
  return -longestCopy(value, 0, (copy) => -parseNumber(DIGITS, boundedHeader(copy)));
}

/**
 * RFC 9110 §10.2.3 `Retry-After = HTTP-date / delay-seconds` as the wait from `now`, in
 * ms, or NaN.
 */
function fromRetryAfter(value: string | undefined, now: number): number {
  const seconds = readDelayNumber(DIGITS, value);
  return Number.isNaN(seconds) ? httpDateMs(boundedHeader(value) ?? '', now) : seconds * 1000;
}

/**
 * An HTTP-date in any of its three forms (RFC 9110 §5.6.7) as the wait until it from
 * `now`, in ms, or NaN: asctime (month first) ends in its year, the others in GMT.
 */
function httpDateMs(value: string, now: number): number {
  const p = HTTP_DATE.exec(value);
  if (p === null || !p[7] !== !p[12]) return NaN;
  return (
    dateMs([p[3] ?? p[6] ?? p[12], p[2] ?? p[5] ?? p[7], p[1] ?? p[4] ?? p[8], p[9], p[10], p[11]], now) - now
  );
}

/**
 * The wait a family of quotas asks for. GitHub and the early ratelimit-headers drafts
 * send the legacy reset on every response, not only when throttled: a 502 from an API
 * with 4,999 requests left must not wait out the hour, so there a `-Remaining` that
 * says quota is left vetoes the reset, and the first usable reset wins. In the other
 * families a quota with units left asks for no wait, and the longest reset of those at
 * 0 wins. NaN (none yet) gives way to any reset, so a NaN reset never replaces one found.
 */
function fromQuotas(headers: HeadersLike, now: number, read: QuotaReader): number | undefined {
  const legacy = read === legacyQuotas;
  let longest = NaN;
  for (const [remaining, resetMs] of read(headers, now)) {
    if (
      (legacy ? !(remaining > 0) : remaining === 0) &&
      (Number.isNaN(longest) || (!legacy && resetMs > longest))
    ) {
      longest = resetMs;
    }
  }
  return clampDelay(longest);
}

/**
 * A `retry-after-ms`, `Retry-After` or `RateLimit-Reset` number (`pattern`: DECIMAL or DIGITS) from the raw
 * header value, or NaN. A value over {@link MAX_HEADER_CHARS} that is all digits as far as
 * we look is a delay too long to read, not an absent one: read as absent, a buggy or hostile
 * 100,000-digit `Retry-After` would let retry resend on its own backoff into the window
 * the server asked us to keep quiet. It reads as Infinity (clamped to MAX_DELAY_MS, what a
 * huge readable value such as 99999999999999 gives), so retry fails fast with
 * RetryAfterTooLongError and the breaker pauses the key for its `maxRetryAfterMs`.
 * Only the first MAX_HEADER_CHARS characters are looked at, so the work stays bounded: a value that
 * starts as thousands of digits is taken for a number whatever follows, and one padded
 * with thousands of zeros for a long wait (the safe side: a wait too long fails fast,
 * one too short resends). Anything else over the limit, a decimal whose fraction runs
 * past it included, stays absent.
 *
 * The `RateLimit-Reset` family is bare digits too, and read the same way: its reset is
 * the server's wait whenever its `-Remaining` does not say quota is left (a 429 with
 * `X-RateLimit-Remaining: 0` and a 5,000-digit reset would otherwise be resent on
 * retry's own backoff), and the veto still applies to a reset too long to read.
 *
 * The other sources keep "over the limit = absent": `RateLimit`'s `t` is an sf-integer of
 * at most 15 digits (RFC 8941 §3.3.1), so a longer one is invalid, not large, and an
 * over-long field is a list whose prefix does not say which member is at `r=0`; OpenAI's
 * Go durations and Anthropic's RFC 3339 resets are never bare digits.
 */
function readDelayNumber(pattern: RegExp, value: string | undefined): number {
  if (value !== undefined && value.length > MAX_HEADER_CHARS) {
    return OVERLONG_DIGITS.test(value.slice(0, MAX_HEADER_CHARS)) ? Infinity : NaN;
  }
  return parseNumber(pattern, boundedHeader(value));
}

/**
 * One family of quota headers, read as `[remaining, resetMs]` per quota; NaN where a
 * header is absent or garbage, and `resetMs` not yet clamped.
 */
type QuotaReader = (
  headers: HeadersLike,
  now: number,
) => Array<readonly [remaining: number, resetMs: number]>;

/** `RateLimit` (draft-ietf-httpapi-ratelimit-headers): `r` and `t` seconds per policy. */
const rateLimitFieldQuotas: QuotaReader = (headers) =>
  rateLimitStatuses(headers).map((status) => [status.remaining, (status.resetSeconds ?? NaN) * 1000]);

/** A family's `[remaining, resetMs]` per quota. */
const quotasOf =
  ([names, header, parseReset]: QuotaHeaders): QuotaReader =>
  (headers, now) =>
    names.map((name) => {
      const resetMs = parseReset(readRawHeader(headers, header(name, 'reset')), now);
      // Every reader of a quota needs its reset: without one its count is not read, so a
      // failure without rate-limit headers costs one lookup per quota, not two.
      const remaining = Number.isNaN(resetMs)
        ? NaN
        : fewestLeft(readRawHeader(headers, header(name, 'remaining')));
      // How many calls fit in what is left of a token quota is unknown: it counts only
      // once used up (5 tokens left is not 5 calls).
      return [remaining > 0 && name.includes('tokens') ? Infinity : remaining, resetMs];
    });

const [legacyQuotas, openaiQuotas, anthropicQuotas] = [LEGACY_QUOTAS, ...PROVIDER_QUOTAS].map(quotasOf) as [
  QuotaReader,
  QuotaReader,
  QuotaReader,
];

/** Every family that pairs a remaining count with its reset, for {@link quotaLeft}, in {@link retryDelay}'s order. */
const QUOTA_FAMILIES: readonly QuotaReader[] = [
  rateLimitFieldQuotas,
  legacyQuotas,
  openaiQuotas,
  anthropicQuotas,
];

/**
 * Every delay leaves through here: NaN (no value, or a non-finite `now`) becomes
 * `undefined`, negatives and past dates 0, fractions round up (waiting a hair too
 * long is harmless, too short earns another 429), and everything is capped.
 */
export function clampDelay(ms: number): number | undefined {
  if (Number.isNaN(ms)) return undefined;
  return ms <= 0 ? 0 : Math.min(Math.ceil(ms), MAX_DELAY_MS);
}

// ---------------------------------------------------------------------------
// Header access

/**
 * The one header getter: lowercase `name` in, the value with surrounding HTTP
 * whitespace removed (as fetch's `Headers` normalises it) out, or `undefined`
 * when absent, not a string, or longer than {@link MAX_HEADER_CHARS}.
 */
export function readHeader(headers: HeadersLike, name: string): string | undefined {
  return boundedHeader(readRawHeader(headers, name));
}

/**
 * A raw header value as {@link readHeader} returns it: `undefined` over
 * {@link MAX_HEADER_CHARS}, else with fetch's HTTP whitespace (HTAB, LF, CR, SP)
 * trimmed ({@link trimHttp}), not `String#trim`'s Unicode spaces.
 *
 * Copies of one value read as that value. A field sent on several lines reaches us
 * joined with a comma (RFC 9110 §5.3): a proxy that adds its own `Retry-After: 30` to the
 * origin's gives `30, 30`, which read as no wait, so retry resent into the window the
 * server asked us to keep quiet. RFC 9110 §8.6 lets a recipient read a `Content-Length`
 * repeated with one value the same way; differing copies (`1, 2`) stay unreadable
 * (the timing values read their longest copy instead, and remaining counts their fewest:
 * see longestCopy and fewestLeft).
 * The comma may have optional whitespace either side (§5.3, §5.6.1): fetch writes `", "`,
 * an intermediary that combines lines itself may write `30,30` or `30 , 30`. So the
 * value is cut at its commas, each piece trimmed, and the shortest run of pieces that
 * repeats to the end is the unit (an HTTP-date, which holds a comma, is two pieces);
 * the first copy is returned as sent. Linear: one pass over the pieces, at most twice
 * as many comparisons as pieces (about 0.1 ms a read on 4 KB of `a, a, ..., b`, Node 20).
 * Values without a comma never get here.
 */
function boundedHeader(value: string | undefined): string | undefined {
  if (value === undefined || value.length > MAX_HEADER_CHARS) return undefined;
  const trimmed = trimHttp(value);
  // Most values (numbers, durations, ids) hold no comma: one native scan, about 0.6 µs
  // less a read than the search below (Node 20).
  if (!trimmed.includes(',')) return trimmed;
  const sent = trimmed.split(',');
  const pieces = sent.map(trimHttp);
  const count = pieces.length;
  // Knuth-Morris-Pratt's border table over the pieces: the longest run that both starts
  // and ends them, so count - border is the shortest period.
  const border = [0];
  for (let at = 1, k = 0; at < count; border[at++] = k) {
    while (k > 0 && pieces[at] !== pieces[k]) k = border[k - 1] as number;
    if (pieces[at] === pieces[k]) k++;
  }
  const unit = count - (border[count - 1] as number);
  return count % unit ? trimmed : trimHttp(sent.slice(0, unit).join(','));
}

/**
 * `value` without fetch's HTTP whitespace (HTAB, LF, CR, SP) at either end. Linear: the
 * match starts at the first non-whitespace character, runs to the end and backs up only
 * over the trailing whitespace.
 */
function trimHttp(value: string): string {
  return /[^\t\n\r ](?:[\s\S]*[^\t\n\r ])?/.exec(value)?.[0] ?? '';
}

/** The lookup behind {@link readHeader}: the value as held (any length, untrimmed), or `undefined`. */
function readRawHeader(headers: HeadersLike, name: string): string | undefined {
  try {
    if (typeof Headers === 'function' && headers instanceof Headers) return headers.get(name) ?? undefined;
    if (headers != null) {
      // JS callers may pass anything (other non-objects have no matching entries). A plain object is read as its [name, value]
      // entries; only there may a value be an array (one string per field line).
      const lines: string[] = [];
      const isRecord = typeof (headers as Partial<Iterable<unknown>>)[Symbol.iterator] !== 'function';
      for (const pair of isRecord ? Object.entries(headers) : (headers as Iterable<unknown>)) {
        const [key, item] = Array.isArray(pair) ? (pair as unknown[]) : [];
        if (typeof key === 'string' && key.length === name.length && key.toLowerCase() === name) {
          for (const line of isRecord && Array.isArray(item) ? item : [item]) {
            if (typeof line === 'string') lines.push(line);
          }
        }
      }
      if (lines.length > 0) return lines.join(', ');
    }
  } catch {
    // A getter, proxy trap or iterator that throws, or a Headers whose get does (Node's
    // and Bun's on a Proxy): garbage, so the header reads as absent.
  }
  return undefined;
}

// ---------------------------------------------------------------------------
// Numbers

/** `1*DIGIT` and nothing else. */
export const DIGITS: RegExp = /^\d+$/;

/** `1*DIGIT [ "." 1*DIGIT ]`, e.g. `retry-after-ms: 1500.5`. */
const DECIMAL = /^\d+(?:\.\d+)?$/;

/** The first MAX_HEADER_CHARS characters of an over-long value: HTTP whitespace, then digits to the cut. */
const OVERLONG_DIGITS = /^[\t\n\r ]*\d+$/;

/**
 * `value` as a number if all of it matches `pattern`, else NaN. `Number()` alone
 * would also take signs, exponents, `0x` and whitespace. A very long digit string
 * may come back as a huge number or Infinity; callers clamp, so that is safe.
 */
export function parseNumber(pattern: RegExp, value: string | undefined): number {
  return value !== undefined && pattern.test(value) ? Number(value) : NaN;
}

/**
 * A Go `time.Duration` string as OpenAI sends it (`20ms`, `6m0s`, `1h2m3.5s`):
 * one or more `[digits][.digits]unit` terms, or a bare `0`. Signs are rejected (a
 * negative reset is meaningless). Returns milliseconds, possibly fractional, or NaN.
 * Takes the header value as held (read through {@link boundedHeader}), so it is
 * OpenAI's `parseReset` in {@link PROVIDER_QUOTAS} as it is.
 */
export function parseGoDuration(raw: string | undefined): number {
  const value = boundedHeader(raw) ?? '';
  if (value === '0') return 0;
  let totalNs = value === '' ? NaN : 0;
  for (let at = 0; at < value.length; ) {
    const term = matchAt(GO_DURATION_TERM, value, at);
    if (term === null || !(term[1] || term[2])) return NaN; // no term, or no digits
    const [text, whole, allFraction = '', unit = ''] = term;
    const unitNs = GO_DURATION_UNITS_NS[unit] as number; // the pattern only admits its units
    const fraction = allFraction.slice(0, MAX_FRACTION_DIGITS);
    // A huge integer part becomes Infinity here; clampDelay caps it.
    totalNs += Number(whole) * unitNs + Math.trunc((Number(fraction) * unitNs) / 10 ** fraction.length);
    at += text.length;
  }
  return totalNs / 1e6;
}

/** Runs the sticky `pattern` at index `at` of `text`. */
function matchAt(pattern: RegExp, text: string, at: number): RegExpExecArray | null {
  pattern.lastIndex = at;
  return pattern.exec(text);
}

// ---------------------------------------------------------------------------
// Dates. Never `Date.parse`: it accepts implementation-defined formats and rolls
// `30 Feb` or hour 25 over into valid dates. Fixed-width anchored patterns pick
// the parts; `dateMs` builds the instant and rejects anything that rolled over.

// RFC 9110 §5.6.7 grammar, built from shared pieces. HTTP-date is case-sensitive
// and must be GMT. The weekday must be a valid name but is not checked against the
// date: the date is what the server means, and a mismatch is a cosmetic server bug.
const MONTHS = 'Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec';

/**
 * The three HTTP-date forms as one pattern, each form's date parts in groups of their
 * own, then the shared time (groups 9-11), then `GMT` or asctime's year (group 12):
 * - IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`: day 1, month 2, year 3;
 * - rfc850-date `Sunday, 06-Nov-94 08:49:37 GMT`: day 4, month 5, two-digit year 6;
 * - asctime-date `Sun Nov  6 08:49:37 1994`: month 7, day 8, year 12.
 * The forms' openings exclude each other (`Sun, `, `Sunday, `, `Sun `), so a value
 * matches at most one way; a form with the other's ending (asctime ending in `GMT`,
 * IMF in a year) matches the pattern but is rejected where it is read.
 */
const HTTP_DATE =
  /^(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d\d) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (\d{4})|(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day, (\d\d)-(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)-(\d\d)|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) ([ \d]\d)) (\d\d):(\d\d):(\d\d) (?:GMT|(\d{4}))$/;

// RFC 3339 §5.6 date-time (`T`/`Z` case-insensitive per its §5.6 note): year 1,
// month 2, day 3, time 4-6, fraction 7, offset sign 8, hours 9, minutes 10. The one
// unbounded part, the fraction, is a single `\d+` followed by fixed-width text:
// no nested quantifier, so matching stays linear.
const RFC3339_DATE_TIME =
  /^(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:[Zz]|([+-])([01]\d|2[0-3]):([0-5]\d))$/;

/**
 * An RFC 3339 timestamp (Anthropic's resets) as the wait until it in ms, possibly fractional, or NaN.
 * Like {@link parseGoDuration}, it takes the header value as held: Anthropic's `parseReset`.
 */
export function parseRfc3339(raw: string | undefined, now: number): number {
  const parts = RFC3339_DATE_TIME.exec(boundedHeader(raw) ?? '');
  if (parts === null) return NaN;
  const [, , , , , , , fraction = '', sign, offsetH, offsetM] = parts;
  // Whole milliseconds from the first three digits, the rest as a sub-millisecond
  // remainder: `Number('0.007') * 1000` would be 7.000000000000001, not 7.
  const fractionMs = Number(fraction.slice(0, 3).padEnd(3, '0')) + Number(`0.${fraction.slice(3)}0`);
  // Local time = UTC + offset, so UTC = local - offset (`Z` has none).
  const offsetMs = sign ? (Number(sign + offsetH) * 60 + Number(sign + offsetM)) * 60_000 : 0;
  return dateMs(parts.slice(1), now) + fractionMs - offsetMs - now;
}

/**
 * The UTC instant of a date's parts (year, month, day, hour, minute, second, as
 * matched: a month by name in HTTP-dates, by number in RFC 3339; a two-digit year
 * by RFC 9110's rule), or NaN for an invalid date. The calendar date is
 * round-tripped: `setUTCFullYear` rolls `30 Feb` or month 13 over, and then the
 * month or day read back differs. (Unlike `Date.UTC`, it also takes years 0-99
 * literally.) The time fields are range-checked.
 *
 * A leap second (`:60`, allowed by RFC 9110 §5.6.7 and RFC 3339 §5.7) is read as
 * `:59`: POSIX time has no leap seconds, and `Date` would roll :60 into the next
 * minute. Waiting at most one second less than asked is the lesser evil.
 */
function dateMs([Y = '', m = '', d, H, M, S]: Array<string | undefined>, now: number): number {
  let year = Number(Y);
  if (Y.length === 2) {
    // RFC 9110 §5.6.7: a two-digit year "that appears to be more than 50 years in the
    // future" is "the most recent year in the past that had the same last two
    // digits". So the year is the one ending in these digits within (now - 50,
    // now + 50] years, compared by calendar year in UTC.
    const current = new Date(now).getUTCFullYear(); // NaN for a non-finite `now`: the date is rejected below
    year += current - (current % 100);
    if (year > current + TWO_DIGIT_YEAR_FUTURE_WINDOW) year -= 100;
    else if (year <= current - TWO_DIGIT_YEAR_FUTURE_WINDOW) year += 100;
  }
  const month = m.length === 3 ? MONTHS.indexOf(m) / 4 : Number(m) - 1; // a name in HTTP-dates, digits in RFC 3339
  const [day, hour, minute, second] = [d, H, M, S].map(Number) as [number, number, number, number];
  const date = new Date(0);
  date.setUTCFullYear(year, month, day); // a NaN year (from a non-finite `now`) makes an invalid date
  if (date.getUTCMonth() !== month || date.getUTCDate() !== day || hour > 23 || minute > 59 || second > 60) {
    return NaN;
  }
  // The time of day, within the ranges checked: setUTCHours adds it exactly (4-digit
  // years are far from Date's limits) and returns the instant.
  return date.setUTCHours(hour, minute, Math.min(second, 59));
}

// ---------------------------------------------------------------------------
// RFC 8941 / RFC 9651 structured fields: just enough for a List of Items with parameters.
// Each token type is a sticky pattern matched at a known index. No quantifier
// is followed by something it could also match, so every pattern is linear-time.

/**
 * §4.2.3.1 bare item, alternatives in this order (capture groups 2-5 once the
 * pattern is embedded after one group):
 * - §4.2.4 Decimal: at most 12 integer + 1-3 fraction digits. Tried first so an
 *   Integer never stops at the dot: anything left unmatched fails the member.
 * - §4.2.4 Integer (group 2): at most 15 digits, so always exact in a double.
 * - §4.2.5 String (group 3): printable ASCII, with only `\"` and `\\` as escapes.
 * - §4.2.6 Token (group 4): `( ALPHA / "*" ) *( tchar / ":" / "/" )`.
 * - §4.2.7 Byte Sequence (group 5): `":" *(base64) ":"`, kept as base64 text.
 * - §4.2.8 Boolean: `?0` or `?1`.
 * - RFC 9651 §4.2.9 Date (`@` Integer), in group 2, where it reads as NaN: never
 *   an Integer. §4.2.10 Display String (`%"..."`), its content unchecked. Neither is
 *   read, but a parameter of either type must not make its member malformed.
 */
const SF_BARE_ITEM =
  /-?\d{1,12}\.\d{1,3}|(@?-?\d{1,15})|"((?:[ !#-[\]-~]|\\["\\])*)"|([A-Za-z*][\w!#$%&'*+.^|~:/`-]*)|:([A-Za-z\d+/=]*):|\?[01]|%"[^"]*"/;

/** The member's leading OWS (group 1, so the groups match SF_PARAMETER's) and its bare item. */
const SF_ITEM = new RegExp(`([ \\t]*)(?:${SF_BARE_ITEM.source})`, 'y');

/**
 * §4.2.3.2 `";" *SP key [ "=" bare-item ]` (a bare key means Boolean true), §4.2.3.3 key
 * in group 1; or, with no key, the trailing OWS up to the end of the member.
 */
const SF_PARAMETER = new RegExp(`; *([a-z*][a-z\\d_.*-]*)(?:=(?:${SF_BARE_ITEM.source}))?|[ \\t]*$`, 'y');

/**
 * One list member: text up to the next comma outside a quoted string (an
 * unterminated string runs to the end). Escapes inside strings are skipped as
 * pairs, so `"a\",b"` stays one member.
 */
const SF_MEMBER = /(?:"(?:\\[\s\S]|[^"\\])*"?|[^",])+/g;

/** A String (unescaped) or Token item's text. */
function sfText(item: RegExpExecArray | null | undefined): string | undefined {
  return item?.[SF_STRING]?.replace(/\\(.)/g, '$1') ?? item?.[SF_TOKEN];
}

function sfInteger(item: RegExpExecArray | undefined): number | undefined {
  // `+ 0` makes "-0" (a valid Integer, RFC 9651 §4.2.4) read as 0, not negative zero.
  const n = Number(item?.[SF_INTEGER]) + 0;
  return n >= 0 ? n : undefined; // also rejects NaN: not an Integer
}

/** A member's parameters by key. */
type SfParams = Partial<Record<string, RegExpExecArray>>;

/**
 * The valid members of one field: named, with a non-negative Integer in the
 * `required` field. `build` reads the fields between the name (`policy`) and the
 * partition key (`pk`, shared by both fields) from the parameters (later duplicates
 * win, per RFC 8941); absent optional fields are left out.
 *
 * RFC 8941 §4.2.1 List parsing, made tolerant: a member that fails to parse (or is
 * an Inner List, or not named by a String or Token) is skipped up to the next
 * comma outside a quoted string, instead of failing the whole field. Each
 * character is scanned at most twice (once by the splitter, once by the item).
 */
function sfMembers<T extends RateLimitStatus | RateLimitPolicy>(
  headers: HeadersLike,
  field: string,
  required: keyof T,
  build: (params: SfParams) => object,
): T[] {
  const members: T[] = [];
  for (const [item] of readHeader(headers, field)?.matchAll(SF_MEMBER) ?? []) {
    const m = matchAt(SF_ITEM, item, 0);
    const name = sfText(m);
    if (m === null || name === undefined) continue;
    const params: Partial<Record<string, RegExpExecArray>> = {};
    // Parameters up to the member's end (the match without a key), or one that fails.
    let param = matchAt(SF_PARAMETER, item, m[0].length);
    for (; param?.[1]; param = matchAt(SF_PARAMETER, item, param.index + param[0].length)) {
      params[param[1]] = param;
    }
    if (param === null) continue;
    const member: Record<string, unknown> = {
      policy: name,
      ...build(params),
      partitionKey: params.pk?.[SF_BYTES],
    };
    for (const key in member) if (member[key] === undefined) delete member[key];
    if (required in member) members.push(member as T);
  }
  return members;
}

function rateLimitStatuses(headers: HeadersLike): RateLimitStatus[] {
  return sfMembers(headers, 'ratelimit', 'remaining', toStatus);
}

function toStatus(params: SfParams): Partial<RateLimitStatus> {
  return {
    remaining: sfInteger(params.r),
    resetSeconds: sfInteger(params.t),
  } as Partial<RateLimitStatus>;
}

function toPolicy(params: SfParams): Partial<RateLimitPolicy> {
  return {
    quota: sfInteger(params.q),
    quotaUnit: sfText(params.qu),
    windowSeconds: sfInteger(params.w),
  } as Partial<RateLimitPolicy>;
}
