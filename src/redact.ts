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
 * Header names whose values are always secret: RFC 9110's `Authorization` and
 * `Proxy-Authorization`, cookies, Anthropic's `x-api-key`, Azure OpenAI's `api-key`,
 * Google Gemini's `x-goog-api-key`. The allowlist in {@link safeHeaders} already drops
 * them from what is shown; their values sent with a call are hidden where a failure
 * body quotes them back (`hideSent()` in status.ts; each cookie value apart too).
 */
export const SECRET_HEADERS: readonly string[] = [
  'authorization',
  'proxy-authorization',
  'cookie',
  'set-cookie',
  'x-api-key',
  'api-key',
  'x-goog-api-key',
];

/**
 * Query and form parameter names whose values are credentials: `key` and `api_key`
 * (Gemini, Maps), `access_token` (RFC 6750 §2.3), `refresh_token` and `client_secret`
 * (RFC 6749 §6, a refresh's form body), `password`, `pwd`, `auth`, OAuth's `code` and
 * `code_verifier`, `client_assertion` and `assertion` (a signed JWT or SAML assertion a
 * client authenticates or is granted a token with: RFC 7521 §4.1, §4.2, RFC 7523 §2),
 * `session`, `jwt`, an AWS presigned URL's `X-Amz-Credential`,
 * `X-Amz-Signature` and `X-Amz-Security-Token`, an Azure SAS's `sig`. Any part of a name
 * counts (`apikey`, `x-goog-api-key`): a harmless name hidden costs a value, a secret one
 * missed shows a credential. In text, {@link isSecretField} also reads the value of a `code`.
 */
export const SECRET_QUERY_NAME: RegExp =
  /key|token|secret|pass|pwd|auth|cred|sig|session|code|jwt|assertion/i;

/**
 * A value that reads as an error or status code: a number of at most three digits
 * (`code=500`, `-1`), a word of up to 19 letters, `_`, `.` and `-`, then up to 5 digits
 * (`invalid_api_key`, `RATE_LIMITED`, `AADSTS70008`, `S256`), or words of one case joined
 * by `_`, digits ending each, of any length (OpenAI's `context_length_exceeded`, Node's
 * `UND_ERR_CONNECT_TIMEOUT`, `ERR_HTTP2_STREAM_ERROR`): a random code of 20 characters or
 * more reads as those once in 10^7 (base64url), and hex or base32 never (no `_`). See
 * {@link isSecretField}. Anchored, each `_` ends a word: linear time.
 */
const ERROR_CODE =
  /^(?:-?\d{1,3}|[a-zA-Z][a-zA-Z_.-]{0,18}\d{0,5}|[a-z]+\d*(?:_[a-z]+\d*)+|[A-Z]+\d*(?:_[A-Z]+\d*)+)$/;

/**
 * Whether a form or JSON field quoted in text, named `name`, holds a credential in `value`:
 * its name is a credential's ({@link SECRET_QUERY_NAME}), but for a `code` in it whose value
 * reads as an error or status code ({@link ERROR_CODE}), and for `tokens` or `token_count` /
 * `TokenCount` in it whose value is all digits: a count of a model's tokens (`max_tokens=4096`,
 * OpenAI's `"total_tokens"`, Anthropic's `"input_tokens"`, Gemini's `"promptTokenCount"`), which
 * a provider's 400 quotes with its limit; no credential is named so. A value that is a URL
 * (`"token_endpoint":"https://as.example/token"`, WWW-Authenticate's `authorization_uri="..."`)
 * is no credential either: {@link redactText} has shown it without its userinfo and query
 * values already, as any URL. `code` is OAuth's authorization code
 * (RFC 6749 §4.1.2: the redirect's query; §4.1.3: the token request's form body), and with
 * a word before it other one-time credentials (`device_code`, RFC 8628 §3.2; an OTP's
 * `mfa_code`); but `code=500`, `status_code=404`, `error_code=E42` and OpenAI's `"code":
 * "invalid_api_key"` say what went wrong. An authorization code does not read as one: RFC
 * 6749 §10.10 asks at least 128 bits of one, which takes 20 characters of A.11's visible
 * ASCII (a random base64url one reads as a word once in about 130 at 20 characters, once in
 * 5,000 at 22, past 24 only as words of one case joined by `_`, once in 10^9); an OTP has 6 digits at least (RFC 4226 §5.3). Told by the value, not a list of
 * harmless names: a name not listed would show a credential.
 */
function isSecretField(name: string, value: string): boolean {
  const counted = /^\d+$/.test(value) ? name.replace(/tokens|token_?count/gi, '') : name;
  return (
    !/^[a-z][\w+.-]*:\/\/\S*$/i.test(value) &&
    SECRET_QUERY_NAME.test(ERROR_CODE.test(value) ? counted.replace(/code/gi, '') : counted)
  );
}

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
 * `x-request-id`, `request-id`, `x-amzn-requestid`, `cf-ray`, `www-authenticate`, and
 * `idempotent-replayed` (a stored answer replayed: the breaker counts it as nothing, also
 * when it arrives as an `HttpStatusError` thrown below the breaker).
 * Anchored alternatives of literals, no nested quantifiers: linear time on any name.
 */
const SAFE_HEADER =
  /^(?:x-|anthropic-)ratelimit-|^(?:content-(?:type|length)|date|retry-after(?:-ms)?|x-should-retry|(?:x-rate-limit|ratelimit)-(?:limit|remaining|reset)|ratelimit(?:-policy)?|(?:x-)?request-id|x-amzn-requestid|cf-ray|www-authenticate|idempotent-replayed)$/;

/** The longest header value kept; longer ones are cut, so a hostile header cannot bloat an error. */
const MAX_HEADER_VALUE_CHARS = 256;

/** Whether a header (any case) may be shown. */
export function isSafeHeader(name: string): boolean {
  return SAFE_HEADER.test(name.toLowerCase());
}

/**
 * The allowlisted subset of `headers`, values cut to a bounded length, passed through `hide`
 * (where the call is known: the credentials it sent, `hideSent()` in status.ts) and redacted
 * as text ({@link redactText}): a server quotes the request back in a kept header too (a
 * 401's `WWW-Authenticate: Bearer error_description="token <it> expired"`, an
 * `x-request-id` echoing the Authorization line, a `resource_metadata` URL's query). A
 * `Headers` gives its names lower-cased (the Fetch standard's iteration), as the allowlist
 * has them: no {@link isSafeHeader} and its `toLowerCase()` per name.
 */
export function safeHeaders(
  headers: Headers | undefined,
  hide: (value: string) => string = String,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of headers || []) {
    if (SAFE_HEADER.test(name)) out[name] = redactText(hide(value.slice(0, MAX_HEADER_VALUE_CHARS)));
  }
  return out;
}

/**
 * The secret some APIs take in the path instead of a header, each by its own shape: a
 * Telegram bot token (`/bot123456789:AAH...`, also `/file/bot.../`), a Slack incoming
 * webhook's secret (`/services/T0000/B0000/XXXX`), a Slack Workflow Builder or webhook
 * trigger's (`/workflows/T0000/A0000/<id>/XXXX`, `/triggers/T0000/<id>/XXXX`), a Discord
 * webhook token (`/webhooks/<id>/<token>`, also `/api/v10/...`), a Zapier catch hook's
 * (`/hooks/catch/<id>/<token>/`), and everything after a Microsoft Teams incoming
 * webhook's `/IncomingWebhook/` (a connector id, a webhook id, and since 2025 a `/V2...`
 * signature). A bot token's `:` may be percent-encoded (`bot${encodeURIComponent(token)}`
 * leaves `bot123%3AAAH...`, which the URL parser keeps; a URL quoted encoded once more
 * has `%253A`). An agent calling them logs the URL with every failure. Named shapes, not a
 * guess from the characters: ids, UUIDs and slugs stay. What precedes the secret is kept:
 * it names the bot or the webhook. A Slack workflow's numeric id that ends the path with
 * its `/` is no secret: so ends a redacted percent-encoded URL read again (its secret,
 * `[redacted]`, is past the characters such a URL is read up to).
 */
const PATH_TOKEN =
  /(\/(?:bot\d+(?::|%(?:25)*3[Aa])|webhooks\/\d+\/|(?:services|workflows)\/T\w+\/[AB]\w+\/(?!\d+\/$)(?:\d+\/)?|triggers\/T\w+\/\d+\/|hooks\/catch\/\d+\/))[^/]+|(\/IncomingWebhook\/).+/g;

/**
 * A URL fit to print: no userinfo, no fragment, and every query parameter kept by
 * name with its value replaced (`?api_key=[redacted]`), so a person can still see
 * which parameters were sent; a URL in its path is redacted too, and a name holding
 * `:`, `/`, `@`, `\` or `%` is shown as `[redacted]`. A token some APIs take in the path
 * (Telegram bots; Slack, Discord, Teams and Zapier webhooks: {@link PATH_TOKEN}) is shown as `[redacted]`.
 * Unparseable input yields a placeholder, never the input.
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
  // of the whole path a level: n^1.5 time. A token in the path goes first.
  // A userinfo `@` percent-encoded (`quote(url, safe=':/')`) is part of the host of a URL
  // whose scheme is not a web one (`postgres://user%40db/`); no host holds one. One after
  // an encoded `?` or `#` is in a query value (`h%3Fe%3Da%40b%26t%3D...`), and one in a URL
  // encoded in the host is gone already.
  const base = `${parsed.protocol}//${redactText(parsed.host + parsed.pathname.replace(PATH_TOKEN, `$1$2${REDACTED}`), false).replace(/^[^%/]*(?:%(?!3F|23)[^%/]*)*%40/i, '')}`;
  return parsed.search === '' ? base : `${base}?${redactQuery(parsed.search)}`;
}

/**
 * The query `search` (`?` optional) with every parameter kept by name and its value
 * shown as `[redacted]`.
 */
function redactQuery(search: string): string {
  // A "name" holding a URL (`?https://u:pw@h/`, a redirect target with no `=`) would show
  // its userinfo: parameter names hold no `:`, `/` or `@`, nor `\` or `%` (one escaped in
  // JSON in JSON, `\\u003A`, or percent-encoded twice, `%253A`, is read once), nor `=`:
  // one is decoded from a `%3D` (`?token%3D...`, Python's `quote(path, safe='/?')`), and
  // what follows it is a value.
  return [...new URLSearchParams(search).keys()]
    .map(
      (name) =>
        `${name === REDACTED || /[:/@\\%=]/.test(name) ? REDACTED : encodeURIComponent(name)}=${REDACTED}`,
    )
    .join('&');
}

/**
 * A URL without scheme and host that a server quotes back (`agent down at
 * /a2a?api_key=...`, `GET /v1/items?token=... failed`, `failed:/a2a?...`): a `/` (or `\/` or
 * `\u002F`, JSON-escaped) at the start of a word (after whitespace, a quote, `(`, `<`, `>`, `=`, or a
 * `:` not starting a `://`), a path, and a query holding a `=`; punctuation that ends a
 * sentence after it (`, then retry`) is kept out of it, as after an absolute URL (`]` and
 * `}` are not: a redacted value ends in one). Prose with a `/` and a `?` but no `=` after
 * it stays as it is. Linear time: a word starts only after a character that ends the word
 * before it (`=` ends a path and the first name, and a query holding one matches; a `:/`
 * ends a path or a name, and any other `:` reads on: `gemini:generateContent`), so a failed
 * match reads no word twice. Only a `:` is looked past, not every character: on
 * JavaScriptCore (Bun) a lookahead at every character took a second for 2 MB.
 */
const RELATIVE_URL =
  /((?:^|[\s"'(<>=]|:(?!\/\/))(?:\\?\/|\\u002[Ff])[^\s"'()<>=?:]*(?::(?!\\?\/|\\u002[Ff])[^\s"'()<>=?:]*)*\?)([^\s"'()<>=:]*(?::(?!\\?\/|\\u002[Ff])[^\s"'()<>=:]*)*=(?:[^\s"'()<>]*[^\s"'()<>,.;:?`])?)/g;

/**
 * A percent-encoded relative URL, or a path holding an encoded query, as a server quotes it
 * (`redirect_uri=%2Fcb%3Ftoken%3D...`; `/cb%3Ftoken%3D...` from Python's `quote()`;
 * `%2Fcb%3Ftoken=...&x=1` from Go's `url.PathEscape`; `https://h:5432/x%3Ftoken%3D...`
 * from `quote(url, safe=':/')`; `/cb?token%3D...` from `quote(path, safe='/?')`): from a `/`
 * or an encoded one, what an encoded URL is made of and `=`, `&`, `:`, `@`, `?` and `$` (Go's
 * `url.PathEscape` leaves it: `%2Fcb%3Ftoken=a$b`) and `\u0026` (Go's `encoding/json`
 * writes a `&` so; its `\` would end the run and show what follows), closing
 * punctuation (`.`, `'`, `)`, `:`, `?`) left to the text.
 * Only a path segment holding a `%` starts one (it need not start at the path's first
 * `/`), and once it has its `%` it always matches, so no text is read twice: linear time.
 * {@link redactEncodedQuery} hides the values of those holding an encoded `?`, or a `?` as it
 * is before an encoded `=`.
 */
const ENCODED_PATH =
  /(?:\/|%(?:25){0,3}2F)(?:[\w.!~*'()+=&:@?$-]|\\u0026)*%(?:[\w.!~*'()%+/=&:@?$-]*(?:\\u0026[\w.!~*'()%+/=&:@?$-]*)*[\w!~*(%+/=&@$-])?/gi;

/**
 * `run` ({@link ENCODED_PATH}) without its fragment and with each query value shown as
 * `[redacted]`: the query starts at the first `?`, encoded or, when an encoded `=` follows
 * it, as it is (`quote(path, safe='/?')`), its parameters are split at `&` and their
 * names at `=`, each as it is or encoded up to four times (an encoder may leave them as they
 * are, or encode them once more than the `/`); a name holding an escape, or a parameter
 * with no `=`, is `[redacted]` too. Prose with a `?` and no encoded `=` after it
 * (`/usr/bin? 100%`) stays as it is. An empty value stays empty: so does the `=`
 * before a `[redacted]` shown, which ends the run when it is redacted again.
 */
function redactEncodedQuery(run: string): string {
  const head = run.split(/%(?:25){0,3}23/i, 1)[0] as string;
  const [path = '', mark = '', ...query] = head.split(/(%(?:25){0,3}3F|\?)/i);
  // A `?` as it is with no encoded `=` after it (in the fragment either: what a second pass
  // would find once it is dropped) ends the run (`/usr/bin?`, `https://h/x%3F?k=[redacted]`
  // redacted already), as if the run were read up to it, and what follows it may hold a run
  // of its own. Each piece holds no `?`, so it comes back here once: no text is read twice.
  return head.includes('?') && !/%(?:25){0,3}3D/i.test(run.slice(head.indexOf('?')))
    ? run.replace(/[^?]+/g, (piece) => piece.replace(ENCODED_PATH, redactEncodedQuery))
    : path + mark + hideValues(query.join(''), /(&|%(?:25){0,3}26)/i, /(=|%(?:25){0,3}3D)/i);
}

/**
 * `query` with each parameter's value shown as `[redacted]`: parameters split at `amp`,
 * names at `equals` (patterns with one group, so the separators are kept as they are
 * written). A name other than letters, digits and `._~-`, or a parameter with no `=`, is
 * `[redacted]` too; an empty value stays empty.
 */
function hideValues(query: string, amp: RegExp, equals: RegExp): string {
  return query
    .split(amp)
    .map((part, i) => {
      const [name = '', sign, ...value] = part.split(equals);
      return i % 2
        ? part
        : sign
          ? (/^[\w.~-]*$/.test(name) ? name : REDACTED) + sign + (value.join('') && REDACTED)
          : part && REDACTED;
    })
    .join('');
}

/**
 * A word: up to whitespace, a quote, a bracket, `<` or `>`. {@link redactEscapedQuery}
 * redacts one holding a `?` or `=` a JSON encoder escaped, which {@link RELATIVE_URL} does
 * not read. Every word, not only those holding an escape: words do not overlap, so each
 * character is read once (a pattern for a word holding one would read a word without one
 * again from each of its characters: n^2).
 */
const ESCAPED_QUERY_WORD = /[^\s"'()<>]+/g;

/**
 * `word` ({@link ESCAPED_QUERY_WORD}) with its query values `[redacted]` when it holds a
 * relative URL: a `/` (or `\/`, `\u002F`) at its start or after a `=` or `:`, then a
 * path, a `?` or `\u003F`, and a query holding a `=` or `\u003D`. Parameters split at `&`
 * or `\u0026`, names at the first `=` or `\u003D`; a name other than letters, digits and
 * `._~-` is `[redacted]` too. Punctuation that ends a sentence stays out of it.
 */
function redactEscapedQuery(word: string): string {
  // Most words hold no escaped `=` or `?`: one test, and they stay as they are.
  const mark = /\\u003[DdFf]/.test(word) && /\?|\\u003[Ff]/.exec(word);
  if (!mark || !/(?:^|[=:])(?:\\?\/|\\u002[Ff])/.test(word.slice(0, mark.index))) return word;
  const from = mark.index + mark[0].length;
  // Trimmed by hand: a `/[,.;:?`]+$/` reads a run of them again from each of its characters.
  let end = word.length;
  while (end > from && ',.;:?`'.includes(word.charAt(end - 1))) end--;
  const query = word.slice(from, end);
  return /=|\\u003[Dd]/.test(query)
    ? word.slice(0, from) + hideValues(query, /(&|\\u0026)/, /(=|\\u003[Dd])/) + word.slice(end)
    : word;
}

/**
 * A `/` in a path quoted in text: as it is, JSON-escaped (`\/`, `\u002F`), or
 * percent-encoded up to four times (`%2F`, `%252F`).
 */
const QUOTED_SLASH = String.raw`(?:\\?\/|\\u002[Ff]|%(?:25){0,3}2[Ff])`;

/**
 * A webhook's or bot's token in a path quoted without its scheme and host (`post to
 * /services/T0000/B0000/XXXX failed`), which {@link PATH_TOKEN} reads only in a URL: a
 * Telegram bot token (`/bot123:AAH...`, its `:` also encoded), a Discord webhook's
 * (`/webhooks/<id>/<token>`, also after `/api/`), a Slack incoming webhook's
 * (`/services/T.../B.../XXXX`, upper-case ids). Without a host to tell, the token must be
 * 16 or more word characters (Slack's is 24, Telegram's 35, Discord's 68): an ordinary
 * path (`/webhooks/123/deliveries`) keeps its last segment. Each match starts at a slash
 * followed by a literal, and no run is read past the next one: linear time.
 */
const RELATIVE_PATH_TOKEN = RegExp(
  `(${QUOTED_SLASH}(?:bot\\d+(?::|%(?:25){0,3}3[Aa])|webhooks${QUOTED_SLASH}\\d+${QUOTED_SLASH}|services${QUOTED_SLASH}T[A-Z\\d]+${QUOTED_SLASH}B[A-Z\\d]+${QUOTED_SLASH}))[\\w-]{16,}`,
  'g',
);

/**
 * A header value `fetch` refuses, quoted in its error: undici's `Headers.append: "<value>"
 * is an invalid header value.`, Deno's `Invalid header value: "<value>"` (Bun names only the
 * header). The value may be a credential with a line break in it (a token read from a CLI's
 * output), and the error goes up the chain as it is: hidden up to the last `"` (a JSON
 * credential holds some). Anywhere in the text: whoever rethrows it may put words before it
 * (`request failed: Headers.append: ...`). One match, linear time: a start is tried only at
 * the literal, the first with a `"` after it matches, and only the one whose own `"` is the
 * text's last can fail after reading on.
 */
const REFUSED_HEADER_VALUE = /((?:Headers\.\w+|[Ii]nvalid header value): ")[\s\S]*(?=")/;

/**
 * A `name=value` pair outside a URL: a form body an HTTP client's error quotes
 * (`grant_type=refresh_token&refresh_token=...&client_secret=...`, what an OAuth
 * refresh sends), a Java map's `toString()` (`{client_secret=...}`), a log line's field.
 * {@link redactText} hides the value of one whose name is a credential's
 * ({@link isSecretField}); the names, and the other values, stay. The name is the word
 * before the `=` (`X-Amz-Credential=` reads `Credential=`); the value runs to a `&`,
 * whitespace, a quote, a bracket, `<` / `>`, or a `\u0026` (a `&` as Go's `encoding/json`
 * writes it), punctuation that ends a sentence (or a `\` escaping the quote that closes a
 * JSON string) left out; an empty one stays. Linear time: a name starts only at a word's
 * start and ends at its `=`, and a value that fails is all such punctuation, holding no word.
 */
const FORM_PAIR = /\b(\w+)=((?:[^\s"'()<>&\\]|\\(?!u0026))*[^\s"'()<>&,.;:?`\\}])/g;

/**
 * The start of a JSON string field quoted in text, up to its value: an error body or message
 * quoting a token answer or request (`{"refresh_token":"...","client_secret":"..."}`,
 * `"access_token": "..."`), also escaped once more (`{\"client_secret\":\"...\"}`: JSON kept
 * as a string and stringified again), or in single quotes (Python's `str()` of a dict:
 * `{'access_token': '...'}`; HCL's `"password" = "..."`); or a quoted value after a word and
 * `=` (a Python repr's `Config(api_key='...')`, logfmt's `password="..."`), whose value
 * {@link FORM_PAIR} cannot read past its quote; or after a word and `:` that start an
 * object's entry or a line (Node's `util.inspect()`, `{ access_token: '...' }`, Swift's
 * `Credentials(token: "...")`, YAML's `password: "..."`). The name is letters, digits, `_` and
 * `-` (`"x-api-key"`) in quotes, else a word. A word and `:` anywhere else are prose (zod's
 * `Unrecognized key: "model"`), and so is a word and `:` before a word not quoted, even
 * where an entry starts: a line saying `token: invalid` or `key: model` would lose the word it
 * is about. A number is read too, after a `:` or `=` (`"api_key": 12345678901234`, inspect()'s
 * `{ password: 12345678 }`): {@link hideJsonFields} hides one of 6 digits or more.
 * {@link hideJsonFields} reads the value. No backreference and no repeated group: JavaScriptCore
 * (Bun) runs a group repeated past some 100,000 times 50 to 100 times slower. A word before a `:`
 * starts only after `{`, `(`, `,`, a line break or the text's start, spaces and tabs
 * between (not line breaks: each line break would read on over those after it): linear time.
 */
const JSON_FIELD =
  /(?:\\?["']([\w-]+)\\{0,3}["']\s*[:=]\s*|\b(\w+)\s*=\s*|(?:^|[{(,\n])[ \t]*(\w+)[ \t]*:[ \t]*)(?:\\{0,3}["']|(-?\d+)\b)/g;

/**
 * `text` with the value of each JSON string field ({@link JSON_FIELD}) that holds a
 * credential ({@link isSecretField}) shown as `[redacted]`, as a form value's is; its name,
 * and an empty value, stay. The value runs to the quote that closes it (the one it opened
 * with), its escapes read, or to the end of the text (a cut body): a password holding a `"`
 * is hidden whole. Fields are also found in a value not hidden (a body kept escaped in a
 * `"data"` string). A number is hidden when it has 6 digits or more under a credential's name, a
 * `code` in it left out: shorter, it is no credential (an OTP has 6, RFC 4226 §5.3), and a
 * number under a code is an error code of any length (JSON-RPC's `-32601`, the Graph API's
 * `"error_subcode": 1487390`); an authorization code is a string (RFC 6749 §A.11). Linear
 * time: values are read by hand, each character six times at most: a value holds no field of
 * its quote escaped as often as it is or less (the quote that opens that field's value closes
 * it), only fields escaped more, up to twice: three depths for each quote. The backslashes
 * before a quote are bounded (3): an unbounded run read from every quote of `\\\\...`
 * would be quadratic.
 */
function hideJsonFields(text: string): string {
  let out = '';
  let done = 0;
  for (const { 0: head, 1: quoted, 2: word = quoted, 3: name = word, 4: number = '', index } of text.matchAll(
    JSON_FIELD,
  )) {
    const from = index + head.length - number.length;
    const quote = head.at(-1);
    // A quote closes the value after an even run of backslashes; escaped once more, after any
    // run but 4k + 3 (4k + 1 is the `\"` that closes it, the `\` left out); escaped twice (JSON
    // in JSON in JSON: `\\\"access_token\\\":\\\"...\\\"`), after any run but 8k + 7 (8k + 3
    // closes it). Opened after 2 backslashes (no encoder writes that), it is read as escaped once.
    const step = head.at(-2) === '\\' ? (head.at(-4) === '\\' ? 8 : 4) : 2;
    const lead = step / 2 - 1;
    let end = from + number.length;
    let run = 0;
    for (; !number && end < text.length && (text[end] !== quote || run % step === step - 1); end++)
      run = text[end] === '\\' ? run + 1 : 0;
    end -= +(run % step === lead) * lead;
    if (
      index >= done &&
      end > from &&
      !/^-?\d{1,5}$/.test(number) &&
      isSecretField((name as string).replace(number && /code/gi, ''), text.slice(from, end))
    ) {
      out += text.slice(done, from) + REDACTED;
      done = end;
    }
  }
  return out + text.slice(done);
}

/**
 * The credential after an authentication scheme quoted in text (`Authorization: Bearer
 * eyJ...`, `Basic dXNl...`, `DPoP <token>`; RFC 9110 §11.4's token68), its name in any case
 * (RFC 9110 §11.1: `BEARER`, `bearer`), also GitHub's `token ghp_...` (and Django REST
 * framework's `Token`) and Discord's `Bot <token>`. {@link redactText} keeps a word of small
 * letters, a capital first at most (`Bearer token required`, `Bearer realm="api"`,
 * `resource_metadata=`, `token expired`): it says what is missing; a base64 Basic
 * credential has capitals inside. It keeps a number of up to 5 digits too (V8's `Unexpected
 * token 1 in JSON`, `bot 42`): shorter than an OTP (RFC 4226 §5.3), it is no credential.
 * A scheme's name is no credential: `Invalid token Bearer <token>` hides the token after
 * `Bearer` (read as `token`'s credential, `Bearer` was kept and the token after it shown).
 * Linear time: a match starts only at the scheme's name.
 */
const SCHEME_CREDENTIAL =
  /(\b(?:bearer|basic|dpop|token|bot)\s+)(?!(?:bearer|basic|dpop|token|bot)\b)([\w~+/.-]+=*)/gi;

/**
 * What {@link redactText} keeps after a scheme's name or a credential's name and `:`: a word
 * of small letters, a capital first at most, or all capitals (`token expired`, `key: model`,
 * `signal: SIGTERM`, `code: ECONNRESET`), or a number of up to 5 digits.
 */
const PLAIN_VALUE = /^(?:[A-Z]?[a-z_-]*|[A-Z_]+|\d{1,5})=*$/;

/**
 * A value not quoted after a word and `:` anywhere in text (`Invalid api_key: sk-live-...`, a
 * header quoted as `x-api-key: ...`, `bad session: 7f3a...`), up to it: {@link redactText}
 * hides it when the word is a credential's name ({@link isSecretField}) and the value is not
 * {@link PLAIN_VALUE}. The value is read ahead, not taken, so a plain one may hold the next
 * name (`error: token: ...`). Linear time: a match starts only at a word's start.
 */
const NAMED_VALUE = /\b(\w+)[ \t]*:[ \t]*(?=([\w~+/.-]+=*))/g;

/** `text` with the values {@link NAMED_VALUE} finds under a credential's name shown as `[redacted]`. */
function hideNamedValues(text: string): string {
  let out = '';
  let done = 0;
  for (const { 0: head, 1: name, 2: value = '', index } of text.matchAll(NAMED_VALUE)) {
    const from = index + head.length;
    if (from >= done && !PLAIN_VALUE.test(value) && isSecretField(name as string, value)) {
      out += text.slice(done, from) + REDACTED;
      done = from + value.length;
    }
  }
  return out + text.slice(done);
}

/** Characters of a URL scheme (RFC 3986 §3.1), scanned back from `://`. */
const SCHEME_CHAR = /^[a-z\d+.-]$/i;

/**
 * `://`, also as a JSON body may write it: `:\/\/` (PHP's `json_encode`, HTML-safe
 * encoders), `:\\\/\\\/` or `:\\/\\/` (JSON quoted in JSON, its `\/` escaped again) or
 * `:\u002F\u002F` (also `:\\u002F\\u002F`, in JSON in JSON), its `:` also as `\u003A`
 * (encoders that escape every non-alphanumeric character; the backslashes before a
 * `\\u003A` are not part of the scheme); or percent-encoded, `%3A%2F%2F` in any case (a
 * `redirect_uri` or callback a server quotes back) or `%3A//` (Python's `quote()` leaves
 * `/`), up to four times (`%253A%252F%252F`: `%` is `%25`; a callback in a redirect in a
 * redirect), each escape to its own depth (`quote(quote(url, safe=':/'))` gives
 * `%3A//`, `url.QueryEscape(url.PathEscape(url))` in Go `%3A%252F%252F`), its `:` also as
 * it is (`:%2F%2F`, Go's `url.PathEscape`), or JSON-escaped before it was encoded,
 * `%3A%5C%2F%5C%2F` (PHP's `urlencode(json_encode(...))`), redacted by {@link redactEncoded}. Deeper is not seen in practice, and a
 * bounded depth keeps the escapes searched for short: a search for a long one in a
 * periodic text (`%252525...`) is quadratic. Linear search: a run of backslashes is read
 * only after a `:` or `\u003A`.
 */
export const SCHEME_SEPARATOR: RegExp =
  /(?::|\\u003[Aa])(?:\\*\/|\\+u002[Ff]){2}|(?::|%(?:25){0,3}3[Aa])(?:(?:%(?:25){0,3}5[Cc])?%(?:25){0,3}2[Ff]|\/){2}/g;

/**
 * What a percent-encoded URL is made of: what `encodeURIComponent` leaves as it is, `%`,
 * `+` (a space in a form), and `\u0026` as the end search in {@link redactText} reads it on:
 * what follows a fragment is read as the URL is read again; any other character ends it.
 */
const ENCODED_RUN = /(?:[\w.!~*'()%+-]|\\u0026)*/y;

/**
 * What a percent-encoded URL whose `//` was left as it is (Python's `quote()`) is made of:
 * also the rest of a URL's delimiters, which such an encoder may leave as they are too
 * (`quote(url, safe='/?=&')`; Go's `url.PathEscape` leaves `$` in a password too), and `\u0026`, a `&` as Go's
 * `encoding/json` writes it (the end search in {@link redactText} reads it on too).
 */
const QUOTED_RUN = /(?:[\w.!~*'()%+/?#=&:@$-]|\\u0026)*/y;

/**
 * The percent-encoded URL `run` (after its `%3A%2F%2F`) without its secrets, still
 * encoded: no userinfo (up to the last `@`, `%40` or encoded once more up to three times,
 * before the first `%2F`, `%3F` or `%23`), and the rest as {@link redactEncodedQuery}
 * shows it. It is not decoded and parsed: a parse
 * would read the URLs encoded once more in its path, level after level (n^1.5).
 *
 * `percent` is what its escapes start with: `%`, or `%25` in a URL encoded twice
 * (`%252F`), and so on. The `/`, `?` and `#` that end the authority count only at that
 * depth: one encoded once more is part of a name or a password (`p%252Fss` in
 * `%3A%2F%2Fu%3Ap%252Fss%40h`, a password holding a `/`); an `@` at any depth before
 * them ends the userinfo (no host holds one), and the whole URL is `[redacted]` when a `?`
 * or `#` at any depth comes before it. A `%` only ever starts an escape, so a plain search for
 * `%252F` finds no `%25252F`.
 */
function redactEncoded(run: string, percent: string): string {
  // The host starts after the last `@`, at any depth (`quote(quote(url, safe=':/'))`
  // encodes it once more than the `:`), before the first `/`, `?` or `#` at the URL's own.
  const [userinfo = ''] =
    /^[\s\S]*%(?:25){0,3}40/i.exec(run.split(RegExp(`${percent}(?:2F|3F|23)`, 'i'), 1)[0] as string) ?? [];
  // A `?` or `#` before that `@`, at any depth, may have opened a query whose value holds
  // the `@` (`h%253Fe%253Da%2540b%2526t%253D...`): what follows it cannot be told apart
  // from a value. A URL encoded once more in the host or path
  // (`%2Fhttps%253A%252F%252Fu%253Apw%2540h`) is one of its own: a level deeper each time,
  // four at most. The query's values are hidden first, so it finds none there.
  if (/%(?:25){0,3}(?:3F|23)/i.test(userinfo)) return REDACTED;
  // A token in the path (a webhook's, a Telegram bot's: {@link PATH_TOKEN}), read with the
  // `/` and `:` of the URL's own depth decoded (none is left as it is here; `%2f` too, from
  // .NET's `HttpUtility.UrlEncode`) and encoded back, upper case, when one is hidden.
  // A `/` JSON-escaped before it was encoded (`%5C%2F`, PHP) is read as one too.
  const slash = `${percent}2F`;
  const colon = `${percent}3A`;
  const shown = redactEncodedQuery(run.slice(userinfo.length));
  const decoded = shown
    .replace(/%(?:25)*[\da-f]{2}/g, (hex) => hex.toUpperCase())
    .replaceAll(`${percent}5C${slash}`, '/')
    .replaceAll(slash, '/')
    .replaceAll(colon, ':');
  const hidden = decoded.replace(PATH_TOKEN, `$1$2${REDACTED}`);
  return redactText(hidden === decoded ? shown : hidden.replaceAll('/', slash).replaceAll(':', colon), false);
}

/**
 * Whether `c` ends a URL: no URL holds it as it is (WHATWG URL percent-encodes it in
 * every part, and so does `encodeURIComponent`). Whitespace and control characters,
 * `"` (closing a JSON string), `<` and `>` (around a tag's attribute). Also where a
 * failure body's read was cut (`withoutCutUrl()` in status.ts).
 */
export function endsUrl(c: string): boolean {
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
 * {@link ESCAPE} in a URL whose separator is escaped twice (`:\\/\\/`, `\\u003A`: JSON
 * quoted in JSON): its `\u` escapes are escaped twice too (`\\u003F`). Read once, a
 * `\\u0040` would hide the end of the userinfo (`admin\\u003Apw\\u0040h` is host
 * `admin` and a path showing the password) and a `\\u003F` the start of the query. `\\/`
 * needs no second read: the parser reads `\` as `/`.
 */
const ESCAPE_TWICE = /\\(?:\\?u[\dA-Fa-f]{4}|[\s\S]?)/g;

/**
 * The character the escape `sequence` ({@link ESCAPE}, {@link ESCAPE_TWICE}) stands for;
 * a backslash at the very end stands for nothing, which ends the URL.
 */
function decodeEscape(sequence: string): string {
  return sequence.length > 2
    ? String.fromCharCode(Number.parseInt(sequence.slice(-4), 16))
    : sequence.charAt(1);
}

/**
 * Where the scheme of the separator at `i` starts, no further back than `floor`; before
 * the backslashes that escape a `\u003A` once more (`https\\u003A`, JSON in JSON).
 */
function schemeStart(text: string, i: number, floor: number): number {
  if (text[i] === '\\') while (i > floor && text[i - 1] === '\\') i--;
  while (i > floor && SCHEME_CHAR.test(text.charAt(i - 1))) i--;
  return i;
}

/**
 * The next `://` (or JSON-escaped `:\/\/`) in `text` at or after `from`: by default right
 * after the separator found last (none is empty), in the same text.
 */
function findSeparator(text: string, from = SCHEME_SEPARATOR.lastIndex): RegExpExecArray | null {
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
 * (`https%3A%2F%2F...`, a quoted `redirect_uri`; also `https%3A//...` from Python's
 * `quote()`, and encoded up to four times, `https%253A%252F%252F...`) is shown still
 * encoded, without its userinfo, fragment and query values (see {@link redactEncoded}).
 * Linear time on any input.
 *
 * `escapes: false` reads no escapes (a path {@link redactUrl} redacts): one level of
 * escapes is read, as a JSON reader reads a string; two in a URL whose separator is
 * escaped twice (JSON quoted in JSON: `https:\\/\\/`, `https\\u003A`), its `\u` escapes
 * escaped twice too.
 */
export function redactText(text: string, escapes = true): string {
  let out = '';
  let done = 0;
  let separator = findSeparator(text, 0);
  while (separator) {
    const from = separator.index + separator[0].length;
    let end = from;
    if (separator[0].includes('%')) {
      // A percent-encoded URL: shown still encoded, without its secrets. It runs to the
      // first character no encoded URL holds, or to a URL encoded in its path (one of its
      // own; in the query it is a value, redacted anyway), trimmed of closing punctuation.
      // Its authority and path are read no further than the next URL: a run of encoded
      // URLs is read once, not once per URL.
      // Its escapes start with `%`, or `%25` when it was encoded twice (`%253A`), and so on
      // (the first escape of its separator tells); `%3A//` (Python's `quote()`) and `:%2F%2F`
      // (Go's `url.PathEscape`) may leave its other delimiters as they are too.
      const percent = (separator[0].match(/%(?:25)*/) as RegExpMatchArray)[0];
      const quoted = /[:/]/.test(separator[0]);
      // A URL encoded once more (`%253A%252F%252F` after a `%3A%2F%2F`) is part of this one:
      // its path, its password (`u%3Ap%253A%252F%252Fss%40h`) or a query value; the query
      // that follows it is this URL's.
      const first = findSeparator(text, from);
      let following = first;
      while (following?.[0].startsWith(`${percent}25`)) {
        following = findSeparator(text);
      }
      const head = text.slice(from, following?.index);
      // Up to its query or fragment, or the first character no such URL holds.
      end =
        from +
        head.search(
          RegExp(`${percent}(?:23|3F)|(?!\\\\u0026)[^\\w.!~*'()%+${quoted ? '/=&:@$' : ''}-]|$`, 'i'),
        );
      if (end < from + head.length) {
        // At the query or fragment (or at a character that ends the URL: read as empty).
        const run = quoted ? QUOTED_RUN : ENCODED_RUN;
        run.lastIndex = end;
        run.test(text);
        end = run.lastIndex;
        // It ends inside a URL's separator when it reads only part of it (the `%3A` of a
        // `%3A//`, the `:` of a `:\/\/`): that URL is one of its own, or its userinfo
        // would be shown. So does one written as it is in a `quote()`d URL's query, which
        // may hold what no quote()d URL holds (`?next=https://u:pw@[::1]/?k=v,w`): `quote()`
        // encodes every `:` after its own. The separators walked here are behind the next scan.
        for (let s = first; s && s.index < end; s = findSeparator(text, s.index + s[0].length)) {
          if (s.index + s[0].length > end || s[0][0] !== '%') end = s.index;
        }
      }
      while (end > from && URL_TRAILER.includes(text.charAt(end - 1))) end--;
      // A `quote()`d URL's delimiters left as they are are shown encoded: one spelling to read.
      out +=
        text.slice(done, from) +
        redactEncoded(
          text
            .slice(from, end)
            .replace(/[/?#=&:@]+/g, (raw) => encodeURIComponent(raw).replaceAll('%', percent)),
          percent,
        );
    } else {
      // A URL as it is, or JSON-escaped: decoded, parsed and shown as redactUrl shows it.
      const start = schemeStart(text, separator.index, done);
      // `\\u003A`: the scheme ends before the backslashes that escape the `\u003A` again.
      const scheme = text.slice(start, separator.index).replace(/\\+$/, '');
      const escapePattern = text.slice(start, from).includes('\\\\') ? ESCAPE_TWICE : ESCAPE;
      // The next URL that ends this one in its path: one encoded there is part of the path,
      // which redactUrl redacts.
      let following = findSeparator(text, from);
      while (following && following[0][0] === '%') {
        following = findSeparator(text);
      }
      const next = following ? schemeStart(text, following.index, from) : text.length;
      // The character before the scheme: a quote that opened the URL.
      const quote = text.charAt(start - 1);
      // Brackets opened in the URL and not closed yet: a closing one that matches none was
      // opened before the URL (`(see https://h/x)`), so it is punctuation; `http://[::1]`,
      // `https://h/Foo_(bar)` and `?k=[redacted]` (redacted again) keep theirs.
      const opened: string[] = [];
      let inQuery = false;
      for (let i = from, length: number; i < text.length; i += length) {
        let c = text.charAt(i);
        length = 1;
        if (escapes && c === '\\') {
          escapePattern.lastIndex = i;
          const [sequence] = escapePattern.exec(text) as RegExpExecArray;
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
        const rest = escapes ? written.replace(escapePattern, decodeEscape) : written;
        const redacted = redactUrl(`${scheme}://${rest}`);
        // A URL written without a path is shown without one: the `/` the parser adds is not in the text.
        out +=
          text.slice(done, start) +
          (/[/\\]/.test(rest) ? redacted : redacted.replace(/^([^/]*\/\/[^/]*)\//, '$1'));
      }
    }
    done = end;
    separator = findSeparator(text, end);
  }
  // Relative URLs last: those in an absolute URL's query are redacted with it already. The
  // encoded ones first: a name they show as `[redacted]` may have held what ends a
  // RELATIVE_URL (`/?'%3D...=`), which a second pass would read on through.
  return hideNamedValues(
    hideJsonFields(out + text.slice(done))
      .replace(ENCODED_PATH, redactEncodedQuery)
      .replace(RELATIVE_URL, (_, head: string, query: string) => head + redactQuery(query))
      .replace(ESCAPED_QUERY_WORD, redactEscapedQuery)
      .replace(RELATIVE_PATH_TOKEN, `$1${REDACTED}`)
      .replace(REFUSED_HEADER_VALUE, `$1${REDACTED}`)
      .replace(SCHEME_CREDENTIAL, (said, scheme: string, credential: string) =>
        PLAIN_VALUE.test(credential) ? said : scheme + REDACTED,
      )
      .replace(FORM_PAIR, (pair, name: string, value: string) =>
        isSecretField(name, value) ? `${name}=${REDACTED}` : pair,
      ),
  );
}
