/**
 * @module
 * `breakwater/providers` under the real `openai` SDK, with nothing outside this
 * machine. A local OpenAI-compatible `/v1/chat/completions` (a Hono app on 127.0.0.1)
 * rate-limits for its first half second (429 + `retry-after-ms`,
 * `x-ratelimit-remaining-requests: 0`, `x-ratelimit-reset-requests` as a Go duration),
 * then answers a few completions 500 after the model ran (no `x-should-retry`), then
 * recovers. The same 40 calls, 8 at a time, go through two clients, each against a
 * fresh server:
 *
 * 1. `new OpenAI({ baseURL, apiKey })`: as it ships, `maxRetries: 2` (3 attempts) and
 *    its own backoff (it waits out `retry-after-ms`, else 0.5 s, 1 s with jitter);
 * 2. `new OpenAI({ baseURL, apiKey, ...openaiOptions(policy) })` on
 *    `definePolicy(providerConfig({...}))`: the SDK's retries off, the policy's 3
 *    attempts with millisecond backoffs, pacing shared by every call.
 *
 * Both get the same `fetch` underneath (`wire`: the runtime's fetch plus a send-time
 * stamp the server reads). The server counts what each did to it: requests, requests
 * sent inside a Retry-After window it had announced to any caller, and completions
 * that ran twice.
 *
 * {@link runProviderCalls} runs the comparison and says whether breakwater held; the
 * `format*` functions print it. `main.ts` tells the whole story, `npm run demo` its
 * table (act 3).
 */

import { definePolicy } from 'breakwater';
import { openaiOptions, providerConfig, readRateLimits, toHttpStatusError } from 'breakwater/providers';
import { Hono } from 'hono';
import OpenAI from 'openai';
import { listen, stampedFetch } from '../loopback.ts';

/** Chat completions per client, and how many are in flight at once (agent workers). */
const CALLS = 40;
const CONCURRENCY = 8;
/** The server rate-limits for this long after its first request ... */
const RATE_LIMITED_MS = 500;
/** ... admitting this many requests per fixed window of this many ms, 429 for the rest. */
const LIMIT_QUOTA = 3;
const LIMIT_WINDOW_MS = 100;
/**
 * From this many ms after its first request, the next few completions run and then fail
 * with a 500 (the model ran; the answer is lost). A little after the limit lifts, so
 * they hit calls' first requests, not the burst of waiters released at the window end.
 */
const FAILING_FROM_MS = 520;
const FAILING_COMPLETIONS = 4;
/** What one completion takes the "model": fixed, so the run is repeatable. */
const WORK_MS = 25;
/**
 * A request sent this soon after the server announced a window is not counted as inside
 * it: the 429 was on its way, not yet read, and no client could have held the request
 * back. Loopback takes well under a millisecond; the margin is generous on purpose.
 */
const GRACE_MS = 15;
/**
 * The wire under both clients stamps each request with the epoch ms at which it was
 * handed to the runtime's fetch (below the SDK's and breakwater's retry loops, so
 * every attempt gets its own stamp). The server judges "inside a window" by that send
 * time, not by when its handler got to run: client and server share one process, and
 * on a busy machine a handler can run tens of ms after the request left the client,
 * which would blame a client for requests it sent before the server asked it to wait.
 */
const SENT_AT_HEADER = 'x-example-sent-at';
/** Breakwater's own backoff (used only when the server names no wait): milliseconds, not the default half second. */
const BACKOFF = { initialMs: 20, factor: 2, maxMs: 200, jitter: 'none' } as const;

/** What the server counted during one client's run. */
export interface Ledger {
  requests: number;
  answered429: number;
  answered500: number;
  /** Requests that arrived inside a Retry-After window the server had announced to any caller. */
  insideWindow: number;
  /** Of those, resends of a call the server had seen before (the rest are calls' first requests). */
  insideWindowResent: number;
  /** Model executions per call (the call's id is its prompt). */
  executions: Map<string, number>;
}

/** A Retry-After window the server announced: from the 429's answer to when its quota resets. */
interface Announced {
  at: number;
  until: number;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

const completion = (id: number) => ({
  id: `chatcmpl-${id}`,
  object: 'chat.completion',
  created: 0,
  model: 'test-model',
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
});

const apiError = (message: string, type: string) => ({ error: { message, type, param: null, code: null } });

/**
 * The fake provider. Its clock starts at its first request; every figure the report
 * prints about load, windows and executions is counted here, as requests arrive.
 */
function fakeOpenAI(ledger: Ledger): Hono {
  const announced: Announced[] = [];
  let startedAt: number | undefined;
  let limitWindow = -1;
  let used = 0;
  let failuresLeft = FAILING_COMPLETIONS;
  const seen = new Set<string>();

  const app = new Hono();
  app.post('/v1/chat/completions', async (c) => {
    const body = (await c.req.json()) as { messages?: Array<{ content?: unknown }> };
    const call = String(body.messages?.[0]?.content);
    const t = Date.now();
    startedAt ??= t;
    const id = ++ledger.requests;
    const stamp = Number(c.req.header(SENT_AT_HEADER));
    const sentAt = Number.isSafeInteger(stamp) && stamp <= t ? stamp : t;
    if (announced.some((w) => w.at + GRACE_MS <= sentAt && sentAt < w.until)) {
      ledger.insideWindow++;
      if (seen.has(call)) ledger.insideWindowResent++;
    }
    seen.add(call);
    const headers: Record<string, string> = { 'x-request-id': `req_${id}` };
    const elapsed = t - startedAt;

    if (elapsed < RATE_LIMITED_MS) {
      const window = Math.floor(elapsed / LIMIT_WINDOW_MS);
      if (window !== limitWindow) {
        limitWindow = window;
        used = 0;
      }
      const resetMs = (window + 1) * LIMIT_WINDOW_MS - elapsed;
      used = Math.min(used + 1, LIMIT_QUOTA + 1);
      headers['x-ratelimit-limit-requests'] = String(LIMIT_QUOTA);
      headers['x-ratelimit-remaining-requests'] = String(Math.max(0, LIMIT_QUOTA - used));
      headers['x-ratelimit-reset-requests'] = `${resetMs}ms`;
      if (used > LIMIT_QUOTA) {
        ledger.answered429++;
        announced.push({ at: t, until: t + resetMs });
        // retry-after-ms: the millisecond form OpenAI sends.
        return c.json(apiError('Rate limit reached for requests', 'requests'), 429, {
          ...headers,
          'retry-after-ms': String(resetMs),
        });
      }
    }

    await sleep(WORK_MS);
    ledger.executions.set(call, (ledger.executions.get(call) ?? 0) + 1);
    if (elapsed >= FAILING_FROM_MS && failuresLeft > 0) {
      failuresLeft--;
      ledger.answered500++;
      // The model ran, then the answer was lost: no x-should-retry, so a resend may run it again.
      return c.json(
        apiError('The server had an error while processing your request.', 'server_error'),
        500,
        headers,
      );
    }
    return c.json(completion(id), 200, headers);
  });
  return app;
}

/** The runtime's fetch, with the send time stamped in {@link SENT_AT_HEADER}. */
const wire = stampedFetch(SENT_AT_HEADER) as typeof fetch;

/** What `toHttpStatusError()` recovered from one failed call's SDK error (undefined status: none). */
export interface Failure {
  status: number | undefined;
  retryAfterMs: number | undefined;
}

/** One client's run: the server's ledger and what the caller saw. */
export interface ClientRun {
  ledger: Ledger;
  ok: number;
  failures: Failure[];
  /** The headers of the first successful response. */
  firstHeaders: Headers | undefined;
  wallMs: number;
}

/** Runs {@link CALLS} completions, {@link CONCURRENCY} at a time, through a client made for a fresh server. */
async function run(makeClient: (baseURL: string) => OpenAI): Promise<ClientRun> {
  const ledger: Ledger = {
    requests: 0,
    answered429: 0,
    answered500: 0,
    insideWindow: 0,
    insideWindowResent: 0,
    executions: new Map(),
  };
  const server = await listen(fakeOpenAI(ledger));
  const client = makeClient(`${server.origin}/v1`);
  const result: ClientRun = { ledger, ok: 0, failures: [], firstHeaders: undefined, wallMs: 0 };
  const started = performance.now();
  let next = 0;
  async function worker(): Promise<void> {
    for (let i = next++; i < CALLS; i = next++) {
      try {
        const { response } = await client.chat.completions
          .create({ model: 'test-model', messages: [{ role: 'user', content: `call ${i}` }] })
          .withResponse();
        result.ok++;
        result.firstHeaders ??= response.headers;
      } catch (error) {
        const status = toHttpStatusError(error);
        result.failures.push({ status: status?.status, retryAfterMs: status?.retryAfterMs });
      }
    }
  }
  try {
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  } finally {
    result.wallMs = performance.now() - started;
    await server.close();
  }
  return result;
}

/** Calls whose completion ran more than once. */
const ranTwice = (ledger: Ledger): number => [...ledger.executions.values()].filter((n) => n > 1).length;

/** Failures grouped by status: `429 x6 (retryAfterMs 53..62), 500 x4 (retryAfterMs none)`. */
function failureSummary(failures: Failure[]): string {
  if (failures.length === 0) return 'none';
  const byStatus = new Map<string, number[]>();
  for (const f of failures) {
    const key = f.status === undefined ? 'no status' : String(f.status);
    const waits = byStatus.get(key) ?? [];
    if (f.retryAfterMs !== undefined) waits.push(f.retryAfterMs);
    byStatus.set(key, waits);
  }
  return [...byStatus]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([status, waits]) => {
      const n = failures.filter((f) => String(f.status ?? 'no status') === status).length;
      const range =
        waits.length === 0
          ? 'none'
          : `${Math.min(...waits)}..${Math.max(...waits)}`.replace(/^(\d+)\.\.\1$/, '$1');
      return `${status} x${n} (retryAfterMs ${range})`;
    })
    .join(', ');
}

// --- The comparison ----------------------------------------------------------------

/** Both runs, and what breakwater failed to do. */
export interface ProviderComparison {
  /** `new OpenAI({ baseURL, apiKey })`, as it ships. */
  plain: ClientRun;
  /** The same with `...openaiOptions(policy)`. */
  shielded: ClientRun;
  /**
   * Empty when the breakwater client sent nothing inside an announced window, resent no
   * 500'd POST, and the server did rate-limit and fail it; otherwise what broke.
   */
  problems: string[];
}

/** Runs the calls through the SDK as shipped, then on `openaiOptions(policy)`, each against a fresh server. */
export async function runProviderCalls(): Promise<ProviderComparison> {
  const plain = await run((baseURL) => new OpenAI({ baseURL, apiKey: 'test', fetch: wire }));
  const policy = definePolicy(providerConfig({ retry: { backoff: BACKOFF } }));
  const shielded = await run(
    (baseURL) => new OpenAI({ baseURL, apiKey: 'test', ...openaiOptions(policy, { fetch: wire }) }),
  );
  const problems = [
    shielded.ledger.insideWindow > 0 &&
      `${shielded.ledger.insideWindow} request(s) inside an announced window`,
    ranTwice(shielded.ledger) > 0 && `${ranTwice(shielded.ledger)} completion(s) run twice`,
    shielded.ledger.answered429 === 0 && 'the server never rate-limited it',
    shielded.ledger.answered500 === 0 && 'the server never failed a completion for it',
  ].filter((problem) => typeof problem === 'string');
  return { plain, shielded, problems };
}

// --- What it prints -----------------------------------------------------------------

const row = (label: string, a: string | number, b: string | number): string =>
  `${label.padEnd(44)}${String(a).padEnd(22)}${b}`.trimEnd();
const load = (r: ClientRun): string => `${r.ledger.requests} (${(r.ledger.requests / CALLS).toFixed(2)}x)`;

/** The setting in three lines, for a reader who will see only the table. */
export function formatSummary(): string[] {
  return [
    `${CALLS} chat completions, ${CONCURRENCY} at a time, through the openai SDK against a local provider that`,
    `rate-limits (429 + retry-after-ms) for ${RATE_LIMITED_MS} ms, then loses ${FAILING_COMPLETIONS} answers as 500 after the model ran.`,
    'clients: the SDK as it ships (maxRetries 2), and with ...openaiOptions(policy) (SDK retries off).',
  ];
}

/** The server's script and the two clients. */
export function formatScript(): string[] {
  return [
    `${CALLS} chat completions, ${CONCURRENCY} at a time, through the openai SDK, against a local`,
    'OpenAI-compatible server (127.0.0.1, a fresh one per client) that:',
    `  - rate-limits for ${RATE_LIMITED_MS} ms: ${LIMIT_QUOTA} requests per ${LIMIT_WINDOW_MS} ms window, the rest 429 with`,
    '    retry-after-ms to the window end, x-ratelimit-remaining-requests: 0, -reset-requests',
    `  - from ${FAILING_FROM_MS} ms, runs the next ${FAILING_COMPLETIONS} completions, then answers 500 (no x-should-retry)`,
    `  - then recovers. Every completion takes the model ${WORK_MS} ms.`,
    'clients: new OpenAI({ baseURL, apiKey }) as it ships (maxRetries 2), and with',
    '...openaiOptions(definePolicy(providerConfig(...))) (SDK retries off, policy: 3 attempts)',
  ];
}

/** What the server counted, the SDK as shipped and on `openaiOptions(policy)` side by side. */
export function formatTable({ plain, shielded }: ProviderComparison): string[] {
  const both = (f: (r: ClientRun) => string | number): [string | number, string | number] => [
    f(plain),
    f(shielded),
  ];
  return [
    row('counted by the server', 'openai SDK defaults', 'openaiOptions(policy)'),
    row(`requests received (${CALLS} calls)`, ...both(load)),
    row('answered 429 / 500', ...both((r) => `${r.ledger.answered429} / ${r.ledger.answered500}`)),
    row('inside an announced Retry-After window', ...both((r) => r.ledger.insideWindow)),
    row('  of them resends of the same call', ...both((r) => r.ledger.insideWindowResent)),
    row("completions run twice (500'd POST resent)", ...both((r) => ranTwice(r.ledger))),
  ];
}

/** What the caller saw: calls that succeeded, wall time, and how the failed ones failed. */
export function formatCaller({ plain, shielded }: ProviderComparison): string[] {
  return [
    row('seen by the caller', '', ''),
    row('calls succeeded', `${plain.ok}/${CALLS}`, `${shielded.ok}/${CALLS}`),
    row('wall time', `${Math.round(plain.wallMs)} ms`, `${Math.round(shielded.wallMs)} ms`),
    'failed calls, as toHttpStatusError(err) recovered them:',
    `  openai SDK defaults:    ${failureSummary(plain.failures)}`,
    `  openaiOptions(policy):  ${failureSummary(shielded.failures)}`,
  ];
}

/** `readRateLimits()` of one real completion's headers. */
export function formatRateLimits({ shielded }: ProviderComparison): string[] {
  const limits = shielded.firstHeaders === undefined ? undefined : readRateLimits(shielded.firstHeaders);
  return [
    'readRateLimits(response.headers) of the first completion (resetAt left out):',
    `  ${JSON.stringify(limits, (key, value) => (key === 'resetAt' ? undefined : value))}`,
  ];
}
