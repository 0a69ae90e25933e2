/**
 * @module
 * Turns whatever a runtime's `fetch` throws when the network fails into one
 * {@link NetworkError} with a normalised `code`, the `phase` it failed in and whether
 * the request may have reached the server (`sent`), so retry and the breaker can judge
 * resend safety the same way on Node (undici), Deno, Bun, workerd and browsers.
 *
 * Runtimes are told apart by the shape of the error only (duck typing on `code`,
 * `syscall`, `name`, `message`, `cause` and `AggregateError.errors`): this file uses no
 * runtime-specific API. When a runtime reports two cases the same way, the verdict
 * takes the safe side: `sent: 'maybe'`.
 *
 * Phases, as this file uses them:
 * - `connect`: resolving, connecting or the TLS handshake failed; nothing was written
 *   (`sent: 'no'`).
 * - `send`: the connection was up (or the runtime cannot say) and no response had
 *   arrived: the request was being written, or was written and awaited its answer
 *   (`sent: 'maybe'`). A timeout waiting for response headers lands here, and so does a
 *   connect failure shown to be at a redirect hop: the server had the request (see
 *   `sentTo` in {@link normalizeNetworkError}).
 * - `response`: the response headers had arrived and reading the body failed
 *   (`sent: 'maybe'`).
 *
 * User aborts are never network errors: an `AbortError` (or a `TimeoutError` from
 * `AbortSignal.timeout()`) anywhere in the chain yields `undefined`, and so does any
 * value that does not look like a network failure (a caller's own abort reason,
 * programming errors such as an invalid URL, a body whose content coding is corrupt,
 * non-Error throwables).
 */

import {
  BreakwaterError,
  describeRequest,
  NetworkError,
  type RequestSummary,
  type SentState,
} from './errors.ts';
import { MAX_CHAIN_ERRORS } from './limits.ts';
import { redactText } from './redact.ts';

/**
 * The normalised codes a {@link NetworkError} from {@link normalizeNetworkError} carries.
 *
 * - `ECONNREFUSED`: nothing listens on the port (connect, not sent).
 * - `ENOTFOUND`: any DNS failure, including the transient `EAI_AGAIN`: runtimes other
 *   than Node do not report the two apart reliably, and both mean the same to a
 *   caller (connect, not sent; worth retrying later). The raw error stays in `cause`.
 * - `TLS`: the TLS handshake or certificate check failed (connect, not sent).
 * - `ETIMEDOUT`: a connect timeout (not sent) or a timeout waiting for the response
 *   (maybe sent).
 * - `ECONNRESET`: the peer reset (or aborted) the connection.
 * - `EPIPE`: writing the request hit a connection the peer had closed.
 * - `ECLOSED`: the peer closed the connection cleanly without (a complete) response.
 * - `ENETWORK`: a network failure the runtime does not describe further (browsers,
 *   workerd, whose DNS failure too says only `internal error`; unreachable hosts, unknown
 *   causes of `fetch failed`).
 */
export type NetworkErrorCode =
  | 'ECONNREFUSED'
  | 'ENOTFOUND'
  | 'TLS'
  | 'ETIMEDOUT'
  | 'ECONNRESET'
  | 'EPIPE'
  | 'ECLOSED'
  | 'ENETWORK';

/**
 * Where the error surfaced: `'headers'` while awaiting `fetch()` itself, `'body'`
 * while reading the response body (the body stream broke after the headers arrived).
 */
export type FetchStage = 'headers' | 'body';

/**
 * What a raw error says about the failure: the normalised code and whether the request
 * may have been sent (what follows these two is ignored). The phase follows from these
 * two and the stage (see {@link normalizeNetworkError}), so it is not stored.
 */
type Verdict = readonly [code: NetworkErrorCode, sent: SentState, ...rest: unknown[]];

/**
 * Each normalised code with whether the request can have been sent (`no`: failed
 * before a byte was written; `maybe`: failed after connecting, or the runtime cannot
 * tell, so the server may have the request), then the raw error `code`s (Node/undici
 * system errors, Bun's fetch codes) and error class `name`s (Deno's built-in error
 * classes, older Bun) that name it outright, space-separated, and after each `|` a
 * message fragment (lower case) that describes it where no `code` does: Deno's hyper /
 * rustls / OS messages (Linux, macOS and Windows wordings), matched as plain
 * substrings (linear time). A message counts as "not sent" also when the chain says
 * it came in the connect step (see {@link CONNECT_MARKER}). Messages are read one by
 * one, outermost first, each against the rows in order: the first message that any row
 * matches decides, by the first row it matches.
 *
 * One row per line of one string, split once at module load: the table costs its
 * words and little else in a bundle. The rows, in order:
 * - ENOTFOUND: EAI_AGAIN is a temporary DNS failure (see NetworkErrorCode);
 *   DNSException is Bun's DNS error class.
 * - ECONNREFUSED: ConnectionRefused is older Bun's code and Deno's class.
 * - TLS, maybe sent: Bun says EPROTO, "The TLS handshake failed", also for a TLS error
 *   after the request went out, and Deno's rustls messages name no step: "not sent"
 *   only with a connect syscall or marker. Handshake and certificate codes are
 *   matched by {@link TLS_CODE}.
 * - ETIMEDOUT, not sent: undici's connect timeout.
 * - ENETWORK, not sent: Bun could not open the socket at all.
 * - ETIMEDOUT, maybe sent: refined to "not sent" when the syscall is connect.
 *   TimedOut: Deno's class; Timeout: Bun's idle timeout.
 * - ECONNRESET: ConnectionReset, ConnectionAborted: Deno's classes.
 * - EPIPE: BrokenPipe: Deno's class.
 * - ECLOSED: UND_ERR_SOCKET is undici's "other side closed"; ConnectionClosed older
 *   Bun's (Bun 1.4 reports ECONNRESET instead); UnexpectedEof Deno's class.
 * - ENETWORK, maybe sent: EHOSTUNREACH (and the rest) is refined to "not sent" when the
 *   syscall is connect.
 */
const FAILURES: readonly (readonly string[])[] =
  `ENOTFOUND no ENOTFOUND EAI_AGAIN EAI_FAIL EAI_NONAME EAI_NODATA DNSException|dns error|failed to lookup address|name or service not known|nodename nor servname|no such host|temporary failure in name resolution
ECONNREFUSED no ECONNREFUSED ConnectionRefused|connection refused|actively refused
TLS maybe EPROTO|certificate|received corrupt message|received fatal alert|peer is incompatible|peer misbehaved|tls handshake
ETIMEDOUT no UND_ERR_CONNECT_TIMEOUT
ENETWORK no FailedToOpenSocket
ETIMEDOUT maybe ETIMEDOUT TimedOut Timeout UND_ERR_HEADERS_TIMEOUT UND_ERR_BODY_TIMEOUT|timed out|deadline has elapsed
ECONNRESET maybe ECONNRESET ConnectionReset ECONNABORTED ConnectionAborted|connection reset|forcibly closed
EPIPE maybe EPIPE BrokenPipe|broken pipe
ECLOSED maybe UND_ERR_SOCKET ConnectionClosed UnexpectedEof|connection closed|unexpected eof|unexpected end of file
ENETWORK maybe EHOSTUNREACH ENETUNREACH EHOSTDOWN ENETDOWN`
    .split('\n')
    .map((row) => row.split('|'));

/**
 * The verdict of the row of {@link FAILURES} that names `raw` (a code or class name)
 * outright: its words, verdict first. The rows are searched, not an object keyed by
 * code, so a code such as `constructor` never finds a prototype member; the search
 * starts after the verdict, so neither a normalised code nor `no` / `maybe` counts.
 */
function verdictOf(raw: string): Verdict | undefined {
  for (const [head = ''] of FAILURES) {
    const words = head.split(' ');
    if (words.includes(raw, 2)) return words as unknown as Verdict;
  }
  return undefined;
}

/**
 * TLS record errors that can also strike an established connection, after the request
 * went out: the safe side is "maybe sent". Plain alternatives: linear time on any code.
 */
const TLS_RECORD_CODE = /BAD_RECORD_MAC|DECRYPTION_FAILED/;

/**
 * TLS handshake and certificate codes: OpenSSL reasons as Node reports them
 * (`ERR_SSL_WRONG_VERSION_NUMBER`, `ERR_TLS_CERT_ALTNAME_INVALID`) and the X.509
 * verification names Node and Bun share (`CERT_HAS_EXPIRED`,
 * `DEPTH_ZERO_SELF_SIGNED_CERT`, `UNABLE_TO_VERIFY_LEAF_SIGNATURE`, `HOSTNAME_MISMATCH`).
 */
const TLS_CODE =
  /^(?:ERR_(?:SSL|TLS)_|UNABLE_TO_|CRL_|SUITE_B_)|CERT|^(?:HOSTNAME|IP_ADDRESS|EMAIL|SUBJECT_ISSUER|AKID_(?:SKID|ISSUER_SERIAL))_MISMATCH$|^INVALID_(?:NON_)?CA$/;

/** DNS resolver syscalls (`getaddrinfo`, c-ares `queryA`, ...): any failure there is a DNS failure. */
const DNS_SYSCALL = /^(?:getaddrinfo|query)/;

/**
 * Node's message when the peer drops the connection during the TLS handshake: the
 * request cannot have been written yet.
 */
const TLS_HANDSHAKE_DROPPED = 'before secure tls connection was established';

/**
 * Marks (lower case) of a failure in the connect step: hyper's `client error
 * (Connect)` (Deno) means the connector failed, so no request byte was written.
 */
const CONNECT_MARKER = /\(connect\)|tcp connect error/;

/**
 * How `fetch` says "the network failed" when it says nothing more (lower-case message
 * prefixes of a `TypeError`). A `TypeError` with any other message (an invalid URL, a
 * used body) is a programming error, not a network one.
 *
 * - undici (Node): `fetch failed`; `terminated` when the response body stream broke.
 * - Deno: `fetch failed` (>= 2.x, with a cause), `error sending request`, `error
 *   reading a body from connection` (the body stream broke), `client error (`
 *   (hyper-util), `connection error` (hyper).
 * - Bun's catch-all: `fetch() failed`. workerd: see {@link WORKERD_LOST}.
 * - Chromium: `failed to fetch`, `network error` (while reading a body). Firefox:
 *   `networkerror when attempting to fetch resource`. Safari: `load failed` (17+),
 *   `the network connection was lost`, `the internet connection appears to be
 *   offline`. React Native and whatwg-fetch: `network request failed`.
 */
const FETCH_FAILURE =
  /^(?:fetch(?:\(\))? failed|terminated|error sending request|error reading a body from connection|client error \(|connection error|failed to fetch|networkerror when attempting to fetch resource|load failed|the network connection was lost|the internet connection appears to be offline|network (?:error|request failed))/;

/**
 * workerd's messages (lower-case prefixes) for a failed fetch, in a plain `Error`, not a
 * `TypeError`: `Network connection lost.` (with `retryable: true`) for a refused connect, a
 * reset, a close without a response and a broken body; `internal error; reference = <id>`
 * for a name that does not resolve, where what failed (`failed to lookup address
 * information: Name or service not known`) goes to workerd's log alone. That message is
 * workerd's for any fault inside it (a fetch of `https:` where the outbound service has no
 * TLS configuration says the same), so it names no DNS failure and no step: ENETWORK,
 * maybe sent, as the lost connection (measured on workerd 1.20261117, 2026-12-02).
 */
const WORKERD_LOST = /^(?:network connection lost|internal error; reference = )/;

/**
 * Causes (lower case) with which `fetch` refuses a request itself, by the Fetch
 * standard's rules, without a network failure: a blocked port, an unsupported scheme,
 * a redirect loop. They arrive as `fetch failed` (undici) or `Fetch failed: ...`
 * (Deno) but will fail the same way every time: not network errors. undici says `bad
 * port`, `unknown scheme`, `url scheme must be a http(s) scheme` (on redirect) and
 * `redirect count exceeded`; Deno `requests to port` (`Requests to port 1 are
 * blocked`), `maximum number of redirects` and `can not redirect to a non http(s) url`.
 *
 * So does an answer whose header block is larger than the runtime reads (about 60 KB of
 * tracing headers or cookies): undici's `headers overflow` (16 KiB), hyper's `message
 * head is too large` (Deno; Bun's `Malformed_HTTP_Response` is named by no row). The
 * server answered, and a resend gets the same headers: as `ENETWORK` "maybe sent", a
 * retry() resent a GET for nothing and a breaker counted one endpoint against the server.
 * So do the caller's own `redirect: 'error'` against a 3xx (undici's `unexpected
 * redirect`, Deno's `... redirect mode is set to 'error'`; Bun's `UnexpectedRedirect` is
 * named by no row) and a body that fails the caller's `integrity` (undici's `integrity
 * mismatch`; Deno and Bun ignore the option). So does a streamed request body a 307 or 308
 * would need sent again (Deno's `can not redeliver a streaming request body`; Bun's message
 * is no network failure anyway; undici's `fetch failed` has a bare cause: see `refused` in
 * {@link normalizeNetworkError}).
 * So does a redirect to a URL with credentials (`Location: http://user:pass@host/`):
 * undici's `cross origin not allowed for request mode "cors"` (Deno and Bun follow it).
 * So does a redirect whose `Location` does not parse: undici's cause `Invalid URL` (see
 * {@link BAD_LOCATION}). So does a 307 or 308 to a request with a byte body (a typed array,
 * an `ArrayBuffer`) on Node 20: undici sends the bytes again from a buffer it detached,
 * `Cannot perform ArrayBuffer.prototype.slice on a detached ArrayBuffer`, on every try
 * (Deno and Bun follow it).
 */
const LOCAL_REFUSAL =
  /bad port|unknown scheme|url scheme must be a http\(s\) scheme|redirect count exceeded|requests to port|maximum number of redirects|can not redirect to a non http\(s\) url|headers overflow|message head is too large|unexpected redirect|redirect mode|integrity mismatch|redeliver|cross origin|invalid url|detached arraybuffer/;

/**
 * How fetch says (its message and then its cause's, `|` between) that the server
 * answered a redirect whose `Location` does not parse (`http://[::1`): Bun's
 * `RedirectURLInvalid: ...`, Deno's `Invalid URL: '<Location>' with base '<the hop's URL>'`
 * (see below), undici's `fetch failed` with a cause `Invalid URL` (a URL given to fetch
 * itself fails as `Failed to parse URL from ...`), and the chain's own follower's `redirect
 * 303 not followed: bad Location` (Bun). See {@link fetchFailure}.
 *
 * Run with `--location`, Deno reads a fetch's own URL against the page's location, and
 * refuses one that does not parse in the same words, the location as the base: that call
 * never left, and as BAD_REDIRECT it read as a redirect the server never sent, marked as
 * may-have-run. So Deno's words are a redirect's unless both hold: the call's URL (as the
 * chain read it) does not parse, and the base is the location. Neither tells alone. The base
 * is the location for a redirect too when the call (or a hop) was to the location's own URL.
 * And a call whose URL does not parse for the chain can still be sent by the caller's own
 * `fetch` (one that reads `/api/x` against an origin of its own), whose hop's bad Location
 * names that hop as the base. The runtime's fetch parses the call's URL before it sends a
 * byte: a call whose URL does not parse, refused against the location, was never sent.
 */
const BAD_LOCATION =
  /^(?:redirecturlinvalid|invalid url: .* with base |fetch failed\|invalid url$|redirect \d+ not followed: bad location\|)/i;

/**
 * Error `code`s of a response body that failed to decode: a corrupt (or cut-short) gzip,
 * deflate, br or zstd stream in an answer that arrived whole. The server's bytes are wrong,
 * not the network, and a resend gets the same bytes: no network failure (a breaker would
 * count it against the server's health, retry would resend). Node's zlib (`Z_DATA_ERROR`,
 * `Z_BUF_ERROR`), brotli (`ERR__ERROR_FORMAT_PADDING_2`: `ERR_` and the decoder's
 * `_ERROR_*` name) and zstd (`ZSTD_error_*`) codes, under undici's `terminated`. A stream
 * cut short by the connection closing still reads as that break (undici reports
 * `UND_ERR_SOCKET`, not zlib). Bun's `ZlibError` / `BrotliDecompressionError` codes and
 * Deno's `deflate decompression error` / `brotli error` messages are not network failures
 * here anyway: no row of {@link FAILURES} or {@link FETCH_FAILURE} names them.
 */
const DECODING_CODE = /^(?:Z|ERR_|ZSTD)_/;

/**
 * A special-scheme URL's host that is an IP literal: an IPv6 one is bracketed, an IPv4 one
 * is serialised as four dotted numbers (`2130706433` and `127.0.0.1.` parse to `127.0.0.1`).
 * Not any host ending in a digit: `mcp-server-1` or `worker2` is a name (WHATWG URL's "ends
 * in a number" reads the last label only), and a name resolves anywhere.
 */
const IP_HOST = /^\[|^[\d.]+$/;

/**
 * Whether `link`, one error of a failure, names a target other than `url` (the one `fetch`
 * was called with): then it failed at a redirect hop, after the server had the request (a
 * POST answered 303 whose `Location` refuses the connection or does not resolve; as "not
 * sent", retry() resent the POST and it ran again). Told by what each runtime names:
 * - Node and Bun: the host a DNS lookup failed for (`hostname`).
 * - Node (undici): the `address` and `port` it connected to. A port is compared with the
 *   URL's effective one, an address only with an IP-literal host: `localhost` and other
 *   names resolve anywhere, and a unix-socket dispatcher's `address` is its path.
 * - Deno: the URL in its message (`error sending request for url (<url>): ...`, in the
 *   lower-cased `words`), by origin.
 * Bun's refusal names nothing (its `path` is the URL it was called with, after any hop),
 * and a hop within the origin shares the request's address everywhere: for the calls
 * where that matters (not idempotent, or under `resend: 'never'`) the chain follows
 * redirects itself and knows a hop's failure for one (src/chain.ts, SEES_REDIRECTS).
 */
function elsewhere(link: unknown, words: string[], url: URL): boolean {
  const host = url.hostname;
  const hostname = readString(link, 'hostname');
  const address = readString(link, 'address');
  const port = read(link, 'port') as number;
  return (
    (!!hostname && hostname !== host) ||
    (port > 0 && +port !== (+url.port || (url.protocol === 'https:' ? 443 : 80))) ||
    (!!address && IP_HOST.test(host) && host !== address && host !== `[${address}]`) ||
    // A word of a URL, with or without Deno's parenthesis, that is not at the URL's origin.
    words.some((word) => word.includes('://') && !`(${word}`.includes(`(${url.origin}/`))
  );
}

/**
 * How many values {@link quotes} reads in one field of an error, and how many own fields
 * of an error {@link redactedError} reads, before it gives up and the error is copied (with
 * that many fields at most): an HTTP client's error holds a few dozen (axios's `config` and
 * `response`); the bound keeps a cycle, a huge answer or a hostile error from running away.
 */
const MAX_ERROR_FIELDS = 100;

/**
 * How many characters of one text of an error (a message, a stack, a field, a string in a
 * field) {@link redactedError} reads (and of each message {@link normalizeNetworkError} reads), and of all the texts of one error together (its causes,
 * members, the strings {@link quotes} checks, a copy's): the rest is cut, marked {@link CUT},
 * as `auth()` cuts a token failure's (4,096 and 32,768 there: its hiding costs about five
 * times as much a character). {@link redactText} reads about 0.3 µs a character on Node: a
 * middleware's error holding a 20 MB response `body` held the event loop 2.2 s, and each
 * text was read twice when the error was copied. 64 KiB keeps whole what an SDK's error
 * quotes of a failure body (capped at 64 KiB: `MAX_FAILURE_BODY_BYTES`); 256 KiB in all is
 * four of those, about 80 ms at worst.
 */
const MAX_TEXT_CHARS = 65_536;
const MAX_ERROR_CHARS = 262_144;
/** What ends a text {@link redactedError} cut. */
const CUT = '[cut]';

/** Reads a property without letting a throwing getter or Proxy escape. */
function read(value: unknown, key: PropertyKey): unknown {
  // Only ever called with the objects of a chain: no type check needed.
  try {
    return (value as Record<PropertyKey, unknown>)[key];
  } catch {
    return undefined;
  }
}

/**
 * Adds to `chain` the error and everything under it, outermost first: `cause` links and
 * the members of an `AggregateError` (Node's happy-eyeballs connect reports one error per
 * address; a hedge's `Promise.any` one per send). Each once (a cycle ends), and only the
 * first MAX_CHAIN_ERRORS: bounded. Throws on a revoked Proxy or hostile `errors` list.
 */
function collect(error: unknown, chain: unknown[]): void {
  const queue: unknown[] = [error];
  for (let i = 0; i < queue.length && chain.length < MAX_CHAIN_ERRORS; i++) {
    const current = queue[i];
    if (typeof current !== 'object' || current === null || chain.includes(current)) continue;
    chain.push(current);
    const members = read(current, 'errors');
    if (Array.isArray(members)) queue.push(...members.slice(0, MAX_CHAIN_ERRORS));
    queue.push(read(current, 'cause'));
  }
}

/**
 * The own enumerable keys of `value` (an error, or a value in one of its fields), symbols
 * too (util.inspect prints `[Symbol(config)]: {...}`), one more than MAX_ERROR_FIELDS at
 * most (more says there are too many to read); those listed before a hostile Proxy threw.
 * Counted as they come (`for...in`): listing them all first (`Reflect.ownKeys`) and asking
 * each whether it is enumerable took 1.1 s on Node for a parsed answer's 1,000,000 keys (0.4 s
 * on Bun, 1.3 s on Deno); so 0.36, 0.08 and 0.22 s, what the runtime takes to list them itself
 * (no script can stop that).
 * An array longer than the bound is not listed (5,000,000 elements took 1.8 s and 320 MB to
 * list): its first indices stand for it, one too many, holes or not.
 */
function keysOf(value: object): PropertyKey[] {
  const keys: PropertyKey[] = [];
  try {
    if (Array.isArray(value) && value.length > MAX_ERROR_FIELDS)
      return [...Array(MAX_ERROR_FIELDS + 1).keys()];
    // for...in lists inherited keys too (after the own ones), and no symbols.
    for (const key in value) if (Object.hasOwn(value, key) && keys.push(key) > MAX_ERROR_FIELDS) return keys;
    for (const key of Object.getOwnPropertySymbols(value))
      if ({}.propertyIsEnumerable.call(value, key) && keys.push(key) > MAX_ERROR_FIELDS) return keys;
  } catch {
    // A hostile Proxy: what was listed before it threw.
  }
  return keys;
}

/** Reads a string property (as {@link read}); anything else reads as `''`. */
function readString(value: unknown, key: string): string {
  const field = read(value, key);
  return typeof field === 'string' ? field : '';
}

/**
 * Normalises what `fetch` (or reading a response body) threw into a
 * {@link NetworkError}, or returns `undefined` when it is not a network failure.
 *
 * Recognises undici's `TypeError('fetch failed')` with a `cause.code` (including
 * nested causes and `AggregateError`s), Deno's `error sending request ... (Connect)`
 * messages, Bun's `code`s, workerd's `Network connection lost` and `internal error` and the browsers'
 * `Failed to fetch` family. See the module docs for phases and the README for the
 * per-runtime table.
 *
 * Returns `undefined` for an `AbortError` or `TimeoutError` anywhere in the chain, and
 * for anything that does not look like a network failure: the caller checks its own
 * signal first (a caller's abort reason may be any value) and rethrows such errors
 * as they are. A {@link NetworkError} comes back as it is.
 *
 * @param error what `fetch()` rejected with, or what reading the body rejected with.
 * @param request the request, for the error message (see `requestSummary()`).
 * @param stage `'headers'` (default) while awaiting `fetch()`; `'body'` while reading
 *   the response body: the phase is then `response` and `sent` is `maybe`.
 * @param sentTo the URL `fetch` itself was called with, when known: a failure that names
 *   another target (a DNS error's `hostname`, undici's `address` and `port`, the URL in
 *   Deno's message) came at a redirect hop, after the server had the request, so its
 *   `sent` is `maybe` (phase `send`). Without it (a fetch of the caller's own may send
 *   elsewhere), a connect failure reads as "not sent".
 *
 * @example
 * ```ts
 * import { normalizeNetworkError } from 'breakwater';
 *
 * const controller = new AbortController();
 * try {
 *   await fetch('http://127.0.0.1:9/', { signal: controller.signal });
 * } catch (error) {
 *   if (controller.signal.aborted) throw error; // the caller's own abort: never wrapped
 *   const network = normalizeNetworkError(error);
 *   if (network === undefined) throw error; // not a network failure
 *   const { code, phase, sent } = network; // 'ECONNREFUSED', 'connect', 'no'
 * }
 * ```
 */
export function normalizeNetworkError(
  error: unknown,
  request?: RequestSummary,
  stage?: FetchStage,
  sentTo?: string,
): NetworkError | undefined {
  const chain: unknown[] = [];
  try {
    if (error instanceof NetworkError) return error;
    collect(error, chain);
  } catch {
    // A thrown value whose proxy traps throw (revoked, hostile getPrototypeOf or an
    // `errors` list that cannot be read) says nothing we can trust: not normalised.
    return undefined;
  }
  // A user abort or a signal timeout anywhere: the caller's business, never a network
  // failure; nor a body that failed to decode (see DECODING_CODE). (An empty chain, a
  // value that is not an object, is no network failure.)
  const byCode: Verdict[] = [];
  // The messages without their URLs (see below), and whether any error is one of
  // those `fetch` throws for network failures (see FETCH_FAILURE and WORKERD_LOST).
  const messages: string[] = [];
  let fetchFailure = false;
  // undici's cause when `fetch` refuses by the Fetch standard's rules with no reason given: a
  // plain `Error` of no message and no code (a network failure's names its socket's code, or
  // says what broke). So undici refuses a streamed request body a 307 or 308 would need sent
  // again, and a server's 407: the server answered, and a resend gets the same answer. As a
  // LOCAL_REFUSAL, no network failure: it was ENETWORK "maybe sent", resent and counted.
  let refused = false;
  // The request's own URL, if known, and whether a failure came at another target (see
  // elsewhere): then it was sent, whatever the failure.
  let url: URL | undefined;
  try {
    url = new URL(sentTo as string);
  } catch {
    // Not given (or unparseable): the failure's target is not compared.
  }
  let redirected = false;
  for (const link of chain) {
    const name = readString(link, 'name');
    const code = readString(link, 'code');
    if (name === 'AbortError' || name === 'TimeoutError' || code === 'ABORT_ERR' || DECODING_CODE.test(code))
      return undefined;
    // Its first MAX_TEXT_CHARS only: what a runtime says of a failure comes first, after a
    // URL at most (Deno's), and a message of 20 MB (a hostile cause, an app's error quoting
    // a body) was lower-cased and split into millions of words, 2 to 6 s of the caller's time.
    const message = readString(link, 'message').slice(0, MAX_TEXT_CHARS).toLowerCase();
    fetchFailure ||=
      (name === 'TypeError' && FETCH_FAILURE.test(message)) ||
      (name === 'Error' && WORKERD_LOST.test(message));
    refused ||= name === 'Error' && !message && !code;
    // The message without its URLs. Deno puts the request URL into the message, and a
    // URL is the caller's (or, after a redirect, the server's) text: a path such as
    // `/certificates/connection-refused` must not pass for a TLS or connect failure,
    // which would wrongly say the request was not sent. URLs in fetch errors are
    // serialised, so they hold no whitespace; a split keeps this linear.
    const words = message.split(/\s+/);
    const withoutUrls = words.filter((word) => !word.includes('://')).join(' ');
    messages.push(withoutUrls);
    redirected ||= !!url && elsewhere(link, words, url);
    // The verdict from the error's `code` / `name` / `syscall`, if they name the failure.
    const syscall = readString(link, 'syscall');
    const verdict = DNS_SYSCALL.test(syscall)
      ? (['ENOTFOUND', 'no'] as const)
      : TLS_RECORD_CODE.test(code)
        ? (['TLS', 'maybe'] as const)
        : TLS_CODE.test(code)
          ? (['TLS', 'no'] as const)
          : (verdictOf(code) ?? verdictOf(name));
    if (verdict) {
      // Node names the failing syscall: an error in `connect` came before any write.
      byCode.push(
        verdict[1] === 'maybe' && (syscall === 'connect' || withoutUrls.includes(TLS_HANDSHAKE_DROPPED))
          ? [verdict[0], 'no']
          : verdict,
      );
    }
  }
  // Several recognisable failures (an AggregateError, a wrapped cause): the one that
  // admits the request may have been sent wins, so no caller resends on a guess.
  let verdict = byCode.find((v) => v[1] === 'maybe') ?? byCode[0];
  if (verdict === undefined) {
    // No code: a network failure only if `fetch` says so, and not its own refusal.
    if (!fetchFailure || refused || messages.some((message) => LOCAL_REFUSAL.test(message))) return undefined;
    verdict = ['ENETWORK', 'maybe'];
    found: for (const message of messages) {
      for (const [head = '', ...fragments] of FAILURES) {
        if (fragments.some((fragment) => message.includes(fragment))) {
          verdict = head.split(' ') as unknown as Verdict;
          break found;
        }
      }
    }
    if (messages.some((message) => CONNECT_MARKER.test(message))) verdict = [verdict[0], 'no'];
  }
  // A broken body stream: the response had started, so the request was sent. So was one
  // whose failure came at a redirect hop.
  const body = stage === 'body';
  const sent = redirected || body ? 'maybe' : verdict[1];
  return new NetworkError({
    code: verdict[0],
    phase: body ? 'response' : sent === 'no' ? 'connect' : 'send',
    sent,
    cause: error,
    request,
  });
}

/**
 * `error` redacted (see {@link redactText}), as the chain goes on to keep it as a `cause`,
 * which a logger prints whole with its own causes (console.error, util.inspect, pino's cause
 * walk). Deno's message and stack quote the URL (`error sending request for url (<url>)`),
 * Bun keeps it as `path`, an app's error often as `url`; Node's and Deno's refusal of a
 * header value quote the value (a token with a line break in it). Redacted in place, its
 * `cause` and the members of an AggregateError (util.inspect prints them whole) too; a member
 * that cannot be (a thrown string; frozen; a DOMException, whose message is read-only on Bun)
 * is replaced in its parent by its redacted copy, and a parent that takes no replacement is
 * copied itself (see {@link copyOf}), with its redacted cause. Every other own enumerable
 * field that holds a string is redacted in place too (a `body`, `responseText`); one that
 * holds more (axios's `config` and `response`) is someone else's, read and never changed: the
 * error is copied when it may quote a secret (see {@link quotes}).
 * Any object, not `instanceof Error`: an error of another realm (Jest runs tests in a node:vm
 * context, fetch lives outside it) is none. Each error once, and only the first
 * MAX_CHAIN_ERRORS (and MAX_CHAIN_ERRORS members of each list): bounded. What lies past
 * that bound, and a cause looping back to an error still walked (a frozen one there may yet
 * be copied, and its original keep a secret), goes up as a copy without its cause: the
 * chain is cut there, and a list of members past the bound is cut too. Each text is read up
 * to MAX_TEXT_CHARS, and MAX_ERROR_CHARS in all, the rest cut (`[cut]`): a cut text counts
 * as changed, so a nested one makes the error a copy; one read after the budget ran out (an
 * outer error's, read after its causes; a copy's) goes up as `[cut]` alone.
 *
 * @param seen the walk's own: each error met so far and what it goes up as (`undefined`
 *   while its walk is in progress). Callers pass a fresh one, or none.
 * @param hide what each text goes up as: {@link redactText} (URLs, header values), or
 *   that and more (`auth()` hides the token it stamped too: a `refresh()` that fails
 *   quoting it put it in every log printing the cause, looking like no key).
 * @param textChars, errorChars the cut: each text, and all of them together (`auth()`
 *   cuts shorter, its hiding costing more a character).
 * @param copy change nothing: each error that quotes a secret goes up as its redacted copy
 *   (see {@link copyOf}), as a `BreakwaterError` prints the cause it was handed (its
 *   inspect hook): the caller's error, still its `cause`, stays as it was.
 */
export function redactedError(
  error: unknown,
  seen: Map<unknown, unknown> = new Map(),
  hide: (text: string) => string = redactText,
  textChars: number = MAX_TEXT_CHARS,
  errorChars: number = MAX_ERROR_CHARS,
  copy?: boolean,
): unknown {
  let left = errorChars;
  return walk(
    error,
    seen,
    (text) => {
      const room = Math.min(left, textChars);
      const cut = text.length > room;
      const read = cut ? text.slice(0, Math.max(0, room - CUT.length)) : text;
      left -= read.length;
      return hide(read) + (cut ? CUT : '');
    },
    copy,
  );
}

/**
 * The hook util.inspect calls to print an object: Node's `console.log` and `console.error`
 * print through it, and Deno's and Bun's consoles and `node:util` call it too.
 */
const INSPECT = Symbol.for('nodejs.util.inspect.custom');

/** The copy of an error the inspect hook (below) printed last: printed as it is. */
let shown: unknown;

/**
 * What `console.log(error)`, `console.error(error)` and `util.inspect(error)` print of a
 * `BreakwaterError` on Node, Deno and Bun: the error as it is, but for its `cause`, printed
 * redacted as {@link redactedError} would redact it, copied, not changed (URLs without
 * userinfo or query values, credentials after `Bearer` or a secret's name; each cause
 * below it too). `cause` itself stays what the error was handed: an SDK's error given to
 * `wrapHttpError()` or what a gate's `fn` threw may quote an API key, a bearer token or a
 * URL with `?api_key=`, and its caller may still need it whole (`error.cause instanceof
 * StreamableHTTPError`). Printed is a copy of the error (a real `Error`: Deno and Bun print
 * no other as one), which the hook, called on it in turn, gives back as it is. Installed
 * here, beside the walk it needs, not in `errors.ts`: a bundle that builds no fetch chain
 * (the Hono adapter, ky's options) makes no error with a foreign cause, and would carry the
 * walk for nothing (1.3 KB gzip); a method would fail `isolatedDeclarations` too (`deno
 * publish`).
 */
Object.defineProperty(BreakwaterError.prototype, INSPECT, {
  value(this: BreakwaterError): unknown {
    // An error with no cause prints as it is, as does the copy printed in its place.
    if (this === shown || !('cause' in this)) return this;
    const copy = new Error(this.message, {
      cause: redactedError(this.cause, undefined, undefined, undefined, undefined, true),
    });
    // `stack` assigned: Deno's V8 keeps it as an accessor that reads the error it is on.
    shown = Object.assign(Object.setPrototypeOf(copy, Object.getPrototypeOf(this)), this, {
      stack: this.stack,
    });
    return shown;
  },
});

/** {@link redactedError}'s walk, each text read through `hide` (bounded there). */
function walk(
  error: unknown,
  seen: Map<unknown, unknown>,
  hide: (text: string) => string,
  copy?: boolean,
): unknown {
  // A thrown string (`throw \`failed for ${url}\``) is printed as it is.
  if (typeof error === 'string') return hide(error);
  if (typeof error !== 'object' || error === null) return error;
  // Met before: what it went up as. Still walked (a cause looping back) or past the bound: a
  // copy without its cause, the chain cut there.
  if (seen.has(error) || seen.size >= MAX_CHAIN_ERRORS)
    return seen.get(error) ?? copyOf(error, undefined, hide);
  seen.set(error, undefined);
  const keys = keysOf(error);
  // Whether something the error shows still quotes a secret (or too much to read): then it is copied.
  let kept = keys.length > MAX_ERROR_FIELDS;
  const replace = (owner: object, key: PropertyKey, value: unknown, safe: unknown): void => {
    if (safe === value) return;
    try {
      if (!copy) (owner as Record<PropertyKey, unknown>)[key] = safe;
    } catch {
      // Frozen, or a getter only: told by reading it back.
    }
    kept ||= read(owner, key) !== safe;
  };
  try {
    const members = read(error, 'errors');
    if (Array.isArray(members)) {
      const list = members.length > MAX_CHAIN_ERRORS ? members.slice(0, MAX_CHAIN_ERRORS) : members;
      replace(error, 'errors', members, list);
      for (const [i, member] of list.entries()) replace(list, i, member, walk(member, seen, hide, copy));
    }
  } catch {
    // A hostile Proxy: what was reached before it is redacted.
  }
  const cause = read(error, 'cause');
  const safe = walk(cause, seen, hide, copy);
  replace(error, 'cause', cause, safe);
  // Its text, and every own enumerable field: loggers print those too (pino, util.inspect,
  // JSON.stringify). Bun's `path`, Node's `input` and an app's `url` are such fields, and an
  // HTTP client's error quotes the request and the answer there (axios's `config.headers`,
  // `response.data`; a `body`, `responseText`). Read after the cause and members above: one
  // of them a field holds too is then known clean.
  for (const field of ['message', 'stack', ...keys]) {
    const value = read(error, field);
    // A string is redacted in place; what holds more is someone else's (an HTTP client's
    // config, its agent), so not changed: the error is copied if something in it may quote
    // a secret.
    if (typeof value === 'string') replace(error, field, value, hide(value));
    else kept ||= quotes(value, hide, seen);
  }
  // What it goes up as, for every later reach of it too.
  return seen.set(error, kept ? copyOf(error, safe, hide) : error).get(error);
}

/**
 * Whether `value`, a field of an error, may quote a secret: a string in it that `hide`
 * changes, anywhere util.inspect or JSON.stringify reach (own enumerable fields, and an
 * error's message, stack, cause and errors). Read, never changed. An error
 * {@link redactedError} has walked and left as it was is clean, and so is one it is walking
 * (the error itself, a cause looping back): its own fields are checked there. A `Date` with
 * no fields of its own is plain data (a number: breakwater's own `retryAt`). Any other object that is not (a
 * `Request`, `Headers`, a socket: util.inspect prints its headers) is not vouched for, nor
 * more than MAX_ERROR_FIELDS values (a cycle, a deep tree), nor a field that throws.
 */
function quotes(value: unknown, hide: (text: string) => string, seen: Map<unknown, unknown>): boolean {
  const queue = [value];
  try {
    for (const item of queue) {
      if (typeof item === 'string' && hide(item) !== item) return true;
      if (typeof item !== 'object' || item === null || (seen.has(item) && (seen.get(item) ?? item) === item))
        continue;
      const proto = Object.getPrototypeOf(item);
      if (proto === Date.prototype && keysOf(item).length === 0) continue;
      if (proto !== Object.prototype && proto !== Array.prototype && proto && !(item instanceof Error))
        return true;
      for (const key of ['message', 'stack', 'cause', 'errors', ...keysOf(item)])
        if (queue.push((item as Record<PropertyKey, unknown>)[key]) > MAX_ERROR_FIELDS) return true;
    }
  } catch {
    return true;
  }
  return false;
}

/**
 * What an error that keeps a secret goes up as: a TypeError saying the same redacted, with
 * its name, its code, its stack (where it was thrown, not where it was copied), `cause` and
 * its own fields that hold a string, number or boolean (a `status`), strings redacted (see
 * {@link redactedError}).
 */
function copyOf(error: object, cause: unknown, hide: (text: string) => string): TypeError {
  const copy = new TypeError(hide(readString(error, 'message')), { cause }) as TypeError &
    Record<PropertyKey, unknown>;
  for (const field of ['name', 'code', 'stack', ...keysOf(error)]) {
    const value = read(error, field);
    // A cause or stack of its own is text at most here: the same, redacted.
    if (typeof value !== 'object' && typeof value !== 'function')
      copy[field] = typeof value === 'string' ? hide(value) : value;
  }
  return copy;
}

/**
 * Whether `error` is {@link fetchFailure}'s `BAD_REDIRECT`: its `code` read as any field of
 * what fetch threw is, which may be a revoked Proxy or have a throwing getter.
 */
export function isBadRedirect(error: unknown): boolean {
  return readString(error, 'code') === 'BAD_REDIRECT';
}

/**
 * What a failure of `fetch()` (or of reading its body: `stage`) goes up the chain as: the
 * {@link NetworkError} it normalises to, a `BreakwaterError` of code `BAD_REDIRECT` for a
 * redirect whose `Location` does not parse (see {@link BAD_LOCATION}), or else the error
 * itself, redacted (see {@link redactedError}). A runtime's own refusal (Node's "Request
 * cannot be constructed from a URL that includes credentials: http://user:PASSWORD@...",
 * Bun's `ZlibError fetching "<url>"` for a corrupt gzip body) can quote the URL with its
 * userinfo and query values. The caller checks its own abort first. `sentTo`: see {@link normalizeNetworkError};
 * `hide`: what each text goes up as (the chain's also hides the call's credential headers).
 */
export function fetchFailure(
  error: unknown,
  request: RequestSummary,
  stage?: FetchStage,
  sentTo?: string,
  hide?: (text: string) => string,
): unknown {
  // Read before the redaction below changes them in place: the location is looked for there.
  const said = `${readString(error, 'message')}|${readString(read(error, 'cause'), 'message')}`;
  const safe = redactedError(error, undefined, hide);
  const failure = normalizeNetworkError(error, request, stage, sentTo);
  // Classified by the error as thrown, kept as the redacted one: a copy when the original
  // could not be redacted in place (frozen, or a nested field quoting a secret).
  if (failure) failure.cause = safe;
  // A redirect whose Location does not parse: the server answered, so the request may have
  // run, and a resend gets the same answer. Neither a network failure (retry() resent a GET
  // for nothing, a breaker counted it) nor a runtime's bare TypeError (Deno's said nothing
  // typed): one error, alike on every runtime, which the chain marks as may-have-run.
  return (
    failure ??
    // Deno's refusal of the call's own URL against the location is no redirect (see BAD_LOCATION).
    (BAD_LOCATION.test(said.slice(0, MAX_TEXT_CHARS)) &&
    (URL.canParse(request.url) ||
      !said.includes(` with base '${readString(read(globalThis, 'location'), 'href')}'|`))
      ? new BreakwaterError(
          `${describeRequest(request)} failed: redirect not followed: bad Location`,
          'BAD_REDIRECT',
          { cause: safe, request },
        )
      : safe)
  );
}
