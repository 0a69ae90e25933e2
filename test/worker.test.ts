/**
 * The order service in examples/worker/ (a Hono app with `breakwater/hono`) on the
 * three runtimes it is written for, each started as a real child process on
 * 127.0.0.1: Cloudflare workerd (the npm package's binary, with the committed
 * `config.capnp`, the worker bundled by esbuild into a temporary directory),
 * `deno serve` and `bun run`. Each run drives the same scenario against a loopback
 * inventory service (test/helpers/server.ts) that fails on purpose: a 503 with
 * `retry-after-ms` that the app's policy waits out and retries, an outage that ends
 * in a 503 problem, an idempotent replay, and a client pushed past its rate limit.
 *
 * Child processes are spawned through node:child_process, so this file runs the
 * same from Node, Deno and Bun; every child is stopped and awaited in `finally`.
 */

import assert from 'node:assert/strict';
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';
import { test } from 'node:test';
import { createApp, ORDER_WINDOW_MS, ORDERS_PER_WINDOW } from '../examples/worker/app.ts';
import {
  BUN,
  bundleWorker,
  type Child,
  DENO,
  NODE,
  ROOT,
  START_DEADLINE_MS,
  serveOnFreePort,
  sleep,
  start,
  WORKERD,
} from './helpers/runtime-process.ts';
import { type Handler, type TestServer, withServer } from './helpers/server.ts';

/** Bun's default per-test timeout (5 s) is too short for starting a runtime and driving it. */
const TEST_TIMEOUT_MS = 30_000;
if (process.versions.bun !== undefined) {
  // A variable specifier: 'bun:test' exists only under Bun (and has no types elsewhere).
  const bunTest = 'bun:test';
  const { setDefaultTimeout } = (await import(bunTest)) as { setDefaultTimeout(ms: number): void };
  setDefaultTimeout(TEST_TIMEOUT_MS);
}

const EXAMPLE = join(ROOT, 'examples', 'worker');
/** The inventory's first answer asks for this wait; the app's policy must honour it. */
const RETRY_AFTER_MS = 50;
/** After reserving sku `last`, the inventory says its request quota is back in this long. */
const QUOTA_RESET_MS = 300;

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

async function post(origin: string, body: unknown, headers: Record<string, string>): Promise<Answer> {
  const response = await fetch(`${origin}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: response.status, headers: response.headers, text: await response.text() };
}

/**
 * The inventory service: the first reservation gets a 503 asking for a
 * {@link RETRY_AFTER_MS} wait, an order for sku `outage` always gets a short 503,
 * everything else is reserved. Arrival times are kept to check the wait.
 */
function inventory(arrivals: number[]): Handler {
  return (req, index) => {
    arrivals.push(Date.now());
    const order = JSON.parse(req.text) as { sku?: string };
    if (order.sku === 'outage') return { status: 503, headers: { 'retry-after-ms': '20' }, body: 'down' };
    if (order.sku === 'last') {
      // Reserved, and the inventory's request quota is used up for QUOTA_RESET_MS.
      return {
        headers: {
          'content-type': 'application/json',
          'x-ratelimit-remaining-requests': '0',
          'x-ratelimit-reset-requests': `${QUOTA_RESET_MS}ms`,
        },
        body: JSON.stringify({ reservation: `r-${index}`, sku: order.sku }),
      };
    }
    if (index === 0)
      return { status: 503, headers: { 'retry-after-ms': String(RETRY_AFTER_MS) }, body: 'busy' };
    return {
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ reservation: `r-${index}`, sku: order.sku }),
    };
  };
}

function header(answer: Answer, name: string): string {
  const value = answer.headers.get(name);
  assert.ok(value !== null, `no ${name} header (status ${answer.status}, body ${answer.text})`);
  return value;
}

/** The scenario every runtime must pass, against the app at `origin`. */
async function drive(origin: string, upstream: TestServer, arrivals: number[], child: Child): Promise<void> {
  const window = ORDER_WINDOW_MS / 1000;
  const tea = { sku: 'tea', quantity: 2 };

  // 1. An order with a key: the inventory's 503 is waited out and the reservation retried.
  const first = await post(origin, tea, { 'x-client': 'alice', 'idempotency-key': '"order-1"' });
  assert.equal(first.status, 201, `${first.text}\n${child.output()}`);
  assert.deepEqual(JSON.parse(first.text), { order: tea, reservation: { reservation: 'r-1', sku: 'tea' } });
  assert.equal(header(first, 'ratelimit-policy'), `"orders";q=${ORDERS_PER_WINDOW};w=${window}`);
  assert.match(header(first, 'ratelimit'), new RegExp(`^"orders";r=${ORDERS_PER_WINDOW - 1};t=\\d+$`));
  assert.equal(first.headers.get('idempotent-replayed'), null);
  assert.equal(upstream.requests.length, 2, 'one 503, then the retry');
  const aliceKey = upstream.requests[0]?.headers['idempotency-key'];
  assert.match(
    String(aliceKey),
    /^"[0-9a-f]{64}"$/,
    "the order's key, scoped to its client, goes with the reservation",
  );
  for (const req of upstream.requests) {
    assert.equal(`${req.method} ${req.url}`, 'POST /reserve');
    assert.equal(req.headers['idempotency-key'], aliceKey, 'one key for the reservation and its retry');
  }
  const waited = (arrivals[1] ?? 0) - (arrivals[0] ?? 0);
  assert.ok(
    waited >= RETRY_AFTER_MS - 5,
    `retried after ${waited} ms; the inventory asked for ${RETRY_AFTER_MS}`,
  );

  // 2. The same key again: replayed, and the inventory is not called again.
  const again = await post(origin, tea, { 'x-client': 'alice', 'idempotency-key': '"order-1"' });
  assert.equal(again.status, 201);
  assert.equal(header(again, 'idempotent-replayed'), 'true');
  assert.equal(again.text, first.text);
  // Windows are aligned to the clock: if one ended between the two orders, `t` went
  // up and the replay is the first order counted in the new window.
  const resetOf = (answer: Answer): number => Number(/;t=(\d+)$/.exec(header(answer, 'ratelimit'))?.[1]);
  const newWindow = resetOf(again) > resetOf(first);
  const left = ORDERS_PER_WINDOW - (newWindow ? 1 : 2);
  assert.match(header(again, 'ratelimit'), new RegExp(`^"orders";r=${left};t=\\d+$`));
  assert.equal(upstream.requests.length, 2, 'a replay does not reach the inventory');

  // Another client's "order-1" is its own order, with its own reservation key.
  const bobs = await post(origin, tea, { 'x-client': 'bob', 'idempotency-key': '"order-1"' });
  assert.equal(bobs.status, 201, bobs.text);
  assert.equal(bobs.headers.get('idempotent-replayed'), null);
  assert.equal(upstream.requests.length, 3);
  const bobKey = upstream.requests[2]?.headers['idempotency-key'];
  assert.match(String(bobKey), /^"[0-9a-f]{64}"$/);
  assert.notEqual(bobKey, aliceKey, "bob's reservation is not deduplicated against alice's");

  // 3. The inventory stays down: three attempts with one policy-stamped key, then a 503 problem.
  const outage = await post(origin, { sku: 'outage', quantity: 1 }, { 'x-client': 'bob' });
  assert.equal(outage.status, 503, outage.text);
  assert.equal(header(outage, 'content-type'), 'application/problem+json');
  assert.equal(header(outage, 'retry-after'), '1', 'a 20 ms upstream delay, rounded up to whole seconds');
  const problem = JSON.parse(outage.text) as Record<string, unknown>;
  assert.equal(problem.upstream, 'inventory');
  assert.equal(problem.code, 'HTTP_STATUS');
  assert.ok(
    !outage.text.includes(String(upstream.port)),
    `the problem leaks the upstream URL: ${outage.text}`,
  );
  const attempts = upstream.requests.slice(3);
  assert.equal(attempts.length, 3, 'retry.attempts: 3');
  const stamped = attempts[0]?.headers['idempotency-key'];
  assert.match(String(stamped), /^"[0-9a-f-]{36}"$/, 'idempotencyKeys: true stamps a UUID');
  for (const req of attempts)
    assert.equal(req.headers['idempotency-key'], stamped, 'one key for every attempt');

  // 4. No client identity: 400, never a shared bucket.
  const anonymous = await post(origin, tea, {});
  assert.equal(anonymous.status, 400, anonymous.text);
  assert.equal(header(anonymous, 'content-type'), 'application/problem+json');

  // 5. Past the limit: 429 with Retry-After equal to the RateLimit reset. Windows are
  // aligned to the clock, so allow for one window edge during the burst.
  let limited: Answer | undefined;
  let accepted = 0;
  for (let i = 0; i < 2 * ORDERS_PER_WINDOW + 1 && limited === undefined; i++) {
    const answer = await post(origin, tea, { 'x-client': 'carol' });
    if (answer.status === 429) limited = answer;
    else {
      assert.equal(answer.status, 201, answer.text);
      accepted++;
    }
  }
  assert.ok(limited !== undefined, 'no 429 after twice the limit');
  assert.ok(accepted >= ORDERS_PER_WINDOW, `only ${accepted} orders before the 429`);
  const before = upstream.requests.length;
  const retryAfter = header(limited, 'retry-after');
  assert.match(retryAfter, /^\d+$/);
  assert.ok(Number(retryAfter) >= 1 && Number(retryAfter) <= window, `Retry-After: ${retryAfter}`);
  assert.equal(header(limited, 'ratelimit'), `"orders";r=0;t=${retryAfter}`);
  assert.equal(header(limited, 'ratelimit-policy'), `"orders";q=${ORDERS_PER_WINDOW};w=${window}`);
  assert.equal(header(limited, 'content-type'), 'application/problem+json');
  assert.equal(upstream.requests.length, before, 'a rejected order does not reach the inventory');

  // 6. A reservation whose answer says the inventory's quota is used up: the policy
  // holds the next reservation until the quota's reset instead of earning a 429.
  const last = await post(origin, { sku: 'last', quantity: 1 }, { 'x-client': 'dave' });
  assert.equal(last.status, 201, last.text);
  const next = await post(origin, tea, { 'x-client': 'dave' });
  assert.equal(next.status, 201, next.text);
  const [lastAt = 0, nextAt = 0] = arrivals.slice(-2);
  assert.ok(
    nextAt - lastAt >= QUOTA_RESET_MS - 10,
    `the next reservation went ${nextAt - lastAt} ms after the quota was used up, before its ${QUOTA_RESET_MS} ms reset`,
  );
}

/** Starts the runtime `launch` describes against a fresh inventory, drives the scenario, and stops both. */
async function scenario(launch: (port: number, upstream: string) => Child): Promise<void> {
  const arrivals: number[] = [];
  await withServer(inventory(arrivals), (upstream) =>
    serveOnFreePort(
      (port) => launch(port, upstream.origin),
      (origin, child) => drive(origin, upstream, arrivals, child),
    ),
  );
}

test('examples/worker runs on workerd with its config.capnp: RateLimit headers, a reservation retried after the upstream 503, an idempotent replay, a 503 problem after an outage, 429 with Retry-After', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'breakwater-worker-'));
  try {
    // The committed config, verbatim, next to the bundle it embeds (dist/worker.js).
    await copyFile(join(EXAMPLE, 'config.capnp'), join(dir, 'config.capnp'));
    await bundleWorker(join(EXAMPLE, 'worker.ts'), join(dir, 'dist', 'worker.js'));
    await scenario((port, upstream) =>
      start(WORKERD, ['serve', join(dir, 'config.capnp'), '--socket-addr', `http=127.0.0.1:${port}`], {
        UPSTREAM: upstream,
      }),
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('examples/worker runs under deno serve (deno.ts): the same headers, retries, replay, outage and 429', async () => {
  await scenario((port, upstream) =>
    start(
      DENO,
      [
        'serve',
        '--no-lock',
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
        '--allow-net=127.0.0.1',
        '--allow-env=UPSTREAM',
        join(EXAMPLE, 'deno.ts'),
      ],
      { UPSTREAM: upstream },
    ),
  );
});

test('examples/worker runs under bun (bun.ts): the same headers, retries, replay, outage and 429', async () => {
  await scenario((port, upstream) =>
    start(BUN, ['run', join(EXAMPLE, 'bun.ts')], {
      UPSTREAM: upstream,
      HOST: '127.0.0.1',
      PORT: String(port),
    }),
  );
});

test('examples/worker/inventory.ts, the stand-in inventory its README starts: the order app reserves through it, waits out its first 503 and resends with one key, and a repeated order is replayed without reaching it', async () => {
  const inventory = start(NODE, ['--import', 'tsx', join(EXAMPLE, 'inventory.ts')], { PORT: '0' });
  try {
    const deadline = Date.now() + START_DEADLINE_MS;
    let origin: string | undefined;
    while (origin === undefined) {
      origin = /inventory on (http:\/\/127\.0\.0\.1:\d+)/.exec(inventory.output())?.[1];
      assert.ok(!inventory.exited(), `the inventory exited:\n${inventory.output()}`);
      assert.ok(Date.now() < deadline, `the inventory did not say where it listens:\n${inventory.output()}`);
      if (origin === undefined) await sleep(50);
    }
    const app = createApp(origin);
    const order = async (client: string, key: string): Promise<Response> =>
      await app.request('/orders', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-client': client, 'idempotency-key': key },
        body: JSON.stringify({ sku: 'tea', quantity: 2 }),
      });
    const logged = (): string[] =>
      inventory
        .output()
        .split('\n')
        .filter((line) => line.startsWith('POST /reserve'));

    const startedAt = Date.now();
    const first = await order('alice', '"order-1"');
    const firstText = await first.text();
    assert.equal(first.status, 201, `${firstText}\n${inventory.output()}`);
    assert.deepEqual(JSON.parse(firstText).reservation, { reservation: 'r-1', sku: 'tea', quantity: 2 });
    const took = Date.now() - startedAt;
    assert.ok(took >= 280, `the first order took ${took} ms: the inventory's 503 asked for a 300 ms wait`);
    // stdout is read as it comes: the log line of the 200 may trail the answer a little.
    while (logged().length < 2 && Date.now() < deadline) await sleep(20);
    const [refused, reserved, ...rest] = logged();
    assert.match(String(refused), /-> 503, retry-after-ms: 300/, inventory.output());
    assert.match(String(reserved), /-> 200 r-1 \(resent \d+ ms after the 503\)/, inventory.output());
    assert.equal(
      String(refused).split('  ')[1],
      String(reserved).split('  ')[1],
      "the resend carries the first attempt's Idempotency-Key",
    );
    assert.deepEqual(rest, [], inventory.output());

    const again = await order('alice', '"order-1"');
    assert.equal(again.status, 201);
    assert.equal(again.headers.get('idempotent-replayed'), 'true', 'the repeat is replayed by the order app');
    assert.equal(await again.text(), firstText);

    const bobs = await order('bob', '"order-1"');
    assert.equal(bobs.status, 201);
    assert.equal(
      (JSON.parse(await bobs.text()) as { reservation: { reservation: string } }).reservation.reservation,
      'r-2',
    );
    while (logged().length < 3 && Date.now() < deadline) await sleep(20);
    assert.equal(
      logged().length,
      3,
      `the replay reached the inventory, or bob's order did not:\n${inventory.output()}`,
    );
  } finally {
    await inventory.stop();
  }
});
