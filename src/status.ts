/**
 * @module
 * Failure responses as errors: `throwOnStatus()` for callers who want a throw,
 * `statusError()` for retry's give-up path, and `wrapHttpError()` for re-building
 * what an SDK's own error lost (the MCP SDK drops Retry-After; the A2A card resolver
 * keeps the status only in its message).
 *
 * breakwater returns non-2xx responses by default: SDKs need to see them (MCP OAuth
 * discovery, 401 handling, redirects). Throwing is opt-in.
 *
 * The bounded body reader lives here, not in `capture.ts`: retry's give-up path needs
 * it, and a bundle with retry but without `captureStatus()` should not carry the
 * capture middleware to get it.
 */

import * as z from 'zod/mini';
import {
  abortReason,
  BODY_READ,
  type Call,
  CREDENTIAL_HEADER,
  dropBody,
  type Middleware,
  type Next,
} from './call.ts';
import type { StatusSnapshot } from './capture.ts';
import { isRetryableStatus } from './classify.ts';
import { HttpStatusError, oneLine, requestSummary } from './errors.ts';
import { validate } from './options.ts';
import {
  endsUrl,
  REDACTED,
  redactText,
  SCHEME_SEPARATOR,
  SECRET_HEADERS,
  SECRET_QUERY_NAME,
  safeHeaders,
} from './redact.ts';
import { type HeadersLike, retryDelay } from './timing.ts';

/** Body bytes read from a failure response by default (DESIGN.md §4: 2 KiB). */
export const DEFAULT_BODY_BYTES = 2048;
/** How long the body prefix is waited for by default before keeping what arrived. */
export const DEFAULT_BODY_WAIT_MS = 1000;
/** `serverMessage` fallback (a non-JSON body) is cut to this many characters. */
const MAX_MESSAGE_CHARS = 400;
/**
 * Credential values this long are hidden wherever the body quotes them. A shorter one is
 * hidden only where it stands as a word (no letter, digit, `-` or `+` next to it), and only
 * when a header sent it (a token, a Basic password, an API key: always a secret, unlike a
 * cookie `theme=dark`), and when at least {@link MIN_WORD_CHARS} long. It is also the
 * shortest start of a credential hidden where the body snippet ends inside one.
 */
const MIN_CREDENTIAL_CHARS = 8;
/**
 * Header credentials shorter than this are not hidden: a 3-character secret is guessed
 * anyway, and a test key `abc` would blank every word `abc` in the body.
 */
const MIN_WORD_CHARS = 4;
/**
 * A header whose token (after the scheme) is one of these carries no secret: a client whose
 * token came out empty sends `Authorization: Bearer` (`Basic` with empty credentials,
 * `token` GitHub-style, `DPoP`, RFC 9449), or `Bearer undefined` / `null` from a template
 * given no token. Hidden as a credential, it would blank the very words a server says
 * what is missing with ("Bearer token required"), or every `null` of a JSON body.
 */
const NO_SECRET = /^(?:basic|bearer|dpop|token|undefined|null)$/i;
/**
 * A query value that looks random under any name: 16 or more characters of a token's
 * alphabet mixing capitals, small letters and digits (base64, `sk-…`), or hex mixing
 * letters and digits (OpenWeatherMap's `appid`). A date, an Azure `api-version`
 * (`2024-05-01-preview`), a word or a UUID does not. Anchored, no nesting: linear.
 */
const RANDOM_QUERY_VALUE =
  /^(?=.*\d)(?:(?=.*[a-z])(?=.*[A-Z])[\w+/=.~-]{16,}|(?=.*[a-fA-F])[\da-fA-F]{16,})$/;

/**
 * The call's bag holds, under this key, the tokens an `auth()` that resent the call with a
 * refreshed token has held lately (at most 4, the one the first request went with among
 * them): the answer to the resend may quote that one (a server's session or audit
 * message), so {@link hideSent} hides them as it hides the credentials sent now.
 */
export const REPLACED: unique symbol = Symbol();

/**
 * Where `captureStatus()` leaves its snapshot on the response it took it of, so
 * `statusError()` outside it does not read the body a second time.
 */
export const SNAPSHOT: unique symbol = Symbol('breakwater.snapshot');

/** A response `captureStatus()` may have snapshotted. */
export type Snapshotted = Response & { [SNAPSHOT]?: StatusSnapshot };

// The schemas are built in `/* @__PURE__ */` closures (see backoff.ts): a bundle that
// imports this file without them (breakwater/providers) drops them.

/** One HTTP status, as `wrapHttpError()` takes it. */
const statusSchema = /* @__PURE__ */ (() => z.number().check(z.int(), z.minimum(100), z.maximum(599)))();

/** HTTP statuses, as `retry()` and `throwOnStatus()` take them. */
export const statusesSchema: z.ZodMiniType<number[]> = /* @__PURE__ */ (() => z.array(statusSchema))();

/**
 * A Content-Type's first `charset` parameter (RFC 9110 §5.6.6, §8.3.2: any case, spaces
 * before it, its value quoted or not), the value in group 1 without its quotes. Anchored at
 * a `;`, so `x-charset=` is none; spaces around `=` are not HTTP's (and a browser reads no
 * charset there either). No nesting: linear on any header.
 */
const CHARSET = /;\s*charset="?([^";]*)"?/i;

/**
 * A decoder for the charset a Content-Type names ({@link CHARSET}: a label's case and
 * spaces are the decoder's to read), else for UTF-8 (RFC 8259's only JSON encoding, and
 * what a label no decoder knows reads as: `new TextDecoder()` throws a RangeError for it).
 * Read as UTF-8 always, an Apache or old Java error page's `iso-8859-1` 'é' was U+FFFD,
 * and a Windows service's UTF-16 JSON error had a NUL after every letter and no message.
 * (`text()` reads UTF-8 only.)
 *
 * UTF-16 only when the body's first bytes (`head`) show it: a byte-order mark, or a NUL in
 * either of the first two bytes (any ASCII character, as JSON's `{` or HTML's `<`, starts a
 * UTF-16 text so). It is the one charset a decoder knows in which ASCII bytes do not read as
 * themselves: a UTF-8 body mislabelled `charset=utf-16` that quotes the API key back reads as
 * CJK characters that neither `hideSent()` nor redaction can find, and that give the key back
 * to anyone who encodes them again. Read as UTF-8, the key is found and hidden.
 */
export function charsetDecoder(type: string | null, head: Uint8Array): TextDecoder {
  try {
    const decoder = new TextDecoder(CHARSET.exec(type as string)?.[1]);
    // Past a short chunk's end, undefined: neither a NUL nor half a mark (their sum is NaN).
    const [first, second] = head as unknown as [number, number];
    // A NUL in either byte, or a byte-order mark (FF FE, FE FF: the only two bytes that add up to 509).
    if (!decoder.encoding.startsWith('utf-16') || [first, second].includes(0) || first + second === 0x1fd)
      return decoder;
  } catch {
    // A label no decoder knows: UTF-8.
  }
  return new TextDecoder();
}

/**
 * `type` (a Content-Type) naming UTF-8 as its charset, for a failure body handed on as
 * text breakwater decoded ({@link charsetDecoder}) and a `Response` encodes as UTF-8: the
 * charset it named would mislabel it. A type naming none is left as it is.
 */
export function utf8Type(type: string): string {
  return type.replace(CHARSET, '; charset=utf-8');
}

/**
 * A failure body's text, read whole and decoded in the charset its Content-Type names
 * ({@link charsetDecoder}), as a capture snapshot's is: the adapters hand an SDK the one or
 * the other, and a short body must not read otherwise than a long one.
 */
export async function bodyText(response: Response): Promise<string> {
  const bytes = new Uint8Array(await response.arrayBuffer());
  return charsetDecoder(response.headers.get('content-type'), bytes).decode(bytes);
}

/** Where JSON error bodies keep their message, in the order they are tried. */
const MESSAGE_PATHS = [['error', 'message'], ['error'], ['message'], ['detail'], ['title']];

/**
 * The message of a parsed JSON error body, from the shapes servers use:
 * `{error:{message}}` (OpenAI, JSON-RPC `{error:{code,message}}`, Google's
 * `{error:{code,message,status}}`), `{type:'error',error:{message}}` (Anthropic),
 * `{error:'...'}`, `{message}`, and RFC 9457 `{detail}` / `{title}`; also an array of one
 * of these, as Google's streaming endpoints (`streamGenerateContent`) answer a 429, and
 * OAuth 2.0's `{error, error_description}` (RFC 6749 §5.2, a token endpoint's refusal of a
 * refresh) as `<error>: <error_description>`: its `error` is a code, which said neither what
 * went wrong nor what to do. Also read by `breakwater/providers` from the bodies the SDKs
 * keep on their errors.
 */
export function errorMessageOf(parsed: unknown): string | undefined {
  const body = Array.isArray(parsed) ? parsed[0] : parsed;
  const description = (body as { error_description?: unknown } | null)?.error_description;
  for (const path of MESSAGE_PATHS) {
    let value = body;
    for (const step of path) value = (value as Record<string, unknown> | null | undefined)?.[step];
    if (typeof value === 'string' && value.length > 0)
      return path === MESSAGE_PATHS[1] && typeof description === 'string' && description
        ? `${value}: ${description}`
        : value;
  }
  return undefined;
}

/**
 * Lets go of `response`, whose read the caller's abort ended, and throws the abort's
 * reason: nobody gets that answer, and through a fetch that ignores the signal nothing
 * else would cancel its body (a trickling 500 kept its connection for as long as the
 * server sent).
 */
function gone(response: Response, signal: AbortSignal): never {
  dropBody(response);
  throw abortReason(signal);
}

/**
 * Reads at most `bytes` bytes of a response's body, for at most `waitMs`, from a
 * clone it then cancels: the caller's body is never consumed. A body that may never
 * end (`text/event-stream`) is not read; a body that breaks yields what arrived.
 * Marks `call` ({@link BODY_READ}) while it reads. The caller's abort (`call.signal`)
 * ends the read at once with the caller's reason: a custom fetch that drops the signal
 * leaves a trickling body open, which held an aborted caller for all of `waitMs`.
 */
async function readPrefix(call: Call, response: Response, bytes: number, waitMs: number): Promise<string> {
  let text = '';
  const type = response.headers.get('content-type');
  // A body that is no web stream (node-fetch's, a Node Readable) reads as none: the status
  // and headers still say what failed.
  if (
    bytes === 0 ||
    !response.body?.getReader ||
    response.bodyUsed ||
    type?.toLowerCase().includes('text/event-stream')
  )
    return text;
  const signal = call.signal;
  if (signal?.aborted) return gone(response, signal);
  const reader = (response.clone().body as ReadableStream<Uint8Array>).getReader();
  // Chosen by the first chunk's bytes (see charsetDecoder).
  let decoder: TextDecoder | undefined;
  let size = 0;
  let next: ReadableStreamReadResult<Uint8Array> | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stop = (): void => {};
  // Settled, never rejected, by the wait limit or the caller's abort (told apart below):
  // a rejection landing after the loop had left would go unhandled.
  const ended = new Promise<undefined>((resolve) => {
    stop = () => resolve(undefined);
    timer = setTimeout(stop, waitMs);
  });
  signal?.addEventListener('abort', stop);
  call.bag.set(BODY_READ, true);
  try {
    while (size < bytes) {
      next = await Promise.race([reader.read(), ended]);
      if (next === undefined || next.done) break;
      decoder ??= charsetDecoder(type, next.value);
      text += decoder.decode(next.value.subarray(0, bytes - size), { stream: true });
      size += next.value.byteLength;
    }
  } catch {
    // The body broke: keep what arrived.
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', stop);
    call.bag.delete(BODY_READ);
    reader.cancel().catch(() => {});
  }
  if (signal?.aborted) return gone(response, signal);
  // A cut (at the byte limit, at the wait limit, or where the body broke) may split a
  // UTF-8 sequence: stream mode held the partial character back instead of adding a
  // replacement character. Only a body read to its end is flushed: a chunk that ends
  // exactly at the limit may still be in the middle of a character. An escape the cut
  // split (`%2`, `\u00`, `&#4`, `&plu`) stands for nothing, and would end a credential's start that
  // hideSent() reads as the escape (`s1gn%2` of `s1gn%2Fatur3`) before it: left out.
  return next?.done
    ? text + (decoder?.decode() ?? '')
    : withoutCutUrl(text.replace(/(?:%[\da-f]?|\\(?:u[\da-f]{0,3})?|&#?x?[\da-z]{0,7})$/i, ''));
}

/**
 * `text` without the URL the cut ran into, when it ran into the URL's authority: cut
 * inside its userinfo (`postgres://admin:1234`), the password's start reads as a port,
 * and redaction could no longer tell it from one. That URL is the last one of the last
 * word, where words end as redaction's URLs do (redact.ts's `endsUrl()`: whitespace,
 * control characters, `"`, `<`, `>`; not a quote: `o'brien` is one user name); it is left out from its `://` on
 * (`postgres…`), in any spelling redaction reads (redact.ts's `SCHEME_SEPARATOR`:
 * JSON-escaped, `\u003A//`, `%3A%2F%2F`). Once a `/`, `?` or `#` (or `%2F`, `%3F`, `%23`)
 * follows it, the authority is whole and redaction shows the URL as any other. The text before it is kept either way: a body
 * of one long word is not lost. Linear.
 */
function withoutCutUrl(text: string): string {
  let start = text.length;
  while (start > 0 && !endsUrl(text.charAt(start - 1))) start--;
  const word = text.slice(start);
  // The authority ends at a `/`, `?` or `#`, written plainly or percent-encoded. The URL
  // cut is the first with none after it: a later one is in its userinfo (a password
  // holding `://`, percent-encoded once more: `u%3Ap%253A%252F%252Fss`).
  let authorityEnd = -1;
  for (const delimiter of word.matchAll(/[/?#]|%(?:2[3Ff]|3[Ff])/g)) authorityEnd = delimiter.index;
  const cut = [...word.matchAll(SCHEME_SEPARATOR)].find((s) => s.index + s[0].length > authorityEnd);
  return cut ? `${text.slice(0, start + cut.index)}…` : text;
}

/**
 * `text` without the credentials `call` sent, each run of hidden characters shown as
 * {@link REDACTED} (as a redacted URL part is): each value of {@link SECRET_HEADERS} (and
 * of the headers `auth()` names otherwise, {@link CREDENTIAL_HEADER}, and those it replaced to resend the call,
 * {@link REPLACED}), whole and then after its scheme (the
 * token of `Bearer <token>`; a Basic one decoded, and its password), but not a scheme
 * alone nor a token that is a placeholder ({@link NO_SECRET}); the request URL's userinfo (`user:password`, the
 * password, or a user name alone); each cookie value and each query value of the request URL
 * named as a credential ({@link SECRET_QUERY_NAME}) or random-looking
 * ({@link RANDOM_QUERY_VALUE}); each also base64-encoded, alone or at any byte offset in a
 * longer base64 text ({@link withBase64}). Looked for in
 * the text with JSON's and URLs' escapes read ({@link readText}), so a credential is found
 * as written or with any character escaped (`\/` from PHP's `json_encode`, `\u002B` from
 * .NET's `System.Text.Json`, `%2F` from `encodeURIComponent`, `&#43;` from Go's html/template), without base64's padding, in
 * either base64 alphabet, and hidden as the server wrote it; a short one only as
 * {@link MIN_CREDENTIAL_CHARS} says. A credential's start of at least {@link MIN_CREDENTIAL_CHARS}
 * characters that ends the text goes too: the body snippet is cut at `bodyBytes`, maybe
 * inside a token. Run only for a failure response, on the text as the server wrote it
 * (before parsing, redaction and `oneLine()`); `[redacted]` keeps a JSON string valid.
 * Also run on the reason phrase, which Node's and Bun's fetch keep as the server wrote it.
 */
export function hideSent(call: Call, text: string): string {
  return sentHider(call)(text);
}

/**
 * {@link hideSent} for `call`, what it sent read once: a failure's headers are several short
 * texts, and reading the credentials (each in base64 at every offset) costs far more than
 * looking for them in a header value.
 */
export function sentHider(call: Call): (text: string) => string {
  const sent: string[] = [];
  const named = call.bag.get(CREDENTIAL_HEADER) as Set<string> | undefined;
  const values = [...SECRET_HEADERS, ...(named ?? [])].map((name) => call.header(name));
  for (const header of [...values, ...((call.bag.get(REPLACED) as string[] | undefined) ?? [])]) {
    const value = header?.trim() ?? '';
    // After the scheme: at any whitespace, a tab too, as servers split it (Go's strings.Fields).
    const token = value.replace(/^\S+\s+/, '');
    if (NO_SECRET.test(token)) continue;
    sent.push(value, token);
    // Basic (RFC 7617) sends `user:password` in base64: a server quotes it back decoded,
    // whole or the password alone (a user name is no secret, and stays). atob() gives
    // bytes as Latin-1 characters; a password sent as UTF-8 (RFC 7617's charset="UTF-8")
    // is quoted back as UTF-8 text, so it is decoded so too (a stray byte as U+FFFD).
    try {
      const binary = /^basic\s/i.test(value) ? atob(token) : '';
      for (const decoded of [binary, utf8(binary)])
        sent.push(decoded, decoded.slice(decoded.indexOf(':') + 1));
    } catch {
      // Not base64: nothing more to hide.
    }
  }
  // The URL's userinfo: Deno and Bun send it as Basic (Node's fetch refuses such a URL), and
  // a server quotes it back decoded, `user:password` or the password alone; a user name
  // alone (`https://<token>@github.com`) is the credential itself. Hidden at any length, as a header's.
  let url: URL | undefined;
  try {
    url = call.url;
    // Percent-decoded as UTF-8, as WHATWG URL decodes (a stray `%`, `50%off`, stays).
    const [user = '', password = ''] = [url.username, url.password].map((part) =>
      utf8(
        part.replace(/%([\da-f]{2})/gi, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16))),
      ),
    );
    if (user || password) sent.push(password || user, `${user}:${password}`);
  } catch {
    // Not an absolute URL: a browser's relative one.
  }
  // Those are a header's credentials: secrets at any length (see MIN_CREDENTIAL_CHARS).
  const words = sent.length;
  // Each query value the call sent that is a credential (`?key=AIza…`: Gemini, Maps), by
  // its name or its look: URLs shown lose every value, and a body quoting one of these alone
  // does too. The others stay: a server quotes them to say what was wrong (Azure's "The
  // api-version '2024-13-01' is invalid"), and a date hidden blanks it everywhere in the
  // message.
  for (const [name, value] of url?.searchParams ?? [])
    if (SECRET_QUERY_NAME.test(name) || RANDOM_QUERY_VALUE.test(value)) sent.push(value);
  // Headers joins repeated fields with ', ': a cookie value holds neither ',' nor ';' (RFC 6265 §4.1.1).
  // A quoted value (`sid="…"`) is hidden without its quotes: servers read it, and quote it back, so.
  for (const pair of call.header('cookie')?.split(/[;,]/) ?? [])
    sent.push(pair.slice(pair.indexOf('=') + 1).replace(/^[\s"]+|[\s"]+$/g, ''));
  // Each as sent and in base64: a server may quote it encoded, alone or in a blob.
  const credentials: string[] = [];
  for (const [i, value] of sent.entries())
    for (const written of withBase64(value)) {
      // Read as the text is: a cookie sent percent-encoded (express's `s%3A<id>.<signature>`)
      // is found where the server quotes it back decoded, and as it was sent; without base64's
      // `=` padding, which a server may drop (what it pads stays shown).
      const credential = readText(written).replace(/=+$/, '');
      if (credential.length >= (i < words ? MIN_WORD_CHARS : MIN_CREDENTIAL_CHARS))
        credentials.push(credential);
    }
  return (text) => {
    const lengths = new Uint8Array(text.length);
    const read = readText(text, lengths);
    // Characters are marked rather than replaced, so a credential that holds another (a
    // signed cookie `<id>.<signature>`, the id sent as a token too) is hidden whole.
    const hidden = new Uint8Array(read.length);
    for (const credential of credentials) {
      for (let at = read.indexOf(credential); at >= 0; at = read.indexOf(credential, at + credential.length))
        if (
          credential.length >= MIN_CREDENTIAL_CHARS ||
          !/[\w+]/.test(read.charAt(at - 1) + read.charAt(at + credential.length))
        )
          hidden.fill(1, at, at + credential.length);
      // Only a start shorter than the credential may end the text: a full one is found above.
      const head = credential.slice(0, MIN_CREDENTIAL_CHARS);
      let at = read.indexOf(head, read.length - credential.length + 1);
      while (at >= 0 && !credential.startsWith(read.slice(at))) at = read.indexOf(head, at + 1);
      if (at >= 0) hidden.fill(1, at);
    }
    // Each run of hidden characters as one REDACTED, the rest as the server wrote it: the
    // character read at i was written at w.
    let out = '';
    let done = 0;
    for (let i = 0, w = 0; i <= read.length; w += lengths[i++] || 1)
      if (!hidden[i] !== !hidden[i - 1]) {
        if (hidden[i]) out += text.slice(done, w) + REDACTED;
        else done = w;
      }
    return out + text.slice(done);
  };
}

/** `binary` (bytes as Latin-1 characters) read as UTF-8, a stray byte as U+FFFD. */
function utf8(binary: string): string {
  return new TextDecoder().decode(Uint8Array.from(binary, (c) => c.charCodeAt(0)));
}

/**
 * `value` and the base64 forms a server may quote it in (a header value is Latin-1 bytes):
 * whole, and inside a longer base64 text at each byte offset k mod 3, without the characters
 * that also encode the bytes around it (4 characters a 3 bytes: from ceil(4k/3) to
 * floor(4(k + length)/3)); a blob that echoes a request holds it at any offset. Past
 * Latin-1, btoa() throws: `value` alone.
 */
function withBase64(value: string): string[] {
  const forms = [value];
  try {
    forms.push(btoa(value));
    for (let k = 0; k < 3; k++)
      forms.push(btoa('\0'.repeat(k) + value).slice(k && k + 1, ((k + value.length) * 4) / 3));
  } catch {
    // Not Latin-1.
  }
  return forms;
}

/**
 * Named character references a server may write a credential's punctuation as (HTML5's
 * `&plus;`, `&sol;`, `&equals;`, ...: each an ASCII character; `&hyphen;` is U+2010, not `-`),
 * each name followed by the character it stands for. A name is looked up where it first
 * occurs, so none may occur before its own place (in another's name, or across one's end).
 */
const NAMED_REFS = `plus+sol/equals=amp&quot"apos'lt<gt>colon:period.comma,lowbar_`;

/**
 * A character a server may write escaped: a `\uXXXX` or `\x` JSON escape, a `%XX` percent
 * escape (a server quoting a credential in a URL or a form encodes its `/`, `+` and `=`:
 * `encodeURIComponent`, in either case), an HTML or XML character reference (an error page's:
 * Go's html/template writes `+` as `&#43;`; `&#x2F;`, and the {@link NAMED_REFS}). Each
 * alternative starts with its own literal and is bounded: linear time.
 */
const ESCAPED = /* @__PURE__ */ (() =>
  RegExp(
    String.raw`\\u([\da-f]{4})|%([\da-f]{2})|&#(?:x([\da-f]{1,6})|(\d{1,7}));|&(${(NAMED_REFS.match(/[a-z]+/g) as string[]).join('|')});|\\([\s\S])`,
    'gi',
  ))();

/**
 * `text` as read, each {@link ESCAPED} character as the one it stands for, any other as it
 * is (a cut escape, `\u00`, `%2` or `&#4`, reads as itself); and at each place in it that
 * an escape was read, how long the escape was (else 0: one character as it is). A reference
 * past U+FFFD reads as U+FFFD: one character written, one UTF-16 unit read. base64url's `-`
 * and `_` read as base64's `+` and `/`: a credential is found in either alphabet. One native
 * pass that calls back only at escapes, and one byte per character: a match object and two
 * arrays per character (pieces, as written and as read) made a 64 KiB failure body cost 50
 * to 100 ms on Node 20 and Bun, and as much again in garbage collection.
 */
function readText(text: string, lengths: Uint8Array | number[] = []): string {
  let shift = 0;
  return text
    .replace(
      ESCAPED,
      (
        written,
        hex?: string,
        percent?: string,
        ref?: string,
        decimal?: string,
        name?: string,
        c?: string,
        at = 0,
      ) => {
        lengths[at - shift] = written.length;
        shift += written.length - 1;
        return (
          c ??
          (name
            ? (NAMED_REFS[NAMED_REFS.indexOf(name.toLowerCase()) + name.length] as string)
            : String.fromCharCode(
                Math.min(
                  +(decimal as string) || Number.parseInt((hex ?? percent ?? ref) as string, 16),
                  0xfffd,
                ),
              ))
        );
      },
    )
    .replaceAll('-', '+')
    .replaceAll('_', '/');
}

/** What a failure response said, as `captureStatus()` snapshots it and `statusError()` reports it. */
export type Said = Pick<StatusSnapshot, 'retryAfterMs' | 'body' | 'serverMessage'>;

/**
 * Reads what a failure response of `call` said: its requested wait (as of `now`), the
 * start of its body on one line, and its message: a JSON error message, else the body,
 * cut.
 */
export async function readSaid(
  call: Call,
  response: Response,
  bodyBytes: number = DEFAULT_BODY_BYTES,
  bodyWaitMs: number = DEFAULT_BODY_WAIT_MS,
  now: number = Date.now(),
): Promise<Said> {
  const retryAfterMs = retryDelay(response.headers, now);
  // Servers quote the credential back ("invalid token Bearer eyJ…", "Incorrect API key
  // provided: sk-…"): hidden here, where the call that sent it is known (DESIGN.md §4).
  const hide = sentHider(call);
  const text = hide(await readPrefix(call, response, bodyBytes, bodyWaitMs));
  // Servers quote the request URL back: a snapshot is redacted like an error. The JSON
  // is read first, from the text as sent: redaction rewrites escaped URLs
  // (`https:\/\/...`) and query values, and the message is what the server wrote.
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    // Not JSON: the message is the text itself.
  }
  // The message once more: JSON may spell a credential with any `\u` escape. A message that
  // is the text (no JSON message) is the body: redacted once (a hostile 64 KiB body of
  // encoded URLs costs tens of milliseconds to redact).
  const body = oneLine(redactText(text));
  let message = hide(errorMessageOf(parsed) ?? text);
  message = message === text ? body : oneLine(redactText(message));
  return {
    retryAfterMs,
    body,
    // Cut between characters, not inside one: half an emoji's surrogate pair logs as U+FFFD.
    serverMessage:
      message.length > MAX_MESSAGE_CHARS
        ? `${message.slice(0, MAX_MESSAGE_CHARS).replace(/[\uD800-\uDBFF]$/, '')}…`
        : message || undefined,
  };
}

/** Whether `text` parses as JSON: the SDKs build their typed errors (`RateLimitError`, A2A's `TaskNotFound`) only from that. */
function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/**
 * The body of a failure response handed to an SDK (`breakwater/a2a`, `breakwater/providers`),
 * which reads it into its error: `snapshot`, the capture snapshot's body (the call's
 * credentials and URLs' secrets hidden, on one line, `capture.bodyBytes` long), which costs
 * nothing more. Hiding and redacting cost about 1 ms per KiB of a hostile body (a body of
 * URLs), not to be spent again on the whole of it. `readWhole` (the body as it came, at most
 * 64 KiB) is read only when the snapshot is not JSON: a snapshot that kept none
 * (`bodyBytes: 0`, an event stream, a 3xx no capture saw) gives the start of the body read
 * as a snapshot's is; one cut inside a JSON body (an error with a stack trace in it) gives
 * the whole body hidden and redacted so, the one case that pays for it, or the SDK's typed
 * error would be lost. A snapshot that is JSON is the whole error already.
 */
export async function sdkFailureBody(
  call: Call,
  snapshot: string | undefined,
  readWhole: () => string | Promise<string>,
): Promise<string> {
  if (snapshot && isJson(snapshot)) return snapshot;
  const whole = await readWhole();
  // A JSON body whole: what readSaid() gives as its body for it, without reading its message too.
  if (isJson(whole)) return oneLine(redactText(hideSent(call, whole)));
  return snapshot || (await readSaid(call, new Response(whole))).body;
}

/**
 * Turns failure responses into {@link HttpStatusError}: by default every status
 * >= 400, or only the listed ones. The error carries the status, the server's
 * requested wait, its message and the start of the body; the body is then cancelled
 * so the connection is freed.
 *
 * @example
 * ```ts
 * const fetch = createFetch({ use: [throwOnStatus()] });
 * try {
 *   await fetch('https://api.example.com/v1/things');
 * } catch (error) {
 *   if (!(error instanceof HttpStatusError)) throw error;
 *   const { status, retryAfterMs, serverMessage } = error; // 503, 7000, 'model overloaded'
 * }
 * ```
 */
export function throwOnStatus(statuses?: readonly number[]): Middleware {
  // Validated as given: spreading first would throw "not iterable" for a number, and
  // split a string into digits, before the message could name the argument.
  const failing =
    statuses === undefined
      ? undefined
      : new Set(validate(statusesSchema, statuses, 'throwOnStatus(statuses)'));
  return async function throwOnStatus(call: Call, next: Next): Promise<Response> {
    const response = await next(call);
    if (failing === undefined ? response.status < 400 : !failing.has(response.status)) return response;
    throw await statusError(call, response);
  };
}

/**
 * The {@link HttpStatusError} for a failure response of a call: reuses the snapshot
 * `captureStatus()` took of it, or reads the body snippet itself, then cancels the
 * body so the connection is freed. `cause` is kept on the error (an adapter passes
 * the SDK error it replaces); `retryable` is judged against `statuses` (retry passes
 * its own).
 */
export async function statusError(
  call: Call,
  response: Response,
  cause?: unknown,
  statuses?: readonly number[],
): Promise<HttpStatusError> {
  const snapshot = (response as Snapshotted)[SNAPSHOT];
  // When the headers arrived: the snapshot's, else now, before the body's start is read (up
  // to bodyWaitMs): the server's wait counts from then (HttpStatusError.at).
  const at = snapshot?.at ?? Date.now();
  const said = snapshot ?? (await readSaid(call, response));
  dropBody(response);
  const { status, headers } = response;
  return new HttpStatusError({
    status,
    // Node's and Bun's fetch keep the reason phrase as the server wrote it; a proxy or an old
    // app server may quote a URL there (HttpStatusError redacts it as it does the body), or
    // the credential (`401 Invalid token Bearer eyJ…`).
    statusText: hideSent(call, response.statusText),
    retryable: isRetryableStatus(status, headers, statuses),
    retryAfterMs: said.retryAfterMs,
    at,
    body: said.body,
    serverMessage: said.serverMessage,
    // Those shown, with the credentials the call sent hidden (a 401's WWW-Authenticate may
    // quote its token); the snapshot's are so already.
    headers: new Headers(snapshot?.headers ?? safeHeaders(headers, sentHider(call))),
    request: requestSummary(call.key, call.method, call.href),
    cause,
  });
}

/**
 * `source` as a `Headers`: a `Response`'s own, a `Headers` as is, or one built from a
 * plain object or pairs, skipping any name or value a `Headers` refuses. `null` (an
 * SDK error's `headers` when no response arrived) means no headers, as `undefined` does,
 * and so does anything that is not an object (a raw header block in a string): typed by
 * an SDK, not checked at run time, it would reach `in`, whose TypeError quotes it.
 */
export function toHeaders(source: Response | HeadersLike | undefined): Headers | undefined {
  if (typeof source !== 'object' || source === null) return undefined;
  if (source instanceof Response) return source.headers;
  if (source instanceof Headers) return source;
  const headers = new Headers();
  const entries =
    Symbol.iterator in source
      ? (source as Iterable<[string, string]>)
      : Object.entries(source as Record<string, string | string[] | undefined>);
  for (const [name, value] of entries) {
    if (value === undefined) continue;
    try {
      headers.append(name, Array.isArray(value) ? value.join(', ') : String(value));
    } catch {
      // A malformed header name or value from an SDK error: skip it, keep the others.
    }
  }
  return headers;
}

/**
 * Builds an {@link HttpStatusError} from an SDK error that lost the status or the
 * headers: pass the status you recovered, what you still have of the response (the
 * `Response`, its headers, or best a `StatusSnapshot` from `captureStatus()`, which
 * also gives the server's message, the body's start and the request), and the SDK's
 * error as `cause`.
 *
 * @example
 * ```ts
 * catch (error) {
 *   const said = connect.last();
 *   if (said) throw wrapHttpError(said.status, said, error);
 * }
 * ```
 */
export function wrapHttpError(
  status: number,
  source: Response | StatusSnapshot | HeadersLike | undefined,
  cause?: unknown,
): HttpStatusError {
  validate(statusSchema, status, 'wrapHttpError(status)');
  const snapshot = isSnapshot(source);
  const headers = snapshot ? new Headers(source.headers) : toHeaders(source);
  // When the headers arrived, for the error's `at`: a snapshot's (spread below), a
  // response's that a capture saw (the SDK has read its body since), else now.
  const at = (source as Snapshotted | undefined)?.[SNAPSHOT]?.at ?? Date.now();
  return new HttpStatusError({
    // A snapshot gives what the server said (its wait read as of its `at`) and the request;
    // other sources, what their headers say.
    ...(snapshot
      ? { ...source, request: requestSummary(source.key, source.method, source.url) }
      : {
          statusText: source instanceof Response ? source.statusText : '',
          retryAfterMs: headers && retryDelay(headers, at),
          at,
        }),
    status,
    retryable: isRetryableStatus(status, headers),
    headers,
    cause,
  });
}

/**
 * Whether `source` is a `captureStatus()` snapshot: a numeric status (a header value
 * never is) and the call's key and method (a `Response` has neither).
 */
function isSnapshot(source: unknown): source is StatusSnapshot {
  const said = source as StatusSnapshot | null | undefined;
  return typeof said?.status === 'number' && typeof said.key === 'string' && typeof said.method === 'string';
}
