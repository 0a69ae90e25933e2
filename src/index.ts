/**
 * @module
 * breakwater: composable `fetch` middleware that keeps AI-agent clients and their
 * servers steady when upstreams fail.
 *
 * @example
 * ```ts
 * import { captureStatus, createFetch, throwOnStatus } from 'breakwater';
 *
 * const capture = captureStatus();
 * const fetch = createFetch({ use: [throwOnStatus(), capture] });
 * const res = await fetch('https://api.example.com/v1/things');
 * ```
 */

export type { AuthOptions, TokenSource } from './auth.ts';
export { auth } from './auth.ts';
export type { BackoffOptions, BackoffSchedule, Jitter } from './backoff.ts';
export { backoff } from './backoff.ts';
export type {
  BreakerConfig,
  BreakerState,
  BreakerStats,
  CircuitBreaker,
  CircuitBreakerOptions,
} from './breaker.ts';
export { circuitBreaker } from './breaker.ts';
export type { FetchLike, KeyOption, Middleware, Next } from './call.ts';
export { Call } from './call.ts';
export type { CaptureScope, CaptureStatus, CaptureStatusOptions, StatusSnapshot } from './capture.ts';
export { captureStatus } from './capture.ts';
export type { CreateFetchOptions } from './chain.ts';
export { createFetch } from './chain.ts';
export type { Classification, ClassifyOptions, Outcome, OutcomeKind } from './classify.ts';
export { classify, DEFAULT_RETRYABLE_STATUSES, isRetryableStatus } from './classify.ts';
export type {
  BreakwaterErrorOptions,
  HttpStatusErrorInit,
  NetworkErrorInit,
  NetworkPhase,
  RequestSummary,
  SentState,
  TimeoutScope,
} from './errors.ts';
export {
  BreakwaterError,
  CircuitOpenError,
  GateClosedError,
  HttpStatusError,
  isAbort,
  NetworkError,
  RetryAfterTooLongError,
  TimeoutError,
} from './errors.ts';
export type {
  AttemptEvent,
  AuthRefreshEvent,
  BreakerEvent,
  BreakwaterEvent,
  CapturedEvent,
  GateEvent,
  GiveUpEvent,
  GiveUpReason,
  PacedEvent,
  RetryEvent,
} from './events.ts';
export type { Gate, GateOptions, GateState } from './gate.ts';
export { createGate } from './gate.ts';
export type { IdempotencyKeyOptions } from './idempotency-key.ts';
export { idempotencyKey } from './idempotency-key.ts';
export { normalizeNetworkError } from './network.ts';
export type {
  Policy,
  PolicyClientOptions,
  PolicyConfig,
  PolicyFetchOptions,
  PolicyJson,
  PolicyOptions,
  PolicyStats,
  ResolvedPolicyConfig,
} from './policy.ts';
export { definePolicy } from './policy.ts';
export { redactUrl, SECRET_HEADERS } from './redact.ts';
export type { ResendRule, Retry, RetryOptions, RetryStats } from './retry.ts';
export { retry } from './retry.ts';
export { throwOnStatus, wrapHttpError } from './status.ts';
export type { JsonValue, MemoryStore, MemoryStoreOptions, Store } from './store.ts';
export { memoryStore } from './store.ts';
export type { TimeoutOptions } from './timeout.ts';
export { timeout } from './timeout.ts';
export type { HeadersLike, RateLimitInfo, RateLimitPolicy, RateLimitStatus } from './timing.ts';
export { MAX_DELAY_MS, parseRateLimit, retryDelay, shouldRetryHeader } from './timing.ts';
