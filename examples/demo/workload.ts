/**
 * @module
 * The workload every client runs: the same calls, at the same times. Calls are spread
 * evenly over the storm (an agent fleet's steady stream of tool calls), a seeded mix of
 * reads (`GET /items/:id`) and orders (`POST /orders`, each with its own order id so the
 * server can count executions per order), and at most `concurrency` are in flight: a
 * call whose time has come waits for a free slot, as it would behind a connection pool.
 */

import type { FetchLike } from 'breakwater';
import { CALL_HEADER, mulberry32 } from './storm.ts';

/** Share of calls that place an order (the non-idempotent operation). */
const ORDER_SHARE = 0.3;
/** Distinct items the reads ask for. */
const ITEM_COUNT = 1000;

/** One logical call of the workload. */
export interface PlannedCall {
  index: number;
  method: 'GET' | 'POST';
  path: string;
  /** JSON body for orders. */
  body?: string;
  /** When the caller wants to start it, in ms since the run began. */
  atMs: number;
}

/** How one call ended, measured by the caller. */
export interface CallResult {
  ok: boolean;
  /** From the call's planned start (waiting for a free slot included) to its end, in ms. */
  latencyMs: number;
  /** The final status, or the error's code / name when the call threw. */
  outcome: string;
}

/** Live counts while a workload runs. */
export interface Progress {
  done: number;
  ok: number;
  failed: number;
  total: number;
}

/** The calls for a seed: the same seed, count and length give the same list. */
export function planWorkload(seed: number, calls: number, spanMs: number): PlannedCall[] {
  const random = mulberry32(seed ^ 0xca11);
  const plan: PlannedCall[] = [];
  for (let index = 0; index < calls; index++) {
    const atMs = Math.floor((index * spanMs) / calls);
    if (random() < ORDER_SHARE) {
      const body = JSON.stringify({ orderId: `order-${index}`, item: Math.floor(random() * ITEM_COUNT) });
      plan.push({ index, method: 'POST', path: '/orders', body, atMs });
    } else {
      plan.push({ index, method: 'GET', path: `/items/${Math.floor(random() * ITEM_COUNT)}`, atMs });
    }
  }
  return plan;
}

function sleep(ms: number): Promise<void> {
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : Promise.resolve();
}

/** A short name for what a call threw: breakwater's `code`, a cause's code, or the error's name. */
export function errorName(error: unknown): string {
  const e = error as { code?: unknown; cause?: { code?: unknown }; name?: unknown } | null;
  if (typeof e?.code === 'string') return e.code;
  if (typeof e?.cause?.code === 'string') return e.cause.code;
  return typeof e?.name === 'string' ? e.name : 'error';
}

/**
 * Runs `plan` through `fetch` against `origin` with `concurrency` slots; `startedAt` is
 * the run's epoch ms (planned times are relative to it). Every response body is read
 * to the end, so a call's latency covers the whole answer.
 */
export async function runWorkload(
  fetch: FetchLike,
  origin: string,
  plan: readonly PlannedCall[],
  concurrency: number,
  startedAt: number,
  onProgress?: (progress: Progress) => void,
): Promise<CallResult[]> {
  const results: CallResult[] = new Array(plan.length);
  const progress: Progress = { done: 0, ok: 0, failed: 0, total: plan.length };
  let next = 0;

  async function one(call: PlannedCall): Promise<CallResult> {
    const plannedAt = startedAt + call.atMs;
    try {
      // Every attempt names its call, so the server gives it the same draws in every run.
      const headers: Record<string, string> = { [CALL_HEADER]: String(call.index) };
      const init: RequestInit =
        call.body === undefined
          ? { method: call.method, headers }
          : {
              method: call.method,
              body: call.body,
              headers: { ...headers, 'content-type': 'application/json' },
            };
      const response = await fetch(`${origin}${call.path}`, init);
      await response.arrayBuffer();
      return { ok: response.ok, latencyMs: Date.now() - plannedAt, outcome: String(response.status) };
    } catch (error) {
      return { ok: false, latencyMs: Date.now() - plannedAt, outcome: errorName(error) };
    }
  }

  async function worker(): Promise<void> {
    for (;;) {
      const call = plan[next++];
      if (call === undefined) return;
      await sleep(startedAt + call.atMs - Date.now());
      const result = await one(call);
      results[call.index] = result;
      progress.done++;
      if (result.ok) progress.ok++;
      else progress.failed++;
      onProgress?.(progress);
    }
  }

  await Promise.all(Array.from({ length: Math.min(concurrency, plan.length) }, worker));
  return results;
}
