/**
 * @module
 * breakwater's typed errors. Every one extends {@link BreakwaterError}, carries a
 * stable string `code`, keeps the underlying failure as `cause`, and has a message a
 * person can act on: it names the server (key), the method and a redacted URL.
 * Messages, fields, `toJSON()` and what a console prints never contain credentials (see
 * `redact.ts`): a `cause` is printed redacted (the inspect hook `network.ts` installs), and
 * kept as it was handed.
 *
 * User aborts are not wrapped: the caller's own `signal.reason` comes back as is.
 */

import * as z from 'zod/mini';
import { validate } from './options.ts';
import { redactText, redactUrl, safeHeaders } from './redact.ts';

/**
 * Whether `error` is the caller giving up: never wrapped, never retried, never counted.
 * Without the signal to compare, an `AbortError`, or the `TimeoutError` DOMException of
 * a caller's `AbortSignal.timeout()` (what fetch rejects with when it fires): a caller who
 * classified what its own fetch threw got `fatal` for its own timeout. Not another
 * library's error named so (ky's `TimeoutError`, breakwater's own): those are no
 * DOMException.
 */
export function isAbort(error: unknown, signal: AbortSignal | undefined | null): boolean {
  if (signal?.aborted && error === signal.reason) return true;
  try {
    const name = (error as { name?: unknown } | null)?.name;
    return name === 'AbortError' || (name === 'TimeoutError' && error instanceof DOMException);
  } catch {
    // A name that cannot be read (a revoked Proxy, a getter that throws): no abort. The
    // read threw out of classify() and the chain's catch, in place of the caller's error.
    return false;
  }
}

/** Where a request was going: enough to name it in a message, nothing secret. */
export interface RequestSummary {
  /** The server's name in breakwater (default: the URL's origin). */
  key: string;
  /** HTTP method, upper-case. */
  method: string;
  /** The URL with userinfo dropped and query values redacted. */
  url: string;
}

/** Builds a {@link RequestSummary} from raw parts, redacting the URL. */
export function requestSummary(key: string, method: string, url: string | URL): RequestSummary {
  return { key, method: method.toUpperCase(), url: redactUrl(url) };
}

/**
 * How a message names `request`: method, redacted URL and server (`GET https://h/x (server
 * "h")`), or just "request". Every error message about a request starts so.
 */
export function describeRequest(request: RequestSummary | undefined): string {
  return request ? `${request.method} ${request.url} (server "${request.key}")` : 'request';
}

// Each constructor checks its required fields first, with the options' validator (a
// TypeError naming each field that is wrong, and the value found): README invites building
// these errors by hand, and `new HttpStatusError()` threw "Cannot read properties of
// undefined", `{ status: 'x' }` made a message "HTTP x". A parse costs 0.1-0.3 µs on
// Node 20, next to the 7-20 µs of building an error. The schemas are built in pure
// closures (see backoff.ts): a bundle keeps only those of the classes it uses.
const text = /* @__PURE__ */ (() => z.string())();
/** A wait or deadline in ms: at least 0, Infinity included (a hand-built error's wait of no end). */
const ms = /* @__PURE__ */ (() =>
  z.custom<number>((value) => typeof value === 'number' && value >= 0, 'must be a number, at least 0'))();

/** Options every breakwater error takes. */
export interface BreakwaterErrorOptions {
  /** The failure underneath, if any. */
  cause?: unknown;
  /** The request this error is about, if any. */
  request?: RequestSummary | undefined;
}

/**
 * `instanceof` for breakwater's error classes (`this`) that also knows the same class of
 * another copy of breakwater: an app that both imports and requires it (an ESM app, a
 * CommonJS dependency: the dual package hazard) loads the ESM and the CommonJS build,
 * each with its own classes, and an error of one failed every `instanceof` of the other
 * (retry() and classify() took a 503 for a fatal error; an app's `catch` missed it). A
 * prototype counts when its class has this class's name and derives from a class named
 * `BreakwaterError` of another copy (the names are spelled out, so they survive
 * minifying). Another library's error of the same name (ky's `TimeoutError`) is not one,
 * nor an app's class sharing the name of another it wrote. Runs only where an
 * error is judged, never on the happy path.
 */
function isInstance(this: { prototype: unknown; name: string }, value: unknown): boolean {
  let named = false;
  try {
    // null and undefined have no prototype to read: the first read throws.
    for (let proto = Object.getPrototypeOf(value); proto; proto = Object.getPrototypeOf(proto)) {
      if (proto === this.prototype) return true;
      const name = (proto as { constructor?: { name?: unknown } }).constructor?.name;
      named ||= name === this.name;
      // Only another copy's base: within this copy the prototype alone decides, as plain
      // instanceof does (two classes an app wrote with one name, anonymous ones all '').
      if (name === 'BreakwaterError') return named && proto !== BreakwaterError.prototype;
    }
  } catch {
    // null, undefined, a Proxy or a getter that throws: no error of ours.
  }
  return false;
}

/**
 * The base of every breakwater error: catch this to catch them all. Its `cause` is the
 * failure it was handed, unchanged (an SDK's error given to `wrapHttpError()` keeps its
 * class and fields); `console.log`, `console.error` and `util.inspect` print that cause
 * redacted on Node, Deno and Bun, and `toJSON()` summarises it redacted. A logger that reads
 * `cause` itself (pino's error serializer) sees it as it is.
 */
export class BreakwaterError extends Error {
  /**
   * Each class spells its name out, and the constructor names an error after it
   * (`new.target.name`): a bundler that minifies breakwater with the app (esbuild, Vite,
   * a Worker's build) renames classes, and `error.name`, `String(error)` and `toJSON()`
   * said 'W' or 'Q'. An app's own subclass is named after its class, as before. A getter
   * (and a method for `Symbol.hasInstance`), not a static field: where class fields are
   * assigned (TypeScript's useDefineForClassFields: false, Angular's default; Babel's loose
   * mode, React Native's preset) assigning a function's read-only `name` or
   * `Symbol.hasInstance` threw while breakwater loaded. A method is always defined, and
   * leaves an unused class free to drop from a bundle (a static block would not).
   */
  static override get name(): string {
    return 'BreakwaterError';
  }

  /** `instanceof` that also knows this class of another copy of breakwater (see {@link isInstance}). */
  static override [Symbol.hasInstance](value: unknown): boolean {
    // biome-ignore lint/complexity/noThisInStatic: the class asked (a subclass, another copy's), not this one.
    return isInstance.call(this, value);
  }
  // Fields of the error classes are `declare`d: each constructor assigns them, so the
  // instances are the same, and a declared field emits no class-field code (an ES2022
  // class field is defined as `undefined` first, then assigned: twice the bytes).
  /** A stable, machine-readable code (`HTTP_STATUS`, `CIRCUIT_OPEN`, `ECONNREFUSED`, ...). */
  declare readonly code: string;
  /** The request this error is about, redacted; undefined when not tied to one. */
  declare readonly request: RequestSummary | undefined;

  constructor(message: string, code: string, options: BreakwaterErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.request = options.request;
    this.name = new.target.name;
  }

  /**
   * What `JSON.stringify(error)` shows: name, code, message and the error's own
   * fields, all already redacted. The cause is summarised by name and message only,
   * since an SDK's error may hold the request with its headers; URLs in its message
   * are redacted too (Deno and the A2A card resolver put the request URL there).
   */
  toJSON(): Record<string, unknown> {
    const out: Record<string, unknown> = { name: this.name, code: this.code, message: this.message };
    // Own enumerable fields: `cause` is not among them (Error installs it non-enumerable).
    for (const [field, value] of Object.entries(this)) {
      // A date as JSON.stringify writes it: ISO, or null for an Invalid Date (a wait of
      // Infinity), where toISOString() threw a RangeError out of JSON.stringify.
      if (value !== undefined) out[field] = value instanceof Date ? value.toJSON() : value;
    }
    const name = causeMessage(this.cause, 'name');
    if (name !== undefined) out.cause = { name, message: causeMessage(this.cause) };
    return out;
  }
}

/**
 * An error's message (or its `name`), redacted, for quoting in another: `''` for one that
 * does not read as text, `undefined` for a cause that is no `Error`. Any error may reach a
 * gate or a `cause` (`isCrashLoop` accepts what it likes), and a message that is a number,
 * a getter that throws, or a `Proxy` whose every read throws (a revoked one: its prototype
 * too, which `instanceof` reads) must not turn the error that quotes it into a `TypeError`.
 */
function causeMessage(cause: unknown, field: 'message' | 'name' = 'message'): string | undefined {
  try {
    if (!(cause instanceof Error)) return undefined;
    const message = cause[field];
    return typeof message === 'string' ? redactText(message) : '';
  } catch {
    return '';
  }
}

/** The most body bytes an {@link HttpStatusError} keeps (DESIGN.md §4: 2 KiB). */
const MAX_BODY_BYTES = 2048;

/**
 * Whitespace runs collapsed to one space (tab, LF, VT, FF, CR, space, and Unicode's line
 * and paragraph separators, U+2028 and U+2029, at which log viewers and JS source break
 * lines): one pass, no backtracking.
 */
const WHITESPACE_RUN = /[\t\n\v\f\r \u2028\u2029]+/;

/**
 * The other C0 and C1 controls (NEL, a line break, among them) and DEL: a JSON message's
 * escapes decode to them, and a binary body (a protobuf, a gzip a proxy sent without its
 * Content-Encoding) is full of them. Logged as they are, ESC sequences clear or retitle
 * the terminal reading the log and a backspace rubs out what came before.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding them is the point.
const CONTROL = /[\0-\b\x0e-\x1f\x7f-\x9f]/g;

/**
 * `text` on one line: whitespace runs (line breaks included) collapsed to single spaces,
 * none at either end, and every other control character shown as U+FFFD, as a byte that
 * decodes to no character is.
 */
export function oneLine(text: string): string {
  // A leading or trailing run leaves an empty string at that end of the split: dropped.
  return text.replace(CONTROL, '\uFFFD').split(WHITESPACE_RUN).filter(Boolean).join(' ');
}

/** `HTTP 503 Service Unavailable`, or `HTTP 503` when the server sent no reason phrase. */
export function statusLine(status: number, statusText: string | undefined): string {
  return `HTTP ${status}${statusText ? ` ${statusText}` : ''}`;
}

/** Fields of an {@link HttpStatusError}. */
export interface HttpStatusErrorInit extends BreakwaterErrorOptions {
  /** The response's HTTP status, an integer (100-599): the one treated as a failure. */
  status: number;
  /** The reason phrase; kept redacted (a URL in it shows no userinfo or query values). */
  statusText?: string | undefined;
  /** Whether the policy would retry this status (given a safe resend). */
  retryable?: boolean | undefined;
  /** The server's requested wait, from its timing headers. */
  retryAfterMs?: number | undefined;
  /**
   * When the response's headers arrived, epoch ms (a capture snapshot's `at`): the wait
   * counts from then. Default: now.
   */
  at?: number | undefined;
  /** The start of the body, decoded; kept on one line and cut to at most 2 KiB. */
  body?: string | undefined;
  /** The message from a JSON error body, when the server sent one. */
  serverMessage?: string | undefined;
  /** The response headers; only an allowlisted, secret-free subset is kept. */
  headers?: Headers | undefined;
}

const statusInit = /* @__PURE__ */ (() =>
  z.object({ status: z.number().check(z.int(), z.minimum(100), z.maximum(599)) }))();

/** A response whose status the policy treats as a failure. */
export class HttpStatusError extends BreakwaterError {
  /**
   * `'HttpStatusError'`, spelled out so `error.name` survives minifying (see {@link BreakwaterError.name}).
   */
  static override get name(): string {
    return 'HttpStatusError';
  }
  /** The response's HTTP status, an integer (100-599): usually >= 400, the one treated as a failure. */
  declare readonly status: number;
  /**
   * The reason phrase (`Service Unavailable`), redacted: a URL in it shows no userinfo or
   * query values, and where breakwater built the error from a call (`throwOnStatus()`,
   * `retry()`, the breaker) that call's credentials are hidden too, since an old app server
   * may quote them there. `''` when the server sent none (HTTP/2 and HTTP/3 carry none) or
   * whoever built the error passed none.
   */
  declare readonly statusText: string;
  /**
   * Whether the status rule calls this status retryable: it is in the retryable list
   * (default 408, 429, 500, 502, 503, 504, 529; `retry()` judges by its own `statuses`),
   * with the server's `x-should-retry` overriding that both ways; never 401, 403 or 407.
   * It says nothing about resend safety (`classify()` judges that). A start gate arms only
   * on a retryable one. `false` when whoever built the error passed none.
   */
  declare readonly retryable: boolean;
  /**
   * The wait the server asked for, in ms, read by `retryDelay()` from the response's timing
   * headers (`retry-after-ms`, `Retry-After`, `RateLimit`, the `*-reset` families: DESIGN.md
   * §3) as of when the response arrived. Undefined when the response named no wait (or none
   * that parses), or whoever built the error passed none.
   */
  declare readonly retryAfterMs: number | undefined;
  /**
   * When the response's headers arrived, epoch ms (as a capture snapshot's `at`): the
   * server's wait (`retryAfterMs`) counts from then, not from the throw. Where breakwater
   * built the error (`throwOnStatus()`, `retry()`), that is before it read the body's start
   * for `body` (up to `bodyWaitMs`, 1 s by default); from a snapshot (`wrapHttpError()`),
   * its `at`. `retry()` waits only what is left of `retryAfterMs` since then (see
   * `waitLeft`): counted from the throw, `Retry-After: 1` was waited out up to a second late.
   * When the error was built, where whoever built it passed none.
   */
  declare readonly at: number;
  /**
   * The start of the response body, decoded, on one line (whitespace runs collapsed), cut
   * on a character boundary to at most 2 KiB of UTF-8 (`capture.bodyBytes` may read less).
   * Redacted: URLs lose userinfo and query values, and where breakwater built the error
   * from a call, that call's credentials are hidden wherever the server quoted them.
   * `''` when the body was empty or not read (a streaming body), or none was passed.
   */
  declare readonly body: string;
  /**
   * What the server said went wrong: the message of a JSON error body (`{error:{message}}`,
   * `{error}`, `{message}`, RFC 9457 `detail` / `title`), else the body's text cut to 400
   * characters; redacted as `body` is, and shown in `message`. Undefined when the body was
   * empty or not read, or whoever built the error had none (from headers alone, say).
   */
  declare readonly serverMessage: string | undefined;
  /**
   * Allowlisted response headers (timing, rate limits, request ids, content type,
   * `WWW-Authenticate`), their values redacted as `body` is: where breakwater built the
   * error from a call, that call's credentials are hidden there too (a 401's
   * `WWW-Authenticate` may quote the token it refused).
   */
  declare readonly headers: Readonly<Record<string, string>>;

  constructor(init: HttpStatusErrorInit) {
    validate(statusInit, init, `new ${new.target.name}(init)`);
    // Servers quote the request URL back ("invalid URL https://..."): what they said
    // is redacted like everything else shown.
    const message = init.serverMessage && redactText(init.serverMessage);
    // So may a reason phrase (a proxy's, an old app server's: Node's and Bun's fetch pass
    // it on as written), and whoever builds this error may pass it on as it came.
    const statusText = redactText(init.statusText ?? '');
    super(
      `${describeRequest(init.request)} failed with ${statusLine(init.status, statusText)}${message ? `: ${message}` : ''}${
        init.retryAfterMs === undefined ? '' : `; server asked to retry after ${init.retryAfterMs} ms`
      }`,
      'HTTP_STATUS',
      init,
    );
    this.status = init.status;
    this.statusText = statusText;
    this.retryable = init.retryable ?? false;
    this.retryAfterMs = init.retryAfterMs;
    this.at = init.at ?? Date.now();
    // The body kept: on one line and at most MAX_BODY_BYTES UTF-8 bytes, cut on a
    // character boundary (whoever builds the error may pass more). `stream: true` holds
    // back a character cut in half instead of emitting a 3-byte U+FFFD; a body within the
    // limit decodes to itself. (An error is rare: no fast path needed.)
    this.body = new TextDecoder().decode(
      new TextEncoder().encode(oneLine(redactText(init.body ?? ''))).subarray(0, MAX_BODY_BYTES),
      { stream: true },
    );
    this.serverMessage = message;
    this.headers = Object.freeze(safeHeaders(init.headers));
  }
}

/** How far a request got before the network failed. */
export type NetworkPhase = 'connect' | 'send' | 'response';

/** Whether the server may have received (and so may have run) the request. */
export type SentState = 'no' | 'maybe';

/** Fields of a {@link NetworkError}. */
export interface NetworkErrorInit extends BreakwaterErrorOptions {
  /** Normalised code: `ECONNREFUSED`, `ENOTFOUND`, `ECONNRESET`, `ETIMEDOUT`, `TLS`, ... */
  code: string;
  /** How far the request got (see {@link NetworkError.phase}). */
  phase: NetworkPhase;
  /** Whether the server may have received the request (see {@link NetworkError.sent}). */
  sent: SentState;
}

const networkInit = /* @__PURE__ */ (() =>
  z.object({ code: text, phase: z.enum(['connect', 'send', 'response']), sent: z.enum(['no', 'maybe']) }))();

/** fetch threw before a usable response arrived (or the body stream broke). */
export class NetworkError extends BreakwaterError {
  /**
   * `'NetworkError'`, spelled out so `error.name` survives minifying (see {@link BreakwaterError.name}).
   */
  static override get name(): string {
    return 'NetworkError';
  }
  /**
   * How far the request got: `'connect'` (resolving, connecting or the TLS handshake
   * failed: nothing was written), `'send'` (connected, or the runtime cannot say, and no
   * response headers yet: the request was being written or awaited its answer), or
   * `'response'` (the headers had arrived and reading the body broke).
   */
  declare readonly phase: NetworkPhase;
  /**
   * Whether the server may have received, and so run, the request: `'no'` only when it
   * provably never left (a `connect` failure), `'maybe'` otherwise, and wherever a runtime
   * reports two cases alike (the safe side). It decides resend safety (DESIGN.md §5): a
   * `'no'` is always safe to send again, a `'maybe'` only when the call is idempotent.
   */
  declare readonly sent: SentState;

  constructor(init: NetworkErrorInit) {
    validate(networkInit, init, `new ${new.target.name}(init)`);
    super(
      `${describeRequest(init.request)} failed: network error ${init.code} during ${init.phase} (${init.sent === 'no' ? 'not sent' : 'may have reached the server'})`,
      init.code,
      init,
    );
    this.phase = init.phase;
    this.sent = init.sent;
  }
}

/** Which deadline ran out. */
export type TimeoutScope = 'attempt' | 'total';

const timeoutInit = /* @__PURE__ */ (() => z.object({ scope: z.enum(['attempt', 'total']), ms }))();

/** An attempt or total deadline ran out while waiting for response headers. */
export class TimeoutError extends BreakwaterError {
  /**
   * `'TimeoutError'`, spelled out so `error.name` survives minifying (see {@link BreakwaterError.name}).
   */
  static override get name(): string {
    return 'TimeoutError';
  }
  /**
   * Which deadline ran out: `'attempt'` (one attempt's wait for response headers,
   * `timeout({ attemptMs })`, or an adapter's per-read limit such as the A2A card's
   * `bodyTimeoutMs`: a new attempt may fit, so retry may resend it) or `'total'` (the whole
   * call's budget across attempts and waits, `totalMs`, or an adapter's `timeoutMs` /
   * `connectTimeoutMs`: nothing is left to retry with, so it is never retried).
   */
  declare readonly scope: TimeoutScope;
  /** The length of the deadline that ran out, in ms, as configured (not the time the call took). */
  declare readonly ms: number;

  constructor(init: BreakwaterErrorOptions & { scope: TimeoutScope; ms: number }) {
    validate(timeoutInit, init, `new ${new.target.name}(init)`);
    super(
      `${describeRequest(init.request)} timed out: ${init.scope} deadline of ${init.ms} ms passed`,
      'TIMEOUT',
      init,
    );
    this.scope = init.scope;
    this.ms = init.ms;
  }
}

/** `; next attempt at <ISO date> (in <s> s)`: when, and how long from `now` (default: the clock). */
function until(retryAt: Date, now = Date.now()): string {
  const seconds = Math.max(0, retryAt.getTime() - now) / 1000;
  return `; next attempt at ${retryAt.toISOString()} (in ${seconds.toFixed(1)} s)`;
}

const circuitInit = /* @__PURE__ */ (() => z.object({ key: text, retryAt: z.date(), reason: text }))();

/**
 * A server's circuit is open, its half-open probe is in flight, or the server paced its
 * calls: the call failed fast, nothing was sent.
 */
export class CircuitOpenError extends BreakwaterError {
  /**
   * `'CircuitOpenError'`, spelled out so `error.name` survives minifying (see {@link BreakwaterError.name}).
   */
  static override get name(): string {
    return 'CircuitOpenError';
  }
  /** The server whose circuit is open or whose calls are paced (`call.key`: by default the URL's origin). */
  declare readonly key: string;
  /**
   * When to come back: the end of the open time (the next probe may go), the end of the
   * key's pause, or while a probe is in flight a later look; never before a pause ends.
   * A guide, not a promise: another caller may take the probe first. `classify()` reports
   * the time left until it as `retryAfterMs`.
   */
  declare readonly retryAt: Date;

  constructor(
    init: BreakwaterErrorOptions & {
      key: string;
      retryAt: Date;
      /**
       * Why the call was not sent, with the state it met, as the message gives it after the
       * request: `circuit open after 5 consecutive failures (last: HTTP 503)`, `circuit
       * half-open while its probe is in flight, after …`, `paced: the server asked to wait …`.
       */
      reason: string;
      /** The clock the message's "in N s" counts from, epoch ms. Default: now. */
      now?: number;
    },
  ) {
    validate(circuitInit, init, `new ${new.target.name}(init)`);
    // The request, as every message about one starts (DESIGN §4), then the state it met: it
    // read `circuit "svc" is open paced: …` for a key only paced, naming the key alone.
    super(
      `${init.request ? describeRequest(init.request) : `request (server "${init.key}")`} not sent, ${init.reason}${until(init.retryAt, init.now)}`,
      'CIRCUIT_OPEN',
      init,
    );
    this.key = init.key;
    this.retryAt = init.retryAt;
  }
}

const gateInit = /* @__PURE__ */ (() => z.object({ key: text, retryAt: z.date() }))();

/** A start gate is armed after a retryable failure: `fn` was not called. */
export class GateClosedError extends BreakwaterError {
  /**
   * `'GateClosedError'`, spelled out so `error.name` survives minifying (see {@link BreakwaterError.name}).
   */
  static override get name(): string {
    return 'GateClosedError';
  }
  /** The gate's name (`createGate({ key })`; default `'gate'`, or an adapter's key such as `'mcp'`). */
  declare readonly key: string;
  /**
   * When to come back: the end of the gate's window, when the next `run()` may call `fn`
   * as the probe, or, while a probe is in flight, a later look (never past its lease).
   * The window follows the gate's backoff, stretched to the server's Retry-After (capped).
   */
  declare readonly retryAt: Date;

  constructor(init: BreakwaterErrorOptions & { key: string; retryAt: Date; now?: number }) {
    validate(gateInit, init, `new ${new.target.name}(init)`);
    const after = causeMessage(init.cause);
    super(
      `start gate "${init.key}" is closed${after === undefined ? '' : ` after: ${after}`}${until(init.retryAt, init.now)}`,
      'GATE_CLOSED',
      init,
    );
    this.key = init.key;
    this.retryAt = init.retryAt;
  }
}

const tooLongInit = /* @__PURE__ */ (() => z.object({ retryAfterMs: ms, limitMs: ms }))();

/** The server asked for a wait longer than the cap or the remaining deadline. */
export class RetryAfterTooLongError extends BreakwaterError {
  /**
   * `'RetryAfterTooLongError'`, spelled out so `error.name` survives minifying (see {@link BreakwaterError.name}).
   */
  static override get name(): string {
    return 'RetryAfterTooLongError';
  }
  /** The wait the server asked for, in ms: longer than `maxRetryAfterMs` or the call's remaining deadline. */
  declare readonly retryAfterMs: number;
  /** When the server's wait ends (now + `retryAfterMs`): the earliest a new call is worth making. */
  declare readonly retryAt: Date;

  constructor(init: BreakwaterErrorOptions & { retryAfterMs: number; limitMs: number; now?: number }) {
    validate(tooLongInit, init, `new ${new.target.name}(init)`);
    super(
      `${describeRequest(init.request)}: server asked to wait ${init.retryAfterMs} ms, longer than the ${init.limitMs} ms allowed; not waiting`,
      'RETRY_AFTER_TOO_LONG',
      init,
    );
    this.retryAfterMs = init.retryAfterMs;
    this.retryAt = new Date((init.now ?? Date.now()) + init.retryAfterMs);
  }
}
