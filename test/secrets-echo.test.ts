import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inspect } from 'node:util';
import { circuitBreaker } from '../src/breaker.ts';
import { Call } from '../src/call.ts';
import { captureStatus, type StatusSnapshot } from '../src/capture.ts';
import { createFetch } from '../src/chain.ts';
import { CircuitOpenError, HttpStatusError } from '../src/errors.ts';
import type { BreakwaterEvent } from '../src/events.ts';
import { safeHeaders } from '../src/redact.ts';
import { readSaid, throwOnStatus, wrapHttpError } from '../src/status.ts';
import { withServer } from './helpers/server.ts';

const runtime: 'node' | 'deno' | 'bun' = 'Bun' in globalThis ? 'bun' : 'Deno' in globalThis ? 'deno' : 'node';

const JWT = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.Sig123abcXYZ';

/** Everything a person or a log may be shown of `error`: each must be free of the secret. */
function shown(error: unknown): string[] {
  return [String(error), JSON.stringify(error), inspect(error, { depth: 5 })];
}

/** The error `fetch` threw for a call to `url` with `init`. */
async function thrown(
  fetch: typeof globalThis.fetch,
  url: string,
  init?: RequestInit,
): Promise<HttpStatusError> {
  const error = await fetch(url, init).then(
    () => assert.fail('expected a throw'),
    (caught: unknown) => caught,
  );
  assert.ok(error instanceof HttpStatusError, String(error));
  return error;
}

test('a 401 whose WWW-Authenticate and x-request-id quote the token sent keeps those headers, the token hidden, on the error, the snapshot and the captured event', async () => {
  await withServer(
    (request) => ({
      status: 401,
      headers: {
        'www-authenticate': `Bearer realm="api", error="invalid_token", error_description="token ${String(request.headers.authorization).slice(7)} expired"`,
        'x-request-id': `req-for ${request.headers.authorization}`,
      },
      body: 'no',
    }),
    async (server) => {
      for (const captured of [true, false]) {
        const events: BreakwaterEvent[] = [];
        const capture = captureStatus();
        const fetch = createFetch({
          use: captured ? [throwOnStatus(), capture] : [throwOnStatus()],
          onEvent: (event) => events.push(event),
        });
        const error = await thrown(fetch, server.origin, { headers: { authorization: `Bearer ${JWT}` } });
        assert.deepEqual(
          { ...error.headers, date: undefined },
          {
            date: undefined,
            'www-authenticate':
              'Bearer realm="api", error="invalid_token", error_description="token [redacted] expired"',
            'x-request-id': 'req-for [redacted]',
          },
        );
        for (const text of shown(error)) assert.ok(!text.includes('Sig123abcXYZ'), text);
        if (!captured) continue;
        const snapshot = capture.last(server.origin) as StatusSnapshot;
        assert.deepEqual(snapshot.headers, error.headers);
        assert.ok(!JSON.stringify(events).includes('Sig123abcXYZ'), JSON.stringify(events));
        assert.deepEqual(wrapHttpError(401, snapshot).headers, error.headers);
      }
    },
  );
});

test('a kept header holding a URL shows it redacted where no call is known (wrapHttpError from headers)', () => {
  const metadata = 'https://mcp.example/.well-known/oauth-protected-resource?tenant=t-0123456789abcdef';
  const headers = new Headers({ 'www-authenticate': `Bearer resource_metadata="${metadata}"` });
  const expected = {
    'www-authenticate':
      'Bearer resource_metadata="https://mcp.example/.well-known/oauth-protected-resource?tenant=[redacted]"',
  };
  assert.deepEqual(safeHeaders(headers), expected);
  assert.deepEqual(wrapHttpError(401, headers).headers, expected);
});

test('the password of the URL the call went to is hidden where the server quotes it back: alone, as user:password, in base64 (a Basic header), however short', async () => {
  const call = new Call('https://alice:S3cret%2FPassw0rd99@api.example/v1', undefined, undefined, undefined);
  const body = JSON.stringify({
    error: {
      message: `wrong password S3cret/Passw0rd99 for alice (alice:S3cret/Passw0rd99), got Basic ${btoa('alice:S3cret/Passw0rd99')}`,
    },
  });
  const said = await readSaid(call, new Response(body));
  // base64's padding stays shown, as for a header's credential.
  assert.equal(said.serverMessage, 'wrong password [redacted] for alice ([redacted]), got Basic [redacted]=');
  // A short password counts, as a header's credential does: where it stands as a word.
  const short = new Call('https://bob:pw12@api.example/v1', undefined, undefined, undefined);
  assert.equal(
    (await readSaid(short, new Response('bad password pw12 for bob (pw123 is not it)'))).serverMessage,
    'bad password [redacted] for bob (pw123 is not it)',
  );
  // A user name alone (`https://<token>@github.com`) is the credential.
  const token = new Call('https://ghp_0123456789abcdefABCDEF@api.example/', undefined, undefined, undefined);
  assert.equal(
    (await readSaid(token, new Response('bad credentials ghp_0123456789abcdefABCDEF'))).serverMessage,
    'bad credentials [redacted]',
  );
});

test('a URL with userinfo, end to end: Deno and Bun send it as Basic and the quoted password is hidden; Node refuses the URL without showing it', async () => {
  await withServer(
    (request) => {
      const basic = atob(String(request.headers.authorization ?? '').slice(6));
      return { status: 401, body: `wrong password ${basic.split(':')[1]} (${basic})` };
    },
    async (server) => {
      const url = server.origin.replace('//', '//alice:S3cretPassw0rd99@');
      const events: BreakwaterEvent[] = [];
      const fetch = createFetch({ use: [throwOnStatus(), captureStatus()], onEvent: (e) => events.push(e) });
      const error = await fetch(url).then(
        () => assert.fail('expected a throw'),
        (caught: unknown) => caught,
      );
      for (const text of [...shown(error), JSON.stringify(events)])
        assert.ok(!text.includes('S3cretPassw0rd99'), text);
      if (runtime === 'node') {
        assert.ok(error instanceof TypeError, String(error));
        assert.equal(server.requests.length, 0);
      } else {
        assert.ok(error instanceof HttpStatusError, String(error));
        assert.equal(error.serverMessage, 'wrong password [redacted] ([redacted])');
      }
    },
  );
});

test('a credential an HTML or XML error page writes with character references (decimal, hex, named) is hidden, the text around it kept as written', async () => {
  const token = 'ab+cd/ef+GH12ij/KL34mn+OP56qr==';
  const key = 'sk-live-9f8e7d6c5b4a3210';
  const call = new Call(
    'https://api.example/v1',
    { headers: { authorization: `Bearer ${token}`, 'x-api-key': key } },
    undefined,
    undefined,
  );
  const cases: [string, string][] = [
    // Go's html/template: `+` as `&#43;`; what a server pads stays shown, as elsewhere.
    [
      `<p>Invalid credentials: ${token.replace(/[+/=]/g, (c) => `&#${c.charCodeAt(0)};`)}</p>`,
      '<p>Invalid credentials: [redacted]&#61;&#61;</p>',
    ],
    [`<p>Invalid key ${key.replaceAll('-', '&#x2D;')}</p>`, '<p>Invalid key [redacted]</p>'],
    [`<p>Invalid key ${key.replaceAll('-', '&#X2d;')}.</p>`, '<p>Invalid key [redacted].</p>'],
    [
      `<p>Invalid key ${token.replaceAll('+', '&plus;').replaceAll('/', '&sol;').replace('==', '')}</p>`,
      '<p>Invalid key [redacted]</p>',
    ],
    [
      `<Error><Token>${token.replaceAll('/', '&#x2F;').replace('==', '')}</Token></Error>`,
      '<Error><Token>[redacted]</Token></Error>',
    ],
  ];
  for (const [body, expected] of cases)
    assert.equal((await readSaid(call, new Response(body))).serverMessage, expected, body);
  // A reference past U+FFFF reads as one character: what follows is still found.
  assert.equal(
    (await readSaid(call, new Response(`&#128512;&#99999999; ${key}`))).serverMessage,
    '&#128512;&#99999999; [redacted]',
  );
});

test('a body cut inside a character reference still hides the credential start before it', async () => {
  const token = 'ab+cd/ef+GH12ij/KL34mn+OP56qr';
  const call = new Call(
    'https://api.example/',
    { headers: { authorization: `Bearer ${token}` } },
    undefined,
    undefined,
  );
  const written = `bad token ${token.replace(/[+/]/g, (c) => `&#${c.charCodeAt(0)};`)}`;
  for (const cut of [35, 38, 39, 40, 41]) {
    const said = await readSaid(call, new Response(written), cut);
    assert.equal(said.body, 'bad token [redacted]', `cut at ${cut}: ${written.slice(0, cut)}`);
  }
});

test('character references are read in linear time: 100k characters of near-references each take well under a quadratic read', async () => {
  const call = new Call(
    'https://api.example/',
    { headers: { authorization: `Bearer ${JWT}` } },
    undefined,
    undefined,
  );
  for (const unit of ['&#', '&#x', '&#1234567', '&plu', '&amp;', '&#43;']) {
    const started = performance.now();
    await readSaid(call, new Response(unit.repeat(Math.ceil(1e5 / unit.length))), 1e5);
    // About 0.5 s on a loaded 2-core machine (as a body of plain letters); a read going back
    // over the text at each reference would take minutes.
    const took = performance.now() - started;
    assert.ok(took < 2500, `${unit}: took ${Math.round(took)} ms`);
  }
});

test("a breaker opened by a 503 whose x-request-id quotes the call's bare API key shows the key in none of its CircuitOpenError's cause", async () => {
  const key = 'k7Qw93ZpLm2XvB8nRt4Y';
  await withServer(
    (request) => ({
      status: 503,
      headers: { 'x-request-id': `req ${request.headers['x-api-key']}` },
      body: 'down',
    }),
    async (server) => {
      const fetch = createFetch({ use: [circuitBreaker({ consecutiveFailures: 1 })] });
      const init = { headers: { 'x-api-key': key } };
      const first = await fetch(server.origin, init);
      await first.body?.cancel();
      assert.equal(first.status, 503);
      const error = await fetch(server.origin, init).then(
        () => assert.fail('expected the open circuit to refuse'),
        (caught: unknown) => caught,
      );
      assert.ok(error instanceof CircuitOpenError, String(error));
      const cause = error.cause as HttpStatusError;
      assert.equal(cause.headers['x-request-id'], 'req [redacted]');
      for (const text of shown(error)) assert.ok(!text.includes(key), text);
    },
  );
});
