/**
 * @module
 * `proxy()`: Hono's `hono/proxy` helper with a breakwater policy underneath. The
 * incoming request (method, headers, body) is forwarded through `policy.fetch()`,
 * so the upstream gets the policy's retries, breaker, pacing and timeouts; aborting
 * the incoming request aborts the upstream call; and a breakwater failure comes back
 * as the same problem+json response `errorResponses()` gives (503 with `Retry-After`,
 * 504, 502), so a proxy route needs no `onError` of its own.
 */

import type { Context, MiddlewareHandler } from 'hono';
import { proxy as honoProxy } from 'hono/proxy';
import * as z from 'zod/mini';
import type { AuthOptions } from '../../src/auth.ts';
import { Call, type FetchLike, type KeyOption } from '../../src/call.ts';
import { isRetryableStatus } from '../../src/classify.ts';
import { BreakwaterError, isAbort, type NetworkError, TimeoutError } from '../../src/errors.ts';
import type { BreakwaterEvent } from '../../src/events.ts';
import {
  authOptionSchema,
  isFunction,
  keyOptionSchema,
  onEventSchema,
  policySchema,
  validate,
} from '../../src/options.ts';
import type { Policy, PolicyFetchOptions } from '../../src/policy.ts';
import { MAX_DELAY_MS, retryDelay } from '../../src/timing.ts';
import { answer, EXPOSE, exposeClientHeaders, problemResponse, retryAfterSeconds } from './problem.ts';
import {
  errorResponses,
  mayHaveRun,
  NOT_RUN_REQUESTS,
  RUN_TO_END,
  refusal,
  sortFailures,
} from './upstream.ts';

/**
 * The incoming `Host` is not forwarded: the upstream's comes from its URL (the incoming
 * one names this server, and would break a virtual-hosted upstream). Dropped before
 * `headers` is applied, so an app may still set one.
 */
const DROPPED_REQUEST_HEADER = 'host';

/**
 * Request headers that never pass this hop, dropped after `headers` is applied too: a
 * function copying the incoming headers (hono/proxy's own `...c.req.header()` example)
 * would send them on, and undici fails every chunked upload ("invalid transfer-encoding
 * header"). `Expect: 100-continue` was answered by the server in front, and undici
 * rejects any request carrying it ("expect header not supported"): curl sends one with
 * a large body. RFC 9110 §7.6.1: Proxy-Connection, Keep-Alive, TE, Transfer-Encoding and
 * Upgrade are hop-by-hop even when Connection does not name them (hono/proxy misses
 * Proxy-Connection, both ways); Proxy-Authorization is this hop's credential. `Proxy` is
 * no header at all, but a CGI upstream reads it as HTTP_PROXY and sends its own calls
 * through the client's proxy (httpoxy, CVE-2016-5385): reverse proxies drop it.
 */
const HOP_HEADERS = [
  'connection',
  'keep-alive',
  'proxy',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'expect',
];

/**
 * The content codings asked of the upstream, whatever the client or `headers` ask (but
 * {@link IDENTITY}): the two every runtime's fetch decodes. hono/proxy removes the
 * Content-Encoding of every response, trusting fetch to have decoded it, but what fetch
 * decodes differs (measured November 2026, each sending gzip, br, x-gzip, deflate, zstd
 * and lists to a loopback server): Node 20's undici gzip, x-gzip, deflate, br and lists
 * of these; Deno 2.9 gzip and br (and nothing when the request says `Accept-Encoding:
 * identity`); Bun 1.4 gzip, x-gzip, deflate, br and zstd; workerd gzip and br, in lower
 * case only (Node, Deno and Bun read codings in any case, as RFC 9110 §8.4.1 says). Asked
 * for more, an upstream could answer in a coding this runtime passes on still encoded,
 * and the client would get compressed bytes labelled as plain.
 */
const ACCEPT_ENCODING = 'gzip, br';
/**
 * The one `Accept-Encoding` that `headers` may forward, alone and in any case: the opt-out
 * of compression (a compressed 206 answer to a range request; an upstream compressor that
 * buffers an event stream). Its answer is plain on every runtime; one coded anyway is
 * judged as any coding some runtime decodes and another does not, gzip and br included:
 * Deno's fetch leaves them encoded when the request said identity, Node's and Bun's decode
 * them. Any other value is overridden: a weight or a list is not parsed (`identity;q=1`),
 * and a coding it names could be one only some runtimes decode.
 */
const IDENTITY = 'identity';
/**
 * A response in one of these, alone and in lower case, to a request for
 * {@link ACCEPT_ENCODING} was decoded by every runtime's fetch: its label is rightly gone.
 */
const DECODED_EVERYWHERE = ['gzip', 'br'];
/**
 * Codings, in any case, that some runtime's fetch decodes and another passes on encoded
 * (see {@link ACCEPT_ENCODING}; a list of them only Node decodes): a response in these
 * alone may or may not have been decoded here, and neither label could be trusted
 * (but those of {@link TOLD_BY_BYTES}: see `proxy()`).
 */
const DECODED_SOMEWHERE = ['x-gzip', 'deflate', 'zstd', ...DECODED_EVERYWHERE];
/**
 * Codings (in any case, alone or listed with identity) whose bytes tell whether fetch left
 * them encoded, and the `DecompressionStream` format that decodes them here: the zlib
 * format's header (RFC 9110 §8.4.1.2, RFC 1950 §2.2) and gzip's magic (RFC 1952 §2.3.1:
 * 1f 8b, then CM 8), which no UTF-8 text starts with. x-gzip is gzip (RFC 9110 §8.4.1.3).
 */
const TOLD_BY_BYTES = new Map<string, CompressionFormat>([
  ['deflate', 'deflate'],
  ['gzip', 'gzip'],
  ['x-gzip', 'gzip'],
]);
/**
 * Response headers whose URL names a resource to the client: `Location` (a redirect, a
 * 201's new resource) and `Content-Location` (RFC 9110 §8.7).
 */
const URL_HEADERS = ['location', 'content-location'];
/** Tokens that name no coding: Bun decodes a list around them, Node and Deno do not. */
const NO_CODING = [IDENTITY, ''];
/**
 * What the 502 for a coding it cannot pass on tells a client when the upstream's answer
 * was not one to retry (a 200, a 404): do not resend. The upstream ran the request and
 * would answer a resend in the same coding, and 502 is retryable to breakwater's retry()
 * and most SDKs: each resend would run it upstream again for nothing. An answer to retry
 * (a 503, a 429) did not run it, and gets no such word.
 */
const NOT_RETRYABLE = { 'x-should-retry': 'false' };
/**
 * A urlencoded form's media type (any case, RFC 9110 §8.3.1). A prefix is enough: only
 * a request that fetch's formData() parsed is tested, which is urlencoded or multipart.
 */
const URLENCODED = /^application\/x-www-form-urlencoded/i;

/** What `headers`, or what its function returns, must be. */
const HEADERS_RULE = 'a plain record of header changes fetch can send';

/**
 * Where to send a request: a fixed URL, or one built from the request. Either is an
 * absolute `http:` or `https:` URL without userinfo (see {@link proxy}).
 */
export type ProxyTarget = string | URL | ((c: Context) => string | URL | Promise<string | URL>);

/** Header changes: a value sets the header, `undefined` (or `null`) removes it. */
export type ProxyHeaders = Record<string, string | null | undefined>;

/** Options for {@link proxy}. */
export interface ProxyOptions {
  /** The policy for the upstream (`definePolicy()`). Required. */
  policy: Policy;
  /** The upstream's name for breakers, pacing and problem bodies. Default: the policy's `name`, else the URL's origin. */
  key?: KeyOption | undefined;
  /** Receives typed events from every upstream call. Default: none. */
  onEvent?: ((event: BreakwaterEvent) => void) | undefined;
  /** Stamps and refreshes the upstream's own token (`auth()` options). Default: none. */
  auth?: AuthOptions | undefined;
  /**
   * Changes to the forwarded request headers, fixed or per request: a value sets a
   * header, `undefined` removes one. Default: the incoming headers are forwarded as
   * they are (minus `Host`, `Expect` and hop-by-hop headers), credentials included; remove
   * them with `{ authorization: undefined, cookie: undefined }` when the upstream
   * must not see them. `Expect` and hop-by-hop headers are never sent, even when set here;
   * `Accept-Encoding` is always `gzip, br`, the codings every runtime's fetch decodes,
   * unless set here to exactly `identity` (any case): then it is `identity`, and an answer
   * coded anyway gets the 502 problem below. Any other value here is overridden. A
   * function may return a promise; what it returns is checked as the fixed form is, and
   * anything else (a `Headers`, `null`, a value fetch cannot send) fails the request with
   * a `TypeError` for the app's error handler, never silently forwarding the headers as they came.
   */
  headers?: ProxyHeaders | ((c: Context) => ProxyHeaders | Promise<ProxyHeaders>) | undefined;
  /**
   * Process the incoming `Connection` header per RFC 9110 (remove the headers it
   * lists). Default `false`, as in `hono/proxy`: only for trusted clients.
   */
  strictConnectionProcessing?: boolean | undefined;
  /** The longest `Retry-After` sent back, in ms. Default: the policy's `retry.maxRetryAfterMs`. */
  maxRetryAfterMs?: number | undefined;
}

/**
 * Reads `body` until `bytes` bytes came or it ended: what came, and a stream of the
 * whole body again (`null` when it had none).
 */
async function readAhead(
  body: ReadableStream<Uint8Array<ArrayBuffer>>,
  bytes: number,
): Promise<[Uint8Array<ArrayBuffer>, ReadableStream<Uint8Array<ArrayBuffer>> | null]> {
  const reader = body.getReader();
  let head = new Uint8Array();
  let done = false;
  while (head.length < bytes && !done) {
    const next = await reader.read();
    done = next.done;
    if (next.value) head = head.length > 0 ? new Uint8Array([...head, ...next.value]) : next.value;
  }
  // Empty only when it ended; a reader that ended reads as ended again.
  return [
    head,
    head.length > 0
      ? new ReadableStream({
          start: (sink) => sink.enqueue(head),
          pull: async (sink) => {
            const next = await reader.read();
            if (next.done) sink.close();
            else sink.enqueue(next.value);
          },
          cancel: (reason) => reader.cancel(reason),
        })
      : null,
  ];
}

/**
 * Whether `changes` is a plain record of header changes fetch can send: a `Headers` or a
 * `Map` has no own entries and would be ignored whole, and a value fetch refuses would
 * fail every request with a 500.
 */
function headerChanges(changes: unknown): boolean {
  try {
    return (
      typeof changes === 'object' &&
      [Object.prototype, null].includes(Object.getPrototypeOf(changes)) &&
      !!new Headers(Object.entries(changes as object).filter(([, value]) => value != null))
    );
  } catch {
    return false;
  }
}

const optionsSchema = z.strictObject({
  policy: policySchema,
  key: keyOptionSchema,
  onEvent: onEventSchema,
  auth: authOptionSchema,
  headers: z.optional(
    z.custom<ProxyHeaders | ((c: Context) => ProxyHeaders | Promise<ProxyHeaders>)>(
      // null fails in headerChanges(): Object.getPrototypeOf(null) throws.
      (v) => isFunction(v) || headerChanges(v),
      `must be ${HEADERS_RULE}, or a function`,
    ),
  ),
  strictConnectionProcessing: z.optional(z.boolean()),
  maxRetryAfterMs: z.optional(
    z.number().check(z.int('must be a whole number'), z.minimum(0), z.maximum(MAX_DELAY_MS)),
  ),
});

/**
 * What a target must be. Credentials in the URL: the Fetch standard refuses a Request built
 * on one, and Node's fetch does, with a TypeError quoting the URL, password and all, which
 * Hono's default onError prints; Deno's and Bun's take it, so a proxy would work on one
 * runtime and fail on another. A scheme other than http: or https: (ftp:, file:, data:)
 * names no upstream that fetch reaches on every runtime.
 */
const TARGET_RULE = 'must be an http(s) URL without userinfo';

/** Whether `url` is what {@link TARGET_RULE} says. */
function usable(url: unknown): boolean {
  try {
    // Read from the URL as serialised: its scheme, then an authority with no `@` (userinfo
    // always ends with one there; one in a password is escaped, and so is a `/`).
    return /^https?:\/\/[^@/]+\//.test(new URL(url as string).href);
  } catch {
    return false;
  }
}

// Shown redacted when refused (describeValue: no userinfo, no query values).
const targetSchema = z.custom<ProxyTarget>(
  (v) => isFunction(v) || usable(v),
  `${TARGET_RULE}, or a function`,
);

/**
 * A handler that forwards the request to `target` through `options.policy`, and
 * returns the upstream's response (hop-by-hop headers removed, as `hono/proxy` does).
 *
 * - The method, headers and body are forwarded; so is the abort: a client that goes
 *   away aborts the upstream call.
 * - Failure responses come back as the upstream sent them, after the policy's
 *   retries (a 503 with `Retry-After` the policy did not wait out reaches the client
 *   with its `Retry-After`, in delay-seconds and at most `maxRetryAfterMs`); so do
 *   redirects, unfollowed. An absolute `Location` or `Content-Location` on the upstream's
 *   own origin is made relative (path, query and fragment), so a client following it
 *   stays on the proxy; its path is not mapped (an upstream served under another prefix
 *   needs a rewrite of its own), and relative references and other origins' URLs pass as sent.
 * - Breakwater errors become problem responses, exactly as `errorResponses()` maps
 *   them (open circuit → 503 + `Retry-After`, timeout → 504, network → 502); so does
 *   any other failure of the upstream call (an answer Node's fetch refuses: over 16 KiB
 *   of headers; a deflate or x-gzip answer cut off in its first bytes, which are read
 *   before it is passed on) as a 502 naming no URL. Any other error is thrown on to `app.onError`. A 504, or a 502 for a failure after the
 *   request may have reached the upstream, to a request a resend could run twice (a
 *   POST or PATCH without `Idempotency-Key`) says `x-should-retry: false`; one given before
 *   the request reached the upstream (an open circuit's 503, a refused connection's 502)
 *   says `x-should-retry: true`, as one to a wait too long to wait out (a 503 with
 *   `Retry-After`, for a request the policy would have resent), so an `idempotency()` in
 *   front frees the key for its resend. Not when a pass of such a request may have run
 *   upstream (the policy resent it after a 503, on its own `Idempotency-Key` or
 *   `resend: 'always'`): that answer says `x-should-retry: false`. Passes that ran nothing
 *   (refused connections, 429s) count for nothing.
 * - The target is an absolute `http:` or `https:` URL without userinfo: a fixed one that is
 *   not throws a `TypeError` here (its message shows no userinfo or query values); one a
 *   target function returns that is not gets a 500 problem naming neither it nor its
 *   credentials, and nothing is sent.
 * - Each forwarded request carries this proxy's `Via` entry; a request that comes
 *   back with it (a target that resolves to this server) gets a 508 problem instead
 *   of being forwarded again.
 * - A request body is a stream: retry resends it only if the policy sets
 *   `retry.replayBodyBytes` (GET and other bodiless requests are always replayable).
 * - The upstream is asked for `Accept-Encoding: gzip, br`, which every runtime's fetch
 *   decodes, so the client gets the body decoded. An upstream that answers in a coding
 *   no fetch decodes (`x-custom`) passes it on with its `Content-Encoding` and
 *   `Content-Length`. `deflate`, `x-gzip` and `gzip` in any case (`GZIP`), alone or
 *   listed with `identity`, reach the client decoded too: which fetch decodes them differs
 *   (Node's and Bun's decode deflate and x-gzip, Deno's and workerd's do not; workerd's
 *   leaves `GZIP`), and bytes still encoded are told by the header they start with (the
 *   zlib format's; gzip's 1f 8b 08) and decoded here. Content that itself starts with
 *   such a header (a zlib file sent deflated, a .gz file sent as x-gzip) would be decoded
 *   once too often where fetch had decoded it (a .gz file sent as x-gzip reaches a client
 *   of Node or Bun as what it holds, of Deno as the file), and raw deflate (no zlib
 *   header, against RFC 9110) passes on still encoded from Deno and workerd. One that
 *   answers in another coding some runtime decodes and another does not (`zstd`, a list:
 *   `gzip, br`) gets a 502 problem: whether its bytes were decoded here cannot be told,
 *   and either label could be wrong. Unless the upstream's answer was one to retry (a
 *   503), it says `x-should-retry: false`: a resend would run it upstream again, for the
 *   same answer.
 *   An answer with no body (to HEAD, a 204, a 304) has no such bytes: it goes on without
 *   the label.
 * - `headers` setting `Accept-Encoding` to exactly `identity` (any case) is the one
 *   opt-out: the upstream is asked for `identity`, and a plain answer passes as sent (a
 *   range request's 206, an event stream no upstream compressor buffers). An answer coded
 *   anyway gets the same 502, gzip and br included: Deno's fetch leaves them encoded then,
 *   Node's and Bun's decode them. Any other value (`identity;q=1`, a list) is overridden.
 *
 * @example
 * ```ts
 * import { Hono } from 'hono';
 * import { definePolicy } from 'breakwater';
 * import { proxy } from 'breakwater/hono';
 *
 * const models = definePolicy({ name: 'models', timeout: { attemptMs: 10_000 } });
 * const app = new Hono();
 * app.all(
 *   '/v1/*',
 *   proxy((c) => `https://models.internal${new URL(c.req.url).pathname}`, {
 *     policy: models,
 *     headers: { cookie: undefined },
 *   }),
 * );
 * ```
 */
export function proxy(target: ProxyTarget, options: ProxyOptions): MiddlewareHandler {
  validate(targetSchema, target, 'proxy(target)');
  const valid = validate(optionsSchema, options, 'proxy()');
  const { maxRetryAfterMs, statuses } = valid.policy.resolved.retry;
  // policy.fetch() takes an absent option as undefined, so no spreads are needed.
  const chained: FetchLike = valid.policy.fetch(undefined, {
    key: valid.key,
    onEvent: valid.onEvent,
    auth: valid.auth,
    use: [sortFailures],
  } as PolicyFetchOptions);
  const capMs = valid.maxRetryAfterMs ?? maxRetryAfterMs;
  const respond = errorResponses({ policy: valid.policy, maxRetryAfterMs: capMs });
  const changes = valid.headers;
  const strict = valid.strictConnectionProcessing ?? false;
  // This proxy's `Via` entry (RFC 9110 §7.6.3: a gateway must send one), with a random
  // name so it knows a request that comes back to it: a target that resolves to this
  // server would otherwise forward to itself until connections run out. Made on the
  // first request: workerd allows no random values at module scope, where proxy() runs.
  let via: string | undefined;

  /** The answer to `c`: the upstream's, or a problem in its stead. */
  async function forward(c: Context): Promise<Response> {
    exposeClientHeaders(c);
    via ??= `1.1 breakwater-${crypto.randomUUID().slice(0, 8)}`;
    if (c.req.header('via')?.includes(via)) {
      return problemResponse({
        status: 508,
        title: 'Loop Detected',
        detail: 'the request came back to this proxy',
      });
    }
    const url = typeof target === 'function' ? await target(c) : target;
    // What a target function returned, checked before hono/proxy or any log sees it. Not
    // thrown to app.onError: Node's own error quoted the URL there, password and all, and
    // the app's handler may print what it gets. A 500 (no upstream answered: not 502), naming
    // the fault and not the URL, which is internal; `x-should-retry: false`, for a resend
    // meets the same target until it is fixed; and nothing ran, so an idempotency() in front
    // frees the key rather than replaying this for the key's lifetime (NOT_RUN_REQUESTS).
    if (url !== target && !usable(url)) {
      NOT_RUN_REQUESTS.add(c.req.raw);
      return problemResponse(
        { status: 500, title: 'Internal Server Error', detail: `the upstream URL ${TARGET_RULE}` },
        undefined,
        NOT_RETRYABLE,
      );
    }
    const edits = typeof changes === 'function' ? await changes(c) : changes;
    // What the function returned (the fixed form was checked once), named by its kind
    // only: its values may be credentials.
    if (edits !== changes && edits !== undefined && !headerChanges(edits)) {
      const kind = edits && typeof edits === 'object' && edits.constructor?.name;
      throw new TypeError(
        `proxy({ headers }): the function returned ${kind || (edits === null ? 'null' : typeof edits)}, not ${HEADERS_RULE}`,
      );
    }

    /** The upstream's response headers, before hono/proxy removes its Content-Encoding. */
    let sent: Headers | undefined;
    /** What the upstream was asked for: {@link ACCEPT_ENCODING}, or {@link IDENTITY} when `headers` set it. */
    let accepted = ACCEPT_ENCODING;
    /** Whether a resend of what was forwarded could run it twice: no idempotent method, no Idempotency-Key. */
    let once = false;
    /**
     * Whether the upstream failed (its fetch threw, or its answer broke in the bytes read
     * here before passing it on), not an app's code.
     */
    let failed = false;
    const upstreamFailed = (error: unknown): never => {
      failed = true;
      throw error;
    };

    /** hono/proxy built the request (hop-by-hop headers gone); send it on through the policy. */
    async function send(request: Request): Promise<Response> {
      const headers = new Headers(request.headers);
      headers.delete(DROPPED_REQUEST_HEADER);
      headers.append('via', via as string);
      for (const [name, value] of Object.entries(edits ?? {})) {
        // null removes too, as in hono/proxy (it would otherwise be sent as "null").
        if (value == null) headers.delete(name);
        else headers.set(name, value);
      }
      for (const name of HOP_HEADERS) headers.delete(name);
      // hono/proxy removed the client's Accept-Encoding: any value here is `headers`' own
      // (Headers trims it).
      if (headers.get('accept-encoding')?.toLowerCase() === IDENTITY) accepted = IDENTITY;
      headers.set('accept-encoding', accepted);
      // Plain (input, init) rather than the Request: its headers may be immutable,
      // and breakwater's fast path keeps the init as given.
      const init: RequestInit & { duplex?: 'half' } = {
        method: request.method,
        headers,
        signal: RUN_TO_END.has(c.req.raw) ? null : request.signal,
        // A redirect is the upstream's answer for the client to follow (or not), as
        // from any reverse proxy; following it here would also fail every POST (its
        // stream body cannot be sent twice) and fetch another URL the client never asked for.
        redirect: 'manual',
      };
      once = !new Call(request.url, init, undefined, undefined).isIdempotent;
      let body = request.body;
      // @hono/node-server gives every request but GET and HEAD a body stream, even one that
      // came with none (RFC 9112 §6.3: no Content-Length nor Transfer-Encoding, or a length
      // of 0): sent on, it made a bodiless DELETE unreplayable (the policy never retried its
      // 503) and went chunked from Deno; only such a request is read ahead, so an HTTP/2
      // body without a length still goes on; it ends at once over HTTP/1.1.
      if (
        body !== null &&
        !(Number(c.req.header('content-length')) > 0) &&
        !c.req.header('transfer-encoding')
      ) {
        [, body] = await readAhead(body, 1);
      }
      if (body !== null) {
        init.body = body;
        init.duplex = 'half';
      }
      const response = await chained(request.url, init).catch(upstreamFailed);
      sent = response.headers;
      return response;
    }

    try {
      let { raw } = c.req;
      if (raw.bodyUsed) {
        // A body an earlier middleware read through Hono (a validator, c.req.json()) is
        // used up in the raw request, which fetch cannot send (a 500): Hono keeps a copy.
        // Text, bytes or a blob are the body as it came (hono/validator and parseBody()
        // read bytes first), sent as it came, Content-Type and all (a signature may cover
        // both). A form read by c.req.formData() alone is kept as its fields only: sent
        // anew, urlencoded as urlencoded (Hono would make it multipart, which an OAuth
        // token endpoint refuses), multipart with a boundary of its own, named in the
        // copy's type.
        const form = Object.keys(c.req.bodyCache)[0] === 'formData';
        const body =
          form && URLENCODED.test(raw.headers.get('content-type') ?? '')
            ? new Blob([new URLSearchParams((await c.req.formData()) as never).toString()])
            : await c.req.blob();
        raw = new Request(raw, { body });
        // The length of what goes now: Node's fetch sends the client's as given, and a
        // form sent anew (or text read without its BOM) is another length.
        raw.headers.set('content-length', String(body.size));
        if (form && body.type) raw.headers.set('content-type', body.type);
      }
      let response = await honoProxy(url, {
        raw,
        customFetch: send,
        strictConnectionProcessing: strict,
      });
      // An answer the policy did not wait out passes on its wait: as delay-seconds (an
      // HTTP-date depends on the client's clock), and no longer than the cap, so an
      // upstream cannot send every client away for a day. hono/proxy's headers are mutable.
      const coding = sent?.get('content-encoding');
      // One coding every fetch decodes, in lower case (workerd's test is case-sensitive),
      // unless the request said identity: hono/proxy rightly removed its label and length.
      if (coding != null && (accepted === IDENTITY || !DECODED_EVERYWHERE.includes(coding))) {
        // Split as undici splits it: lower case, on commas, trimmed.
        const codings = coding
          .toLowerCase()
          .split(',')
          .map((token) => token.trim())
          .filter((token) => !NO_CODING.includes(token));
        const format = accepted === IDENTITY ? undefined : TOLD_BY_BYTES.get(codings.join());
        if (format && response.body !== null) {
          // Which fetch decodes these differs (deflate and x-gzip: Node and Bun; GZIP: all
          // but workerd; gzip listed with identity: Bun): bytes still encoded start with
          // their format's header, and the rest decodes here, as another fetch did.
          // An answer cut off (or corrupt, where fetch decodes it) in those bytes is a 502 too.
          const [[a = 0, b = 0, c = 0], body] = await readAhead(response.body, 3).catch(upstreamFailed);
          const encoded =
            format === 'gzip'
              ? a === 0x1f && b === 0x8b && c === 8
              : // CM 8 with a window of at most 32 KiB, no preset dictionary, and the check bits.
                (a & 0x8f) === 8 && !(b & 0x20) && ((a << 8) | b) % 31 === 0;
          response = new Response(
            encoded ? body?.pipeThrough(new DecompressionStream(format)) : body,
            response,
          );
        } else if (codings.length > 0 && codings.every((token) => DECODED_SOMEWHERE.includes(token))) {
          // An answer with no body (to HEAD, a 204, a 304) has no bytes a fetch could have
          // left encoded: it goes on without the label, as gzip's does (a cache updating
          // its stored copy's headers from a 304 must not relabel the body it keeps).
          if (response.body !== null) {
            await response.body.cancel();
            return problemResponse(
              {
                status: 502,
                title: 'Bad Gateway',
                detail: 'the upstream answered in a content coding this proxy cannot pass on',
              },
              undefined,
              // By the rule this policy's own retries judged the answer with.
              isRetryableStatus(response.status, sent, statuses) ? undefined : NOT_RETRYABLE,
            );
          }
        } else {
          // No fetch decodes a coding it does not know (undici stops at the first): the
          // bytes are the upstream's, so are their label and length.
          response.headers.set('content-encoding', coding);
          const length = sent?.get('content-length');
          if (length != null) response.headers.set('content-length', length);
        }
      }
      const { headers } = response;
      // An absolute URL on the upstream's own origin would send the client to an address
      // only this proxy may reach (an internal host, a port): it goes relative (path, query,
      // fragment), so the client resolves it against the URL it asked for (RFC 9110
      // §10.2.2), over whatever scheme and host reached the proxy (the request's own URL
      // here may not say: a TLS terminator in front). Read against the URL the client asked,
      // a relative reference lands on the proxy's origin, never the upstream's: it passes as
      // sent (the client resolves it against the proxy's URL, as the upstream meant against
      // its own), as other origins' URLs do. Paths are not mapped: an upstream served under
      // another prefix needs its own rewrite. A path starting "//" goes as "/.//", which stays
      // a path (RFC 3986 §5.2.4): as it is, it would name another host.
      const upstreamOrigin = new URL(url).origin;
      for (const name of URL_HEADERS) {
        const value = headers.get(name);
        const to = value && URL.canParse(value, c.req.url) ? new URL(value, c.req.url) : undefined;
        if (to?.origin === upstreamOrigin) {
          headers.set(name, to.pathname.replace(/^\/\//, '/.//') + to.search + to.hash);
        }
      }
      headers.delete('proxy-connection');
      // RFC 9110 §11.7.3: for the next client only, as Proxy-Authenticate (which hono/proxy drops).
      headers.delete('proxy-authentication-info');
      const waitMs =
        headers.has('retry-after') || headers.has('retry-after-ms') ? retryDelay(headers) : undefined;
      if (waitMs !== undefined) {
        const ms = Math.min(waitMs, capMs);
        headers.set('retry-after', retryAfterSeconds(ms));
        if (headers.has('retry-after-ms')) headers.set('retry-after-ms', String(ms));
      }
      // Which origins may read this answer, with credentials or not, is this server's to
      // say (its cors()): the upstream's Access-Control-* were written for its own origin,
      // and an upstream allowing any origin, or echoing it with credentials, would open
      // the proxy's answers (read with the proxy origin's cookies) to every page. Only the
      // names the upstream exposes stay, added to the front's list (cors()'s, breakwater's,
      // which Hono sets over this response's) when the front lets this origin read.
      const exposed = headers.get(EXPOSE);
      for (const name of [...headers.keys()]) {
        if (name.startsWith('access-control-')) headers.delete(name);
      }
      exposeClientHeaders(c, exposed);
      return response;
    } catch (error) {
      if (error instanceof BreakwaterError || isAbort(error, c.req.raw.signal)) {
        const response = await respond(error as Error, c);
        // A resend is safe when the upstream did not get it (an open circuit, a refused
        // connection), or when the policy would have resent it itself but for a wait too long
        // to wait out (it resends only what is safe, and earlier attempts likewise): an
        // idempotency() in front then frees its key for the resend, rather than replaying this
        // answer for the key's lifetime. The upstream may have run it (a reset after sending,
        // a timeout): the 502 / 504 is retryable to the OpenAI and Anthropic SDKs on any
        // method, and a resend would run it again. Its Idempotency-Key, if forwarded, is the
        // client's: resends dedupe.
        // Not so for a request the client could not resend a pass of which may have run, as
        // retry() knows of each (see sortFailures): the policy resent it on its own
        // Idempotency-Key (a new one for the client's resend) or `resend: 'always'` after a
        // 503, or its last pass's wait too long was a 503's (a 429 is refused before it ran,
        // RFC 6585 §4). Passes that all ran nothing (refused connections, 429s) leave it safe.
        const ran = once && mayHaveRun(error);
        const verdict =
          !ran && refusal(error)
            ? 'true'
            : once &&
              (ran ||
                error instanceof TimeoutError ||
                (error as NetworkError | undefined)?.sent === 'maybe') &&
              'false';
        if (verdict) response.headers.set('x-should-retry', verdict);
        return response;
      }
      // A failure of fetch's own that is no network failure (Node's fetch refuses an answer
      // with over 16 KiB of headers, which Deno and Bun read): still the upstream's, a 502
      // as above, naming no URL; the upstream may have run it.
      if (failed) {
        return problemResponse(
          { status: 502, title: 'Bad Gateway', detail: 'the upstream could not be read' },
          undefined,
          once ? NOT_RETRYABLE : undefined,
        );
      }
      throw error;
    }
  }

  return async function proxy(c) {
    // Headers set in front (a request id) reach what it answers, as a c.json() answer's do.
    return answer(c, await forward(c));
  };
}
