/**
 * @module
 * Following redirects as fetch does, one hop at a time, each hop a call of its own: for
 * `auth()` (a token in a header fetch would carry to another origin) and for the end of
 * the chain, where the runtime's own following hides which hop failed (Bun's refusal names
 * the request's URL; Node's and Deno's name a hop within the origin by the request's own
 * address): see src/chain.ts, send().
 */

import { Call, CREDENTIAL_HEADER, dropBody, hasOneShotBody, type Next } from './call.ts';
import { MAX_REDIRECTS } from './limits.ts';
import { SNAPSHOT, type Snapshotted } from './status.ts';

/** The statuses fetch follows as redirects (Fetch standard, "redirect status"): 301, 302, 303, 307, 308. */
const REDIRECT_STATUS = /^30[12378]$/;
/**
 * What fetch drops on a redirect to another origin: the Fetch standard names
 * Authorization; Node (undici), Deno and Bun drop Cookie and Proxy-Authorization too.
 */
const CROSS_ORIGIN_HEADERS = ['authorization', 'cookie', 'proxy-authorization'];
/** What describes a body, dropped with it when a redirect makes a GET (Fetch standard, "request-body-header name"). */
const BODY_HEADERS = ['content-encoding', 'content-language', 'content-location', 'content-type'];
/**
 * The most bytes of a `Request`'s own body {@link follow} keeps to send it again after a 307
 * or 308: a JSON call or a form is far below it; a larger body (a relayed upload) is sent once,
 * and its 307 fails as fetch fails one whose body is a stream. Bounds what one call holds.
 */
const MAX_KEPT_BYTES = 1e6;
/** The bag of a request {@link follow} sends to follow a redirect holds this: `auth()`s below pass it on as is. */
export const REDIRECTED: unique symbol = Symbol();
/**
 * Responses {@link follow} got after following a redirect: `true` from a request it had
 * taken the credentials off (another origin a redirect led to, or one after it), whose 401
 * says nothing about the token, so `auth()` neither refreshes for it (a refresh spends a
 * rotating refresh token) nor resends; `false` from a request a redirect turned into a GET,
 * after one that may have run; undefined otherwise (a 307 or 308 within the origin moved
 * the request, which did not run). They say `redirected`, as fetch's own do.
 */
export const FOLLOWED: WeakMap<Response, boolean | undefined> = new WeakMap();
/**
 * Where an answer {@link marked} rebuilt holds the one it was built from: Node's fetch
 * cancels the body of a Response it gave once that Response is collected unread, and the
 * rebuilt one shares that body (read after a garbage collection: "Body has already been read").
 */
const ORIGINAL = Symbol();

/**
 * Sends `call` (its `redirect` set to `'manual'`) and follows the redirects it gets as
 * fetch would, each through `next`: within the origin with every header; to another
 * origin, and on from there, without {@link CROSS_ORIGIN_HEADERS} nor the credential
 * headers `named`. 303, and 301 / 302 after a POST, go on as a GET without a body.
 *
 * A `Request`'s own body is a stream to JS, though fetch sends one made from text, bytes, a
 * Blob or a form again from that "source"; no Web-standard means tells them apart. So a clone
 * of it is read as the request goes, up to {@link MAX_KEPT_BYTES}, and a 307 or 308 sends that
 * copy: a short stream goes again too, where fetch would fail (its bytes are the ones sent). An
 * init's stream body, or a `Request`'s past the cap, is not sent again: a 307 or 308 for it is
 * a redirect it cannot follow. A copy still being read when a 307 comes (the server answered
 * before reading the body) is waited for, until the body's source ends, errs or passes the cap.
 *
 * A redirect it cannot follow (a `Location` that does not parse, a one-shot body to send
 * again, more than {@link MAX_REDIRECTS}) is returned as is for `auth()` (which names its
 * headers, `named`: fetch would carry a token in `x-api-key` to any host the API redirects
 * to, a storage or CDN host); without `named` (the chain's end) it rejects, as fetch does.
 */
export async function follow(call: Call, next: Next, named?: Set<string>): Promise<Response> {
  // A string's `body` is undefined; an init's body is sent instead of the Request's. The clone
  // is made before `next` sends the request, which takes its body; read past the cap, it is
  // cancelled (the loop's return). The headers are kept as given: Bun's fetch takes a form's
  // Content-Type (its boundary) off the Request it sends, and off a clone being read.
  const input = call.input as Request;
  const given = !call.init?.body && input.body && new Headers(input.headers);
  const kept =
    given &&
    (async (copy = input.clone(), chunks: BlobPart[] = [], bytes = 0) => {
      for await (const chunk of copy.body as unknown as AsyncIterable<Uint8Array<ArrayBuffer>>) {
        bytes += chunk.length;
        if (bytes > MAX_KEPT_BYTES) return;
        chunks.push(chunk);
      }
      return new Blob(chunks);
    })().catch(() => {});
  let response = await next(call);
  let at = call;
  /** Its {@link FOLLOWED} record: true once a hop went to another origin, false once one became a GET. */
  let followed: boolean | undefined;
  for (let hops = 0; ; hops++) {
    const { status } = response;
    const location = REDIRECT_STATUS.test(status as unknown as string) && response.headers.get('location');
    if (!location) break;
    let url: URL | undefined;
    try {
      // Headers gives a value one character per byte; fetch reads a Location's bytes as
      // UTF-8 (Node, Bun, browsers), so a raw /café goes to /caf%C3%A9, not /caf%C3%83%C2%A9.
      url = new URL(new TextDecoder().decode(Uint8Array.from(location, (c) => c.charCodeAt(0))), at.url);
    } catch {}
    let { method, body } = at;
    // After `auth()` stamped its header, the call's init holds a Headers of its own; without
    // one, a Request's (fetch's init replaces them whole). A URL string has none.
    const headers = new Headers(at.init?.headers ?? (given || (at.input as Request).headers));
    // 303 (but for GET and HEAD), and 301 / 302 after a POST, go on as a GET without a
    // body; others resend method and body (Fetch standard, HTTP-redirect fetch).
    const get = status === 303 ? method !== 'GET' && method !== 'HEAD' : status < 303 && method === 'POST';
    // Only the call's own body can be one-shot (a hop's is the one kept, or none).
    // biome-ignore lint/suspicious/noAssignInExpressions: the kept copy is awaited only when needed; 7 B gzip less.
    if (!url || hops === MAX_REDIRECTS || (!get && hasOneShotBody(at) && !(body = (await kept) as Blob))) {
      if (named) break;
      // A stream body a 307 / 308 needs again: Bun's own fetch rejects ("cannot be
      // replayed"), as the Fetch standard says; so do Node's and Deno's.
      dropBody(response);
      throw new TypeError(
        `redirect ${status} not followed: ${url ? (hops < MAX_REDIRECTS ? 'a stream body goes once' : 'too many redirects') : 'bad Location'}`,
      );
    }
    if (get) {
      method = 'GET';
      body = null;
      followed ||= false;
      for (const name of BODY_HEADERS) headers.delete(name);
    }
    // Once dropped, a credential stays off every later hop, back on its origin too.
    if (url.origin !== at.url.origin) {
      for (const name of [...CROSS_ORIGIN_HEADERS, ...(named ?? [])]) headers.delete(name);
      followed = true;
    }
    dropBody(response);
    // Fetch fails a redirect to any scheme but http(s) (Fetch standard, HTTP-redirect
    // fetch): fetch() itself would read a data: URL, and on Deno and Bun a file: one (a
    // local file). Any other scheme starting so, fetch rejects.
    if (!url.protocol.startsWith('http')) throw new TypeError(`redirect to ${url.protocol}`);
    // `redirect: 'manual'` comes with the init (auth()'s), or from `next` (the chain's end).
    const hop = new Call(
      url,
      { ...at.init, method, body, headers, signal: at.signal } as RequestInit,
      call.key,
      call.onEvent,
    );
    hop.deadline = call.deadline;
    hop.totalMs = call.totalMs;
    hop.bag.set(REDIRECTED, 1).set(CREDENTIAL_HEADER, named);
    response = await next(hop);
    at = hop;
  }
  // Followed here, the answer says so as fetch's own would: a layer above judges a resend
  // on it (retry(): a POST answered 303 ran, whatever the GET after it was answered).
  return at === call ? response : marked(response, followed);
}

/**
 * `response`, which {@link follow} got after a redirect, saying `redirected: true` as fetch's
 * own would, and so do its clones: `clone()` makes a new Response, which reads its own
 * internals (`false`), and a layer above may hand up a clone (a logger keeping the original).
 * A response a layer below froze, or gave a read-only `redirected` of its own, is rebuilt
 * around its body (status, reason phrase, URL and capture snapshot kept), else retry() above
 * would resend a POST whose 303 ran. `followed`: its {@link FOLLOWED} record; `from`: the
 * response a clone is of, whose status, reason phrase and URL it keeps (a rebuilt one's own).
 */
function marked(response: Response, followed: boolean | undefined, from: Response = response): Response {
  const { clone } = response;
  let out = response;
  const props: PropertyDescriptorMap = {
    redirected: { value: true },
    status: { value: from.status },
    statusText: { value: from.statusText },
    url: { value: from.url },
    clone: { value: (): Response => marked(clone.call(out), followed, out) },
  };
  try {
    Object.defineProperties(response, props);
  } catch {
    try {
      out = Object.defineProperties(
        new Response(response.body, { status: Math.min(response.status, 599), headers: response.headers }),
        {
          ...props,
          [SNAPSHOT]: { value: (response as Snapshotted)[SNAPSHOT] },
          [ORIGINAL]: { value: response },
        },
      );
    } catch {}
  }
  FOLLOWED.set(out, followed);
  return out;
}
