/**
 * @module
 * `breakwater/ky`: ky options built from a breakwater policy. Not yet implemented: this entry point is reserved so the subpath is stable.
 */

/** The subpath this module is published under. */
export const ADAPTER: 'breakwater/ky' = 'breakwater/ky';
