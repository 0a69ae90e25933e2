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

import { type BreakwaterEvent, definePolicy, type FetchLike } from 'breakwater';
import { stampedFetch } from '../loopback.ts';
import {
  CALL_HEADER,
  epochMs,
  RETRY_AFTER_GRACE_MS,
  SENT_AT_HEADER,
  TOLD_UNTIL_HEADER,
  WINDOW_UNTIL_HEADER,
} from './storm.ts';
import { errorName } from './workload.ts';

/** The naive loop's attempts, the first included: the same as breakwater's retry below. */
const NAIVE_ATTEMPTS = 3;
/** The naive loop's fixed pause between attempts. */
const NAIVE_PAUSE_MS = 100;
/** breakwater's breaker opens after this many failures in a row, at least (see the policy below). */
const BREAKER_CONSECUTIVE_FAILURES = 10;

/** A client under test. */
export interface DemoClient {
  fetch: FetchLike;
  /** Times a circuit opened during the run, or undefined for a client without a breaker. */
  breakerOpens(): number | undefined;
  /**
   * For breakwater: why `retry()` stopped resending a failed call (its `give-up` events'
   * `why`: `attempts`, `budget`, `deadline`, `unsafe-to-resend`, ...), with counts; and
   * each call's attempts as the wire saw them (status or error code, in order). Undefined
   * for the other clients. The demo prints both for breakwater's failed calls, so a lost
   * call says what it met and why it was not sent again.
   */
  retryLog(): RetryLog | undefined;
}

/** What breakwater's `retry()` did with the calls of one run (see {@link DemoClient.retryLog}). */
export interface RetryLog {
  /** `give-up` events by `why`. */
  gaveUp: Record<string, number>;
  /** Each call's attempts (by its {@link CALL_HEADER}): `['503', '429', 'ECONNRESET']`. */
  attempts: Map<string, string[]>;
}

/** The names, in the order the demo runs them. */
export const CLIENT_NAMES = ['plain fetch', 'naive retry', 'breakwater'] as const;
export type ClientName = (typeof CLIENT_NAMES)[number];

/** What each client does, in one line (for the demo's header and report). */
export const CLIENT_ABOUT: Readonly<Record<ClientName, string>> = {
  'plain fetch': 'one attempt per call',
  'naive retry': `any error, 5xx or 429 retried ${NAIVE_ATTEMPTS - 1} times, ${NAIVE_PAUSE_MS} ms apart, Retry-After ignored`,
  breakwater: 'definePolicy(): retry, breaker + pacing, Idempotency-Key on POST',
};

/**
 * The wire under every client: the runtime's fetch, below every retry loop and
 * middleware, the same for all clients. Each request is stamped with the moment it is
 * handed to fetch (`x-demo-sent-at`, each attempt its own) and with the latest end of
 * the Retry-After windows this client had read at least the grace before
 * (`x-demo-told-until`): the server judges "sent inside a window" by both, so a client
 * is blamed only for what it had been told (see `TOLD_UNTIL_HEADER` in storm.ts).
 * With `attempts`, each attempt's status or error code is noted under its call's name;
 * `now` is the clock that times the grace (the suite passes its own).
 */
export function wire(attempts?: Map<string, string[]>, now: () => number = Date.now): FetchLike {
  const send = stampedFetch(SENT_AT_HEADER);
  /** Windows read from answers, with when: only those not over yet are kept. */
  let read: { readAt: number; untilMs: number }[] = [];
  const toldUntil = (now: number): number => {
    read = read.filter((window) => window.untilMs > now);
    let until = 0;
    for (const w of read) if (w.readAt + RETRY_AFTER_GRACE_MS <= now) until = Math.max(until, w.untilMs);
    return until;
  };
  return async function told(input, init) {
    const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
    headers.set(TOLD_UNTIL_HEADER, String(toldUntil(now())));
    const call = headers.get(CALL_HEADER);
    const note = (outcome: string): void => {
      if (attempts === undefined || call === null) return;
      const seen = attempts.get(call);
      if (seen === undefined) attempts.set(call, [outcome]);
      else seen.push(outcome);
    };
    let response: Response;
    try {
      response = await send(input, { ...init, headers });
    } catch (error) {
      note(errorName(error));
      throw error;
    }
    note(String(response.status));
    const untilMs = epochMs(response.headers.get(WINDOW_UNTIL_HEADER));
    if (untilMs !== undefined) read.push({ readAt: now(), untilMs });
    return response;
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Plain `fetch`: no retries, no pacing. */
export function plainClient(): DemoClient {
  return {
    fetch: wire(),
    breakerOpens: () => undefined,
    retryLog: () => undefined,
  };
}

/**
 * The retry loop found in many agent frameworks: any thrown error, 5xx or 429 is
 * retried after a fixed pause, up to {@link NAIVE_ATTEMPTS} attempts, whatever the
 * method and whatever the server said about when to come back.
 */
export function naiveClient(): DemoClient {
  const send = wire();
  const naive: FetchLike = async (input, init) => {
    for (let attempt = 1; ; attempt++) {
      try {
        const response = await send(input, init);
        if (response.status < 500 && response.status !== 429) return response;
        if (attempt >= NAIVE_ATTEMPTS) return response;
        await response.body?.cancel();
      } catch (error) {
        if (attempt >= NAIVE_ATTEMPTS) throw error;
      }
      await sleep(NAIVE_PAUSE_MS);
    }
  };
  return {
    fetch: naive,
    breakerOpens: () => undefined,
    retryLog: () => undefined,
  };
}

/** breakwater, with the policy explained field by field; `inFlight`: the most calls the workload has in flight at once. */
export function breakwaterClient(inFlight: number): DemoClient {
  const policy = definePolicy({
    name: 'storm',
    // The server runs idempotency() on POST /orders, so a keyed order may be resent
    // after a reset or a 503: a repeat gets the stored response, it does not run again.
    idempotencyKeys: true,
    retry: {
      // As many attempts as the naive loop: the difference is *when* and *what* it resends.
      // A call whose three attempts each meet a fault fails with the last: on a busy
      // machine (load 6-12 on 2 cores) 5 of 24 runs lost 1 to 3 calls so, e.g. an early
      // call starved into the overloaded phase (503), then resent into the rate-limited
      // (429) and flaky (reset) ones. The demo prints such calls' attempts under its table.
      attempts: NAIVE_ATTEMPTS,
      // The default budget (10 tokens, 0.1 back per success) stops retrying once more
      // than about 1 attempt in 10 fails: right for a server that is going down. This
      // storm fails about 1 attempt in 5 for seconds at a time while the server is up,
      // and every resend here either waits out the server's own Retry-After or is safe
      // (a GET, or a keyed order); 50 tokens with 0.5 back per success keeps retrying
      // while fewer than 1 attempt in 3 fails.
      budget: { tokens: 50, refund: 0.5 },
    },
    breaker: {
      // Not the default 5 in a row. A server that starts shedding answers every call
      // already on the wire with a 503 before the first one is read; the breaker counts
      // those answers once, so they need nothing here. Resets are not one refusal told
      // again: each counts. In the flaky phase (about 1 request in 6 reset, before or
      // after the handler ran) the server is up, yet with 32 calls in flight 5 resets
      // in a row turn up now and then: with the default, 6 runs of 30 on a busy 2-core
      // machine (seeds 4, 6, 7) opened the breaker there and failed 300-400 of the 600
      // calls fast with CIRCUIT_OPEN. A run of resets can be as long as the calls sent
      // together, so the rule sits above the calls in flight (at least 10). A real
      // outage still opens it, by this rule or by the failure ratio (half of the last
      // 20+ calls).
      consecutiveFailures: Math.max(BREAKER_CONSECUTIVE_FAILURES, inFlight + 1),
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
  const log: RetryLog = { gaveUp: {}, attempts: new Map() };
  const onEvent = (event: BreakwaterEvent): void => {
    if (event.type === 'breaker' && event.state === 'open') opens++;
    if (event.type === 'give-up') log.gaveUp[event.why] = (log.gaveUp[event.why] ?? 0) + 1;
  };
  return {
    fetch: policy.fetch(wire(log.attempts), { onEvent }),
    breakerOpens: () => opens,
    retryLog: () => log,
  };
}

/** A fresh client by name, for a workload with at most `inFlight` calls in flight. */
export function makeClient(name: ClientName, inFlight: number): DemoClient {
  if (name === 'plain fetch') return plainClient();
  if (name === 'naive retry') return naiveClient();
  return breakwaterClient(inFlight);
}
