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

/** Every event breakwater emits, told apart by `type`. */
export type BreakwaterEvent = AttemptEvent | CapturedEvent;
