/**
 * @module
 * Timing headers: how long a server asked us to wait, and what it said about its
 * rate limits. Reads `retry-after-ms`, `Retry-After` (RFC 9110 §10.2.3), `RateLimit`
 * and `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers), the older
 * `RateLimit-Reset` / `X-RateLimit-Reset` family, and the OpenAI and Anthropic
 * rate-limit headers.
 *
 * Every value here comes from a server we do not control, so every parser is
 * total (garbage yields `undefined`, never a throw), linear-time (hand-written
 * scanners and fixed-width anchored patterns only), and never returns NaN,
 * Infinity or a negative delay.
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
 * Header values longer than this many characters are ignored (treated as absent).
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
 * seconds; nobody asks for a 54-year wait.
 */
const EPOCH_RESET_THRESHOLD_SECONDS = 1_704_067_200;

/**
 * RFC 9110 §5.6.7: an rfc850-date two-digit year that appears to be more than this
 * many years in the future means the most recent past year with those digits.
 */
const TWO_DIGIT_YEAR_FUTURE_WINDOW = 50;

/**
 * 400 Gregorian years are exactly 146,097 days. `Date.UTC` maps years 0-99 to
 * 1900-1999, so such years are built 400 years later and shifted back exactly.
 */
const MS_PER_400_YEARS = 146_097 * 86_400_000;

/**
 * Go `time.Duration` units (as sent by OpenAI), in nanoseconds. Go sums terms in
 * integer nanoseconds; so do we, because float milliseconds would turn `0.007s`
 * into 7.000000000000001 ms and round it up to 8. Two-letter units come first:
 * `ms` must win over `m`.
 */
const GO_DURATION_UNITS_NS: ReadonlyArray<readonly [unit: string, ns: number]> = [
  ['ns', 1],
  ['us', 1e3],
  ['\u00b5s', 1e3], // µs, MICRO SIGN (what Go prints)
  ['\u03bcs', 1e3], // μs, GREEK SMALL LETTER MU (Go accepts it too)
  ['ms', 1e6],
  ['h', 3.6e12],
  ['m', 6e10],
  ['s', 1e9],
];

/** Fraction digits beyond this are below a nanosecond for every Go unit up to `h` and are dropped, as Go does. */
const MAX_FRACTION_DIGITS = 13;

/** The reset headers that sit beside a `-remaining` header in the legacy `X-RateLimit-*` family. */
const LEGACY_RESET_HEADERS: ReadonlyArray<readonly [reset: string, remaining: string]> = [
  ['ratelimit-reset', 'ratelimit-remaining'],
  ['x-ratelimit-reset', 'x-ratelimit-remaining'],
  ['x-rate-limit-reset', 'x-rate-limit-remaining'],
];

/** OpenAI limit kinds: `x-ratelimit-reset-<kind>` counts only when `x-ratelimit-remaining-<kind>` is 0. */
const OPENAI_LIMIT_KINDS: readonly string[] = ['requests', 'tokens'];

/** Anthropic limit kinds: `anthropic-ratelimit-<kind>-reset` counts only when `-remaining` is 0. */
const ANTHROPIC_LIMIT_KINDS: readonly string[] = ['requests', 'tokens', 'input-tokens', 'output-tokens'];

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
 * 3. `RateLimit`: the largest `t` among policies with `r=0` (draft-ietf-httpapi-ratelimit-headers).
 * 4. `RateLimit-Reset`, `X-RateLimit-Reset`, `X-Rate-Limit-Reset`: delay seconds, or epoch
 *    seconds when ≥ 2024-01-01; skipped when the matching `-Remaining` says quota is left.
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
    fromRetryAfterMs(headers) ??
    fromRetryAfter(headers, now) ??
    fromRateLimitField(headers) ??
    fromLegacyReset(headers, now) ??
    fromOpenAiResets(headers) ??
    fromAnthropicResets(headers, now)
  );
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
  const policies: RateLimitPolicy[] = [];
  for (const { name, params } of parseSfList(readHeader(headers, 'ratelimit-policy'))) {
    const quota = nonNegativeInteger(params.get('q'));
    if (quota === undefined) continue; // `q` is required
    const policy: RateLimitPolicy = { policy: name, quota };
    const unit = params.get('qu');
    if (unit?.type === 'string' || unit?.type === 'token') policy.quotaUnit = unit.value;
    const window = nonNegativeInteger(params.get('w'));
    if (window !== undefined) policy.windowSeconds = window;
    const key = params.get('pk');
    if (key?.type === 'bytes') policy.partitionKey = key.value;
    policies.push(policy);
  }
  return limits.length === 0 && policies.length === 0 ? undefined : { limits, policies };
}

// ---------------------------------------------------------------------------
// Sources for retryDelay, in precedence order

function fromRetryAfterMs(headers: HeadersLike): number | undefined {
  const value = readHeader(headers, 'retry-after-ms');
  return value === undefined ? undefined : clampDelay(parseDecimal(value));
}

/** RFC 9110 §10.2.3: `Retry-After = HTTP-date / delay-seconds`, `delay-seconds = 1*DIGIT`. */
function fromRetryAfter(headers: HeadersLike, now: number): number | undefined {
  const value = readHeader(headers, 'retry-after');
  if (value === undefined) return undefined;
  const seconds = parseDigits(value);
  if (seconds !== undefined) return clampDelay(seconds * 1000);
  const date = parseHttpDate(value, now);
  return date === undefined ? undefined : clampDelay(date - now);
}

function fromRateLimitField(headers: HeadersLike): number | undefined {
  let longest: number | undefined;
  for (const { remaining, resetSeconds } of rateLimitStatuses(headers)) {
    // r>0 means this policy still has quota: it asks for no wait.
    if (remaining === 0 && resetSeconds !== undefined) longest = Math.max(longest ?? 0, resetSeconds);
  }
  return longest === undefined ? undefined : clampDelay(longest * 1000);
}

/**
 * GitHub and the early ratelimit-headers drafts send the reset on every response,
 * not only when throttled: a 502 from an API with 4,999 requests left must not
 * wait out the hour, so a `-Remaining` that says quota is left vetoes the reset.
 */
function fromLegacyReset(headers: HeadersLike, now: number): number | undefined {
  for (const [resetName, remainingName] of LEGACY_RESET_HEADERS) {
    const reset = parseDigits(readHeader(headers, resetName));
    if (reset === undefined) continue;
    const remaining = parseDigits(readHeader(headers, remainingName));
    if (remaining !== undefined && remaining > 0) continue;
    return clampDelay(reset >= EPOCH_RESET_THRESHOLD_SECONDS ? reset * 1000 - now : reset * 1000);
  }
  return undefined;
}

function fromOpenAiResets(headers: HeadersLike): number | undefined {
  let longest: number | undefined;
  for (const kind of OPENAI_LIMIT_KINDS) {
    if (parseDigits(readHeader(headers, `x-ratelimit-remaining-${kind}`)) !== 0) continue;
    const ms = parseGoDuration(readHeader(headers, `x-ratelimit-reset-${kind}`));
    if (ms !== undefined) longest = Math.max(longest ?? 0, ms);
  }
  return longest === undefined ? undefined : clampDelay(longest);
}

function fromAnthropicResets(headers: HeadersLike, now: number): number | undefined {
  let latest: number | undefined;
  for (const kind of ANTHROPIC_LIMIT_KINDS) {
    if (parseDigits(readHeader(headers, `anthropic-ratelimit-${kind}-remaining`)) !== 0) continue;
    const at = parseRfc3339(readHeader(headers, `anthropic-ratelimit-${kind}-reset`));
    if (at !== undefined) latest = Math.max(latest ?? at, at);
  }
  return latest === undefined ? undefined : clampDelay(latest - now);
}

/**
 * Every delay leaves through here: NaN (say, from a non-finite `now`) becomes
 * `undefined`, negatives and past dates 0, fractions round up (waiting a hair too
 * long is harmless, too short earns another 429), and everything is capped.
 */
function clampDelay(ms: number | undefined): number | undefined {
  if (ms === undefined || Number.isNaN(ms)) return undefined;
  if (ms <= 0) return 0;
  return ms >= MAX_DELAY_MS ? MAX_DELAY_MS : Math.ceil(ms);
}

// ---------------------------------------------------------------------------
// Header access

/**
 * The one header getter: lowercase `name` in, the value with surrounding HTTP
 * whitespace removed (as fetch's `Headers` normalises it) out, or `undefined`
 * when absent, not a string, or longer than {@link MAX_HEADER_CHARS}.
 */
function readHeader(headers: HeadersLike, name: string): string | undefined {
  if (typeof headers !== 'object' || headers === null) return undefined; // JS callers may pass anything
  let value: string | undefined;
  if (typeof Headers === 'function' && headers instanceof Headers) {
    value = headers.get(name) ?? undefined;
  } else if (typeof (headers as Partial<Iterable<unknown>>)[Symbol.iterator] === 'function') {
    for (const pair of headers as Iterable<unknown>) {
      if (!Array.isArray(pair)) continue;
      const [key, item] = pair as unknown[];
      if (typeof key === 'string' && typeof item === 'string' && sameName(key, name)) {
        value = value === undefined ? item : `${value}, ${item}`;
      }
    }
  } else {
    const record = headers as { readonly [name: string]: unknown };
    for (const key of Object.keys(record)) {
      if (!sameName(key, name)) continue;
      const item = record[key];
      const text = typeof item === 'string' ? item : joinStrings(item);
      if (text !== undefined) value = value === undefined ? text : `${value}, ${text}`;
    }
  }
  return value === undefined || value.length > MAX_HEADER_CHARS ? undefined : trimHttpWhitespace(value);
}

function sameName(key: string, lowerName: string): boolean {
  return key.length === lowerName.length && key.toLowerCase() === lowerName;
}

function joinStrings(item: unknown): string | undefined {
  if (!Array.isArray(item)) return undefined;
  const strings = item.filter((part): part is string => typeof part === 'string');
  return strings.length === 0 ? undefined : strings.join(', ');
}

/** Fetch's HTTP whitespace (HTAB, LF, CR, SP), not `String#trim`'s Unicode spaces. */
function trimHttpWhitespace(value: string): string {
  let start = 0;
  let end = value.length;
  while (start < end && isHttpWhitespace(value.charCodeAt(start))) start++;
  while (end > start && isHttpWhitespace(value.charCodeAt(end - 1))) end--;
  return value.slice(start, end);
}

function isHttpWhitespace(code: number): boolean {
  return code === 0x20 || code === 0x09 || code === 0x0a || code === 0x0d;
}

// ---------------------------------------------------------------------------
// Numbers

function isDigit(code: number): boolean {
  return code >= 0x30 && code <= 0x39;
}

/**
 * `1*DIGIT` and nothing else: no sign, no fraction, no exponent, no `0x` (all of
 * which `Number()` would accept). A very long digit string may come back as a
 * huge number or Infinity; callers clamp, so that is safe.
 */
function parseDigits(value: string | undefined): number | undefined {
  if (value === undefined || value.length === 0) return undefined;
  for (let i = 0; i < value.length; i++) if (!isDigit(value.charCodeAt(i))) return undefined;
  return Number(value);
}

/** `1*DIGIT [ "." 1*DIGIT ]`, e.g. `retry-after-ms: 1500.5`. */
function parseDecimal(value: string): number | undefined {
  const dot = value.indexOf('.');
  if (dot === -1) return parseDigits(value);
  if (parseDigits(value.slice(0, dot)) === undefined || parseDigits(value.slice(dot + 1)) === undefined) {
    return undefined;
  }
  return Number(value);
}

/**
 * A Go `time.Duration` string as OpenAI sends it (`20ms`, `6m0s`, `1h2m3.5s`):
 * one or more `[digits][.digits]unit` terms, or a bare `0`. Signs are rejected (a
 * negative reset is meaningless). Returns milliseconds, possibly fractional.
 */
function parseGoDuration(value: string | undefined): number | undefined {
  if (value === undefined || value.length === 0) return undefined;
  if (value === '0') return 0;
  let totalNs = 0;
  let i = 0;
  while (i < value.length) {
    const intStart = i;
    while (i < value.length && isDigit(value.charCodeAt(i))) i++;
    const intDigits = value.slice(intStart, i);
    let fraction = '';
    if (value.charCodeAt(i) === 0x2e /* . */) {
      const fractionStart = ++i;
      while (i < value.length && isDigit(value.charCodeAt(i))) i++;
      fraction = value.slice(fractionStart, i).slice(0, MAX_FRACTION_DIGITS);
    }
    if (intDigits.length === 0 && fraction.length === 0) return undefined;
    const unit = GO_DURATION_UNITS_NS.find(([name]) => value.startsWith(name, i));
    if (unit === undefined) return undefined;
    const [name, unitNs] = unit;
    // A huge integer part becomes Infinity here; clampDelay caps it.
    totalNs += Number(intDigits || '0') * unitNs;
    if (fraction.length > 0) totalNs += Math.trunc((Number(fraction) * unitNs) / 10 ** fraction.length);
    i += name.length;
  }
  return totalNs / 1e6;
}

// ---------------------------------------------------------------------------
// Dates. Never `Date.parse`: it accepts implementation-defined formats and rolls
// `30 Feb` or hour 25 over into valid dates. Fixed-width anchored patterns pick
// the parts; `utcMs` builds the instant and rejects anything that rolled over.

// RFC 9110 §5.6.7 grammar. HTTP-date is case-sensitive and must be GMT. The
// weekday must be a valid name but is not checked against the date: the date is
// what the server means, and a mismatch is a cosmetic server bug.
const IMF_FIXDATE =
  /^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d\d) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (\d{4}) (\d\d):(\d\d):(\d\d) GMT$/;
const RFC850_DATE =
  /^(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (\d\d)-(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)-(\d\d) (\d\d):(\d\d):(\d\d) GMT$/;
const ASCTIME_DATE =
  /^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) ( \d|\d\d) (\d\d):(\d\d):(\d\d) (\d{4})$/;
// RFC 3339 §5.6 date-time (`T`/`Z` case-insensitive per its §5.6 note). The one
// unbounded part, the fraction, is a single `\d+` followed by fixed-width text:
// no nested quantifier, so matching stays linear.
const RFC3339_DATE_TIME =
  /^(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:[Zz]|([+-])(\d\d):(\d\d))$/;

const MONTHS: readonly string[] = [
  'Jan',
  'Feb',
  'Mar',
  'Apr',
  'May',
  'Jun',
  'Jul',
  'Aug',
  'Sep',
  'Oct',
  'Nov',
  'Dec',
];

/** An HTTP-date in any of its three forms (RFC 9110 §5.6.7), as epoch ms. */
function parseHttpDate(value: string, now: number): number | undefined {
  let m = IMF_FIXDATE.exec(value);
  if (m !== null)
    return utcMs(Number(m[3]), month(m[2]), Number(m[1]), Number(m[4]), Number(m[5]), Number(m[6]));
  m = RFC850_DATE.exec(value);
  if (m !== null) {
    const year = expandTwoDigitYear(Number(m[3]), now);
    return utcMs(year, month(m[2]), Number(m[1]), Number(m[4]), Number(m[5]), Number(m[6]));
  }
  m = ASCTIME_DATE.exec(value);
  if (m !== null)
    return utcMs(Number(m[6]), month(m[1]), Number(m[2]), Number(m[3]), Number(m[4]), Number(m[5]));
  return undefined;
}

/** An RFC 3339 timestamp (Anthropic's resets), as epoch ms; may be fractional. */
function parseRfc3339(value: string | undefined): number | undefined {
  const m = value === undefined ? null : RFC3339_DATE_TIME.exec(value);
  if (m === null) return undefined;
  // Whole milliseconds from the first three digits, the rest as a sub-millisecond
  // remainder: `Number('0.007') * 1000` would be 7.000000000000001, not 7.
  const fraction = m[7] ?? '';
  const fractionMs = Number(fraction.slice(0, 3).padEnd(3, '0')) + Number(`0.${fraction.slice(3)}0`);
  const local = utcMs(Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4]), Number(m[5]), Number(m[6]));
  if (local === undefined) return undefined;
  if (m[8] === undefined) return local + fractionMs; // Z
  const offsetHours = Number(m[9]);
  const offsetMinutes = Number(m[10]);
  if (offsetHours > 23 || offsetMinutes > 59) return undefined;
  const offsetMs = (offsetHours * 60 + offsetMinutes) * 60_000;
  // Local time = UTC + offset, so UTC = local - offset.
  return local + fractionMs - (m[8] === '+' ? offsetMs : -offsetMs);
}

function month(name: string | undefined): number {
  return MONTHS.indexOf(name ?? '') + 1; // the patterns only admit valid names
}

/**
 * RFC 9110 §5.6.7: a two-digit year "that appears to be more than 50 years in the
 * future" is "the most recent year in the past that had the same last two
 * digits". So the year is the one ending in `yy` within (now - 50, now + 50]
 * years, compared by calendar year in UTC.
 */
function expandTwoDigitYear(yy: number, now: number): number {
  const current = new Date(now).getUTCFullYear(); // NaN for a non-finite `now`: utcMs rejects it
  let year = current - (current % 100) + yy;
  if (year > current + TWO_DIGIT_YEAR_FUTURE_WINDOW) year -= 100;
  else if (year <= current - TWO_DIGIT_YEAR_FUTURE_WINDOW) year += 100;
  return year;
}

/**
 * Builds a UTC instant with `Date.UTC` and round-trips it: if any part rolled
 * over (`30 Feb`, hour 25, month 13), the date is invalid and we return `undefined`.
 *
 * A leap second (`:60`, allowed by RFC 9110 §5.6.7 and RFC 3339 §5.7) is read as
 * `:59`: POSIX time has no leap seconds, and `Date.UTC` would roll :60 into the
 * next minute. Waiting at most one second less than asked is the lesser evil.
 */
function utcMs(
  year: number,
  monthNumber: number,
  day: number,
  hour: number,
  minute: number,
  second: number,
): number | undefined {
  if (second > 60) return undefined;
  const sec = second === 60 ? 59 : second;
  const built = year < 100 ? year + 400 : year;
  const ms = Date.UTC(built, monthNumber - 1, day, hour, minute, sec);
  const d = new Date(ms);
  if (
    d.getUTCFullYear() !== built ||
    d.getUTCMonth() !== monthNumber - 1 ||
    d.getUTCDate() !== day ||
    d.getUTCHours() !== hour ||
    d.getUTCMinutes() !== minute ||
    d.getUTCSeconds() !== sec
  ) {
    return undefined; // also catches NaN parts: NaN !== anything
  }
  return year < 100 ? ms - MS_PER_400_YEARS : ms;
}

// ---------------------------------------------------------------------------
// RFC 8941 structured fields: just enough for a List of Items with parameters.

/** An RFC 8941 bare item (dates and display strings from RFC 9651 are not needed here). */
type BareItem =
  | { readonly type: 'integer' | 'decimal'; readonly value: number }
  | { readonly type: 'string' | 'token' | 'bytes'; readonly value: string }
  | { readonly type: 'boolean'; readonly value: boolean };

/** A list member we can use: a String or Token name and its parameters (later duplicates win, per RFC 8941). */
interface NamedItem {
  readonly name: string;
  readonly params: ReadonlyMap<string, BareItem>;
}

/** A scanning position; each parser advances `i` past what it consumed. */
interface Cursor {
  readonly s: string;
  i: number;
}

function rateLimitStatuses(headers: HeadersLike): RateLimitStatus[] {
  const statuses: RateLimitStatus[] = [];
  for (const { name, params } of parseSfList(readHeader(headers, 'ratelimit'))) {
    const remaining = nonNegativeInteger(params.get('r'));
    if (remaining === undefined) continue; // `r` is required
    const status: RateLimitStatus = { policy: name, remaining };
    const reset = nonNegativeInteger(params.get('t'));
    if (reset !== undefined) status.resetSeconds = reset;
    const key = params.get('pk');
    if (key?.type === 'bytes') status.partitionKey = key.value;
    statuses.push(status);
  }
  return statuses;
}

function nonNegativeInteger(item: BareItem | undefined): number | undefined {
  return item?.type === 'integer' && item.value >= 0 ? item.value : undefined;
}

/**
 * RFC 8941 §4.2.1 List parsing, made tolerant: a member that fails to parse (or is
 * an Inner List, or not named by a String or Token) is skipped up to the next
 * comma outside a quoted string, instead of failing the whole field. Each
 * character is scanned at most twice (once by the item parser, once by the skip).
 */
function parseSfList(value: string | undefined): NamedItem[] {
  const items: NamedItem[] = [];
  if (value === undefined) return items;
  const c: Cursor = { s: value, i: 0 };
  while (c.i < value.length) {
    skipOws(c);
    const start = c.i;
    const item = parseItem(c);
    skipOws(c);
    if (item !== undefined && (c.i === value.length || value.charCodeAt(c.i) === 0x2c) /* , */) {
      items.push(item);
    } else {
      c.i = start;
      skipToNextMember(c);
    }
    c.i++; // past the comma (or past the end)
  }
  return items;
}

function skipOws(c: Cursor): void {
  while (c.i < c.s.length && (c.s.charCodeAt(c.i) === 0x20 || c.s.charCodeAt(c.i) === 0x09)) c.i++;
}

function skipToNextMember(c: Cursor): void {
  let quoted = false;
  for (; c.i < c.s.length; c.i++) {
    const code = c.s.charCodeAt(c.i);
    if (quoted) {
      if (code === 0x5c /* \ */) c.i++;
      else if (code === 0x22 /* " */) quoted = false;
    } else if (code === 0x22) {
      quoted = true;
    } else if (code === 0x2c /* , */) {
      return;
    }
  }
}

/** RFC 8941 §4.2.3, for Items named by a String or Token. */
function parseItem(c: Cursor): NamedItem | undefined {
  const bare = parseBareItem(c);
  if (bare === undefined || (bare.type !== 'string' && bare.type !== 'token')) return undefined;
  const params = new Map<string, BareItem>();
  // §4.2.3.2: *( ";" *SP key [ "=" bare-item ] ), a bare key meaning Boolean true.
  while (c.s.charCodeAt(c.i) === 0x3b /* ; */) {
    c.i++;
    while (c.s.charCodeAt(c.i) === 0x20) c.i++;
    const key = parseKey(c);
    if (key === undefined) return undefined;
    let param: BareItem | undefined = { type: 'boolean', value: true };
    if (c.s.charCodeAt(c.i) === 0x3d /* = */) {
      c.i++;
      param = parseBareItem(c);
      if (param === undefined) return undefined;
    }
    params.set(key, param);
  }
  return { name: bare.value, params };
}

/** §4.2.3.3: `key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`. */
function parseKey(c: Cursor): string | undefined {
  const start = c.i;
  const first = c.s.charCodeAt(c.i);
  if (!isLcAlpha(first) && first !== 0x2a /* * */) return undefined;
  c.i++;
  while (c.i < c.s.length) {
    const code = c.s.charCodeAt(c.i);
    if (
      !(isLcAlpha(code) || isDigit(code) || code === 0x5f || code === 0x2d || code === 0x2e || code === 0x2a)
    )
      break;
    c.i++;
  }
  return c.s.slice(start, c.i);
}

/** §4.2.3.1. */
function parseBareItem(c: Cursor): BareItem | undefined {
  const code = c.s.charCodeAt(c.i);
  if (code === 0x2d /* - */ || isDigit(code)) return parseNumber(c);
  if (code === 0x22 /* " */) return parseString(c);
  if (code === 0x3a /* : */) return parseByteSequence(c);
  if (code === 0x3f /* ? */) return parseBoolean(c);
  if (isAlpha(code) || code === 0x2a /* * */) return parseToken(c);
  return undefined;
}

/** §4.2.4: at most 15 integer digits, or 12 integer + 1-3 fraction digits (so always exact in a double). */
function parseNumber(c: Cursor): BareItem | undefined {
  const start = c.i;
  if (c.s.charCodeAt(c.i) === 0x2d) c.i++;
  const intStart = c.i;
  while (c.i < c.s.length && isDigit(c.s.charCodeAt(c.i))) c.i++;
  const intDigits = c.i - intStart;
  if (intDigits === 0) return undefined;
  if (c.s.charCodeAt(c.i) !== 0x2e /* . */) {
    return intDigits > 15 ? undefined : { type: 'integer', value: Number(c.s.slice(start, c.i)) };
  }
  if (intDigits > 12) return undefined;
  c.i++;
  const fracStart = c.i;
  while (c.i < c.s.length && isDigit(c.s.charCodeAt(c.i))) c.i++;
  const fracDigits = c.i - fracStart;
  if (fracDigits < 1 || fracDigits > 3) return undefined;
  return { type: 'decimal', value: Number(c.s.slice(start, c.i)) };
}

/** §4.2.5: printable ASCII, with only `\"` and `\\` as escapes. */
function parseString(c: Cursor): BareItem | undefined {
  c.i++; // opening quote
  const parts: string[] = [];
  let run = c.i;
  while (c.i < c.s.length) {
    const code = c.s.charCodeAt(c.i);
    if (code === 0x22 /* " */) {
      parts.push(c.s.slice(run, c.i));
      c.i++;
      return { type: 'string', value: parts.join('') };
    }
    if (code === 0x5c /* \ */) {
      const next = c.s.charCodeAt(c.i + 1);
      if (next !== 0x22 && next !== 0x5c) return undefined;
      parts.push(c.s.slice(run, c.i));
      run = c.i + 1; // keep the escaped character
      c.i += 2;
      continue;
    }
    if (code < 0x20 || code > 0x7e) return undefined;
    c.i++;
  }
  return undefined; // unterminated
}

/** §4.2.6: `( ALPHA / "*" ) *( tchar / ":" / "/" )`. */
function parseToken(c: Cursor): BareItem | undefined {
  const start = c.i;
  c.i++;
  while (c.i < c.s.length) {
    const code = c.s.charCodeAt(c.i);
    if (!(isTchar(code) || code === 0x3a || code === 0x2f)) break;
    c.i++;
  }
  return { type: 'token', value: c.s.slice(start, c.i) };
}

/** §4.2.7: `":" *(base64) ":"`; kept as base64 text. */
function parseByteSequence(c: Cursor): BareItem | undefined {
  const start = ++c.i;
  while (c.i < c.s.length) {
    const code = c.s.charCodeAt(c.i);
    if (code === 0x3a /* : */) {
      c.i++;
      return { type: 'bytes', value: c.s.slice(start, c.i - 1) };
    }
    if (!(isAlpha(code) || isDigit(code) || code === 0x2b || code === 0x2f || code === 0x3d))
      return undefined;
    c.i++;
  }
  return undefined;
}

/** §4.2.8: `?0` or `?1`. */
function parseBoolean(c: Cursor): BareItem | undefined {
  const code = c.s.charCodeAt(c.i + 1);
  if (code !== 0x30 && code !== 0x31) return undefined;
  c.i += 2;
  return { type: 'boolean', value: code === 0x31 };
}

function isLcAlpha(code: number): boolean {
  return code >= 0x61 && code <= 0x7a;
}

function isAlpha(code: number): boolean {
  return isLcAlpha(code) || (code >= 0x41 && code <= 0x5a);
}

/** RFC 9110 §5.6.2 tchar. */
function isTchar(code: number): boolean {
  return isAlpha(code) || isDigit(code) || "!#$%&'*+-.^_`|~".includes(String.fromCharCode(code));
}
