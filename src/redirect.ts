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

/** The statuses fetch follows as redirects (Fetch standard, "redirect status"). */
const REDIRECT_STATUSES = [301, 302, 303, 307, 308];
/**
 * What fetch drops on a redirect to another origin: the Fetch standard names
 * Authorization; Node (undici), Deno and Bun drop Cookie and Proxy-Authorization too.
 */
const CROSS_ORIGIN_HEADERS = ['authorization', 'cookie', 'proxy-authorization'];
/** What describes a body, dropped with it when a redirect makes a GET (Fetch standard, "request-body-header name"). */
const BODY_HEADERS = ['content-encoding', 'content-language', 'content-location', 'content-type'];
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
 * A redirect it cannot follow (a `Location` that does not parse, a one-shot body to send
 * again, more than {@link MAX_REDIRECTS}) is returned as is for `auth()` (which names its
 * headers, `named`: fetch would carry a token in `x-api-key` to any host the API redirects
 * to, a storage or CDN host); without `named` (the chain's end) it rejects, as fetch does.
 */
export async function follow(call: Call, next: Next, named?: Set<string>): Promise<Response> {
  let response = await next(call);
  let at = call;
  let foreign = false;
  let ran = false;
  for (let hops = 0; ; hops++) {
    const { status } = response;
    const location = REDIRECT_STATUSES.includes(status) && response.headers.get('location');
    if (!location) break;
    let url: URL | undefined;
    try {
      // Headers gives a value one character per byte; fetch reads a Location's bytes as
      // UTF-8 (Node, Bun, browsers), so a raw /café goes to /caf%C3%A9, not /caf%C3%83%C2%A9.
      url = new URL(new TextDecoder().decode(Uint8Array.from(location, (c) => c.charCodeAt(0))), at.url);
    } catch {}
    let { method } = at;
    let body = at.body ?? null;
    // After `auth()` stamped its header, the call's init holds a Headers of its own; without
    // one, a Request's (fetch's init replaces them whole). A URL string has none.
    const headers = new Headers(at.init?.headers ?? (at.input as Request).headers);
    // 303 (but for GET and HEAD), and 301 / 302 after a POST, go on as a GET without a
    // body; others resend method and body (Fetch standard, HTTP-redirect fetch).
    const get = status === 303 ? method !== 'GET' && method !== 'HEAD' : status < 303 && method === 'POST';
    if (!url || hops === MAX_REDIRECTS || (!get && hasOneShotBody(at))) {
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
      ran = true;
      for (const name of BODY_HEADERS) headers.delete(name);
    }
    // Once dropped, a credential stays off every later hop, back on its origin too.
    if (url.origin !== at.url.origin) {
      for (const name of [...CROSS_ORIGIN_HEADERS, ...(named ?? [])]) headers.delete(name);
      foreign = true;
    }
    dropBody(response);
    // Fetch fails a redirect to any scheme but http(s) (Fetch standard, HTTP-redirect
    // fetch): fetch() itself would read a data: URL, and on Deno and Bun a file: one (a
    // local file). Any other scheme starting so, fetch rejects.
    if (!url.protocol.startsWith('http')) throw new TypeError(`redirect to ${url.protocol}`);
    // `redirect: 'manual'` comes with the init.
    const hop = new Call(
      url,
      { ...at.init, method, body, headers, signal: at.signal ?? null },
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
  return at === call ? response : marked(response, foreign || (ran ? false : undefined));
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
