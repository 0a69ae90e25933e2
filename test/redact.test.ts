import assert from 'node:assert/strict';
import process from 'node:process';
import { test } from 'node:test';
import { inspect } from 'node:util';
import fc from 'fast-check';
import { captureStatus, type StatusSnapshot } from '../src/capture.ts';
import { createFetch } from '../src/chain.ts';
import { HttpStatusError, NetworkError } from '../src/errors.ts';
import type { BreakwaterEvent } from '../src/events.ts';
import { isSafeHeader, REDACTED, redactText, redactUrl, SECRET_HEADERS, safeHeaders } from '../src/redact.ts';
import { throwOnStatus, wrapHttpError } from '../src/status.ts';
import { always, closedPort, withServer } from './helpers/server.ts';
import { allowSlowTests } from './helpers/slow-tests.ts';

// The linear-time tests read hundreds of KiB of hostile text: linear, but past Bun's 5 s per-test
// limit on a loaded machine (the quote()d one, when it read 2 MB, under load 8-11).
await allowSlowTests();

const UNPARSEABLE = '(unparseable URL)';

/**
 * A marker no innocent text contains. Every generated secret starts with it, so a
 * secret can never collide with a status text, a port or a timestamp.
 */
const MARK = 'bwS3cr3t';

/** Token-like secrets (API keys, bearer tokens): 12 to 64 characters after the marker. */
const tokenSecret = fc.stringMatching(/^[A-Za-z0-9._~+/-]{12,64}$/).map((s) => `${MARK}${s}`);

/** Any visible ASCII (a valid header value), quotes and backslashes included. */
const visibleSecret = fc
  .string({
    unit: fc.integer({ min: 0x21, max: 0x7e }).map((code) => String.fromCharCode(code)),
    minLength: 12,
    maxLength: 64,
  })
  .map((s) => `${MARK}${s}`);

/** Secrets that go into a URL as they are: RFC 3986 unreserved characters only. */
const urlSecret = fc.stringMatching(/^[A-Za-z0-9._~-]{12,64}$/).map((s) => `${MARK}${s}`);

/** Whether `text` shows `secret`, as is or as JSON escapes it (`"` and `\`). */
function shows(text: string, secret: string): boolean {
  return text.includes(secret) || text.includes(JSON.stringify(secret).slice(1, -1));
}

// --- redactUrl ---

test('redactUrl drops the userinfo', () => {
  assert.equal(
    redactUrl('https://user:pass-123@api.example.com/v1/models'),
    'https://api.example.com/v1/models',
  );
  assert.equal(redactUrl('https://only-user@api.example.com/'), 'https://api.example.com/');
});

test('redactUrl keeps query parameter names and redacts their values', () => {
  assert.equal(
    redactUrl('https://api.example.com/v1/x?api_key=sk-123&model=gpt&empty='),
    `https://api.example.com/v1/x?api_key=${REDACTED}&model=${REDACTED}&empty=${REDACTED}`,
  );
});

test('redactUrl keeps every repeated query parameter, each redacted', () => {
  assert.equal(redactUrl('http://h/p?a=1&a=2'), `http://h/p?a=${REDACTED}&a=${REDACTED}`);
});

test('redactUrl re-encodes parameter names', () => {
  assert.equal(redactUrl('http://h/p?a%20b=1&c%26d=2'), `http://h/p?a%20b=${REDACTED}&c%26d=${REDACTED}`);
});

test('redactUrl drops the fragment', () => {
  assert.equal(redactUrl('https://h.example/p#access_token=tok-1'), 'https://h.example/p');
});

test('redactUrl keeps scheme, host, port and path', () => {
  assert.equal(redactUrl('http://127.0.0.1:8080/mcp/v1'), 'http://127.0.0.1:8080/mcp/v1');
  assert.equal(redactUrl('https://h.example/'), 'https://h.example/');
});

test('redactUrl leaves out an empty query', () => {
  assert.equal(redactUrl('https://h.example/p?'), 'https://h.example/p');
});

test('redactUrl accepts a URL object', () => {
  assert.equal(redactUrl(new URL('https://u:p@h.example/p?k=v')), `https://h.example/p?k=${REDACTED}`);
});

test('redactUrl gives a placeholder for an unparseable URL, never the input', () => {
  for (const input of ['/v1/x?token=tok-rel-1', 'not a url tok-rel-2', 'http://[::1/?token=tok-rel-3', '']) {
    assert.equal(redactUrl(input), UNPARSEABLE, input);
  }
});

test('redactUrl never shows userinfo, query values or the fragment, for any secret', () => {
  fc.assert(
    fc.property(visibleSecret, fc.string({ minLength: 1, maxLength: 8 }), (secret, name) => {
      const enc = encodeURIComponent(secret);
      const out = redactUrl(`https://u:${enc}@api.example.com/v1?${encodeURIComponent(name)}=${enc}#${enc}`);
      assert.equal(out.includes(secret), false, out);
      assert.equal(out.includes(enc), false, out);
      assert.ok(out.startsWith('https://api.example.com/v1?'), out);
    }),
  );
});

// --- redactText ---

test('redactText redacts a URL inside a message and keeps the brackets around it', () => {
  assert.equal(
    redactText(
      'error sending request for url (http://u:pw-1@127.0.0.1:8080/mcp?token=tk-1): client error (Connect)',
    ),
    `error sending request for url (http://127.0.0.1:8080/mcp?token=${REDACTED}): client error (Connect)`,
  );
});

test('redactText redacts every URL in a message', () => {
  assert.equal(
    redactText('from https://a.example/?k=1 to https://b.example/x?k=2.'),
    `from https://a.example/?k=${REDACTED} to https://b.example/x?k=${REDACTED}.`,
  );
});

test('redactText leaves text without URLs as it is', () => {
  const text = 'connect ECONNREFUSED 127.0.0.1:8080 (token: none)';
  assert.equal(redactText(text), text);
});

test('redactText never shows a secret from a URL in the text', () => {
  fc.assert(
    fc.property(fc.string(), urlSecret, fc.string(), (before, secret, after) => {
      const out = redactText(
        `${before} (https://user:${secret}@h.example/p?t=${secret}#${secret}): ${after}`,
      );
      assert.equal(out.includes(secret), false, out);
    }),
  );
});

test('redactText keeps the closing bracket of an IPv6 URL', () => {
  assert.equal(redactText('failed: http://[::1]'), 'failed: http://[::1]');
  assert.equal(redactText('failed: http://[::1].'), 'failed: http://[::1].');
  assert.equal(
    redactText('failed (http://[::1]:8080/x?k=v-1).'),
    `failed (http://[::1]:8080/x?k=${REDACTED}).`,
  );
});

/** A URL as servers and SDKs quote it back, secrets marked, in one of the shapes text takes. */
const quotedUrl = fc
  .tuple(
    fc.constantFrom('http', 'https'),
    fc.constantFrom('', `u:${MARK}pw@`),
    fc.constantFrom('h.example', '[::1]', '127.0.0.1:8080'),
    fc.constantFrom('', '/', '/p', '/Foo_(bar)', '/a.b/c'),
    fc.constantFrom('', '?k=v', `?token=${MARK}tk&a=(1)`, '?x=[y]'),
    fc.constantFrom('', `#${MARK}f`),
  )
  .map(([scheme, ...parts]) => `${scheme}://${parts.join('')}`);

/** What text puts around a URL: prose, brackets, quotes, JSON, a tag. */
const aroundUrl = fc.constantFrom(
  ['see ', '.'],
  ['(', ')'],
  ['(see ', '), then'],
  ['[', ']'],
  ['"', '"'],
  ["'", "'"],
  ['<', '>'],
  ['{"url":"', '","n":1}'],
  ['', ''],
);

test('redactText changes nothing in what it redacted: an error redacts its snapshot again', () => {
  fc.assert(
    fc.property(quotedUrl, aroundUrl, (url, [before, after]) => {
      assertHidden(`${before}${url}${after}`);
    }),
  );
});

test('redactText ends a URL at the quote that closes its JSON string', () => {
  assert.equal(
    redactText('{"url":"https://a.example/x?k=s-1","msg":"quota"}'),
    `{"url":"https://a.example/x?k=${REDACTED}","msg":"quota"}`,
  );
  assert.equal(
    redactText('<a href="https://a.example/x?k=s-4">retry</a>'),
    `<a href="https://a.example/x?k=${REDACTED}">retry</a>`,
  );
});

test('redactText ends a single-quoted URL at its closing quote in the query', () => {
  assert.equal(
    redactText("{'url':'https://a.example/x?k=s-1','msg':'quota'}"),
    `{'url':'https://a.example/x?k=${REDACTED}','msg':'quota'}`,
  );
  // A quote in the userinfo or the path does not end the URL: the query after it stays hidden.
  assert.equal(
    redactText("'https://o'brien:pw-5@a.example/it's?token=tk-5','next'"),
    `'https://a.example/it's?token=${REDACTED}','next'`,
  );
});

test('redactText keeps parentheses and commas a URL holds and trims those that close the prose around it', () => {
  assert.equal(
    redactText('(see https://en.wikipedia.org/wiki/Foo_(bar)), then'),
    '(see https://en.wikipedia.org/wiki/Foo_(bar)), then',
  );
  // encodeURIComponent leaves `(`, `)` and `'` as they are: a value may hold them.
  const out = redactText('failed (https://h.example/x?pw=a)b-6,c&t=d-6)');
  assert.equal(out, `failed (https://h.example/x?pw=${REDACTED}&t=${REDACTED})`);
});

/** The fastest of three runs of `run`, in ms: one slow run on a busy machine says little. */
function fastestMs(run: () => unknown): number {
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 3; i++) {
    const started = performance.now();
    run();
    best = Math.min(best, performance.now() - started);
  }
  return best;
}

test('redactText takes linear time on hostile input: four times the text, about four times the time', () => {
  const fill = (unit: string, chars: number) => unit.repeat(Math.ceil(chars / unit.length));
  const hostile: ((chars: number) => string)[] = [
    (chars) => fill('http://', chars),
    (chars) => fill('a', chars),
    (chars) => `${fill('a', chars)}://`,
    (chars) => fill('https:\\/\\/', chars),
    (chars) => fill(':\\u002F\\u002F', chars),
    // Percent-encoded and \u003A-escaped separators, and encoded URLs' pieces.
    (chars) => fill('%3A%2F%2F', chars),
    (chars) => fill('\\u003A', chars),
    (chars) => fill('a\\u003A//', chars),
    (chars) => fill('https%3A%2F%2Fu%40h%2F', chars),
    (chars) => `https%3A%2F%2Fh%3F${fill('%26a%3D', chars)}`,
    (chars) => `https%3A%2F%2F${fill('%40', chars)}`,
    (chars) => `http://h/${fill('%3A%2F%2F', chars)}`,
    (chars) => fill('x://h/https%3A%2F%2Fh%3Fa%3D', chars),
    (chars) => fill("'http://h/?k='", chars),
    (chars) => `${fill('(', chars / 2)}http://h/${fill(')', chars / 2)}`,
    (chars) => `http://h/${fill('[', chars)}`,
    (chars) => `http://h/?${fill('a&', chars)}`,
    (chars) => `http://h/${fill('\\u0041', chars)}`,
    // Runs of backslashes, in a URL and after a ':' (JSON in JSON escapes `\/` as `\\\/`).
    (chars) => `http://h/${fill('\\', chars)}x`,
    (chars) => `:/${fill('\\', chars)}`,
    (chars) => fill(`:${'\\'.repeat(64)}`, chars),
  ];

  const SMALL = 32 * 1024;
  for (const make of hostile) {
    const small = make(SMALL);
    const large = make(4 * SMALL);
    redactText(small); // compiled before it is timed
    const smallMs = fastestMs(() => redactText(small));
    const largeMs = fastestMs(() => redactText(large));
    // Linear: about 4x, a few ms. Quadratic (a rescan per URL, a backtracking regex):
    // 16x, and the small input alone takes a second. The constant absorbs a busy machine.
    assert.ok(largeMs < 10 * smallMs + 100, `${smallMs} ms, then ${largeMs} ms for ${large.slice(0, 24)}...`);
  }
  assert.equal(redactText(fill('a', 4 * SMALL)), fill('a', 4 * SMALL));
});

test('redactText reads a URL’s escapes once: escapes nested level after level in its path take linear time', () => {
  // Each level hides the next URL's ':' (and the backslashes of its escapes) behind one
  // more escape: '\u003A', '\u005Cu003A', ... (5 more characters a level, so n characters
  // hold about sqrt(n) levels). Reading the escapes of each path again, level after level,
  // scans the text once a level: n^1.5.
  const escaped = (text: string) => text.replace(/[\\:]/g, (c) => (c === '\\' ? '\\u005C' : '\\u003A'));
  const nested = (chars: number) => {
    let text = `foo://u:pw@h.example/a`;
    while (text.length < chars) text = `foo://h.example/a/${escaped(text)}`;
    return text;
  };
  const small = nested(16 * 1024);
  const large = nested(16 * 16 * 1024);
  redactText(small); // compiled before it is timed
  const smallMs = fastestMs(() => redactText(small));
  const largeMs = fastestMs(() => redactText(large));
  // Linear: about 16x, a few ms. A scan per level: 64x, over a second.
  assert.ok(largeMs < 24 * smallMs + 100, `${smallMs} ms, then ${largeMs} ms`);
  // The level a JSON reader reads is still read: URLs hidden behind one escape in a
  // URL's path are redacted.
  assert.equal(
    redactText(`foo://h.example/a/${escaped('https://h.example/b/https://u:pw@h.example/c')}`),
    'foo://h.example/a/https://h.example/b/https://h.example/c',
  );
});

test('redactText redacts a URL whose slashes a JSON encoder escaped as \\/', () => {
  // PHP's json_encode (and "HTML-safe" encoders) write every `/` as `\/`.
  assert.equal(
    redactText(String.raw`{"error":"bad callback https:\/\/user:pw-1@h.example\/x?token=tk-1&mode=a"}`),
    `{"error":"bad callback https://h.example/x?token=${REDACTED}&mode=${REDACTED}"}`,
  );
});

test('redactText redacts a URL written with \\u002F escapes and \\u0026 between its parameters', () => {
  assert.equal(
    redactText(String.raw`{"error":"see https:\u002F\u002Fuser:pw-2@h.example\u002fx?a=1\u0026token=tk-2"}`),
    `{"error":"see https://h.example/x?a=${REDACTED}&token=${REDACTED}"}`,
  );
});

test('redactText redacts a URL in JSON quoted inside JSON, its slashes escaped at both levels', () => {
  // A PHP API quoting its upstream's JSON error: json_encode escapes the inner text's
  // `\/` again (`\\\/`); JSON.stringify around it writes `\\/`.
  const inner = JSON.stringify({ url: 'https://user:pw-1@h.example/x?token=tk-1&m=a' }).replaceAll(
    '/',
    '\\/',
  );
  const outer = JSON.stringify({ error: `upstream said: ${inner}` });
  // One level of escapes is read, as everywhere: `\\/` reads as `\/`, which the URL parser
  // reads as `//` in the path.
  const expected = `{"error":"upstream said: {\\"url\\":\\"https://h.example//x?token=${REDACTED}&m=${REDACTED}\\"}"}`;
  assert.equal(redactText(outer.replaceAll('/', '\\/')), expected);
  assert.equal(redactText(outer), expected);
});

test('redactText reads the escapes of a JSON string in a URL: \\" ends it, \\n does not', () => {
  // A JSON text inside a JSON string: the URL ends before the escaped quote, the backslash kept.
  assert.equal(
    redactText(String.raw`{"error":"{\"url\":\"https://a.example/x?k=s-2\",\"n\":1}"}`),
    String.raw`{"error":"{\"url\":\"https://a.example/x?k=${REDACTED}\",\"n\":1}"}`,
  );
  // WHATWG URL leaves a backslash in a query value as it is: `\n` may be part of a secret.
  assert.equal(
    redactText(String.raw`{"error":"at https://a.example/x?k=s-3\nb-3 next"}`),
    `{"error":"at https://a.example/x?k=${REDACTED} next"}`,
  );
});

test('redactText redacts URLs in compact JSON and keeps the rest of the JSON, escaped slashes or not', () => {
  const message = fc.string().filter((s) => !s.includes(':'));
  fc.assert(
    fc.property(urlSecret, message, fc.boolean(), (secret, msg, escaped) => {
      const slashes = (json: string) => (escaped ? json.replaceAll('/', '\\/') : json);
      // Ends in a letter: a last `.` would be kept out of the URL, as a sentence's end.
      const url = `https://u:${secret}@h.example/p?t=${secret}#${secret}x`;
      const out = redactText(slashes(JSON.stringify({ url, msg })));
      assert.equal(out.includes(secret), false, out);
      assert.equal(
        out,
        `{"url":"https://h.example/p?t=${REDACTED}",${slashes(`"msg":${JSON.stringify(msg)}}`)}`,
      );
    }),
  );
});

test('redactText redacts a URL inside another URL on its own', () => {
  assert.equal(
    redactText('failed: https://proxy.example/fetch/https://user:pw-1@h.example/x?token=tk-1'),
    `failed: https://proxy.example/fetch/https://h.example/x?token=${REDACTED}`,
  );
  assert.equal(redactText('failed: http://http://user:pw-2@h.example/'), 'failed: http://http://h.example/');
});

test('redactUrl redacts a URL inside its path', () => {
  assert.equal(
    redactUrl('https://proxy.example/fetch/https://user:pw-3@h.example/x'),
    'https://proxy.example/fetch/https://h.example/x',
  );
});

test('redactUrl shows no parameter name that holds a URL', () => {
  // A redirect target after `?` with no `=` is a parameter name to URLSearchParams.
  const out = redactUrl('https://r.example/go?https://user:pw-4@h.example/');
  assert.equal(out, `https://r.example/go?${REDACTED}=${REDACTED}`);
  assert.equal(redactUrl(out), out);
});

/** Whatever may stand right next to a URL: brackets, quotes, escapes, other URLs' pieces. */
const nextToUrl = fc
  .array(
    fc.constantFrom(
      ...['(', ')', '[', ']', '{', '}', "'", '"', '`', ',', '.', ';', ':', '\\', '\\/', '\\"', '\\u0027'],
      ...['/', '?', '#', '&', '=', 'a', ' ', '<', '>', '%', 'http://', ':\\/\\/'],
    ),
    { maxLength: 8 },
  )
  .map((pieces) => pieces.join(''));

test('redactText never shows a secret of a URL, whatever stands right next to it', () => {
  const url = fc
    .tuple(
      fc.constantFrom('http', 'https', 'postgres'),
      urlSecret.map((secret) => `${secret}x`),
      fc.constantFrom('h.example', '[::1]', 'h.example:8080'),
      fc.constantFrom('', '/p', '/a(b)', "/it's"),
      fc.constantFrom('?', '?a=(1)&', '?x=[y]&'),
      fc.boolean(),
      fc.boolean(),
    )
    .map(([scheme, secret, host, path, query, escaped, fragment]) => {
      const written = `${scheme}://u:${secret}@${host}${path}${query}t=${secret}${fragment ? `#${secret}` : ''}`;
      return { secret, written: escaped ? written.replaceAll('/', '\\/') : written };
    });
  fc.assert(
    fc.property(nextToUrl, url, nextToUrl, (before, { secret, written }, after) => {
      const out = redactText(`${before}${written}${after}`);
      assert.equal(out.includes(secret), false, out);
    }),
    { numRuns: 2_000 },
  );
});

test('redactText redacts a percent-encoded URL standing alone in text, left encoded', () => {
  // Servers quote an encoded redirect_uri or callback back in their error bodies.
  assert.equal(
    redactText('{"next":"https%3A%2F%2Fadmin%3Asecretpw%40db.example%2Fx%3Ftoken%3Dabc%26mode%3Dfast"}'),
    `{"next":"https%3A%2F%2Fdb.example%2Fx%3Ftoken%3D${REDACTED}%26mode%3D${REDACTED}"}`,
  );
  // Any case, the fragment dropped, a name holding an escape hidden, punctuation around it kept.
  assert.equal(
    redactText('bad redirect_uri (https%3a%2f%2fu%3apw-1%40h.example%2fcb%3fa%252F%3dtk-1%23frag-1).'),
    `bad redirect_uri (https%3a%2f%2fh.example%2fcb%3f${REDACTED}%3d${REDACTED}).`,
  );
  // A URL encoded in an encoded URL's path is one of its own.
  assert.equal(
    redactText('see https%3A%2F%2Fproxy.example%2Ffetch%2Fhttps%3A%2F%2Fu%3Apw-2%40h.example%2Fx'),
    'see https%3A%2F%2Fproxy.example%2Ffetch%2Fhttps%3A%2F%2Fh.example%2Fx',
  );
  // In a URL's path: the URL around it keeps its path, the encoded one loses its secrets.
  assert.equal(
    redactText('failed: https://proxy.example/fetch/https%3A%2F%2Fu%3Apw-3%40h.example/x?k=tk-3'),
    `failed: https://proxy.example/fetch/https%3A%2F%2Fh.example/x?k=${REDACTED}`,
  );
  // In the opaque host of a URL of another scheme.
  assert.equal(
    redactUrl('foo://https%3A%2F%2Fu%3Apw-4%40h.example%3Fk%3Dtk-4/x'),
    `foo://https%3A%2F%2Fh.example%3Fk%3D${REDACTED}/x`,
  );
});

test('redactText redacts a URL whose colon a JSON encoder escaped as \\u003A', () => {
  assert.equal(
    redactText(String.raw`{"dsn":"postgres\u003A//admin:secretpw@db"}`),
    '{"dsn":"postgres://db"}',
  );
  assert.equal(
    redactText(String.raw`{"dsn":"postgres\u003a\u002F\u002Fadmin:secretpw@db\u002Fapp?sslkey=k-1"}`),
    `{"dsn":"postgres://db/app?sslkey=${REDACTED}"}`,
  );
});

/** A URL percent-encoded as a query value or JSON string holds it, secrets marked. */
const encodedUrl = fc
  .tuple(
    fc.constantFrom('http', 'https'),
    fc.constantFrom('', `u:${MARK}pw@`, `${MARK}u@`),
    fc.constantFrom('h.example', '[::1]', 'h.example:8080'),
    fc.constantFrom('', '/', '/p', '/Foo_(bar)', '/a.b/c', "/it's"),
    fc.constantFrom('', '?k=v', `?token=${MARK}tk&a=(1)`, `?${MARK}n`, `?a b=${MARK}v&&`, '?x=[y]'),
    fc.constantFrom('', `#${MARK}f`),
    fc.boolean(),
  )
  .map(([scheme, userinfo, host, path, query, fragment, lower]) => {
    const encoded = encodeURIComponent(`${scheme}://${userinfo}${host}${path}${query}${fragment}`);
    return lower ? encoded.replace(/%[\dA-F]{2}/g, (byte) => byte.toLowerCase()) : encoded;
  });

test('redactText never shows a secret of a percent-encoded URL and changes nothing in what it redacted', () => {
  fc.assert(
    fc.property(nextToUrl, encodedUrl, aroundUrl, nextToUrl, (before, url, [open, close], after) => {
      // Known limit: an encoded URL in another URL's path, then a scheme glued to its last
      // character (`x://h/https%3A%2F%2Fh%23tkhttp://`), reads `23tkhttp` as that scheme.
      fc.pre(close !== '' || !/^[a-z\d+.-]*:/i.test(after));
      const out = redactText(`${before}${open}${url}${close}${after}`);
      assert.equal(out.includes(MARK), false, out);
      assertHidden(`${open}${url}${close}`);
    }),
    { numRuns: 2_000 },
  );
});

test('redactText redacts a URL percent-encoded by Python’s quote(), its slashes left as they are', () => {
  // urllib.parse.quote() keeps '/' by default: 'https%3A//user%3Apw%40host/x%3Fk%3Dv'. What
  // follows its '//' is shown encoded throughout.
  assert.equal(
    redactText('{"dsn":"https%3A//admin%3Ap4ssw0rd%40db.internal/x%3Ftoken%3Dabc%26mode%3Dfast"}'),
    `{"dsn":"https%3A//db.internal%2Fx%3Ftoken%3D${REDACTED}%26mode%3D${REDACTED}"}`,
  );
  // Its '?' (and '=', '&', '#') left as they are too (quote(url, safe='/?')), any case.
  assert.equal(
    redactText('next: https%3a//admin%3ap4ssw0rd%40db.internal/x?token%3Dabc&mode=fast#frag-1.'),
    `next: https%3a//db.internal%2Fx%3Ftoken%3D${REDACTED}%26mode%3D${REDACTED}.`,
  );
  // Its ':' left as it is (quote(url, safe=':/')): the parser refuses the host, nothing is shown.
  assert.equal(redactText('at https://admin%3Ap4ssw0rd%40db.internal/x'), 'at (unparseable URL)');
});

test('redactText hides the secrets of a URL written as it is inside a quote()d URL', () => {
  // quote() encodes every ':' after its own '%3A//': a ':' starts a URL of its own, whose
  // query may hold what a quote()d URL never does ('[', ',').
  for (const text of [
    '{"callback":"https%3A//app.example/cb?next=https://user:pw-1@[::1]:8080/x?token=tk-1"}',
    'callback https%3A//app.example/cb?next=https://api.example/x?ids=1,2&token=tk-2 failed',
    'via https%3A//proxy.example/fetch/https://user:pw-3@[::1]/x?token=tk-3 now',
  ]) {
    const out = redactText(text);
    for (const secret of ['pw-1', 'tk-1', 'tk-2', 'pw-3', 'tk-3'])
      assert.equal(out.includes(secret), false, out);
    assert.equal(redactText(out), out);
  }
});

test('redactText redacts a URL percent-encoded twice, left encoded twice', () => {
  // An encoded redirect_uri encoded once more, as a query value of another URL is.
  assert.equal(
    redactText('{"got":"https%253A%252F%252Fadmin%253Ap4ss%2540db%252Fx%253Ftoken%253Dabc%2526m%253Dfast"}'),
    `{"got":"https%253A%252F%252Fdb%252Fx%253Ftoken%253D${REDACTED}%2526m%253D${REDACTED}"}`,
  );
  // Three times, lower case, the fragment dropped.
  assert.equal(
    redactText(
      'see https%25253a%25252f%25252fu%25253apw-2%252540h.example%25252fcb%25253ft%25253dtk-2%252523f-2',
    ),
    `see https%25253a%25252f%25252fh.example%25252fcb%25253ft%25253d${REDACTED}`,
  );
  // A delimiter encoded once more than the URL is part of what holds it: here a password
  // holding a '/' and an '@' (u:p%2Fss%40x@h in the URL as written).
  assert.equal(redactText('https%3A%2F%2Fu%3Ap%252Fss%2540x%40h%2Fp'), 'https%3A%2F%2Fh%2Fp');
  assert.equal(
    redactText('https%253A%252F%252Fu%253Ap%25252Fss%252540x%2540h%252Fp'),
    'https%253A%252F%252Fh%252Fp',
  );
});

test('redactText reads a URL encoded once more inside a percent-encoded URL as part of it, its query and password still hidden', () => {
  // A proxy's callback whose path holds an encoded URL, encoded as a whole once more: the
  // inner URL's '://' is no end of the outer one, whose query follows it.
  assert.equal(
    redactText(
      '{"next":"https%3A%2F%2Fproxy.example%2Ffetch%2Fhttps%253A%252F%252Fh.example%3Ftoken%3Dtk-1"}',
    ),
    `{"next":"https%3A%2F%2Fproxy.example%2Ffetch%2Fhttps%253A%252F%252Fh.example%3Ftoken%3D${REDACTED}"}`,
  );
  // The inner URL loses its own secrets too, also in a quote()d URL's path.
  assert.equal(
    redactText(
      'https%3A//proxy.example/fetch/https%253A%252F%252Fu%253Apw-2%2540h.example%252Fx%3Ftoken%3Dtk-2',
    ),
    `https%3A//proxy.example%2Ffetch%2Fhttps%253A%252F%252Fh.example%252Fx%3Ftoken%3D${REDACTED}`,
  );
  // A password holding '://' (u:p://ss@h as written).
  assert.equal(
    redactText('https%3A%2F%2Fu%3Apw-3%253A%252F%252Fss%40h.example%2Fx'),
    'https%3A%2F%2Fh.example%2Fx',
  );
  for (const out of [
    'https%3A%2F%2Fproxy.example%2Ffetch%2Fhttps%253A%252F%252Fh.example%3Ftoken%3D[redacted]',
    'https%3A//proxy.example%2Ffetch%2Fhttps%253A%252F%252Fh.example%252Fx%3Ftoken%3D[redacted]',
  ]) {
    assert.equal(redactText(out), out);
  }
});

test('redactText redacts a URL in JSON quoted inside JSON, its colon or slashes escaped as \\u003A or \\u002F', () => {
  // A JSON string holding a JSON text: the inner text's escapes are escaped again.
  const inner = [
    String.raw`https:\/\/admin:p4ss@db\/x?token=abc`,
    String.raw`https\u003A\/\/admin:p4ss@db\/x?token=abc`,
    String.raw`postgres\u003A//admin:p4ss@db/x?token=abc`,
    String.raw`https:\u002F\u002Fadmin:p4ss@db\u002Fx?token=abc`,
    // Encoders that escape every character but letters and digits.
    String.raw`https\u003A\u002F\u002Fadmin\u003Ap4ss\u0040db\u002Fx\u003Ftoken\u003Dabc`,
  ];
  for (const url of inner) {
    const outer = JSON.stringify({ error: `upstream said: {"url":"${url}"}` });
    const out = redactText(outer);
    assert.equal(out.includes('p4ss'), false, out);
    assert.equal(out.includes('abc'), false, out);
    assert.match(
      out,
      /^\{"error":"upstream said: \{\\"url\\":\\"(?:https|postgres):\/\/db\/\/?x\?token=\[redacted\]\\"\}"\}$/,
      out,
    );
    assert.equal(redactText(out), out);
  }
});

/** A URL spelled as text quotes it in the forms above, secrets marked. */
const spelledUrl = fc
  .tuple(
    fc.constantFrom('http', 'https'),
    fc.constantFrom('', `u:${MARK}pw@`, `${MARK}u@`, `u:${MARK}p%2F%3F%23%40w@`),
    fc.constantFrom('h.example', '[::1]', 'h.example:8080'),
    fc.constantFrom('', '/', '/p', '/Foo_(bar)', '/a.b/c', "/it's"),
    fc.constantFrom('', '?k=v', `?token=${MARK}tk&a=(1)`, `?${MARK}n`, `?a%20b=${MARK}v&&`, '?x=[y]'),
    fc.constantFrom('', `#${MARK}f`),
    fc.constantFrom<[(url: string) => string, boolean][]>(
      // Python's quote(): '/' left as it is.
      [(url) => encodeURIComponent(url).replaceAll('%2F', '/'), false],
      [(url) => encodeURIComponent(encodeURIComponent(url)), false],
      [(url) => encodeURIComponent(encodeURIComponent(url)).replaceAll('%252F', '/'), false],
      // JSON in JSON: the inner text escapes '/' or every character but letters and digits.
      [(url) => JSON.stringify(url.replaceAll('/', '\\/')).slice(1, -1), true],
      [
        (url) =>
          JSON.stringify(
            url.replace(/\W/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`),
          ).slice(1, -1),
        true,
      ],
      [
        (url) =>
          JSON.stringify(url.replace(/[/:]/g, (c) => (c === ':' ? '\\u003A' : '\\u002F'))).slice(1, -1),
        true,
      ],
    ),
  )
  .map(([scheme, userinfo, host, path, query, fragment, [spell, decoded]]) =>
    // A URL read from JSON is shown decoded, its parameter names kept (redactUrl): `?name`
    // with no `=` is one.
    spell(
      `${scheme}://${userinfo}${host}${path}${decoded ? query.replace(`?${MARK}n`, '?n') : query}${fragment}`,
    ),
  );

test('redactText never shows a secret of a URL encoded twice, quote()d or quoted in JSON in JSON, and changes nothing in what it redacted', () => {
  fc.assert(
    fc.property(nextToUrl, spelledUrl, aroundUrl, nextToUrl, (before, url, [open, close], after) => {
      // Known limits: a scheme glued to the last character of an encoded URL (as above);
      // text glued to a quote()d URL's closing punctuation (`?name.a=`) makes a name, shown.
      fc.pre((close !== '' || !/^[a-z\d+.-]*:/i.test(after)) && !/^[\w.~-]*=/.test(after));
      const out = redactText(`${before}${open}${url}${close}${after}`);
      assert.equal(out.includes(MARK), false, out);
      assertHidden(`${open}${url}${close}`);
    }),
    { numRuns: 2_000 },
  );
});

/** Redacts `text`: `secret` must not show, and redacting the result again must change nothing. */
function assertHidden(text: string, secret: string = MARK): void {
  const once = redactText(text);
  assert.equal(once.includes(secret), false, once);
  assert.equal(redactText(once), once);
}

/**
 * Checks that `redactText` takes linear time on each of `hostile` (text of a given size):
 * `small` characters (128 KiB unless given), then four times as many, about four times
 * the time. A quadratic takes seconds on 128 KiB and 16 times that on 512 KiB: the sizes
 * tell one apart as well as 512 KiB and 2 MiB did, in a quarter of the time (these checks
 * were two thirds of this file's 67 s on Node).
 */
function assertLinear(hostile: ((chars: number) => string)[], small = 128 * 1024): void {
  // Bun (JavaScriptCore) on some hosts runs these patterns 50 to 200 times slower past
  // a subject size, linear on each side of that step (measured 2026-11-30: '%2Fwebhooks'
  // text 2.4 ms for 128 KiB, 553 ms for 256 KiB, 1,119 ms for 512 KiB, where Node takes
  // 3.9 and 7.8 ms; 'https%3A//@/@/...' 13 ms for 32 KiB, 796 ms for 64 KiB, 1,649 ms
  // for 128 KiB), so 4x across it reads as 100x or more. Under Bun both sizes stay below
  // the step (8 and 32 KiB); Node and Deno, the same code on V8, check the sizes given.
  // Real inputs are far smaller: captured bodies are cut at 2 KiB.
  const SMALL = process.versions.bun === undefined ? small : Math.min(small, 8 * 1024);
  for (const make of hostile) {
    const small = make(SMALL);
    const large = make(4 * SMALL);
    redactText(small); // compiled before it is timed
    // Linear: about 4x. Quadratic: 16x, and the small input alone takes minutes. The
    // constant absorbs a busy machine (and a garbage collection) at this size: 1.5 s at
    // 512 KiB (a quiet machine's Deno once measured 151 ms, then 2,223 ms for 2 MiB,
    // whose runs take 1.8 s there), 0.5 s at least. A quadratic fails both measures;
    // a collection landing in one does not.
    const slackMs = Math.max(500, (1500 * SMALL) / (512 * 1024));
    const linear = (): [number, number, boolean] => {
      const smallMs = fastestMs(() => redactText(small));
      const largeMs = fastestMs(() => redactText(large));
      return [smallMs, largeMs, largeMs < 10 * smallMs + slackMs];
    };
    const first = linear();
    const [smallMs, largeMs, ok] = first[2] ? first : linear();
    assert.ok(
      ok,
      `${smallMs} ms, then ${largeMs} ms for ${large.slice(0, 24)}... (first ${first[0]} / ${first[1]} ms)`,
    );
  }
}

/** `unit` repeated to at least `chars` characters. */
const fill = (unit: string, chars: number) => unit.repeat(Math.ceil(chars / unit.length));

test('redactText takes linear time on 512 KiB of hostile twice-encoded text', () => {
  assertLinear([
    (chars) => fill('%253A%252F%252F', chars),
    // A run of '25's after a '%', a userinfo of '@'s.
    (chars) => `${fill('%25', chars)}3A%2F%2F`,
    (chars) => `https%253A%252F%252F${fill('%2540', chars)}`,
  ]);
});

test('redactText hides the userinfo and query values of a URL whose delimiters are encoded to different depths', () => {
  // Python's quote(quote(url, safe=':/')): ':' and '/' encoded once or not at all, '@', '?',
  // '=' and '&' twice; with safe=':/?=&' only the '@' twice.
  assert.equal(
    redactText('dsn https%3A//admin%3Apw-31%2540db.internal/x%253Ftoken%253Dtk-31%2526m%253D1 down'),
    `dsn https%3A//db.internal%2Fx%253Ftoken%253D${REDACTED}%2526m%253D${REDACTED} down`,
  );
  assert.equal(
    redactText('dsn https%3A//admin%3Apw-32%2540db.internal/x%3Ftoken%3Dtk-32 down'),
    `dsn https%3A//db.internal%2Fx%3Ftoken%3D${REDACTED} down`,
  );
  // quote(url, safe=':/') alone: a web URL's host refuses the '%40', another scheme's takes it.
  assert.equal(
    redactText('dsn postgres://tk-38%40db.internal/app down'),
    'dsn postgres://db.internal/app down',
  );
  // A URL's '://' encoded to two depths, its '@' to the shallower one or the deeper one
  // (Go's url.QueryEscape(url.PathEscape(url)), and the reverse).
  assert.equal(
    redactText('see https%3A%252F%252Fadmin%3Apw-33%40db.internal%252Fx%253Ftoken%3Dtk-33'),
    `see https%3A%252F%252Fdb.internal%252Fx%253Ftoken%3D${REDACTED}`,
  );
  assert.equal(redactText('see https%253A%2F%2Fadmin%253Apw-34%40db%2Fx'), 'see https%253A%2F%2Fdb%2Fx');
});

test('redactText redacts a URL spelled by Go’s url.PathEscape: its ":", "@", "=" and "&" left as they are, its "/" and "?" encoded', () => {
  assert.equal(
    redactText('callback https:%2F%2Fadmin:pw-35@db.internal%2Fx%3Ftoken=tk-35&m=1 failed'),
    `callback https:%2F%2Fdb.internal%2Fx%3Ftoken%3D${REDACTED}%26m%3D${REDACTED} failed`,
  );
  // Twice, and with no path.
  assert.equal(
    redactText('{"next":"https:%252F%252Fadmin:pw-36@db.internal%252Fx%253Ftoken=tk-36"}'),
    `{"next":"https:%252F%252Fdb.internal%252Fx%253Ftoken%253D${REDACTED}"}`,
  );
  assert.equal(
    redactText('at https:%2F%2Fadmin:pw-37@db.internal%3Ftoken=tk-37.'),
    `at https:%2F%2Fdb.internal%3Ftoken%3D${REDACTED}.`,
  );
});

/** Python's urllib.parse.quote: letters, digits, `_.-~` and `safe` left as they are. */
const pyQuote = (text: string, safe = '/') =>
  text.replace(/[^\w.~-]/g, (c) =>
    safe.includes(c) ? c : `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`,
  );

/** Go's url.PathEscape: a path segment's escaping, which leaves `$&+,:;=@` as they are. */
const goPathEscape = (text: string) =>
  text.replace(/[^\w.~$&+,:;=@-]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);

test('redactText never shows a secret of a URL spelled with its delimiters at mixed depths, and changes nothing in what it redacted', () => {
  const url = fc
    .tuple(
      fc.constantFrom('http', 'https'),
      fc.constantFrom('', `u:${MARK}pw@`, `${MARK}u@`),
      fc.constantFrom('h.example', 'h.example:8080'),
      fc.constantFrom('', '/', '/p', '/a.b/c'),
      fc.constantFrom('', '?k=v', `?token=${MARK}tk&a=1`, `?a=1&b=${MARK}v`),
      fc.constantFrom('', `#${MARK}f`),
      fc.constantFrom(
        (text: string) => pyQuote(pyQuote(text, ':/')),
        (text: string) => pyQuote(pyQuote(text, ':/?=&')),
        (text: string) => pyQuote(text, ':/'),
        goPathEscape,
        (text: string) => goPathEscape(goPathEscape(text)),
        (text: string) => encodeURIComponent(goPathEscape(text)),
      ),
    )
    .map(([scheme, userinfo, host, path, query, fragment, spell]) =>
      spell(`${scheme}://${userinfo}${host}${path}${query}${fragment}`),
    );
  fc.assert(
    fc.property(url, aroundUrl, (spelled, [open, close]) => {
      assertHidden(`${open}${spelled}${close}`);
    }),
    { numRuns: 1_000 },
  );
});

test('redactText takes linear time on 512 KiB of hostile text spelled as Go’s url.PathEscape or at mixed depths', () => {
  assertLinear([
    (chars) => `https:%2F%2F${fill('@', chars)}`,
    (chars) => `https%3A//${fill('%2540', chars)}`,
  ]);
});

test('redactText takes linear time on many short URLs spelled as Go’s url.PathEscape and on a long host of another scheme', () => {
  // A URL read per separator, a 2 MB URL parse: 128 KiB is enough to tell.
  assertLinear(
    [
      (chars) => fill(':%2F%2F', chars),
      (chars) => fill('https:%2F%2Fu:p@h%2F', chars),
      (chars) => `postgres://${fill('%41', chars)}`,
      (chars) => `postgres://${fill('%40', chars)}%3F`,
    ],
    32 * 1024,
  );
});

test('redactText takes linear time on 512 KiB of hostile quote()d text', () => {
  assertLinear([(chars) => fill('https%3A//u%40h/', chars), (chars) => `https%3A//${fill('@/', chars)}`]);
});

test('redactText takes linear time on 512 KiB of URLs encoded one to four times in turn', () => {
  // A pattern is built per depth: four, built once each.
  assertLinear([
    (chars) =>
      fill([0, 1, 2, 3].map((n) => `https%${'25'.repeat(n)}3A//u%${'25'.repeat(n)}40h `).join(''), chars),
  ]);
});

test('redactText takes linear time on 512 KiB of hostile JSON-in-JSON text', () => {
  assertLinear([
    // Runs of backslashes, separators, a path of twice-escaped characters.
    (chars) => fill('\\\\', chars),
    (chars) => `a${fill('\\\\', chars)}u003A//`,
    (chars) => fill('a\\\\u003A\\\\/\\\\/', chars),
    (chars) => `https\\\\u003A\\\\/\\\\/h/${fill('\\\\u0041', chars)}`,
  ]);
});

test('a percent-encoded URL in an error body never shows its userinfo or query values', async () => {
  const { error, shown } = await failWithBody(
    '{"error":"redirect_uri mismatch","got":"https%3A%2F%2Fuser%3Apw-8%40h.example%2Fcb%3Fstate%3Dtk-8"}',
  );
  assert.equal(
    error.body,
    `{"error":"redirect_uri mismatch","got":"https%3A%2F%2Fh.example%2Fcb%3Fstate%3D${REDACTED}"}`,
  );
  for (const text of shown) {
    assert.equal(shows(text, 'pw-8'), false, `password shown in: ${text}`);
    assert.equal(shows(text, 'tk-8'), false, `token shown in: ${text}`);
  }
});

// --- tokens in URL paths ---

/** A Telegram bot token: the bot's id, `:`, then 35 characters. */
const TELEGRAM_TOKEN = 'AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw';
/** A Slack incoming-webhook secret: 24 characters. */
const SLACK_TOKEN = 'XXXXXXXXXXXXXXXXXXXXXXXX';
/** A Discord webhook token: 68 characters. */
const DISCORD_TOKEN = 'kF7x_Qm2-Zr9Lp4aT8wYc1Vb6Nh3Jd0Ks5Ge7Ru2Oi9Pl4Mq-_Xz8Cv1Bn6Aa3Ss0Dd';

/** A Slack Workflow Builder or webhook-trigger secret: 24 or 32 characters. */
const SLACK_WORKFLOW_TOKEN = 'Wf7kQ2xZr9Lp4aT8wYc1Vb6N';
/** A Microsoft Teams incoming webhook's connector id: 32 hex digits. */
const TEAMS_CONNECTOR = '091d20cd2a594db0b2d7ed2937d7bd6d';
/** The signature newer Teams webhook URLs end with (2025 format: `/V2...`). */
const TEAMS_SIGNATURE = 'V2QaKKUiGE6BMqWd-DeObKqCFmiQE5WSekPuAwjhc6ads1';
/** A Zapier catch hook's secret: 7 characters. */
const ZAPIER_TOKEN = 'b3xq9zk';

/** Every path secret below: none may be shown. */
const PATH_TOKENS = [
  TELEGRAM_TOKEN,
  SLACK_TOKEN,
  DISCORD_TOKEN,
  SLACK_WORKFLOW_TOKEN,
  TEAMS_CONNECTOR,
  TEAMS_SIGNATURE,
  ZAPIER_TOKEN,
];

/** Paths that hold their API's secret, as Telegram, Slack, Discord, Teams and Zapier shape them. */
const TOKEN_PATHS = [
  `/bot123456789:${TELEGRAM_TOKEN}/sendMessage`,
  `/file/bot123456789:${TELEGRAM_TOKEN}/photos/file_0.jpg`,
  `/services/T00000000/B00000000/${SLACK_TOKEN}`,
  `/api/webhooks/123456789012345678/${DISCORD_TOKEN}`,
  `/api/v10/webhooks/123456789012345678/${DISCORD_TOKEN}/messages/@original`,
  `/workflows/T0123ABCD/A0456EFGH/512345678901234567/${SLACK_WORKFLOW_TOKEN}`,
  `/triggers/T0123ABCD/6123456789012/${SLACK_WORKFLOW_TOKEN}`,
  `/webhookb2/1e21eb6d-60f4-432f-9428-82cf86ec55a3@b12d4011-2ea0-4377-a99b-35c565546afd/IncomingWebhook/${TEAMS_CONNECTOR}/91f7b1cc-96d0-4612-bedd-8b820c869464/${TEAMS_SIGNATURE}`,
  `/webhook/1e21eb6d-60f4-432f-9428-82cf86ec55a3@b12d4011-2ea0-4377-a99b-35c565546afd/IncomingWebhook/${TEAMS_CONNECTOR}/91f7b1cc-96d0-4612-bedd-8b820c869464`,
  `/hooks/catch/1234567/${ZAPIER_TOKEN}/`,
];

test('redactUrl hides the token a Telegram bot, Slack, Discord, Teams or Zapier webhook URL holds in its path', () => {
  assert.equal(
    redactUrl(`https://api.telegram.org/bot123456789:${TELEGRAM_TOKEN}/sendMessage?chat_id=42`),
    `https://api.telegram.org/bot123456789:${REDACTED}/sendMessage?chat_id=${REDACTED}`,
  );
  assert.equal(
    redactUrl(`https://hooks.slack.com/services/T00000000/B00000000/${SLACK_TOKEN}`),
    `https://hooks.slack.com/services/T00000000/B00000000/${REDACTED}`,
  );
  assert.equal(
    redactUrl(`https://discord.com/api/webhooks/123456789012345678/${DISCORD_TOKEN}?wait=true`),
    `https://discord.com/api/webhooks/123456789012345678/${REDACTED}?wait=${REDACTED}`,
  );
  for (const path of TOKEN_PATHS) {
    const once = redactUrl(`https://h.example${path}`);
    for (const token of PATH_TOKENS) assert.ok(!once.includes(token), once);
    assert.equal(redactUrl(once), once);
    const text = `upstream failed: {"url":"${JSON.stringify(`https://h.example${path}`).slice(1, -1).replaceAll('/', '\\/')}"}`;
    assert.equal(redactText(text), `upstream failed: {"url":"${once}"}`);
    assert.equal(redactText(redactText(text)), redactText(text));
  }
});

test('redactUrl hides the secret of a Slack workflow or trigger webhook, a Teams incoming webhook (also its V2 signature) and a Zapier catch hook', () => {
  assert.equal(
    redactUrl(
      `https://hooks.slack.com/workflows/T0123ABCD/A0456EFGH/512345678901234567/${SLACK_WORKFLOW_TOKEN}`,
    ),
    `https://hooks.slack.com/workflows/T0123ABCD/A0456EFGH/512345678901234567/${REDACTED}`,
  );
  assert.equal(
    redactUrl(`https://hooks.slack.com/triggers/T0123ABCD/6123456789012/${SLACK_WORKFLOW_TOKEN}`),
    `https://hooks.slack.com/triggers/T0123ABCD/6123456789012/${REDACTED}`,
  );
  // Everything after IncomingWebhook/: the connector id, the webhook id and the V2 signature.
  assert.equal(
    redactUrl(
      `https://acme.webhook.office.com/webhookb2/1e21eb6d-60f4-432f-9428-82cf86ec55a3@b12d4011-2ea0-4377-a99b-35c565546afd/IncomingWebhook/${TEAMS_CONNECTOR}/91f7b1cc-96d0-4612-bedd-8b820c869464/${TEAMS_SIGNATURE}`,
    ),
    `https://acme.webhook.office.com/webhookb2/1e21eb6d-60f4-432f-9428-82cf86ec55a3@b12d4011-2ea0-4377-a99b-35c565546afd/IncomingWebhook/${REDACTED}`,
  );
  assert.equal(
    redactUrl(`https://hooks.zapier.com/hooks/catch/1234567/${ZAPIER_TOKEN}/`),
    `https://hooks.zapier.com/hooks/catch/1234567/${REDACTED}/`,
  );
});

test('redactUrl keeps ids, UUIDs, slugs and method names in a path', () => {
  for (const url of [
    'https://api.example.com/v1/users/123456789012345678/posts/550e8400-e29b-41d4-a716-446655440000',
    'https://blog.example.com/2026/11/why-retries-need-a-budget-and-a-breaker-too',
    'https://api.example.com/v1/objects/507f1f77bcf86cd799439011/versions/AbCdEf0123456789GhIjKlMn',
    'https://api.openai.com/v1/threads/thread_abc123XYZabc123XYZabc12/runs/run_AbC123dEf456GhI789',
    'https://generativelanguage.googleapis.com/v1beta/models/gemini-1.5-pro-002:generateContent',
    'https://api.github.com/repos/octo/hello/hooks/12345678/pings',
    'https://api.example.com/services/billing/backends/v2',
    'https://api.example.com/webhooks/settings/123456/edit',
    'https://api.example.com/robots/bot1/status',
    'https://api.example.com/workflows/42/triggers/7/runs',
    'https://api.example.com/hooks/catch-all/1/settings',
  ]) {
    assert.equal(redactUrl(url), url);
  }
});

test('a request to a path holding a Telegram, Slack, Discord, Teams or Zapier token shows no token in the error, its JSON, the snapshot or the events', async () => {
  for (const path of TOKEN_PATHS) {
    await withServer(
      () => ({ status: 503, body: 'busy' }),
      async (server) => {
        const events: BreakwaterEvent[] = [];
        const capture = captureStatus();
        const fetch = createFetch({
          use: [throwOnStatus(), capture],
          onEvent: (event) => events.push(event),
        });
        const error = await fetch(`${server.origin}${path}`, { method: 'POST', body: '{}' }).catch(
          (thrown: unknown) => thrown,
        );
        assert.ok(error instanceof HttpStatusError, String(error));
        assert.match(error.message, /POST http:\/\/127\.0\.0\.1:\d+\/.*\[redacted\]/);
        for (const text of everythingShown(error, capture.last(server.origin), events)) {
          for (const token of PATH_TOKENS) {
            assert.equal(text.includes(token), false, `token shown in: ${text}`);
          }
        }
      },
    );
    const port = await closedPort();
    const events: BreakwaterEvent[] = [];
    const fetch = createFetch({ use: [], onEvent: (event) => events.push(event) });
    const error = await fetch(`http://127.0.0.1:${port}${path}`).catch((thrown: unknown) => thrown);
    assert.ok(error instanceof NetworkError, String(error));
    for (const text of everythingShown(error, undefined, events)) {
      for (const token of PATH_TOKENS) {
        assert.equal(text.includes(token), false, `token shown in: ${text}`);
      }
    }
  }
});

// --- safeHeaders ---

test('safeHeaders keeps timing, rate-limit, request-id and content headers', () => {
  const kept = {
    'content-type': 'application/json',
    'content-length': '12',
    date: 'Sun, 29 Nov 2026 17:00:00 GMT',
    'retry-after': '7',
    'retry-after-ms': '7000',
    'x-should-retry': 'true',
    ratelimit: '"default";r=0;t=7',
    'ratelimit-policy': '"default";q=100;w=60',
    'x-ratelimit-reset': '1798563600',
    'x-ratelimit-remaining-tokens': '0',
    'anthropic-ratelimit-requests-reset': '2026-11-29T17:00:07Z',
    'x-request-id': 'req_1',
    'request-id': 'req_2',
    'cf-ray': '8a1b2c3d4e5f-AMS',
    'www-authenticate': 'Bearer resource_metadata="https://h.example/.well-known/oauth-protected-resource"',
  };
  assert.deepEqual(safeHeaders(new Headers(kept)), kept);
});

test('an HttpStatusError built from a replayed answer keeps Idempotent-Replayed: the breaker reads it to count the replay as nothing', async () => {
  // Dropped by the allowlist, a replay thrown inside circuitBreaker() (throwOnStatus() below
  // it) read as a fresh failure.
  await withServer(always({ status: 500, headers: { 'idempotent-replayed': 'true' } }), async (server) => {
    const fetch = createFetch({ use: [throwOnStatus()] });
    const error = await fetch(`${server.origin}/orders`, { method: 'POST', body: '{}' }).then(
      () => assert.fail('a 500 passed'),
      (thrown: unknown) => thrown,
    );
    assert.ok(error instanceof HttpStatusError, String(error));
    assert.equal(error.headers['idempotent-replayed'], 'true');
  });
});

test('safeHeaders drops every secret header', () => {
  const headers = new Headers();
  for (const name of SECRET_HEADERS) headers.set(name, 'secret-value-1');
  assert.deepEqual(safeHeaders(headers), {});
});

test('safeHeaders drops headers it does not know (an allowlist, not a denylist)', () => {
  const headers = new Headers({
    'x-session-token': 'secret-2',
    'x-goog-api-key': 'secret-3',
    'x-custom': 'v',
  });
  assert.deepEqual(safeHeaders(headers), {});
});

test('safeHeaders cuts long values to 256 characters', () => {
  const out = safeHeaders(new Headers({ 'x-request-id': 'r'.repeat(1_000) }));
  assert.equal(out['x-request-id'], 'r'.repeat(256));
});

test('safeHeaders of undefined is an empty object', () => {
  assert.deepEqual(safeHeaders(undefined), {});
});

test('isSafeHeader ignores case', () => {
  assert.equal(isSafeHeader('Retry-After'), true);
  assert.equal(isSafeHeader('X-RateLimit-Remaining-Requests'), true);
  assert.equal(isSafeHeader('AUTHORIZATION'), false);
});

test('SECRET_HEADERS names Authorization, Proxy-Authorization, cookies and API keys, none of them safe', () => {
  assert.deepEqual([...SECRET_HEADERS].sort(), [
    'api-key',
    'authorization',
    'cookie',
    'proxy-authorization',
    'set-cookie',
    'x-api-key',
    'x-goog-api-key',
  ]);
  for (const name of SECRET_HEADERS) assert.equal(isSafeHeader(name), false, name);
});

// --- end to end: nothing a person sees holds a secret ---

/** Everything of one failed call a person (or a log) might see, as text. */
function everythingShown(error: unknown, snapshot: unknown, events: readonly BreakwaterEvent[]): string[] {
  const shown = [String(error), ...events.map((event) => JSON.stringify(event))];
  if (error instanceof Error) shown.push(error.message, String(error.stack), JSON.stringify(error));
  // No snapshot when the runtime refused the request before any response.
  if (snapshot !== undefined) shown.push(JSON.stringify(snapshot));
  return shown;
}

test('secret response headers never reach the error, its JSON, the snapshot or the events', async () => {
  let answer: Record<string, string | string[]> = {};
  const handler = () => ({
    status: 503,
    headers: answer,
    body: '{"error":{"message":"upstream unavailable"}}',
  });
  await withServer(handler, async (server) => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(tokenSecret, visibleSecret), async (secret) => {
        answer = {
          'content-type': 'application/json',
          authorization: `Bearer ${secret}`,
          'proxy-authorization': `Basic ${secret}`,
          cookie: `session=${secret}`,
          'set-cookie': [`id=${secret}; Path=/; HttpOnly`, `other=${secret}`],
          'x-api-key': secret,
          'api-key': secret,
        };
        let received: Headers | undefined;
        const events: BreakwaterEvent[] = [];
        const capture = captureStatus();
        const fetch = createFetch({
          fetch: async (input, init) => {
            const response = await globalThis.fetch(input, init);
            received = response.headers;
            return response;
          },
          use: [throwOnStatus(), capture],
          onEvent: (event) => events.push(event),
        });
        const error = await fetch(`${server.origin}/v1/chat`).catch((thrown: unknown) => thrown);
        assert.equal(received?.get('x-api-key'), secret, 'the secret reached the client');
        assert.ok(error instanceof HttpStatusError, String(error));
        assert.equal(error.serverMessage, 'upstream unavailable');
        assert.deepEqual(
          events.map((event) => event.type),
          ['attempt', 'captured'],
        );
        const snapshot = capture.last(server.origin);
        assert.ok(snapshot !== undefined, 'snapshot !== undefined');
        for (const text of everythingShown(error, snapshot, events)) {
          assert.equal(shows(text, secret), false, `secret shown in: ${text}`);
        }
      }),
      { numRuns: 25 },
    );
  });
});

test('URL query values never reach the error, its JSON, the snapshot or the events', async () => {
  await withServer(
    () => ({ status: 503, body: 'down' }),
    async (server) => {
      await fc.assert(
        fc.asyncProperty(urlSecret, async (secret) => {
          const events: BreakwaterEvent[] = [];
          const capture = captureStatus();
          const fetch = createFetch({
            use: [throwOnStatus(), capture],
            onEvent: (event) => events.push(event),
          });
          const before = server.requests.length;
          const error = await fetch(`${server.origin}/p?token=${secret}&mode=fast`).catch(
            (thrown: unknown) => thrown,
          );
          assert.equal(server.requests[before]?.url, `/p?token=${secret}&mode=fast`, 'the secret was sent');
          assert.ok(error instanceof HttpStatusError, String(error));
          assert.equal(error.request?.url, `${server.origin}/p?token=${REDACTED}&mode=${REDACTED}`);
          const snapshot = capture.last(server.origin);
          assert.ok(snapshot !== undefined, 'snapshot !== undefined');
          for (const text of everythingShown(error, snapshot, events)) {
            assert.equal(shows(text, secret), false, `secret shown in: ${text}`);
          }
        }),
        { numRuns: 25 },
      );
    },
  );
});

test('URL userinfo and query values never reach what the chain throws, the snapshot or the events', async () => {
  await withServer(
    () => ({ status: 503, body: 'down' }),
    async (server) => {
      await fc.assert(
        fc.asyncProperty(urlSecret, async (secret) => {
          const events: BreakwaterEvent[] = [];
          const capture = captureStatus();
          const fetch = createFetch({
            use: [throwOnStatus(), capture],
            onEvent: (event) => events.push(event),
          });
          const url = `http://user:${secret}@127.0.0.1:${server.port}/p?token=${secret}`;
          // Deno and Bun send the userinfo as Basic auth (a 503 comes back); Node's fetch
          // refuses such a URL (Fetch standard). Either way, nothing shown may hold the secret.
          const thrown = await fetch(url).then(
            async (res) => {
              await res.body?.cancel();
              return assert.fail(`expected a throw, got HTTP ${res.status}`);
            },
            (error: unknown) => error,
          );
          assert.ok(events.length > 0, 'the call reached the chain');
          for (const text of everythingShown(thrown, capture.last(server.origin), events)) {
            assert.equal(shows(text, secret), false, `secret shown in: ${text}`);
          }
        }),
        { numRuns: 10 },
      );
    },
  );
});

/** Calls a server that answers 503 with `body`; returns the error and everything a person sees. */
async function failWithBody(body: string): Promise<{ error: HttpStatusError; shown: string[] }> {
  return withServer(
    () => ({ status: 503, headers: { 'content-type': 'application/json' }, body }),
    async (server) => {
      const events: BreakwaterEvent[] = [];
      const capture = captureStatus();
      const fetch = createFetch({ use: [throwOnStatus(), capture], onEvent: (event) => events.push(event) });
      const error = await fetch(`${server.origin}/v1`).catch((thrown: unknown) => thrown);
      assert.ok(error instanceof HttpStatusError, String(error));
      return { error, shown: everythingShown(error, capture.last(server.origin), events) };
    },
  );
}

test('an error body shows a redacted query value as [redacted], not [redacted]]', async () => {
  const { error } = await failWithBody('invalid callback https://h.example/cb?token=tk-9');
  assert.equal(error.body, `invalid callback https://h.example/cb?token=${REDACTED}`);
});

test('an error body keeps the compact JSON that follows a quoted URL', async () => {
  const { error } = await failWithBody('{"url":"https://a.example/x?k=s-8","msg":"quota"}');
  assert.equal(error.body, `{"url":"https://a.example/x?k=${REDACTED}","msg":"quota"}`);
});

test('a URL with JSON-escaped slashes in an error body never shows its userinfo or query values', async () => {
  const { error, shown } = await failWithBody(
    String.raw`{"error":"bad callback https:\/\/user:pw-7@h.example\/cb?token=tk-7"}`,
  );
  assert.equal(error.body, `{"error":"bad callback https://h.example/cb?token=${REDACTED}"}`);
  for (const text of shown) {
    assert.equal(shows(text, 'pw-7'), false, `password shown in: ${text}`);
    assert.equal(shows(text, 'tk-7'), false, `token shown in: ${text}`);
  }
});

test('a twice-encoded, quote()d or JSON-in-JSON URL in an error body never shows its userinfo or query values', async () => {
  const { error, shown } = await failWithBody(
    JSON.stringify({
      error: 'redirect_uri mismatch',
      got: 'https%253A%252F%252Fuser%253Apw-1%2540h.example%252Fcb%253Fstate%253Dtk-1',
      dsn: 'postgres%3A//user%3Apw-2%40db.internal/app%3Fsslkey%3Dtk-2',
      upstream: String.raw`{"url":"https\u003A\u002F\u002Fuser\u003Apw-3\u0040h.example\u002Fx\u003Ftoken\u003Dtk-3"}`,
    }),
  );
  assert.match(error.body ?? '', /h\.example%252Fcb/);
  assert.match(error.body ?? '', /db\.internal%2Fapp/);
  assert.match(error.body ?? '', /https:\/\/h\.example\/x\?token=\[redacted\]/);
  for (const text of shown) {
    for (const secret of ['pw-1', 'tk-1', 'pw-2', 'tk-2', 'pw-3', 'tk-3']) {
      assert.equal(shows(text, secret), false, `${secret} shown in: ${text}`);
    }
  }
});

test('a body cut inside the password of a twice-encoded, quote()d or JSON-in-JSON URL shows no part of the password', async () => {
  // The cut leaves an unfinished URL, which the snapshot leaves out from its scheme on.
  for (const url of [
    'https%253A%252F%252Fadmin%253A12345678%2540db.internal%252Fapp',
    'https%3A//admin%3A12345678%40db.internal/app',
    String.raw`https\\u003A\\/\\/admin:12345678@db.internal\\/app`,
    String.raw`https:\\u002F\\u002Fadmin:12345678@db.internal\\u002Fapp`,
  ]) {
    const body = `{"error":"cannot reach ${url} now"}`;
    const shown = await withServer(
      () => ({ status: 503, headers: { 'content-type': 'text/plain' }, body }),
      async (server) => {
        const capture = captureStatus({ bodyBytes: body.indexOf('5678') });
        const fetch = createFetch({ use: [capture] });
        await (await fetch(server.origin)).body?.cancel();
        return capture.last(server.origin)?.body;
      },
    );
    assert.ok(!shown?.includes('1234'), `no part of the password in ${JSON.stringify(shown)}`);
    assert.ok(shown?.startsWith('{"error":"cannot reach'), `the text before the URL is kept: ${shown}`);
  }
});

// --- relative URLs a server quotes back ---

test('redactText hides the query values of a relative URL, keeping its path and parameter names', () => {
  // A server quotes the path it was asked for back, query and all, without scheme or host.
  assert.equal(
    redactText('{"error":"agent down at /a2a?api_key=sk-live-123&x=1"}'),
    `{"error":"agent down at /a2a?api_key=${REDACTED}&x=${REDACTED}"}`,
  );
  assert.equal(redactText('GET /v1/items?token=abc failed'), `GET /v1/items?token=${REDACTED} failed`);
  assert.equal(redactText('/?token=abc'), `/?token=${REDACTED}`);
  assert.equal(redactText("path='/v1/x?token=abc'"), `path='/v1/x?token=${REDACTED}'`);
  assert.equal(redactText('path=/v1/x?token=abc'), `path=/v1/x?token=${REDACTED}`);
  assert.equal(redactText('(see /v1/x?token=abc)'), `(see /v1/x?token=${REDACTED})`);
  // PHP's json_encode escapes `/` as `\/`.
  assert.equal(
    redactText(String.raw`{"error":"at \/v1\/x?token=abc"}`),
    String.raw`{"error":"at \/v1\/x?token=${REDACTED}"}`,
  );
  // A parameter with no `=` among others, a name holding `%` or `:`: shown as for absolute URLs.
  assert.equal(redactText('/x?flag&a=1'), `/x?flag=${REDACTED}&a=${REDACTED}`);
  assert.equal(redactText('/x?a%3Ab=1'), `/x?${REDACTED}=${REDACTED}`);
});

test('redactText hides the query values of a relative URL right after a colon', () => {
  // `fmt.Errorf("failed:%s", path)` and the like: no space between the colon and the path.
  assert.equal(redactText('failed:/a2a?api_key=sk-live-7'), `failed:/a2a?api_key=${REDACTED}`);
  assert.equal(
    redactText('{"error":"upstream failed:/v1/items?token=tk-rel-8&x=1"}'),
    `{"error":"upstream failed:/v1/items?token=${REDACTED}&x=${REDACTED}"}`,
  );
  assert.equal(
    redactText(String.raw`{"e":"at:\/a2a?key=k-9"}`),
    String.raw`{"e":"at:\/a2a?key=${REDACTED}"}`,
  );
  // A colon inside the path (a Google method name) still belongs to it.
  assert.equal(
    redactText('failed:/v1beta/models/gemini-pro:generateContent?key=AIza-rel-10'),
    `failed:/v1beta/models/gemini-pro:generateContent?key=${REDACTED}`,
  );
});

test('redactText keeps the punctuation that follows a relative URL, as it does after an absolute one', () => {
  for (const mark of [',', '.', ';', ':', '?', '`']) {
    assert.equal(
      redactText(`see /a2a?api_key=sk-live-11${mark} then retry`),
      `see /a2a?api_key=${REDACTED}${mark} then retry`,
    );
    assert.equal(
      redactText(`see https://h.example/a2a?api_key=sk-live-11${mark} then retry`),
      `see https://h.example/a2a?api_key=${REDACTED}${mark} then retry`,
    );
  }
  assert.equal(redactText('see /a2a?a=1&b=2., then'), `see /a2a?a=${REDACTED}&b=${REDACTED}., then`);
  // Brackets a value was redacted into stay: redacting again changes nothing.
  assert.equal(redactText(`see /a2a?a=${REDACTED}.`), `see /a2a?a=${REDACTED}.`);
});

test('a relative URL after a colon or before punctuation never shows its query values, and redacting twice equals once', () => {
  fc.assert(
    fc.property(
      fc.constantFrom('failed:', 'at ', '("', 'x=', ''),
      fc.constantFrom('/a2a', '/', '/v1/m:gen', '\\/v1\\/x'),
      urlSecret,
      fc.string({ unit: fc.constantFrom(',', '.', ';', ':', '?', '`', '/', ':/', ' ', 'a', ')', '"') }),
      (before, path, secret, after) => {
        // Known limit, as before: a '://' with no scheme before it (`"://://:/`) is read as
        // an unparseable URL, and the placeholder again on a second pass.
        fc.pre(!after.includes('://'));
        const text = `${before}${path}?k=${secret}${after}`;
        const once = redactText(text);
        assert.equal(shows(once, secret), false, once);
        assert.equal(redactText(once), once);
      },
    ),
    { numRuns: 1_000 },
  );
});

test('redactText leaves prose with a slash and a question mark but no query value as it is', () => {
  for (const prose of [
    'Is the path /usr/bin? Check it.',
    'and/or? x=1',
    'a ratio of 1/2?x=3 is odd',
    'retry /v1/items? no = yes',
    'GET /v1/items?token failed',
    '/ ? = & /',
    'see https://h.example/x for help? a=b',
  ]) {
    assert.equal(redactText(prose), prose);
  }
});

test('redactText is idempotent on relative URLs: redacting twice equals once', () => {
  for (const text of [
    '{"error":"agent down at /a2a?api_key=sk-live-123&x=1"}',
    '/x?%C3%A4=1&a+b=2&[redacted]=3&&c=',
    'at /x?next=https://u:pw@h/y?k=v&z=1 then (/y?k=1)',
  ]) {
    const once = redactText(text);
    assert.equal(redactText(once), once);
  }
  fc.assert(
    fc.property(
      fc.string({ unit: fc.constantFrom('/', '?', '=', '&', 'a', ' ', '"', '%', '+', '(', ')', '\\') }),
      (text) => {
        const once = redactText(text);
        assert.equal(redactText(once), once);
      },
    ),
  );
});

test('a relative URL never shows its query values, whatever they hold', () => {
  fc.assert(
    fc.property(urlSecret, fc.constantFrom('/a2a', '/', '/v1/items', '\\/v1\\/x'), (secret, path) => {
      for (const text of [`down at ${path}?api_key=${secret}`, `{"e":"${path}?x=1&t=${secret}&y=2"}`]) {
        assert.equal(shows(redactText(text), secret), false, redactText(text));
      }
    }),
  );
});

test('redactText takes linear time on 512 KiB of hostile relative-URL text', () => {
  assertLinear([
    (chars) => fill('/?a=', chars),
    (chars) => fill('/', chars),
    (chars) => fill(' /', chars),
    (chars) => fill('=/', chars),
    (chars) => fill(' /a?b', chars),
    (chars) => fill('/a=', chars),
    (chars) => `/${fill('?', chars)}`,
    (chars) => `/?${fill('a', chars)}`,
    (chars) => fill(' /?', chars),
    (chars) => fill('"/x?', chars),
  ]);
});

test('redactText takes linear time on 512 KiB of relative-URL text full of colons or closing punctuation', () => {
  assertLinear([
    // A `:/` starts a relative URL and ends the path and names before it; a value's
    // closing punctuation is given back to the text.
    (chars) => fill(':/', chars),
    (chars) => fill('/?a:/', chars),
    (chars) => `/?a=b${fill(',', chars)}`,
  ]);
});

test('redactText hides the query values of a percent-encoded relative URL, left encoded', () => {
  // An OAuth server quoting the redirect_uri it was given, as it was given.
  assert.equal(
    redactText('invalid redirect_uri=%2Fcb%3Ftoken%3Dsecret123'),
    `invalid redirect_uri=%2Fcb%3Ftoken%3D${REDACTED}`,
  );
  assert.equal(
    redactText('{"error":"invalid_request","redirect_uri":"%2Fcb%3Fstate%3Dst-1%26token%3Dtk-1"}'),
    `{"error":"invalid_request","redirect_uri":"%2Fcb%3Fstate%3D${REDACTED}%26token%3D${REDACTED}"}`,
  );
  // Any case; encoded twice; Python's quote() ('/' left as it is); Go's url.PathEscape ('='
  // and '&' left as they are); a fragment (an implicit-flow access token) dropped.
  assert.equal(redactText('next=%2fcb%3ftoken%3dtk-2.'), `next=%2fcb%3ftoken%3d${REDACTED}.`);
  assert.equal(redactText('next=%252Fcb%253Ftoken%253Dtk-3'), `next=%252Fcb%253Ftoken%253D${REDACTED}`);
  assert.equal(redactText('path /v1/cb%3Ftoken%3Dtk-4 refused'), `path /v1/cb%3Ftoken%3D${REDACTED} refused`);
  assert.equal(redactText('at %2Fcb%3Ftoken=tk-5&x=1'), `at %2Fcb%3Ftoken=${REDACTED}&x=${REDACTED}`);
  assert.equal(redactText('back to %2Fcb%23access_token%3Dtk-6'), 'back to %2Fcb');
  // A query percent-encoded into a URL's path (quote(url, safe=':/')).
  assert.equal(
    redactText('dsn https://db.internal:5432/x%3Ftoken%3Dtk-7 down'),
    `dsn https://db.internal:5432/x%3Ftoken%3D${REDACTED} down`,
  );
  // Encoded slashes with no encoded '?' or '#' stay as they are.
  for (const text of ['a 50%2F50 split', 'see %2Fwiki%2FWhat%3F', 'GET %2Fv1%2Fitems failed']) {
    assert.equal(redactText(text), text);
  }
});

test('a percent-encoded relative URL never shows its query values, and redacting twice equals once', () => {
  fc.assert(
    fc.property(
      fc.constantFrom('redirect_uri=', '"', ' ', '', 'failed:'),
      fc.constantFrom('/cb', '/', '/a/b', "/it's", '/a.b'),
      fc.constantFrom(
        (query: string) => encodeURIComponent(query),
        (query: string) => encodeURIComponent(encodeURIComponent(query)),
        (query: string) => encodeURIComponent(query).replaceAll('%2F', '/'),
        (query: string) => encodeURIComponent(query).replace(/%(3D|26)/g, (byte) => decodeURIComponent(byte)),
      ),
      urlSecret,
      fc.constantFrom('', '.', '"', "'", ')', ', then', '&', ' x=1'),
      (before, path, spell, secret, after) => {
        const text = `${before}${spell(`${path}?a=1&token=${secret}#${secret}`)}${after}`;
        assertHidden(text, secret);
      },
    ),
    { numRuns: 1_000 },
  );
});

test('redactText takes linear time on 512 KiB of hostile percent-encoded relative-URL text', () => {
  assertLinear([
    (chars) => fill('%2F%3Fa%3D', chars),
    (chars) => fill("%2F'", chars),
    (chars) => `%2F${fill('%253F', chars)}`,
    (chars) => fill('/a%', chars),
  ]);
});

test('redactText takes linear time on many short encoded relative URLs and on webhook-shaped paths', () => {
  // A callback per URL, a token pattern per path segment: 128 KiB is enough to tell.
  assertLinear(
    [
      (chars) => fill(' /%3F', chars),
      (chars) => `%2F%3F${fill('%26', chars)}`,
      (chars) => `http://h${fill('/workflows/T1/A1', chars)}`,
      (chars) => `http://h${fill('/IncomingWebhook', chars)}/x`,
    ],
    32 * 1024,
  );
});

test('redactText hides the query values of a URL whose "?" is left as it is and whose "=" and "&" are encoded', () => {
  // Python's quote(path_with_query, safe='/?'): the '?' as it is, '=' and '&' encoded.
  assert.equal(
    redactText('invalid redirect_uri /cb?token%3Dtk-40%26x%3D1'),
    `invalid redirect_uri /cb?token%3D${REDACTED}%26x%3D${REDACTED}`,
  );
  assert.equal(redactText('{"next":"/cb?token%253Dtk-41"}'), `{"next":"/cb?token%253D${REDACTED}"}`);
  assert.equal(redactText('see /cb?a=1&token%3Dtk-42.'), `see /cb?a=${REDACTED}&${REDACTED}=${REDACTED}.`);
  // In an absolute URL the parser reads 'token=tk-43' as a parameter's name.
  assert.equal(
    redactText('at https://h.example/cb?token%3Dtk-43'),
    `at https://h.example/cb?${REDACTED}=${REDACTED}`,
  );
  assert.equal(
    redactUrl('https://h.example/cb?token%3Dtk-44'),
    `https://h.example/cb?${REDACTED}=${REDACTED}`,
  );
});

test('redactText hides the query values after a "?" left as it is that follows an encoded "?"', () => {
  // A path holding an encoded '?' (encoded before), then quote(path, safe='/?').
  assert.equal(redactText('see /what%3F?token%3Dtk-46'), `see /what%3F${REDACTED}%3D${REDACTED}`);
  assert.equal(
    redactText('"%2Fa%253Fb?x%3D1%26token%3Dtk-47"'),
    `"%2Fa%253F${REDACTED}%3D${REDACTED}%26token%3D${REDACTED}"`,
  );
});

test('redactText leaves text with a "?" but no encoded "=" after it as it is', () => {
  for (const prose of [
    'Is the path /usr/bin? 100% sure.',
    'and/or? 50%',
    'GET /x?y%20z failed',
    'see /wiki/What?%E2%9C%93 and /a?b%26c',
    '/a%2Fb?c',
    '/?%',
  ]) {
    assert.equal(redactText(prose), prose);
  }
});

test('a URL whose "?" is left as it is and whose "=" and "&" are encoded never shows its query values, and redacting twice equals once', () => {
  fc.assert(
    fc.property(
      fc.constantFrom('redirect_uri=', '"', ' ', '', 'failed:', 'https://h.example', 'http://h.example:8080'),
      fc.constantFrom('/cb', '/', '/a/b', '/a.b', '/a%2Fb'),
      fc.constantFrom(
        (query: string) => pyQuote(query, '/?'),
        (query: string) => pyQuote(pyQuote(query, '/?'), '/?'),
        (query: string) => pyQuote(query, '/?&'),
      ),
      urlSecret,
      fc.constantFrom('', '.', '"', "'", ')', ', then', '&', ' x=1'),
      (before, path, spell, secret, after) => {
        const text = `${before}${path}${spell(`?a=1&token=${secret}#${secret}`)}${after}`;
        assertHidden(text, secret);
      },
    ),
    { numRuns: 1_000 },
  );
});

test('redactText takes linear time on 512 KiB of hostile text with "?" as it is and encoded "=" or "&"', () => {
  assertLinear([
    (chars) => fill('/?%3D', chars),
    (chars) => fill('/a?%', chars),
    (chars) => `/${fill('?', chars)}%3D`,
    (chars) => `/x?${fill('?%26', chars)}`,
    (chars) => `/x%3F${fill('?a%3D', chars)}`,
    (chars) => fill('/?a ', chars),
    // Prose '?'s, each ending a run read again after it; then one query of them all.
    (chars) => fill('/%?', chars),
    (chars) => `${fill('/%?', chars)}%3D`,
    (chars) => fill('/%%23?', chars),
  ]);
});

test('a percent-encoded relative URL in an error body never shows its query values', async () => {
  const { error, shown } = await failWithBody(
    '{"error":"invalid_request","error_description":"bad redirect_uri=%2Fcb%3Ftoken%3Dtk-rel-12"}',
  );
  assert.match(error.body ?? '', /redirect_uri=%2Fcb%3Ftoken%3D\[redacted\]/);
  for (const text of shown) assert.equal(text.includes('tk-rel-12'), false, `token shown in: ${text}`);
});

test('an error body quoting a relative URL shows none of its query values in the error, the snapshot or the events', async () => {
  const { error, shown } = await failWithBody('{"error":"agent down at /a2a?api_key=sk-live-123&x=1"}');
  assert.equal(error.body, `{"error":"agent down at /a2a?api_key=${REDACTED}&x=${REDACTED}"}`);
  assert.equal(error.serverMessage, `agent down at /a2a?api_key=${REDACTED}&x=${REDACTED}`);
  for (const text of shown) assert.equal(text.includes('sk-live-123'), false, `token shown in: ${text}`);
  const plain = await failWithBody('GET /v1/items?token=tk-rel-4 failed');
  for (const text of plain.shown) assert.equal(text.includes('tk-rel-4'), false, `token shown in: ${text}`);
});

test('wrapHttpError() shows none of the query values of a relative URL a server quoted', () => {
  const said: StatusSnapshot = {
    key: 'agents',
    method: 'POST',
    url: 'https://agents.example/a2a',
    status: 503,
    statusText: 'Service Unavailable',
    headers: {},
    body: '{"error":"agent down at /a2a?api_key=sk-live-5&x=1"}',
    serverMessage: 'agent down at /a2a?api_key=sk-live-5&x=1',
    retryAfterMs: undefined,
    at: 0,
  };
  const error = wrapHttpError(503, said, new Error('SSE error: Non-200 status code (503)'));
  for (const text of [
    error.message,
    error.statusText,
    error.body,
    error.serverMessage ?? '',
    JSON.stringify(error),
  ]) {
    assert.equal(text.includes('sk-live-5'), false, `token shown in: ${text}`);
  }
  assert.equal(error.serverMessage, `agent down at /a2a?api_key=${REDACTED}&x=${REDACTED}`);
});

test('redactText hides a password or query value holding a "$" in a URL spelled by Go’s url.PathEscape (it leaves "$" as it is)', () => {
  fc.assert(
    fc.property(
      fc.constantFrom('https://admin:p$ss-', 'https://h/x?token=tk$', '/cb?a=1&token=tk$', '/cb?token=$tk'),
      fc.constantFrom('', '$', 'a$b'),
      aroundUrl,
      (url, tail, [open, close]) => {
        assertHidden(`${open}${goPathEscape(`${url}${MARK}${tail}@h/`)}${close}`);
      },
    ),
    { numRuns: 300 },
  );
});

test('redactText hides the query values and password after a "&" Go’s encoding/json wrote as \\u0026 in a URL whose "&" was left as it is', () => {
  fc.assert(
    fc.property(
      fc.constantFrom(
        goPathEscape(`https://admin:p&ss-${MARK}@h/x`),
        goPathEscape(`https://h/x?a=1&token=${MARK}`),
        goPathEscape(`/cb?a=1&token=${MARK}`),
        pyQuote(`/cb?a=1&token=${MARK}`, '/?&'),
        pyQuote(`https://h/cb?a=1&token=${MARK}`, ':/?=&'),
      ),
      fc.constantFrom('invalid redirect ', 'failed:', 'redirect_uri='),
      (url, before) => {
        // Go's json.Marshal escapes '&', '<' and '>' as \u0026, \u003c and \u003e.
        assertHidden(JSON.stringify({ error: `${before}${url}` }).replaceAll('&', '\\u0026'));
      },
    ),
  );
});

test('redactText is idempotent on a percent-encoded URL whose fragment is followed by a \\u0026 (Go’s encoding/json)', () => {
  for (const text of ['{"error":"see https%3A%2F%2Fh%23f\\u0026a%40b"}', 'https%3A%2F%2F%3d%23\\u0026%40']) {
    const once = redactText(text);
    assert.equal(redactText(once), once);
  }
});

test('redactText hides the query values of a relative URL whose slashes a JSON encoder wrote as \\u002F', () => {
  // Encoders that escape every '/' (Jackson's, ESAPI-style) write \u002F, not \/.
  assert.equal(
    redactText(String.raw`{"next":"\u002Fcb?token=tk-u2f-1&x=1"}`),
    String.raw`{"next":"\u002Fcb?token=${REDACTED}&x=${REDACTED}"}`,
  );
  assert.equal(
    redactText(String.raw`failed:\u002Fv1\u002Fitems?key=tk-u2f-2`),
    String.raw`failed:\u002Fv1\u002Fitems?key=${REDACTED}`,
  );
  assert.equal(
    redactText(String.raw`see \u002fcb?token=tk-u2f-3.`),
    String.raw`see \u002fcb?token=${REDACTED}.`,
  );
  // The \/ spelling was hidden already.
  assert.equal(
    redactText(String.raw`{"next":"\/cb?token=tk-u2f-4"}`),
    String.raw`{"next":"\/cb?token=${REDACTED}"}`,
  );
});

test('redactText takes linear time on relative-URL text written with \\u002F', () => {
  // A `:\u002F` ends a path or a name and starts a word, as a `:/` does. 128 KiB is enough to tell.
  assertLinear(
    [
      (chars) => fill('\\u002F', chars),
      (chars) => fill(':\\u002F', chars),
      (chars) => fill(' \\u002Fa?b', chars),
      (chars) => fill('\\u002F?a:\\u002F', chars),
    ],
    128 * 1024,
  );
});

test('redactText hides the token of a Telegram, Slack, Discord, Teams or Zapier URL percent-encoded in a body, once or twice, keeping what names the hook', () => {
  // A server quotes the webhook it failed to call in a query (`url=https%3A%2F%2F...`).
  assert.equal(
    redactText(
      `invalid url=${encodeURIComponent(`https://hooks.slack.com/services/T00000000/B00000000/${SLACK_TOKEN}`)}`,
    ),
    `invalid url=https%3A%2F%2Fhooks.slack.com%2Fservices%2FT00000000%2FB00000000%2F${REDACTED}`,
  );
  assert.equal(
    redactText(`"https%3A//api.telegram.org/bot123456789%3A${TELEGRAM_TOKEN}/sendMessage%3Fchat_id%3D42"`),
    `"https%3A//api.telegram.org%2Fbot123456789%3A${REDACTED}%2FsendMessage%3Fchat_id%3D${REDACTED}"`,
  );
  for (const path of TOKEN_PATHS) {
    const url = `https://h.example${path}`;
    // encodeURIComponent once and twice, Python's quote() (leaves '/'), and Go's url.PathEscape (leaves ':').
    for (const encoded of [
      encodeURIComponent(url),
      encodeURIComponent(encodeURIComponent(url)),
      encodeURIComponent(url).replaceAll('%2F', '/'),
      encodeURIComponent(url).replaceAll('%3A', ':').replaceAll('%40', '@'),
    ]) {
      const once = redactText(`failed to post to ${encoded}, giving up`);
      for (const token of PATH_TOKENS) assert.ok(!once.includes(token), once);
      assert.match(once, /\[redacted\]/, once);
      assert.equal(redactText(once), once);
    }
  }
});

test('redactText takes linear time on percent-encoded webhook-shaped paths', () => {
  assertLinear(
    [
      (chars) => `https%3A%2F%2Fh${fill('%2Fworkflows%2FT1%2FA1', chars)}`,
      (chars) => `https%3A//h${fill('/services/T1/B1/1', chars)}`,
      (chars) => `https%3A%2F%2Fh${fill('%2FIncomingWebhook', chars)}%2Fx`,
      (chars) => fill('https%3A%2F%2Fh%2Fwebhooks%2F1%2Fx ', chars),
    ],
    128 * 1024,
  );
});

test('redactText hides the token of a webhook URL percent-encoded with lower-case escapes (.NET’s HttpUtility.UrlEncode)', () => {
  assert.equal(
    redactText(`url=https%3a%2f%2fhooks.slack.com%2fservices%2fT00000000%2fB00000000%2f${SLACK_TOKEN}`),
    `url=https%3a%2f%2fhooks.slack.com%2Fservices%2FT00000000%2FB00000000%2F${REDACTED}`,
  );
  const telegram = redactText(
    `url=https%3a%2f%2fapi.telegram.org%2fbot123456789%3a${TELEGRAM_TOKEN}%2fsendMessage`,
  );
  assert.ok(!telegram.includes(TELEGRAM_TOKEN), telegram);
  assert.equal(redactText(telegram), telegram);
});

test('redactUrl and redactText hide a Telegram bot token whose ":" the client percent-encoded in the path (encodeURIComponent of the token)', () => {
  // A client that encodes the token as a path segment writes `bot123456789%3AAAH...`; the
  // URL parser keeps the escape, and a server may quote that URL encoded once more.
  const url = `https://api.telegram.org/bot123456789${encodeURIComponent(`:${TELEGRAM_TOKEN}`)}/sendMessage`;
  for (const shown of [
    redactUrl(url),
    redactUrl(url.replace('%3A', '%3a')),
    redactText(`POST ${url} failed`),
    redactText(`url=${encodeURIComponent(url)}`),
    redactText(`url=${encodeURIComponent(url).toLowerCase()}`),
  ]) {
    assert.ok(!shown.includes(TELEGRAM_TOKEN) && !shown.includes(TELEGRAM_TOKEN.toLowerCase()), shown);
    assert.match(shown, /bot123456789%(?:25)?3[Aa]\[redacted\]/, shown);
    assert.equal(redactText(shown), shown);
  }
});

test('redactText hides the userinfo and webhook token of a JSON-escaped URL percent-encoded (PHP’s urlencode(json_encode(...)))', () => {
  // PHP's json_encode writes `/` as `\/`, and urlencode() then gives `https%3A%5C%2F%5C%2F...`
  // (an OAuth state or a callback carrying a JSON object, quoted back by the server).
  const json = (url: string) => JSON.stringify({ next: url }).replaceAll('/', '\\/');
  for (const encode of [encodeURIComponent, (text: string) => encodeURIComponent(encodeURIComponent(text))]) {
    const userinfo = redactText(
      `invalid state=${encode(json('https://admin:Sup3r-s3cret-pw@h.example/x?k=v'))}`,
    );
    assert.ok(!userinfo.includes('Sup3r'), userinfo);
    assert.equal(redactText(userinfo), userinfo);
    const hook = redactText(
      `invalid state=${encode(json(`https://hooks.slack.com/services/T00000000/B00000000/${SLACK_TOKEN}`))}`,
    );
    assert.ok(!hook.includes(SLACK_TOKEN) && hook.includes('hooks.slack.com'), hook);
    assert.equal(redactText(hook), hook);
  }
});

test('redactText takes linear time on percent-encoded JSON-escaped URL text', () => {
  assertLinear(
    [
      (chars) => fill('https%3A%5C%2F%5C%2Fh%5C%2F', chars),
      (chars) => `https%3A%5C%2F%5C%2Fh${fill('%5C%2Fservices%5C%2FT1%5C%2FB1', chars)}`,
      (chars) => fill('%3A%5C%2F%5C', chars),
      (chars) => `https%3A%2F%2Fh${fill('%2Fbot1%25253A', chars)}`,
    ],
    128 * 1024,
  );
});

test('redactText hides the query values of a relative URL whose "?", "=" and "&" a JSON encoder wrote as \\u003F, \\u003D and \\u0026', () => {
  // An encoder that writes `/` as \u002F (Jackson's, ESAPI-style) escapes `?`, `=` and `&` too.
  assert.equal(
    redactText(String.raw`{"next":"\u002Fcb\u003Ftoken\u003Dtk-u3f-1\u0026x\u003D1"}`),
    String.raw`{"next":"\u002Fcb\u003Ftoken\u003D${REDACTED}\u0026x\u003D${REDACTED}"}`,
  );
  assert.equal(
    redactText(String.raw`failed at \u002Fcb?token\u003Dtk-u3f-2, retry`),
    String.raw`failed at \u002Fcb?token\u003D${REDACTED}, retry`,
  );
  assert.equal(
    redactText(String.raw`{"next":"\/cb\u003ftoken\u003dtk-u3f-3","m":"x"}`),
    String.raw`{"next":"\/cb\u003ftoken\u003d${REDACTED}","m":"x"}`,
  );
  assert.equal(
    redactText(String.raw`failed:\u002Fcb\u003Ftoken=tk-u3f-4`),
    String.raw`failed:\u002Fcb\u003Ftoken=${REDACTED}`,
  );
  for (const shown of [
    redactText(String.raw`{"next":"\u002Fcb\u003Ftoken\u003Dtk-u3f-1\u0026x\u003D1"}`),
    redactText(String.raw`\u002Fcb?a=tk-u3f-5\u0026b\u003Dtk-u3f-6`),
  ]) {
    assert.ok(!shown.includes('tk-u3f'), shown);
    assert.equal(redactText(shown), shown);
  }
  // Prose with an escaped `?` and no `=` after it, or no path before it, stays as it is.
  for (const prose of [String.raw`is \u002Fusr\u002Fbin there\u003F yes`, String.raw`a\u003Fb\u003Dc`]) {
    assert.equal(redactText(prose), prose);
  }
});

test('redactText takes linear time on relative-URL text written with \\u003F, \\u003D and \\u0026', () => {
  assertLinear(
    [
      (chars) => fill('\\u003F', chars),
      (chars) => fill('=\\u002F\\u003D', chars),
      (chars) => `\\u002F\\u003F${fill('a\\u003Db\\u0026', chars)}`,
      (chars) => fill(' \\u002Fa\\u003Fb\\u003D', chars),
      (chars) => fill(':\\u002F=\\/', chars),
      (chars) => `\\u002F\\u003Fa\\u003D${fill(',', chars)}a`,
    ],
    128 * 1024,
  );
});

test('redactText hides the token of a Slack, Discord or Telegram webhook path quoted without its host, and keeps ordinary API paths', () => {
  for (const path of [
    `/services/T00000000/B00000000/${SLACK_TOKEN}`,
    `/api/webhooks/123456789/${DISCORD_TOKEN}`,
    `/bot123456789:${TELEGRAM_TOKEN}/sendMessage`,
  ]) {
    for (const written of [
      path,
      encodeURIComponent(path),
      encodeURIComponent(encodeURIComponent(path)),
      path.replaceAll('/', '\\/'),
      path.replaceAll('/', '\\u002F'),
    ]) {
      const shown = redactText(`{"error":"post to ${written} failed"}`);
      for (const token of [SLACK_TOKEN, DISCORD_TOKEN, TELEGRAM_TOKEN])
        assert.ok(!shown.includes(token), shown);
      assert.match(shown, /\[redacted\]/, shown);
      assert.equal(redactText(shown), shown);
    }
  }
  for (const ordinary of [
    '/api/v1/services/items/123',
    '/services/billing/invoices/2024',
    '/api/webhooks/123/deliveries',
    '/v1/bots/123/messages',
  ]) {
    assert.equal(redactText(`GET ${ordinary} failed`), `GET ${ordinary} failed`);
  }
});

test('redactText takes linear time on webhook-shaped paths quoted without their host', () => {
  assertLinear(
    [
      (chars) => fill('/services/T1/B1/services', chars),
      (chars) => fill('%2Fwebhooks%2F1', chars),
      (chars) => `/bot1${fill('%25', chars)}`,
      (chars) => `/services/T${fill('A', chars)}`,
      (chars) => fill('\\u002Fbot1\\u002F', chars),
    ],
    128 * 1024,
  );
});

test("a header value fetch refuses (a token with a line break in it) is not shown by the runtime's error: Node's and Deno's fetch quote it", async () => {
  const secret = `${MARK}Tok3nFromCliOutput`;
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [captureStatus(), throwOnStatus()] });
    for (const value of [
      `Bearer ${secret}\nwarning: update available`,
      `Bearer ${secret}\0`,
      `{"token": "${secret}",\n"scope": "read"}`,
    ]) {
      const error = await fetch(`${server.origin}/v1/models`, { headers: { authorization: value } }).then(
        () => assert.fail('fetch took a header value with a line break'),
        (thrown: unknown) => thrown,
      );
      for (const shown of [
        inspect(error, { depth: Number.POSITIVE_INFINITY }),
        JSON.stringify(error),
        String(error),
      ])
        assert.ok(!shown.includes(MARK), `the credential shown: ${shown}`);
    }
    assert.equal(server.requests.length, 0);
  });
});

test('redactText hides a refused header value fetch quotes after words put before it, and takes linear time on text shaped like one', () => {
  // Only the start of the text was read: a rethrow's prefix ("request failed: ") kept the token.
  const secret = `${MARK}Tok3nFromCliOutput`;
  for (const text of [
    `request failed: Headers.append: "Bearer ${secret}\nwarning" is an invalid header value.`,
    `Error: auth: TypeError: Invalid header value: "Bearer ${secret}\n"`,
  ]) {
    const shown = redactText(text);
    assert.ok(!shown.includes(MARK), shown);
    assert.match(shown, /\[redacted\]/, shown);
    assert.equal(redactText(shown), shown);
  }
  assertLinear([
    (chars) => fill('Headers.a', chars),
    (chars) => fill('Headers.a: "', chars),
    (chars) => `${fill('invalid header value: "', chars)}x`,
    (chars) => `Headers.append: "${fill('a', chars)}`,
  ]);
});

test('redactText hides the values of credential-named parameters in a form body quoted in text (an OAuth refresh’s), keeping the names and the other values', () => {
  const body = `grant_type=refresh_token&refresh_token=RT-${MARK}abc123&client_secret=CS-${MARK}xyz789&scope=read`;
  const shown = `grant_type=refresh_token&refresh_token=${REDACTED}&client_secret=${REDACTED}&scope=read`;
  assert.equal(redactText(`POST /token failed, body: ${body}`), `POST /token failed, body: ${shown}`);
  assert.equal(redactText(`{"data":"${body}","status":400}`), `{"data":"${shown}","status":400}`);
  assert.equal(redactText(`sent ${body}.`), `sent ${shown}.`);
  assert.equal(redactText(`(password=${MARK}pw, user=ann)`), `(password=${REDACTED}, user=ann)`);
  // A Java or Kotlin map's toString(), an HTTP client's headers and form among them.
  assert.equal(
    redactText(`{Authorization=Bearer ${MARK}1, X-Amz-Credential=${MARK}2, client_secret=${MARK}3}`),
    `{Authorization=${REDACTED} ${REDACTED}, X-Amz-Credential=${REDACTED}, client_secret=${REDACTED}}`,
  );
  // Go's encoding/json writes a `&` as \u0026: the secrets are hidden all the same.
  assertHidden(
    `{"body":"grant_type=authorization_code\\u0026code=${MARK}c0de\\u0026code_verifier=${MARK}v"}`,
  );
  for (const text of [body, `code_verifier=${MARK}v1&client_assertion_type=jwt&client_secret=${MARK}s`])
    assertHidden(text);
  // Names that are no credential's keep their values; an empty value stays empty.
  for (const kept of [
    'grant_type=refresh_token&scope=read',
    'retry in 3s (attempt=2, limit=5)',
    'token= missing',
  ])
    assert.equal(redactText(kept), kept);
});

test('redactText hides the credential after a Bearer, Basic or DPoP scheme quoted in text, not the words a server says what is missing with', () => {
  const jwt = `eyJhbGciOiJIUzI1NiJ9.${MARK}.sig-_0`;
  assert.equal(redactText(`Authorization: Bearer ${jwt}`), `Authorization: Bearer ${REDACTED}`);
  assert.equal(redactText(`sent "bearer RT-${MARK}1" twice`), `sent "bearer ${REDACTED}" twice`);
  assert.equal(
    redactText(`Authorization: Basic dXNlcjpwYXNz${MARK}==, then`),
    `Authorization: Basic ${REDACTED}, then`,
  );
  assert.equal(redactText(`DPoP ${jwt}`), `DPoP ${REDACTED}`);
  assertHidden(`{"headers":{"Authorization":"Bearer  ${jwt}"}}`);
  for (const kept of [
    'Bearer token required',
    'Basic auth is not supported',
    'WWW-Authenticate: Bearer realm="api", error="invalid_token"',
    'Bearer resource_metadata="https://h/.well-known/oauth-protected-resource"',
    `Bearer ${REDACTED}`,
  ])
    assert.equal(redactText(kept), kept);
});

test('redactText takes linear time on 512 KiB of hostile form-pair and Bearer text', () => {
  assertLinear([
    (chars) => fill('key=', chars),
    (chars) => `token=${fill(',', chars)}`,
    (chars) => `token=${fill('.\\', chars)}`,
    (chars) => fill('token=\\u0026', chars),
    (chars) => fill('=a', chars),
    (chars) => fill('&a', chars),
    (chars) => fill('a', chars),
    (chars) => fill('Bearer ', chars),
    (chars) => `bearer${fill(' ', chars)}`,
    (chars) => `Bearer ${fill('a-', chars)}`,
    (chars) => `Basic a${fill('=', chars)}-`,
  ]);
});

test('redactText hides an OAuth authorization code, a PKCE verifier and one-time codes in form text, not a status or error code under a name holding "code"', () => {
  // Any name holding "code" lost its value: `code=500`, `status_code=404`, `error_code=E42`
  // said nothing. An authorization code holds 128 bits at least (RFC 6749 §10.10): it never
  // reads as a short number or a word.
  for (const hidden of [
    // RFC 6749 §4.1.3's token request and §4.1.2's redirect, quoted without their URL.
    `grant_type=authorization_code&code=SplxlOBeZQQYbYS6WxSbIA&redirect_uri=https%3A%2F%2Fclient%2Eexample%2Ecom%2Fcb`,
    'callback got code=SplxlOBeZQQYbYS6WxSbIA&state=xyz',
    'code_verifier=dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk',
    'device_code=GmRhmhcxhwAzkoEqiMEg_DnyEysNkuNhszIySk9eS',
    'code=abcdefghijklmnopqrstu (a 21-letter code)',
    'mfa_code=123456, code=123456, passcode=123, auth_code=500',
  ]) {
    const shown = redactText(hidden);
    for (const secret of [
      'SplxlOBeZQQYbYS6WxSbIA',
      'dBjftJeZ4CVP',
      'GmRhmhcxhw',
      'abcdefghijklmnopqrstu',
      '123456',
      '123',
      '500',
    ])
      assert.ok(!shown.includes(secret), `${secret} shown: ${shown}`);
  }
  for (const kept of [
    'failed {code=500, message=Internal}',
    'status_code=404 error_code=E42 http_code=503.',
    'error_code=invalid_grant code=-1 reason_code=RATE_LIMITED',
    'code_challenge_method=S256 codec=h264',
  ])
    assert.equal(redactText(kept), kept);
});

test('redactText keeps an error code of one-case words joined by "_" past 19 letters under a name holding "code", and hides a random code of both cases', () => {
  // A word of more than 19 letters read as a credential: OpenAI's most common 400 body
  // (context_length_exceeded), Node's error codes (UND_ERR_CONNECT_TIMEOUT) said nothing.
  for (const kept of [
    '{"error":{"message":"too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}',
    '{"code":"unsupported_country_region_territory"}',
    'code=UND_ERR_CONNECT_TIMEOUT error_code=ERR_HTTP2_STREAM_ERROR status_code=string_above_max_length',
  ])
    assert.equal(redactText(kept), kept);
  fc.assert(
    fc.property(
      fc.stringMatching(/^[A-Za-z0-9_-]{25,64}$/).filter((code) => /[a-z]/.test(code) && /[A-Z]/.test(code)),
      (code) => {
        for (const text of [`code=${code}`, JSON.stringify({ device_code: code })]) {
          const out = redactText(text);
          assert.ok(!out.includes(code), `${code} shown: ${out}`);
        }
      },
    ),
  );
  assertLinear(
    [(chars) => `code=${fill('ab_', chars)}C`, (chars) => `code=${fill('AB1_', chars)}c`],
    32 * 1024,
  );
});

test('redactText hides the values of credential-named JSON string fields quoted in text (a token answer or request), keeping the names and the other fields', () => {
  // An error body or message quoting a token endpoint's answer or request showed its
  // tokens and client secret: only form values (name=value) were hidden.
  assert.equal(
    redactText(`refresh failed: {"refresh_token":"RT-${MARK}1","client_secret":"${MARK}2","scope":"read"}`),
    `refresh failed: {"refresh_token":"${REDACTED}","client_secret":"${REDACTED}","scope":"read"}`,
  );
  assert.equal(
    redactText(`{ "access_token": "${MARK}.a.b", "expires_in": 3600, "x-api-key" : "${MARK}k" }`),
    `{ "access_token": "${REDACTED}", "expires_in": 3600, "x-api-key" : "${REDACTED}" }`,
  );
  // JSON kept as a string and stringified again (an HTTP client's error holding the body).
  const escaped = JSON.stringify({
    body: JSON.stringify({ client_secret: `${MARK}3`, scope: 'read' }),
    status: 400,
  });
  assert.equal(
    redactText(escaped),
    JSON.stringify({ body: JSON.stringify({ client_secret: REDACTED, scope: 'read' }), status: 400 }),
  );
  // A value holding a quote or a backslash is hidden whole, at either depth; so is one cut
  // short by the end of the text (a body cut at its byte limit).
  const password = `${MARK}"\\"x`;
  for (const text of [
    JSON.stringify({ password, user: 'ann' }),
    JSON.stringify({ body: JSON.stringify({ password, user: 'ann' }) }),
    `{"refresh_token":"${MARK}cut`,
  ]) {
    assertHidden(text);
    assert.ok(!redactText(text).includes('x"'), `the rest of the password shown: ${redactText(text)}`);
  }
  // Names that are no credential's keep their values; an empty value stays empty; a number is
  // no string; a code that reads as an error code stays, as in a form (OpenAI's error body).
  for (const kept of [
    '{"scope":"read","model":"gpt-4o","status":"error"}',
    '{"token":"","pass":null,"key":42}',
    '{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}',
  ])
    assert.equal(redactText(kept), kept);
  assertHidden(`{"grant_type":"authorization_code","code":"Splx${MARK}lOBeZQQYbYS6WxSbIA"}`);
});

test('redactText hides a credential-named field quoted in single quotes (Python’s str() of a dict) or a quoted value after "=" (a Python repr, logfmt), keeping prose', () => {
  // Only JSON's double-quoted fields and unquoted form values were read: a Python server's
  // error quoting a token answer, or a repr's api_key='...', showed the credential.
  for (const [text, shown] of [
    [
      `unexpected answer: {'access_token': 'ya29.${MARK}', 'expires_in': 3599, 'scope': 'read'}`,
      `unexpected answer: {'access_token': '${REDACTED}', 'expires_in': 3599, 'scope': 'read'}`,
    ],
    [
      `Config(api_key='sk-${MARK}', base_url='https://api.example.com/v1')`,
      `Config(api_key='${REDACTED}', base_url='https://api.example.com/v1')`,
    ],
    [
      `level=error msg="refresh failed" refresh_token="${MARK} two words" client_id=app`,
      `level=error msg="refresh failed" refresh_token="${REDACTED}" client_id=app`,
    ],
    [`password = "${MARK}\\"x"`, `password = "${REDACTED}"`],
    [
      JSON.stringify({ log: `client_secret="${MARK}" grant=x` }),
      JSON.stringify({ log: `client_secret="${REDACTED}" grant=x` }),
    ],
    [`{'code': 'SplxlOBe${MARK}ZQQYbYS6', 'error': 'ok'}`, `{'code': '${REDACTED}', 'error': 'ok'}`],
  ])
    assert.equal(redactText(text as string), shown);
  for (const kept of [
    `Unrecognized key: "model"`,
    `{'code': 'context_length_exceeded', 'message': "it's too long"}`,
    `<input name="password" type="password" value="">`,
    `token expired: 'abc'`,
  ])
    assert.equal(redactText(kept), kept);
  assertLinear(
    [
      (chars) => fill("a='", chars),
      (chars) => fill("'a':'", chars),
      (chars) => fill(`'a':'"a":"\\'a\\':\\'`, chars),
      (chars) => `password='${fill('\\', chars)}`,
      (chars) => fill('a = ', chars),
    ],
    32 * 1024,
  );
});

test('a credential-named JSON field never shows its string value, whatever it holds, escaped once or twice', () => {
  fc.assert(
    fc.property(
      visibleSecret,
      fc.constantFrom(
        'access_token',
        'refresh_token',
        'client_secret',
        'password',
        'api_key',
        'Authorization',
      ),
      fc.boolean(),
      (secret, name, twice) => {
        const once = JSON.stringify({ [name]: secret, model: 'm' });
        const text = `failed: ${twice ? JSON.stringify({ body: once }) : once}`;
        const out = redactText(text);
        assert.ok(!shows(out, secret), out);
        assert.ok(out.includes(name), out);
        assert.equal(redactText(out), out);
      },
    ),
  );
});

test('redactText takes linear time on hostile JSON-field text, and reads 1 MB of it in a fraction of a second, on Bun too', () => {
  const hostile = [
    (chars: number) => fill('"a":"', chars),
    (chars: number) => fill('\\"a\\":\\"', chars),
    (chars: number) => `"token":"${fill('\\', chars)}`,
    (chars: number) => `"token":"${fill('ab', chars)}`,
    (chars: number) => `\\"token\\":\\"${fill('\\\\\\"', chars)}`,
    (chars: number) => `"data":"${fill('\\"a\\":\\"\\\\\\"', chars)}`,
    (chars: number) => fill('"a" ', chars),
    (chars: number) => fill('"', chars),
    (chars: number) => `"${fill('a', chars)}`,
    (chars: number) => fill('"a":', chars),
  ];
  assertLinear(hostile, 32 * 1024);
  // All of them, 128 KiB each: 1.25 MB.
  const text = hostile.map((make) => make(128 * 1024)).join(' ');
  const started = performance.now();
  redactText(text);
  const ms = performance.now() - started;
  // About 0.1 to 0.3 s on a quiet machine; generous for a busy one: a quadratic takes minutes.
  assert.ok(ms < 2000, `${Math.round(ms)} ms for ${text.length} characters`);
});

test('redactText hides the credential after a scheme named in any case, and after GitHub’s "token" and Discord’s "Bot" schemes', () => {
  // RFC 9110 §11.1: a scheme's name is case-insensitive; only Bearer, bearer, Basic, basic and
  // DPoP were read, and `Authorization: token ghp_...` (GitHub) showed the token.
  for (const [text, shown] of [
    [`Authorization: token ghp_${MARK}0123456789abcdef`, `Authorization: token ${REDACTED}`],
    [`Authorization: Token 9944b0${MARK}9199c62bcf`, `Authorization: Token ${REDACTED}`],
    [`AUTHORIZATION: BEARER eyJ${MARK}.a.b`, `AUTHORIZATION: BEARER ${REDACTED}`],
    [`sent bEaReR ${MARK}x`, `sent bEaReR ${REDACTED}`],
    [`BASIC dXNl${MARK}cjpw==`, `BASIC ${REDACTED}`],
    [`DPOP eyJ${MARK}.a.b`, `DPOP ${REDACTED}`],
    [`Authorization: Bot MTk4${MARK}.Cl2FMQ.ZnCjm1`, `Authorization: Bot ${REDACTED}`],
  ])
    assert.equal(redactText(text as string), shown);
  for (const kept of [
    'token expired',
    'the token is invalid',
    'BEARER realm="api"',
    'Bot token missing',
    'robot 42',
  ])
    assert.equal(redactText(kept), kept);
  assertLinear([(chars) => fill('token ', chars), (chars) => `BOT ${fill('a-', chars)}`], 32 * 1024);
});

test('redactText hides a client_assertion (OAuth JWT client authentication) and an assertion grant’s assertion in form text and JSON', () => {
  // RFC 7523 §2.2's client authentication sends a signed JWT as client_assertion, and
  // §2.1's grant as assertion: a token request quoted in an error showed either whole.
  const jwt = `eyJhbGciOiJSUzI1NiJ9.${MARK}.c2ln`;
  const form = `grant_type=client_credentials&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer&client_assertion=${jwt}`;
  for (const text of [
    `token request failed: ${form}`,
    `grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=${jwt}&scope=read`,
    JSON.stringify({ client_assertion: jwt, client_id: 'c' }),
  ])
    assertHidden(text);
  assert.match(redactText(form), /^grant_type=client_credentials&.*client_assertion=\[redacted\]$/);
});

test('redactText keeps a count of tokens a model provider quotes (max_tokens=4096, "total_tokens":"12", promptTokenCount), and hides a token of digits', () => {
  // `token` in the name hid every count of a model's tokens: Anthropic's 400 "max_tokens: 200000 >
  // 64000" quoted as max_tokens=[redacted], a usage block's "completion_tokens":"[redacted]".
  for (const kept of [
    'max_tokens=200000 is too large (limit=64000)',
    'max_completion_tokens=4096&model=gpt-4o',
    '{"usage":{"prompt_tokens":"12","completion_tokens":"34","total_tokens":"46"}}',
    "{'promptTokenCount': '1200', 'totalTokenCount': '1234'}",
    'x-ratelimit-remaining-tokens=149000 token_count=7',
  ])
    assert.equal(redactText(kept), kept);
  // A credential of digits under a name that is no count's stays hidden (a one-time token).
  for (const text of ['token=12345678', `{"access_token":"12345678901234"}`, 'otp_token=123456'])
    assert.ok(!/\d{6}/.test(redactText(text)), `a token of digits shown: ${redactText(text)}`);
});

test('redactText shows a URL under a credential-named field (an OAuth server’s token_endpoint, WWW-Authenticate’s authorization_uri) as any URL: without its userinfo and query values', () => {
  // A name holding "token" or "auth" hid the whole URL: an authorization server's metadata
  // quoted in an MCP client's error, or a 401's challenge, lost the endpoints it names.
  for (const kept of [
    '{"issuer":"https://as.example","authorization_endpoint":"https://as.example/authorize","token_endpoint":"https://as.example/token"}',
    'WWW-Authenticate: Bearer authorization_uri="https://as.example/authorize", error="invalid_token"',
    "{'jwks_uri': 'https://as.example/jwks', 'registration_endpoint': 'https://as.example/register'}",
    'token_url=https://as.example/token',
    JSON.stringify({ body: JSON.stringify({ token_endpoint: 'https://as.example/token' }) }),
  ])
    assert.equal(redactText(kept), kept);
  assert.equal(
    redactText(`{"token_endpoint":"https://as:${MARK}@as.example/token?client_secret=${MARK}"}`),
    `{"token_endpoint":"https://as.example/token?client_secret=${REDACTED}"}`,
  );
  // A value that only starts as a URL is no URL.
  for (const text of [`{"password":"https://${MARK} two"}`, `{"token":"https%3A%2F%2F${MARK}"}`])
    assertHidden(text);
});

test('redactText keeps a number of up to 5 digits after a scheme’s name ("Unexpected token 1 in JSON", "bot 42"), and hides a longer one', () => {
  // Any word after "token" or "bot" but one of small letters was read as a credential: V8's
  // JSON.parse error (Node 20) said "Unexpected token [redacted] in JSON at position 0".
  for (const kept of [
    'Unexpected token 1 in JSON at position 0',
    'bot 42 stopped; token 12345 of 20000',
    'Bearer 0',
  ])
    assert.equal(redactText(kept), kept);
  for (const [text, shown] of [
    ['Authorization: Token 123456', `Authorization: Token ${REDACTED}`],
    ['Bot 1234567890.abc', `Bot ${REDACTED}`],
  ])
    assert.equal(redactText(text as string), shown);
});

test('redactText hides a credential-named entry of an object Node’s util.inspect() or YAML writes ({ access_token: \'...\' }, password: "..."), and a quoted name and "=" ("password" = "..."), keeping prose', () => {
  // A word and ":" read as prose everywhere: a server or SDK error quoting an inspected token
  // answer, Headers or a YAML config showed the credential; so did HCL's "name" = "value".
  for (const [text, shown] of [
    [
      `refresh failed: ${inspect({ access_token: `ya29.${MARK}`, refresh_token: `${MARK}r`, expires_in: 3599, scope: 'read' })}`,
      `refresh failed: ${inspect({ access_token: REDACTED, refresh_token: REDACTED, expires_in: 3599, scope: 'read' })}`,
    ],
    [`{ access_token: '${MARK}' }`, `{ access_token: '${REDACTED}' }`],
    [`access_token: "${MARK}"`, `access_token: "${REDACTED}"`],
    [`password: '${MARK}'`, `password: '${REDACTED}'`],
    [`auth:\n  password: "${MARK}"\n  user: "ann"`, `auth:\n  password: "${REDACTED}"\n  user: "ann"`],
    [`Credentials(token: "${MARK}", user: "ann")`, `Credentials(token: "${REDACTED}", user: "ann")`],
    [`{ code: 'ECONNREFUSED',\tsession: '${MARK}' }`, `{ code: 'ECONNREFUSED',\tsession: '${REDACTED}' }`],
    [`"password"="${MARK}"`, `"password"="${REDACTED}"`],
    [`"client_secret" = "${MARK}"`, `"client_secret" = "${REDACTED}"`],
    [
      JSON.stringify({ log: `{ api_key: '${MARK}' }` }),
      JSON.stringify({ log: `{ api_key: '${REDACTED}' }` }),
    ],
  ])
    assert.equal(redactText(text as string), shown);
  // Node's Headers, inspected (its own name before the "{").
  assertHidden(inspect(new Headers({ authorization: `Bearer ${MARK}`, 'x-api-key': MARK })));
  for (const kept of [
    'Unrecognized key: "model"',
    "Unrecognized key(s) in object: 'model'",
    "[ { code: 'unrecognized_keys', keys: [ 'model' ], message: 'Unrecognized key: \"model\"' } ]",
    'token: invalid\nkey: model\nauth: failed',
    "{ code: 'ECONNREFUSED', errno: -111, token: undefined }",
    `token expired: 'abc', see "docs"`,
  ])
    assert.equal(redactText(kept), kept);
  assertLinear(
    [
      (chars) => fill('{a:', chars),
      (chars) => fill(',a: ', chars),
      (chars) => fill('\n', chars),
      (chars) => fill('(\t', chars),
      (chars) => `{${fill(' ', chars)}`,
      (chars) => `{a${fill(' ', chars)}`,
      (chars) => `\na:${fill(' ', chars)}`,
      (chars) => fill("\na:'", chars),
      (chars) => fill('"a"=', chars),
      (chars) => fill('"a" = "', chars),
      (chars) => `password: '${fill('\\', chars)}`,
    ],
    32 * 1024,
  );
});

test('redactText hides a number of 6 digits or more under a credential-named field ("api_key":12345678901234, { password: 12345678 }), not a count, an error code or a small number', () => {
  // Only quoted values were read: a numeric API key or password in a JSON body, an inspected
  // object or YAML showed whole.
  for (const [text, shown] of [
    [`{"api_key":12345678901234,"model":"m"}`, `{"api_key":${REDACTED},"model":"m"}`],
    [`{ "password" : 20260101, "user": "ann" }`, `{ "password" : ${REDACTED}, "user": "ann" }`],
    [`{ password: 12345678, user: 'ann' }`, `{ password: ${REDACTED}, user: 'ann' }`],
    ['secret = 987654321', `secret = ${REDACTED}`],
    ['{"passcode":123456}', `{"passcode":${REDACTED}}`],
  ])
    assert.equal(redactText(text as string), shown);
  for (const kept of [
    '{"token":"","pass":null,"key":42,"session_ttl":86400}',
    '{"usage":{"prompt_tokens":1200000,"completion_tokens":34,"total_tokens":1200034}}',
    '{"usageMetadata":{"promptTokenCount":1048577,"totalTokenCount":1048600}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}',
    '{"error":{"code":190,"error_subcode":1487390,"fbtrace_id":"A1b2"}}',
    '{ expires_in: 3599, max_tokens: 200000 }',
    '"api_key": 1.5',
  ])
    assert.equal(redactText(kept), kept);
  assertLinear(
    [
      (chars) => fill('"a":1', chars),
      (chars) => `"token":${fill('1', chars)}`,
      (chars) => `"token":-${fill('1', chars)}a`,
      (chars) => fill('"token":1234567,', chars),
      (chars) => fill('a=1', chars),
      (chars) => fill('{a:-', chars),
    ],
    32 * 1024,
  );
});

test('redactText hides a credential-named field of JSON escaped twice (JSON in a JSON string in a JSON string), whatever its value holds', () => {
  // Only JSON as it is or escaped once was read: \\\"access_token\\\":\\\"...\\\" (an error
  // holding a body kept as a string, serialised twice) showed the token.
  const inner = { access_token: `${MARK}a`, scope: 'read' };
  const twice = JSON.stringify({ error: JSON.stringify({ body: JSON.stringify(inner) }) });
  assert.equal(
    redactText(twice),
    JSON.stringify({ error: JSON.stringify({ body: JSON.stringify({ ...inner, access_token: REDACTED }) }) }),
  );
  fc.assert(
    fc.property(
      visibleSecret,
      fc.constantFrom('access_token', 'client_secret', 'password', 'x-api-key'),
      fc.integer({ min: 0, max: 2 }),
      (secret, name, depth) => {
        let text = JSON.stringify({ [name]: secret, model: 'm' });
        for (let i = 0; i < depth; i++) text = JSON.stringify({ body: text });
        const out = redactText(`failed: ${text}`);
        assert.ok(!out.includes(MARK) && !shows(out, secret), out);
        assert.ok(out.includes('model'), `the field after it is lost: ${out}`);
        assert.equal(redactText(out), out);
      },
    ),
  );
  assertLinear(
    [
      (chars) => fill('\\\\\\"a\\\\\\":\\\\\\"', chars),
      (chars) => `\\\\\\"token\\\\\\":\\\\\\"${fill('\\\\\\\\\\\\\\"', chars)}`,
      (chars) => `"data":"${fill('\\"a\\":\\\\\\"a\\\\\\":\\\\\\"', chars)}`,
      (chars) => `"a":"${fill('\\\\"a\\\\":\\\\"', chars)}`,
      (chars) => fill('\\\\\\"a\\\\\\"=\\\\\\"\\"', chars),
      (chars) => fill('\\', chars),
    ],
    32 * 1024,
  );
});

test('redactText hides the credential after a scheme’s name that follows another scheme’s name (Invalid token Bearer <token>)', () => {
  for (const text of [
    `Invalid token Bearer ${MARK}`,
    `token Bot ${MARK}`,
    `Bearer token Bearer ${MARK}`,
    `the token Bearer ${MARK}.abc.def`,
  ])
    assertHidden(text);
  for (const kept of ['Unexpected token Bearer in JSON', 'Bearer token required', 'token bearer'])
    assert.equal(redactText(kept), kept);
});

test('redactText hides a value not quoted after a credential’s name and ":" anywhere in text, unless it is a plain word or a short number', () => {
  for (const [text, shown] of [
    [`Invalid api_key: ${MARK}`, `Invalid api_key: ${REDACTED}`],
    [`bad token:${MARK}, try again`, `bad token:${REDACTED}, try again`],
    [`x-api-key: ${MARK}`, `x-api-key: ${REDACTED}`],
    [`error: token: ${MARK}`, `error: token: ${REDACTED}`],
    ['password: hunter2', `password: ${REDACTED}`],
    ['unknown session : 7f3a9c0b', `unknown session : ${REDACTED}`],
  ] as [string, string][])
    assert.equal(redactText(text), shown);
  for (const kept of [
    'token: invalid\nkey: model\nauth: failed',
    'killed by signal: SIGTERM',
    'error code: ECONNRESET',
    'Status code: 503',
    'token: [redacted]',
    'at http://127.0.0.1:8080/v1 (10:30:00)',
    'retry-after-ms: 1500',
  ])
    assert.equal(redactText(kept), kept);
  assertLinear(
    [
      (chars) => fill('a:', chars),
      (chars) => fill('key: ', chars),
      (chars) => fill('key: a', chars),
      (chars) => `key:${fill('a', chars)}`,
      (chars) => fill('a \t', chars),
    ],
    32 * 1024,
  );
});
