import assert from 'node:assert/strict';
import { test } from 'node:test';
import { waitLeft } from '../src/capture.ts';
import {
  type BreakwaterEvent,
  captureStatus,
  createFetch,
  definePolicy,
  type FetchLike,
  HttpStatusError,
  retry,
  type StatusSnapshot,
  timeout,
} from '../src/index.ts';
import { MAX_BODY_WAIT_MS } from '../src/limits.ts';
import { SNAPSHOT } from '../src/status.ts';
import { assertNoToken, SENDS_TOKEN, withReasonPhrase } from './helpers/reason-phrase.ts';
import { always, type Behaviour, sequence, withServer } from './helpers/server.ts';
import { abortWhileFailureBodyRead } from './helpers/trickle.ts';

test('a failure response is snapshotted with status, Retry-After, server message and safe headers', async () => {
  const body = JSON.stringify({ error: { message: 'model overloaded', type: 'overloaded' } });
  await withServer(
    always({
      status: 503,
      headers: {
        'retry-after': '7',
        'content-type': 'application/json',
        'x-request-id': 'req-1',
        'set-cookie': 'a=b',
      },
      body,
    }),
    async (server) => {
      const capture = captureStatus();
      const fetch = createFetch({ use: [capture] });
      const res = await fetch(`${server.origin}/v1/x?key=secret`);
      assert.equal(await res.text(), body, 'the caller still reads the whole body');
      const snapshot = capture.last(server.origin);
      assert.ok(snapshot, 'snapshot');
      assert.equal(snapshot.status, 503);
      assert.equal(snapshot.statusText, 'Service Unavailable');
      assert.equal(snapshot.retryAfterMs, 7000);
      assert.equal(snapshot.serverMessage, 'model overloaded');
      assert.equal(snapshot.body, body);
      assert.equal(snapshot.method, 'GET');
      assert.equal(snapshot.url, `${server.origin}/v1/x?key=[redacted]`);
      assert.equal(snapshot.headers['x-request-id'], 'req-1');
      assert.equal(snapshot.headers['set-cookie'], undefined);
      assert.ok(Object.isFrozen(snapshot), 'Object.isFrozen(snapshot)');
    },
  );
});

test('successful and redirect responses are not snapshotted', async () => {
  await withServer(always({ status: 204 }), async (server) => {
    const capture = captureStatus();
    const fetch = createFetch({ use: [capture] });
    await (await fetch(server.origin)).text();
    assert.equal(capture.last(server.origin), undefined);
  });
});

test('a large error body is read only up to bodyBytes and reaches the caller whole', async () => {
  const big = `${'x'.repeat(200_000)}END`;
  await withServer(always({ status: 500, body: big }), async (server) => {
    const capture = captureStatus({ bodyBytes: 100 });
    const fetch = createFetch({ use: [capture] });
    const res = await fetch(server.origin);
    assert.equal(await res.text(), big);
    const snapshot = capture.last(server.origin);
    assert.equal(snapshot?.body, 'x'.repeat(100));
  });
});

test('a multi-line body is collapsed to one line', async () => {
  await withServer(
    always({ status: 502, body: '<html>\n  <h1>Bad   gateway</h1>\r\n</html>\n' }),
    async (server) => {
      const capture = captureStatus();
      const res = await createFetch({ use: [capture] })(server.origin);
      await res.text();
      assert.equal(capture.last(server.origin)?.body, '<html> <h1>Bad gateway</h1> </html>');
      assert.equal(capture.last(server.origin)?.serverMessage, '<html> <h1>Bad gateway</h1> </html>');
    },
  );
});

test('a text/event-stream error body is never read by the capture', async () => {
  await withServer(
    always({
      stall: 'mid-body',
      status: 500,
      headers: { 'content-type': 'text/event-stream' },
      body: 'data: 1\n\n',
    }),
    async (server) => {
      const capture = captureStatus({ bodyWaitMs: 5000 });
      const started = performance.now();
      const res = await createFetch({ use: [capture] })(server.origin);
      assert.ok(performance.now() - started < 2000, 'the response was not held back');
      assert.equal(capture.last(server.origin)?.body, '');
      const reader = res.body?.getReader();
      const first = await reader?.read();
      assert.equal(new TextDecoder().decode(first?.value), 'data: 1\n\n');
      await reader?.cancel();
    },
  );
});

test('a body that stalls is read for at most bodyWaitMs, and the snapshot keeps what arrived', async () => {
  await withServer(always({ stall: 'mid-body', status: 500, body: 'partial error' }), async (server) => {
    const capture = captureStatus({ bodyWaitMs: 50 });
    const res = await createFetch({ use: [capture] })(server.origin);
    assert.equal(capture.last(server.origin)?.body, 'partial error');
    await res.body?.cancel();
  });
});

test('a body that breaks mid-way still yields a snapshot of what arrived', async () => {
  await withServer(always({ reset: 'mid-body', status: 500, body: 'half of it' }), async (server) => {
    const capture = captureStatus();
    const res = await createFetch({ use: [capture] })(server.origin);
    assert.equal(capture.last(server.origin)?.status, 500);
    assert.equal(capture.last(server.origin)?.body, 'half of it');
    await res.text().catch(() => {});
  });
});

test('a captured event carries the snapshot', async () => {
  await withServer(always({ status: 429, headers: { 'retry-after': '2' } }), async (server) => {
    const events: BreakwaterEvent[] = [];
    const capture = captureStatus();
    const fetch = createFetch({ use: [capture], onEvent: (e) => events.push(e), key: 'svc' });
    await (await fetch(server.origin)).text();
    const captured = events.find((e) => e.type === 'captured');
    assert.equal(captured?.type, 'captured');
    assert.equal(captured?.type === 'captured' ? captured.snapshot.retryAfterMs : 0, 2000);
    assert.equal(captured?.key, 'svc');
  });
});

test('two interleaved requests on one key never yield a snapshot that mixes them', async () => {
  // One server, one key: the first request answers 503 + Retry-After: 7 after a delay,
  // the other 429 + Retry-After: 1 at once; the order flips every round.
  const handler = (req: { url: string }): Behaviour =>
    req.url.startsWith('/a')
      ? { status: 503, headers: { 'retry-after': '7' }, body: 'a', delayMs: Number(req.url.split('=')[1]) }
      : { status: 429, headers: { 'retry-after': '1' }, body: 'b', delayMs: Number(req.url.split('=')[1]) };
  await withServer(handler, async (server) => {
    const capture = captureStatus();
    createFetch({ use: [capture], key: 'shared' });
    const consistent = (s: StatusSnapshot | undefined): boolean =>
      (s?.status === 503 && s.retryAfterMs === 7000 && s.body === 'a') ||
      (s?.status === 429 && s.retryAfterMs === 1000 && s.body === 'b');
    for (let round = 0; round < 12; round++) {
      const a = capture.scope();
      const b = capture.scope();
      const [slowA, slowB] = round % 2 === 0 ? [8, 0] : [0, 8];
      const [ra, rb] = await Promise.all([
        a.fetch(`${server.origin}/a?d=${slowA}`),
        b.fetch(`${server.origin}/b?d=${slowB}`),
      ]);
      await Promise.all([ra.text(), rb.text()]);
      assert.equal(a.last()?.status, 503);
      assert.equal(a.last()?.retryAfterMs, 7000);
      assert.equal(b.last()?.status, 429);
      assert.equal(b.last()?.retryAfterMs, 1000);
      assert.equal(a.all().length, 1);
      assert.equal(b.all().length, 1);
      assert.ok(consistent(capture.last('shared')), 'the per-key snapshot is one response, whole');
    }
  });
});

test('capture.scope() uses the chain the capture belongs to, and says so when there is none', async () => {
  const lonely = captureStatus();
  assert.throws(() => lonely.scope(), /part of no createFetch\(\) chain/);
  await withServer(always({ status: 500 }), async (server) => {
    const capture = captureStatus();
    createFetch({ use: [capture] });
    const scope = capture.scope();
    await (await scope.fetch(server.origin)).text();
    assert.equal(scope.last()?.status, 500);
  });
});

test('capture.scope() of a capture shared by several chains (a policy’s clients) asks which one, rather than sending through the last one built', async () => {
  await withServer(always({ status: 500 }), async (server) => {
    const policy = definePolicy({ retry: false });
    // One policy, two clients of two servers, each with its own token.
    const forA = policy.fetch(undefined, { auth: { token: 'token-of-server-a-0123456789' } });
    policy.fetch(undefined, { auth: { token: 'token-of-server-b-0123456789' } });
    // Meant for server A's operation: it went through B's chain, B's token on A's request.
    assert.throws(
      () => policy.capture.scope().fetch(server.origin),
      (error: unknown) => error instanceof TypeError && /capture\.scope\(fetch\)/.test(error.message),
    );
    assert.equal(server.requests.length, 0);
    // Named, the chain is the one given.
    const scope = policy.capture.scope(forA);
    await (await scope.fetch(server.origin)).text();
    assert.equal(scope.last()?.status, 500);
    assert.equal(server.requests[0]?.headers.authorization, 'Bearer token-of-server-a-0123456789');
  });
});

test('bad captureStatus options are a TypeError naming the option and the value', () => {
  assert.throws(() => captureStatus({ bodyBytes: -1 }), /captureStatus\(\)\.bodyBytes.*got -1/s);
  assert.throws(() => captureStatus({ bodyBytes: 1.5 }), /captureStatus\(\)\.bodyBytes.*got 1\.5/s);
  assert.throws(() => captureStatus({ bodyByte: 10 } as never), /unknown option "bodyByte"/);
});

/** A 500 whose body arrives as exactly these chunks, then ends (or, with `stall`, never does). */
function chunkedFailure(chunks: Uint8Array[], stall = false): () => Promise<Response> {
  return async () =>
    new Response(
      new ReadableStream<Uint8Array>({
        start(controller) {
          for (const chunk of chunks) controller.enqueue(chunk);
          if (!stall) controller.close();
        },
      }),
      { status: 500 },
    );
}

test('a body whose chunk ends at bodyBytes inside a character keeps no replacement character', async () => {
  const euro = new TextEncoder().encode('€');
  // 2,047 ASCII bytes and the first byte of '€' fill 2,048 exactly; the rest comes later.
  const first = new Uint8Array([...new TextEncoder().encode('a'.repeat(2047)), euro[0] as number]);
  const rest = new Uint8Array([euro[1] as number, euro[2] as number, 0x7a]);
  const capture = captureStatus();
  const res = await createFetch({ fetch: chunkedFailure([first, rest]), use: [capture], key: 'k' })(
    'http://example.test/',
  );
  await res.body?.cancel();
  const body = capture.last('k')?.body;
  assert.equal(body?.includes('\uFFFD'), false, 'no U+FFFD at the cut');
  assert.equal(body, 'a'.repeat(2047));
});

test('a body that stalls inside a character keeps only the whole characters that arrived', async () => {
  const euro = new TextEncoder().encode('€');
  const capture = captureStatus({ bodyWaitMs: 20 });
  const res = await createFetch({
    fetch: chunkedFailure([new Uint8Array([0x61, 0x62, euro[0] as number])], true),
    use: [capture],
    key: 'k',
  })('http://example.test/');
  await res.body?.cancel();
  assert.equal(capture.last('k')?.body, 'ab');
});

test('a snapshot never shows the userinfo or query values of a URL the server’s body echoed', async () => {
  const echoed = 'bad callback https://user:hunter2-pw@hooks.example.com/cb?api_key=sk-live-123';
  const capture = captureStatus();
  const fetch = createFetch({
    fetch: async () => new Response(JSON.stringify({ error: { message: echoed } }), { status: 400 }),
    use: [capture],
    key: 'k',
  });
  await (await fetch('http://example.test/')).body?.cancel();
  const snapshot = capture.last('k');
  assert.equal(snapshot?.serverMessage, 'bad callback https://hooks.example.com/cb?api_key=[redacted]');
  for (const secret of ['hunter2-pw', 'user:', 'sk-live-123']) {
    assert.equal(JSON.stringify(snapshot).includes(secret), false, `shows ${secret}`);
  }
});

test('a compact JSON error body that quotes a URL mid-object keeps its serverMessage', async () => {
  // Anthropic-style compact JSON: the quoted URL is followed by more of the object, with no
  // space between. Redacting the raw text first swallowed the rest of the object into
  // the URL, the JSON no longer parsed, and serverMessage became the whole body.
  const body = JSON.stringify({
    type: 'error',
    error: {
      type: 'invalid_request_error',
      message: 'bad image url https://img.example.com/a.png?sig=s3cr3t',
    },
    request_id: 'req_1',
  });
  const capture = captureStatus();
  const fetch = createFetch({
    fetch: async () => new Response(body, { status: 400 }),
    use: [capture],
    key: 'k',
  });
  await (await fetch('http://example.test/')).body?.cancel();
  const snapshot = capture.last('k');
  assert.equal(snapshot?.serverMessage, 'bad image url https://img.example.com/a.png?sig=[redacted]');
  assert.equal(JSON.stringify(snapshot).includes('s3cr3t'), false);
});

test('a scope kept for the life of a client holds only its last 100 snapshots, oldest dropped first', async () => {
  await withServer(
    (_req, index) => ({ status: 503, body: `failure ${index + 1}` }),
    async (server) => {
      const capture = captureStatus();
      createFetch({ use: [capture] });
      const scope = capture.scope();
      for (let i = 0; i < 150; i++) await (await scope.fetch(`${server.origin}/x`)).arrayBuffer();
      const all = scope.all();
      assert.equal(all.length, 100, 'bounded: a long-lived scope must not grow without end');
      assert.equal(all[0]?.body, 'failure 51', 'the oldest are dropped first');
      assert.equal(scope.last()?.body, 'failure 150');
    },
  );
});

test('a late answer to an attempt a timeout above already ended is not snapshotted over the answer the caller got', async () => {
  // [retry, timeout({ attemptMs }), capture] through a fetch that ignores the signal: the
  // first attempt's 503 (Retry-After: 30) arrives after the second attempt's 429
  // (Retry-After: 1) reached the caller; the caller's snapshot must stay the 429's.
  const deafFetch: FetchLike = (input, init) => {
    const { signal: _ignored, ...rest } = init ?? {};
    return globalThis.fetch(input, rest);
  };
  let release: () => void = () => {};
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let lateArrived: () => void = () => {};
  const late = new Promise<void>((resolve) => {
    lateArrived = resolve;
  });
  await withServer(
    async (_req, index): Promise<Behaviour> => {
      if (index > 0) return { status: 429, headers: { 'retry-after': '1' }, body: 'current' };
      await released;
      return { status: 503, headers: { 'retry-after': '30' }, body: 'stale' };
    },
    async (server) => {
      const capture = captureStatus();
      const captured: BreakwaterEvent[] = [];
      const fetch = createFetch({
        fetch: deafFetch,
        onEvent: (e) => {
          if (e.type === 'captured') captured.push(e);
        },
        use: [
          retry({ attempts: 2, backoff: { initialMs: 1, jitter: 'none' } }),
          timeout({ attemptMs: 50 }),
          capture,
          async function watch(call, next) {
            const response = await next(call);
            if (response.status === 503) lateArrived();
            return response;
          },
        ],
      });
      const scope = capture.scope(fetch);
      const res = await scope.fetch(`${server.origin}/x`);
      assert.equal(res.status, 429);
      await res.text();
      release();
      await late;
      await new Promise((resolve) => setTimeout(resolve, 50));
      const kept = (s: StatusSnapshot | undefined) => [s?.status, s?.retryAfterMs, s?.body];
      assert.deepEqual(kept(scope.last()), [429, 1000, 'current'], 'the scope’s last snapshot');
      assert.deepEqual(kept(capture.last(server.origin)), [429, 1000, 'current'], 'the key’s last snapshot');
      assert.equal(scope.all().length, 1);
      assert.equal(captured.length, 1, 'captured events');
    },
  );
});

test('policy.fetch(): a POST answered 429 + Retry-After whose body stalls is retried after the wait, not failed as a TimeoutError', async () => {
  await withServer(
    sequence(
      {
        stall: 'mid-body',
        status: 429,
        // The wait a 429 names, in ms: `Retry-After: 1` made the same point a second later.
        headers: { 'retry-after-ms': '100', 'content-type': 'application/json' },
        body: '{"error":',
      },
      { status: 200, body: 'ok' },
    ),
    async (server) => {
      // The headers come at once; the body read (up to bodyWaitMs) outlasts attemptMs.
      const policy = definePolicy({
        name: 'stall',
        timeout: { attemptMs: 200, totalMs: 10_000 },
        capture: { bodyWaitMs: 500 },
        retry: { attempts: 2 },
      });
      const res = await policy.fetch()(`${server.origin}/v1/things`, { method: 'POST', body: '{}' });
      assert.equal(res.status, 200);
      assert.equal(await res.text(), 'ok');
      assert.deepEqual(
        server.requests.map((r) => r.method),
        ['POST', 'POST'],
      );
      // The snapshot keeps what arrived of the stalled body.
      assert.equal(policy.capture.last('stall')?.status, 429);
      assert.equal(policy.capture.last('stall')?.body, '{"error":');
    },
  );
});

test('a reason phrase that quotes the credential the call sent shows none of it in the snapshot or its event', async () => {
  await withReasonPhrase({ status: 401, phrase: 'Invalid token' }, async (origin) => {
    const events: BreakwaterEvent[] = [];
    const capture = captureStatus();
    const fetch = createFetch({ use: [capture], onEvent: (e) => events.push(e) });
    const response = await fetch(origin, SENDS_TOKEN);
    await response.body?.cancel();
    const snapshot = capture.last(origin);
    assert.ok(snapshot, 'snapshot');
    const captured = events.find((e) => e.type === 'captured');
    assertNoToken([snapshot.statusText, JSON.stringify(snapshot), JSON.stringify(captured)]);
    if (snapshot.statusText !== 'Unauthorized') assert.equal(snapshot.statusText, 'Invalid token [redacted]');
  });
});

test('a caller’s abort during the body read lets the answer’s body go, through a fetch that ignores the signal too', async () => {
  // The abort ends the capture's read and rejects the call; the answer reaches nobody, so
  // its connection must be freed, not held for as long as the server keeps sending.
  const outcome = await abortWhileFailureBodyRead(captureStatus({ bodyWaitMs: 10_000 }));
  assert.equal(outcome, 'closed', 'the connection was still held 3 s after the abort');
});

test('a sealed failure response (a mock’s, a cache’s: it takes no new properties) reaches the caller and is snapshotted: the capture only watches', async () => {
  // Sealed, not frozen: Deno's own Response.clone() writes to the response it clones. Its
  // body is looked at first: where @hono/node-server has replaced the global Response (Bun
  // runs every test file in one process), that Response builds its body on first use by
  // deleting a property of its own, which a sealed object refuses (the polyfill's, not
  // breakwater's, to bear).
  const sealed: FetchLike = async () => {
    const response = new Response('{"error":{"message":"down"}}', { status: 500 });
    void response.body;
    return Object.seal(response);
  };
  const capture = captureStatus();
  for (const fetch of [
    createFetch({ fetch: sealed, use: [capture] }),
    definePolicy({ retry: false }).fetch(sealed),
  ]) {
    const res = await fetch('http://breakwater-test.invalid/x');
    assert.equal(res.status, 500);
    assert.equal(await res.text(), '{"error":{"message":"down"}}');
  }
  assert.equal(capture.last('http://breakwater-test.invalid')?.serverMessage, 'down');
});

test('a scope holds its own capture’s snapshots only: a second capture in the chain does not add each failure again', async () => {
  const failing: FetchLike = async () => new Response('busy', { status: 503 });
  // Two captures in one chain, and a capture of the user's own in a policy client's `use`.
  const outer = captureStatus();
  const inner = captureStatus();
  const chain = createFetch({ fetch: failing, use: [outer, inner] });
  const mine = captureStatus({ bodyBytes: 2 });
  const client = definePolicy({ retry: false }).fetch(failing, { use: [mine] });
  for (const scope of [outer.scope(chain), inner.scope(chain), mine.scope(client)]) {
    await (await scope.fetch('http://breakwater-test.invalid/x')).text();
    assert.equal(scope.all().length, 1, 'snapshots in the scope after one failure');
  }
  assert.equal(mine.scope(client).last(), undefined);
  const scope = mine.scope(client);
  await (await scope.fetch('http://breakwater-test.invalid/x')).text();
  assert.equal(scope.last()?.body, 'bu', 'the scope’s last snapshot is its own capture’s');
});

/** A RequestInit whose members are getters on its class: fetch (a WebIDL dictionary) reads them. */
class GetterInit {
  get method(): string {
    return 'POST';
  }
  get body(): string {
    return '{"scoped":1}';
  }
  get headers(): Record<string, string> {
    return { 'content-type': 'application/json', 'x-scoped': 'yes' };
  }
}

test('capture.scope().fetch sends an init whose members are a class’s getters whole: method, body and headers, as raw fetch does', async () => {
  await withServer(always({ status: 500 }), async (server) => {
    const capture = captureStatus();
    createFetch({ use: [capture] });
    const scope = capture.scope();
    // The premise: raw fetch reads these members.
    await (await globalThis.fetch(`${server.origin}/raw`, new GetterInit() as RequestInit)).text();
    await (await scope.fetch(`${server.origin}/scoped`, new GetterInit() as RequestInit)).text();
    const [raw, scoped] = server.requests;
    assert.equal(raw?.method, 'POST', 'raw fetch');
    assert.equal(scoped?.method, 'POST');
    assert.equal(scoped?.text, '{"scoped":1}');
    assert.equal(scoped?.headers['content-type'], 'application/json');
    assert.equal(scoped?.headers['x-scoped'], 'yes');
    assert.equal(scope.last()?.method, 'POST');
  });
});

test('capture.scope().fetch rejects an init whose getter throws, as fetch does, and never throws synchronously', async () => {
  const capture = captureStatus();
  let sent = 0;
  createFetch({
    fetch: async () => {
      sent++;
      return new Response('ok');
    },
    use: [capture],
  });
  const init = Object.create({
    get body(): string {
      throw new Error('body getter');
    },
  }) as RequestInit;
  const pending = capture.scope().fetch('http://127.0.0.1:9/', init);
  await assert.rejects(pending, /body getter/);
  assert.equal(sent, 0);
});

test('waitLeft() counts a server’s wait from when the headers arrived, as the snapshot’s at says, for delay-seconds and dates alike', () => {
  const now = Date.UTC(2026, 10, 29, 17, 0, 0);
  const answer = (headers: Record<string, string>, ageMs?: number): Response => {
    const response = new Response(null, { status: 503, headers });
    if (ageMs !== undefined) Reflect.set(response, SNAPSHOT, { at: Date.now() - ageMs });
    return response;
  };
  // No capture saw it: the headers as of now, as retryDelay() reads them.
  assert.equal(waitLeft(answer({ 'retry-after': '1' }), now), 1_000);
  // Headers in 400 ms ago (the body's start read since): 600 ms are left.
  const left = waitLeft(answer({ 'retry-after': '1' }, 400), now) as number;
  assert.ok(left >= 590 && left <= 600, `${left} ms left of 1,000 after 400`);
  const ms = waitLeft(answer({ 'retry-after-ms': '250' }, 400), now);
  assert.equal(ms, 0, 'a wait over before the read ended is none left, not negative');
  // A date is when the wait ends, whenever it is read.
  assert.equal(waitLeft(answer({ 'retry-after': 'Sun, 29 Nov 2026 17:00:30 GMT' }, 400), now), 30_000);
  // A clock stepped forward by 10 minutes meanwhile takes off no more than the longest read.
  assert.equal(waitLeft(answer({ 'retry-after': '3600' }, 600_000), now), 3_600_000 - MAX_BODY_WAIT_MS);
  assert.equal(waitLeft(answer({}, 400), now), undefined);
});

test('waitLeft() counts an HttpStatusError’s wait from its at, when its headers arrived, not from the throw', () => {
  const now = Date.now();
  const error = (retryAfterMs: number, ageMs: number) =>
    new HttpStatusError({ status: 503, retryAfterMs, at: Date.now() - ageMs });
  // (The clock may tick between building the error and reading it: a millisecond or so.)
  const fresh = waitLeft(error(1_000, 0), now) as number;
  assert.ok(fresh >= 990 && fresh <= 1_000, `${fresh} ms left of 1,000 at once`);
  const left = waitLeft(error(1_000, 400), now) as number;
  assert.ok(left >= 590 && left <= 600, `${left} ms left of 1,000 after 400`);
  assert.equal(waitLeft(error(250, 400), now), 0, 'a wait over before the throw is none left, not negative');
  // A clock stepped forward by 10 minutes meanwhile takes off no more than the longest read.
  assert.equal(waitLeft(error(3_600_000, 600_000), now), 3_600_000 - MAX_BODY_WAIT_MS);
  // One built by hand may carry anything: NaN or a negative wait names none, Infinity stays.
  assert.equal(waitLeft(error(Number.NaN, 0), now), undefined);
  assert.equal(waitLeft(error(-5, 0), now), undefined);
  assert.equal(waitLeft(error(Number.POSITIVE_INFINITY, 400), now), Number.POSITIVE_INFINITY);
  assert.equal(waitLeft(new HttpStatusError({ status: 404 }), now), undefined);
});
