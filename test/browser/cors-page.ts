/**
 * @module
 * The page of the CORS browser check (test/browser/cors.ts): bundled with esbuild and
 * run in headless Chromium on one loopback origin, it calls the API on another through
 * breakwater's client, and posts what the browser let it see back to its own origin.
 */

import { definePolicy, retryDelay } from '../../src/index.ts';

/** The API's origin, set by esbuild's `--define`. */
declare const API: string;

/** What a raw cross-origin fetch let the page read. */
async function look(path: string, init?: RequestInit): Promise<Record<string, unknown>> {
  try {
    const response = await fetch(API + path, init);
    await response.text();
    return {
      status: response.status,
      retryAfter: response.headers.get('retry-after'),
      rateLimit: response.headers.get('ratelimit'),
      shouldRetry: response.headers.get('x-should-retry'),
      delayMs: retryDelay(response.headers) ?? null,
    };
  } catch (error) {
    return { error: String(error) };
  }
}

/** A call through breakwater's client, with the retry events it fired. */
async function client(path: string, init?: RequestInit): Promise<Record<string, unknown>> {
  const retries: unknown[] = [];
  const fetchApi = definePolicy({
    name: 'api',
    retry: { attempts: 2, backoff: { initialMs: 50, maxMs: 50, jitter: 'none' } },
  }).fetch(undefined, {
    onEvent: (event) => {
      if (event.type === 'retry') retries.push({ delayMs: event.delayMs, source: event.delaySource });
    },
  });
  try {
    const response = await fetchApi(API + path, init);
    await response.text();
    return { status: response.status, retries };
  } catch (error) {
    return { error: String(error), retries };
  }
}

const json = { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' };

async function main(): Promise<Record<string, unknown>> {
  const seen: Record<string, unknown> = {};
  // rateLimit(limit 1): the second call in a window is refused.
  seen.limitedFirst = await look('/limited/1');
  seen.limited = await look('/limited/2');
  // The client waits the server's Retry-After, then gets through in the next window.
  seen.limitedClient = await client('/limited/3');
  // shed(maxInFlight 1): a call while /busy/hold runs is refused.
  const hold = look('/busy/hold');
  await fetch(`${API}/control/entered`);
  seen.busy = await look('/busy/1', json);
  await fetch(`${API}/control/release`);
  seen.hold = await hold;
  // A preflighted POST (JSON) to a fresh limit of 1: the preflight is not counted.
  seen.preflighted = await look('/fresh/1', json);
  // An Idempotency-Key passes the preflight of a default cors().
  seen.keyed = await look('/orders', { ...json, headers: { ...json.headers, 'idempotency-key': '"k-1"' } });
  return seen;
}

main().then(
  (seen) => fetch('/report', { method: 'POST', body: JSON.stringify(seen) }),
  (error) => fetch('/report', { method: 'POST', body: JSON.stringify({ crashed: String(error) }) }),
);
