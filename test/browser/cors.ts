/**
 * @module
 * The cross-origin journey in a real headless Chromium (Debian's `chromium`): a page on
 * one loopback origin calls, through breakwater's client, an API on another that puts
 * hono's `cors()` in front of `rateLimit()`, `shed()` and `idempotency()`. The browser
 * hides every response header that is not CORS-safelisted unless
 * `Access-Control-Expose-Headers` names it, so this checks what the page can read:
 * Retry-After and RateLimit on the 429, Retry-After and x-should-retry on shed()'s 503,
 * the client waiting the server's delay (not its own backoff), a preflight that is not
 * counted, and an Idempotency-Key that passes the preflight. Also, on the page's own
 * origin, that calls by relative URLs are keyed and named by that origin (by the base's
 * under a `<base href>`), and that an init whose members are getters of its class is
 * sent whole.
 *
 * Run: `node --import tsx test/browser/cors.ts`. Without Chromium it says so and
 * passes (and fails under CI=true, where it must run), as test/browser/report.mjs does.
 */

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'esbuild';
import { Hono } from 'hono';
import { cors } from 'hono/cors';
import { idempotency, rateLimit, shed } from '../../adapters/hono/index.ts';
import { startApp } from '../helpers/hono-server.ts';

const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser'];
/** Flags for a closed network: no background fetches, no first run, a fresh profile. */
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
/** The longest the page may take to report (it waits one 2 s window). */
const PAGE_TIMEOUT_MS = 60_000;
/** The limiter's window; its clock starts at a window's start on the first request. */
const WINDOW_MS = 2000;
const WINDOW_START = 1_800_000_000_000;

const browser = CANDIDATES.find((path) => existsSync(path));
if (browser === undefined) {
  const message = `browser CORS check NOT RUN: no Chromium at ${CANDIDATES.join(' or ')} (apt-get install chromium)`;
  if (process.env.CI === 'true') {
    console.error(`${message}; CI must run it`);
    process.exit(1);
  }
  console.log(message);
  process.exit(0);
}

let firstAt: number | undefined;
/** The limiter's clock: a window starts at the first request, so two quick calls share it. */
const now = (): number => {
  firstAt ??= Date.now();
  return WINDOW_START + Date.now() - firstAt;
};

const preflights: string[] = [];
let entered: () => void = () => {};
const enteredHold = new Promise<void>((resolve) => {
  entered = resolve;
});
let release: () => void = () => {};
const released = new Promise<void>((resolve) => {
  release = resolve;
});

const api = new Hono();
api.use('*', async (c, next) => {
  if (c.req.method === 'OPTIONS') preflights.push(c.req.path);
  await next();
});
// The usual order: cors() first, so it answers every preflight and its headers are on every answer.
api.use('*', cors());
api.use('/limited/*', rateLimit({ limit: 1, windowMs: WINDOW_MS, key: () => 'page', now }));
api.use('/fresh/*', rateLimit({ limit: 1, windowMs: 60_000, key: () => 'page' }));
api.use('/busy/*', shed({ maxInFlight: 1 }));
api.use('/orders', idempotency());
api.get('/control/entered', async (c) => {
  await enteredHold;
  return c.text('entered');
});
api.get('/control/release', (c) => {
  release();
  return c.text('released');
});
api.get('/busy/hold', async (c) => {
  entered();
  await released;
  return c.text('done');
});
api.all('*', (c) => c.json({ ok: true }));

const work = mkdtempSync(join(tmpdir(), 'breakwater-cors-'));
const apiServer = await startApp(api);
let chrome: ReturnType<typeof spawn> | undefined;
let timer: ReturnType<typeof setTimeout> | undefined;
try {
  const bundle = await build({
    entryPoints: [new URL('./cors-page.ts', import.meta.url).pathname],
    bundle: true,
    format: 'iife',
    write: false,
    define: { API: JSON.stringify(apiServer.origin) },
  });
  const script = bundle.outputFiles[0]?.text ?? '';
  let report: (text: string) => void = () => {};
  const reported = new Promise<string>((resolve) => {
    report = resolve;
  });
  const ui = new Hono();
  ui.get('/', (c) => c.html('<!doctype html><title>cors</title><script src="/page.js"></script>'));
  ui.get('/page.js', (c) => c.body(script, 200, { 'content-type': 'text/javascript' }));
  // The page's own server, called by relative URLs.
  ui.get('/relative/ok', (c) => c.text('ok'));
  ui.get('/relative/fail', (c) => c.text('down', 503));
  ui.post('/relative/echo', async (c) =>
    c.json({
      method: c.req.method,
      body: await c.req.text(),
      type: c.req.header('content-type'),
      stamped: c.req.header('x-stamped'),
    }),
  );
  ui.post('/report', async (c) => {
    report(await c.req.text());
    return c.text('ok');
  });
  const uiServer = await startApp(ui);
  try {
    // In a process group of its own, so that its helper processes end with it.
    chrome = spawn(browser, [...FLAGS, `--user-data-dir=${join(work, 'profile')}`, `${uiServer.origin}/`], {
      stdio: 'ignore',
      detached: true,
    });
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the page did not report within ${PAGE_TIMEOUT_MS} ms`)),
        PAGE_TIMEOUT_MS,
      );
    });
    const seen = JSON.parse(await Promise.race([reported, late])) as Record<string, Record<string, unknown>>;
    const at = (name: string): Record<string, unknown> => seen[name] ?? {};
    assert.equal(seen.crashed, undefined, 'the page crashed');
    assert.equal(at('limitedFirst').status, 200);
    assert.equal(at('limited').status, 429);
    assert.equal(at('limited').retryAfter, String(WINDOW_MS / 1000), 'the page reads the 429 Retry-After');
    assert.match(String(at('limited').rateLimit), /;r=0;t=\d+$/, 'the page reads RateLimit');
    assert.equal(at('limitedClient').status, 200, 'the client got through in the next window');
    assert.deepEqual(
      (at('limitedClient').retries as { source: string }[]).map((r) => r.source),
      ['server'],
      "the client waited the server's delay, not its own backoff",
    );
    assert.equal(at('busy').status, 503);
    assert.equal(at('busy').retryAfter, '1', "the page reads shed()'s Retry-After");
    assert.equal(at('busy').shouldRetry, 'true', "the page reads shed()'s x-should-retry");
    assert.equal(at('hold').status, 200);
    assert.equal(at('preflighted').status, 200, 'the preflight was not counted against the limit of 1');
    assert.ok(preflights.includes('/fresh/1'), 'the POST was preflighted');
    assert.equal(at('keyed').status, 200, 'Idempotency-Key passed the preflight of a default cors()');
    assert.ok(preflights.includes('/orders'), 'the keyed POST was preflighted');
    // Relative URLs: keyed and named by the page's server (its origin), not "(unparseable URL)".
    const page = uiServer.origin;
    assert.equal(at('relative').status, 200, String(at('relative').error));
    assert.deepEqual(at('relative').keys, [page, page, page], 'a relative URL is keyed by the page’s origin');
    assert.deepEqual(at('relative').urls, [
      `${page}/relative/ok`,
      `${page}/relative/fail?token=[redacted]`,
      `${page}/relative/echo`,
    ]);
    assert.deepEqual(
      at('relative').echo,
      { method: 'POST', body: '{"class":1}', type: 'application/json', stamped: 'yes' },
      'an init whose members are its class’s getters is sent whole through a header set',
    );
    assert.match(
      String(at('relative').failed),
      new RegExp(
        `^GET ${page}/relative/fail\\?token=\\[redacted\\] \\(server "${page}"\\) failed with HTTP 503`,
      ),
    );
    // Under a <base href> on the API's origin, fetch sends a relative call there, and breakwater keys it so.
    const apiOrigin = apiServer.origin;
    assert.equal(at('based').status, 200, String(at('based').error));
    assert.equal(at('based').baseURI, `${apiOrigin}/based/`);
    assert.deepEqual(
      at('based').keys,
      [apiOrigin],
      'a relative URL under <base href> is keyed by the base’s origin',
    );
    assert.deepEqual(at('based').urls, [`${apiOrigin}/based/ok?token=[redacted]`]);
    console.log(`browser CORS check ok: ${JSON.stringify(seen)}`);
  } finally {
    clearTimeout(timer);
    release();
    await uiServer.close();
  }
} finally {
  if (chrome !== undefined && chrome.exitCode === null) {
    const exited = new Promise((resolve) => chrome?.once('exit', resolve));
    // The whole group: Chromium's helpers (zygote, GPU, network) outlived a kill of the
    // browser alone and went on writing into the profile, so removing it failed.
    try {
      if (chrome.pid !== undefined) process.kill(-chrome.pid);
    } catch {
      chrome.kill();
    }
    await exited;
  }
  await apiServer.close();
  // Removing the scratch directory is best effort: the check's verdict is already given.
  // Node retries with a linear backoff (the n-th retry waits n × retryDelay): 10 × 50 ms
  // is under 3 s in all (50 × 100 ms was 127 s, the browser step's whole time when it failed).
  try {
    rmSync(work, { recursive: true, force: true, maxRetries: 10, retryDelay: 50 });
  } catch (error) {
    console.warn(`browser CORS check: left ${work} behind (${(error as Error).message})`);
  }
}
