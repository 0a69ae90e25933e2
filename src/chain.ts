/**
 * @module
 * `createFetch()`: composes middleware into one function with fetch's exact call
 * forms, so it can be handed to any SDK's `fetch` option (MCP `fetch`, A2A
 * `fetchImpl`, OpenAI / Anthropic / AI SDK `fetch`, ky `fetch`, hono/proxy
 * `customFetch`).
 *
 * A call enters here, passes the middleware outermost first (as in Koa and Hono),
 * and reaches the runtime's fetch with the caller's own `(input, init)` unless a
 * middleware changed them (or the chain follows the call's redirects itself: see send()).
 * Errors thrown by the real fetch are normalised into `NetworkError` on the way out; the
 * caller's own abort reason is never wrapped.
 */

import * as z from 'zod/mini';
import {
  ATTACH,
  abortReason,
  Call,
  CREDENTIAL_HEADER,
  dropBody,
  ENDED,
  type FetchLike,
  type KeyOption,
  type MarkedCall,
  type Middleware,
  type Next,
  NO_RESEND,
  RAN,
} from './call.ts';
import { BreakwaterError, isAbort, NetworkError, type RequestSummary, requestSummary } from './errors.ts';
import type { BreakwaterEvent } from './events.ts';
import { fetchFailure, isBadRedirect, redactedError } from './network.ts';
import { functionOption, keyOptionSchema, onEventSchema, validate } from './options.ts';
import { REDACTED, redactText, redactUrl, SECRET_HEADERS, SECRET_QUERY_NAME } from './redact.ts';
import { follow } from './redirect.ts';

/** Options for {@link createFetch}. */
export interface CreateFetchOptions {
  /** The fetch to call at the end of the chain. Default: the global `fetch`, looked up per call. */
  fetch?: FetchLike | undefined;
  /**
   * Middleware, outermost first: `[retry(), circuitBreaker()]` means each retry attempt
   * passes the breaker. Readonly, so a list written `as const` is taken as it is (it is copied).
   */
  use: readonly Middleware[];
  /** The server's name for breakers, pacing and messages. Default: the URL's origin. */
  key?: KeyOption | undefined;
  /** Receives typed events; a listener that throws is ignored, never fails a call. */
  onEvent?: ((event: BreakwaterEvent) => void) | undefined;
}

const optionsSchema = z.strictObject({
  fetch: z.optional(functionOption<FetchLike>()),
  // zod's parse returns a new array: the caller changing `use` later does not change the chain.
  use: z.array(functionOption<Middleware>()),
  key: keyOptionSchema,
  onEvent: onEventSchema,
});

/** The shortest credential {@link hideCredentials} hides: shorter ones are words, not keys. */
const MIN_SECRET_CHARS = 8;

/**
 * `text` redacted ({@link redactText}), and without the credentials the call carries where it
 * quotes them: the values of its credential headers (Authorization, Cookie,
 * Proxy-Authorization, the header an `auth()` names) whole and each word of them, split at
 * whitespace, `;`, `,`, `=` and `"` (the token after a scheme; a cookie's value quoted alone,
 * `Cookie: a=1; sid=<secret>`; a Basic credential without its padding); each value of the
 * call URL's query named as a credential's ({@link SECRET_QUERY_NAME}); each of these also
 * base64-encoded (without its padding). A custom fetch's or middleware's error that quotes a
 * bare `x-api-key` (an HTTP client's `config.headers`) is no shape redactText() knows. Longest
 * first: a credential that holds another is hidden whole. A cookie's name of 8 characters or
 * more is hidden too; a plain word (`language`, `consent=rejected`) is not. Failure bodies get
 * hideSent()'s fuller search (status.ts: escapes, base64 at any offset, Basic decoded,
 * random-looking query values); this stays small, for the smallest client.
 */
function hideCredentials(call: Call): (text: string) => string {
  const secrets: string[] = [];
  const named = call.bag.get(CREDENTIAL_HEADER) as Set<string> | undefined;
  for (const name of [...SECRET_HEADERS, ...(named ?? [])]) {
    const value = call.header(name) ?? '';
    // A word of small letters, a capital first at most, is no credential's (a cookie's name, its
    // `consent=rejected`, Digest's `response=`): hidden, it took the same word from the prose.
    secrets.push(value.trim(), ...value.split(/[\s;,="]+/).filter((word) => !/^[A-Z]?[a-z_-]*$/.test(word)));
  }
  try {
    for (const [name, value] of call.url.searchParams) if (SECRET_QUERY_NAME.test(name)) secrets.push(value);
  } catch {
    // Not an absolute URL: no query to read.
  }
  for (const secret of [...secrets]) {
    try {
      secrets.push(btoa(secret).replace(/=+$/, ''));
    } catch {
      // Past Latin-1: not a header's bytes.
    }
  }
  secrets.sort((a, b) => b.length - a.length);
  return (text) => {
    let shown = redactText(text);
    for (const secret of secrets)
      if (secret.length >= MIN_SECRET_CHARS) shown = shown.split(secret).join(REDACTED);
    return shown;
  };
}

/**
 * Whether the runtime's fetch, asked for `redirect: 'manual'`, hands back the redirect
 * itself, status and `Location` (Node, Deno, Bun, workerd), so the chain's end can follow
 * one (see send()). A browser's gives an opaque answer of status 0 instead, which nothing
 * can follow: there the runtime follows. Told by Web-standard means: Node 20 has no
 * `navigator`, later ones say `Node.js/`; workerd says `Cloudflare-Workers`.
 */
const SEES_REDIRECTS = /^(?:undefined|Node\.js\/|Deno\/|Bun\/|Cloudflare-Workers)/.test(
  `${globalThis.navigator?.userAgent}`,
);

/** What send() adds to the init of a call whose redirects the chain follows. */
const MANUAL: RequestInit = { redirect: 'manual' };

/** The methods RFC 9110 §9.2.2 defines as idempotent (as call.ts's `isIdempotent` reads them). */
const IDEMPOTENT_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE']);

/** Errors the real fetch threw: middleware rethrowing them pass them on unchanged. */
const passedThrough = new WeakSet<object>();

/**
 * Answers and errors a breakwater fetch ended a call with after a pass may have run it
 * ({@link RAN}). A chain whose fetch is such a fetch (one policy's client under another's)
 * marks its own call from them: the inner client's keyed POST, resent after a 503 and then
 * answered 429, comes up as a 429, which alone says "never ran"; the outer retry resent it
 * under a new key, and it ran twice.
 */
const ranResults = new WeakSet<object>();

/**
 * `result`, remembered in {@link ranResults} when `call` may have run. Each middleware's
 * result passes here (the outermost's is what the fetch returns): a look-up in the bag,
 * where a `.then()` on the fetch's promise would cost every call a promise.
 */
function ended<T>(call: Call, result: T): T {
  // Object() of a primitive (a thrown string) is a new wrapper, which no later look-up finds.
  if (call.bag.has(RAN)) ranResults.add(Object(result));
  return result;
}

/** The key, method and redacted URL an error about this call names. */
function summary(call: Call): RequestSummary {
  return requestSummary(call.key, call.method, call.href);
}

/**
 * Builds a fetch function that runs every call through `use`, outermost first.
 *
 * @example
 * ```ts
 * import { captureStatus, createFetch, throwOnStatus } from 'breakwater';
 *
 * const capture = captureStatus();
 * const fetch = createFetch({ use: [throwOnStatus(), capture] });
 * await fetch('https://api.example.com/v1/models'); // throws HttpStatusError on 4xx/5xx
 * ```
 */
export function createFetch(options: CreateFetchOptions): FetchLike {
  const { fetch: base, use: middleware, key, onEvent } = validate(optionsSchema, options, 'createFetch()');

  /** The end of the chain: the real fetch, with its failures made typed. */
  async function send(call: Call): Promise<Response> {
    // No send, and no attempt event, for a call that is over: a timeout above ended its
    // pass at the deadline (the mark), or the caller aborted. Below that timeout, a
    // retry or auth() still running on a late 503 or 401 (a fetch that ignores the
    // signal) would otherwise reach the server for a caller who already has its error.
    // An aborted signal is refused as fetch itself refuses it: with its own reason (or,
    // for a polyfill's signal that has none, fetch's AbortError).
    const ended = (call as MarkedCall)[ENDED];
    if (ended) throw ended.error;
    const signal = call.callerSignal;
    if (signal?.aborted) throw abortReason(signal);
    if (onEvent !== undefined) {
      call.emit({
        type: 'attempt',
        key: call.key,
        method: call.method,
        url: redactUrl(call.href),
        attempt: call.attempt,
      });
    }
    // A local binding, so the runtime's fetch is called with no `this` (workerd and
    // browsers throw "Illegal invocation" when fetch is called as a method of another object).
    const real = base ?? globalThis.fetch;
    let response: Response;
    /**
     * Whether the call may have run before what failed: the runtime's fetch was sending a
     * redirect's hop that the chain followed, or a breakwater fetch below had sent it.
     */
    let ran = false;
    try {
      // A call whose redirects the runtime's fetch would follow has them followed here, each
      // hop a fetch of its own, when a hop's failure read as "never sent" would have it sent
      // again: fetch names no hop in what it throws (Bun: the request's own URL; Node and
      // Deno: the hop's address or URL, which a redirect within the origin shares with the
      // request), so a POST answered 303 whose GET found the server gone (a deploy, a crash)
      // read as refused, and retry() ran it again. Here, whatever fails after the first
      // answer comes after the server had the request. Such calls are those of a method that
      // is not idempotent (a keyed POST too: its key makes a resend safe, not the POST
      // unsent, and a breakwater fetch above, which knows no key, resent it under a new one)
      // and, under `retry({ resend: 'never' })`, any (that resends only what provably did not
      // run). Others are resent anyway, hop or not: they pay nothing. Only in redirect mode
      // 'follow' (a Request's own mode counts too: fetch's init overrides it), and where
      // `'manual'` hands back the redirect (SEES_REDIRECTS). A `Request` of any method too
      // (hono/proxy's customFetch gets one, and ky's fetch when its adapter holds no body):
      // follow() keeps up to 1 MB of its body for a 307 or 308 (see there). Not the caller's
      // own fetch, which may not hand back a redirect; a breakwater fetch there follows for its
      // own calls (the outer one's hops would pass its auth() as calls of their own, token and all).
      // And any call whose body is bytes (a typed array, an ArrayBuffer: what has a byteLength),
      // which Node 20's fetch cannot send again after a 307 or 308 (it slices a buffer it has
      // detached) where Deno's and Bun's do: here the bytes go again as given.
      response = await (SEES_REDIRECTS &&
      !base &&
      (!IDEMPOTENT_METHODS.has(call.method) ||
        call.bag.has(NO_RESEND) ||
        (call.init?.body as ArrayBuffer | undefined)?.byteLength != null) &&
      (call.init?.redirect ?? (call.input as Request).redirect ?? 'follow') === 'follow'
        ? follow(call, (at) =>
            // Object.assign, not a spread with `redirect` after it: that costs 1.8 µs on Node 20;
            // per send, not a Call of its own per call. Once the server answered, whatever
            // fails next (a hop, a redirect the follower refuses) comes after it had the request.
            real(at.input, Object.assign({}, at.init, MANUAL)).then((answer) => {
              ran = true;
              return answer;
            }),
          )
        : call.init === undefined
          ? real(call.input)
          : real(call.input, call.init));
    } catch (error) {
      if (isAbort(error, call.signal)) throw error;
      ran ||= ranResults.has(error as object);
      // Compared with where a connect failure names (a redirect hop's: see fetchFailure)
      // only when the runtime's fetch was given the call's URL: the caller's own may send elsewhere.
      let typed = fetchFailure(
        error,
        summary(call),
        undefined,
        base ? undefined : call.href,
        hideCredentials(call),
      );
      // A hop's failure, refused or not, came after the server had the request; so did a
      // redirect whose Location does not parse, and what a breakwater fetch below ended its
      // call with after a pass may have run: maybe sent.
      if (ran || isBadRedirect(typed)) {
        call.bag.set(RAN, 1);
        if (typed instanceof NetworkError && typed.sent === 'no')
          typed = new NetworkError({ ...typed, phase: 'send', sent: 'maybe', cause: typed.cause });
      }
      // Only objects can be remembered (a thrown primitive is wrapped by the middleware above).
      passedThrough.add(Object(typed));
      throw typed;
    }
    // Marked here, not only read by retry() from the answer: a middleware between them that
    // rebuilds it (`new Response(body, response)`) says `redirected: false`, and a POST
    // fetch followed a 303 for ran, whatever the GET after it was answered (a 429). So did
    // one answered 301, 302 or 303 that auth() follows itself (redirect: 'manual'): each hop
    // is a call of its own, whose refused connection or refusal reads as "never sent".
    const { status } = response;
    if (response.redirected || (status > 300 && status < 304) || ranResults.has(response))
      call.bag.set(RAN, 1);
    // A fetch that ignores the signal answers a caller who already left: as fetch would,
    // the call ends with the abort's reason, and the answer (nobody's) is let go.
    if (signal?.aborted) {
      dropBody(response);
      throw abortReason(signal);
    }
    return response;
  }

  function dispatch(index: number): Next {
    if (index === middleware.length) return send;
    const current = middleware[index] as Middleware;
    const inner = dispatch(index + 1);
    /** How errors name this middleware; fixed when the chain is built. */
    const name = `middleware ${current.name ? `"${current.name}"` : `#${index + 1} (anonymous)`}`;
    /** `next` for the middleware at `index`: once per attempt of a call. */
    const next: Next = (call) => {
      if (!(call instanceof Call)) {
        return Promise.reject(new TypeError(`${name} called next() without its call`));
      }
      const passed = call.passes;
      if ((passed[index] ?? 0) >= call.attempt) {
        return Promise.reject(
          new BreakwaterError(
            `${name} called next() twice for attempt ${call.attempt}; to resend, bump call.attempt first`,
            'NEXT_CALLED_TWICE',
          ),
        );
      }
      passed[index] = call.attempt;
      return inner(call);
    };
    return async function run(call: Call): Promise<Response> {
      let result: unknown;
      try {
        result = await current(call, next);
      } catch (error) {
        if (
          error instanceof BreakwaterError ||
          isAbort(error, call.signal) ||
          passedThrough.has(error as object)
        ) {
          throw ended(call, error);
        }
        // Kept as the cause, which a logger prints whole: hidden as a fetch failure's is.
        const hide = hideCredentials(call);
        const cause = redactedError(error, undefined, hide);
        // A message getter that throws, or a value String() cannot convert (no prototype),
        // must not replace this error with its own.
        // Read from the cause: redacted and cut (a frozen error's 20 MB message, read whole
        // here, took 2.3 s to redact).
        let said = '';
        try {
          said = cause instanceof Error ? cause.message : String(cause);
        } catch {
          // Said nothing readable: named by the middleware alone.
        }
        throw ended(
          call,
          new BreakwaterError(`${name} threw: ${hide(said)}`, 'MIDDLEWARE_FAILED', {
            cause,
            request: summary(call),
          }),
        );
      }
      // A fetch `Response`, from this realm or another fetch implementation. (Read through
      // casts, not a typed alias, which the minifier would keep as a second variable.)
      if (
        !(
          result instanceof Response ||
          (typeof (result as Response | null)?.status === 'number' &&
            typeof (result as Response).headers?.get === 'function')
        )
      ) {
        throw new TypeError(
          `${name} returned ${result === null ? 'null' : typeof result} instead of a Response`,
        );
      }
      return ended(call, result as Response);
    };
  }

  const entry = dispatch(0);

  const breakwaterFetch = function breakwaterFetch(
    input: string | URL | Request,
    init?: RequestInit,
  ): Promise<Response> {
    // fetch reads any input but a Request as a string (WebIDL USVString), when called: so
    // here. A URL kept as the object was read again by every later send, and a caller's
    // loop that sets `url.searchParams` before each call sent a call still waiting for
    // a layer (a token, pacing), and every retry, to the last call's URL. Another realm's
    // URL or a polyfill's (whatwg-url) is fetched by its href, as plain fetch serves it.
    // A Symbol (no string), a throwing toString, or an init getter that throws (the Call
    // reads a class instance's members: see call.ts) rejects, as fetch does, and never
    // throws synchronously.
    let call: Call;
    try {
      if (typeof input !== 'string' && !(input instanceof Request)) input = `${input}`;
      call = new Call(input, init, key, onEvent);
    } catch (error) {
      return Promise.reject(error);
    }
    return entry(call);
  };
  // Middleware that hand out fetches of their own (capture.scope()) learn their chain here.
  for (const m of middleware) (m as { [ATTACH]?: (fetch: FetchLike) => void })[ATTACH]?.(breakwaterFetch);
  return breakwaterFetch;
}
