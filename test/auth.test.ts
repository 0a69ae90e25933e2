import assert from 'node:assert/strict';
import type { Readable } from 'node:stream';
import { test } from 'node:test';
import { inspect } from 'node:util';
import { auth } from '../src/auth.ts';
import { circuitBreaker } from '../src/breaker.ts';
import type { Middleware } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import { BreakwaterError, CircuitOpenError, TimeoutError } from '../src/errors.ts';
import type { BreakwaterEvent } from '../src/events.ts';
import { definePolicy } from '../src/policy.ts';
import { retry } from '../src/retry.ts';
import { deadline, timeout } from '../src/timeout.ts';
import { countedSignal } from './helpers/counted-signal.ts';
import { collector } from './helpers/gc.ts';
import { nodeFetchOverHttp, nodeFetchShaped } from './helpers/node-fetch.ts';
import {
  always,
  closedPort,
  type Handler,
  lateFirstAnswer,
  type TestServer,
  withServer,
} from './helpers/server.ts';

const OLD = 'sk-old-0123456789';
const NEW = 'sk-new-9876543210';

/** A server that accepts only `Bearer NEW` and answers 401 to anything else. */
const acceptsNew: Handler = (req) =>
  req.headers.authorization === `Bearer ${NEW}`
    ? { status: 200, body: 'ok' }
    : { status: 401, body: 'expired' };

/** A refresh() that counts its calls and returns NEW. */
function countingRefresh(): { refresh: () => Promise<string>; calls: () => number } {
  let calls = 0;
  return {
    refresh: async () => {
      calls += 1;
      return NEW;
    },
    calls: () => calls,
  };
}

function tick(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

test('auth stamps Authorization: Bearer <token> on every request', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [auth({ token: OLD })] });
    for (const path of ['/a', '/b']) {
      const res = await fetch(`${server.origin}${path}`);
      await res.body?.cancel();
    }
    assert.deepEqual(
      server.requests.map((r) => r.headers.authorization),
      [`Bearer ${OLD}`, `Bearer ${OLD}`],
    );
  });
});

test('a token that contains a space already has its scheme and is sent verbatim', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [auth({ token: 'Basic dXNlcjpwYXNz' })] });
    await (await fetch(server.origin)).text();
    assert.equal(server.requests[0]?.headers.authorization, 'Basic dXNlcjpwYXNz');
  });
});

test('a token function is called for every call and may be async', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    let n = 0;
    const fetch = createFetch({
      use: [
        auth({
          token: async () => {
            n += 1;
            return `tok-${n}`;
          },
        }),
      ],
    });
    await (await fetch(server.origin)).text();
    await (await fetch(server.origin)).text();
    assert.deepEqual(
      server.requests.map((r) => r.headers.authorization),
      ['Bearer tok-1', 'Bearer tok-2'],
    );
  });
});

test('header and scheme options send a bare key in another header', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [auth({ token: OLD, header: 'x-api-key', scheme: '' })] });
    await (await fetch(server.origin)).text();
    assert.equal(server.requests[0]?.headers['x-api-key'], OLD);
    assert.equal(server.requests[0]?.headers.authorization, undefined);
  });
});

test('auth owns its header: a value the caller set is replaced', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [auth({ token: OLD })] });
    const headers = { Authorization: 'Bearer caller-own' };
    await (await fetch(server.origin, { headers })).text();
    assert.equal(server.requests[0]?.headers.authorization, `Bearer ${OLD}`);
    assert.deepEqual(headers, { Authorization: 'Bearer caller-own' }, 'the caller’s object is not mutated');
  });
});

test('a 401 refreshes the token once and resends once with the new token', async () => {
  await withServer(acceptsNew, async (server) => {
    const { refresh, calls } = countingRefresh();
    const events: BreakwaterEvent[] = [];
    const fetch = createFetch({ use: [auth({ token: OLD, refresh })], onEvent: (e) => events.push(e) });
    const res = await fetch(`${server.origin}/mcp`, { method: 'POST', body: '{"id":1}' });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), 'ok');
    assert.equal(calls(), 1);
    assert.deepEqual(
      server.requests.map((r) => [r.headers.authorization, r.text]),
      [
        [`Bearer ${OLD}`, '{"id":1}'],
        [`Bearer ${NEW}`, '{"id":1}'],
      ],
      'the same body went out again, with the new token',
    );
    assert.deepEqual(
      events.map((e) => (e.type === 'attempt' ? `attempt ${e.attempt}` : e.type)),
      ['attempt 1', 'auth-refresh', 'attempt 2'],
      'the resend is attempt 2',
    );
    assert.deepEqual(events[1], { type: 'auth-refresh', key: server.origin, outcome: 'refreshed' });

    // Later calls use the refreshed token straight away.
    await (await fetch(`${server.origin}/next`)).text();
    assert.equal(server.requests[2]?.headers.authorization, `Bearer ${NEW}`);
    assert.equal(calls(), 1);
  });
});

test('20 concurrent 401s share exactly one refresh() and every call ends 200', async () => {
  await withServer(acceptsNew, async (server) => {
    let calls = 0;
    const refresh = async (): Promise<string> => {
      calls += 1;
      await tick(20); // long enough for every other 401 to arrive meanwhile
      return NEW;
    };
    const events: BreakwaterEvent[] = [];
    const fetch = createFetch({ use: [auth({ token: OLD, refresh })], onEvent: (e) => events.push(e) });
    const responses = await Promise.all(
      Array.from({ length: 20 }, (_, i) => fetch(`${server.origin}/call/${i}`)),
    );
    const statuses = await Promise.all(
      responses.map(async (res) => {
        await res.text();
        return res.status;
      }),
    );
    assert.deepEqual(statuses, Array(20).fill(200));
    assert.equal(calls, 1);
    assert.equal(events.filter((e) => e.type === 'auth-refresh').length, 1);
    const sent = server.requests.map((r) => r.headers.authorization);
    assert.equal(sent.length, 40, 'each call went out once with the old token and once with the new');
    assert.equal(sent.filter((h) => h === `Bearer ${OLD}`).length, 20);
    assert.equal(sent.filter((h) => h === `Bearer ${NEW}`).length, 20);
  });
});

test('a 401 for a request sent with an older token is resent with the newer one, without another refresh', async () => {
  let releaseSlow: () => void = () => {};
  const slowMayAnswer = new Promise<void>((resolve) => {
    releaseSlow = resolve;
  });
  const handler: Handler = async (req) => {
    if (req.url === '/slow' && req.headers.authorization === `Bearer ${OLD}`) await slowMayAnswer;
    return acceptsNew(req, 0);
  };
  await withServer(handler, async (server) => {
    const { refresh, calls } = countingRefresh();
    const fetch = createFetch({ use: [auth({ token: OLD, refresh })] });
    const slow = fetch(`${server.origin}/slow`);
    // The fast call meets a 401, refreshes and succeeds while the slow one is held.
    const fast = await fetch(`${server.origin}/fast`);
    assert.equal(fast.status, 200);
    await fast.text();
    releaseSlow();
    const late = await slow;
    assert.equal(late.status, 200);
    await late.text();
    assert.equal(calls(), 1, 'the late 401 did not refresh again');
    assert.deepEqual(
      server.requests.filter((r) => r.url === '/slow').map((r) => r.headers.authorization),
      [`Bearer ${OLD}`, `Bearer ${NEW}`],
    );
  });
});

test('a second 401 after the refresh is returned as is: no loop', async () => {
  await withServer(always({ status: 401, body: 'still no' }), async (server) => {
    const { refresh, calls } = countingRefresh();
    const fetch = createFetch({ use: [auth({ token: OLD, refresh })] });
    const res = await fetch(server.origin);
    assert.equal(res.status, 401);
    assert.equal(await res.text(), 'still no');
    assert.equal(calls(), 1);
    assert.equal(server.requests.length, 2);
  });
});

test('a 403 is returned as is and never refreshed', async () => {
  await withServer(always({ status: 403, body: 'forbidden' }), async (server) => {
    const { refresh, calls } = countingRefresh();
    const fetch = createFetch({ use: [auth({ token: OLD, refresh })] });
    const res = await fetch(server.origin);
    assert.equal(res.status, 403);
    assert.equal(await res.text(), 'forbidden');
    assert.equal(calls(), 0);
    assert.equal(server.requests.length, 1);
  });
});

test('without a refresh option a 401 is returned as is', async () => {
  await withServer(always({ status: 401, body: 'expired' }), async (server) => {
    const fetch = createFetch({ use: [auth({ token: OLD })] });
    const res = await fetch(server.origin);
    assert.equal(res.status, 401);
    assert.equal(await res.text(), 'expired');
    assert.equal(server.requests.length, 1);
  });
});

test('a failed refresh rejects with AUTH_REFRESH_FAILED naming the server, never the token', async () => {
  await withServer(always({ status: 401 }), async (server) => {
    const events: BreakwaterEvent[] = [];
    const cause = new Error('token endpoint said invalid_grant');
    const fetch = createFetch({
      use: [
        auth({
          token: OLD,
          refresh: async () => {
            throw cause;
          },
        }),
      ],
      onEvent: (e) => events.push(e),
    });
    await assert.rejects(fetch(`${server.origin}/mcp?api_key=${OLD}`), (error: unknown) => {
      assert.ok(error instanceof BreakwaterError, 'error instanceof BreakwaterError');
      assert.equal(error.code, 'AUTH_REFRESH_FAILED');
      assert.equal(error.cause, cause);
      assert.match(error.message, new RegExp(`server "${server.origin}"`));
      assert.match(error.message, /not resent/);
      for (const shown of [error.message, JSON.stringify(error), String(error)]) {
        assert.ok(!shown.includes(OLD), `a token leaked into: ${shown}`);
      }
      return true;
    });
    assert.equal(server.requests.length, 1, 'nothing was resent');
    assert.deepEqual(
      events.filter((e) => e.type === 'auth-refresh'),
      [{ type: 'auth-refresh', key: server.origin, outcome: 'failed' }],
    );
  });
});

test('a refresh that returns an invalid token fails the same way without echoing it', async () => {
  await withServer(always({ status: 401 }), async (server) => {
    const bad = `${NEW}\r\nx-evil: 1`;
    const fetch = createFetch({ use: [auth({ token: OLD, refresh: () => bad })] });
    await assert.rejects(fetch(server.origin), (error: unknown) => {
      assert.ok(error instanceof BreakwaterError, 'error instanceof BreakwaterError');
      assert.equal(error.code, 'AUTH_REFRESH_FAILED');
      assert.ok(error.cause instanceof TypeError, 'error.cause instanceof TypeError');
      const shown = `${error.message} ${JSON.stringify(error)} ${error.cause.message}`;
      assert.ok(!shown.includes(NEW) && !shown.includes(OLD), `a token leaked into: ${shown}`);
      return true;
    });
    assert.equal(server.requests.length, 1);
  });
});

test('no event carries a token', async () => {
  await withServer(acceptsNew, async (server) => {
    const events: BreakwaterEvent[] = [];
    const fetch = createFetch({
      use: [auth({ token: () => OLD, refresh: () => NEW })],
      onEvent: (e) => events.push(e),
    });
    await (await fetch(`${server.origin}/x`, { method: 'POST', body: 'b' })).text();
    assert.ok(events.length >= 3, 'events.length >= 3');
    const logged = JSON.stringify(events);
    assert.ok(!logged.includes(OLD) && !logged.includes(NEW), logged);
  });
});

test('a stream body cannot be sent again: its 401 is returned as is', async () => {
  await withServer(always({ status: 401, body: 'expired' }), async (server) => {
    const { refresh, calls } = countingRefresh();
    const fetch = createFetch({ use: [auth({ token: OLD, refresh })] });
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('streamed'));
        controller.close();
      },
    });
    const res = await fetch(server.origin, { method: 'POST', body, duplex: 'half' } as RequestInit);
    assert.equal(res.status, 401);
    assert.equal(await res.text(), 'expired');
    // Not resent, but refreshed: the next call goes with the new token.
    assert.equal(calls(), 1);
    assert.equal(server.requests.length, 1);
    assert.equal(server.requests[0]?.text, 'streamed');
  });
});

test('a 401 for a stream body still refreshes the token: a client whose every request streams its body is not answered 401 forever', async () => {
  await withServer(acceptsNew, async (server) => {
    const { refresh, calls } = countingRefresh();
    const fetch = createFetch({ use: [auth({ token: OLD, refresh })] });
    const upload = (text: string): Promise<Response> =>
      fetch(server.origin, {
        method: 'PUT',
        body: new ReadableStream<Uint8Array>({
          start(controller) {
            controller.enqueue(new TextEncoder().encode(text));
            controller.close();
          },
        }),
        duplex: 'half',
      } as RequestInit);
    const first = await upload('part 1');
    // Not resent (the stream is spent), so its 401 comes back as it is, body and all.
    assert.equal(first.status, 401);
    assert.equal(await first.text(), 'expired');
    const second = await upload('part 1 again');
    assert.equal(second.status, 200);
    assert.equal(await second.text(), 'ok');
    assert.equal(calls(), 1);
    assert.deepEqual(
      server.requests.map((r) => [r.text, r.headers.authorization]),
      [
        ['part 1', `Bearer ${OLD}`],
        ['part 1 again', `Bearer ${NEW}`],
      ],
    );
  });
});

test('a Request with a body cannot be sent again either: its 401 is returned as is', async () => {
  await withServer(always({ status: 401, body: 'expired' }), async (server) => {
    const { refresh, calls } = countingRefresh();
    const fetch = createFetch({ use: [auth({ token: OLD, refresh })] });
    const res = await fetch(new Request(server.origin, { method: 'POST', body: 'once' }));
    assert.equal(res.status, 401);
    assert.equal(await res.text(), 'expired');
    // Not resent, but refreshed: the next call goes with the new token.
    assert.equal(calls(), 1);
    assert.deepEqual(
      server.requests.map((r) => [r.text, r.headers.authorization]),
      [['once', `Bearer ${OLD}`]],
    );
  });
});

test('an async iterable body (a generator, a Node Readable) cannot be sent again: its 401 is returned as is', async () => {
  // Node, Deno and Bun's fetch all take one (with duplex: 'half'), and read it once: a
  // resend of the spent iterable went out with an empty body, a POST with its data lost.
  await withServer(always({ status: 401, body: 'expired' }), async (server) => {
    const { refresh, calls } = countingRefresh();
    const fetch = createFetch({ use: [auth({ token: OLD, refresh })] });
    async function* chunks(): AsyncGenerator<Uint8Array> {
      yield new TextEncoder().encode('streamed');
    }
    const init = { method: 'POST', body: chunks(), duplex: 'half' };
    const res = await fetch(server.origin, init as unknown as RequestInit);
    assert.equal(res.status, 401);
    assert.equal(await res.text(), 'expired');
    assert.deepEqual(
      server.requests.map((r) => r.text),
      ['streamed'],
    );
    // Not resent, but refreshed: the next call goes with the new token.
    assert.equal(calls(), 1);
  });
});

test('a 401 whose body is slow to cancel holds up neither the refresh and resend nor the caller’s abort', async () => {
  // A body's cancel() settles only when its source's cancel does: a custom fetch that
  // relays another stream (a proxy, a mock) may take long or never. Nobody reads that
  // 401: the call must go on (or end, for a caller who left) without waiting for it.
  for (const abort of [false, true]) {
    const controller = new AbortController();
    const reason = new Error('agent turn cancelled');
    const sent: (string | null)[] = [];
    const relay = async (_input: unknown, init?: RequestInit): Promise<Response> => {
      const authorization = new Headers(init?.headers).get('authorization');
      sent.push(authorization);
      if (authorization === `Bearer ${NEW}`) return new Response('ok');
      const body = new ReadableStream({
        cancel() {
          if (abort) controller.abort(reason);
          return new Promise<void>(() => {});
        },
      });
      return new Response(body, { status: 401 });
    };
    const fetch = createFetch({ fetch: relay, use: [auth({ token: OLD, refresh: async () => NEW })] });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const outcome = await Promise.race([
      fetch('http://127.0.0.1:9/x', { signal: controller.signal }).then(
        (res) => `HTTP ${res.status}`,
        (error: unknown) => (error === reason ? 'the caller’s reason' : String(error)),
      ),
      new Promise((resolve) => {
        timer = setTimeout(() => resolve('still waiting after 200 ms'), 200);
      }),
    ]);
    clearTimeout(timer);
    assert.equal(outcome, abort ? 'the caller’s reason' : 'HTTP 200', `abort: ${abort}`);
    assert.deepEqual(sent, abort ? [`Bearer ${OLD}`] : [`Bearer ${OLD}`, `Bearer ${NEW}`]);
  }
});

test('a caller who aborts while a refresh runs gets their own abort reason at once', async () => {
  await withServer(acceptsNew, async (server) => {
    const controller = new AbortController();
    let finish: (token: string) => void = () => {};
    const refresh = (): Promise<string> => {
      controller.abort(new Error('user gave up'));
      return new Promise<string>((resolve) => {
        finish = resolve;
      });
    };
    const fetch = createFetch({ use: [auth({ token: OLD, refresh })] });
    await assert.rejects(fetch(`${server.origin}/aborted`, { signal: controller.signal }), {
      message: 'user gave up',
    });
    finish(NEW);
    // The refresh still completes for everyone else.
    const res = await fetch(`${server.origin}/later`);
    assert.equal(res.status, 200);
    await res.text();
    assert.equal(
      server.requests.filter((r) => r.url === '/aborted').length,
      1,
      'the aborted call was not resent',
    );
  });
});

test('a caller who aborts while token() runs gets their own abort reason at once, and nothing is sent', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const controller = new AbortController();
    const reason = new Error('user gave up');
    // A token getter that never settles (a vault or OAuth client that hangs).
    const token = (): Promise<string> => {
      setTimeout(() => controller.abort(reason), 10);
      return new Promise<string>(() => {});
    };
    const fetch = createFetch({ use: [auth({ token })] });
    const started = Date.now();
    await assert.rejects(fetch(server.origin, { signal: controller.signal }), (error) => error === reason);
    assert.ok(Date.now() - started < 1_000, 'the abort ended the wait at once');
    assert.equal(server.requests.length, 0);
  });
});

test('under a policy, a refresh() or token() that never settles ends at the total deadline with TimeoutError', async () => {
  await withServer(always({ status: 401 }), async (server) => {
    const policy = definePolicy({
      retry: false,
      breaker: false,
      timeout: { attemptMs: 5_000, totalMs: 100 },
    });
    const hanging = (): Promise<string> => new Promise<string>(() => {});
    for (const options of [
      { token: OLD, refresh: hanging },
      { token: hanging, refresh: hanging },
    ]) {
      const fetch = policy.fetch(undefined, { auth: options });
      const started = Date.now();
      await assert.rejects(fetch(`${server.origin}/mcp`), (error: unknown) => {
        assert.ok(error instanceof TimeoutError, String(error));
        assert.equal(error.scope, 'total');
        assert.equal(error.ms, 100);
        return true;
      });
      const took = Date.now() - started;
      assert.ok(took >= 90 && took < 1_000, `ended after ${took} ms`);
    }
    assert.equal(server.requests.length, 1, 'only the first call got as far as a request');
  });
});

test('a 401 for an older token that arrives while a newer refresh runs waits for it and resends with its token', async () => {
  const T1 = 'sk-t1-1111111111';
  const T2 = 'sk-t2-2222222222';
  let valid = T1;
  let releaseSlow: () => void = () => {};
  const slowMayAnswer = new Promise<void>((resolve) => {
    releaseSlow = resolve;
  });
  const handler: Handler = async (req) => {
    if (req.url === '/slow' && req.headers.authorization === `Bearer ${OLD}`) await slowMayAnswer;
    return req.headers.authorization === `Bearer ${valid}` ? { status: 200 } : { status: 401 };
  };
  await withServer(handler, async (server) => {
    let finishSecond: (token: string) => void = () => {};
    let calls = 0;
    const refresh = (): Promise<string> => {
      calls += 1;
      if (calls === 1) return Promise.resolve(T1);
      return new Promise<string>((resolve) => {
        finishSecond = resolve;
      });
    };
    const fetch = createFetch({ use: [auth({ token: OLD, refresh })] });
    const slow = fetch(`${server.origin}/slow`); // sent with OLD, held by the server
    await (await fetch(`${server.origin}/first`)).text(); // OLD → 401 → refresh → T1 → 200
    valid = T2; // T1 expires
    const second = fetch(`${server.origin}/second`); // T1 → 401 → the second refresh starts, held
    while (calls < 2) await tick(5);
    releaseSlow(); // the slow call's 401 (for OLD) arrives while the second refresh runs
    await tick(50);
    finishSecond(T2);
    const [late, next] = await Promise.all([slow, second]);
    assert.equal(late.status, 200, 'the late 401 waited for the running refresh');
    assert.equal(next.status, 200);
    await Promise.all([late.text(), next.text()]);
    assert.equal(calls, 2);
    assert.deepEqual(
      server.requests.filter((r) => r.url === '/slow').map((r) => r.headers.authorization),
      [`Bearer ${OLD}`, `Bearer ${T2}`],
    );
  });
});

test('a token() that throws or returns a bad value fails with AUTH_TOKEN_FAILED and sends nothing', async () => {
  await withServer(always({ status: 200 }), async (server) => {
    const throwing = createFetch({
      use: [
        auth({
          token: () => {
            throw new Error('vault sealed');
          },
        }),
      ],
    });
    await assert.rejects(throwing(server.origin), { code: 'AUTH_TOKEN_FAILED' });
    const bad = createFetch({ use: [auth({ token: () => `${OLD}\n` })] });
    await assert.rejects(bad(server.origin), (error: unknown) => {
      assert.ok(error instanceof BreakwaterError, 'error instanceof BreakwaterError');
      assert.equal(error.code, 'AUTH_TOKEN_FAILED');
      assert.ok(
        !JSON.stringify(error).includes(OLD) && !error.message.includes(OLD),
        '!JSON.stringify(error).includes(OLD) && !error.message.includes(OLD)',
      );
      return true;
    });
    assert.equal(server.requests.length, 0);
  });
});

test('bad options are a TypeError listing every problem, never printing a token', () => {
  assert.throws(
    () =>
      auth({
        token: 42 as unknown as string,
        refresh: 'soon' as never,
        header: 'bad header',
        extra: 1,
      } as never),
    (error: unknown) => {
      assert.ok(error instanceof TypeError, 'error instanceof TypeError');
      assert.match(error.message, /auth\(\)\.token: must be a non-empty string/);
      assert.match(error.message, /auth\(\)\.refresh: must be a function/);
      assert.match(error.message, /auth\(\)\.header: must be a header name/);
      assert.match(error.message, /unknown option "extra"/);
      return true;
    },
  );
  for (const token of [`${OLD}\nx`, ` ${OLD}`, `${OLD}€`, '']) {
    assert.throws(
      () => auth({ token }),
      (error: unknown) => {
        assert.ok(error instanceof TypeError, 'error instanceof TypeError');
        assert.match(error.message, /auth\(\)\.token: .*\(got a string \(not shown\)\)/);
        if (token !== '') assert.ok(!error.message.includes(OLD), error.message);
        return true;
      },
    );
  }
  assert.throws(() => auth({ token: OLD, scheme: 'Bear er' }), /auth\(\)\.scheme/);
  assert.throws(() => auth(undefined as never), TypeError);
});

test('auth is a named middleware', () => {
  const middleware: Middleware = auth({ token: OLD });
  assert.equal(middleware.name, 'auth');
  assert.ok(!String(middleware).includes(OLD), '!String(middleware).includes(OLD)');
});

/** Counts the abort listeners on `signal` (added minus removed) from now on: one left behind holds what it closes over. */
function listenersOn(signal: AbortSignal): () => number {
  let listeners = 0;
  const add = signal.addEventListener.bind(signal);
  const remove = signal.removeEventListener.bind(signal);
  signal.addEventListener = ((...args: Parameters<typeof add>) => {
    listeners++;
    add(...args);
  }) as typeof add;
  signal.removeEventListener = ((...args: Parameters<typeof remove>) => {
    listeners--;
    remove(...args);
  }) as typeof remove;
  return () => listeners;
}

test('a wait for token() that the caller gives up on leaves no timer and no abort listener behind', async () => {
  // token() never settles (a hung vault): the wait must clean up after itself when the
  // caller aborts (its deadline timer would keep a process alive for up to totalMs) and
  // when the deadline fires (its abort listener would stay on the caller's signal).
  const realSetTimeout = globalThis.setTimeout;
  const realClearTimeout = globalThis.clearTimeout;
  const long = new Set<unknown>();
  globalThis.setTimeout = ((fn: () => void, ms?: number, ...args: unknown[]) => {
    const id = realSetTimeout(fn, ms, ...args);
    if (ms !== undefined && ms >= 30_000) long.add(id);
    return id;
  }) as typeof setTimeout;
  globalThis.clearTimeout = ((id: Parameters<typeof clearTimeout>[0]) => {
    long.delete(id);
    realClearTimeout(id);
  }) as typeof clearTimeout;
  const hanging = (): Promise<string> => new Promise<string>(() => {});
  const sent = async (): Promise<Response> => new Response('never sent');
  try {
    // The caller aborts: the deadline's timer goes too.
    const controller = new AbortController();
    const fetch = createFetch({ fetch: sent, use: [deadline(60_000), auth({ token: hanging })] });
    const pending = fetch('http://127.0.0.1:9/a', { signal: controller.signal });
    await tick(5);
    controller.abort(new Error('user gave up'));
    await assert.rejects(pending, { message: 'user gave up' });
    assert.equal(long.size, 0, 'the 60 s deadline timer was cleared');

    // The deadline fires: the listener on the caller's long-lived signal goes too.
    const session = new AbortController();
    const listeners = listenersOn(session.signal);
    const timed = createFetch({ fetch: sent, use: [deadline(20), auth({ token: hanging })] });
    await assert.rejects(timed('http://127.0.0.1:9/b', { signal: session.signal }), TimeoutError);
    assert.equal(listeners(), 0, 'no listener left on the caller signal');
  } finally {
    globalThis.setTimeout = realSetTimeout;
    globalThis.clearTimeout = realClearTimeout;
  }
});

test('a token() that answers at once costs no timer and no abort listener, even under a deadline', async () => {
  // The bounded wait is for a getter that may hang; a cached token returned at once
  // must not pay a setTimeout and an abort listener on every call (measured: the happy
  // path under definePolicy() went from about 2.7 to 5.5 µs per call).
  const realSetTimeout = globalThis.setTimeout;
  let timers = 0;
  globalThis.setTimeout = ((fn: () => void, ms?: number, ...args: unknown[]) => {
    if (ms !== undefined && ms >= 30_000) timers++;
    return realSetTimeout(fn, ms, ...args);
  }) as typeof setTimeout;
  const session = new AbortController();
  let listeners = 0;
  const add = session.signal.addEventListener.bind(session.signal);
  session.signal.addEventListener = ((...args: Parameters<typeof add>) => {
    listeners++;
    add(...args);
  }) as typeof add;
  try {
    const seen: (string | null)[] = [];
    const fetch = createFetch({
      fetch: async (_input, init) => {
        seen.push(new Headers(init?.headers).get('authorization'));
        return new Response('ok');
      },
      use: [deadline(60_000), auth({ token: () => OLD })],
    });
    await (await fetch('http://127.0.0.1:9/a', { signal: session.signal })).text();
    assert.deepEqual(seen, [`Bearer ${OLD}`]);
    assert.equal(timers, 0, 'no deadline timer');
    assert.equal(listeners, 0, 'no abort listener');
  } finally {
    globalThis.setTimeout = realSetTimeout;
  }
});

/** The lease the refresh-timeout tests give `refresh()`: short, yet far above a loopback round trip. */
const LEASE_MS = 100;

/** Tokens the refresh-timeout tests' refreshes deliver, T1 before T2. */
const T1 = 'sk-t1-1111111111';
const T2 = 'sk-t2-2222222222';

/** A server that accepts only `Bearer <token>` for the given tokens and answers 401 to anything else. */
function accepts(...tokens: string[]): Handler {
  const valid = new Set(tokens.map((token) => `Bearer ${token}`));
  return (req) => (valid.has(String(req.headers.authorization)) ? { status: 200 } : { status: 401 });
}

/** Each request `server` received, as [path, Authorization]: which call went out with which token. */
function sent(server: TestServer): [string, string | string[] | undefined][] {
  return server.requests.map((r) => [r.url, r.headers.authorization]);
}

/** The outcomes of the auth-refresh events, in order. */
function refreshOutcomes(events: BreakwaterEvent[]): string[] {
  return events.flatMap((e) => (e.type === 'auth-refresh' ? [e.outcome] : []));
}

/**
 * A client of `server` with `held.refresh` under the LEASE_MS lease, its events collected,
 * where a refresh was abandoned and its replacement is running, both still held: its first
 * call (/a, sent with OLD) has failed with AUTH_REFRESH_FAILED, leaving refresh 1 behind,
 * and its second (`b`: /b, sent with OLD, 401) waits on refresh 2.
 */
async function abandonedAndReplaced(
  server: TestServer,
  held: ReturnType<typeof heldRefresh>,
): Promise<{ fetch: typeof globalThis.fetch; events: BreakwaterEvent[]; b: Promise<Response> }> {
  const events: BreakwaterEvent[] = [];
  const fetch = createFetch({
    use: [auth({ token: OLD, refresh: held.refresh, refreshTimeoutMs: LEASE_MS })],
    onEvent: (e) => events.push(e),
  });
  await assert.rejects(within(fetch(`${server.origin}/a`), 2_000), { code: 'AUTH_REFRESH_FAILED' });
  const b = fetch(`${server.origin}/b`);
  while (held.calls() < 2) await tick(2);
  return { fetch, events, b };
}

/** `pending`, or a rejection saying it was still pending after `ms` (so old code fails instead of hanging the suite). */
function within<T>(pending: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`still pending after ${ms} ms`)), ms);
  });
  return Promise.race([pending, late]).finally(() => clearTimeout(timer));
}

/**
 * A `refresh()` whose n-th call (1-based) returns a promise the test settles with
 * `finish(n, token)` or `fail(n, error)`.
 */
function heldRefresh(): {
  refresh: () => Promise<string>;
  calls: () => number;
  finish: (n: number, token: string) => void;
  fail: (n: number, error: Error) => void;
} {
  const settlers: { resolve: (token: string) => void; reject: (error: Error) => void }[] = [];
  return {
    refresh: () =>
      new Promise<string>((resolve, reject) => {
        settlers.push({ resolve, reject });
      }),
    calls: () => settlers.length,
    finish: (n, token) => settlers[n - 1]?.resolve(token),
    fail: (n, error) => settlers[n - 1]?.reject(error),
  };
}

test('a refresh() that never settles is abandoned after refreshTimeoutMs, and the next 401 starts a new one', async () => {
  await withServer(acceptsNew, async (server) => {
    let calls = 0;
    const refresh = (): Promise<string> => {
      calls += 1;
      // The first refresh hangs (a token endpoint that never answers); the second works.
      return calls === 1 ? new Promise<string>(() => {}) : Promise.resolve(NEW);
    };
    const events: BreakwaterEvent[] = [];
    // No deadline and no signal: the lease alone has to end the wait.
    const fetch = createFetch({
      use: [auth({ token: OLD, refresh, refreshTimeoutMs: LEASE_MS })],
      onEvent: (e) => events.push(e),
    });
    const started = Date.now();
    await assert.rejects(within(fetch(`${server.origin}/first`), 2_000), (error: unknown) => {
      assert.ok(error instanceof BreakwaterError, String(error));
      assert.equal(error.code, 'AUTH_REFRESH_FAILED');
      assert.match((error.cause as Error).message, /did not settle within 100 ms \(refreshTimeoutMs\)/);
      return true;
    });
    const took = Date.now() - started;
    assert.ok(took >= LEASE_MS - 5 && took < 1_000, `ended after ${took} ms`);

    const res = await within(fetch(`${server.origin}/second`), 2_000);
    assert.equal(res.status, 200, 'the next 401 started a new refresh instead of joining the hung one');
    await res.text();
    assert.equal(calls, 2);
    assert.deepEqual(sent(server), [
      ['/first', `Bearer ${OLD}`],
      ['/second', `Bearer ${OLD}`],
      ['/second', `Bearer ${NEW}`],
    ]);
    assert.deepEqual(refreshOutcomes(events), ['failed', 'refreshed']);
  });
});

test('a token from an abandoned refresh is used when it arrives before its replacement’s', async () => {
  // With rotating refresh tokens, the abandoned refresh may have spent the refresh
  // token: its access token can be the only one the server will still honour.
  await withServer(accepts(T1, T2), async (server) => {
    const held = heldRefresh();
    const { fetch, events, b } = await abandonedAndReplaced(server, held);
    held.finish(1, T1); // the abandoned refresh finishes first
    await tick(0);
    const c = await within(fetch(`${server.origin}/c`), 2_000);
    assert.equal(c.status, 200);
    await c.text();
    held.finish(2, T2); // then the replacement: newer, so it takes over
    const late = await within(b, 2_000);
    assert.equal(late.status, 200);
    await late.text();
    await (await fetch(`${server.origin}/d`)).text();
    assert.deepEqual(sent(server), [
      ['/a', `Bearer ${OLD}`],
      ['/b', `Bearer ${OLD}`],
      ['/c', `Bearer ${T1}`],
      ['/b', `Bearer ${T2}`],
      ['/d', `Bearer ${T2}`],
    ]);
    assert.deepEqual(refreshOutcomes(events), ['failed', 'refreshed', 'refreshed']);
  });
});

test('a token from an abandoned refresh that arrives after its replacement’s is dropped', async () => {
  await withServer(accepts(T1, T2), async (server) => {
    const held = heldRefresh();
    const { fetch, events, b } = await abandonedAndReplaced(server, held);
    held.finish(2, T2); // the replacement finishes first
    const res = await within(b, 2_000);
    assert.equal(res.status, 200);
    await res.text();
    held.finish(1, T1); // the abandoned refresh's older token comes too late
    await tick(0);
    await (await fetch(`${server.origin}/c`)).text();
    assert.deepEqual(sent(server), [
      ['/a', `Bearer ${OLD}`],
      ['/b', `Bearer ${OLD}`],
      ['/b', `Bearer ${T2}`],
      ['/c', `Bearer ${T2}`],
    ]);
    assert.deepEqual(refreshOutcomes(events), ['failed', 'refreshed']);
  });
});

test('a wait for a refresh leaves no timer and no abort listener behind, whether the caller aborts or the lease ends', async () => {
  // No timer of the lease outlives the calls waiting on it: one left running would hold
  // a process open for up to refreshTimeoutMs after its callers gave up. Only auth's
  // own timers are counted: the runtime's HTTP client may start some of its own.
  const realSetTimeout = globalThis.setTimeout;
  const realClearTimeout = globalThis.clearTimeout;
  const pending = new Set<unknown>();
  globalThis.setTimeout = ((fn: (...a: unknown[]) => void, ms?: number, ...args: unknown[]) => {
    if (!/[\\/]src[\\/]auth\.ts/.test(String(new Error().stack))) return realSetTimeout(fn, ms, ...args);
    const id: unknown = realSetTimeout(
      (...a: unknown[]) => {
        pending.delete(id);
        fn(...a);
      },
      ms,
      ...args,
    );
    pending.add(id);
    return id;
  }) as typeof setTimeout;
  globalThis.clearTimeout = ((id: Parameters<typeof clearTimeout>[0]) => {
    pending.delete(id);
    realClearTimeout(id);
  }) as typeof clearTimeout;
  const session = new AbortController();
  const listeners = listenersOn(session.signal);
  const unauthorized = async (): Promise<Response> => new Response('expired', { status: 401 });
  const hanging = (): Promise<string> => new Promise<string>(() => {});
  try {
    // The caller aborts long before a 60 s lease ends: the lease's timer goes with it.
    const controller = new AbortController();
    const patient = createFetch({
      fetch: unauthorized,
      use: [auth({ token: OLD, refresh: hanging, refreshTimeoutMs: 60_000 })],
    });
    const aborted = patient('http://127.0.0.1:9/a', { signal: controller.signal });
    await tick(5);
    controller.abort(new Error('user gave up'));
    await assert.rejects(aborted, { message: 'user gave up' });
    assert.equal(pending.size, 0, 'no timer left after the abort');

    // The lease ends: no timer and no listener on the caller's long-lived signal remain.
    const leased = createFetch({
      fetch: unauthorized,
      use: [auth({ token: OLD, refresh: hanging, refreshTimeoutMs: 20 })],
    });
    await assert.rejects(leased('http://127.0.0.1:9/b', { signal: session.signal }), {
      code: 'AUTH_REFRESH_FAILED',
    });
    assert.equal(pending.size, 0, 'no timer left after the lease ended');
    assert.equal(listeners(), 0, 'no listener left on the caller signal');
  } finally {
    globalThis.setTimeout = realSetTimeout;
    globalThis.clearTimeout = realClearTimeout;
  }
});

test('refreshTimeoutMs must be a positive number of milliseconds', () => {
  for (const refreshTimeoutMs of [0, -1, Number.NaN, 2 ** 31, '100']) {
    assert.throws(
      () => auth({ token: OLD, refresh: () => NEW, refreshTimeoutMs: refreshTimeoutMs as number }),
      /auth\(\)\.refreshTimeoutMs/,
    );
  }
});

test('a token() that never settles holds up only its own call: the next call asks token() again', async () => {
  // token() is not shared between calls (unlike refresh()), so a hung one cannot stick
  // the client: each call is bounded by its own abort and deadline.
  await withServer(always({ status: 200 }), async (server) => {
    let calls = 0;
    const token = (): Promise<string> => {
      calls += 1;
      return calls === 1 ? new Promise<string>(() => {}) : Promise.resolve(OLD);
    };
    const fetch = createFetch({ use: [deadline(50), auth({ token })] });
    await assert.rejects(within(fetch(`${server.origin}/a`), 2_000), TimeoutError);
    const res = await within(fetch(`${server.origin}/b`), 2_000);
    assert.equal(res.status, 200);
    await res.text();
    assert.deepEqual(sent(server), [['/b', `Bearer ${OLD}`]]);
  });
});

test('a call whose refresh fails after an abandoned refresh delivered a newer token is resent with that token', async () => {
  // Rotating refresh tokens: the abandoned refresh finishes late and spends the refresh
  // token, so its replacement fails (invalid_grant). The calls waiting on the
  // replacement need no refresh of their own any more: the abandoned one's token is new.
  await withServer(accepts(T1), async (server) => {
    const held = heldRefresh();
    const { b } = await abandonedAndReplaced(server, held);
    held.finish(1, T1); // the abandoned refresh finishes after all
    await tick(0);
    held.fail(2, new Error('invalid_grant: refresh token already used'));
    const outcome = await within(
      b.catch((error: unknown) => error),
      2_000,
    );
    assert.ok(outcome instanceof Response, `ended with ${String(outcome)}`);
    assert.equal(outcome.status, 200);
    await outcome.text();
    assert.deepEqual(sent(server), [
      ['/a', `Bearer ${OLD}`],
      ['/b', `Bearer ${OLD}`],
      ['/b', `Bearer ${T1}`],
    ]);
  });
});

/**
 * A call sent with OLD (/x) whose 401 comes back only once T1 (refreshed in by /a, then
 * refused on /y) is being replaced: /x joins /y's refresh, which then fails with `failure`.
 * Returns how /x and /y ended.
 */
async function olderCallJoinsAFailingRefresh(
  server: TestServer,
  failure: Error,
): Promise<{ x: unknown; y: unknown }> {
  let releaseX!: () => void;
  const xHeld = new Promise<void>((resolve) => {
    releaseX = resolve;
  });
  const { refresh, calls, finish, fail } = heldRefresh();
  const fetch = createFetch({
    // /x's first 401 is held back until a refresh replacing T1 is running.
    fetch: async (input, init) => {
      const response = await globalThis.fetch(input, init);
      if (String(input).endsWith('/x')) await xHeld;
      return response;
    },
    use: [auth({ token: OLD, refresh })],
  });
  const x = fetch(`${server.origin}/x`).catch((error: unknown) => error); // sent with OLD
  while (server.requests.length < 1) await tick(2);
  const a = fetch(`${server.origin}/a`); // OLD → 401 → the refresh to T1 → T1 → 401
  while (calls() < 1) await tick(2);
  finish(1, T1);
  const first = await within(a, 2_000);
  assert.equal(first.status, 401);
  await first.text();
  const y = fetch(`${server.origin}/y`).catch((error: unknown) => error); // T1 → 401 → a refresh, held
  while (calls() < 2) await tick(2);
  releaseX(); // /x's 401 for OLD: it joins the running refresh
  await tick(20);
  fail(2, failure);
  const ended = { y: await within(y, 2_000), x: await within(x, 2_000) };
  if (ended.x instanceof Response) await ended.x.text();
  assert.deepEqual(sent(server), [
    ['/x', `Bearer ${OLD}`],
    ['/a', `Bearer ${OLD}`],
    ['/a', `Bearer ${T1}`],
    ['/y', `Bearer ${T1}`],
  ]);
  return ended;
}

test('a call with an older token that joins a refresh which then fails is not resent with the token that refresh was replacing', async () => {
  // T1 was refreshed in, then refused too: the refresh that call /y started is replacing
  // it. A call sent with OLD before T1 came joins that refresh; when it fails, T1 is
  // still the newest token and known to be refused, so the call fails as /y does
  // instead of going again with T1 for another 401.
  await withServer(always({ status: 401 }), async (server) => {
    const { x, y } = await olderCallJoinsAFailingRefresh(server, new Error('invalid_grant'));
    assert.equal(y instanceof BreakwaterError, true);
    assert.equal(
      (x as BreakwaterError).code,
      'AUTH_REFRESH_FAILED',
      `ended with ${x instanceof Response ? `HTTP ${x.status}` : String(x)}`,
    );
  });
});

test('a refresh() failure quoting a newer token than the one a call went with shows it in neither call’s AUTH_REFRESH_FAILED error', async () => {
  // /x went with OLD, but the refresh it joined was replacing T1 (refreshed in since), and
  // fails naming T1: every token this auth() has held is hidden, not only the one sent.
  // Frozen, so neither call's redaction reaches the other's: each goes up as a copy.
  await withServer(always({ status: 401 }), async (server) => {
    const { x, y } = await olderCallJoinsAFailingRefresh(
      server,
      Object.freeze(new Error(`invalid_grant: refresh for Bearer ${T1} (was ${OLD}) refused`)),
    );
    for (const error of [x, y]) {
      assert.equal((error as BreakwaterError).code, 'AUTH_REFRESH_FAILED', String(error));
      const shown = `${inspect(error, { depth: 8 })} ${JSON.stringify(error)}`;
      for (const token of [OLD, T1]) assert.ok(!shown.includes(token), `${token} shown: ${shown}`);
      assert.match(shown, /invalid_grant/, 'the cause still says what failed');
    }
  });
});

/** A custom fetch that drops `init.signal`: an abort or a deadline never reaches the request. */
const deafFetch: typeof globalThis.fetch = (input, init) => {
  const { signal: _ignored, ...rest } = init ?? {};
  return globalThis.fetch(input, rest);
};

test('an auth() left running below an ended attempt deadline does not call refresh() for a late 401', async () => {
  // The caller has its TimeoutError; refreshing for nobody hits the token endpoint, and
  // with rotating refresh tokens (OAuth 2.1 §4.3.1) spends one.
  await withServer(always({ status: 401, delayMs: 100 }), async (server) => {
    const counting = countingRefresh();
    let arrived = false;
    const fetch = createFetch({
      fetch: deafFetch,
      use: [
        timeout({ attemptMs: 30 }),
        auth({ token: OLD, refresh: counting.refresh }),
        async function late(call, next) {
          const response = await next(call);
          arrived = true;
          return response;
        },
      ],
    });
    await assert.rejects(fetch(`${server.origin}/x`), TimeoutError);
    await tick(250);
    assert.ok(arrived, 'the late 401 arrived');
    assert.equal(counting.calls(), 0, 'refresh() calls');
    assert.deepEqual(sent(server), [['/x', `Bearer ${OLD}`]]);
  });
});

test('an auth() left running below an ended attempt deadline does not resend during the next attempt a retry above started', async () => {
  // [retry, timeout({ attemptMs }), auth]: the first attempt's 401 arrives while the
  // second attempt runs; the first attempt's auth() must neither refresh nor add a request.
  await withServer(lateFirstAnswer({ status: 401 }), async (server) => {
    const counting = countingRefresh();
    const fetch = createFetch({
      fetch: deafFetch,
      use: [
        retry({ attempts: 2, backoff: { initialMs: 1, jitter: 'none' } }),
        // The second attempt waits for the first's answer and 50 ms more: 300 ms leaves a
        // loaded machine room (100 ms timed it out under two suites at once).
        timeout({ attemptMs: 300 }),
        auth({ token: OLD, refresh: counting.refresh }),
      ],
    });
    const response = await fetch(`${server.origin}/x`);
    assert.equal(response.status, 200);
    await response.text();
    await tick(100);
    assert.equal(counting.calls(), 0, 'refresh() calls');
    assert.deepEqual(sent(server), [
      ['/x', `Bearer ${OLD}`],
      ['/x', `Bearer ${OLD}`],
    ]);
  });
});

test('a caller signal from an AbortSignal polyfill (no throwIfAborted) still gets its refresh and resend', async () => {
  // Custom fetches (node-fetch) take the abort-controller package's signals, which have
  // aborted, reason and listeners, and nothing newer.
  const polyfilled = Object.assign(new EventTarget(), { aborted: false, reason: undefined });
  await withServer(acceptsNew, async (server) => {
    const counting = countingRefresh();
    const fetch = createFetch({ fetch: deafFetch, use: [auth({ token: OLD, refresh: counting.refresh })] });
    const response = await fetch(`${server.origin}/x`, { signal: polyfilled as unknown as AbortSignal });
    assert.equal(response.status, 200);
    await response.text();
    assert.equal(counting.calls(), 1);
  });
});

const KEY = 'sk-key-0123456789';

/** Runs `fn` with two servers on two ports (two origins): `a` answers with `handleA`, `b` with 200 'from b'. */
async function withTwoOrigins(
  handleA: (b: TestServer) => Handler,
  fn: (a: TestServer, b: TestServer) => Promise<void>,
): Promise<void> {
  await withServer(always({ status: 200, body: 'from b' }), (b) => withServer(handleA(b), (a) => fn(a, b)));
}

/** A key auth() (`x-api-key`, bare), as providers that take one want it. */
const keyAuth = (): Middleware => auth({ token: KEY, header: 'x-api-key', scheme: '' });

test('a token in a header other than Authorization is not sent on to another origin a redirect leads to', async () => {
  // The Fetch standard drops only Authorization on a cross-origin redirect: Node, Deno
  // and Bun forward x-api-key to wherever the API redirects (a storage or CDN host).
  for (const status of [301, 302, 303, 307, 308]) {
    await withTwoOrigins(
      (b) => always({ status, headers: { location: `${b.origin}/file` } }),
      async (a, b) => {
        const fetch = createFetch({ use: [keyAuth()] });
        const response = await fetch(`${a.origin}/download`);
        assert.equal(response.status, 200, `after a ${status}`);
        assert.equal(await response.text(), 'from b');
        assert.equal(response.url, `${b.origin}/file`);
        assert.equal(a.requests[0]?.headers['x-api-key'], KEY);
        assert.deepEqual(
          b.requests.map((r) => [r.method, r.url, r.headers['x-api-key']]),
          [['GET', '/file', undefined]],
          `after a ${status}`,
        );
      },
    );
  }
});

test('a token in a header other than Authorization follows a redirect within its origin, then not past it', async () => {
  await withTwoOrigins(
    (b) => (req) =>
      req.url === '/a'
        ? { status: 308, headers: { location: '/b' } }
        : { status: 302, headers: { location: `${b.origin}/c` } },
    async (a, b) => {
      const fetch = createFetch({ use: [keyAuth()] });
      const response = await fetch(`${a.origin}/a`);
      assert.equal(await response.text(), 'from b');
      assert.deepEqual(
        a.requests.map((r) => [r.url, r.headers['x-api-key']]),
        [
          ['/a', KEY],
          ['/b', KEY],
        ],
      );
      assert.deepEqual(
        b.requests.map((r) => [r.url, r.headers['x-api-key']]),
        [['/c', undefined]],
      );
    },
  );
});

test('a POST redirected to another origin keeps its method and body on 307 and 308, and becomes a GET without body on 301, 302 and 303', async () => {
  for (const [status, method, body] of [
    [307, 'POST', '{"q":1}'],
    [308, 'POST', '{"q":1}'],
    [301, 'GET', ''],
    [302, 'GET', ''],
    [303, 'GET', ''],
  ] as const) {
    await withTwoOrigins(
      (b) => always({ status, headers: { location: `${b.origin}/next` } }),
      async (a, b) => {
        const fetch = createFetch({ use: [keyAuth()] });
        const response = await fetch(`${a.origin}/post`, {
          method: 'POST',
          body: '{"q":1}',
          headers: { 'content-type': 'application/json' },
        });
        assert.equal(await response.text(), 'from b');
        const got = b.requests[0];
        assert.deepEqual(
          [got?.method, got?.text, got?.headers['content-type'] !== undefined, got?.headers['x-api-key']],
          [method, body, method === 'POST', undefined],
          `after a ${status}`,
        );
      },
    );
  }
});

test('a redirect to another origin drops the Authorization and Cookie a caller set beside a key auth(), as fetch does', async () => {
  await withTwoOrigins(
    (b) => always({ status: 302, headers: { location: `${b.origin}/file` } }),
    async (a, b) => {
      const fetch = createFetch({ use: [keyAuth()] });
      const response = await fetch(`${a.origin}/x`, {
        headers: { authorization: 'Bearer caller-token', cookie: 'session=caller-cookie', 'x-trace': 't1' },
      });
      await response.text();
      assert.equal(a.requests[0]?.headers.cookie, 'session=caller-cookie');
      const got = b.requests[0]?.headers;
      assert.deepEqual(
        [got?.['x-api-key'], got?.authorization, got?.cookie, got?.['x-trace']],
        [undefined, undefined, undefined, 't1'],
      );
    },
  );
});

test('neither of two auth() in one chain sends its token on to another origin a redirect leads to', async () => {
  // A gateway's key and the API's bearer token: the outer auth() follows the redirect,
  // and the inner one must not stamp its token on the request to the other origin.
  for (const use of [
    [keyAuth(), auth({ token: OLD })],
    [auth({ token: OLD }), keyAuth()],
    [auth({ token: 'gw-0123456789', header: 'x-gateway-key', scheme: '' }), keyAuth()],
  ]) {
    await withTwoOrigins(
      (b) => always({ status: 307, headers: { location: `${b.origin}/file` } }),
      async (a, b) => {
        const response = await createFetch({ use })(`${a.origin}/x`);
        assert.equal(await response.text(), 'from b');
        assert.equal(a.requests[0]?.headers['x-api-key'], KEY);
        const got = b.requests[0]?.headers;
        assert.deepEqual(
          [got?.['x-api-key'], got?.authorization, got?.['x-gateway-key']],
          [undefined, undefined, undefined],
        );
        assert.equal(b.requests.length, 1);
      },
    );
  }
});

test('a key auth() leaves a caller\u2019s redirect: manual alone: the 3xx comes back as is', async () => {
  await withTwoOrigins(
    (b) => always({ status: 302, headers: { location: `${b.origin}/file` } }),
    async (a, b) => {
      const fetch = createFetch({ use: [keyAuth()] });
      const response = await fetch(`${a.origin}/x`, { redirect: 'manual' });
      assert.equal(response.status, 302);
      assert.equal(response.headers.get('location'), `${b.origin}/file`);
      await response.body?.cancel();
      assert.equal(b.requests.length, 0);
    },
  );
});

test('a streamed body redirected by 307 to another origin gets the 307 back, as it cannot be sent again', async () => {
  await withTwoOrigins(
    (b) => always({ status: 307, headers: { location: `${b.origin}/next` } }),
    async (a, b) => {
      const fetch = createFetch({ use: [keyAuth()] });
      const body = new Blob(['streamed']).stream();
      const response = await fetch(`${a.origin}/up`, {
        method: 'POST',
        body,
        duplex: 'half',
      } as RequestInit);
      assert.equal(response.status, 307);
      await response.body?.cancel();
      assert.equal(a.requests[0]?.text, 'streamed');
      assert.equal(b.requests.length, 0);
    },
  );
});

test('a key auth() follows at most 20 redirects, then returns the last one', async () => {
  await withServer(always({ status: 302, headers: { location: '/again' } }), async (server) => {
    const fetch = createFetch({ use: [keyAuth()] });
    const response = await fetch(`${server.origin}/x`);
    assert.equal(response.status, 302);
    await response.body?.cancel();
    assert.equal(server.requests.length, 21);
  });
});

test('under a policy, a key auth() follows a redirect within its origin, refreshes after its 401 and follows it again with the new key', async () => {
  await withTwoOrigins(
    () => (req) =>
      req.url === '/a'
        ? { status: 302, headers: { location: '/b' } }
        : req.headers['x-api-key'] === NEW
          ? { status: 200, body: 'from a' }
          : { status: 401 },
    async (a) => {
      const counting = countingRefresh();
      const policy = definePolicy({});
      const fetch = policy.fetch(undefined, {
        auth: { token: OLD, refresh: counting.refresh, header: 'x-api-key', scheme: '' },
      });
      const response = await fetch(`${a.origin}/a`);
      assert.equal(await response.text(), 'from a');
      assert.equal(response.url, `${a.origin}/b`);
      assert.equal(counting.calls(), 1);
      assert.deepEqual(
        a.requests.map((r) => [r.url, r.headers['x-api-key']]),
        [
          ['/a', OLD],
          ['/b', OLD],
          ['/a', NEW],
          ['/b', NEW],
        ],
      );
    },
  );
});

test('a key auth() rejects a redirect to a scheme other than http(s) with a TypeError, as fetch does: it never fetches a data: or file: URL a server names', async () => {
  // Fetch standard, HTTP-redirect fetch: a Location whose scheme is not HTTP(S) is a
  // network error. fetch() itself would read data: URLs and (Deno, Bun) local files.
  for (const location of ['data:text/plain,planted', 'file:///etc/hostname', 'javascript:alert(1)']) {
    await withServer(always({ status: 302, headers: { location } }), async (server) => {
      const fetch = createFetch({ use: [keyAuth()] });
      // The chain names the middleware that threw; fetch's TypeError is its cause.
      await assert.rejects(
        fetch(`${server.origin}/x`),
        (error: Error) =>
          (error instanceof TypeError || error.cause instanceof TypeError) &&
          !error.message.includes('planted'),
        location,
      );
      assert.equal(server.requests.length, 1);
    });
  }
});

test('a 401 from another origin a key auth() followed a redirect to (without the token) neither refreshes nor resends', async () => {
  // The other origin never saw the token: its 401 says nothing about it. A refresh would
  // spend a rotating refresh token, and the resend would send the request to the API again.
  await withServer(always({ status: 401, body: 'not yours' }), (b) =>
    withServer(always({ status: 307, headers: { location: `${b.origin}/file` } }), async (a) => {
      const counting = countingRefresh();
      const fetch = createFetch({
        use: [auth({ token: OLD, refresh: counting.refresh, header: 'x-api-key', scheme: '' })],
      });
      const response = await fetch(`${a.origin}/x`, { method: 'POST', body: 'once' });
      assert.equal(response.status, 401);
      assert.equal(await response.text(), 'not yours');
      assert.equal(counting.calls(), 0);
      assert.deepEqual(
        [a.requests.length, b.requests.length, b.requests[0]?.headers['x-api-key']],
        [1, 1, undefined],
      );
    }),
  );
});

test('a 401 reached through a 303 after a POST is not answered by sending the POST again: the POST ran, the 401 is the GET’s', async () => {
  // POST-redirect-GET: the server ran the POST and sent the client to its result. A 401
  // there (the token expired in between) is the GET's; resending the POST runs it twice.
  for (const options of [{}, { header: 'x-api-key', scheme: '' }]) {
    await withServer(
      (req) =>
        req.method === 'POST'
          ? { status: 303, headers: { location: '/orders/1' } }
          : req.headers.authorization === `Bearer ${NEW}` || req.headers['x-api-key'] === NEW
            ? { status: 200, body: 'order 1' }
            : { status: 401, body: 'expired' },
      async (server) => {
        const counting = countingRefresh();
        const fetch = createFetch({ use: [auth({ token: OLD, refresh: counting.refresh, ...options })] });
        const response = await fetch(`${server.origin}/orders`, { method: 'POST', body: 'buy' });
        assert.equal(response.status, 401, JSON.stringify(options));
        assert.equal(await response.text(), 'expired');
        assert.deepEqual(
          server.requests.map((r) => `${r.method} ${r.url}`),
          ['POST /orders', 'GET /orders/1'],
          JSON.stringify(options),
        );
        // The token is refreshed all the same: the next call goes with the new one.
        assert.equal(counting.calls(), 1);
        const next = await fetch(`${server.origin}/orders/1`);
        assert.equal(await next.text(), 'order 1');
      },
    );
  }
});

test('a 401 from another origin fetch followed a redirect to (without Authorization) neither refreshes nor resends', async () => {
  // Fetch drops Authorization on a redirect to another origin: that origin's 401 (a
  // storage host's own auth, an expired signed URL) says nothing about the token.
  await withServer(always({ status: 401, body: 'not yours' }), (b) =>
    withServer(always({ status: 307, headers: { location: `${b.origin}/file` } }), async (a) => {
      const counting = countingRefresh();
      const fetch = createFetch({ use: [auth({ token: OLD, refresh: counting.refresh })] });
      const response = await fetch(`${a.origin}/x`);
      assert.equal(response.status, 401);
      assert.equal(await response.text(), 'not yours');
      assert.equal(counting.calls(), 0);
      assert.deepEqual(
        [a.requests.length, b.requests.length, b.requests[0]?.headers.authorization],
        [1, 1, undefined],
      );
    }),
  );
});

test('a key auth() reads a Location sent as UTF-8 bytes as fetch does: a redirect to /café reaches /caf%C3%A9', async () => {
  // Servers send a non-ASCII Location as raw UTF-8; Headers hands it over one character
  // per byte. Fetch reads those bytes as UTF-8 (Node, Bun, browsers): read as Latin-1,
  // the next request went to /caf%C3%83%C2%A9, a path that does not exist.
  await withServer(
    (req) =>
      req.url === '/start'
        ? { status: 302, headers: { location: '/caf\u00c3\u00a9?q=\u00c3\u00a9' } }
        : { status: 200, body: req.url },
    async (server) => {
      const fetch = createFetch({ use: [keyAuth()] });
      const response = await fetch(`${server.origin}/start`);
      assert.equal(await response.text(), '/caf%C3%A9?q=%C3%A9');
      assert.equal(response.url, `${server.origin}/caf%C3%A9?q=%C3%A9`);
    },
  );
});

test('a key auth() resends a POST whose 307 within the origin met the expired token: a 307 moves the request, it did not run it', async () => {
  // An MCP server mounted at /mcp answers 307 to /mcp/ (Starlette's trailing slash); the
  // 401 there is the POST's own, refused before it ran. follow() sees every status, so
  // it knows nothing turned the request into a GET that could follow a POST that ran.
  await withServer(
    (req) =>
      req.url === '/mcp'
        ? { status: 307, headers: { location: '/mcp/' } }
        : req.headers['x-api-key'] === NEW
          ? { status: 200, body: 'ok' }
          : { status: 401 },
    async (server) => {
      const counting = countingRefresh();
      const fetch = createFetch({
        use: [auth({ token: OLD, refresh: counting.refresh, header: 'x-api-key', scheme: '' })],
      });
      const response = await fetch(`${server.origin}/mcp`, { method: 'POST', body: '{"id":1}' });
      assert.equal(response.status, 200);
      assert.equal(await response.text(), 'ok');
      assert.equal(counting.calls(), 1);
      assert.deepEqual(
        server.requests.map((r) => [r.method, r.url, r.headers['x-api-key'], r.text]),
        [
          ['POST', '/mcp', OLD, '{"id":1}'],
          ['POST', '/mcp/', OLD, '{"id":1}'],
          ['POST', '/mcp', NEW, '{"id":1}'],
          ['POST', '/mcp/', NEW, '{"id":1}'],
        ],
      );
    },
  );
});

test('header: \u2018Authorization\u2019 in any case is Authorization: fetch follows its redirects, as for the default', async () => {
  // Header names are case-insensitive. Taken for another header, it was sent with
  // redirect: 'manual' and followed by auth() itself: a browser answers that with a
  // status-0 response auth() cannot follow, so every redirect failed there.
  await withServer(
    (req) => (req.url === '/a' ? { status: 302, headers: { location: '/b' } } : { status: 200, body: 'b' }),
    async (server) => {
      const fetch = createFetch({ use: [auth({ token: OLD, header: 'Authorization', scheme: 'Token' })] });
      const response = await fetch(`${server.origin}/a`);
      assert.equal(await response.text(), 'b');
      assert.equal(response.redirected, true);
      assert.deepEqual(
        server.requests.map((r) => r.headers.authorization),
        [`Token ${OLD}`, `Token ${OLD}`],
      );
    },
  );
});

test('a base fetch whose body is a Node stream (node-fetch v2, v3): a 401 is refreshed and resent, and a key auth() follows a redirect', async () => {
  // Dropping the 401 (or a 3xx) called body.cancel(), which a Node Readable lacks: every
  // 401 failed with MIDDLEWARE_FAILED 'cancel is not a function' instead of a refresh.
  for (const options of [{}, { header: 'x-api-key', scheme: '' }]) {
    await withServer(
      (req) =>
        req.url === '/a'
          ? { status: 302, headers: { location: '/b' } }
          : req.headers.authorization === `Bearer ${NEW}` || req.headers['x-api-key'] === NEW
            ? { status: 200, body: 'ok' }
            : { status: 401, body: 'expired' },
      async (server) => {
        const counting = countingRefresh();
        const fetch = createFetch({
          fetch: nodeFetchShaped,
          use: [auth({ token: OLD, refresh: counting.refresh, ...options })],
        });
        const response = await fetch(`${server.origin}/${options.header ? 'a' : 'b'}`);
        assert.equal(response.status, 200, JSON.stringify(options));
        assert.equal(counting.calls(), 1);
      },
    );
  }
});

test('a token() or refresh() that returns a token with a line break (a CLI’s output) says what is wrong with it, never showing it', async () => {
  // execSync('gcloud auth print-access-token').toString() ends in '\n': "invalid token
  // (string)" left the user guessing, as it is a string.
  await withServer(always({ status: 401 }), async (server) => {
    for (const [options, code] of [
      [{ token: () => `${OLD}\n` }, 'AUTH_TOKEN_FAILED'],
      [{ token: OLD, refresh: () => `${NEW}\n` }, 'AUTH_REFRESH_FAILED'],
      [{ token: () => `${OLD}é` }, 'AUTH_TOKEN_FAILED'],
    ] as const) {
      await assert.rejects(createFetch({ use: [auth(options)] })(server.origin), (error: unknown) => {
        assert.ok(error instanceof BreakwaterError, 'error instanceof BreakwaterError');
        assert.equal(error.code, code);
        const said = String((error.cause as Error).message);
        assert.match(said, /printable ASCII/);
        assert.match(said, /line break/);
        assert.ok(!`${said} ${JSON.stringify(error)}`.includes('sk-'), said);
        return true;
      });
    }
  });
});

test('calls that wait together on token() with one shared signal (the MCP SDK’s) add one abort listener to it, not one each, and an abort still ends them all', async () => {
  // Node warns "Possible EventTarget memory leak detected" at 11 listeners: 20 concurrent
  // MCP tool calls with token: () => oauth.accessToken() printed it every time.
  const { controller, signal, most } = countedSignal();
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [auth({ token: () => new Promise<string>(() => {}) })] });
    const calls = Array.from({ length: 20 }, () =>
      fetch(server.origin, { signal }).catch((error: unknown) => error),
    );
    await tick(10);
    assert.equal(most(), 1, 'abort listeners on the shared signal while 20 calls wait');
    const reason = new Error('user left');
    controller.abort(reason);
    assert.deepEqual(await Promise.all(calls), Array(20).fill(reason));
    assert.equal(server.requests.length, 0);
  });
});

test('an abort from a polyfill signal that calls its listeners as functions (abortcontroller-polyfill) still ends the calls waiting on token()', async () => {
  // That polyfill's dispatch does listener.call(signal, event): a listener object's
  // handleEvent is never called there, so the waits went on and its TypeError went uncaught.
  const listeners: ((event: unknown) => void)[] = [];
  const thrown: unknown[] = [];
  const signal = {
    aborted: false,
    reason: undefined as unknown,
    addEventListener: (_type: string, listener: (event: unknown) => void) => listeners.push(listener),
    removeEventListener: (_type: string, listener: (event: unknown) => void) =>
      listeners.splice(listeners.indexOf(listener) >>> 0, 1),
  };
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [auth({ token: () => new Promise<string>(() => {}) })] });
    const calls = [1, 2].map(() =>
      fetch(server.origin, { signal: signal as unknown as AbortSignal }).catch((error: unknown) => error),
    );
    await tick(10);
    const reason = new Error('user left');
    Object.assign(signal, { aborted: true, reason });
    for (const listener of [...listeners]) {
      try {
        listener.call(signal, { type: 'abort' });
      } catch (error) {
        thrown.push(error);
      }
    }
    assert.deepEqual([await within(Promise.all(calls), 200), thrown], [[reason, reason], []]);
    assert.equal(listeners.length, 0);
  });
});

test("a base fetch whose body is a Node stream (node-fetch v2): a dropped 401's connection (and a followed 3xx's) is let go, its big body read to its end, not left open", async () => {
  // Dropping the 401 (or the 3xx a key auth() follows) skipped the body's cancel(), which a
  // Node stream has not, and the body was neither read nor let go: its connection stayed
  // taken for good.
  const body = 'x'.repeat(1024 * 1024);
  for (const options of [{}, { header: 'x-api-key', scheme: '' }]) {
    const nodeFetch = nodeFetchOverHttp();
    await withServer(
      (req) =>
        req.url === '/a'
          ? { status: 302, headers: { location: '/b' }, body }
          : req.headers.authorization === `Bearer ${NEW}` || req.headers['x-api-key'] === NEW
            ? { status: 200 }
            : { status: 401, body },
      async (server) => {
        const fetch = createFetch({
          fetch: nodeFetch.fetch,
          use: [auth({ token: OLD, refresh: countingRefresh().refresh, ...options })],
        });
        const response = await fetch(`${server.origin}/${options.header ? 'a' : 'b'}`);
        assert.equal(response.status, 200, JSON.stringify(options));
        (response.body as unknown as Readable).resume();
        assert.equal(await nodeFetch.open(), 0, `a connection left open: ${JSON.stringify(options)}`);
      },
    );
  }
});

test('a refresh() or token() that fails quoting its token endpoint URL shows no secret of it in the AUTH_* error’s causes', async () => {
  // Deno's fetch quotes the URL in its message, Bun's keeps it in `path`: util.inspect (and
  // loggers walking `cause`) printed ?client_secret= whole.
  const secret = 'S3cretOfTheClient9';
  const tokenUrl = `http://127.0.0.1:${await closedPort()}/oauth/token?client_secret=${secret}`;
  const failing = async (): Promise<string> => {
    await globalThis.fetch(tokenUrl);
    return 'never';
  };
  await withServer(always({ status: 401 }), async (server) => {
    for (const options of [{ token: failing }, { token: 'old-token-value', refresh: failing }]) {
      const fetch = createFetch({ use: [auth(options)] });
      const error = await fetch(server.origin).then(
        () => assert.fail('the token endpoint is down'),
        (thrown: unknown) => thrown,
      );
      assert.ok(
        error instanceof BreakwaterError && /^AUTH_(TOKEN|REFRESH)_FAILED$/.test(error.code),
        String(error),
      );
      const shown = inspect(error, { depth: 8 });
      assert.ok(!shown.includes(secret), `the secret shown: ${shown}`);
    }
  });
});

test('a refresh() or token() that throws a string or a frozen error quoting its token endpoint URL shows no secret of it in the AUTH_* error', async () => {
  // Only errors that could be redacted in place were: a thrown string, or a frozen error
  // (or a DOMException on Bun, whose message is read-only), went up as it was thrown.
  const secret = 'S3cretOfTheClient9';
  const tokenUrl = `https://idp.example/oauth/token?client_secret=${secret}`;
  const throwers = [
    () => `token endpoint failed: ${tokenUrl}`,
    () => Object.freeze(new Error(`token endpoint failed: ${tokenUrl}`)),
  ];
  await withServer(always({ status: 401 }), async (server) => {
    for (const thrown of throwers) {
      const failing = async (): Promise<string> => {
        throw thrown();
      };
      for (const options of [{ token: failing }, { token: 'old-token-value', refresh: failing }]) {
        const fetch = createFetch({ use: [auth(options)] });
        const error = await fetch(server.origin).then(
          () => assert.fail('the token endpoint is down'),
          (caught: unknown) => caught,
        );
        assert.ok(
          error instanceof BreakwaterError && /^AUTH_(TOKEN|REFRESH)_FAILED$/.test(error.code),
          String(error),
        );
        const shown = inspect(error, { depth: 8 });
        assert.ok(!shown.includes(secret), `the secret shown: ${shown}`);
        assert.ok(shown.includes('token endpoint failed'), `the cause still says what failed: ${shown}`);
      }
    }
  });
});

test('a refresh() or token() whose error carries its token endpoint URL deeper (a frozen or string cause, a frozen error with it in path, a frozen AggregateError member, a cause looping back) shows no secret of it in the AUTH_* error', async () => {
  // Only the thrown error itself was copied when it could not be redacted: what it kept
  // under it, frozen or a string, went up as it was.
  const secret = 'S3cretOfTheClient9';
  const tokenUrl = `https://idp.example/oauth/token?client_secret=${secret}`;
  // Causes looping back: through a frozen error, to a frozen error quoting the URL (itself, or
  // through a writable one).
  const looped = (cause: (error: Error) => unknown) => (): Error => {
    const error = new Error(`token endpoint failed: ${tokenUrl}`);
    error.cause = cause(error);
    return error;
  };
  const throwers = [
    () => new Error('token endpoint failed', { cause: Object.freeze(new Error(`connect to ${tokenUrl}`)) }),
    () => new Error('token endpoint failed', { cause: `connect to ${tokenUrl}` }),
    () => Object.freeze(Object.assign(new Error('token endpoint failed'), { path: tokenUrl })),
    () => new AggregateError([Object.freeze(new Error(`connect to ${tokenUrl}`))], 'token endpoint failed'),
    looped((error) => Object.freeze(new Error('retried', { cause: error }))),
    () => Object.freeze(looped((error) => error)()),
    () => Object.freeze(looped((error) => new Error('retried', { cause: error }))()),
  ];
  await withServer(always({ status: 401 }), async (server) => {
    for (const thrown of throwers) {
      const failing = async (): Promise<string> => {
        throw thrown();
      };
      for (const options of [{ token: failing }, { token: 'old-token-value', refresh: failing }]) {
        const fetch = createFetch({ use: [auth(options)] });
        const error = await fetch(server.origin).then(
          () => assert.fail('the token endpoint is down'),
          (caught: unknown) => caught,
        );
        assert.ok(
          error instanceof BreakwaterError && /^AUTH_(TOKEN|REFRESH)_FAILED$/.test(error.code),
          String(error),
        );
        const shown = inspect(error, { depth: 8 });
        assert.ok(!shown.includes(secret), `the secret shown: ${shown}`);
        assert.ok(shown.includes('token endpoint failed'), `the cause still says what failed: ${shown}`);
      }
    }
  });
});

test('a redirect a key auth() follows is no success for the breaker below it: an endpoint that always redirects to a 503 opens it after the consecutive failures', async () => {
  // Each 302 passed the breaker as an answer of its own, a success between every two
  // 503s, so the run of failures never grew and only the failure ratio could open it.
  let down = true;
  const handler: Handler = (req) =>
    req.url === '/mcp' ? { status: 302, headers: { location: '/mcp/' } } : { status: down ? 503 : 200 };
  await withServer(handler, async (server) => {
    const clock = { t: Date.UTC(2026, 10, 30, 17, 0, 0) };
    const breaker = circuitBreaker({ consecutiveFailures: 3, now: () => clock.t });
    const fetch = createFetch({ use: [keyAuth(), breaker], key: 'mcp' });
    const status = async () => {
      const response = await fetch(`${server.origin}/mcp`);
      await response.body?.cancel();
      return response.status;
    };
    for (let i = 0; i < 3; i++) assert.equal(await status(), 503);
    assert.equal(breaker.stats('mcp')?.state, 'open');
    assert.equal(breaker.stats('mcp')?.consecutiveFailures, 3);
    await assert.rejects(status(), CircuitOpenError);
    assert.equal(server.requests.length, 6, 'nothing sent while open');
    // Open time over: the call's redirect frees the probe's slot, and its hop probes.
    clock.t += 60_000;
    down = false;
    assert.equal(await status(), 200);
    assert.equal(breaker.stats('mcp')?.state, 'closed');
  });
});

test('a refresh() that fails quoting the token it could not refresh shows that token nowhere in the AUTH_REFRESH_FAILED error: message, String(), JSON, its causes', async () => {
  // Not a well-known key shape: only auth() knows it is a secret (it sent it).
  const token = 'plainOldToken7419';
  const throwers = [
    () => new Error(`bad token ${token}`),
    () => new Error('refresh failed', { cause: new Error(`invalid_grant for Bearer ${token}`) }),
    () => Object.freeze(new Error(`bad token ${token}`)),
    () => `bad token ${token}`,
  ];
  await withServer(always({ status: 401 }), async (server) => {
    for (const [i, thrower] of throwers.entries()) {
      const fetch = createFetch({
        use: [
          auth({
            token,
            refresh: async () => {
              throw thrower();
            },
          }),
        ],
      });
      const error = await fetch(server.origin).then(
        () => assert.fail('the refresh failed'),
        (caught: unknown) => caught,
      );
      assert.ok(error instanceof BreakwaterError && error.code === 'AUTH_REFRESH_FAILED', String(error));
      const cause = error.cause as Error | string;
      const shown = [
        String(error),
        error.message,
        JSON.stringify(error),
        String(cause),
        String((cause as Error).message),
        String(((cause as Error).cause as Error | undefined)?.message),
        inspect(error, { depth: 8 }),
      ];
      for (const text of shown) assert.ok(!text.includes(token), `thrower ${i}: the token shown: ${text}`);
      assert.match(
        inspect(error, { depth: 8 }),
        /bad token|invalid_grant/,
        'the cause still says what failed',
      );
    }
  });
});

test('a token() that fails quoting the token it gave before shows it nowhere in the AUTH_TOKEN_FAILED error', async () => {
  // Nothing was stamped on the failing call yet: the token is hidden because auth() sent it before.
  const token = 'plainOldToken7419';
  let calls = 0;
  const source = async (): Promise<string> => {
    if (calls++ === 0) return token;
    throw Object.freeze(new Error(`could not renew ${token}: session ended`));
  };
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [auth({ token: source })] });
    await (await fetch(server.origin)).text();
    const error = await fetch(server.origin).then(
      () => assert.fail('token() failed'),
      (caught: unknown) => caught as BreakwaterError,
    );
    assert.equal(error.code, 'AUTH_TOKEN_FAILED');
    const shown = `${inspect(error, { depth: 8 })} ${JSON.stringify(error)}`;
    assert.ok(!shown.includes(token), `the token shown: ${shown}`);
    assert.match(shown, /could not renew/, 'the cause still says what failed');
  });
});

test('a token() that fails quoting the Basic credentials it gave before, decoded, shows neither them nor the password in the AUTH_TOKEN_FAILED error', async () => {
  // scheme 'Basic' with a bare token: auth() sent `Basic <base64>`, so a server or a library
  // quoting it back decoded (`alice:<password>`) is hidden as for the call's own header.
  const password = 'Tr0ub4dor-horse';
  const token = btoa(`alice:${password}`);
  let calls = 0;
  const source = async (): Promise<string> => {
    if (calls++ === 0) return token;
    throw Object.freeze(new Error(`could not renew alice:${password} (was ${token})`));
  };
  await withServer(always({ status: 200 }), async (server) => {
    const fetch = createFetch({ use: [auth({ token: source, scheme: 'Basic' })] });
    await (await fetch(server.origin)).text();
    assert.equal(server.requests[0]?.headers.authorization, `Basic ${token}`);
    const error = await fetch(server.origin).then(
      () => assert.fail('token() failed'),
      (caught: unknown) => caught as BreakwaterError,
    );
    assert.equal(error.code, 'AUTH_TOKEN_FAILED');
    const shown = `${inspect(error, { depth: 8 })} ${JSON.stringify(error)}`;
    for (const secret of [password, token]) assert.ok(!shown.includes(secret), `${secret} shown: ${shown}`);
    assert.match(shown, /could not renew/, 'the cause still says what failed');
  });
});

test('a refresh() that fails with a huge text (a token endpoint’s page in its message and body) fails every waiting call with that text cut, not after reading it whole for each', async () => {
  // Every text is searched for each token held, at each character: 200 kB took seconds a
  // waiter (a megabyte, tens of seconds), the event loop held all along. Cut, what it says
  // first is kept.
  const page = 'x'.repeat(200_000);
  await withServer(always({ status: 401 }), async (server) => {
    const fetch = createFetch({
      use: [
        auth({
          token: OLD,
          refresh: async () => {
            await tick(20);
            throw Object.assign(new Error(`token endpoint said ${page}`), { body: page });
          },
        }),
      ],
    });
    const errors = await Promise.all(
      [1, 2, 3].map(() =>
        fetch(server.origin).then(
          () => assert.fail('the refresh failed'),
          (caught: unknown) => caught as BreakwaterError,
        ),
      ),
    );
    for (const error of errors) {
      assert.equal(error.code, 'AUTH_REFRESH_FAILED');
      const cause = error.cause as Error & { body: string };
      assert.match(cause.message, /^token endpoint said x+\[cut\]$/);
      for (const text of [cause.message, cause.stack ?? '', cause.body])
        assert.ok(text.length <= 4096, `${text.length} characters kept`);
    }
  });
});

test('a refresh() error with nothing of the token in it stays the cause as thrown', async () => {
  const thrown = new Error('token endpoint said invalid_grant');
  await withServer(always({ status: 401 }), async (server) => {
    const fetch = createFetch({
      use: [
        auth({
          token: 'plainOldToken7419',
          refresh: async () => {
            throw thrown;
          },
        }),
      ],
    });
    await assert.rejects(fetch(server.origin), (error: unknown) => {
      assert.equal((error as Error).cause, thrown);
      assert.equal(thrown.message, 'token endpoint said invalid_grant');
      return true;
    });
  });
});

test('a refresh() that rejects with an error whose fields throw when read still fails the call with AUTH_REFRESH_FAILED, without that cause', async () => {
  const hostile = [
    Object.defineProperty(new Error('x'), 'message', {
      get() {
        throw new Error('no message for you');
      },
    }),
    (() => {
      const { proxy, revoke } = Proxy.revocable(new Error('x'), {});
      revoke();
      return proxy;
    })(),
  ];
  await withServer(always({ status: 401 }), async (server) => {
    for (const thrown of hostile) {
      const fetch = createFetch({
        use: [
          auth({
            token: 'plainOldToken7419',
            refresh: async () => {
              throw thrown;
            },
          }),
        ],
      });
      await assert.rejects(
        fetch(server.origin),
        (error: unknown) => error instanceof BreakwaterError && error.code === 'AUTH_REFRESH_FAILED',
      );
    }
  });
});

test('a refresh() that rejects with an AggregateError (Promise.any over token endpoints) shows the token in none of its members', async () => {
  const token = 'plainOldToken7419';
  await withServer(always({ status: 401 }), async (server) => {
    const fetch = createFetch({
      use: [
        auth({
          token,
          refresh: () =>
            Promise.any([
              Promise.reject(new Error(`invalid_grant for Bearer ${token}`)),
              Promise.reject(`bad token ${token}`),
            ]),
        }),
      ],
    });
    const error = await fetch(server.origin).then(
      () => assert.fail('the refresh failed'),
      (caught: unknown) => caught as BreakwaterError,
    );
    assert.equal(error.code, 'AUTH_REFRESH_FAILED');
    const shown = inspect(error, { depth: 8 });
    assert.ok(!shown.includes(token), `the token shown: ${shown}`);
    assert.match(shown, /invalid_grant/, 'the members still say what failed');
  });
});

test('a refresh() error with nothing to hide is left as it was: no field added, no setter run', async () => {
  let sets = 0;
  class OAuthError extends Error {
    override get cause(): unknown {
      return undefined;
    }
    override set cause(_: unknown) {
      sets++;
    }
  }
  const plain = { error: 'invalid_grant' };
  const bare = new Error('token endpoint said invalid_grant');
  const classy = new OAuthError('token endpoint said invalid_grant');
  await withServer(always({ status: 401 }), async (server) => {
    for (const thrown of [plain, bare, classy]) {
      const fetch = createFetch({
        use: [
          auth({
            token: 'plainOldToken7419',
            refresh: async () => {
              throw thrown;
            },
          }),
        ],
      });
      await assert.rejects(fetch(server.origin), (error: unknown) => (error as Error).cause === thrown);
    }
  });
  assert.deepEqual(Object.keys(plain), ['error'], 'a plain object thrown gains no message, stack or cause');
  assert.ok(
    !Object.hasOwn(bare, 'cause'),
    'an error without a cause gains none (util.inspect would show it)',
  );
  assert.equal(sets, 0, 'a setter of the error’s class is not run');
});

/**
 * Every string a logger finds walking `error`: its message, stack and own enumerable
 * fields, deep, and its `cause` and `errors` (each object once, getters that throw skipped).
 */
function loggedStrings(error: unknown): string[] {
  const found: string[] = [];
  const seen = new Set<unknown>();
  const queue = [error];
  for (let i = 0; i < queue.length && i < 100_000; i++) {
    const value = queue[i];
    if (typeof value === 'string') found.push(value);
    if (typeof value !== 'object' || value === null || seen.has(value)) continue;
    seen.add(value);
    for (const field of new Set(['message', 'stack', 'cause', 'errors', ...Object.keys(value)])) {
      try {
        queue.push((value as Record<string, unknown>)[field]);
      } catch {
        // A getter that throws shows nothing.
      }
    }
  }
  return found;
}

/** The AUTH_REFRESH_FAILED a 401 gets from an auth() sending `token` whose refresh() throws `thrown`. */
async function refreshFailure(server: TestServer, token: string, thrown: unknown): Promise<BreakwaterError> {
  const fetch = createFetch({
    use: [
      auth({
        token,
        refresh: async () => {
          throw thrown;
        },
      }),
    ],
  });
  const error = await fetch(server.origin).then(
    () => assert.fail('the refresh failed'),
    (caught: unknown) => caught,
  );
  assert.ok(error instanceof BreakwaterError && error.code === 'AUTH_REFRESH_FAILED', String(error));
  return error;
}

test('a refresh() error that quotes the token in other fields (an HTTP client’s body, response.data, config.headers, responseText) shows it nowhere a logger reaches', async () => {
  const token = 'plainOldToken7419';
  const axiosLike = () =>
    Object.assign(new Error('Request failed with status code 400'), {
      name: 'AxiosError',
      code: 'ERR_BAD_REQUEST',
      status: 400,
      config: { url: 'https://auth.example.com/token', headers: { Authorization: `Bearer ${token}` } },
      response: {
        status: 400,
        data: { error: 'invalid_grant', error_description: `token ${token} revoked` },
      },
    });
  const cyclic = () => {
    const error = Object.assign(new Error('refresh failed'), { body: `{"token":"${token}"}` });
    return Object.assign(error, { self: error, response: { error } });
  };
  let deep: Record<string, unknown> = { note: `bad token ${token}` };
  for (let i = 0; i < 500; i++) deep = { deeper: deep };
  const throwers: [string, () => unknown][] = [
    ['axios-style', axiosLike],
    ['axios-style, frozen', () => Object.freeze(axiosLike())],
    ['a body', () => Object.assign(new Error('refresh failed'), { body: `{"token":"${token}"}` })],
    ['a body, frozen', () => Object.freeze(Object.assign(new Error('refresh failed'), { body: token }))],
    ['an XHR-style object', () => ({ status: 401, responseText: `invalid token ${token}` })],
    ['in a cause', () => new Error('refresh failed', { cause: { data: [`token ${token}`] } })],
    [
      'a request object',
      () =>
        Object.assign(new Error('refresh failed'), {
          request: new Request('https://auth.example.com/token', { headers: { authorization: token } }),
        }),
    ],
    ['a cycle', cyclic],
    ['500 levels deep', () => Object.assign(new Error('refresh failed'), { deep })],
    [
      'beside a getter that throws',
      () =>
        Object.defineProperty(Object.assign(new Error('refresh failed'), { body: token }), 'boom', {
          enumerable: true,
          get() {
            throw new Error('no');
          },
        }),
    ],
  ];
  await withServer(always({ status: 401 }), async (server) => {
    for (const [shape, thrower] of throwers) {
      const error = await refreshFailure(server, token, thrower());
      const shown = [
        JSON.stringify(error),
        inspect(error, { depth: Number.POSITIVE_INFINITY, getters: true }),
        ...loggedStrings(error),
      ];
      for (const text of shown) assert.ok(!text.includes(token), `${shape}: the token shown in ${text}`);
    }
    // What the copy of an error says is kept: its name, code and status.
    const copied = (await refreshFailure(server, token, axiosLike())).cause as Record<string, unknown>;
    assert.deepEqual([copied.name, copied.code, copied.status], ['AxiosError', 'ERR_BAD_REQUEST', 400]);
  });
});

test('a refresh() error whose fields hold nothing of the token stays the cause as thrown, nested fields, cycles and all', async () => {
  const thrown = Object.assign(new Error('Request failed with status code 400'), {
    status: 400,
    config: { url: 'https://auth.example.com/token', headers: { accept: 'application/json' } },
    response: { status: 400, data: { error: 'invalid_grant' } },
  });
  const cyclic = new Error('refresh failed', { cause: thrown });
  Object.assign(cyclic, { self: cyclic, response: { error: cyclic, cause: thrown } });
  await withServer(always({ status: 401 }), async (server) => {
    for (const error of [thrown, cyclic])
      assert.equal((await refreshFailure(server, 'plainOldToken7419', error)).cause, error);
    assert.deepEqual(thrown.response.data, { error: 'invalid_grant' });
  });
});

test('a POST whose 303 auth() follows itself (a key in x-api-key), then answered 429, is not resent by retry(): the answer says redirected, as fetch’s own would', async () => {
  const posts: string[] = [];
  const handler: Handler = (req) => {
    if (req.method === 'POST') {
      posts.push(req.url);
      return { status: 303, headers: { location: '/done' } };
    }
    return { status: 429, headers: { 'retry-after-ms': '10' } };
  };
  await withServer(handler, async (server) => {
    const fetch = createFetch({ use: [retry({ attempts: 3 }), keyAuth()] });
    const res = await fetch(`${server.origin}/orders`, { method: 'POST', body: '{"sku":"a1"}' });
    await res.text();
    assert.equal(res.status, 429);
    assert.equal(res.redirected, true, 'the answer came through a redirect');
    // The POST ran (its 303 said so); the 429 answered the GET that followed it.
    assert.deepEqual(posts, ['/orders'], 'the POST went once');
  });
});

test('a refresh() error that quotes the refresh request it sent (a form body with the refresh token and client secret, its Basic client credentials) shows none of them', async () => {
  const refreshToken = 'RT-abc123rotating';
  const clientSecret = 'CS-xyz789client';
  const basic = btoa(`my-client:${clientSecret}`);
  const body = `grant_type=refresh_token&refresh_token=${refreshToken}&client_secret=${clientSecret}`;
  const throwers: [string, () => unknown][] = [
    ['its message', () => new Error(`POST https://auth.example.com/token failed (400): sent ${body}`)],
    [
      'an HTTP client’s fields',
      () =>
        Object.assign(new Error('Request failed with status code 400'), {
          config: { data: body, headers: { Authorization: `Basic ${basic}` } },
          request: `POST /token HTTP/1.1\r\nAuthorization: Basic ${basic}\r\n\r\n${body}`,
        }),
    ],
  ];
  await withServer(always({ status: 401 }), async (server) => {
    for (const [shape, thrower] of throwers) {
      const error = await refreshFailure(server, 'plainOldToken7419', thrower());
      const shown = [
        JSON.stringify(error),
        inspect(error, { depth: Number.POSITIVE_INFINITY, getters: true }),
        ...loggedStrings(error),
      ];
      for (const text of shown)
        for (const secret of [refreshToken, clientSecret, basic])
          assert.ok(!text.includes(secret), `${shape}: a secret shown in ${text}`);
      // What it says stays readable: the grant type and the names of what was sent.
      assert.match(
        inspect(error),
        /grant_type=refresh_token&refresh_token=\[redacted\]&client_secret=\[redacted\]/,
      );
    }
  });
});

test('the answer auth() got by following a redirect itself says redirected on its clones too, and when a layer below made its redirected read-only: retry() above does not resend the POST whose 303 ran', async () => {
  /** POST → 303 → GET answered 429: the POST ran. */
  const handler: Handler = (req) =>
    req.method === 'POST'
      ? { status: 303, headers: { location: '/done' } }
      : { status: 429, headers: { 'retry-after-ms': '10' } };
  // A layer between retry() and auth() that hands up a clone (a logger keeping the original).
  const cloning: Middleware = async (call, next) => {
    const res = await next(call);
    const copy = res.clone();
    // Not awaited: a tee branch's cancel settles only once the other branch is cancelled too.
    res.body?.cancel().catch(() => {});
    return copy;
  };
  // A layer below auth() that rebuilds each answer with a read-only redirected of its own (a body
  // limit, as breakwater's own rebuild answers), so auth() cannot define its own there; so for a
  // frozen answer (not tried here: Deno's Response sets fields of its own as it is read).
  const rebuilding: Middleware = async (call, next) => {
    const res = await next(call);
    return Object.defineProperties(new Response(res.body, { status: res.status, headers: res.headers }), {
      url: { value: res.url },
      redirected: { value: res.redirected },
    });
  };
  for (const [name, use] of [
    ['clone()', [retry({ attempts: 3 }), cloning, keyAuth()]],
    ['rebuilt below', [retry({ attempts: 3 }), keyAuth(), rebuilding]],
    [
      'clone() of a clone of a rebuilt one',
      [retry({ attempts: 3 }), cloning, cloning, keyAuth(), rebuilding],
    ],
  ] as const) {
    await withServer(handler, async (server) => {
      const fetch = createFetch({ use: [...use] });
      const res = await fetch(`${server.origin}/orders`, { method: 'POST', body: '{"sku":"a1"}' });
      assert.equal(res.clone().redirected, true, `${name}: so does a clone of it`);
      await res.text();
      assert.equal(res.status, 429, name);
      assert.equal(res.redirected, true, `${name}: the answer came through a redirect`);
      assert.equal(res.url, `${server.origin}/done`, `${name}: its URL is the last one`);
      const posts = server.requests.filter((r) => r.method === 'POST');
      assert.equal(posts.length, 1, `${name}: the POST went once`);
    });
  }
});

test('a refresh() that fetches its token endpoint through the same auth() sends that request as it wrote it, on each pass (its Basic client credentials, not the expired token), and a 401 to it comes back to it at once', async () => {
  // The token endpoint authenticates clients by their Basic credentials (RFC 6749 §2.3.1):
  // stamped with the expired bearer instead, it answers 401 invalid_client.
  const CLIENT = 'Basic Y2xpZW50OnNlY3JldA==';
  const tokenRequests: Array<string | string[] | undefined> = [];
  const handler: Handler = (req) => {
    if (req.url !== '/token') return acceptsNew(req, 0);
    tokenRequests.push(req.headers.authorization);
    // The first is answered 429, so the retry above sends it again: a second pass.
    if (tokenRequests.length === 1) return { status: 429, headers: { 'retry-after-ms': '5' } };
    if (req.headers.authorization !== CLIENT) return { status: 401, body: '{"error":"invalid_client"}' };
    return new URLSearchParams(req.text).get('refresh_token') === 'rt-0123456789'
      ? { status: 200, headers: { 'content-type': 'application/json' }, body: `{"access_token":"${NEW}"}` }
      : { status: 401, body: '{"error":"invalid_grant"}' };
  };
  await withServer(handler, async (server) => {
    const policy = definePolicy({ retry: { backoff: { initialMs: 1, maxMs: 5 } } });
    /** A client whose refresh() fetches the token endpoint through its own chain, with `grant`. */
    const client = (grant: string) => {
      const fetch = policy.fetch(undefined, {
        auth: {
          token: OLD,
          refreshTimeoutMs: 3000,
          refresh: async () => {
            const res = await fetch(`${server.origin}/token`, {
              method: 'POST',
              headers: { authorization: CLIENT },
              body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: grant }),
            });
            if (!res.ok) throw new Error(`token endpoint answered ${res.status}`);
            return ((await res.json()) as { access_token: string }).access_token;
          },
        },
      });
      return fetch;
    };
    const res = await client('rt-0123456789')(`${server.origin}/api`);
    assert.equal(res.status, 200, 'refreshed and resent');
    await res.text();
    assert.deepEqual(tokenRequests, [CLIENT, CLIENT], 'both passes went with the client credentials');

    // A refused grant: the token endpoint's 401 goes back to refresh(), which fails at once.
    const started = performance.now();
    const error = await client('rt-revoked')(`${server.origin}/api`).then(
      () => undefined,
      (error: unknown) => error,
    );
    const ms = performance.now() - started;
    assert.ok(error instanceof BreakwaterError, `the call fails: ${error}`);
    assert.equal(error.code, 'AUTH_REFRESH_FAILED');
    assert.match(String((error.cause as Error).message), /token endpoint answered 401/);
    assert.ok(ms < 1000, `at once, not at the end of the refresh's lease: ${ms} ms`);
  });
});

test('a token() that fetches its token through the same auth() sends that request as it wrote it: it does not call token() again without end', async () => {
  let calls = 0;
  await withServer(
    (req) =>
      req.url === '/token'
        ? { status: 200, body: NEW }
        : req.headers.authorization === `Bearer ${NEW}`
          ? { status: 200 }
          : { status: 401 },
    async (server) => {
      const fetch = definePolicy({}).fetch(undefined, {
        auth: {
          token: async () => {
            calls += 1;
            return (await fetch(`${server.origin}/token`)).text();
          },
        },
      });
      const res = await fetch(`${server.origin}/api`);
      await res.text();
      assert.equal(res.status, 200, 'the call went with the token token() fetched');
      assert.equal(calls, 1, 'token() was called once');
      assert.deepEqual(
        server.requests.map((r) => [r.url, r.headers.authorization]),
        [
          ['/token', undefined],
          ['/api', `Bearer ${NEW}`],
        ],
      );
    },
  );
});

test('an answer auth() rebuilt after a redirect (a layer below made its redirected read-only) keeps its body through a garbage collection before it is read', async () => {
  // Node's fetch cancels the body of a Response it gave once that Response is collected
  // unread: the rebuilt answer shares that body, so it must hold the one it was built from.
  // (Deno cannot force a collection: there this passes either way.)
  const gc = collector();
  const readOnly: Middleware = async (call, next) => {
    const res = await next(call);
    return Object.defineProperty(res, 'redirected', { value: res.redirected });
  };
  await withServer(
    (req) =>
      req.method === 'POST' ? { status: 303, headers: { location: '/done' } } : { status: 200, body: 'done' },
    async (server) => {
      const fetch = createFetch({ use: [keyAuth(), readOnly] });
      const res = await fetch(`${server.origin}/orders`, { method: 'POST', body: '{"sku":"a1"}' });
      assert.equal(res.redirected, true, 'the answer came through a redirect');
      for (let i = 0; i < 3; i++) {
        gc();
        await tick(5);
      }
      assert.equal(await res.text(), 'done', 'the body is read whole after a collection');
    },
  );
});
