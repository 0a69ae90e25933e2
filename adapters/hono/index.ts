/**
 * @module
 * `breakwater/hono`: Server-side Hono middleware (rate limits, load shedding, Idempotency-Key replay). Not yet implemented: this entry point is reserved so the subpath is stable.
 */

/** The subpath this module is published under. */
export const ADAPTER: 'breakwater/hono' = 'breakwater/hono';
