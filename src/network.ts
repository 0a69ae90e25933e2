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
 *   (`sent: 'maybe'`). A timeout waiting for response headers lands here.
 * - `response`: the response headers had arrived and reading the body failed
 *   (`sent: 'maybe'`).
 *
 * User aborts are never network errors: an `AbortError` (or a `TimeoutError` from
 * `AbortSignal.timeout()`) anywhere in the chain yields `undefined`, and so does any
 * value that does not look like a network failure (a caller's own abort reason,
 * programming errors such as an invalid URL, non-Error throwables).
 */

import { NetworkError, type NetworkPhase, type RequestSummary, type SentState } from './errors.ts';

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
 *   workerd, unreachable hosts, unknown causes of `fetch failed`).
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

/** What a raw error says about the failure. */
interface Verdict {
  code: NetworkErrorCode;
  phase: NetworkPhase;
  sent: SentState;
}

/**
 * How many errors of a `cause` / `AggregateError.errors` chain are looked at. Real
 * chains are 2 to 4 deep (SDK error → `TypeError('fetch failed')` → `AggregateError`
 * → system errors); the cap keeps a cyclic or hostile chain from running away.
 */
const MAX_CHAIN_ERRORS = 16;

/** Failed before a byte of the request was written. */
function notSent(code: NetworkErrorCode): Verdict {
  return { code, phase: 'connect', sent: 'no' };
}

/** Failed after connecting (or the runtime cannot tell): the server may have the request. */
function maybeSent(code: NetworkErrorCode): Verdict {
  return { code, phase: 'send', sent: 'maybe' };
}

/**
 * Error `code`s (Node/undici system errors, Bun's fetch codes) and error class `name`s
 * (Deno's built-in error classes, older Bun) that name the failure outright. A `Map`, not an
 * object literal, so a code such as `constructor` never finds a prototype member.
 */
const CODE_VERDICTS: ReadonlyMap<string, Verdict> = new Map([
  ['ECONNREFUSED', notSent('ECONNREFUSED')],
  ['ConnectionRefused', notSent('ECONNREFUSED')], // older Bun; Deno's ConnectionRefused class
  ['ENOTFOUND', notSent('ENOTFOUND')],
  ['EAI_AGAIN', notSent('ENOTFOUND')], // temporary DNS failure: see NetworkErrorCode
  ['EAI_FAIL', notSent('ENOTFOUND')],
  ['EAI_NONAME', notSent('ENOTFOUND')],
  ['EAI_NODATA', notSent('ENOTFOUND')],
  ['DNSException', notSent('ENOTFOUND')], // Bun's DNS error class
  ['EPROTO', notSent('TLS')], // Node and Bun: the TLS handshake failed (plain HTTP on the port, ...)
  ['UND_ERR_CONNECT_TIMEOUT', notSent('ETIMEDOUT')],
  ['FailedToOpenSocket', notSent('ENETWORK')], // Bun: the socket could not be opened at all
  ['ECONNRESET', maybeSent('ECONNRESET')],
  ['ConnectionReset', maybeSent('ECONNRESET')], // Deno's ConnectionReset class
  ['ECONNABORTED', maybeSent('ECONNRESET')],
  ['ConnectionAborted', maybeSent('ECONNRESET')], // Deno's ConnectionAborted class
  ['EPIPE', maybeSent('EPIPE')],
  ['BrokenPipe', maybeSent('EPIPE')], // Deno's BrokenPipe class
  ['ETIMEDOUT', maybeSent('ETIMEDOUT')], // refined to "not sent" when syscall is connect
  ['TimedOut', maybeSent('ETIMEDOUT')], // Deno's TimedOut class
  ['Timeout', maybeSent('ETIMEDOUT')], // Bun's idle timeout
  ['UND_ERR_HEADERS_TIMEOUT', maybeSent('ETIMEDOUT')],
  ['UND_ERR_BODY_TIMEOUT', maybeSent('ETIMEDOUT')],
  ['UND_ERR_SOCKET', maybeSent('ECLOSED')], // undici: "other side closed"
  ['ConnectionClosed', maybeSent('ECLOSED')], // older Bun (Bun 1.4 reports ECONNRESET instead)
  ['UnexpectedEof', maybeSent('ECLOSED')], // Deno's UnexpectedEof class
  ['EHOSTUNREACH', maybeSent('ENETWORK')], // refined to "not sent" when syscall is connect
  ['ENETUNREACH', maybeSent('ENETWORK')],
  ['EHOSTDOWN', maybeSent('ENETWORK')],
  ['ENETDOWN', maybeSent('ENETWORK')],
]);

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
  /^(?:ERR_SSL_|ERR_TLS_|UNABLE_TO_|CRL_|SUITE_B_)|CERT|^(?:HOSTNAME|IP_ADDRESS|EMAIL|SUBJECT_ISSUER|AKID_SKID|AKID_ISSUER_SERIAL)_MISMATCH$|^INVALID_(?:NON_)?CA$/;

/** DNS resolver syscalls (`getaddrinfo`, c-ares `queryA`, ...): any failure there is a DNS failure. */
const DNS_SYSCALL = /^(?:getaddrinfo|query)/;

/**
 * Node's message when the peer drops the connection during the TLS handshake: the
 * request cannot have been written yet.
 */
const TLS_HANDSHAKE_DROPPED = 'before secure tls connection was established';

/**
 * Message fragments (lower case) that describe the failure where no `code` does:
 * Deno's hyper / rustls / OS messages (Linux, macOS and Windows wordings). Checked in
 * order; the first match wins. `connectOnly` marks failures that can only happen
 * before the request is written; the others count as not sent only when the chain
 * says they came in the connect step (see {@link CONNECT_MARKERS}).
 */
const MESSAGE_RULES: readonly { needles: readonly string[]; code: NetworkErrorCode; connectOnly?: true }[] = [
  {
    needles: [
      'dns error',
      'failed to lookup address',
      'name or service not known',
      'nodename nor servname',
      'no such host',
      'temporary failure in name resolution',
    ],
    code: 'ENOTFOUND',
    connectOnly: true,
  },
  { needles: ['connection refused', 'actively refused'], code: 'ECONNREFUSED', connectOnly: true },
  {
    needles: [
      'invalid peer certificate',
      'received corrupt message',
      'received fatal alert',
      'peer is incompatible',
      'peer misbehaved',
      'tls handshake',
      'certificate',
    ],
    code: 'TLS',
    connectOnly: true,
  },
  { needles: ['timed out', 'deadline has elapsed'], code: 'ETIMEDOUT' },
  { needles: ['connection reset', 'forcibly closed'], code: 'ECONNRESET' },
  { needles: ['broken pipe'], code: 'EPIPE' },
  { needles: ['connection closed', 'unexpected eof', 'unexpected end of file'], code: 'ECLOSED' },
];

/**
 * Markers (lower case) of a failure in the connect step: hyper's `client error
 * (Connect)` (Deno) means the connector failed, so no request byte was written.
 */
const CONNECT_MARKERS: readonly string[] = ['(connect)', 'tcp connect error'];

/**
 * How `fetch` says "the network failed" when it says nothing more (lower-case message
 * prefixes of a `TypeError`): undici (`fetch failed`, `terminated` for a broken body),
 * Deno, Bun's catch-all, workerd and the browsers. A `TypeError` with any other
 * message (an invalid URL, a used body) is a programming error, not a network one.
 */
const FETCH_FAILURE_MESSAGES: readonly string[] = [
  'fetch failed', // undici (Node), Deno >= 2.x with a cause
  'terminated', // undici: the response body stream broke
  'error sending request', // Deno
  'error reading a body from connection', // Deno: the response body stream broke
  'client error (', // Deno (hyper-util)
  'connection error', // Deno (hyper)
  'fetch() failed', // Bun's catch-all
  'network connection lost', // workerd
  'failed to fetch', // Chromium
  'networkerror when attempting to fetch resource', // Firefox
  'load failed', // Safari 17+
  'the network connection was lost', // Safari
  'the internet connection appears to be offline', // Safari
  'network error', // Chromium, while reading a body
  'network request failed', // React Native, whatwg-fetch
];

/**
 * The message without its URLs (lower case). Deno puts the request URL into the
 * message, and a URL is the caller's (or, after a redirect, the server's) text: a path
 * such as `/certificates/connection-refused` must not pass for a TLS or connect
 * failure, which would wrongly say the request was not sent. URLs in fetch errors are
 * serialised, so they hold no whitespace; a split keeps this linear.
 */
function messageOf(error: unknown): string {
  const message = readString(error, 'message') ?? '';
  return message
    .split(/\s+/)
    .filter((word) => !word.includes('://'))
    .join(' ')
    .toLowerCase();
}

/**
 * Causes (lower case) with which `fetch` refuses a request itself, by the Fetch
 * standard's rules, without a network failure: a blocked port, an unsupported scheme,
 * a redirect loop. They arrive as `fetch failed` (undici) or `Fetch failed: ...`
 * (Deno) but will fail the same way every time: not network errors.
 */
const LOCAL_REFUSALS: readonly string[] = [
  'bad port', // undici
  'unknown scheme', // undici
  'url scheme must be a http(s) scheme', // undici, on redirect
  'redirect count exceeded', // undici
  'requests to port', // Deno: "Requests to port 1 are blocked"
  'maximum number of redirects', // Deno
  'can not redirect to a non http(s) url', // Deno
];

/** Reads a property without letting a throwing getter or Proxy escape. */
function read(value: unknown, key: string): unknown {
  if ((typeof value !== 'object' && typeof value !== 'function') || value === null) return undefined;
  try {
    return (value as Record<string, unknown>)[key];
  } catch {
    return undefined;
  }
}

function readString(value: unknown, key: string): string | undefined {
  const field = read(value, key);
  return typeof field === 'string' ? field : undefined;
}

/**
 * The error and everything under it, outermost first: `cause` links and the members
 * of an `AggregateError` (Node's happy-eyeballs connect reports one error per address).
 */
function chainOf(error: unknown): unknown[] {
  const seen = new Set<unknown>();
  const queue: unknown[] = [error];
  const chain: unknown[] = [];
  while (queue.length > 0 && chain.length < MAX_CHAIN_ERRORS) {
    const current = queue.shift();
    if (typeof current !== 'object' || current === null || seen.has(current)) continue;
    seen.add(current);
    chain.push(current);
    const members = read(current, 'errors');
    if (Array.isArray(members)) queue.push(...members.slice(0, MAX_CHAIN_ERRORS));
    const cause = read(current, 'cause');
    if (cause !== undefined) queue.push(cause);
  }
  return chain;
}

/** A user abort or a signal timeout: the caller's business, never a network failure. */
function isCancellation(error: unknown): boolean {
  const name = readString(error, 'name');
  return name === 'AbortError' || name === 'TimeoutError' || readString(error, 'code') === 'ABORT_ERR';
}

/** The verdict from one error's `code` / `name` / `syscall`, if they name the failure. */
function fromCode(error: unknown): Verdict | undefined {
  const code = readString(error, 'code');
  const syscall = readString(error, 'syscall');
  const message = messageOf(error);
  if (syscall !== undefined && DNS_SYSCALL.test(syscall)) return notSent('ENOTFOUND');
  let verdict: Verdict | undefined;
  if (code !== undefined) {
    if (TLS_RECORD_CODE.test(code)) verdict = maybeSent('TLS');
    else if (TLS_CODE.test(code)) verdict = notSent('TLS');
    else verdict = CODE_VERDICTS.get(code);
  }
  verdict ??= CODE_VERDICTS.get(readString(error, 'name') ?? '');
  if (verdict === undefined) return undefined;
  // Node names the failing syscall: an error in `connect` came before any write.
  if (verdict.sent === 'maybe' && (syscall === 'connect' || message.includes(TLS_HANDSHAKE_DROPPED))) {
    return notSent(verdict.code);
  }
  return verdict;
}

/** The verdict from an error's message (Deno), given whether the chain failed in connect. */
function fromMessage(message: string, connecting: boolean): Verdict | undefined {
  for (const rule of MESSAGE_RULES) {
    if (rule.needles.some((needle) => message.includes(needle))) {
      return rule.connectOnly || connecting ? notSent(rule.code) : maybeSent(rule.code);
    }
  }
  return undefined;
}

/** Whether this is a `TypeError` with one of the messages `fetch` uses for network failures. */
function isFetchFailure(error: unknown): boolean {
  if (readString(error, 'name') !== 'TypeError') return false;
  const message = readString(error, 'message')?.toLowerCase() ?? '';
  return FETCH_FAILURE_MESSAGES.some((prefix) => message.startsWith(prefix));
}

/** Reads the verdict from a whole chain, or undefined when it is not a network failure. */
function judge(chain: readonly unknown[]): Verdict | undefined {
  // Several recognisable failures (an AggregateError, a wrapped cause): the one that
  // admits the request may have been sent wins, so no caller resends on a guess.
  const byCode = chain.map(fromCode).filter((v): v is Verdict => v !== undefined);
  if (byCode.length > 0) return byCode.find((v) => v.sent === 'maybe') ?? byCode[0];

  if (!chain.some(isFetchFailure)) return undefined;
  const messages = chain.map(messageOf);
  if (messages.some((message) => LOCAL_REFUSALS.some((refusal) => message.includes(refusal))))
    return undefined;
  const connecting = messages.some((message) => CONNECT_MARKERS.some((marker) => message.includes(marker)));
  for (const message of messages) {
    const verdict = fromMessage(message, connecting);
    if (verdict !== undefined) return verdict;
  }
  return connecting ? notSent('ENETWORK') : maybeSent('ENETWORK');
}

/**
 * Normalises what `fetch` (or reading a response body) threw into a
 * {@link NetworkError}, or returns `undefined` when it is not a network failure.
 *
 * Recognises undici's `TypeError('fetch failed')` with a `cause.code` (including
 * nested causes and `AggregateError`s), Deno's `error sending request ... (Connect)`
 * messages, Bun's `code`s, workerd's `Network connection lost` and the browsers'
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
  stage: FetchStage = 'headers',
): NetworkError | undefined {
  if (error instanceof NetworkError) return error;
  const chain = chainOf(error);
  if (chain.length === 0 || chain.some(isCancellation)) return undefined;
  const verdict = judge(chain);
  if (verdict === undefined) return undefined;
  const { code, phase, sent } =
    stage === 'body' ? { ...verdict, phase: 'response' as const, sent: 'maybe' as const } : verdict;
  return new NetworkError({ code, phase, sent, cause: error, ...(request === undefined ? {} : { request }) });
}
