/**
 * @module
 * `breakwater/hono`: the same policy on the server. Rate limits with standard
 * `RateLimit` headers, load shedding with `Retry-After`, `Idempotency-Key` replay, and
 * an upstream guard that puts a breakwater client on `c.var.fetch` and maps its
 * errors to problem+json responses, so a Hono app speaks exactly what breakwater
 * clients understand.
 *
 * @example
 * ```ts
 * import { Hono } from 'hono';
 * import { definePolicy } from 'breakwater';
 * import { errorResponses, idempotency, rateLimit, shed, upstream, type UpstreamEnv } from 'breakwater/hono';
 *
 * const policy = definePolicy({ name: 'inventory' });
 * const app = new Hono<UpstreamEnv>();
 * app.use('*', rateLimit({ limit: 100, windowMs: 60_000, trustedHeader: 'cf-connecting-ip' }));
 * app.use('*', shed({ maxInFlight: 64 }));
 * const errors = errorResponses({ policy });
 * app.use('*', errors);
 * app.use('/orders', idempotency());
 * app.use('*', upstream(policy));
 * app.post('/orders', async (c) => c.json(await (await c.var.fetch('https://inventory.internal/reserve')).json()));
 * app.onError(errors);
 * ```
 */

export type { IdempotencyOptions } from './idempotency.ts';
export { idempotency, REPLAYED_HEADER } from './idempotency.ts';
export type { Problem } from './problem.ts';
export { CLIENT_CLOSED_STATUS, PROBLEM_JSON, problemResponse, retryAfterSeconds } from './problem.ts';
export type { ProxyHeaders, ProxyOptions, ProxyTarget } from './proxy.ts';
export { proxy } from './proxy.ts';
export type { RateLimitOptions, StoreFailureMode } from './rate-limit.ts';
export { DEFAULT_POLICY_NAME, rateLimit } from './rate-limit.ts';
export type { ShedOptions } from './shed.ts';
export { shed } from './shed.ts';
export type { ErrorResponsesOptions, UpstreamEnv, UpstreamOptions, UpstreamVariables } from './upstream.ts';
export { errorResponses, upstream } from './upstream.ts';
