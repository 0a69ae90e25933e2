/**
 * @module
 * Typed events: what breakwater tells an `onEvent` listener. Every event names the
 * server (`key`) and carries only redacted data, so a listener can log it as is.
 */

import type { StatusSnapshot } from './capture.ts';

/** A request is about to go to the real fetch (once per attempt). */
export interface AttemptEvent {
  /** Which event this is: what a {@link BreakwaterEvent} is told apart by. */
  type: 'attempt';
  /** The server's name in breakwater (`call.key`: the policy's `name`, or by default the URL's origin). */
  key: string;
  /** The HTTP method, upper-case. */
  method: string;
  /** Redacted URL: no userinfo, no query values. */
  url: string;
  /**
   * 1-based: 1 for the first send, then one more per pass of `retry()` (or `auth()`'s
   * resend after a refresh). A pass an open circuit or armed gate below refused unsent
   * (a `retry` event with `delaySource: 'breaker'`) takes a number too (every pass needs a
   * new one), so the next send's skips it: 1, 2, 4.
   */
  attempt: number;
}

/** `captureStatus()` recorded a failure response. */
export interface CapturedEvent {
  /** Which event this is: what a {@link BreakwaterEvent} is told apart by. */
  type: 'captured';
  /** The server's name in breakwater (`call.key`: the policy's `name`, or by default the URL's origin). */
  key: string;
  /** What the server said (status, wait, body start, message, safe headers), redacted and frozen. */
  snapshot: StatusSnapshot;
}

/**
 * `retry()` will send the call again after `delayMs`. `stats().retries` counts the resends
 * that reached the server: a pass a breaker or gate below refused unsent is none, and the
 * wait after it is a `'breaker'` event, which announces that refused send again.
 */
export interface RetryEvent {
  /** Which event this is: what a {@link BreakwaterEvent} is told apart by. */
  type: 'retry';
  /** The server's name in breakwater (`call.key`: the policy's `name`, or by default the URL's origin). */
  key: string;
  /**
   * The pass that failed (1-based, numbered as in {@link AttemptEvent}); the next one is
   * `attempt + 1`. For `'breaker'`, the pass refused unsent: no `attempt` event has its
   * number, and it used none of `retry()`'s `attempts`.
   */
  attempt: number;
  /**
   * How long retry waits before the next attempt, in ms (0: at once); the wait ends at once
   * on abort. For `'server'`, what is left of the server's wait, counted from when its answer's
   * headers arrived: a capture that read the body's start since took that off (the wait asked
   * is the captured snapshot's or the error's `retryAfterMs`).
   */
  delayMs: number;
  /**
   * Where the wait comes from: `'server'` (`Retry-After` and friends), `'backoff'` (a
   * backoff step), or `'breaker'`: an open circuit or armed gate below refused this resend
   * unsent (`CircuitOpenError`, `GateClosedError`), and retry waits until its `retryAt`, at
   * least a backoff step. Such a pass reached no server: no attempt of `attempts`, no
   * budget token, not in `stats().retries`.
   */
  delaySource: 'server' | 'backoff' | 'breaker';
  /** What failed: `HTTP 503`, or a network / timeout code such as `ECONNRESET`. */
  reason: string;
}

/**
 * Why `retry()` stopped trying: `'attempts'` (all `attempts` used, or as many passes
 * refused unsent by a breaker or gate below), `'not-retryable'`
 * (a status or error retry does not resend), `'unsafe-to-resend'` (it may have run and
 * the call is not idempotent), `'body-not-replayable'` (a stream body that was not
 * buffered), `'budget'` (the key's retry budget is below half), `'deadline'` (the wait
 * would pass the call's deadline, or the total deadline passed), `'retry-after-too-long'`
 * (the server asked for a wait past `maxRetryAfterMs` or the deadline; or a breaker or
 * gate below refused a resend until a `retryAt` past them: the call fails with that
 * `CircuitOpenError` / `GateClosedError`, not a `RetryAfterTooLongError`).
 */
export type GiveUpReason =
  | 'attempts'
  | 'not-retryable'
  | 'unsafe-to-resend'
  | 'body-not-replayable'
  | 'budget'
  | 'deadline'
  | 'retry-after-too-long';

/** `retry()` stopped with a failure: the last outcome goes back to the caller. */
export interface GiveUpEvent {
  /** Which event this is: what a {@link BreakwaterEvent} is told apart by. */
  type: 'give-up';
  /** The server's name in breakwater (`call.key`: the policy's `name`, or by default the URL's origin). */
  key: string;
  /**
   * The last pass (1-based, numbered as in {@link AttemptEvent}): its failure goes back to
   * the caller. When that failure is a refusal (`reason` `CIRCUIT_OPEN` or `GATE_CLOSED`),
   * the pass refused unsent: no `attempt` event has its number.
   */
  attempt: number;
  /** Why it was not resent (see {@link GiveUpReason}). */
  why: GiveUpReason;
  /** What failed last, as in {@link RetryEvent.reason}: `HTTP 503`, `ECONNRESET`, ... */
  reason: string;
}

/** A server's circuit changed state. */
export interface BreakerEvent {
  /** Which event this is: what a {@link BreakwaterEvent} is told apart by. */
  type: 'breaker';
  /** The server's name in breakwater (`call.key`: the policy's `name`, or by default the URL's origin). */
  key: string;
  /**
   * The new state: `'open'` (calls fail fast with `CircuitOpenError`), `'half-open'` (one
   * probe call is let through), `'closed'` (a probe succeeded: calls flow again).
   */
  state: 'open' | 'half-open' | 'closed';
  /** For `open`: when the next probe may go. */
  retryAt?: Date;
  /**
   * What made it change. For `'open'`: `5 consecutive failures`, `12 of the last 20 calls
   * failed` or `a failed probe`, each with the last failure (`(last: HTTP 503 Service
   * Unavailable)`); for `'half-open'`: `open time passed; letting one probe through` (or
   * the probe did not settle within its lease); for `'closed'`: `probe succeeded`.
   */
  reason: string;
}

/** A key is paused because its server asked for a wait (429/503 with a delay). */
export interface PacedEvent {
  /** Which event this is: what a {@link BreakwaterEvent} is told apart by. */
  type: 'paced';
  /** The server's name in breakwater (`call.key`: the policy's `name`, or by default the URL's origin). */
  key: string;
  /** When calls to this key may go again. */
  until: Date;
  /** `'start'` when a response paused the key, `'wait'` when a call waits out a pause. */
  phase: 'start' | 'wait';
  /** In ms: for `'start'`, how long the key is paused; for `'wait'`, how long this call waits. */
  delayMs: number;
  /** Why the key is paused: `paced: the server asked to wait (HTTP 429 Too Many Requests)`, `paced: the server said its quota is used up (HTTP 200 OK)`. */
  reason: string;
}

/** A start gate armed, cleared or refused a run. */
export interface GateEvent {
  /** Which event this is: what a {@link BreakwaterEvent} is told apart by. */
  type: 'gate';
  /** The gate's name (`createGate({ key })`; default `'gate'`). */
  key: string;
  /**
   * What happened: `'armed'` (a retryable failure opened a window), `'cleared'` (a run
   * succeeded or `reset()` ended the window), `'refused'` (a `run()` failed fast with
   * `GateClosedError` without calling `fn`).
   */
  state: 'armed' | 'cleared' | 'refused';
  /** For `'armed'`: when the window ends; for `'refused'`: when to come back (as the error's `retryAt`). Undefined for `'cleared'`. */
  retryAt?: Date;
}

/** `auth()` refreshed a token after a 401 (one refresh shared by concurrent callers). */
export interface AuthRefreshEvent {
  /** Which event this is: what a {@link BreakwaterEvent} is told apart by. */
  type: 'auth-refresh';
  /** The server's name in breakwater (`call.key`: the policy's `name`, or by default the URL's origin). */
  key: string;
  /**
   * `'refreshed'`: `refresh()` gave a token, which calls are now stamped with (a call
   * answered 401 is resent once); `'failed'`: it threw, or did not settle within
   * `refreshTimeoutMs`, or a later refresh's token was taken instead.
   */
  outcome: 'refreshed' | 'failed';
}

/** Every event breakwater emits, told apart by `type`. */
export type BreakwaterEvent =
  | AttemptEvent
  | CapturedEvent
  | RetryEvent
  | GiveUpEvent
  | BreakerEvent
  | PacedEvent
  | GateEvent
  | AuthRefreshEvent;
