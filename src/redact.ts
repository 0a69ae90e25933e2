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
 * which parameters were sent; a URL in its path is redacted too, and a name holding
 * `:`, `/` or `@` is shown as `[redacted]`. Unparseable input yields a placeholder,
 * never the input.
 */
export function redactUrl(url: string | URL): string {
  let parsed: URL;
  try {
    // A URL object is parsed again from its href: the same URL, and one path for both.
    parsed = new URL(url);
  } catch {
    return '(unparseable URL)';
  }
  // A URL in the path (`https://proxy/fetch/https://u:pw@h/`) is redacted on its own, and
  // so is one percent-encoded in an opaque host (`foo://(https%3A%2F%2F...`). Its
  // escapes are not read: a URL from redactText was decoded there already, and each path
  // decoded again could hide one more URL behind one more escape (`\u005Cu003A`), a scan
  // of the whole path a level: n^1.5 time.
  const base = `${parsed.protocol}//${redactText(parsed.host + parsed.pathname, false)}`;
  if (parsed.search === '') return base;
  // A "name" holding a URL (`?https://u:pw@h/`, a redirect target with no `=`) would show
  // its userinfo: parameter names hold no `:`, `/` or `@`.
  const names = [...parsed.searchParams.keys()].map(
    (name) => `${name === REDACTED || /[:/@]/.test(name) ? REDACTED : encodeURIComponent(name)}=${REDACTED}`,
  );
  return `${base}?${names.join('&')}`;
}

/** Characters of a URL scheme (RFC 3986 §3.1), scanned back from `://`. */
const SCHEME_CHAR = /^[a-z\d+.-]$/i;

/**
 * `://`, also as a JSON body may write it: `:\/\/` (PHP's `json_encode`, HTML-safe
 * encoders), `:\\\/\\\/` or `:\\/\\/` (JSON quoted in JSON, its `\/` escaped again) or
 * `:\u002F\u002F`, its `:` also as `\u003A` (encoders that escape every non-alphanumeric
 * character); or percent-encoded, `%3A%2F%2F` in any case (a `redirect_uri` or callback
 * a server quotes back), redacted by {@link redactEncoded}. Linear search: a run of
 * backslashes is read only after a `:` or `\u003A`.
 */
export const SCHEME_SEPARATOR: RegExp = /(?::|\\u003[Aa])(?:\\*\/|\\u002[Ff]){2}|%3[Aa]%2[Ff]%2[Ff]/g;

/**
 * What a percent-encoded URL is made of: what `encodeURIComponent` leaves as it is, `%`,
 * and `+` (a space in a form); any other character ends it.
 */
const ENCODED_RUN = /[\w.!~*'()%+-]*/y;

/**
 * The percent-encoded URL `run` (after its `%3A%2F%2F`) without its secrets, still
 * encoded: no userinfo (up to the last `%40` before the first `%2F`, `%3F` or `%23`), no
 * fragment, and each query value (`%3D` up to `%26`) shown as `[redacted]`; a name
 * holding an escape, or a parameter with no `%3D`, likewise. It is not decoded and parsed:
 * a parse would read the URLs encoded once more in its path, level after level (n^1.5).
 * An empty value stays empty: so does the `%3D` before a `[redacted]` shown, which ends
 * the run when it is redacted again.
 */
function redactEncoded(run: string): string {
  // The authority ends at the first `/`, `?` or `#`; the host starts after its last `@`.
  const authorityEnd = run.search(/%(?:2[3Ff]|3[Ff])|$/);
  const at = run.lastIndexOf('%40', authorityEnd - 3);
  const hash = run.indexOf('%23', authorityEnd);
  const rest = run.slice(authorityEnd, hash < 0 ? run.length : hash);
  const query = rest.search(/%3F/i) + 3;
  return (
    run.slice(at < 0 ? 0 : at + 3, authorityEnd) +
    (query < 3
      ? rest
      : rest.slice(0, query) +
        rest
          .slice(query)
          .split('%26')
          .map((part) => {
            const equals = part.search(/%3D/i) + 3;
            if (equals < 3) return part && REDACTED;
            const name = part.slice(0, equals - 3);
            return (
              (/^[\w.~-]*$/.test(name) ? name : REDACTED) +
              part.slice(equals - 3, equals) +
              (part.length > equals ? REDACTED : '')
            );
          })
          .join('%26'))
  );
}

/**
 * Whether `c` ends a URL: no URL holds it as it is (WHATWG URL percent-encodes it in
 * every part, and so does `encodeURIComponent`). Whitespace and control characters,
 * `"` (closing a JSON string), `<` and `>` (around a tag's attribute).
 */
function endsUrl(c: string): boolean {
  // '' (the end of the text) sorts before ' ' too.
  return c < ' ' || /[\s"<>\x7f]/.test(c);
}

/**
 * Punctuation that ends a sentence or closes a bracket or quote around a URL in prose:
 * kept out of the URL when nothing of the URL follows it. A closing bracket only when
 * it was opened before the URL (`(see https://h/x)`, not `http://[::1]` or
 * `https://h/Foo_(bar)`). `)` and `,` end nothing in the middle of a URL: a query value
 * may hold them (`encodeURIComponent` leaves `(`, `)` and `'` as they are).
 */
const URL_TRAILER = ")]},;:.?'`";

/**
 * A JSON escape: a URL quoted in a JSON body is escaped like the rest of the string
 * (`\/`, `\u0026`, `\"` closing the string). A backslash and any other character stand
 * for that character: `\n` is not read as a line break, since WHATWG URL leaves a
 * backslash in a query as it is (a hand-built `?pw=a\nb`). It matches at every
 * backslash, so one pattern both reads the escape at a known index and decodes a URL.
 */
const ESCAPE = /\\(?:u[\dA-Fa-f]{4}|[\s\S]?)/g;

/**
 * The character the escape `sequence` ({@link ESCAPE}) stands for; a backslash at the
 * very end stands for nothing, which ends the URL.
 */
function decodeEscape(sequence: string): string {
  return sequence.length > 2
    ? String.fromCharCode(Number.parseInt(sequence.slice(2), 16))
    : sequence.charAt(1);
}

/** Where the scheme ending at `i` starts, no further back than `floor`. */
function schemeStart(text: string, i: number, floor: number): number {
  while (i > floor && SCHEME_CHAR.test(text.charAt(i - 1))) i--;
  return i;
}

/** The next `://` (or JSON-escaped `:\/\/`) in `text` at or after `from`. */
function findSeparator(text: string, from: number): RegExpExecArray | null {
  SCHEME_SEPARATOR.lastIndex = from;
  return SCHEME_SEPARATOR.exec(text);
}

/**
 * `text` with every URL in it redacted (see {@link redactUrl}), for messages this
 * library did not write but shows: an SDK's error (the A2A card resolver names the
 * card URL, query and all), a runtime's (Deno names the request URL) or a server's
 * error body. A URL starts at a scheme and `://` (also JSON-escaped: `:\/\/`, `\u003A//`,
 * with its escapes decoded) and runs to whitespace, `"`, `<` or `>`, to the quote that opened it
 * (once in its query), or to another URL in its path; brackets and punctuation around
 * it are kept, and so is the text after it
 * (`{"url":"https://h/x?k=[redacted]","msg":"quota"}`). A percent-encoded URL
 * (`https%3A%2F%2F...`, a quoted `redirect_uri`) is shown still encoded, without its
 * userinfo, fragment and query values (see {@link redactEncoded}). Linear time on any input.
 *
 * `escapes: false` reads no escapes (a path {@link redactUrl} redacts): one level of
 * escapes is read, as a JSON reader reads a string.
 */
export function redactText(text: string, escapes = true): string {
  let out = '';
  let done = 0;
  let separator = findSeparator(text, 0);
  while (separator) {
    const from = separator.index + separator[0].length;
    if (separator[0].charAt(0) === '%') {
      // A percent-encoded URL: shown still encoded, without its secrets. It runs to the
      // first character no encoded URL holds, or to a URL encoded in its path (one of its
      // own; in the query it is a value, redacted anyway), trimmed of closing punctuation.
      // Its authority and path are read no further than the next URL: a run of encoded
      // URLs is read once, not once per URL.
      const following = findSeparator(text, from);
      const head = text.slice(from, following?.index);
      let end = from + head.search(/[^\w.!~*'()%+-]|%(?:23|3[Ff])|$/);
      if (head.charAt(end - from) === '%') {
        ENCODED_RUN.lastIndex = end;
        ENCODED_RUN.test(text);
        end = ENCODED_RUN.lastIndex;
      }
      while (end > from && URL_TRAILER.includes(text.charAt(end - 1))) end--;
      out += text.slice(done, from) + redactEncoded(text.slice(from, end));
      done = end;
      separator = findSeparator(text, end);
      continue;
    }
    const start = schemeStart(text, separator.index, done);
    // The next URL that ends this one in its path: one encoded there is part of the path,
    // which redactUrl redacts.
    let following = findSeparator(text, from);
    while (following && following[0].charAt(0) === '%') {
      following = findSeparator(text, following.index + following[0].length);
    }
    const next = following ? schemeStart(text, following.index, from) : text.length;
    // The character before the scheme: a quote that opened the URL.
    const quote = text.charAt(start - 1);
    // Brackets opened in the URL and not closed yet: a closing one that matches none was
    // opened before the URL (`(see https://h/x)`), so it is punctuation; `http://[::1]`,
    // `https://h/Foo_(bar)` and `?k=[redacted]` (redacted again) keep theirs.
    const opened: string[] = [];
    let inQuery = false;
    let end = from;
    for (let i = from, length: number; i < text.length; i += length) {
      let c = text.charAt(i);
      length = 1;
      if (escapes && c === '\\') {
        ESCAPE.lastIndex = i;
        const [sequence] = ESCAPE.exec(text) as RegExpExecArray;
        length = sequence.length;
        c = decodeEscape(sequence);
      }
      // A quote that opened the URL closes it in the query (WHATWG URL encodes `'` there,
      // never in the userinfo or the path: `'https://o'brien:pw@h/it's?k=v'`) when what
      // follows cannot go on in a URL: the end, a space, punctuation (`','msg':`), not `'s`.
      const after = text.charAt(i + length);
      const closesQuote =
        c === quote &&
        inQuery &&
        // ('' before a URL that starts the text: c is '' only past its end, which ends the URL anyway.)
        "'`".includes(quote) &&
        (endsUrl(after) || URL_TRAILER.includes(after));
      // A URL in the path (`https://proxy/fetch/https://u:pw@h/`) is one of its own, or its
      // userinfo would be shown as path; in the query or fragment it is redacted anyway.
      if (endsUrl(c) || closesQuote || (i >= next && !inQuery)) break;
      // Whether c closes the last bracket opened (for any c but `)]}`, charAt(-1) is '': on no stack).
      const closes = opened.at(-1) === '([{'.charAt(')]}'.indexOf(c));
      if (closes) opened.pop();
      else if ('([{'.includes(c)) opened.push(c);
      else if ('?#'.includes(c)) inQuery = true;
      if (!URL_TRAILER.includes(c) || closes) end = i + length;
    }
    if (end === from) {
      // Nothing after `://` (`http://http://...`): nothing to hide, and no parse to pay for.
      out += text.slice(done, end);
    } else {
      const written = text.slice(from, end);
      const rest = escapes ? written.replace(ESCAPE, decodeEscape) : written;
      const redacted = redactUrl(`${text.slice(start, separator.index)}://${rest}`);
      // A URL written without a path is shown without one: the `/` the parser adds is not in the text.
      out +=
        text.slice(done, start) +
        (/[/\\]/.test(rest) ? redacted : redacted.replace(/^([^/]*\/\/[^/]*)\//, '$1'));
    }
    done = end;
    separator = findSeparator(text, end);
  }
  return out + text.slice(done);
}
