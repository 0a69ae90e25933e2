/**
 * @module
 * The numeric limits and defaults of the core's files, here rather than at the top of
 * each: esbuild inlines a `const` number where it is read only when the module that
 * declares it imports nothing, and each of those files imports. Inlined, a limit costs
 * its digits; declared beside its user, a variable too (about 50 B gzip in all). Grouped
 * by the file that reads them.
 */

// network.ts
/**
 * How many errors of a `cause` / `AggregateError.errors` chain are looked at. Real
 * chains are 2 to 4 deep (SDK error → `TypeError('fetch failed')` → `AggregateError`
 * → system errors); the cap keeps a cyclic or hostile chain from running away.
 */
export const MAX_CHAIN_ERRORS: number = 16;

// backoff.ts
/** First delay, in ms, by default: long enough to skip a blip, short enough not to be felt. */
export const DEFAULT_INITIAL_MS: number = 500;
/** Growth per attempt by default: doubling reaches the cap in six steps. */
export const DEFAULT_FACTOR: number = 2;
/** Longest delay, in ms, by default: past half a minute a caller is better told than kept waiting. */
export const DEFAULT_MAX_MS: number = 32_000;
/** The widest `+x%` spread accepted: beyond 10× the schedule stops meaning anything. */
export const MAX_SPREAD_PERCENT: number = 1000;
/** Decorrelated jitter draws up to this multiple of the previous delay (AWS's `sleep * 3`). */
export const DECORRELATED_GROWTH: number = 3;

// call.ts
/**
 * How long a dropped Node stream body is read on before it is destroyed (ms): an answer of
 * ordinary length ends well within it, and its connection is reused; an endless one (an
 * event stream a `timeout()` dropped) was read for good.
 */
export const MAX_DROP_READ_MS: number = 1000;

// capture.ts
/** The most body bytes a snapshot may be configured to keep: a snapshot is a hint, not a copy. */
export const MAX_BODY_BYTES: number = 64 * 1024;
/** The longest configurable wait: a snapshot must never hold a response back for long. */
export const MAX_BODY_WAIT_MS: number = 30_000;
/** How many servers' last snapshots are kept (least recently written dropped first). */
export const MAX_KEYS: number = 1000;
/**
 * How many snapshots a scope keeps (the oldest dropped first). A scope is meant for one
 * operation, but one kept for a client's whole life must not grow without end; an
 * operation that fails more often than this has its latest failures kept.
 */
export const MAX_SCOPE_SNAPSHOTS: number = 100;

// store.ts
/** How many entries a memory store holds by default. */
export const DEFAULT_MAX_ENTRIES: number = 10_000;
/**
 * The largest `maxEntries` accepted. V8's `Map` (Node, Deno) holds at most 2^24
 * entries and throws past that; this leaves headroom.
 */
export const MAX_ENTRIES_LIMIT: number = 10_000_000;
/** What a number, boolean or null counts towards `maxBytes`: a JS number takes 8 bytes. */
export const PRIMITIVE_BYTES: number = 8;

// auth.ts
/**
 * How long one shared `refresh()` may hold its slot before it is abandoned, in ms, by
 * default: 30 s, as long as `definePolicy()` gives one request (`DEFAULT_ATTEMPT_MS`).
 * A token endpoint answers in well under a second; abandoning a slow one that still
 * works costs a second refresh, which may spend a rotating refresh token for nothing.
 */
export const DEFAULT_REFRESH_TIMEOUT_MS: number = 30_000;
/** How many redirects a call follows, as fetch does (Fetch standard, HTTP-redirect fetch). */
export const MAX_REDIRECTS: number = 20;

// body-limit.ts
/**
 * The most bytes of a failure body an SDK is given (64 KiB). The MCP and A2A SDKs read
 * a failure's whole body into the error they throw (`Error POSTing to endpoint: <body>`,
 * `HTTP error for GetTask! ... Response: <body>`): an error page that never ends (a
 * proxy's, a hostile server's) would grow the client's memory without bound and keep
 * the request open. Real error bodies, OAuth's JSON errors included, are far smaller.
 */
export const MAX_FAILURE_BODY_BYTES: number = 64 * 1024;
/**
 * The largest success body, or SSE event, an SDK is given by default, in bytes (32 MiB).
 * Generous on purpose: an MCP tool result may carry a base64 image or file of several
 * MB (base64 adds a third), and cutting a real answer is worse than holding it. What it
 * stops is the answer that never ends (a broken or hostile server), which the SDKs would
 * buffer until the process runs out of memory.
 */
export const DEFAULT_MAX_RESPONSE_BYTES: number = 32 * 1024 * 1024;
/** The bytes that end an SSE line: LF and CR (a CRLF pair ends one line). */
export const LF: number = 10;
export const CR: number = 13;

// retry.ts
/** Total attempts, the first included. */
export const DEFAULT_ATTEMPTS: number = 3;
/** The longest server-requested wait honoured (60 s); longer ones fail at once. */
export const DEFAULT_MAX_RETRY_AFTER_MS: number = 60_000;
/** How many servers' budgets are kept (least recently used dropped first). */
export const MAX_BUDGET_KEYS: number = 1000;
/** The most attempts one call may be configured to make. */
export const MAX_ATTEMPTS: number = 100;

// policy.ts
/** The wait for each attempt's response headers (30 s): long enough for a slow model's first byte. */
export const DEFAULT_ATTEMPT_MS: number = 30_000;
/** The wait for the whole call, retries included (120 s). */
export const DEFAULT_TOTAL_MS: number = 120_000;

// options.ts
/** The longest value shown in an error before it is cut. */
export const MAX_SHOWN_CHARS: number = 60;
/**
 * The characters of a string read to describe it: enough to hold a URL's userinfo and
 * a whole token word that starts among the first `MAX_SHOWN_CHARS`.
 */
export const MAX_READ_CHARS: number = 1000;
