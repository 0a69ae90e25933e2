import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Hono } from 'hono';
import { idempotency, REPLAYED_HEADER } from '../adapters/hono/idempotency.ts';
import { definePolicy } from '../src/policy.ts';
import { withApp } from './helpers/hono-server.ts';

// The end-to-end loop: breakwater's client (keys + retries) against breakwater's
// server (idempotency) over a real loopback connection, with a server that fails in
// every way that tempts a client to resend. Each logical POST must take effect
// exactly once: never lost, never doubled.

/** Logical POSTs per run: the acceptance figure. */
const LOGICAL_POSTS = 1000;
/** Client calls in flight at once. */
const CONCURRENCY = 16;
/** The fault schedule's seed: the same seed gives the same faults, run after run. */
const SEED = 0x5eed_b4e4;
/** Share of arrivals shed before anything runs (503 + x-should-retry: true). */
const SHED = 0.15;
/** Share of arrivals whose handler takes effect, then answers 500. */
const FAIL = 0.15;
/** Share of arrivals whose handler takes effect, then resets the connection. */
const RESET = 0.15;

type Fault = 'shed' | 'fail' | 'reset' | 'ok';

/** mulberry32: a tiny seeded PRNG, one draw per (op, arrival). */
function mulberry32(seed: number): number {
  let t = (seed + 0x6d2b79f5) | 0;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}

/**
 * What the server does with the n-th arrival of op `op`. Keyed by (op, arrival), not
 * drawn from one shared sequence, so the schedule does not depend on how the 16
 * concurrent clients interleave: each op's attempts arrive one after another.
 */
function faultFor(op: number, arrival: number): Fault {
  const r = mulberry32(SEED ^ Math.imul(op + 1, 0x9e3779b1) ^ Math.imul(arrival + 1, 0x85ebca6b));
  if (r < SHED) return 'shed';
  if (r < SHED + FAIL) return 'fail';
  if (r < SHED + FAIL + RESET) return 'reset';
  return 'ok';
}

/** How one logical POST ended for the client. */
interface Ending {
  status: number;
  replayed: boolean;
}

interface LoopResult {
  /** Side effects per op: the handler's counter. */
  effects: Map<number, number>;
  /** The fault of each handler run, per op. */
  runs: Map<number, Fault[]>;
  /** Arrivals per fault, over the whole run. */
  arrivals: Record<Fault, number>;
  endings: Map<number, Ending>;
  /** Per op, how many of its requests arrived after the one whose handler ran first. */
  later: Map<number, number>;
}

/** The node:http objects @hono/node-server passes as `c.env` (on Node, Deno and Bun alike). */
type Bindings = { incoming: { socket: { destroy(): void } } };

async function runLoop(withIdempotency: boolean): Promise<LoopResult> {
  const effects = new Map<number, number>();
  const runs = new Map<number, Fault[]>();
  const seen = new Map<number, number>();
  /** Per op, the arrival whose handler ran first. */
  const ranAt = new Map<number, number>();
  const arrivals: Record<Fault, number> = { shed: 0, fail: 0, reset: 0, ok: 0 };

  const app = new Hono<{ Bindings: Bindings; Variables: { fault: Fault; arrival: number } }>();
  app.use('/ops', async (c, next) => {
    const op = Number(c.req.header('x-op'));
    const arrival = seen.get(op) ?? 0;
    seen.set(op, arrival + 1);
    const fault = faultFor(op, arrival);
    arrivals[fault]++;
    if (fault === 'shed') {
      // A load shedder in front of everything: nothing ran, and it says so. The body is
      // read only so @hono/node-server has nothing to drain at close (Deno's sanitizer
      // would see its drain timers).
      await c.req.arrayBuffer();
      return c.json({ title: 'shed' }, 503, { 'x-should-retry': 'true' });
    }
    c.set('fault', fault);
    c.set('arrival', arrival);
    await next();
  });
  if (withIdempotency) app.use('/ops', idempotency());
  app.post('/ops', async (c) => {
    const { op } = (await c.req.json()) as { op: number };
    effects.set(op, (effects.get(op) ?? 0) + 1);
    const fault = c.get('fault');
    runs.set(op, [...(runs.get(op) ?? []), fault]);
    if (!ranAt.has(op)) ranAt.set(op, c.get('arrival'));
    if (fault === 'fail') return c.json({ title: 'failed after the effect' }, 500);
    // The effect happened; the client never hears about it. The handler still answers,
    // so idempotency() stores that answer for the retry to get.
    if (fault === 'reset') c.env.incoming.socket.destroy();
    return c.json({ op, done: true });
  });

  const policy = definePolicy({
    idempotencyKeys: true,
    retry: {
      attempts: 10,
      resend: 'safe',
      backoff: { initialMs: 1, maxMs: 5, jitter: 'full' },
      budget: false,
    },
    breaker: false,
    timeout: { attemptMs: 2000 },
  });
  const send = policy.fetch();
  const endings = new Map<number, Ending>();

  await withApp(app, async (server) => {
    let next = 0;
    async function worker(): Promise<void> {
      while (next < LOGICAL_POSTS) {
        const op = next++;
        const res = await send(`${server.origin}/ops`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-op': String(op) },
          body: JSON.stringify({ op }),
        });
        await res.arrayBuffer();
        endings.set(op, { status: res.status, replayed: res.headers.get(REPLAYED_HEADER) === 'true' });
      }
    }
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  });
  const later = new Map<number, number>();
  for (const [op, arrival] of ranAt) later.set(op, (seen.get(op) ?? 0) - 1 - arrival);
  return { effects, runs, arrivals, endings, later };
}

function total(effects: Map<number, number>): number {
  let sum = 0;
  for (const count of effects.values()) sum += count;
  return sum;
}

test('with idempotency(), 1,000 keyed POSTs through 500s, resets and shedding each take effect exactly once', async () => {
  const { effects, runs, arrivals, endings, later } = await runLoop(true);

  // Every fault happened, and the client resent through them.
  for (const fault of ['shed', 'fail', 'reset', 'ok'] as const) assert.ok(arrivals[fault] > 0, fault);
  assert.ok(
    arrivals.shed + arrivals.fail + arrivals.reset + arrivals.ok > LOGICAL_POSTS,
    'arrivals.shed + arrivals.fail + arrivals.reset + arrivals.ok > LOGICAL_POSTS',
  );

  // No effect lost, none doubled.
  assert.equal(total(effects), LOGICAL_POSTS);
  for (let op = 0; op < LOGICAL_POSTS; op++) assert.equal(effects.get(op), 1, `op ${op}`);

  // The client sees what the one run answered: a reset run's answer is replayed on
  // the retry; a run that answered 500 after its effect is replayed as 500 (with
  // x-should-retry: false, so the client stops), never run a second time. A run that
  // answered 200 is replayed only when the client sent again after it (its attempt
  // timed out first: on a loaded machine, 2 s), else it is the answer itself.
  for (let op = 0; op < LOGICAL_POSTS; op++) {
    const [fault] = runs.get(op) ?? [];
    const ending = endings.get(op);
    assert.ok(ending !== undefined, `op ${op} ended`);
    const resent = (later.get(op) ?? 0) > 0;
    assert.deepEqual(
      ending,
      fault === 'fail'
        ? { status: 500, replayed: true }
        : { status: 200, replayed: fault === 'reset' || resent },
      `op ${op} (${fault}${resent ? ', sent again after it ran' : ''})`,
    );
  }
  // Nearly every run that answered 200 reached its client at once: the replay above is
  // the exception of a slow moment, not the rule.
  const okResent = [...runs].filter(([op, [fault]]) => fault === 'ok' && (later.get(op) ?? 0) > 0).length;
  assert.ok(okResent < 50, `${okResent} ops whose run answered 200 were sent again`);
});

test('without idempotency(), the same run (same seed) takes some POSTs effect more than once', async () => {
  const { effects, endings } = await runLoop(false);
  const doubled = [...effects.values()].filter((count) => count > 1).length;
  assert.ok(total(effects) > LOGICAL_POSTS, `effects: ${total(effects)}`);
  assert.ok(doubled > 0, 'doubled > 0');
  // And the client, retrying keyed POSTs as it was told it safely could, mostly "succeeds".
  assert.ok(
    [...endings.values()].filter((e) => e.status === 200).length > LOGICAL_POSTS * 0.9,
    '[...endings.values()].filter((e) => e.status === 200).length > LOGICAL_POSTS * 0.9',
  );
});
