import assert from 'node:assert/strict';
import process from 'node:process';
import { test } from 'node:test';
import { aiSdkOptions, openaiOptions } from '../adapters/providers/index.ts';
import type { Middleware } from '../src/call.ts';
import { CircuitOpenError, TimeoutError } from '../src/errors.ts';
import type { BreakwaterEvent } from '../src/events.ts';
import { policySchema, validate } from '../src/options.ts';
import { definePolicy, type PolicyConfig, type PolicyJson } from '../src/policy.ts';
import { always, sequence, withServer } from './helpers/server.ts';

const fast = { initialMs: 5, factor: 2, maxMs: 20, jitter: 'none' } as const;

test('definePolicy({}) fills in the documented defaults', () => {
  const { resolved } = definePolicy({});
  assert.equal(resolved.retry.attempts, 3);
  assert.deepEqual(resolved.retry.backoff, {
    initialMs: 500,
    factor: 2,
    maxMs: 32_000,
    jitter: 'decorrelated',
  });
  assert.deepEqual(resolved.retry.statuses, [408, 429, 500, 502, 503, 504, 529]);
  assert.equal(resolved.retry.maxRetryAfterMs, 60_000);
  assert.deepEqual(resolved.retry.budget, { tokens: 10, refund: 0.1 });
  assert.equal(resolved.retry.resend, 'safe');
  assert.deepEqual(resolved.timeout, { attemptMs: 30_000, totalMs: 120_000 });
  assert.equal(resolved.idempotencyKeys, false);
  assert.equal(resolved.capture.bodyBytes, 2048);
  assert.deepEqual(resolved.breaker, {});
});

test('resolved.capture fills in bodyWaitMs (1000 by default, read by the MCP and A2A adapters) and keeps a given one', () => {
  assert.deepEqual(definePolicy({}).resolved.capture, { bodyBytes: 2048, bodyWaitMs: 1000 });
  assert.deepEqual(definePolicy({ capture: { bodyWaitMs: 250 } }).resolved.capture, {
    bodyBytes: 2048,
    bodyWaitMs: 250,
  });
  // The resolved config is itself a valid config, and its JSON gives the same policy.
  for (const policy of [definePolicy({}), definePolicy({ capture: { bodyBytes: 10, bodyWaitMs: 0 } })]) {
    const again = definePolicy(JSON.parse(JSON.stringify(policy.resolved)));
    assert.deepEqual(again.resolved, policy.resolved);
    assert.deepEqual(definePolicy(JSON.parse(JSON.stringify(policy))).resolved, policy.resolved);
    assert.equal(validate(policySchema, again, 'test'), again);
  }
});

test('a retry budget given in part resolves with the other field at its default; false stays off', () => {
  // README: policy.resolved has the retry defaults filled in, the budget's fields included.
  assert.deepEqual(definePolicy({ retry: { budget: { tokens: 20 } } }).resolved.retry.budget, {
    tokens: 20,
    refund: 0.1,
  });
  assert.deepEqual(definePolicy({ retry: { budget: { refund: 0.5 } } }).resolved.retry.budget, {
    tokens: 10,
    refund: 0.5,
  });
  assert.equal(definePolicy({ retry: { budget: false } }).resolved.retry.budget, false);
});

test('a retry initialMs above the default cap raises the cap with it, as backoff() does', () => {
  const { resolved } = definePolicy({ retry: { backoff: { initialMs: 60_000 } } });
  assert.deepEqual(resolved.retry.backoff, {
    initialMs: 60_000,
    factor: 2,
    maxMs: 60_000,
    jitter: 'decorrelated',
  });
  // A cap the user set below their own initialMs is still their mistake to hear about.
  assert.throws(() => definePolicy({ retry: { backoff: { initialMs: 60_000, maxMs: 1_000 } } }), TypeError);
});

test('a policy is JSON-serialisable and round-trips to the same config', () => {
  const config = {
    name: 'github-mcp',
    retry: { attempts: 4, backoff: { initialMs: 100, jitter: '+20%' as const } },
    breaker: { consecutiveFailures: 3 },
    timeout: { attemptMs: 10_000 },
    idempotencyKeys: true,
  };
  const policy = definePolicy(config);
  const again = definePolicy(JSON.parse(JSON.stringify(policy)));
  assert.deepEqual(again.config, policy.config);
  assert.deepEqual(again.resolved, policy.resolved);
  assert.ok(Object.isFrozen(policy.config), 'Object.isFrozen(policy.config)');
  config.retry.attempts = 9;
  assert.equal(policy.resolved.retry.attempts, 4, 'later changes to the input do not leak in');
});

test('a config read from JSON is taken without a cast, and checked at run time; words spelt out in code are still checked at compile time', () => {
  // A const object literal is typed as TypeScript types a JSON module
  // (`import config from './policy.json' with { type: 'json' }`): its words widened to
  // string, its false to boolean. Before, this line needed `as PolicyConfig` (tsc, deno check).
  const fromJson = {
    name: 'svc',
    retry: { attempts: 4, resend: 'never', budget: false, statuses: [429, 503], backoff: { jitter: '+30%' } },
    breaker: { open: { jitter: 'full' } },
    timeout: false,
    capture: { bodyBytes: 1024 },
  };
  const policy = definePolicy(fromJson);
  assert.equal(policy.resolved.retry.resend, 'never');
  assert.equal(policy.resolved.retry.budget, false);
  assert.equal(policy.resolved.timeout, false);
  const asJson: PolicyJson = JSON.parse(JSON.stringify(policy));
  assert.deepEqual(definePolicy(asJson).config, policy.config);
  // A bad word from JSON reaches definePolicy()'s run-time check, as any bad config does.
  const badJson = { retry: { resend: 'nevr', budget: true }, timeout: true };
  assert.throws(
    () => definePolicy(badJson),
    (error: unknown) =>
      error instanceof TypeError &&
      /retry\.resend: .*"nevr"/.test(error.message) &&
      /retry\.budget: .*true/.test(error.message) &&
      /timeout: .*true/.test(error.message),
  );
  // Written in code, the same mistakes stay compile errors (tsc and deno check fail on an
  // unused @ts-expect-error), and a typed config keeps its literal types.
  // @ts-expect-error 'nevr' is not a ResendRule
  assert.throws(() => definePolicy({ retry: { resend: 'nevr' } }), TypeError);
  // @ts-expect-error a budget is an object or false
  assert.throws(() => definePolicy({ retry: { budget: true } }), TypeError);
  // @ts-expect-error an unknown key
  assert.throws(() => definePolicy({ retyr: {} }), TypeError);
  // @ts-expect-error an unknown key, from JSON too
  assert.throws(() => definePolicy({ ...fromJson, retyr: {} }), TypeError);
  const typed: PolicyConfig = { retry: { resend: 'always', backoff: { jitter: 'decorrelated' } } };
  assert.equal(definePolicy(typed).resolved.retry.resend, 'always');
  assert.equal(definePolicy().resolved.retry.resend, 'safe');
});

test('bad config is one TypeError listing every offending path and value', () => {
  assert.throws(
    () =>
      definePolicy({
        retry: { attempts: 'three' },
        breaker: { failureRatio: 2 },
        timeout: { attemptMs: -1 },
        retires: 3,
      } as never),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, 'error instanceof TypeError');
      assert.match(error.message, /definePolicy\(\)\.retry\.attempts.*got "three"/);
      assert.match(error.message, /definePolicy\(\)\.breaker\.failureRatio.*got 2/);
      assert.match(error.message, /definePolicy\(\)\.timeout\.attemptMs.*got -1/);
      assert.match(error.message, /unknown option "retires"/);
      return true;
    },
  );
});

test('idempotency keys sit inside retry: a keyed POST is retried with the same key', async () => {
  await withServer(sequence({ status: 503 }, { status: 200, body: 'done' }), async (server) => {
    const fetch = definePolicy({ retry: { backoff: fast }, idempotencyKeys: true }).fetch();
    const res = await fetch(server.origin, { method: 'POST', body: '{"tool":"create_issue"}' });
    assert.equal(await res.text(), 'done');
    assert.equal(server.requests.length, 2);
    const [first, second] = server.requests.map((r) => r.headers['idempotency-key']);
    assert.match(String(first), /^"[0-9a-f-]{36}"$/);
    assert.equal(first, second);
  });
});

test('without idempotency keys a POST answered 503 is not resent', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const fetch = definePolicy({ retry: { backoff: fast } }).fetch();
    const res = await fetch(server.origin, { method: 'POST', body: '{}' });
    await res.body?.cancel();
    assert.equal(server.requests.length, 1);
  });
});

test('middleware given to policy.fetch({ use }) runs outside retry: a POST it marks idempotent is resent', async () => {
  await withServer(sequence({ status: 503 }, { status: 200, body: 'read' }), async (server) => {
    const policy = definePolicy({ retry: { backoff: fast } });
    const marked = policy.fetch(undefined, {
      use: [
        (call, next) => {
          call.idempotent = true;
          return next(call);
        },
      ],
    });
    const res = await marked(server.origin, { method: 'POST', body: '{"method":"tools/list"}' });
    assert.equal(await res.text(), 'read');
    assert.equal(server.requests.length, 2);
  });
});

/**
 * One call through `definePolicy(config).fetch()` with auth() (token-0, refreshed to token-1,
 * token-2, ...) to a server that answers 303 to /hop, then 401 there, then 200: the status,
 * each request the server read (`METHOD url authorization`) and the refreshes made.
 */
async function afterHop401(
  config: PolicyConfig,
  init: RequestInit = {},
): Promise<{ status: number; requests: string[]; refreshes: number }> {
  return withServer(
    sequence({ status: 303, headers: { location: '/hop' } }, { status: 401 }, { status: 200 }),
    async (server) => {
      let refreshes = 0;
      const fetch = definePolicy(config).fetch(undefined, {
        auth: { token: 'token-0', refresh: async () => `token-${++refreshes}` },
      });
      const res = await fetch(`${server.origin}/orders${init.method === 'POST' ? '' : '/run'}`, init);
      await res.body?.cancel();
      const requests = server.requests.map((r) => `${r.method} ${r.url} ${r.headers.authorization}`);
      return { status: res.status, requests, refreshes };
    },
  );
}

test("resend: 'never' holds for auth() too: a GET answered 303 ran, and its hop's 401 is not sent again after the refresh", async () => {
  // Found by test/policy-properties.test.ts: auth() resent an idempotent call after a 401
  // reached through a redirect, whatever retry's resend rule said.
  const { status, requests, refreshes } = await afterHop401({ retry: { backoff: fast, resend: 'never' } });
  assert.equal(status, 401);
  assert.deepEqual(requests, ['GET /orders/run Bearer token-0', 'GET /hop Bearer token-0']);
  // The token is refreshed all the same: the next call goes with the new one.
  assert.equal(refreshes, 1);
});

test("resend: 'never' holds for auth() with a single attempt too, where the policy builds no retry()", async () => {
  const { status, requests } = await afterHop401({ retry: { attempts: 1, resend: 'never' } });
  assert.equal(status, 401);
  assert.deepEqual(requests, ['GET /orders/run Bearer token-0', 'GET /hop Bearer token-0']);
});

test("resend: 'never' holds for a keyed POST too: answered 303 it ran, and auth() does not send it again after its hop's 401", async () => {
  const { status, requests } = await afterHop401(
    { retry: { backoff: fast, resend: 'never' }, idempotencyKeys: true },
    { method: 'POST', body: '{"item":"book"}' },
  );
  assert.equal(status, 401);
  assert.deepEqual(requests, ['POST /orders Bearer token-0', 'GET /hop Bearer token-0']);
});

test("with resend: 'safe' auth() still resends a GET whose hop met a 401, with the new token", async () => {
  const { status, requests } = await afterHop401({ retry: { backoff: fast } });
  assert.equal(status, 200);
  assert.deepEqual(requests, [
    'GET /orders/run Bearer token-0',
    'GET /hop Bearer token-0',
    'GET /orders/run Bearer token-1',
  ]);
});

test('policy.fetch({ use }) that is not a list of functions is a TypeError naming each bad entry', () => {
  const policy = definePolicy({});
  assert.throws(
    () => policy.fetch(undefined, { use: [() => undefined as never, 'nope'] as never }),
    (error: unknown) =>
      error instanceof TypeError &&
      /policy\.fetch\(\)/.test(error.message) &&
      /use\.1: must be a function/.test(error.message),
  );
  assert.throws(() => policy.fetch(undefined, { use: 'nope' as never }), TypeError);
});

test('policy.fetch() rejects an option it does not know, as definePolicy() does: a misspelt auth or onEvent is not dropped in silence', () => {
  const policy = definePolicy({});
  assert.throws(
    () => policy.fetch(undefined, { Auth: { token: 'sk-live-1' }, onevent: () => undefined } as never),
    (error: unknown) =>
      error instanceof TypeError &&
      /policy\.fetch\(\): unknown option "Auth", "onevent"/.test(error.message) &&
      !error.message.includes('sk-live-1'),
  );
  assert.throws(
    () => policy.fetch(undefined, { onEvent: 'log' } as never),
    (error: unknown) =>
      error instanceof TypeError && /policy\.fetch\(\)\.onEvent: must be a function/.test(error.message),
  );
});

test('policy.fetch() given its options first, or a base URL, is a TypeError naming policy.fetch(base), not createFetch()', () => {
  const policy = definePolicy({});
  for (const base of [{ onEvent: () => undefined }, 'https://api.example.com', null]) {
    assert.throws(
      () => policy.fetch(base as never),
      (error: unknown) => {
        assert.ok(error instanceof TypeError, 'error instanceof TypeError');
        assert.match(
          error.message,
          /policy\.fetch\(base\): must be a fetch function; options go second \(got /,
        );
        assert.doesNotMatch(error.message, /createFetch/);
        return true;
      },
    );
  }
  // A fetch, or none, is taken as before.
  assert.equal(typeof policy.fetch(globalThis.fetch), 'function');
  assert.equal(typeof policy.fetch(undefined, {}), 'function');
});
test('the breaker sits inside retry: once it opens for longer than maxRetryAfterMs, retries stop reaching the server', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const policy = definePolicy({
      name: 'flaky',
      retry: { attempts: 6, backoff: fast, budget: false },
      // Open past maxRetryAfterMs (60 s): a refused resend is not waited out (a shorter
      // open time is: see retry.test.ts), so the call ends on the breaker's refusal.
      breaker: { consecutiveFailures: 2, open: { initialMs: 120_000, maxMs: 120_000, jitter: 'none' } },
    });
    const fetch = policy.fetch();
    await assert.rejects(fetch(server.origin), CircuitOpenError);
    assert.equal(server.requests.length, 2);
    assert.equal(policy.stats('flaky').breaker?.state, 'open');
  });
});

test('the attempt timeout sits inside retry: a hung attempt is retried', async () => {
  await withServer(
    (_req, index) => (index === 0 ? { hang: true } : { status: 200, body: 'second' }),
    async (server) => {
      const fetch = definePolicy({
        retry: { backoff: fast },
        timeout: { attemptMs: 50, totalMs: 5000 },
      }).fetch();
      const res = await fetch(server.origin);
      assert.equal(await res.text(), 'second');
    },
  );
});

test('the capture sees each failure and stats report it with the budget and the circuit', async () => {
  await withServer(
    sequence({ status: 503, body: '{"error":{"message":"busy"}}' }, { status: 200 }),
    async (server) => {
      const policy = definePolicy({ name: 'svc', retry: { backoff: fast } });
      const res = await policy.fetch()(server.origin);
      await res.body?.cancel();
      const stats = policy.stats('svc');
      assert.equal(stats.lastFailure?.serverMessage, 'busy');
      assert.equal(stats.retry?.retries, 1);
      assert.equal(stats.breaker?.state, 'closed');
    },
  );
});

test('clients of one policy share its state; auth and onEvent are per client', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const policy = definePolicy({ name: 'shared' });
    const events: BreakwaterEvent[] = [];
    const a = policy.fetch(undefined, { auth: { token: 'token-a' }, onEvent: (e) => events.push(e) });
    const b = policy.fetch(undefined, { auth: { token: 'token-b' } });
    await (await a(server.origin)).text();
    await (await b(server.origin)).text();
    assert.equal(server.requests[0]?.headers.authorization, 'Bearer token-a');
    assert.equal(server.requests[1]?.headers.authorization, 'Bearer token-b');
    assert.equal(events.filter((e) => e.type === 'attempt').length, 1);
    assert.equal(policy.stats('shared').breaker?.state, 'closed');
  });
});

test('retry: false and timeout: false leave those layers out', async () => {
  await withServer(always({ status: 503 }), async (server) => {
    const policy = definePolicy({ retry: false, timeout: false, breaker: false });
    const res = await policy.fetch()(server.origin);
    await res.body?.cancel();
    assert.equal(server.requests.length, 1);
    assert.equal(policy.resolved.timeout, false);
  });
});

test('the policy’s total deadline bounds each attempt and names itself when it is the nearer one', async () => {
  await withServer(always({ hang: true }), async (server) => {
    const fetch = definePolicy({ retry: false, timeout: { attemptMs: 5_000, totalMs: 80 } }).fetch();
    const started = performance.now();
    await assert.rejects(fetch(server.origin), (error: unknown) => {
      assert.ok(error instanceof TimeoutError, 'error instanceof TimeoutError');
      assert.equal(error.scope, 'total');
      assert.equal(error.ms, 80);
      return true;
    });
    assert.ok(performance.now() - started < 1000, 'performance.now() - started < 1000');
  });
});

test('an attemptMs longer than totalMs, or the default one above a smaller totalMs, is no config error: the total deadline ends the attempt', async () => {
  // Decided, not overlooked: each attempt is bounded by the time the total leaves it, so the
  // combination is harmless, and `{ totalMs }` alone (or providerConfig()'s 5-minute attempt
  // under a totalMs of your own) must not throw.
  assert.deepEqual(definePolicy({ timeout: { attemptMs: 5_000, totalMs: 1_000 } }).resolved.timeout, {
    attemptMs: 5_000,
    totalMs: 1_000,
  });
  const policy = definePolicy({ retry: false, timeout: { totalMs: 60 } });
  assert.deepEqual(policy.resolved.timeout, { attemptMs: 30_000, totalMs: 60 });
  await withServer(always({ hang: true }), async (server) => {
    await assert.rejects(
      policy.fetch()(server.origin),
      (error: unknown) => error instanceof TimeoutError && error.scope === 'total' && error.ms === 60,
      'the total deadline ends the attempt',
    );
  });
});

test('a breaker option given as undefined is left out, as JSON leaves it out: the breaker still takes retry.maxRetryAfterMs', async () => {
  await withServer(always({ status: 429, headers: { 'retry-after': '1' } }), async (server) => {
    // A config built in code passes optional fields as undefined; its own JSON drops them.
    const config = {
      retry: { attempts: 1, maxRetryAfterMs: 100 },
      breaker: { maxRetryAfterMs: undefined },
      timeout: false,
    } as const;
    for (const given of [config, JSON.parse(JSON.stringify(config))]) {
      const fetch = definePolicy(given).fetch();
      await (await fetch(server.origin)).body?.cancel();
      // The key is paced for 1 s, past the 100 ms the user allows: fail fast, do not wait.
      const started = performance.now();
      await assert.rejects(fetch(server.origin), CircuitOpenError);
      assert.ok(performance.now() - started < 500, 'waited out the pause');
    }
    assert.equal(server.requests.length, 2);
  });
});

test('a credential passed in the wrong place is never shown in the option error, whatever the path', () => {
  const policy = definePolicy({});
  const token = 'sk-proj-Q3vX9fLm2TzB7wKp4RnYc8HdJ6sA1eGu';
  const refreshToken = 'rt_1f8c2b7e9a4d4c3b8e6f0a2d5c7b9e1f';
  const urlSecrets = ['hunter2-pw', 'k-live-123'];
  const wrong: [string, () => unknown][] = [
    // base is a fetch, not a token or a base URL
    ['a token as the base fetch', () => policy.fetch(token as never)],
    [
      'a base URL with secrets',
      () => policy.fetch('https://bot:hunter2-pw@api.example.com/v1?key=k-live-123' as never),
    ],
    ['a token as the options', () => policy.fetch(undefined, token as never)],
    // auth({ token }), not auth(token); refresh is a function that gets a token
    [
      'a token as the auth options',
      () => policy.fetch(undefined, { auth: { token: 'x', refresh: refreshToken } } as never),
    ],
    ['a token as the config', () => definePolicy(token as never)],
    ['a Bearer header value as the config', () => definePolicy(`Bearer ${token}` as never)],
  ];
  for (const [label, call] of wrong) {
    assert.throws(call, (error: unknown) => {
      assert.ok(error instanceof TypeError, label);
      for (const secret of [token, refreshToken, ...urlSecrets]) {
        assert.ok(!error.message.includes(secret.slice(0, 12)), `${label} shows it: ${error.message}`);
      }
      assert.match(
        error.message,
        /\(got (a string \(not shown\)|"https:\/\/api\.example\.com\/v1\?key=\[redacted\]")\)/,
        label,
      );
      return true;
    });
  }
  // An ordinary wrong value is still quoted, so the user sees what they wrote.
  assert.throws(() => definePolicy({ retry: { resend: 'sometimes' } } as never), /\(got "sometimes"\)/);
});

test('a huge wrong string value is described at once: only its start is read', () => {
  // 10 MB of URLs, each redacted, took seconds when the whole value was redacted to show 60 characters.
  const huge = 'https://h/?a=b '.repeat(700_000);
  const started = performance.now();
  assert.throws(
    () => definePolicy({ retry: { resend: huge } } as never),
    /retry\.resend: .*\(got "https:\/\/h\/\?a=\[redacted\]/,
  );
  assert.ok(performance.now() - started < 1000, `${Math.round(performance.now() - started)} ms`);
});

test('a long wrong value that reads as words is still shown: a misspelt option name or setting, a host name', () => {
  // Only a run that reads as a key (digits, symbols or capitals in a row among its
  // letters) is hidden; without the name of an unknown option the user cannot find it.
  assert.throws(
    () => definePolicy({ retry: { maxRetryAfterMilliseconds: 5_000 } } as never),
    /definePolicy\(\)\.retry: unknown option "maxRetryAfterMilliseconds"/,
  );
  assert.throws(
    () => definePolicy({ retry: { resend: 'safe-for-idempotent-requests' } } as never),
    /retry\.resend: .*\(got "safe-for-idempotent-requests"\)/,
  );
  assert.throws(
    () => definePolicy({ timeout: { attemptMs: 'https://generativelanguage.googleapis.com/v1' } } as never),
    /timeout\.attemptMs: .*\(got "https:\/\/generativelanguage\.googleapis\.com\/v1"\)/,
  );
  // A token spelt with separators is still hidden whole.
  assert.throws(
    () => definePolicy({ retry: { resend: 'sk-ant-api03-Q3vXfLm-TzBwKpRnYc' } } as never),
    /retry\.resend: .*\(got a string \(not shown\)\)/,
  );
});

test('a base64 or percent-encoded secret is never shown in the option error: its / and %XX do not cut it into short words', () => {
  const secrets = [
    // AWS's documented example secret access key: base64 with '/', no run of 20 without it.
    ['wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', 'wJalrXUtnFEMI'],
    // An Azure SAS token: its signature percent-encoded. redactText() hides a sig= value
    // itself (0acd191), so the rest of the token may be shown: "sig=[redacted]".
    ['sv=2022-11-02&sp=r&sig=XqF3a%2BQp7Lz%2F9Kd4w%2BTm1Rn8%3D', 'XqF3a'],
  ];
  const hidden = (secret: string, part: string) => (error: unknown) =>
    error instanceof TypeError &&
    !error.message.includes(part) &&
    /\(got (a string \(not shown\)|"[^"]*\[redacted\][^"]*")\)$/.test(error.message)
      ? true
      : assert.fail(`${secret}: ${(error as Error).message}`);
  for (const [secret, part] of secrets as [string, string][]) {
    assert.throws(() => definePolicy(secret as never), hidden(secret, part));
    assert.throws(() => definePolicy({}).fetch(secret as never), hidden(secret, part));
  }
  // A URL with a path is still shown, redacted: its pieces read as words.
  assert.throws(
    () => definePolicy({ timeout: { attemptMs: 'https://api.openai.com/v1/chat/completions' } } as never),
    /\(got "https:\/\/api\.openai\.com\/v1\/chat\/completions"\)/,
  );
});

test('an Authorization value (Bearer or Basic) passed in the wrong place is never shown, however short its credential', () => {
  // auth('Bearer …') for auth({ token }): a short dev key or Basic user:pass is no run of 20.
  for (const value of ['Bearer dev-key-1234', 'Basic dXNlcjpwYXNz', 'bearer abcdefghijklmnopqrstuvwxyz']) {
    assert.throws(() => definePolicy(value as never), /\(got a string \(not shown\)\)$/, value);
    assert.throws(
      () => definePolicy({}).fetch(undefined, { auth: value } as never),
      /\(got a string \(not shown\)\)/,
    );
  }
});

test('policy.fetch() takes a use list written as const, and resolved.timeout types both deadlines as set', async () => {
  await withServer(always({ status: 200, body: 'ok' }), async (server) => {
    const marked: boolean[] = [];
    const mark: Middleware = async function mark(call, next) {
      call.idempotent = true;
      marked.push(call.idempotent);
      return next(call);
    };
    const policy = definePolicy({ name: 'typed' });
    const use = [mark] as const;
    const fetch = policy.fetch(undefined, { use });
    assert.equal(await (await fetch(server.origin, { method: 'POST', body: '{}' })).text(), 'ok');
    assert.deepEqual(marked, [true]);
    // resolve() sets both deadlines whenever timeouts are on: the type says so, no cast.
    const deadlines = policy.resolved.timeout;
    const totalMs: number = deadlines === false ? 0 : deadlines.totalMs;
    const attemptMs: number = deadlines === false ? 0 : deadlines.attemptMs;
    assert.deepEqual([attemptMs, totalMs], [30_000, 120_000]);
    // And every retry field but replayBodyBytes is set.
    const attempts: number = policy.resolved.retry.attempts;
    assert.equal(attempts, 3);
  });
});

test('an async onEvent listener that rejects (a log sink that is down) is ignored as one that throws is: the call succeeds, no unhandled rejection', async () => {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown): void => {
    unhandled.push(reason);
  };
  process.on('unhandledRejection', onUnhandled);
  try {
    await withServer(always({ status: 200, body: 'ok' }), async (server) => {
      const fetch = definePolicy().fetch(undefined, {
        onEvent: async () => {
          throw new Error('log sink down');
        },
      });
      const response = await fetch(server.origin);
      assert.equal(await response.text(), 'ok');
    });
    await new Promise((resolve) => setTimeout(resolve, 10));
    assert.deepEqual(unhandled, []);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});

test('stats(key) after a known sequence: two calls, two retries, one give-up; each attempt passes the breaker and the capture with one Idempotency-Key', async () => {
  await withServer(
    sequence({ status: 503 }, { status: 503 }, { status: 200 }, { status: 400, body: '{"error":"bad"}' }),
    async (server) => {
      const events: BreakwaterEvent[] = [];
      const policy = definePolicy({ name: 'svc', retry: { backoff: fast }, idempotencyKeys: true });
      const fetch = policy.fetch(undefined, { onEvent: (e) => events.push(e) });
      for (const expected of [200, 400]) {
        const res = await fetch(server.origin, { method: 'POST', body: 'x' });
        await res.text();
        assert.equal(res.status, expected);
      }
      assert.deepEqual(
        events.map((e) => e.type),
        ['attempt', 'captured', 'retry', 'attempt', 'captured', 'retry', 'attempt'].concat([
          'attempt',
          'captured',
          'give-up',
        ]),
      );
      const keys = server.requests.map((r) => r.headers['idempotency-key']);
      assert.equal(new Set(keys.slice(0, 3)).size, 1, 'one key across the first call’s attempts');
      assert.notEqual(keys[3], keys[0]);
      const stats = policy.stats('svc');
      // Two 503s took a token each, the 200 put 0.1 back; a 400 says nothing of the server's health.
      assert.deepEqual(stats.retry, { tokens: 8.1, retries: 2, giveUps: 1 });
      assert.equal(stats.breaker?.windowTotal, 4, 'the breaker saw every attempt');
      assert.equal(stats.breaker?.windowFailures, 2);
      assert.equal(stats.breaker?.state, 'closed');
      assert.deepEqual([stats.lastFailure?.status, stats.lastFailure?.serverMessage], [400, 'bad']);
      const giveUp = events.at(-1);
      assert.deepEqual(giveUp?.type === 'give-up' && [giveUp.attempt, giveUp.why, giveUp.reason], [
        1,
        'not-retryable',
        'HTTP 400',
      ]);
      // A key never seen: no circuit, no failure; retry's budget for it is full (see below).
      assert.deepEqual(policy.stats('never-seen'), {
        retry: { tokens: 10, retries: 0, giveUps: 0 },
        breaker: undefined,
        lastFailure: undefined,
      });
    },
  );
});

test('stats(key) of a key whose calls all succeeded reports its full retry budget, not undefined', async () => {
  // Three OK calls read { breaker: {...} } without retry, which is also how a policy that
  // does not retry reads, and budget: false's tokens.
  await withServer(always({ status: 200, body: 'ok' }), async (server) => {
    const policy = definePolicy({ name: 'svc' });
    const fetch = policy.fetch();
    for (let i = 0; i < 3; i++) await (await fetch(server.origin)).text();
    const stats = policy.stats('svc');
    assert.deepEqual(stats.retry, { tokens: 10, retries: 0, giveUps: 0 });
    assert.equal(stats.breaker?.windowTotal, 3, 'the breaker saw the three calls');
    assert.equal(stats.lastFailure, undefined);
    const sized = definePolicy({ name: 'svc', retry: { budget: { tokens: 4 } } });
    assert.deepEqual(
      sized.stats('svc').retry,
      { tokens: 4, retries: 0, giveUps: 0 },
      'the budget as configured',
    );
    const unbudgeted = definePolicy({ name: 'svc', retry: { budget: false } });
    assert.deepEqual(
      unbudgeted.stats('svc').retry,
      { tokens: undefined, retries: 0, giveUps: 0 },
      'no budget',
    );
    assert.equal(
      definePolicy({ retry: false }).stats('svc').retry,
      undefined,
      'a policy that does not retry',
    );
  });
});

test('an adapter given its options in the policy’s place ({ fetch } alone) says it wants a policy from definePolicy(), not "Cannot read properties of undefined"', () => {
  for (const notAPolicy of [{ fetch: globalThis.fetch }, { fetch: () => undefined, resolved: undefined }]) {
    for (const [where, build] of [
      ['openaiOptions(policy)', () => openaiOptions(notAPolicy as never)],
      ['aiSdkOptions(policy)', () => aiSdkOptions(notAPolicy as never)],
      ['validate', () => validate(policySchema, notAPolicy, 'validate')],
    ] as const) {
      assert.throws(build, (error: unknown) => {
        assert.ok(error instanceof TypeError, `${where}: error instanceof TypeError`);
        assert.match(
          error.message,
          new RegExp(`${where.replace(/[()]/g, '\\$&')}: must be a policy from definePolicy\\(\\)`),
        );
        return true;
      });
    }
  }
  // A policy is taken, as before.
  assert.equal(typeof openaiOptions(definePolicy({})).fetch, 'function');
});
