/**
 * @module
 * A worker for test/network-workerd.test.ts: run on the real workerd, it fetches a target
 * on loopback and reports, as JSON, what workerd's own fetch threw and what breakwater
 * made of it there (`normalizeNetworkError`, and a `createFetch` chain with `retry()`).
 * The normaliser runs on workerd's real error object, not a copy built in another runtime.
 *
 * `POST /probe` takes a {@link Probe}; `GET /health` answers `ok` once the worker is up.
 */

import { createFetch, NetworkError, normalizeNetworkError, retry } from '../../src/index.ts';

/** What to fetch, and how. */
export interface Probe {
  /** The URL fetched (a loopback test server). */
  target: string;
  method: 'GET' | 'POST';
  /**
   * `'fetch'`: workerd's fetch alone, its error normalised as breakwater does;
   * `'chain'`: through `createFetch` with `retry()` (3 attempts, 1 ms apart).
   */
  through: 'fetch' | 'chain';
}

/** An error's observable fields, as JSON. */
export interface Described {
  name: string;
  message: string;
  /** Own `retryable`, as workerd sets it. */
  retryable?: unknown;
  networkError: boolean;
  code?: unknown;
  phase?: unknown;
  sent?: unknown;
}

/** What a probe saw. */
export interface ProbeResult {
  /** Where it failed: awaiting fetch() (`'headers'`), reading the body (`'body'`), or nowhere. */
  stage: 'headers' | 'body' | 'none';
  status?: number;
  /** What was thrown. */
  thrown?: Described;
  /** `normalizeNetworkError(thrown, undefined, stage)`, for `through: 'fetch'`. */
  normalized?: Described | null;
  /** Attempts the chain's `retry()` made (its `attempt` events), for `through: 'chain'`. */
  attempts?: number;
}

function describe(error: unknown): Described {
  const fields = error as Record<string, unknown>;
  return {
    name: error instanceof Error ? error.name : typeof error,
    message: error instanceof Error ? error.message : String(error),
    retryable: fields.retryable,
    networkError: error instanceof NetworkError,
    code: fields.code,
    phase: fields.phase,
    sent: fields.sent,
  };
}

async function probe({ target, method, through }: Probe): Promise<ProbeResult> {
  let attempts = 0;
  const send =
    through === 'fetch'
      ? fetch
      : createFetch({
          use: [retry({ attempts: 3, backoff: { initialMs: 1, maxMs: 1, jitter: 'none' }, budget: false })],
          onEvent: (event) => {
            if (event.type === 'attempt') attempts++;
          },
        });
  const counted = (result: ProbeResult): ProbeResult =>
    through === 'chain' ? { ...result, attempts } : result;
  const failed = (stage: 'headers' | 'body', error: unknown, status?: number): ProbeResult => {
    const normalized = normalizeNetworkError(error, undefined, stage);
    return counted({
      stage,
      ...(status === undefined ? {} : { status }),
      thrown: describe(error),
      ...(through === 'fetch' ? { normalized: normalized ? describe(normalized) : null } : {}),
    });
  };
  let response: Response;
  try {
    response = await send(target, { method, ...(method === 'POST' ? { body: 'order' } : {}) });
  } catch (error) {
    return failed('headers', error);
  }
  try {
    await response.arrayBuffer();
  } catch (error) {
    return failed('body', error, response.status);
  }
  return counted({ stage: 'none', status: response.status });
}

export default {
  async fetch(request: Request): Promise<Response> {
    const { pathname } = new URL(request.url);
    if (pathname === '/health') return new Response('ok');
    if (pathname === '/probe' && request.method === 'POST') {
      return Response.json(await probe((await request.json()) as Probe));
    }
    return new Response('not found', { status: 404 });
  },
};
