/**
 * @module
 * `breakwater/a2a`: A2A agent-card resolver and client wiring. Not yet implemented: this entry point is reserved so the subpath is stable.
 */

/** The subpath this module is published under. */
export const ADAPTER: 'breakwater/a2a' = 'breakwater/a2a';
