import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Call } from '../src/call.ts';
import { captureStatus, type StatusSnapshot } from '../src/capture.ts';
import { createFetch } from '../src/chain.ts';
import { HttpStatusError } from '../src/errors.ts';
import { MAX_BODY_BYTES } from '../src/limits.ts';
import { sentHider, throwOnStatus } from '../src/status.ts';
import { withServer } from './helpers/server.ts';

// The credentials a call sends, and a failure body of the largest size a capture reads
// (capture.bodyBytes at most 64 KiB) built against the hiding of them: every credential
// but its last character again and again (a start found everywhere, a credential nowhere),
// the credentials themselves in between in the spellings they are hidden in, and a
// credential's start where the body is cut.

const JWT =
  'eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImlhdCI6MTUxNjIzOTAyMn0.SflKxwRJSFMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c';
const API_KEY = 'sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123456789';
const SESSION = 's%3Aab12cd34ef56.Sig0123456789abcdefXYZ';
const PASSWORD = 'p4ss+w0rd/Secret9';
const QUERY_KEY = 'AIzaSyD-0123456789abcdefghijklmn';

const INIT = {
  headers: { authorization: `Bearer ${JWT}`, 'x-api-key': API_KEY, cookie: `sid=${SESSION}; theme=dark` },
};
const URL_TEXT = `https://alice:${encodeURIComponent(PASSWORD)}@api.example.com/v1/chat?key=${QUERY_KEY}`;

/** Each credential as the body quotes it: as sent, decoded, escaped, or base64 at an offset. */
const QUOTED = [
  `token ${JWT} expired`,
  `key ${[...API_KEY].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('')} refused`,
  `session ${decodeURIComponent(SESSION)} unknown`,
  `password ${PASSWORD.replace('+', '&#43;').replace('/', '&#x2F;')} wrong`,
  `echo ${btoa(`x-api-key: ${API_KEY}`)} end`,
  `key=${QUERY_KEY} invalid`,
];

/** Every credential's start, each missing its last character: read as the text, never hidden. */
const NEAR = [JWT, API_KEY, decodeURIComponent(SESSION), PASSWORD, QUERY_KEY]
  .map((c) => c.slice(0, -1))
  .join(' ');

/** A failure body of `bytes` (ASCII) built against hideSent, ending in the start of the token. */
function hostileBody(bytes: number): string {
  const end = ` cut ${JWT.slice(0, 40)}`;
  let body = `${QUOTED.join(' | ')} `;
  while (body.length + NEAR.length + 1 + end.length <= bytes) body += `${NEAR} `;
  return body.padEnd(bytes - end.length, '.') + end;
}

/** How many regular-expression matches `run` makes (each one an `exec` call, also inside replace, matchAll and test). */
function regexMatches(run: () => void): number {
  const exec = RegExp.prototype.exec;
  let count = 0;
  RegExp.prototype.exec = function (this: RegExp, text: string) {
    count++;
    return exec.call(this, text);
  };
  try {
    run();
  } finally {
    RegExp.prototype.exec = exec;
  }
  return count;
}

test('hiding what a call sent reads a hostile 64 KiB failure body in one pass: regex matches per escape, not per character', () => {
  const body = hostileBody(MAX_BODY_BYTES);
  assert.equal(body.length, MAX_BODY_BYTES);
  const hide = sentHider(new Call(URL_TEXT, INIT, undefined, undefined));
  let hidden = '';
  const matches = regexMatches(() => {
    hidden = hide(body);
  });
  // The body writes 45 characters escaped. Read as pieces, a match (and two arrays) per
  // character, it made 65,318 matches: 50 to 100 ms on Node 20 and Bun, 0.3 s with the
  // garbage it left under load, and readSaid() read the body twice. One pass that stops only
  // at escapes makes 45.
  assert.ok(matches < 1000, `${matches} regex matches for ${body.length} characters`);
  // Timed too, as a guard against a hang: about 1 ms (a few under load).
  const started = performance.now();
  hide(body);
  const tookMs = performance.now() - started;
  assert.ok(tookMs < 1000, `took ${tookMs.toFixed(0)} ms`);
  // And nothing it hid before is shown now.
  for (const secret of [JWT, API_KEY, 'ab12cd34ef56.Sig0123456789abcdefXYZ', QUERY_KEY])
    assert.ok(!hidden.includes(secret), `${secret} shown in ${hidden.slice(0, 600)}…`);
  for (const spelled of QUOTED.slice(1, 5).map((q) => q.split(' ')[1] as string))
    assert.ok(!hidden.includes(spelled), `${spelled} shown`);
  assert.ok(
    hidden.startsWith('token [redacted] expired | key [redacted] refused | session [redacted] unknown'),
    hidden.slice(0, 200),
  );
  assert.ok(hidden.includes('password [redacted] wrong'), hidden.slice(0, 400));
  assert.ok(hidden.endsWith(' cut [redacted]'), hidden.slice(-80));
  // The starts stay as the server wrote them: none is a credential.
  assert.ok(hidden.includes(`${NEAR} ${NEAR}`), 'the near-credentials are shown');
});

test('captureStatus() at the largest bodyBytes hides what the call sent in a hostile 64 KiB failure body, on the snapshot and the error, the token cut at its end too', async () => {
  const body = hostileBody(MAX_BODY_BYTES);
  await withServer(
    () => ({ status: 500, headers: { 'content-type': 'text/plain' }, body }),
    async (server) => {
      const capture = captureStatus({ bodyBytes: MAX_BODY_BYTES });
      const fetch = createFetch({ use: [throwOnStatus(), capture] });
      const url = `${server.origin}/v1/chat?key=${QUERY_KEY}`;
      const started = performance.now();
      const error = await fetch(url, INIT).then(
        () => assert.fail('expected a throw'),
        (caught: unknown) => caught,
      );
      const tookMs = performance.now() - started;
      assert.ok(error instanceof HttpStatusError, String(error));
      const snapshot = capture.last(server.origin) as StatusSnapshot;
      // About 10 ms on Node, Deno and Bun (the old read: 0.1 to 0.7 s on Node 20).
      assert.ok(tookMs < 3000, `took ${tookMs.toFixed(0)} ms`);
      for (const shown of [
        snapshot.body,
        snapshot.serverMessage ?? '',
        error.body ?? '',
        JSON.stringify(error),
      ])
        for (const secret of [JWT, API_KEY, QUERY_KEY])
          assert.ok(!shown.includes(secret), `${secret} shown in ${shown.slice(0, 300)}…`);
      assert.ok(snapshot.body.endsWith(' cut [redacted]'), snapshot.body.slice(-80));
      assert.ok(snapshot.body.length > 60_000, `snapshot body of ${snapshot.body.length} characters`);
    },
  );
});
