/**
 * @module
 * The three clients the demo compares, each a `fetch` with fetch's own call forms:
 *
 * 1. plain `fetch`: one attempt, whatever happens;
 * 2. a naive retry loop, what many agent frameworks ship: every failure retried with a
 *    fixed 100 ms pause, `Retry-After` ignored, POSTs resent like anything else;
 * 3. breakwater: `definePolicy(...).fetch()` with idempotency keys, against a server
 *    that honours them (`idempotency()` in storm.ts).
 *
 * Each run gets a fresh client, so no breaker or pacing state carries over.
 */

// Relative to the .ts sources so `npm run demo` needs no build; an application would
// write `import { definePolicy } from 'breakwater'`.
import { type BreakwaterEvent, definePolicy, type FetchLike } from '../../src/index.ts';

/** The naive loop's attempts, the first included: the same as breakwater's retry below. */
const NAIVE_ATTEMPTS = 3;
/** The naive loop's fixed pause between attempts. */
const NAIVE_PAUSE_MS = 100;

/** A client under test. */
export interface DemoClient {
  /** Short name for the table. */
  name: string;
  /** One line on what it does. */
  about: string;
  fetch: FetchLike;
  /** Times a circuit opened during the run, or undefined for a client without a breaker. */
  breakerOpens(): number | undefined;
}

/** The names, in the order the demo runs them. */
export const CLIENT_NAMES = ['plain fetch', 'naive retry', 'breakwater'] as const;
export type ClientName = (typeof CLIENT_NAMES)[number];

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Plain `fetch`: no retries, no pacing. */
export function plainClient(): DemoClient {
  return {
    name: 'plain fetch',
    about: 'one attempt per call',
    fetch: (input, init) => fetch(input, init),
    breakerOpens: () => undefined,
  };
}

/**
 * The retry loop found in many agent frameworks: any thrown error, 5xx or 429 is
 * retried after a fixed pause, up to {@link NAIVE_ATTEMPTS} attempts, whatever the
 * method and whatever the server said about when to come back.
 */
export function naiveClient(): DemoClient {
  const naive: FetchLike = async (input, init) => {
    for (let attempt = 1; ; attempt++) {
      try {
        const response = await fetch(input, init);
        if (response.status < 500 && response.status !== 429) return response;
        if (attempt >= NAIVE_ATTEMPTS) return response;
        await response.body?.cancel();
      } catch (error) {
        if (attempt >= NAIVE_ATTEMPTS) throw error;
      }
      await sleep(NAIVE_PAUSE_MS);
    }
  };
  return { name: 'naive retry', about: `${NAIVE_ATTEMPTS} attempts, ${NAIVE_PAUSE_MS} ms apart`, fetch: naive, breakerOpens: () => undefined };
}

/** breakwater, with the policy explained field by field. */
export function breakwaterClient(): DemoClient {
  const policy = definePolicy({
    name: 'storm',
    // The server runs idempotency() on POST /orders, so a keyed order may be resent
    // after a reset or a 503: a repeat gets the stored response, it does not run again.
    idempotencyKeys: true,
    retry: {
      // As many attempts as the naive loop: the difference is *when* and *what* it resends.
      attempts: NAIVE_ATTEMPTS,
    },
    timeout: {
      // Longer than the storm's slowest answer (900 ms): an attempt timeout on a
      // request the server is still running would only earn a 409 from idempotency().
      attemptMs: 2000,
      // An agent's patience for one call, waits for Retry-After included.
      totalMs: 10_000,
    },
  });
  let opens = 0;
  const onEvent = (event: BreakwaterEvent): void => {
    if (event.type === 'breaker' && event.state === 'open') opens++;
  };
  return {
    name: 'breakwater',
    about: 'definePolicy(): retry, breaker + pacing, idempotency keys',
    fetch: policy.fetch(undefined, { onEvent }),
    breakerOpens: () => opens,
  };
}

/** A fresh client by name. */
export function makeClient(name: ClientName): DemoClient {
  if (name === 'plain fetch') return plainClient();
  if (name === 'naive retry') return naiveClient();
  return breakwaterClient();
}
