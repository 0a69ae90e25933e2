/**
 * @module
 * `readRateLimits()`: what a model provider's response headers say about its rate
 * limits, normalised for dashboards and schedulers. OpenAI sends
 * `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` with Go-duration resets;
 * Anthropic sends `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`
 * with RFC 3339 resets. The parsers are the core's (`src/timing.ts`): total,
 * linear-time, and never a throw on garbage.
 */

import {
  clampDelay,
  DIGITS,
  type HeadersLike,
  MAX_DELAY_MS,
  PROVIDER_QUOTAS,
  parseNumber,
  type QuotaField,
  type QuotaHeaders,
  readHeader,
  retryDelay,
} from '../../src/timing.ts';

/** One quota: how much a window allows, how much is left, and when it is restored. Absent fields were absent or malformed. */
export interface RateLimitWindow {
  /** The most the window allows (requests or tokens): a non-negative integer. */
  limit?: number;
  /** What is left in the current window: a non-negative integer. */
  remaining?: number;
  /** Milliseconds from `now` until the quota is restored: an integer in `[0, MAX_DELAY_MS]` (a reset in the past is 0). */
  resetMs?: number;
  /** When the quota is restored: `now + resetMs` before rounding, so a reset further off than `MAX_DELAY_MS` is capped there too; a past reset keeps the past instant the server named. */
  resetAt?: Date;
}

/** A provider's rate-limit state as one response reported it. Every field is absent when its headers are. */
export interface ProviderRateLimits {
  /** Requests per window: OpenAI `x-ratelimit-*-requests`, Anthropic `anthropic-ratelimit-requests-*`. */
  requests?: RateLimitWindow;
  /** Tokens per window: OpenAI `x-ratelimit-*-tokens`, Anthropic `anthropic-ratelimit-tokens-*` (the most restrictive of its token limits). */
  tokens?: RateLimitWindow;
  /** Input tokens per window: Anthropic `anthropic-ratelimit-input-tokens-*`. */
  inputTokens?: RateLimitWindow;
  /** Output tokens per window: Anthropic `anthropic-ratelimit-output-tokens-*`. */
  outputTokens?: RateLimitWindow;
  /**
   * How long the server asked us to wait before the next request, in ms: the core's
   * `retryDelay()` (`retry-after-ms`, `Retry-After`, and the reset of any quota whose
   * remaining count is 0).
   */
  retryAfterMs?: number;
  /** The provider's id for the request (OpenAI `x-request-id`, Anthropic `request-id`): quote it to support. */
  requestId?: string;
}

/**
 * A request id worth quoting: one token of visible ASCII (no space, no comma). Two
 * ids joined by ", " (a proxy that added its own) name no one request, and a value
 * from a plain object may hold line breaks that would forge lines in a log.
 */
const REQUEST_ID = /^[!-+\--~]+$/;

type WindowKey = 'requests' | 'tokens' | 'inputTokens' | 'outputTokens';

/** `input-tokens` → `inputTokens`. */
function camel(name: string): WindowKey {
  return name.replace('-t', 'T') as WindowKey;
}

/** A count header: a non-negative integer exact in a double, else undefined. */
function count(headers: HeadersLike, name: string): number | undefined {
  const n = parseNumber(DIGITS, readHeader(headers, name));
  return Number.isSafeInteger(n) ? n : undefined;
}

/** One window's fields, or undefined when none of them is usable. */
function readWindow(
  headers: HeadersLike,
  now: number,
  header: (field: QuotaField) => string,
  parseReset: QuotaHeaders[2],
): RateLimitWindow | undefined {
  const window: RateLimitWindow = {};
  const limit = count(headers, header('limit'));
  const remaining = count(headers, header('remaining'));
  const value = readHeader(headers, header('reset'));
  const waitMs = value === undefined ? NaN : parseReset(value, now);
  const resetMs = clampDelay(waitMs);
  if (limit !== undefined) window.limit = limit;
  if (remaining !== undefined) window.remaining = remaining;
  if (resetMs !== undefined) {
    window.resetMs = resetMs;
    // A past instant stays as named; a far one is capped like the wait.
    const resetAt = new Date(now + Math.min(waitMs, MAX_DELAY_MS));
    if (!Number.isNaN(resetAt.getTime())) window.resetAt = resetAt;
  }
  return Object.keys(window).length > 0 ? window : undefined;
}

/**
 * Reads a model provider's rate-limit headers into one typed view: per window (requests,
 * tokens, Anthropic's input and output tokens) the limit, what remains, and when it
 * resets (as ms from `now` and as a `Date`); the wait the server asked for; the request id.
 *
 * Never throws: a missing, malformed or oversized header leaves its field out (a
 * window with no usable field is left out whole), so the result may be `{}`. When
 * both providers' headers are present (a gateway in front of both), Anthropic's
 * fill what OpenAI's left out.
 *
 * @param headers - Response headers: a `Headers`, a plain object (names matched case-insensitively), or `[name, value]` pairs; e.g. `response.headers`, or an SDK error's `headers` / `responseHeaders` (undefined when it has none: then `{}`).
 * @param now - The current time in epoch ms, for RFC 3339 resets and `resetAt`. Default `Date.now()`.
 * @returns The rate-limit state; absent fields were not sent or not usable.
 *
 * @example
 * ```ts
 * const { data, response } = await client.chat.completions.create({ model, messages }).withResponse();
 * const limits = readRateLimits(response.headers);
 * if (limits.tokens?.remaining === 0) scheduler.pauseUntil(limits.tokens.resetAt);
 * ```
 */
export function readRateLimits(
  headers: HeadersLike | undefined,
  now: number = Date.now(),
): ProviderRateLimits {
  // The readers take anything (what is no headers has no entries): absent headers give {}.
  const limits: ProviderRateLimits = {};
  for (const [names, header, parseReset] of PROVIDER_QUOTAS) {
    for (const name of names) {
      const key = camel(name);
      const window =
        limits[key] ?? readWindow(headers as HeadersLike, now, (field) => header(name, field), parseReset);
      if (window !== undefined) limits[key] = window;
    }
  }
  const retryAfterMs = retryDelay(headers as HeadersLike, now);
  if (retryAfterMs !== undefined) limits.retryAfterMs = retryAfterMs;
  const requestId = [
    readHeader(headers as HeadersLike, 'x-request-id'),
    readHeader(headers as HeadersLike, 'request-id'),
  ].find((id) => REQUEST_ID.test(id ?? ''));
  if (requestId) limits.requestId = requestId;
  return limits;
}
