/**
 * @module
 * The page of the CORS browser check (test/browser/cors.ts): bundled with esbuild and
 * run in headless Chromium on one loopback origin, it calls the API on another through
 * breakwater's client, and posts what the browser let it see back to its own origin. It
 * also calls its own origin by relative URLs, to see what breakwater names them, and
 * one under a `<base href>` on the API's origin.
 */

import { createFetch, definePolicy, type Middleware, retryDelay, throwOnStatus } from '../../src/index.ts';

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

/** A RequestInit whose members are getters on its class, as fetch reads them. */
class GetterInit {
  get method(): string {
    return 'POST';
  }
  get body(): string {
    return '{"class":1}';
  }
  get headers(): Record<string, string> {
    return { 'content-type': 'application/json' };
  }
}

/**
 * Calls by relative URLs to the page's own server: the key and an error's message name
 * that server, as the browser's fetch resolves the URL against the page.
 */
async function relative(): Promise<Record<string, unknown>> {
  const keys: string[] = [];
  const urls: string[] = [];
  const look: Middleware = async function look(call, next) {
    keys.push(call.key);
    call.setHeader('x-stamped', 'yes');
    return next(call);
  };
  const fetchPage = createFetch({
    use: [throwOnStatus(), look],
    onEvent: (event) => {
      if (event.type === 'attempt') urls.push(event.url);
    },
  });
  try {
    const ok = await fetchPage('/relative/ok');
    await ok.text();
    const failed = await fetchPage('relative/fail?token=s3cret').then(
      () => 'no error',
      (error: Error) => error.message,
    );
    // An init of a class, through a header set (a copy of the init): sent whole.
    const echo = await (await fetchPage('/relative/echo', new GetterInit() as RequestInit)).json();
    return { status: ok.status, keys, urls, failed, echo };
  } catch (error) {
    return { error: String(error), keys, urls };
  }
}

/**
 * A relative call under a `<base href>` on the API's origin: the browser's fetch sends it
 * to the base, not to the page's location, and breakwater keys and names it so.
 */
async function based(): Promise<Record<string, unknown>> {
  const keys: string[] = [];
  const urls: string[] = [];
  const fetchBased = createFetch({
    use: [
      async function look(call, next) {
        keys.push(call.key);
        return next(call);
      },
    ],
    onEvent: (event) => {
      if (event.type === 'attempt') urls.push(event.url);
    },
  });
  const base = document.createElement('base');
  base.href = `${API}/based/`;
  document.head.append(base);
  try {
    const res = await fetchBased('ok?token=s3cret');
    return { status: res.status, body: await res.json(), keys, urls, baseURI: document.baseURI };
  } catch (error) {
    return { error: String(error), keys, urls };
  } finally {
    base.remove();
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
  seen.relative = await relative();
  seen.based = await based();
  return seen;
}

main().then(
  (seen) => fetch('/report', { method: 'POST', body: JSON.stringify(seen) }),
  (error) => fetch('/report', { method: 'POST', body: JSON.stringify({ crashed: String(error) }) }),
);
