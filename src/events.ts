/**
 * @module
 * Typed events: what breakwater tells an `onEvent` listener. Every event names the
 * server (`key`) and carries only redacted data, so a listener can log it as is.
 */

import type { StatusSnapshot } from './capture.ts';

/** A request is about to go to the real fetch (once per attempt). */
export interface AttemptEvent {
  type: 'attempt';
  key: string;
  method: string;
  /** Redacted URL: no userinfo, no query values. */
  url: string;
  /** 1-based. */
  attempt: number;
}

/** `captureStatus()` recorded a failure response. */
export interface CapturedEvent {
  type: 'captured';
  key: string;
  snapshot: StatusSnapshot;
}

/** `retry()` will send the call again after `delayMs`. */
export interface RetryEvent {
  type: 'retry';
  key: string;
  /** The attempt that failed (1-based); the next one is `attempt + 1`. */
  attempt: number;
  delayMs: number;
  /** Whether the delay is the server's (`Retry-After` and friends) or a backoff step. */
  delaySource: 'server' | 'backoff';
  /** What failed: `HTTP 503`, or a network / timeout code such as `ECONNRESET`. */
  reason: string;
}

/** Why `retry()` stopped trying. */
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
  type: 'give-up';
  key: string;
  attempt: number;
  why: GiveUpReason;
  reason: string;
}

/** A server's circuit changed state. */
export interface BreakerEvent {
  type: 'breaker';
  key: string;
  state: 'open' | 'half-open' | 'closed';
  /** For `open`: when the next probe may go. */
  retryAt?: Date;
  /** What made it change: `5 consecutive failures (last: HTTP 503)`, `probe succeeded`, ... */
  reason: string;
}

/** A key is paused because its server asked for a wait (429/503 with a delay). */
export interface PacedEvent {
  type: 'paced';
  key: string;
  /** When calls to this key may go again. */
  until: Date;
  /** `'start'` when a response paused the key, `'wait'` when a call waits out a pause. */
  phase: 'start' | 'wait';
  delayMs: number;
  /** Why the key is paused: `paced: the server asked to wait (HTTP 429 Too Many Requests)`, `paced: the server said its quota is used up (HTTP 200 OK)`. */
  reason: string;
}

/** A start gate armed, cleared or refused a run. */
export interface GateEvent {
  type: 'gate';
  key: string;
  state: 'armed' | 'cleared' | 'refused';
  retryAt?: Date;
}

/** `auth()` refreshed a token after a 401 (one refresh shared by concurrent callers). */
export interface AuthRefreshEvent {
  type: 'auth-refresh';
  key: string;
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
