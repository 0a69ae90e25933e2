/**
 * @module
 * breakwater: composable `fetch` middleware that keeps AI-agent clients and their
 * servers steady when upstreams fail.
 *
 * @example
 * ```ts
 * import { retryDelay } from 'breakwater';
 *
 * const res = await fetch('https://api.example.com/v1/things');
 * if (res.status === 429) console.log(`server asked us to wait ${retryDelay(res.headers)} ms`);
 * ```
 */

export type { HeadersLike, RateLimitInfo, RateLimitPolicy, RateLimitState } from './timing.ts';
export { parseRateLimit, retryDelay, shouldRetryHeader } from './timing.ts';
