/**
 * @module
 * Redaction for everything breakwater shows a person: error messages, snapshots,
 * events and `JSON.stringify(error)`. Credentials travel in headers (Authorization,
 * cookies, API keys), in URL userinfo and in query strings (`?api_key=`), so URLs
 * lose their userinfo and query values, and headers pass through an allowlist.
 */

/** What a dropped value is shown as. */
export const REDACTED = '[redacted]';

/**
 * Header names whose values are always secret. The allowlist in {@link safeHeaders}
 * already drops them; this list exists so tests (and users) can name them.
 */
export const SECRET_HEADERS: readonly string[] = [
  'authorization',
  'proxy-authorization',
  'cookie',
  'set-cookie',
  'x-api-key',
  'api-key',
];

/**
 * Headers worth keeping on an error or a snapshot: they explain the failure
 * (timing, rate limits, retry hints, content type) or identify the request for the
 * provider's support (request ids). Everything else is dropped: an allowlist cannot
 * leak a secret header a provider invents tomorrow; a denylist can.
 *
 * Lower-case names: the provider rate-limit families (OpenAI's `x-ratelimit-*`,
 * Anthropic's `anthropic-ratelimit-*`) are kept whole by prefix; every other name must
 * match exactly: `content-type`, `content-length`, `date`, `retry-after`,
 * `retry-after-ms`, `x-should-retry`, `ratelimit`, `ratelimit-policy`,
 * `ratelimit-limit` / `-remaining` / `-reset` (also with `x-rate-limit-`),
 * `x-request-id`, `request-id`, `x-amzn-requestid`, `cf-ray`, `www-authenticate`.
 * Anchored alternatives of literals, no nested quantifiers: linear time on any name.
 */
const SAFE_HEADER =
  /^(?:x-|anthropic-)ratelimit-|^(?:content-(?:type|length)|date|retry-after(?:-ms)?|x-should-retry|ratelimit(?:-policy|-limit|-remaining|-reset)?|x-rate-limit-(?:limit|remaining|reset)|(?:x-)?request-id|x-amzn-requestid|cf-ray|www-authenticate)$/;

/** The longest header value kept; longer ones are cut, so a hostile header cannot bloat an error. */
const MAX_HEADER_VALUE_CHARS = 256;

/** Whether a header (any case) may be shown. */
export function isSafeHeader(name: string): boolean {
  return SAFE_HEADER.test(name.toLowerCase());
}

/** The allowlisted subset of `headers`, names lower-cased, values cut to a bounded length. */
export function safeHeaders(headers: Headers | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!headers) return out;
  for (const [name, value] of headers) {
    if (isSafeHeader(name)) out[name] = value.slice(0, MAX_HEADER_VALUE_CHARS);
  }
  return out;
}

/**
 * A URL fit to print: no userinfo, no fragment, and every query parameter kept by
 * name with its value replaced (`?api_key=[redacted]`), so a person can still see
 * which parameters were sent. Unparseable input yields a placeholder, never the input.
 */
export function redactUrl(url: string | URL): string {
  let parsed: URL;
  try {
    // A URL object is parsed again from its href: the same URL, and one path for both.
    parsed = new URL(url);
  } catch {
    return '(unparseable URL)';
  }
  const base = `${parsed.protocol}//${parsed.host}${parsed.pathname}`;
  if (parsed.search === '') return base;
  const names = [...parsed.searchParams.keys()].map((name) => `${encodeURIComponent(name)}=${REDACTED}`);
  return `${base}?${names.join('&')}`;
}

/** Characters of a URL scheme (RFC 3986 §3.1), scanned back from `://`. */
const SCHEME_CHAR = /^[A-Za-z0-9+.-]$/;

/**
 * Punctuation that ends a sentence or closes a bracket around a URL in prose: kept, not
 * parsed. A closing bracket only when it was opened before the URL (`(see https://h/x)`).
 */
const URL_TRAILER = ')]}>,;:.\'"';

function redactWord(word: string): string {
  const sep = word.indexOf('://');
  let start = sep;
  while (start > 0 && SCHEME_CHAR.test(word.charAt(start - 1))) start--;
  // Brackets opened in the URL and not closed yet: a closing one that matches none was
  // opened before the URL, so it is punctuation; `http://[::1]`, `https://h/Foo_(bar)`
  // and `?k=[redacted]` (redacted again: an error redacts what its snapshot redacted) keep theirs.
  const opened: string[] = [];
  let end = sep + 3;
  for (let i = end; i < word.length; i++) {
    const c = word.charAt(i);
    const closes = ')]}'.includes(c) && opened.at(-1) === '([{'.charAt(')]}'.indexOf(c));
    if (closes) opened.pop();
    else if ('([{'.includes(c)) opened.push(c);
    if (!URL_TRAILER.includes(c) || closes) end = i + 1;
  }
  const redacted = redactUrl(word.slice(start, end));
  // A URL written without a path is shown without one: the `/` the parser adds is not in the text.
  const shown = /[/\\]/.test(word.slice(sep + 3, end))
    ? redacted
    : redacted.replace(/^([^/]*\/\/[^/]*)\//, '$1');
  return `${word.slice(0, start)}${shown}${word.slice(end)}`;
}

/**
 * `text` with every URL in it redacted (see {@link redactUrl}), for messages this
 * library did not write but shows: an SDK's error (the A2A card resolver names the
 * card URL, query and all) or a runtime's (Deno names the request URL). A URL is any
 * whitespace-separated word containing `://`, so the scan is linear; brackets and
 * punctuation around it are kept.
 */
export function redactText(text: string): string {
  if (!text.includes('://')) return text;
  return text
    .split(/(\s+)/)
    .map((word) => (word.includes('://') ? redactWord(word) : word))
    .join('');
}
