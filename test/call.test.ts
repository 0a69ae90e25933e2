import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Call } from '../src/call.ts';

// What a Call reads from (input, init) is what fetch itself would send: the init's
// member, else the Request input's. These cases are the edges of that rule.

const URL_TEXT = 'http://127.0.0.1:9/things';

test('call.method is upper-case whether it comes from the init or a Request input', () => {
  // Request upper-cases only the six standard methods itself; PATCH stays as given.
  assert.equal(
    new Call(new Request(URL_TEXT, { method: 'patch' }), undefined, undefined, undefined).method,
    'PATCH',
  );
  assert.equal(new Call(URL_TEXT, { method: 'delete' }, undefined, undefined).method, 'DELETE');
  assert.equal(new Call(URL_TEXT, undefined, undefined, undefined).method, 'GET');
});

test('an init member set to undefined counts as absent: the Request input’s own is used', () => {
  const request = new Request(URL_TEXT, { method: 'PUT', body: 'x', headers: { 'x-a': '1' } });
  const call = new Call(
    request,
    // JS callers (and SDKs spreading their options) pass explicit undefineds.
    { method: undefined, body: undefined, headers: undefined } as unknown as RequestInit,
    undefined,
    undefined,
  );
  assert.equal(call.method, 'PUT');
  assert.equal(call.header('x-a'), '1');
  assert.ok(call.body instanceof ReadableStream);
});

test('init signal: null means no signal, even when the Request input carries one', () => {
  const controller = new AbortController();
  const request = new Request(URL_TEXT, { signal: controller.signal });
  assert.equal(new Call(request, undefined, undefined, undefined).signal, request.signal);
  assert.equal(new Call(request, { signal: null }, undefined, undefined).signal, undefined);
});

test('repeated header names in a plain array are joined with ", " as Headers joins them', () => {
  const call = new Call(
    URL_TEXT,
    {
      headers: [
        ['Accept', 'text/html'],
        ['accept', 'application/json'],
      ],
    },
    undefined,
    undefined,
  );
  assert.equal(call.header('accept'), 'text/html, application/json');
  assert.equal(call.header('accept'), new Headers(call.init?.headers).get('accept'));
});

test('the default key is the origin without a default port, and userinfo never reaches it', () => {
  assert.equal(
    new Call('HTTP://Example.COM:80/a', undefined, undefined, undefined).key,
    'http://example.com',
  );
  assert.equal(
    new Call('https://example.com:443/a?q=1', undefined, undefined, undefined).key,
    'https://example.com',
  );
  assert.equal(
    new Call('https://example.com:8443/a', undefined, undefined, undefined).key,
    'https://example.com:8443',
  );
  assert.equal(
    new Call('https://user:pw@example.com/a', undefined, undefined, undefined).key,
    'https://example.com',
  );
});

test('an empty Idempotency-Key does not make a POST idempotent', () => {
  for (const headers of [{ 'Idempotency-Key': '' }, new Headers({ 'Idempotency-Key': '' })]) {
    assert.equal(new Call(URL_TEXT, { method: 'POST', headers }, undefined, undefined).isIdempotent, false);
  }
  assert.equal(
    new Call(URL_TEXT, { method: 'POST', headers: { 'Idempotency-Key': 'k1' } }, undefined, undefined)
      .isIdempotent,
    true,
  );
});

test('the default key is what new URL(href).origin says, for hosts the URL parser rewrites too', () => {
  for (const href of [
    'https://bücher.example/a',
    'https://EXAMPLE.com/a',
    'https://ex%61mple.com/a',
    'https://example.com\\a',
    'https://exa\tmple.com/a',
    'https://example.com\n',
    ' https://example.com/a',
    'https://[::1]:443/a',
    'http://127.0.0.1:9/',
    'https://user@example.com:8443?x',
    'https://example.com#frag',
  ]) {
    assert.equal(
      new Call(href, undefined, undefined, undefined).key,
      new URL(href).origin,
      JSON.stringify(href),
    );
  }
});

test('headers given as a Map or as another library’s iterable Headers are read as fetch reads them', () => {
  const map = new Map([['Idempotency-Key', '"k1"']]);
  const foreign = {
    *[Symbol.iterator]() {
      yield ['idempotency-key', '"k2"'] as [string, string];
    },
  };
  for (const [headers, key] of [
    [map, '"k1"'],
    [foreign, '"k2"'],
  ] as const) {
    const call = new Call(
      URL_TEXT,
      { method: 'POST', headers: headers as unknown as HeadersInit },
      undefined,
      undefined,
    );
    assert.equal(call.header('idempotency-key'), key);
    assert.equal(call.isIdempotent, true);
    assert.equal(new Headers(headers as unknown as HeadersInit).get('idempotency-key'), key);
  }
});
