import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inspect } from 'node:util';
import { auth } from '../src/auth.ts';
import { createFetch } from '../src/chain.ts';
import { BreakwaterError } from '../src/errors.ts';
import { redactedError } from '../src/network.ts';
import { redactText } from '../src/redact.ts';
import { allowSlowTests } from './helpers/slow-tests.ts';

// What a middleware (or fetch) throws goes up as a redacted cause (redactedError() in
// src/network.ts), which util.inspect, pino and other loggers print whole: every cause and
// AggregateError member, however the chain is built. The walk is bounded (16 errors, 16
// members a list); what lies past the bound must not show a secret either.

// The bounded-read tests redact up to 256 KiB of text per error, six errors in one test:
// about 3 s under Bun on an idle 2-core machine, near its 5 s per-test limit.
await allowSlowTests();

const SECRET = 'S3cretInTheChain9';
const URL_WITH_SECRET = `https://api.example.com/v1/x?api_key=${SECRET}`;

/** The MIDDLEWARE_FAILED a chain whose middleware throws `thrown()` rejects with. */
async function failureOf(thrown: () => unknown): Promise<BreakwaterError> {
  const fetch = createFetch({
    fetch: async () => new Response('ok'),
    use: [
      async function broken() {
        throw thrown();
      },
    ],
  });
  const error = await fetch('http://127.0.0.1:9/').then(
    () => assert.fail('the middleware threw'),
    (caught: unknown) => caught,
  );
  assert.ok(error instanceof BreakwaterError && error.code === 'MIDDLEWARE_FAILED', String(error));
  return error;
}

/**
 * Every text reachable from `error` through `cause` and `errors` (each object once, at most
 * `limit`), as a logger walking it would find them; fails when one shows the secret.
 */
function assertNoSecret(error: unknown, shape: string, limit = 10_000): void {
  const seen = new Set<unknown>();
  const queue = [error];
  for (let i = 0; i < queue.length && seen.size < limit; i++) {
    const value = queue[i];
    if (typeof value === 'string') assert.ok(!value.includes(SECRET), `${shape}: shown in ${value}`);
    if (typeof value !== 'object' || value === null || seen.has(value)) continue;
    seen.add(value);
    const fields = value as Record<string, unknown>;
    for (const field of ['message', 'stack', 'path', 'url', 'input', 'cause']) queue.push(fields[field]);
    if (Array.isArray(fields.errors)) for (const member of fields.errors.slice(0, limit)) queue.push(member);
  }
  const shown = inspect(error, { depth: Number.POSITIVE_INFINITY, maxArrayLength: 1000 });
  assert.ok(!shown.includes(SECRET), `${shape}: shown by util.inspect: ${shown}`);
}

/** The shapes among `shapes` whose MIDDLEWARE_FAILED shows the secret (see {@link assertNoSecret}). */
async function leaking(shapes: [string, () => unknown][]): Promise<string[]> {
  const leaks: string[] = [];
  for (const [shape, thrown] of shapes) {
    try {
      assertNoSecret(await failureOf(thrown), shape);
    } catch (error) {
      leaks.push(String((error as Error).message).slice(0, 160));
    }
  }
  return leaks;
}

/** A chain of `length` errors, outermost first; the `at`-th (1-based) quotes the secret. */
function chain(length: number, at: number, frozen: (i: number) => boolean): Error {
  let error: Error | undefined;
  for (let i = length; i >= 1; i--) {
    const next: Error = new Error(i === at ? `connect to ${URL_WITH_SECRET}` : `step ${i}`, { cause: error });
    error = frozen(i) ? Object.freeze(next) : next;
  }
  return error as Error;
}

test('a cause chain deeper than the walk’s bound shows no secret past it: the cause past the bound goes up as a redacted copy (its parent frozen: wrapped)', async () => {
  // The walk stopped at 16 errors and left the rest as they were: a secret in the 17th or a
  // later one was printed whole.
  const shapes: [string, () => unknown][] = [
    ['20 writable errors, the 17th quoting it', () => chain(20, 17, () => false)],
    ['20 writable errors, the 20th quoting it', () => chain(20, 20, () => false)],
    ['20 frozen errors, the 18th quoting it', () => chain(20, 18, () => true)],
    ['the 16th frozen, the 17th writable and quoting it', () => chain(17, 17, (i) => i === 16)],
    ['every other one frozen, 40 deep, the 33rd quoting it', () => chain(40, 33, (i) => i % 2 === 0)],
  ];
  assert.deepEqual(await leaking(shapes), []);
  // What failed first is still said.
  assert.match(inspect(await failureOf(() => chain(20, 17, () => false)), { depth: 4 }), /step 1/);
});

test('an AggregateError with more members than the walk’s bound shows no secret in a member past it: the list is cut (a frozen one: the error copied)', async () => {
  // Only the first 16 members were redacted; util.inspect prints up to 100 of them.
  const members = (): Error[] =>
    Array.from(
      { length: 20 },
      (_, i) => new Error(i === 17 ? `connect to ${URL_WITH_SECRET}` : `address ${i}`),
    );
  const shapes: [string, () => unknown][] = [
    ['20 members, the 18th quoting it', () => new AggregateError(members(), 'all failed')],
    ['frozen, 20 members', () => Object.freeze(new AggregateError(members(), 'all failed'))],
    [
      'a frozen list of 20 members',
      () => Object.assign(new AggregateError([], 'all failed'), { errors: Object.freeze(members()) }),
    ],
  ];
  assert.deepEqual(await leaking(shapes), []);
});

test('a cause looping back through frozen errors, or a frozen error reached twice, shows no secret', async () => {
  // A cause looping back to a frozen error still walked got the original, and a frozen error
  // copied only for its cause was handed out as the original on its next reach: both kept
  // the secret of the frozen error under them.
  const shapes: [string, () => unknown][] = [
    [
      'frozen A -> frozen B quoting it -> writable C -> A',
      () => {
        const c = new Error('retried');
        const a = Object.freeze(
          new Error('outer', {
            cause: Object.freeze(new Error(`connect to ${URL_WITH_SECRET}`, { cause: c })),
          }),
        );
        c.cause = a;
        return a;
      },
    ],
    [
      'writable A -> frozen B -> frozen C quoting it -> B',
      () => {
        const b = new Error('middle');
        const c = Object.freeze(new Error(`connect to ${URL_WITH_SECRET}`, { cause: b }));
        b.cause = c;
        return new Error('outer', { cause: Object.freeze(b) });
      },
    ],
    [
      'two members, one frozen error twice, its cause frozen and quoting it',
      () => {
        const twice = Object.freeze(
          new Error('attempt', { cause: Object.freeze(new Error(`connect to ${URL_WITH_SECRET}`)) }),
        );
        return new AggregateError([twice, twice], 'all failed');
      },
    ],
    [
      'a frozen error as a member and as the cause',
      () => {
        const twice = Object.freeze(
          new Error('attempt', { cause: Object.freeze(new Error(`connect to ${URL_WITH_SECRET}`)) }),
        );
        return new AggregateError([twice], 'all failed', { cause: twice });
      },
    ],
  ];
  assert.deepEqual(await leaking(shapes), []);
});

test('a hostile chain stays bounded and shows no secret: a cause getter that makes a new error at every read, and an AggregateError of 1,000,000 members', async () => {
  let made = 0;
  const endless = (): Error => {
    made++;
    const error = new Error(`hop ${made} ${URL_WITH_SECRET}`);
    Object.defineProperty(error, 'cause', { get: endless });
    return error;
  };
  // One frozen error a million times: the members past the bound were left as they were.
  const frozen = Object.freeze(new Error(`connect to ${URL_WITH_SECRET}`));
  const shapes: [string, () => unknown][] = [
    ['endless causes', endless],
    ['a million members', () => new AggregateError(new Array(1_000_000).fill(frozen), 'all failed')],
  ];
  assert.deepEqual(await leaking(shapes), []);
  // The walk reads the cause of at most 16 errors, twice each (once more to see whether it
  // took the redacted one); what went up holds no getter.
  assert.ok(made <= 40, `errors made while walking: ${made}`);
});

test('a secret in an error’s other fields (a body, an HTTP client’s config or response, a Request) shows nowhere, and the copy keeps its status', async () => {
  const shapes: [string, () => unknown][] = [
    ['a body', () => Object.assign(new Error('failed'), { body: `see ${URL_WITH_SECRET}` })],
    [
      'a nested config',
      () =>
        Object.assign(new Error('Request failed with status code 502'), {
          status: 502,
          config: { url: URL_WITH_SECRET, headers: { accept: 'application/json' } },
        }),
    ],
    ['a Request', () => Object.assign(new Error('failed'), { request: new Request(URL_WITH_SECRET) })],
    ['a frozen body', () => Object.freeze(Object.assign(new Error('failed'), { body: URL_WITH_SECRET }))],
  ];
  assert.deepEqual(await leaking(shapes), []);
  for (const [, thrown] of shapes) {
    const shown = JSON.stringify((await failureOf(thrown)).cause);
    assert.ok(!shown.includes(SECRET), shown);
  }
  const copy = (await failureOf(shapes[1]?.[1] as () => unknown)).cause as { status?: unknown };
  assert.equal(copy.status, 502);
});

test('an error with 100,000 fields, or a field holding 100,000 strings, is read no further than the walk’s bound and shows no secret', async () => {
  let reads = 0;
  const keys = Array.from({ length: 100_000 }, (_, i) => `f${i}`);
  /** A Proxy of `target` that says it has 100,000 own enumerable string fields, each quoting the secret. */
  const wide = <T extends object>(target: T): T =>
    new Proxy(target, {
      ownKeys: () => keys,
      getOwnPropertyDescriptor: (_, key) => ({
        value: key,
        enumerable: true,
        configurable: true,
        writable: true,
      }),
      get: (object, key) => {
        reads++;
        return typeof key === 'string' && key.startsWith('f') ? URL_WITH_SECRET : Reflect.get(object, key);
      },
    });
  const shapes: [string, () => unknown][] = [
    ['100,000 fields', () => wide(new Error('failed'))],
    ['100,000 strings in a field', () => Object.assign(new Error('failed'), { data: wide([]) })],
  ];
  for (const [shape, thrown] of shapes) {
    reads = 0;
    assertNoSecret(await failureOf(thrown), shape, 1_000);
    assert.ok(reads < 1_000, `${shape}: ${reads} fields read`);
  }
});

test('a network error thrown by the fetch below with a secret in a nested field goes up as a NetworkError whose cause shows no secret (the redacted copy, not the error as thrown)', async () => {
  const thrown = () =>
    Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), {
      code: 'ECONNREFUSED',
      config: { url: URL_WITH_SECRET, headers: { accept: 'application/json' } },
    });
  for (const shape of [thrown, () => Object.freeze(thrown())]) {
    const fetch = createFetch({
      fetch: async () => {
        throw shape();
      },
      use: [],
    });
    const error = await fetch('http://127.0.0.1:9/').then(
      () => assert.fail('the fetch threw'),
      (caught: unknown) => caught,
    );
    assert.ok(error instanceof BreakwaterError && error.code === 'ECONNREFUSED', String(error));
    assertNoSecret(error, 'a NetworkError');
    assert.ok(!JSON.stringify(error.cause).includes(SECRET), JSON.stringify(error.cause));
  }
});

test('a secret in an enumerable symbol-keyed field (util.inspect prints those), on the error or nested in a field, shows nowhere', async () => {
  // Object.keys() skips symbol keys; util.inspect prints the enumerable ones
  // ([Symbol(config)]: ...), on the error and on every object in its fields.
  const shapes: [string, () => unknown][] = [
    ['a symbol text field', () => Object.assign(new Error('failed'), { [Symbol('url')]: URL_WITH_SECRET })],
    [
      'a symbol object field',
      () => Object.assign(new Error('failed'), { [Symbol('config')]: { url: URL_WITH_SECRET } }),
    ],
    [
      'a symbol field nested in a field',
      () => Object.assign(new Error('failed'), { config: { [Symbol('url')]: URL_WITH_SECRET } }),
    ],
    [
      'a frozen error with a symbol text field',
      () => Object.freeze(Object.assign(new Error('failed'), { [Symbol('url')]: URL_WITH_SECRET })),
    ],
  ];
  assert.deepEqual(await leaking(shapes), []);
  // The copy keeps what a symbol field says, redacted.
  const url = Symbol('url');
  const copy = (
    await failureOf(() => Object.freeze(Object.assign(new Error('failed'), { [url]: URL_WITH_SECRET })))
  ).cause as Record<symbol, unknown>;
  assert.match(String(copy[url]), /^https:\/\/api\.example\.com\/v1\/x\?api_key=/);
});

test('a middleware error with a huge text (a 20 MB body) goes up with that text cut to 64 KiB, marked [cut], what it says first kept', async () => {
  // Every text was run through redactText() whole, in place and again in a copy: about 0.15 s
  // a megabyte on Node, each time.
  const body = 'lorem ipsum dolor sit amet '.repeat(800_000); // ~21.6 MB
  const cause = (await failureOf(() => Object.assign(new Error('failed'), { body }))).cause as {
    body: string;
  };
  assert.ok(cause.body.length <= 64 * 1024, `${cause.body.length} characters kept`);
  assert.ok(
    cause.body.startsWith('lorem ipsum dolor sit amet lorem') && cause.body.endsWith('[cut]'),
    cause.body.slice(-40),
  );
});

test('redactedError() reads at most 64 KiB of each text and 256 KiB of one error in all, however many texts it holds, wherever they are', () => {
  const huge = `see ${URL_WITH_SECRET} `.repeat(500_000); // ~25 MB
  const shapes: [string, () => unknown][] = [
    ['a huge message (and stack)', () => new Error(huge)],
    ['a huge body', () => Object.assign(new Error('failed'), { body: huge })],
    ['a huge string in a nested field', () => Object.assign(new Error('failed'), { config: { data: huge } })],
    [
      'a frozen error with a huge body and a nested huge string (copied)',
      () => Object.freeze(Object.assign(new Error(huge), { body: huge, config: { data: [huge, huge] } })),
    ],
    ['a thrown huge string', () => huge],
    [
      'a chain of 16 errors, each with 30 huge fields',
      () => {
        let error: Error | undefined;
        for (let i = 0; i < 16; i++)
          error = Object.assign(
            new Error(huge, { cause: error }),
            Object.fromEntries(Array.from({ length: 30 }, (_, j) => [`f${j}`, huge])),
          );
        return error;
      },
    ],
  ];
  for (const [shape, thrown] of shapes) {
    let read = 0;
    let longest = 0;
    const safe = redactedError(thrown(), new Map(), (text) => {
      read += text.length;
      longest = Math.max(longest, text.length);
      return redactText(text);
    });
    assert.ok(longest <= 64 * 1024, `${shape}: a text of ${longest} characters read`);
    assert.ok(read <= 256 * 1024, `${shape}: ${read} characters read in all`);
    assertNoSecret(safe, shape);
  }
});

test('an array field of 200,000 values, or a thrown one, is not listed: it is too long to vouch for, and the error goes up as a copy that shows no secret', async () => {
  // quotes() listed every index (Object.keys) before checking its 100-value bound: a
  // 5,000,000-value array field cost 1.8 s and 320 MB. Counted here as the keys a Proxy of
  // the array is asked to list and describe.
  let listed = 0;
  const counted = <T extends object>(target: T): T =>
    new Proxy(target, {
      ownKeys: (object) => {
        const keys = Reflect.ownKeys(object);
        listed += keys.length;
        return keys;
      },
      getOwnPropertyDescriptor: (object, key) => {
        listed++;
        return Reflect.getOwnPropertyDescriptor(object, key);
      },
    });
  const long = (): string[] => [...new Array(199_999).fill('row'), URL_WITH_SECRET];
  const sparse: string[] = [];
  sparse[1_999_999] = URL_WITH_SECRET;
  const shapes: [string, () => unknown][] = [
    ['an array field', () => Object.assign(new Error('failed'), { rows: counted(long()) })],
    [
      'an array nested in a field',
      () => Object.assign(new Error('failed'), { response: { data: counted(long()) } }),
    ],
    ['a thrown array', () => counted(long())],
    [
      'a sparse array field, its one value at 2,000,000',
      () => Object.assign(new Error('failed'), { rows: sparse }),
    ],
  ];
  for (const [shape, thrown] of shapes) {
    listed = 0;
    assert.deepEqual(await leaking([[shape, thrown]]), []);
    assert.ok(listed < 1_000, `${shape}: ${listed} keys listed or described`);
  }
});

test('a frozen error with a 20 MB message thrown by a middleware says what it said, cut: MIDDLEWARE_FAILED reads its message from the redacted cause, not whole', async () => {
  const message = `failed: ${'lorem ipsum dolor sit amet '.repeat(800_000)}`;
  const error = await failureOf(() => Object.freeze(new Error(message)));
  // Read whole, the message was 21.6 MB, and redacting it took 2.3 s of the caller's time.
  assert.ok(error.message.length < 100_000, `${error.message.length} characters`);
  assert.match(error.message.slice(0, 100), /^middleware "broken" threw: failed: lorem ipsum/);
});

test('a network error from the fetch below quoting the key the call sent (x-api-key, in its message and a nested config) shows it nowhere, nor does a middleware’s error quoting the bearer token', async () => {
  // redactText() knows URLs and key shapes; a bare key in the header an auth() names is
  // neither, and the chain hid only those.
  const key = 'plainOldKey74190';
  const fetch = createFetch({
    fetch: async () => {
      throw Object.assign(new Error(`connect ECONNREFUSED 127.0.0.1:9 (x-api-key ${key})`), {
        code: 'ECONNREFUSED',
        config: { headers: { 'x-api-key': key } },
      });
    },
    use: [auth({ token: key, header: 'x-api-key', scheme: '' })],
  });
  const error = await fetch('http://127.0.0.1:9/').then(
    () => assert.fail('the fetch threw'),
    (caught: unknown) => caught,
  );
  assert.ok(error instanceof BreakwaterError && error.code === 'ECONNREFUSED', String(error));
  const shown = `${inspect(error, { depth: 8 })} ${JSON.stringify(error)}`;
  assert.ok(!shown.includes(key), `the key shown: ${shown}`);

  const token = 'opaqueToken9917';
  const broken = createFetch({
    fetch: async () => new Response('ok'),
    use: [
      async function broken(call) {
        throw new Error(`rejected ${call.header('authorization')}`);
      },
    ],
  });
  const failed = await broken('http://127.0.0.1:9/', { headers: { authorization: `Token ${token}` } }).then(
    () => assert.fail('the middleware threw'),
    (caught: unknown) => caught,
  );
  assert.ok(failed instanceof BreakwaterError && failed.code === 'MIDDLEWARE_FAILED', String(failed));
  const said = `${failed.message} ${inspect(failed, { depth: 8 })}`;
  assert.ok(!said.includes(token), `the token shown: ${said}`);
});

test('a plain object field of 200,000 keys is read no further than the walk’s bound: its keys are counted as they are listed, not all described first, and the error goes up as a copy that shows no secret', async () => {
  // keysOf() listed every own key (Reflect.ownKeys) and asked each whether it is enumerable
  // before its 100-field bound applied: a parsed answer of 1,000,000 keys cost 1.1 s on Node
  // (0.36 s with for...in and a count). Counted here as the keys a Proxy of the object is
  // asked to describe; the secret is in the last one.
  let described = 0;
  const keys = Array.from({ length: 200_000 }, (_, i) => `k${i}`);
  const data = new Proxy(
    {},
    {
      ownKeys: () => keys,
      getOwnPropertyDescriptor: () => {
        described++;
        return { value: 'v', enumerable: true, configurable: true, writable: true };
      },
      get: (_, key) => (key === keys.at(-1) ? URL_WITH_SECRET : 'v'),
    },
  );
  assertNoSecret(await failureOf(() => Object.assign(new Error('failed'), { data })), 'a wide object', 1_000);
  assert.ok(described < 1_000, `${described} keys described`);
});

test('a frozen error that quotes a secret goes up as a copy whose stack is the original’s, redacted: where it was thrown, not where it was copied', async () => {
  function throwSite(): Error {
    return Object.freeze(new Error(`failed ${URL_WITH_SECRET}`));
  }
  const thrown = throwSite();
  const cause = (await failureOf(() => thrown)).cause as Error;
  assert.notEqual(cause, thrown, 'a frozen error cannot be redacted in place: it is copied');
  assert.match(cause.stack ?? '', /throwSite/, `the copy’s stack: ${cause.stack}`);
  assertNoSecret(cause, 'the copy');
});

test('redactedError(error, ..., copy: true) changes nothing: every error that quotes a secret goes up as a redacted copy, the original as it was', () => {
  const inner = new TypeError(`connect failed for ${URL_WITH_SECRET}`);
  const member = Object.assign(new Error('member'), { url: URL_WITH_SECRET });
  const outer = new AggregateError([member], `all failed: ${URL_WITH_SECRET}`, { cause: inner });
  const clean = new Error('no secret here');
  const safe = redactedError(outer, undefined, undefined, undefined, undefined, true);
  assert.notEqual(safe, outer);
  assertNoSecret(safe, 'the copy');
  for (const [text, what] of [
    [outer.message, 'the message'],
    [inner.message, 'the cause’s message'],
    [member.url, 'the member’s field'],
  ] as const) {
    assert.ok(text.includes(SECRET), `${what} is as it was: ${text}`);
  }
  assert.equal(outer.cause, inner);
  assert.equal(outer.errors[0], member);
  assert.equal(redactedError(clean, undefined, undefined, undefined, undefined, true), clean);
});
