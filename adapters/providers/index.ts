/**
 * @module
 * `breakwater/providers`: OpenAI / Anthropic / AI SDK presets and header readers. Not yet implemented: this entry point is reserved so the subpath is stable.
 */

/** The subpath this module is published under. */
export const ADAPTER: 'breakwater/providers' = 'breakwater/providers';
