/**
 * @module
 * The call model: one {@link Call} per `fetch()` through a breakwater chain, shared
 * by every middleware and every attempt of that call.
 *
 * Speed is the design constraint. On Node 20, `new Request()` + `clone()` costs tens
 * of microseconds and cuts loopback throughput by about 40%, so a call keeps the
 * caller's `(input, init)` exactly as given and reads method, URL and headers from
 * them lazily. Only a middleware that changes a header pays for a copy, and the
 * caller's own objects are never mutated (copy on write).
 */

import type { BreakwaterEvent } from './events.ts';

/** fetch's own call forms: what breakwater accepts and what it hands to SDKs. */
export type FetchLike = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** Passes the call on to the next middleware (or, at the end, to the real fetch). */
export type Next = (call: Call) => Promise<Response>;

/**
 * One link of the chain. It may change the call, pass it on with `next(call)`, look
 * at the response or error, and return a response. Only a middleware that resends
 * (retry) calls `next` again, and it must first bump `call.attempt`.
 */
export type Middleware = (call: Call, next: Next) => Promise<Response>;

/**
 * A middleware that hands out fetches of its own (`capture.scope()`) may carry a
 * method under this symbol: `createFetch()` calls it with the chain's fetch.
 */
export const ATTACH: unique symbol = Symbol('breakwater.attach');

/** The methods RFC 9110 §9.2.2 defines as idempotent. */
const IDEMPOTENT_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']);

type HeaderSource = Headers | [string, string][] | Record<string, string> | undefined;

/** Reads one header from any `HeadersInit` form without building a `Headers`. */
function readHeader(source: HeaderSource, name: string): string | null {
  if (source === undefined || source === null) return null;
  if (source instanceof Headers) return source.get(name);
  if (Array.isArray(source)) {
    const found: string[] = [];
    for (const pair of source) if (String(pair[0]).toLowerCase() === name) found.push(String(pair[1]));
    return found.length > 0 ? found.join(', ') : null;
  }
  if (typeof source === 'object') {
    for (const key of Object.keys(source)) {
      if (key.toLowerCase() === name) return String(source[key]);
    }
  }
  return null;
}

/**
 * The origin of an absolute URL string, found by scanning rather than `new URL()`:
 * the key is needed on every call, a full parse is not.
 */
function originOf(href: string): string | undefined {
  const scheme = href.indexOf('://');
  if (scheme <= 0) return undefined;
  let end = href.length;
  for (let i = scheme + 3; i < href.length; i++) {
    const c = href.charCodeAt(i);
    // '/', '?', '#' end the authority.
    if (c === 47 || c === 63 || c === 35) {
      end = i;
      break;
    }
    // '@' means userinfo: let the URL parser deal with it (and drop it).
    if (c === 64) return undefined;
  }
  const origin = href.slice(0, end).toLowerCase();
  // Default ports are not part of an origin.
  if (origin.endsWith(':80') && origin.startsWith('http:')) return origin.slice(0, -3);
  if (origin.endsWith(':443') && origin.startsWith('https:')) return origin.slice(0, -4);
  return origin;
}

/** How the chain names a server: a fixed name, or one derived from the URL. */
export type KeyOption = string | ((url: URL) => string);

/**
 * One call through a breakwater chain, shared by all middleware and all attempts.
 *
 * Per-call state lives here and persists across attempts: a header that a middleware
 * inside `retry()` sets (an `Idempotency-Key`, a refreshed token) stays part of the
 * request for every later attempt, and retry judges resend safety on the request as
 * actually sent.
 *
 * A class rather than a closure: one object per call with a fixed shape is what
 * keeps the happy path under a microsecond.
 */
export class Call {
  /** The first argument the caller passed to fetch, untouched. */
  readonly input: string | URL | Request;
  #init: RequestInit | undefined;
  /** 1-based attempt number; a resending middleware bumps it before calling `next` again. */
  attempt = 1;
  /**
   * Set by the caller or an adapter when the operation is known to be safe to repeat
   * (MCP read-only methods, tools with `idempotentHint`); see {@link isIdempotent}.
   */
  idempotent = false;
  /**
   * When the whole call must have its response headers by, epoch ms; set by
   * `timeout({ totalMs })`. Retry and pacing read it so they never start a wait
   * the deadline cannot cover.
   */
  deadline: number | undefined = undefined;
  /** The total budget `deadline` was set from, in ms (for error messages). */
  totalMs: number | undefined = undefined;
  /** A small per-call bag for middleware to share state, kept across attempts. */
  readonly bag: Map<unknown, unknown> = new Map();
  /**
   * Per middleware (by position), the last attempt it passed on: guards against a
   * double `next()`. Internal to `createFetch()`; not for middleware to change.
   * @internal
   */
  readonly passes: number[] = [];
  /** Where events go; undefined when nobody listens (emit then costs nothing). */
  readonly onEvent: ((event: BreakwaterEvent) => void) | undefined;

  #keyOption: KeyOption | undefined;
  #key: string | undefined;
  #url: URL | undefined;
  #ownHeaders = false;
  #ownInit = false;
  #signal: AbortSignal | undefined;
  #signalSet = false;

  constructor(
    input: string | URL | Request,
    init: RequestInit | undefined,
    key: KeyOption | undefined,
    onEvent: ((event: BreakwaterEvent) => void) | undefined,
  ) {
    this.input = input;
    this.#init = init;
    this.#keyOption = key;
    this.onEvent = onEvent;
  }

  /** The init the real fetch will get: the caller's own object until something changes it. */
  get init(): RequestInit | undefined {
    return this.#init;
  }

  /** Replaces the init; the new object is treated as someone else's (copied before any change). */
  set init(init: RequestInit | undefined) {
    this.#init = init;
    this.#ownInit = false;
    this.#ownHeaders = false;
  }

  /** The request method, upper-case (default GET). */
  get method(): string {
    const fromInit = this.init?.method;
    if (fromInit) return fromInit.toUpperCase();
    return this.input instanceof Request ? this.input.method : 'GET';
  }

  /** The request URL as a string, exactly as given. */
  get href(): string {
    const input = this.input;
    return typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
  }

  /** The request URL, parsed once on first use. */
  get url(): URL {
    this.#url ??= new URL(this.href);
    return this.#url;
  }

  /** The server's name: the `key` option, or the URL's origin. */
  get key(): string {
    if (this.#key !== undefined) return this.#key;
    const option = this.#keyOption;
    if (typeof option === 'string') this.#key = option;
    else if (typeof option === 'function') this.#key = option(this.url);
    else this.#key = originOf(this.href) ?? this.url.origin;
    return this.#key;
  }

  /** The caller's abort signal (from init, else from a `Request` input), if any. */
  get signal(): AbortSignal | undefined {
    if (!this.#signalSet) {
      this.#signal = this.init?.signal ?? (this.input instanceof Request ? this.input.signal : undefined);
      this.#signalSet = true;
    }
    return this.#signal;
  }

  /** Replaces the signal the real fetch gets (timeouts combine the caller's with their own). */
  set signal(signal: AbortSignal | undefined) {
    this.#signal = signal;
    this.#signalSet = true;
    const init = this.#writableInit();
    // Without a signal the key is left out, not set to null: `signal: null` would
    // drop a Request input's own signal.
    if (signal === undefined) delete init.signal;
    else init.signal = signal;
  }

  /** The request body as given (init's, else the `Request`'s stream), if any. */
  get body(): BodyInit | null | undefined {
    if (this.init && 'body' in this.init) return this.init.body;
    return this.input instanceof Request ? this.input.body : undefined;
  }

  /** One request header (case-insensitive), without building a `Headers` object. */
  header(name: string): string | null {
    const lower = name.toLowerCase();
    // fetch(request, { headers }) replaces the request's headers entirely.
    if (this.init?.headers !== undefined) return readHeader(this.init.headers as HeaderSource, lower);
    return this.input instanceof Request ? this.input.headers.get(lower) : null;
  }

  /**
   * Sets a request header for this and every later attempt. The first change copies
   * the headers into a fresh `Headers` on a fresh init, so the caller's objects are
   * never mutated.
   */
  setHeader(name: string, value: string): void {
    this.#writableHeaders().set(name, value);
  }

  /** Removes a request header for this and every later attempt. */
  deleteHeader(name: string): void {
    this.#writableHeaders().delete(name);
  }

  /** Whether a resend could not run the operation twice (RFC 9110 §9.2.2, Idempotency-Key, or marked). */
  get isIdempotent(): boolean {
    return this.idempotent || IDEMPOTENT_METHODS.has(this.method) || this.header('idempotency-key') !== null;
  }

  /** Milliseconds left before {@link deadline} (never negative), or `Infinity` without one. */
  remainingMs(now: number = Date.now()): number {
    return this.deadline === undefined ? Number.POSITIVE_INFINITY : Math.max(0, this.deadline - now);
  }

  /** Sends an event to the chain's `onEvent`, if any; a throwing listener never breaks the call. */
  emit(event: BreakwaterEvent): void {
    if (this.onEvent === undefined) return;
    try {
      this.onEvent(event);
    } catch {
      // An observer must not be able to fail the request it observes.
    }
  }

  #writableHeaders(): Headers {
    const init = this.#writableInit();
    if (this.#ownHeaders) return init.headers as Headers;
    const headers = new Headers(
      init.headers ?? (this.input instanceof Request ? this.input.headers : undefined),
    );
    init.headers = headers;
    this.#ownHeaders = true;
    return headers;
  }

  /**
   * An init object this call owns, copied from the caller's on first use. Later
   * changes (a signal per attempt, a header) mutate it in place: fetch reads init
   * only while starting a request, so an earlier attempt is not affected.
   */
  #writableInit(): RequestInit {
    if (!this.#ownInit || this.#init === undefined) {
      this.#init = { ...this.#init };
      this.#ownInit = true;
    }
    return this.#init;
  }
}
