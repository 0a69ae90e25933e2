/**
 * @module
 * `breakwater/mcp`: MCP client fetch, start gate and resilient client. Not yet implemented: this entry point is reserved so the subpath is stable.
 */

/** The subpath this module is published under. */
export const ADAPTER: 'breakwater/mcp' = 'breakwater/mcp';
