import assert from 'node:assert/strict';
import process from 'node:process';
import { test } from 'node:test';
import fc from 'fast-check';
import { auth } from '../src/auth.ts';
import { circuitBreaker } from '../src/breaker.ts';
import type { FetchLike, Middleware } from '../src/call.ts';
import { captureStatus } from '../src/capture.ts';
import { createFetch } from '../src/chain.ts';
import {
  CircuitOpenError,
  HttpStatusError,
  NetworkError,
  RetryAfterTooLongError,
  TimeoutError,
} from '../src/errors.ts';
import type { BreakwaterEvent } from '../src/events.ts';
import { idempotencyKey } from '../src/idempotency-key.ts';
import { definePolicy } from '../src/policy.ts';
import { retry } from '../src/retry.ts';
import { throwOnStatus } from '../src/status.ts';
import { timeout } from '../src/timeout.ts';
import { type Behaviour, type ReceivedRequest, type TestServer, withServer } from './helpers/server.ts';
import { allowSlowTests } from './helpers/slow-tests.ts';

// Each property runs dozens of generated sessions against one server: seconds, not milliseconds.
await allowSlowTests();

/**
 * Properties of the whole client chain, `definePolicy().fetch()` and hand-built
 * `createFetch()` chains in any order, against one real loopback server whose answer to
 * each request of a call is a generated script: statuses with and without server delays,
 * resets and closes after the server read the request, bodies cut short, answers too late
 * for the attempt deadline, redirects; bodies of every replayable kind and streams;
 * callers who abort; several calls at once sharing one breaker, pacing and budget.
 */

/** The longest server-requested wait honoured (`maxRetryAfterMs`): a longer one fails fast. */
const MAX_RETRY_AFTER_MS = 50;
/**
 * The attempt deadline, and how late a slow answer comes (after it): far above any other
 * answer's time, even with the whole suite running beside this file on two cores.
 */
const ATTEMPT_MS = 300;
const SLOW_MS = ATTEMPT_MS + 100;
/** The total deadline: far above any script's length, so a call that meets one has hung. */
const TOTAL_MS = 8_000;
/** A call settles well before its total deadline. */
const SETTLE_MS = 4_000;
/** The test stops waiting for a call after this long (past the total deadline). */
const WATCHDOG_MS = 10_000;
/**
 * How much earlier than a server's delay a resend may arrive: timers fire on a clock that
 * is read once per event-loop turn, so a sleep of 5 ms can end 4.x ms after it began. The
 * server's clock reads its answer before it is written, and the resend after its body is
 * read: both errors make the measured gap longer, not shorter.
 */
const TIMER_SLACK_MS = 2;
/** Generated cases per property (sessions of several calls count as one); `RUNS=500` for a longer search. */
const RUNS = Number(process.env.RUNS ?? 35);
const SESSION_RUNS = Number(process.env.RUNS ?? 20);
const RETRYABLE = new Set([408, 429, 500, 502, 503, 504, 529]);
const REJECTED_BEFORE_EXECUTION = new Set([401, 403, 407, 408, 429]);
const IDEMPOTENT_METHODS = new Set(['GET', 'PUT']);
const BODY_TEXT = 'order=book&qty=2';
/** The attempts of the outer policy of a `nested` chain. */
const OUTER_ATTEMPTS = 2;
/** The stream bodies' buffer (`replayBodyBytes`), for the kind that is buffered. */
const REPLAY_BYTES = 1024;

/** The server's wait in a step: `retry-after-ms` (OpenAI, Anthropic) or `Retry-After` in seconds. */
type Wait = { header: 'retry-after-ms'; ms: number } | { header: 'retry-after'; seconds: 0 | 1 };

/** How the server answers one request. */
type Step =
  | { kind: 'status'; status: number; wait?: Wait; shouldRetry?: 'true' | 'false'; delayMs: number }
  /** Read the request, then reset the connection (RST). */
  | { kind: 'reset' }
  /** Read the request, then close the connection with no answer. */
  | { kind: 'close' }
  /** Send the status and half the body, then reset. */
  | { kind: 'mid-body'; status: 200 | 503 }
  /** Answer 200 after the attempt deadline. */
  | { kind: 'slow' }
  /** Redirect to the call's hop path, which the next step answers. */
  | { kind: 'redirect'; status: 301 | 302 | 303 | 307 | 308 };

/** The middlewares a hand-built chain is made of, in a generated order. */
type Piece = 'retry' | 'breaker' | 'timeout' | 'capture' | 'key' | 'throw' | 'auth';

type BodyKind = 'text' | 'bytes' | 'blob' | 'params' | 'stream';

/** One call of a session. */
interface CallSpec {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH';
  /** The body for any method but GET. */
  body: BodyKind;
  /** How the call is made: `fetch(url, init)` with the URL as a string or a `URL`, or `fetch(new Request(url, init))`. */
  input: 'string' | 'url' | 'request';
  /** Whether the caller sets an Idempotency-Key of its own. */
  keys: 'none' | 'caller';
  /** When the call starts, in ms after the session does. */
  startMs: number;
  /**
   * When the caller aborts, in ms after the call starts; undefined: never. On Bun and Deno
   * (see {@link SERVER_ABORTS}), once the server has read request `abortMs % 3` of the call.
   */
  abortMs?: number;
  /** Answers to the call's requests in order; past the end, a 200. */
  script: Step[];
}

/** Calls made at once through one client, and the options they share. */
interface Session {
  /**
   * `definePolicy().fetch()`; or `nested`, one policy's client under another's (a gateway's
   * policy over a provider's: the outer one retries twice, as safely as the inner one, and
   * stamps no key); or `createFetch()` with these pieces, outermost first.
   */
  chain: 'policy' | 'nested' | Piece[];
  resend: 'safe' | 'never' | 'always';
  attempts: number;
  backoff: { initialMs: number; jitter: 'none' | 'full' | 'decorrelated' };
  /** Failures in a row that open the circuit. */
  consecutiveFailures: number;
  /** Whether the chain stamps an Idempotency-Key on POST and PATCH (`idempotencyKey()`). */
  chainKeys: boolean;
  /** Whether retry() buffers stream bodies so they can be resent (`replayBodyBytes`). */
  replay: boolean;
  /** Whether the chain stamps a token and, on a 401, refreshes it and resends once (`auth()`). */
  auth: boolean;
  calls: CallSpec[];
}

const waitArb: fc.Arbitrary<Wait> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.integer({ min: 1, max: 12 }).map((ms): Wait => ({ header: 'retry-after-ms', ms })),
  },
  // Past maxRetryAfterMs: fails fast with RetryAfterTooLongError when a resend would go.
  {
    weight: 1,
    arbitrary: fc.integer({ min: 60, max: 200 }).map((ms): Wait => ({ header: 'retry-after-ms', ms })),
  },
  {
    weight: 2,
    arbitrary: fc.constantFrom<0 | 1>(0, 1).map((seconds): Wait => ({ header: 'retry-after', seconds })),
  },
);

const statusStepArb: fc.Arbitrary<Step> = fc.record(
  {
    kind: fc.constant('status' as const),
    status: fc.constantFrom(200, 408, 429, 500, 502, 503, 504, 529, 401, 403),
    wait: waitArb,
    shouldRetry: fc.constantFrom<'true' | 'false'>('true', 'false'),
    delayMs: fc.constantFrom(0, 0, 0, 2, 6),
  },
  { requiredKeys: ['kind', 'status', 'delayMs'] },
);

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 12, arbitrary: statusStepArb },
  { weight: 2, arbitrary: fc.constant<Step>({ kind: 'reset' }) },
  { weight: 2, arbitrary: fc.constant<Step>({ kind: 'close' }) },
  {
    weight: 2,
    arbitrary: fc.constantFrom<200 | 503>(200, 503).map((status): Step => ({ kind: 'mid-body', status })),
  },
  { weight: 1, arbitrary: fc.constant<Step>({ kind: 'slow' }) },
  {
    weight: 2,
    arbitrary: fc
      .constantFrom<301 | 302 | 303 | 307 | 308>(301, 302, 303, 307, 308)
      .map((status): Step => ({ kind: 'redirect', status })),
  },
);

const callArb: fc.Arbitrary<CallSpec> = fc.record(
  {
    method: fc.constantFrom('GET', 'POST', 'PUT', 'PATCH'),
    body: fc.constantFrom<BodyKind>('text', 'bytes', 'blob', 'params', 'stream'),
    input: fc.constantFrom('string', 'url', 'request'),
    keys: fc.constantFrom('none', 'caller'),
    startMs: fc.integer({ min: 0, max: 15 }),
    abortMs: fc.integer({ min: 0, max: 40 }),
    script: fc.array(stepArb, { minLength: 1, maxLength: 5 }),
  },
  // Most callers never abort.
  { requiredKeys: ['method', 'body', 'input', 'keys', 'startMs', 'script'] },
);

const piecesArb: fc.Arbitrary<Piece[]> = fc
  .tuple(
    fc.shuffledSubarray<Piece>(['retry', 'breaker', 'timeout', 'capture', 'key', 'throw', 'auth'], {
      minLength: 7,
      maxLength: 7,
    }),
    fc.boolean(),
  )
  .map(([pieces, throws]) => (throws ? pieces : pieces.filter((piece) => piece !== 'throw')));

/**
 * A body fetch cannot send again goes on a redirect that drops it (303): a stream retry()
 * did not buffer (fetch refuses to follow, as the Fetch standard says, with an error of its
 * own: see LOCAL_REFUSAL in src/network.ts), and on Node 20 a Uint8Array (undici's follow
 * fails on the buffer it detached, "Cannot perform ArrayBuffer.prototype.slice on a
 * detached ArrayBuffer", which reads as ENETWORK).
 */
function followable(session: Omit<Session, 'calls'>, call: CallSpec): CallSpec {
  if (!oneShot(session, call) && call.body !== 'bytes') return call;
  return {
    ...call,
    script: call.script.map((step): Step => (step.kind === 'redirect' ? { ...step, status: 303 } : step)),
  };
}

function sessionArb(
  chain: fc.Arbitrary<Session['chain']>,
  calls: { minLength: number; maxLength: number },
  consecutiveFailures: fc.Arbitrary<number>,
): fc.Arbitrary<Session> {
  return fc
    .record({
      chain,
      resend: fc.constantFrom('safe', 'never', 'always'),
      attempts: fc.integer({ min: 1, max: 4 }),
      backoff: fc.record({
        initialMs: fc.integer({ min: 1, max: 5 }),
        jitter: fc.constantFrom('none', 'full', 'decorrelated'),
      }),
      consecutiveFailures,
      chainKeys: fc.boolean(),
      replay: fc.boolean(),
      auth: fc.boolean(),
      calls: fc.array(callArb, calls),
    })
    .map((session) => ({
      ...session,
      calls: session.calls.map((call) => followable(session, call)),
    }));
}

/**
 * Whether a call's body can be sent only once: a stream (a `Request`'s body is one) that
 * retry() does not buffer (once buffered, it is a Blob for every layer).
 */
function oneShot(session: Omit<Session, 'calls'>, call: CallSpec): boolean {
  // definePolicy() builds no retry() for one attempt (but for resend: 'never'), so nothing buffers the stream.
  const buffered =
    session.replay && (session.attempts > 1 || session.resend === 'never' || Array.isArray(session.chain));
  return call.method !== 'GET' && (call.body === 'stream' || call.input === 'request') && !buffered;
}

/** The step answering the n-th request (0-based) of a call: past the script, a 200. */
function stepAt(call: CallSpec, index: number): Step {
  return call.script[index] ?? { kind: 'status', status: 200, delayMs: 0 };
}

/** The wait a step asks for, in ms, if any. */
function waitMs(step: Step): number | undefined {
  if (step.kind !== 'status' || step.wait === undefined) return undefined;
  return step.wait.header === 'retry-after-ms' ? step.wait.ms : step.wait.seconds * 1000;
}

function statusOf(step: Step): number {
  return step.kind === 'status' || step.kind === 'mid-body' ? step.status : step.kind === 'slow' ? 200 : 0;
}

/** Whether `piece` runs inside retry(), so that each resend passes it. */
function insideRetry(session: Session, piece: Piece): boolean {
  return !Array.isArray(session.chain) || session.chain.indexOf(piece) > session.chain.indexOf('retry');
}

/** Whether an answer is retryable, and whether the server provably did not run it (DESIGN §5). */
function judge(session: Session, step: Step): { retryable: boolean; notRun: boolean } {
  if (step.kind === 'reset' || step.kind === 'close') return { retryable: true, notRun: false };
  // Outside retry, the attempt timeout ends the whole call.
  if (step.kind === 'slow') return { retryable: insideRetry(session, 'timeout'), notRun: false };
  if (step.kind === 'redirect') return { retryable: false, notRun: false };
  if (step.status < 400) return { retryable: false, notRun: true };
  const auth = step.status === 401 || step.status === 403;
  const override = step.kind === 'status' ? step.shouldRetry : undefined;
  const retryable = !auth && (override === undefined ? RETRYABLE.has(step.status) : override === 'true');
  return { retryable, notRun: override === 'true' || REJECTED_BEFORE_EXECUTION.has(step.status) };
}

function keyed(session: Session, call: CallSpec): boolean {
  return call.keys === 'caller' || (session.chainKeys && (call.method === 'POST' || call.method === 'PATCH'));
}

function idempotent(session: Session, call: CallSpec): boolean {
  return IDEMPOTENT_METHODS.has(call.method) || keyed(session, call);
}

/** The method fetch follows a redirect with (Fetch standard, "HTTP-redirect fetch"). */
function hopMethod(status: number, method: string): string {
  return status === 303 || ((status === 301 || status === 302) && method === 'POST') ? 'GET' : method;
}

/** A request the server should see: a send of the chain's, or a hop fetch followed. */
interface Planned {
  hop: boolean;
  method: string;
}

/**
 * Whether auth() refreshes and resends after a 401 (see auth.ts): not a body it cannot
 * send again, nor a non-idempotent request a redirect made a GET, nor under resend:
 * 'never' one that may have run (`ran`: a redirect, or an earlier pass).
 */
function authResends(
  session: Session,
  call: CallSpec,
  step: Step,
  redirected: boolean,
  ran: boolean,
): boolean {
  // A throwOnStatus() inside auth() turns the 401 into an error auth() passes on.
  const thrown =
    Array.isArray(session.chain) && session.chain.indexOf('throw') > session.chain.indexOf('auth');
  return (
    session.auth &&
    !thrown &&
    step.kind === 'status' &&
    step.status === 401 &&
    !oneShot(session, call) &&
    !(redirected && !idempotent(session, call)) &&
    !(session.resend === 'never' && ran)
  );
}

/**
 * What DESIGN §5 and §6 say a call alone does (no breaker opening, no pacing by another
 * call): the requests, and how it ends.
 */
function plan(session: Session, call: CallSpec): { requests: Planned[]; tooLong: boolean; last: Step } {
  const requests: Planned[] = [];
  let ran = false;
  let index = 0;
  let sends = 0;
  /** Sends the request once and follows fetch's redirects: the last answer, and whether a redirect led to it. */
  const send = () => {
    sends++;
    requests.push({ hop: false, method: call.method });
    let method: string = call.method;
    let step = stepAt(call, index++);
    let redirected = false;
    while (step.kind === 'redirect') {
      // An answer fetch followed a redirect for: the request it redirected ran.
      ran = true;
      redirected = true;
      method = hopMethod(step.status, method);
      requests.push({ hop: true, method });
      step = stepAt(call, index++);
    }
    return { step, redirected };
  };
  for (;;) {
    let { step, redirected } = send();
    if (authResends(session, call, step, redirected, ran)) ({ step } = send());
    const { retryable, notRun } = judge(session, step);
    ran ||= !notRun;
    const safe =
      session.resend === 'always' || !ran || (session.resend === 'safe' && idempotent(session, call));
    if (!retryable || sends >= session.attempts || !safe || oneShot(session, call))
      return { requests, tooLong: false, last: step };
    if ((waitMs(step) ?? 0) > MAX_RETRY_AFTER_MS) return { requests, tooLong: true, last: step };
  }
}

/** One request as the server saw it. */
interface Arrival {
  /** performance.now() when the request had been read. */
  at: number;
  /** performance.now() just before its answer's headers were written. */
  answeredAt: number;
  hop: boolean;
  method: string;
  key: string | undefined;
  /** The Authorization header. */
  token: string | undefined;
  body: string;
}

/** One call of the session the server is serving now. */
interface CallRun {
  path: string;
  spec: CallSpec;
  arrivals: Arrival[];
  /** Where the server aborts the call (see {@link SERVER_ABORTS}): once it has read this request, the caller aborts. */
  abortOn?: { request: number; abort: () => void };
}

/**
 * On Bun and Deno, a caller who aborts while its request is still being read (a body on
 * its way, or a request whose end the server has not yet seen) makes node:http's request
 * emit `aborted` (ECONNRESET), which test/helpers/server.ts's body read turns into an
 * unhandled rejection (its request handler awaits it unguarded), failing the test. There
 * the caller aborts from the server's handler, once it has read a request whole: while
 * the call waits for that request's answer, nothing of it is on its way.
 */
const SERVER_ABORTS = process.versions.bun !== undefined || 'Deno' in globalThis;

/** The session the server is serving now. */
interface Run {
  calls: CallRun[];
  /** The handler's work for each request, done once its answer is given. */
  answering: Promise<void>[];
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Deno's fetch resends a request on its own (below fetch, so no chain can see or stop it)
 * when its reused keep-alive connection is reset or closed after the server read it, for
 * every method (README "Runtimes", keep-alive-resend.test.ts); Bun's does so for GET, HEAD,
 * PUT and DELETE (see the last test in this file). There each answer closes its connection,
 * so each request has a fresh one and the server counts the chain's sends, not the
 * runtime's; on Node connections are reused, as in production.
 */
const CLOSE_EACH: Record<string, string> =
  'Deno' in globalThis || process.versions.bun !== undefined ? { connection: 'close' } : {};

function behaviour(step: Step, hopUrl: string): Behaviour {
  switch (step.kind) {
    case 'reset':
      return { reset: 'after-read' };
    case 'close':
      return { close: 'no-response' };
    case 'mid-body':
      return { reset: 'mid-body', status: step.status, headers: { ...CLOSE_EACH }, body: 'partial body' };
    case 'slow':
      return { status: 200, headers: { ...CLOSE_EACH }, body: 'late' };
    case 'redirect':
      return { status: step.status, headers: { ...CLOSE_EACH, location: hopUrl } };
    case 'status': {
      const headers: Record<string, string> = { ...CLOSE_EACH };
      if (step.wait?.header === 'retry-after-ms') headers['retry-after-ms'] = String(step.wait.ms);
      if (step.wait?.header === 'retry-after') headers['retry-after'] = String(step.wait.seconds);
      if (step.shouldRetry !== undefined) headers['x-should-retry'] = step.shouldRetry;
      return {
        status: step.status,
        headers,
        body: step.status < 400 ? 'ok' : '{"error":{"message":"scripted"}}',
      };
    }
  }
}

/** The server's handler: each request of a call of the current session is answered by the call's script. */
function scripted(current: () => Run | undefined) {
  return async (req: ReceivedRequest): Promise<Behaviour> => {
    const at = performance.now();
    const run = current();
    const call = run?.calls.find(({ path }) => req.url === path || req.url === `${path}/hop`);
    // A request from a session already over (none should come: see check()) is answered, not scripted.
    if (run === undefined || call === undefined) return { status: 410 };
    const arrival: Arrival = {
      at,
      answeredAt: Number.NaN,
      hop: req.url !== call.path,
      method: req.method,
      key: req.headers['idempotency-key'] as string | undefined,
      token: req.headers.authorization as string | undefined,
      body: req.text,
    };
    call.arrivals.push(arrival);
    if (call.abortOn?.request === call.arrivals.length - 1) call.abortOn.abort();
    const step = stepAt(call.spec, call.arrivals.length - 1);
    const wait = step.kind === 'slow' ? SLOW_MS : step.kind === 'status' ? step.delayMs : 0;
    const answering = wait > 0 ? sleep(wait) : Promise.resolve();
    run.answering.push(answering);
    await answering;
    arrival.answeredAt = performance.now();
    return behaviour(step, `${call.path}/hop`);
  };
}

/** auth() options whose refresh() gives a new token each time: `token-1`, `token-2`, ... */
function tokens(): { token: string; refresh: () => Promise<string> } {
  let refreshes = 0;
  return { token: 'token-0', refresh: async () => `token-${++refreshes}` };
}

function buildFetch(session: Session, onEvent: (event: BreakwaterEvent) => void): FetchLike {
  const backoff = { ...session.backoff, factor: 2, maxMs: 10 };
  const breaker = { consecutiveFailures: session.consecutiveFailures, open: { initialMs: 5, maxMs: 20 } };
  const retryOptions = {
    attempts: session.attempts,
    backoff,
    maxRetryAfterMs: MAX_RETRY_AFTER_MS,
    resend: session.resend,
    ...(session.replay ? { replayBodyBytes: REPLAY_BYTES } : {}),
  };
  if (!Array.isArray(session.chain)) {
    const inner = definePolicy({
      retry: retryOptions,
      breaker,
      timeout: { attemptMs: ATTEMPT_MS, totalMs: TOTAL_MS },
      idempotencyKeys: session.chainKeys,
    }).fetch(undefined, { onEvent, ...(session.auth ? { auth: tokens() } : {}) });
    if (session.chain === 'policy') return inner;
    // The outer client's events are not the sends: only the inner one's reach the server.
    return definePolicy({
      retry: {
        attempts: OUTER_ATTEMPTS,
        backoff,
        maxRetryAfterMs: MAX_RETRY_AFTER_MS,
        resend: session.resend,
      },
      breaker,
      timeout: { attemptMs: TOTAL_MS, totalMs: TOTAL_MS },
    }).fetch(inner);
  }
  const pieces: Record<Piece, Middleware | undefined> = {
    retry: retry(retryOptions),
    breaker: circuitBreaker({ ...breaker, maxRetryAfterMs: MAX_RETRY_AFTER_MS }),
    timeout: timeout({ attemptMs: ATTEMPT_MS }),
    capture: captureStatus(),
    key: session.chainKeys ? idempotencyKey() : undefined,
    throw: throwOnStatus(),
    auth: session.auth ? auth(tokens()) : undefined,
  };
  const use = session.chain.map((piece) => pieces[piece]).filter((m): m is Middleware => m !== undefined);
  return createFetch({ use: [timeout({ totalMs: TOTAL_MS }), ...use], onEvent });
}

function body(kind: BodyKind): BodyInit {
  const bytes = new TextEncoder().encode(BODY_TEXT);
  switch (kind) {
    case 'text':
      return BODY_TEXT;
    case 'bytes':
      return bytes;
    case 'blob':
      return new Blob([bytes]);
    case 'params':
      return new URLSearchParams(BODY_TEXT);
    case 'stream':
      return new ReadableStream({
        start(controller) {
          controller.enqueue(bytes.slice(0, 5));
          controller.enqueue(bytes.slice(5));
          controller.close();
        },
      });
  }
}

type Outcome = { response: Response } | { error: unknown } | { hung: true };

/** What happened, in order, on the client's side: events, aborts, settlements. */
interface Entry {
  what: string;
  /** The call it concerns (by index), if one. */
  call?: number;
  /** performance.now(). */
  at: number;
  /** Date.now(). */
  wall: number;
  /** For `paced` events: when the key may go again (epoch ms). */
  until?: number;
  /** For `attempt` events: the attempt number (1 for a call's first send). */
  attempt?: number;
}

function describe(outcome: Outcome): string {
  if ('hung' in outcome) return 'hung';
  if ('response' in outcome) return `Response ${outcome.response.status}`;
  const error = outcome.error as {
    name?: string;
    code?: string;
    sent?: string;
    scope?: string;
    message?: string;
  };
  return `${error?.name} ${error?.code} sent=${error?.sent} scope=${error?.scope}: ${error?.message}`;
}

/** Starts one call of the session at its time; settles with its outcome, never rejects. */
async function start(
  fetch: FetchLike,
  server: TestServer,
  run: CallRun,
  index: number,
  note: (what: string, call?: number) => void,
): Promise<{ outcome: Outcome; afterAbort: boolean; elapsed: number; reason: unknown }> {
  const { spec } = run;
  await sleep(spec.startMs);
  const headers: Record<string, string> = {};
  if (spec.keys === 'caller') headers['idempotency-key'] = `"caller-${run.path}"`;
  const controller = new AbortController();
  const init: RequestInit & { duplex?: 'half' } = { method: spec.method, headers, signal: controller.signal };
  if (spec.method !== 'GET') {
    init.body = body(spec.body);
    if (init.body instanceof ReadableStream) init.duplex = 'half';
  }
  let watchdog: ReturnType<typeof setTimeout> | undefined;
  let aborter: ReturnType<typeof setTimeout> | undefined;
  const abort = () => {
    note('abort', index);
    controller.abort();
  };
  if (spec.abortMs !== undefined && SERVER_ABORTS) run.abortOn = { request: spec.abortMs % 3, abort };
  else if (spec.abortMs !== undefined) aborter = setTimeout(abort, spec.abortMs);
  const url = `${server.origin}${run.path}`;
  const started = performance.now();
  const outcome: Outcome = await Promise.race([
    (spec.input === 'request'
      ? fetch(new Request(url, init))
      : fetch(spec.input === 'url' ? new URL(url) : url, init)
    ).then(
      (response) => ({ response }),
      (error: unknown) => ({ error }),
    ),
    new Promise<{ hung: true }>((resolve) => {
      watchdog = setTimeout(() => resolve({ hung: true }), WATCHDOG_MS);
    }),
  ]);
  const afterAbort = controller.signal.aborted;
  const elapsed = performance.now() - started;
  clearTimeout(watchdog);
  clearTimeout(aborter);
  note('settled', index);
  // Read the answer's body whole (a cut one throws: the caller's to handle), so no socket is left.
  if ('response' in outcome) await outcome.response.arrayBuffer().catch(() => {});
  return { outcome, afterAbort, elapsed, reason: controller.signal.reason };
}

/** Runs one session against the server and checks every invariant. */
async function check(
  server: TestServer,
  setRun: (run: Run | undefined) => void,
  session: Session,
  n: number,
) {
  const run: Run = {
    calls: session.calls.map((spec, i) => ({ path: `/s${n}/c${i}`, spec, arrivals: [] })),
    answering: [],
  };
  setRun(run);
  const log: Entry[] = [];
  const note = (what: string, call?: number, extra: Partial<Entry> = {}) => {
    const entry: Entry = { what, at: performance.now(), wall: Date.now(), ...extra };
    if (call !== undefined) entry.call = call;
    log.push(entry);
  };
  const fetch = buildFetch(session, (event) => {
    const call = 'url' in event ? run.calls.findIndex(({ path }) => event.url.endsWith(path)) : undefined;
    if (event.type === 'attempt') note('attempt', call, { attempt: event.attempt });
    else if (event.type === 'breaker') note(`breaker ${event.state}`);
    else if (event.type === 'paced') note(`paced ${event.phase}`, undefined, { until: Number(event.until) });
    else note(event.type);
  });
  const results = await Promise.all(run.calls.map((call, i) => start(fetch, server, call, i, note)));
  // A request sent after its call settled would be one nobody waits for.
  const seen = run.calls.map((call) => call.arrivals.length);
  await sleep(5);
  setRun(undefined);
  // Late answers (a slow one the attempt deadline left behind) are given before the next session.
  await Promise.all(run.answering);

  const arrivals = run.calls.map((call) => call.arrivals);
  const shown = log.map((e) => `${e.what}${e.call === undefined ? '' : ` #${e.call}`}@${e.at.toFixed(1)}`);
  const context = `session ${JSON.stringify(session)}\narrivals ${JSON.stringify(arrivals)}\nlog ${shown.join(', ')}\noutcomes ${results.map((r) => describe(r.outcome)).join(' | ')}`;

  for (const [i, call] of run.calls.entries()) {
    checkCall(
      session,
      call,
      i,
      results[i] as Awaited<ReturnType<typeof start>>,
      seen[i] as number,
      log,
      context,
    );
  }
  checkBreaker(session, log, context);

  // Alone, a call does exactly what DESIGN §5 and §6 say (the checks above are its safety half).
  const [only] = session.calls;
  if (
    session.calls.length !== 1 ||
    only === undefined ||
    only.abortMs !== undefined ||
    session.chain === 'nested'
  )
    return;
  const result = results[0] as Awaited<ReturnType<typeof start>>;
  const want = plan(session, only);
  assert.deepEqual(
    (arrivals[0] as Arrival[]).map(({ hop, method }) => ({ hop, method })),
    want.requests,
    `requests sent\n${context}`,
  );
  const { outcome } = result;
  const error = (outcome as { error?: unknown }).error;
  const throws = Array.isArray(session.chain) && session.chain.includes('throw');
  if (want.tooLong) {
    assert.equal(error instanceof RetryAfterTooLongError, true, `no RetryAfterTooLongError\n${context}`);
  } else if (want.last.kind === 'reset' || want.last.kind === 'close') {
    assert.equal(error instanceof NetworkError, true, `no NetworkError\n${context}`);
  } else if (want.last.kind === 'slow') {
    assert.equal(error instanceof TimeoutError, true, `no TimeoutError\n${context}`);
  } else if (throws && statusOf(want.last) >= 400) {
    assert.equal(error instanceof HttpStatusError, true, `no HttpStatusError\n${context}`);
  } else {
    assert.equal('response' in outcome, true, `no Response\n${context}`);
  }
}

/** Invariants 1 to 6 for one call of a session. */
function checkCall(
  session: Session,
  call: CallRun,
  i: number,
  result: Awaited<ReturnType<typeof start>>,
  seen: number,
  log: Entry[],
  context: string,
): void {
  const { spec, arrivals } = call;
  const { outcome, afterAbort, elapsed, reason } = result;
  const say = (what: string) => `call ${i}: ${what}\n${context}`;
  const aborted = log.some((e) => e.what === 'abort' && e.call === i);

  // 4. The call settles, well before its deadline, and sends at most `attempts` requests.
  assert.equal('hung' in outcome, false, say('never settled'));
  assert.equal(elapsed < SETTLE_MS, true, say(`took ${Math.round(elapsed)} ms`));
  // (One sent before the caller aborted may still be on its way.)
  if (!aborted) assert.equal(arrivals.length, seen, say('a request arrived after the call settled'));
  const sends = arrivals.filter((arrival) => !arrival.hop);
  const attempts = log.filter((e) => e.what === 'attempt' && e.call === i);
  // auth()'s resend after a 401 numbers on: it may add one to the last pass (of each outer pass).
  const most =
    (session.attempts + (session.auth ? 1 : 0)) * (session.chain === 'nested' ? OUTER_ATTEMPTS : 1);
  assert.equal(sends.length <= most, true, say('more requests than attempts'));
  assert.equal(attempts.length <= most, true, say('more attempt events than attempts'));
  // No send after the caller left: the abort ends the call, and nothing is sent for it.
  if (aborted) {
    const abortAt = log.findIndex((e) => e.what === 'abort' && e.call === i);
    const late = log.slice(abortAt).some((e) => e.what === 'attempt' && e.call === i);
    assert.equal(late, false, say('sent after the abort'));
    assert.equal(sends.length <= attempts.length, true, say('a request no attempt sent'));
  } else {
    assert.equal(sends.length, attempts.length, say("the server's requests are not the chain's sends"));
  }

  let ran = false;
  /** The sends so far, and the first of the current outer pass (a `nested` chain's outer resend starts a new inner call). */
  let sent = 0;
  let passStart = 0;
  for (const [index, arrival] of arrivals.entries()) {
    const before = index > 0 ? stepAt(spec, index - 1) : undefined;
    if (arrival.hop) {
      assert.equal(before?.kind, 'redirect', say(`request ${index} went to the hop unasked`));
      continue;
    }
    // Which layer sent it: an inner call's first attempt after the first send is the outer policy's resend.
    // The k-th request is the k-th attempt's for an aborted call too: an attempt whose request
    // never arrived can only be the last (nothing is sent after the abort). Skipping this for
    // aborted calls took an outer resend made before the abort for the same pass (a new key
    // for a PATCH answered 429, under load on Bun).
    const outer = sent > 0 && attempts[sent]?.attempt === 1;
    if (outer) passStart = index;
    sent++;
    // 6. One Idempotency-Key for every send of a call: the caller's, or one the chain stamped.
    // (The outer policy of a nested chain knows no key the inner one stamps: its resend is a
    // new inner call, with a new key, which it makes only for a call that cannot have run.)
    assert.equal(
      arrival.key,
      (arrivals[passStart] as Arrival).key,
      say(`request ${index} carried another key`),
    );
    // The same request on every send: method, body.
    assert.equal(arrival.method, spec.method, say(`request ${index} changed method`));
    assert.equal(arrival.body, spec.method === 'GET' ? '' : BODY_TEXT, say(`request ${index} body`));
    if (before === undefined) continue;
    // Only a retryable answer is resent, or a 401 auth() refreshed the token for.
    const previous = arrivals[index - 1] as Arrival;
    if (session.auth && statusOf(before) === 401) {
      assert.notEqual(
        arrival.token,
        previous.token,
        say(`request ${index} resent a 401 with the same token`),
      );
    } else {
      assert.equal(judge(session, before).retryable, true, say(`request ${index} resent a final answer`));
    }
    // 1, 2. Once a request may have run, it is resent only when idempotent or resend: 'always'.
    for (let k = 0; k < index; k++) {
      const step = stepAt(spec, k);
      ran ||= step.kind === 'redirect' || !judge(session, step).notRun;
    }
    if (ran) {
      assert.notEqual(session.resend, 'never', say(`resend 'never' resent request ${index}`));
      // The outer policy sees no key the inner one stamped: only the method, or the caller's key.
      const safe = outer
        ? IDEMPOTENT_METHODS.has(spec.method) || spec.keys === 'caller'
        : idempotent(session, spec);
      assert.equal(
        session.resend === 'always' || safe,
        true,
        say(`request ${index} resent a non-idempotent call that may have run`),
      );
    }
    // A stream is sent once, unless retry buffered it (the outer policy buffers nothing).
    const stream = spec.method !== 'GET' && (spec.body === 'stream' || spec.input === 'request');
    assert.equal(outer ? stream : oneShot(session, spec), false, say(`request ${index} resent a stream`));
    // 3. Never earlier than the server asked (when it may ask: not in a 401, which auth() answers).
    const wait = waitMs(before);
    if (wait !== undefined && judge(session, before).retryable) {
      const gap = arrival.at - previous.answeredAt;
      assert.equal(
        gap >= wait - TIMER_SLACK_MS,
        true,
        say(`request ${index} came ${gap.toFixed(2)} ms after an answer asking for ${wait} ms`),
      );
    }
  }

  const key = arrivals[0]?.key;
  if (arrivals.length === 0) {
    // Nothing arrived (the caller left first, or the circuit was open): no key to compare.
  } else if (spec.keys === 'caller') {
    assert.equal(key, `"caller-${call.path}"`, say("the caller's key was replaced"));
  } else if (keyed(session, spec)) {
    assert.match(String(key), /^"[0-9a-f-]{36}"$/, say('no key was stamped'));
  } else {
    assert.equal(key, undefined, say(`a key was stamped on ${spec.method}`));
  }

  // 5. A Response with the last answer's status, or one of breakwater's typed errors.
  const last = arrivals.length > 0 ? stepAt(spec, arrivals.length - 1) : undefined;
  if ('error' in outcome && afterAbort) {
    // User aborts stay the caller's own reason (DESIGN §4).
    assert.equal(outcome.error, reason, say('an abort was wrapped'));
  } else if ('response' in outcome) {
    assert.notEqual(last, undefined, say('a Response nobody sent'));
    assert.equal(outcome.response.status, statusOf(last as Step), say("not the last answer's status"));
  } else if ('error' in outcome) {
    const { error } = outcome;
    const typed = [
      NetworkError,
      HttpStatusError,
      TimeoutError,
      CircuitOpenError,
      RetryAfterTooLongError,
    ].some((type) => error instanceof type);
    assert.equal(typed, true, say('an untyped error'));
    if (!(error instanceof CircuitOpenError))
      assert.notEqual(last, undefined, say('an error for a call that sent nothing'));
    if (error instanceof NetworkError) {
      assert.equal(
        last?.kind === 'reset' || last?.kind === 'close',
        true,
        say('a NetworkError for an answer'),
      );
      assert.equal(error.sent, 'maybe', say('a request the server read is said not sent'));
    }
    if (error instanceof TimeoutError) {
      assert.equal(last?.kind, 'slow', say('a deadline met without a slow answer'));
      assert.equal(error.scope, 'attempt', say('the total deadline was met'));
    }
    if (error instanceof HttpStatusError)
      assert.equal(error.status, statusOf(last as Step), say('not the last status'));
  }
}

/**
 * The breaker and pacing, for every caller at once, where each resend passes the breaker
 * (inside retry): nothing is sent while the circuit is open; one probe while it is
 * half-open; nothing before a pause the breaker announced ends.
 */
function checkBreaker(session: Session, log: Entry[], context: string): void {
  if (!insideRetry(session, 'breaker')) return;
  let state = 'closed';
  /** The call whose attempt is the half-open probe, if one went. */
  let probe: number | undefined;
  let pausedUntil = 0;
  for (const entry of log) {
    if (entry.what.startsWith('breaker ')) {
      state = entry.what.slice('breaker '.length);
      probe = undefined;
    } else if (entry.what === 'abort' && entry.call === probe) {
      // A probe its caller left says nothing of the server: the next call probes instead.
      probe = undefined;
    } else if (entry.what === 'paced start') {
      pausedUntil = Math.max(pausedUntil, entry.until as number);
    } else if (entry.what === 'attempt') {
      const at = `attempt of call ${entry.call} at ${entry.at.toFixed(1)}`;
      assert.notEqual(state, 'open', `${at} while the circuit was open\n${context}`);
      if (state === 'half-open') {
        // The probe is a call: a layer inside the breaker may send it twice (auth() after a 401).
        if (probe !== entry.call) assert.equal(probe, undefined, `${at}: a second probe\n${context}`);
        probe = entry.call;
      }
      assert.equal(
        entry.wall >= pausedUntil - TIMER_SLACK_MS,
        true,
        `${at}: ${pausedUntil - entry.wall} ms before the key's pause ended\n${context}`,
      );
    }
  }
}

/** Longer than any wait test/helpers/server.ts makes by itself (20 ms before a mid-body reset). */
const SERVER_WAIT_MS = 40;

/** Runs a property over one server, failing on any unhandled rejection on the way. */
async function property(arb: fc.Arbitrary<Session>, numRuns = RUNS): Promise<void> {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  let run: Run | undefined;
  let n = 0;
  try {
    await withServer(
      scripted(() => run),
      async (server) => {
        try {
          await fc.assert(
            fc.asyncProperty(arb, (session) =>
              check(
                server,
                (next) => {
                  run = next;
                },
                session,
                n++,
              ),
            ),
            { numRuns, includeErrorInReport: true },
          );
        } finally {
          // The last session's late answers (a slow one the attempt deadline left behind),
          // and the server's own short waits (a mid-body reset's), end before the test does:
          // Deno's sanitizer fails a test that leaves a timer running, and the next one that
          // sees it end.
          await Promise.all(run?.answering ?? []);
          await sleep(SERVER_WAIT_MS);
        }
      },
    );
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
  assert.deepEqual(unhandled, [], 'an unhandled rejection');
}

const one = { minLength: 1, maxLength: 1 };

test('definePolicy().fetch() resends only what is safe, never early, never past attempts, and ends typed', async () => {
  await property(sessionArb(fc.constant('policy' as const), one, fc.constant(5)));
});

test('a createFetch() chain of retry, idempotencyKey, circuitBreaker, timeout, captureStatus and throwOnStatus in any order keeps the same promises', async () => {
  await property(sessionArb(piecesArb, one, fc.constant(5)));
});

test('one policy’s client under another’s keeps them across both: the outer retry resends only what it can see is safe', async () => {
  await property(
    sessionArb(fc.constant('nested' as const), { minLength: 1, maxLength: 2 }, fc.constantFrom(3, 5)),
    SESSION_RUNS,
  );
});

test('calls at once through one policy keep those promises, and its breaker and pacing hold every caller', async () => {
  await property(
    sessionArb(fc.constant('policy' as const), { minLength: 2, maxLength: 4 }, fc.constantFrom(2, 3, 5)),
    SESSION_RUNS,
  );
});

test('calls at once through a hand-built chain in any order keep them too', async () => {
  await property(
    sessionArb(piecesArb, { minLength: 2, maxLength: 4 }, fc.constantFrom(2, 3, 5)),
    SESSION_RUNS,
  );
});

test('below the chain, Bun’s fetch resends a GET, HEAD, PUT or DELETE whose reused connection was reset after the server read it (Deno’s any method), whatever resend says; Node’s does not', async () => {
  const bun = process.versions.bun !== undefined;
  const deno = 'Deno' in globalThis;
  for (const method of ['GET', 'PUT', 'POST']) {
    await withServer(
      (_req, index) => (index === 1 ? { reset: 'after-read' } : { status: 200, body: 'ok' }),
      async (server) => {
        const fetch = definePolicy({ retry: { resend: 'never' } }).fetch();
        // A first call leaves a keep-alive connection for the second to reuse.
        assert.equal(await (await fetch(server.origin)).text(), 'ok');
        const outcome = await fetch(
          `${server.origin}/run`,
          method === 'GET' ? {} : { method, body: 'x' },
        ).then(
          async (res) => `${res.status} ${await res.text()}`,
          (error: unknown) => `${(error as Error).name} sent=${(error as NetworkError).sent}`,
        );
        const resent = deno || (bun && method !== 'POST');
        assert.equal(outcome, resent ? '200 ok' : 'NetworkError sent=maybe', `${method}: ${outcome}`);
        assert.equal(server.requests.length, resent ? 3 : 2, `${method}: requests`);
      },
    );
  }
});
