/**
 * @module
 * `auth()`: stamps a credential on every request and, when the server answers 401,
 * refreshes it once and resends once.
 *
 * The refresh is single flight: when a token expires under load, every in-flight call
 * gets a 401 at about the same moment. Each of them refreshing on its own would
 * hammer the token endpoint, and with rotating refresh tokens (OAuth 2.1 §4.3.1) all
 * but the first refresh would fail. So concurrent 401s share one `refresh()`, and a
 * 401 for a request that went out with an older token than the current one is simply
 * resent with the current one.
 *
 * A refresh that never settles (a token endpoint that accepts the connection and never
 * answers) must not hold that slot forever: every later 401 would join it and fail, and
 * the client would be stuck until restarted. So a refresh holds the slot for a lease
 * (`refreshTimeoutMs`) only; after it, the refresh is abandoned and the next 401 starts
 * a new one.
 *
 * Tokens are secrets: they are never put in an error message, an event or a log line.
 * That includes the runtime's own errors: Node and Deno quote the whole value when
 * `Headers.set()` refuses one, so token values are checked here, before they reach it.
 */

import * as z from 'zod/mini';
import { FOLLOWS } from './breaker.ts';
import {
  abortReason,
  Call,
  CREDENTIAL_HEADER,
  dropBody,
  HTTP_TOKEN,
  hasOneShotBody,
  type Middleware,
  type Next,
  NO_RESEND,
  RAN,
  STAMPED,
} from './call.ts';
import { BreakwaterError, describeRequest, requestSummary, TimeoutError } from './errors.ts';
import { DEFAULT_REFRESH_TIMEOUT_MS } from './limits.ts';
import { redactedError } from './network.ts';
import { functionOption, isFunction, validate } from './options.ts';
import { redactText } from './redact.ts';
import { FOLLOWED, follow, REDIRECTED } from './redirect.ts';
import { hideSent, REPLACED } from './status.ts';
import { MAX_DELAY_MS } from './timing.ts';

/** The header a token goes in, by default (RFC 9110 §11.6.2). */
export const DEFAULT_AUTH_HEADER = 'authorization';
/** The scheme put before a token that has none, by default (RFC 6750 §2.1). */
export const DEFAULT_AUTH_SCHEME = 'Bearer';

/** The call's bag holds the caller's `redirect` mode here, read before an `auth()` set `'manual'`. */
const REDIRECT_MODE = Symbol();
/**
 * How many of the tokens an `auth()` has had lately it hides in a `token()` or `refresh()`
 * failure, besides the current one (see {@link failure}): enough for the one a request
 * went with, those refreshes returned meanwhile (an abandoned one's too) and the current
 * one; an older token is in no request still waiting.
 */
const MAX_HELD_TOKENS = 4;
/**
 * How many characters of one text of a `token()` or `refresh()` failure (a message, a
 * field) {@link failure} reads, and of all of them together: the rest is cut. Each is
 * searched for every token held, escaped and in base64, at about a microsecond a character:
 * a token endpoint's megabyte page in a refresh() error (`throw new Error(await res.text())`)
 * held every waiting call for seconds each, and the whole process with them.
 */
const MAX_TEXT_CHARS = 4096;
const MAX_HIDDEN_CHARS = 32_768;

/** A token, or where to get one: called for every request until `refresh()` has produced one. */
export type TokenSource = string | (() => string | Promise<string>);

/** Options for {@link auth}. */
export interface AuthOptions {
  /**
   * The credential: a string, or a function returning one (sync or async), called for
   * every request `auth()` sends until the first successful `refresh()`; from then on
   * the latest refreshed token is used instead. A value that contains a space already
   * has its scheme (`'Basic dXNlcjpwYXNz'`) and is sent verbatim; any other gets
   * `scheme` in front. Printable ASCII only, no line breaks.
   */
  token: TokenSource;
  /**
   * Gets a new token after a 401. Called at most once at a time: concurrent 401s
   * share one call. Without it, a 401 is returned as is. If it throws or returns an
   * invalid token, the call fails with a `BreakwaterError` `AUTH_REFRESH_FAILED`.
   */
  refresh?: (() => string | Promise<string>) | undefined;
  /**
   * The request header to stamp. Default `'authorization'`; e.g. `'x-api-key'` (with
   * `scheme: ''`) for providers that take a bare key. A token in any other header than
   * `Authorization` is kept off other origins a redirect leads to: see {@link auth}.
   */
  header?: string | undefined;
  /** Put before a token without a space. Default `'Bearer'`; `''` sends the token bare. */
  scheme?: string | undefined;
  /**
   * How long one `refresh()` may hold the shared slot, in ms (default 30 s,
   * {@link DEFAULT_REFRESH_TIMEOUT_MS}). Calls still waiting on it then fail with
   * `AUTH_REFRESH_FAILED`, and the next 401 starts a new refresh instead of joining
   * one that may never settle. If the abandoned refresh finishes after all, its token
   * is used unless a later refresh's token came first. Longer is safer with rotating
   * refresh tokens (a second refresh may spend the token the first one still holds);
   * shorter unsticks the client sooner when the token endpoint hangs.
   */
  refreshTimeoutMs?: number | undefined;
}

/**
 * A credential as a header value: visible ASCII (`!` to `~`), with spaces or tabs
 * inside only. A space may separate scheme and credentials, never lead or trail:
 * Headers would strip it, and a value that changes on the way is a surprise.
 * Anchored, and the classes meet only at the last character: linear time.
 */
const TOKEN_VALUE = /^[!-~]([\t -~]*[!-~])?$/;

/** Whether `value` can go in a header as a credential: printable ASCII, inner spaces allowed, no line breaks. */
function isTokenValue(value: unknown): value is string {
  return typeof value === 'string' && TOKEN_VALUE.test(value);
}

const optionsSchema = z.strictObject({
  token: z.custom<TokenSource>(
    (value) => isTokenValue(value) || isFunction(value),
    'must be a non-empty string of printable ASCII, or a function',
  ),
  refresh: z.optional(functionOption<() => string | Promise<string>>()),
  header: z.optional(z.string().check(z.regex(HTTP_TOKEN, 'must be a header name'))),
  scheme: z.optional(
    z.string().check(z.refine((value) => value === '' || HTTP_TOKEN.test(value), 'must be a token or empty')),
  ),
  refreshTimeoutMs: z.optional(z.number().check(z.positive(), z.maximum(MAX_DELAY_MS))),
});

/**
 * Calls `get` (`token()` or `refresh()`, by `name`) and checks what it gave. A bad
 * value is described by type only: the value itself is never shown.
 */
async function obtain(get: () => string | Promise<string>, name: string): Promise<string> {
  const value: unknown = await get();
  if (!isTokenValue(value)) {
    throw new TypeError(
      `${name}() returned an invalid token (${value === null ? 'null' : typeof value}): printable ASCII only, no line break or space at an end`,
    );
  }
  return value;
}

/** A `refresh()` in flight, shared by every caller that meets a 401 meanwhile. */
interface Flight {
  /** Settles when the refresh does (its token, if taken, is in place by then). */
  done: Promise<void>;
  /** When its lease ends, by `performance.now()`: monotonic, so a clock step neither ends nor stretches it. */
  ends: number;
  /** Frees the slot if this refresh still holds it (the next 401 starts another); returns why, for its waiters. */
  abandon: () => Error;
  /** The generation of the token it replaces: a 401 came for that one, so it is no token to resend with. */
  replaces: number;
}

/**
 * The waits ({@link settle}) on each caller signal, held by their one `abort` listener there
 * (its `waits`), taken off when the last wait ends. An SDK reuses one signal for every request
 * (the MCP SDK's transport), and a listener per wait made Node warn of a leak
 * ("MaxListenersExceededWarning") at 11 calls waiting together on `token()` or a refresh.
 * A function, not an object with handleEvent: a polyfill's signal (abortcontroller-polyfill)
 * calls every listener as a function.
 */
const WAITS = new WeakMap<AbortSignal, (() => void) & { waits: Set<() => void> }>();

/**
 * The error for a failed `token()` or `refresh()` (`cause`): `code`, saying `what` and
 * naming the request; `tokens` are those the `auth()` holds (the current one first), as sent
 * (with their scheme: a Basic one is hidden decoded too).
 */
function failure(call: Call, code: string, what: string, tokens: string[], cause: unknown): BreakwaterError {
  // A token endpoint's failure quotes its URL (Deno's fetch in the message, Bun's in `path`),
  // `?client_secret=` included: util.inspect and loggers walking `cause` print it. A thrown
  // string, or a frozen error, cannot be redacted in place: a redacted copy goes up instead.
  // The tokens are hidden the same way: a refresh() that fails saying which token it could
  // not refresh (`invalid_grant for <token>`) quotes one, and not always the one this
  // request went with: a call sent with an older token joins a refresh replacing a newer
  // one. Each is hidden as hideSent() hides the credentials a request carried. Every text
  // is cut past MAX_TEXT_CHARS, and past MAX_HIDDEN_CHARS read in all: what is hidden is
  // searched for at each character, and a waiter's failure must not hold up the process.
  const request = requestSummary(call.key, call.method, call.href);
  const where = describeRequest(request);
  // One pass for them all: each its own header, named a credential.
  const headers = tokens.map((token, i): [string, string] => [`x-${i}`, token]);
  const held = new Call('x:', { headers }, '', undefined);
  held.bag.set(CREDENTIAL_HEADER, new Set(headers.map(([name]) => name)));
  let safe: unknown;
  try {
    safe = redactedError(
      cause,
      new Map(),
      (text) => hideSent(held, hideSent(call, redactText(text))),
      MAX_TEXT_CHARS,
      MAX_HIDDEN_CHARS,
    );
  } catch {
    // A getter that throws: no cause, rather than no error (a waiter left hanging).
  }
  return new BreakwaterError(`auth(): ${what}: ${where}`, code, { cause: safe, request });
}

/**
 * Waits for `pending` (a `token()` or `refresh()`) no longer than the caller lets it:
 * rejects with the caller's abort reason as soon as the signal aborts, and with a
 * `TimeoutError` (scope total) at the call's deadline. `definePolicy()` sets that
 * deadline without a timer of its own (its attempt timeout sits inside `auth()`), so
 * without this a getter that hangs would hang the call past `totalMs`. If `pending`
 * fails, rejects with a `BreakwaterError` `code` saying `what` (its `cause`: the error);
 * so it does at the end of `flight`'s lease, which it abandons. The lease is timed by
 * each waiter, not by the flight: a timer of the flight's own would outlive callers
 * that gave up, and hold a process open for up to the lease.
 */
function settle<T>(
  call: Call,
  pending: Promise<T>,
  code: string,
  what: string,
  tokens: () => string[],
  flight?: Flight,
): Promise<T> {
  const { signal } = call;
  const ms = call.remainingMs();
  // The timer's wait: to the deadline, or to the end of the lease if that comes first.
  const wait = flight ? Math.min(ms, flight.ends - performance.now()) : ms;
  return new Promise<T>((resolve, reject) => {
    let shared = signal && WAITS.get(signal);
    /** Settles once, clearing the timer and the wait on every path (abort, deadline, lease, outcome). */
    const end = (value: unknown, ok?: boolean): void => {
      clearTimeout(timer);
      if (shared?.waits.delete(onAbort) && !shared.waits.size) {
        signal?.removeEventListener('abort', shared);
        WAITS.delete(signal as AbortSignal);
      }
      if (ok) resolve(value as T);
      else reject(value);
    };
    const onAbort = (): void => end(abortReason(signal));
    const timer =
      wait < Infinity
        ? setTimeout(
            () =>
              end(
                // The call's own deadline names the error when it comes first (or together).
                wait < ms
                  ? failure(call, code, what, tokens(), flight?.abandon())
                  : new TimeoutError({
                      scope: 'total',
                      ms: call.totalMs ?? ms,
                      request: requestSummary(call.key, call.method, call.href),
                    }),
              ),
            wait,
          )
        : undefined;
    if (signal?.aborted) onAbort();
    else if (signal) {
      if (!shared) {
        const waits = new Set<() => void>();
        shared = Object.assign(
          () => {
            for (const wait of waits) wait();
          },
          { waits },
        );
        WAITS.set(signal, shared);
        signal.addEventListener('abort', shared);
      }
      shared.waits.add(onAbort);
    }
    pending.then(
      (value) => end(value, true),
      (cause) => end(failure(call, code, what, tokens(), cause)),
    );
  });
}

/** The token a request went out with, and which refresh it came from (0: none yet). */
type Stamp = [token: string, generation: number];

/**
 * Stamps `Authorization: Bearer <token>` on every request; on a 401, refreshes the
 * token once (one `refresh()` shared by all concurrent callers) and resends once.
 *
 * - `auth()` owns its header: a value the caller set for it is replaced.
 * - A 401 after the refresh is returned as is: no loop. A 403 is returned as is and
 *   never refreshed: the token is valid, it just may not do this.
 * - A 401 for a request sent with an older token than the current one (another call
 *   refreshed meanwhile) is resent with the current token, without another refresh
 *   (after the refresh in flight, if one is: the current token has expired too).
 * - The resend bumps `call.attempt`, and the 401's body is cancelled first so its
 *   connection is freed.
 * - A request whose body is a stream, an async iterable (or a `Request` with a body)
 *   cannot be sent again: its 401 is returned as is, once the token is refreshed (as
 *   for any 401), so the next call goes with the new token. So is a 401 reached through
 *   a redirect that made a request that is not idempotent a GET (a POST answered 303 has
 *   run): through fetch's own redirects, any redirect (only the last answer is seen).
 *   Under a `retry({ resend: 'never' })`, so is any 401 after a pass that may have run
 *   (a redirect), idempotent or not.
 * - If `refresh()` throws or returns an invalid token, the call rejects with a
 *   `BreakwaterError` with code `AUTH_REFRESH_FAILED` (its `cause` is refresh's
 *   error), and an `auth-refresh` event with `outcome: 'failed'` is emitted; every
 *   call waiting on that refresh fails the same way, and the next 401 tries again.
 *   A successful refresh emits `outcome: 'refreshed'`, once per refresh.
 * - If a `token()` function throws or returns an invalid token, the call rejects
 *   with `AUTH_TOKEN_FAILED` and nothing is sent.
 * - Waits for `token()` and `refresh()` end at once when the caller aborts (with
 *   the caller's own reason) and at the call's total deadline (`TimeoutError`, scope
 *   `'total'`), even one set without a timer (`definePolicy()`'s): a hung getter
 *   cannot hang the call. A refresh left behind still completes for later calls.
 * - A refresh holds the shared slot for `refreshTimeoutMs` at most (default 30 s):
 *   callers still waiting then fail with `AUTH_REFRESH_FAILED` (and an
 *   `auth-refresh` event says `'failed'`), and the next 401 starts a new refresh. If
 *   the abandoned one finishes after all, its token is used (another `'refreshed'`
 *   event) unless a later refresh's token came first; a call whose own refresh then
 *   fails is resent with that token instead of failing. A hung `token()` needs no such
 *   lease: it is called afresh for every call, so it holds up only its own.
 * - A request that `token()` or `refresh()` sends through this same `auth()` (its token
 *   endpoint behind the same policy) goes as the getter wrote it, on every pass a retry
 *   above makes of it: not stamped (a refresh's client credentials stay), its 401 handed
 *   back to the getter (no wait on itself until the lease ends), redirects left to fetch.
 *   It is known as the getter's own when it reaches this `auth()` before the getter's first
 *   `await` (sent first thing, through no layer above that awaits first); one
 *   started later is stamped as any (a `token()`'s request then calls `token()` again,
 *   without end; a refresh's 401 waits out `refreshTimeoutMs`): fetch first, or without
 *   this `auth()`.
 * - No token ever appears in an error message, an event or `JSON.stringify(error)`, nor
 *   in an `AUTH_*` error's cause chain as util.inspect or a logger prints it (own fields
 *   included): neither the one the request went with nor any other this `auth()` has
 *   held lately (the current one, one a refresh returned meanwhile).
 * - A token in another header than `Authorization` (`x-api-key`) is not sent to another
 *   origin a redirect leads to. Fetch drops only `Authorization` there (Fetch standard),
 *   so, when the caller's `redirect` is `'follow'` (the default), such an `auth()` sends
 *   with `redirect: 'manual'` and follows redirects itself, each through the middleware
 *   below it: within the origin with the token; to another origin, and on from there,
 *   without it (nor `Authorization`, `Cookie`, `Proxy-Authorization`, as fetch drops
 *   them). 303, and 301 / 302 after a POST, go on as a GET without a body, as in fetch.
 *   A 307 / 308 for a body that can be read only once, a 21st redirect, or a `Location`
 *   that does not parse, is returned as is (fetch would fail). The response's `url` is
 *   the last one, and after a hop its `redirected` is `true`, on its `clone()`s too (an
 *   answer a layer below froze or gave a read-only `redirected` is rebuilt around its body
 *   to say so; one a layer above rebuilds says what that layer gives it). Tokens in
 *   `Authorization` are left to fetch. A 401 from another origin, where neither went, is returned as is, with
 *   no refresh. (Node, Deno, Bun and workerd answer `'manual'` with the 3xx itself; a
 *   browser hides it, status 0, which such an `auth()` cannot follow.)
 *
 * One `auth()` holds one credential: share it between chains that use the same
 * token, so they share its refreshes too.
 *
 * @example
 * ```ts
 * import { auth, createFetch } from 'breakwater';
 *
 * // `oauth`: your OAuth client.
 * const fetch = createFetch({
 *   use: [auth({ token: () => oauth.accessToken(), refresh: () => oauth.refresh() })],
 * });
 * const res = await fetch('https://mcp.example.com/mcp', { method: 'POST', body: '{}' });
 * ```
 */
export function auth(options: AuthOptions): Middleware {
  const valid = validate(optionsSchema, options, 'auth()');
  const source = valid.token;
  const refresh = valid.refresh;
  // Header names are case-insensitive: 'Authorization' is the default's header, which
  // fetch keeps off other origins itself (no redirect: 'manual', which a browser hides).
  const header = (valid.header ?? DEFAULT_AUTH_HEADER).toLowerCase();
  const scheme = valid.scheme ?? DEFAULT_AUTH_SCHEME;
  const leaseMs = valid.refreshTimeoutMs ?? DEFAULT_REFRESH_TIMEOUT_MS;

  /** The token the last successful refresh produced; used for every request after it. */
  let refreshed = '';
  /**
   * Which refresh `refreshed` came from (its number among those started; 0: none yet).
   * It only grows, so it tells a request's token apart from a newer one.
   */
  let generation = 0;
  /** How many refreshes have started. */
  let started = 0;
  /** The refresh holding the slot, if any. */
  let inflight: Flight | undefined;
  /**
   * Set while `token()` or `refresh()` is being called, until it returns (its promise): a
   * call that enters this `auth()` meanwhile is the getter's own (its token endpoint fetched
   * through this chain), and its bag holds `own` across its passes. Such a call goes as the
   * getter wrote it: a refresh's request stamped with the expired token lost its client
   * credentials, and its 401 waited on the refresh, on itself, until the lease ended; a
   * token()'s called token() again, without end. Only what a getter runs before its first
   * `await` is known so: no other caller can run in between.
   */
  let calling = false;
  const own = Symbol();
  /**
   * The tokens sent or refreshed lately, newest first (at most {@link MAX_HELD_TOKENS}): a
   * failure hides them all, and the current one (see {@link failure}).
   */
  const held: string[] = [];
  const hold = (token: string): string => {
    if (held[0] !== token && held.unshift(token) > MAX_HELD_TOKENS) held.pop();
    return token;
  };
  const prefix = scheme === '' ? '' : `${scheme} `;
  const format = (token: string): string => (/[ \t]/.test(token) ? token : prefix + token);
  const tokens = (): string[] => [refreshed, ...held].map(format);

  async function currentToken(call: Call): Promise<Stamp> {
    if (generation === 0 && typeof source !== 'string') {
      let got: string | Promise<string>;
      calling = true;
      try {
        got = source();
      } catch (error) {
        got = Promise.reject(error);
      }
      calling = false;
      // A token given at once (a cached one) cannot hang: no timer, no listener, on
      // every call. Only a promise is waited for within the caller's limits.
      if (isTokenValue(got)) return [got, 0];
      const value = await settle(
        call,
        obtain(() => got, 'token'),
        'AUTH_TOKEN_FAILED',
        'token() failed, so nothing was sent',
        tokens,
      );
      // A refresh that finished while token() ran has the newer token.
      if (generation === 0) return [value, 0];
    }
    return [generation > 0 ? refreshed : (source as string), generation];
  }

  /**
   * The refresh holding the slot, unless its lease has ended: then it is abandoned
   * here. Checked when a 401 comes, so even a lease that ended with nobody waiting
   * (they all gave up first) needs no timer.
   */
  function live(): Flight | undefined {
    if (inflight && performance.now() >= inflight.ends) inflight.abandon();
    return inflight;
  }

  /** Runs `refresh()` once; a caller arriving while it runs (within its lease) joins it. */
  function refreshOnce(call: Call, run: () => string | Promise<string>): Flight {
    const running = live();
    if (running) return running;
    const number = ++started;
    const report = (outcome: 'failed' | 'refreshed'): void =>
      call.emit({ type: 'auth-refresh', key: call.key, outcome });
    const flight = { ends: performance.now() + leaseMs, replaces: generation } as Flight;
    flight.abandon = () => {
      if (inflight === flight) {
        inflight = undefined;
        report('failed');
      }
      return new Error(`refresh() did not settle within ${leaseMs} ms (refreshTimeoutMs)`);
    };
    // The body runs to its first await before `inflight` is set below, and the
    // `finally` only after it, even when refresh() throws synchronously.
    calling = true;
    flight.done = (async (): Promise<void> => {
      let outcome: 'failed' | 'refreshed' = 'failed';
      try {
        const token = hold(await obtain(run, 'refresh'));
        // An abandoned refresh may still finish. Its token is taken unless a refresh
        // started after it has delivered one: with rotating refresh tokens (OAuth 2.1
        // §4.3.1) the abandoned refresh may have spent the refresh token that its
        // replacement then sends, so its token can be the only one the server still
        // honours, and dropping it would fail every call until yet another refresh.
        // A later refresh's token is the newer one, and an older one never replaces it.
        if (number > generation) {
          refreshed = token;
          generation = number;
          outcome = 'refreshed';
        }
      } finally {
        // A refresh still holding the slot frees it and reports; an abandoned one
        // reported 'failed' when abandoned, and speaks again only if its token is taken.
        const holding = inflight === flight;
        if (holding) inflight = undefined;
        if (holding || outcome === 'refreshed') report(outcome);
      }
    })();
    calling = false;
    inflight = flight;
    return flight;
  }

  return async function auth(call: Call, next: Next): Promise<Response> {
    // A request an auth() above sends to follow a redirect carries what that one chose:
    // its tokens (this one's too) within the origin, none on another. One this auth()'s
    // token() or refresh() sends goes as that getter wrote it (see `calling`).
    if (calling) call.bag.set(own, 1);
    if (call.bag.has(REDIRECTED) || call.bag.has(own)) return next(call);
    // The signal of the pass this runs in, read once: see the check after a 401 below.
    const signal = call.signal;
    const [token, sentGeneration] = await currentToken(call);
    hold(token);
    let send = next;
    // A header of another name is no known credential: say so for the failure body's
    // redaction. Added to the names already there, not in their place: two auth() in one
    // chain (a gateway's key and the API's) each name theirs, and one call sends both.
    if (header !== DEFAULT_AUTH_HEADER) {
      const bag = call.bag;
      const named = (bag.get(CREDENTIAL_HEADER) as Set<string> | undefined) ?? new Set<string>();
      bag.set(CREDENTIAL_HEADER, named.add(header));
      // Fetch keeps only Authorization off another origin: this header it would forward
      // there, so redirects are followed here instead (see follow()). The caller's mode is
      // kept in the bag: a retry above, or an auth() below, then finds 'manual' in init.
      const mode =
        bag.get(REDIRECT_MODE) ?? call.init?.redirect ?? (call.input as Request).redirect ?? 'follow';
      bag.set(REDIRECT_MODE, mode);
      // A breaker below counts no redirect this follows as the server's answer (FOLLOWS: 1
      // on the call, 2 on each hop, which is no new call to it).
      if (mode === 'follow')
        send = (call) =>
          follow(
            call,
            (hop) => {
              hop.bag.set(FOLLOWS, hop === call ? 1 : 2);
              return next(hop);
            },
            named,
          );
    }
    call.setHeader(header, format(token));
    call.bag.set(STAMPED, 1);
    // setHeader() left the call an init of its own, so it may be changed in place.
    if (send !== next) (call.init as RequestInit).redirect = 'manual';
    const response = await send(call);
    if (response.status !== 401 || refresh === undefined) return response;
    // Fetch's own redirects drop Authorization on another origin (Fetch standard), so a
    // 401 that comes from there says nothing about the token either.
    const foreign = FOLLOWED.has(response)
      ? FOLLOWED.get(response)
      : response.redirected
        ? new URL(response.url, call.url).origin !== call.url.origin
        : undefined;
    if (foreign) return response;
    // A body that can be read only once (a stream, an async iterable, a Request's) cannot
    // go again: its 401 is returned as it is, body and all. The token is refreshed first
    // all the same, so the caller's next call carries the new one: else a client whose
    // every request streams its body (an uploader) would be answered 401 for good. So is
    // a 401 at the end of redirects for a request that is not idempotent when one of them
    // made it a GET: it answers that GET, and the first request may have run (a POST
    // answered 303 See Other, whose GET then met the expired token). follow() knows (a
    // 307 / 308 moves the request, which did not run); of fetch's own, only the last
    // answer is seen, so any redirect counts. Nor, under a retry({ resend: 'never' }), a
    // request that may have run, idempotent or not (the 303 above, a GET's included).
    const oneShot =
      hasOneShotBody(call) ||
      (foreign === false && !call.isIdempotent) ||
      (call.bag.has(NO_RESEND) && call.bag.has(RAN));
    // A 401 that is resent is dropped either way now: its connection freed before waiting on
    // a refresh, not waited for (that held up the refresh and the caller's abort).
    if (!oneShot) dropBody(response);
    // A pass that is over is neither refreshed for nor resent: a timeout above ended it
    // (its deadline, the caller's abort) and put its outer signal back on the call while
    // this 401 came late (a fetch that ignores the signal), or a retry above has started
    // the next attempt. A refresh for nobody hits the token endpoint and, with rotating
    // refresh tokens, spends one.
    if (signal?.aborted) {
      dropBody(response);
      throw abortReason(signal);
    }
    // Only a 401 for the newest token says that token is bad; for an older one, another
    // caller has refreshed already and the request just goes again with the new token,
    // once a refresh still running (the newer token expired too) has produced its own.
    if (sentGeneration === generation || live()) {
      const flight = refreshOnce(call, refresh);
      try {
        await settle(
          call,
          flight.done,
          'AUTH_REFRESH_FAILED',
          'refresh() after HTTP 401 failed, so the request was not resent',
          tokens,
          flight,
        );
      } catch (error) {
        // An abandoned refresh may have delivered a newer token than this request's while
        // this one failed (with rotation, because that refresh spent the refresh token):
        // the request goes again with it, as a 401 for an older token does. Not with the
        // token this refresh was replacing: a 401 for it is why the refresh ran.
        if (
          generation === sentGeneration ||
          generation === flight.replaces ||
          signal?.aborted ||
          (error as BreakwaterError | undefined)?.code !== 'AUTH_REFRESH_FAILED'
        ) {
          dropBody(response);
          throw error;
        }
      }
    }
    if (oneShot) return response;
    call.attempt++;
    // The answer to the resend may quote the token the first request went with (a server's
    // session or audit message): hideSent() hides the tokens held lately, that one among them.
    call.bag.set(REPLACED, held);
    call.setHeader(header, format(refreshed));
    return send(call);
  };
}
