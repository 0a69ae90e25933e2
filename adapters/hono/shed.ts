/**
 * @module
 * `shed()`: load shedding by concurrency. At most `maxInFlight` handlers run at once;
 * up to `maxQueue` more requests wait their turn in arrival order; anything past that
 * is refused at once with a 503 that says when to come back (`Retry-After`) and that
 * resending is safe (`x-should-retry: true`): the handler never ran, so even a POST
 * can be sent again. Refusing early keeps latency bounded for the requests that are
 * admitted, instead of letting every request slow down together. With
 * `holdUntilBodyEnds`, a streamed answer (an MCP tool call answered over SSE) keeps its
 * slot until its body has been sent.
 */

import type { Context, MiddlewareHandler } from 'hono';
import * as z from 'zod/mini';
import { functionOption, validate } from '../../src/options.ts';
import { MAX_DELAY_MS } from '../../src/timing.ts';
import { answer, CLIENT_CLOSED_STATUS, exposeClientHeaders, problemResponse } from './problem.ts';
import { watchResponse } from './response-watch.ts';

/** Requests that may wait for a slot by default: none (refuse at once when full). */
const DEFAULT_MAX_QUEUE = 0;
/** The wait a refused client is asked for by default (1 s): a moment for in-flight work to drain. */
const DEFAULT_RETRY_AFTER_MS = 1000;

/** Options for {@link shed}. */
export interface ShedOptions {
  /**
   * Handlers that may run at once (an integer ≥ 1). Required. A slot is held from
   * the moment the request is admitted until its handler returns or throws (not
   * while a streamed body is still being sent, unless `holdUntilBodyEnds` says so).
   */
  maxInFlight: number;
  /**
   * Which requests keep their slot until the response body has been sent, not just
   * until the handler returns: `true` for all, or `(c) => boolean`, asked once the
   * handler has returned (so it can read `c.res` as well as `c.req`). The slot then
   * comes back, exactly once, when the body ends, when the client cancels it or goes
   * away, or when it errors, or when a middleware in front drops the answer for another
   * (hono/trailing-slash's redirect, a `c.res = …` after `next()`, app.onError's answer
   * to a throw after `next()`), whose body is then cancelled; at once for an answer with
   * no body, for a HEAD (whose body Hono drops unread), for one whose body is already
   * being read, and for one `app.onError` gave (a `timeout()` in front may have sent it
   * while the handler ran). The body is passed through chunk by chunk as the server
   * reads it, never buffered.
   *
   * Some drops no middleware can hear: a throw after `next()` of something that is not
   * an `Error`, or from `app.onError` itself (Hono hands it to the server without
   * setting `c.res`); a middleware in front that starts reading the body (a read, a
   * `clone()`, a pipe) and drops it unfinished; one that answers while the handler still
   * runs, without throwing. For those the server's word is the backstop: once it has
   * finished the exchange (sent whatever it sent whole, or lost the connection), a slot
   * still held comes back and a body nobody reads is cancelled. @hono/node-server (on
   * Node, Deno and Bun) tells it by `c.env.outgoing`'s `close`, Deno's serve() by the
   * request's signal (or, once Deno drops that, `c.env.completed`). Bun's serve(),
   * workerd and `app.request()` tell no such thing, so there those drops keep the slot
   * for good: run such middleware behind `shed()`, or serve through @hono/node-server.
   *
   * Default `false`: a streaming handler (SSE, a model's token stream, an MCP
   * Streamable HTTP POST answered `text/event-stream`) returns its Response at once,
   * so by default `shed()` limits how many streams start, not how many are open.
   * Holding every stream instead would let long-lived ones that mostly idle (the MCP
   * GET notification stream, open for a whole session) take every slot and refuse all
   * work, so say which to hold: `(c) => c.req.method === 'POST'` holds MCP tool calls
   * but not the GET stream.
   */
  holdUntilBodyEnds?: boolean | ((c: Context) => boolean) | undefined;
  /**
   * Requests that may wait for a slot, first come first served (an integer ≥ 0).
   * Default 0: refuse at once when every slot is taken. A queued request whose
   * client disconnects leaves the queue.
   */
  maxQueue?: number | undefined;
  /**
   * The wait a refused client is asked for, in ms (`Retry-After`, sent in whole
   * seconds, rounded up). Default 1000.
   */
  retryAfterMs?: number | undefined;
  /**
   * The longest a request waits in the queue, in ms; then it is refused with a 503
   * like an overflow. Default: no limit (it waits until a slot frees or its client
   * goes away).
   */
  queueTimeoutMs?: number | undefined;
}

/** What every answer given before the handler ran says: resending is safe. */
const NOT_RUN = { 'x-should-retry': 'true' };

const wholeSchema = z.number().check(z.int('must be a whole number'));
const msSchema = wholeSchema.check(z.maximum(MAX_DELAY_MS));

const optionsSchema = z.strictObject({
  maxInFlight: wholeSchema.check(z.minimum(1)),
  holdUntilBodyEnds: z.optional(z.union([z.boolean(), functionOption<(c: Context) => boolean>()])),
  maxQueue: z.optional(wholeSchema.check(z.minimum(0))),
  retryAfterMs: z.optional(msSchema.check(z.minimum(0))),
  queueTimeoutMs: z.optional(msSchema.check(z.minimum(1))),
});

/**
 * `res`'s body, or undefined when it cannot be had: @hono/node-server's Response throws
 * for a body its server has already read.
 */
function bodyOf(res: Response | undefined): ReadableStream<Uint8Array> | null | undefined {
  try {
    return res?.body;
  } catch {
    return undefined;
  }
}

/**
 * What shed() uses of the server's `c.env`: @hono/node-server's (on Node, and on Deno's
 * and Bun's node:http alike) hands node:http's ServerResponse as `outgoing`, Deno's serve()
 * its handler info, with `completed`.
 */
interface ServerEnv {
  outgoing?: { writableEnded?: boolean; once?: (event: 'close', listener: () => void) => unknown };
  completed?: unknown;
}

/**
 * Calls `over` once the server has finished this request's exchange (sent an answer
 * whole, or lost the connection), where the server tells: @hono/node-server's
 * `c.env.outgoing` emits 'close', Deno's serve()'s `c.env.completed` settles (Deno is
 * dropping its abort of the request's signal after a whole answer). An answer shed()
 * holds a slot on has ended by then if it was the one sent, so a slot still held is
 * one no server will read for: its answer was dropped by something shed() cannot hear
 * (a throw of a non-Error after `next()`, `app.onError` throwing, a middleware in front
 * that answered while the handler ran). False when the exchange is already over;
 * elsewhere (Bun's serve(), workerd, `app.request()`) nothing is heard.
 */
function onExchangeEnd(c: Context, over: () => void): boolean {
  const { outgoing, completed } = (c.env ?? {}) as ServerEnv;
  if (outgoing?.once) {
    if (outgoing.writableEnded) return false;
    outgoing.once('close', over);
  } else if (completed instanceof Promise) completed.then(over, over);
  return true;
}

/** How a wait in the queue ended. */
type QueueOutcome = 'admitted' | 'timeout' | 'gone';

/**
 * Load shedding: at most `maxInFlight` handlers at once, `maxQueue` more waiting in
 * FIFO order, and a 503 problem+json with `Retry-After` and `x-should-retry: true`
 * for the rest. A slot is released when the handler returns or throws (with
 * `holdUntilBodyEnds`, when the response body ends); a freed slot goes straight to
 * the oldest waiter, so a newcomer cannot overtake the queue.
 *
 * @example
 * ```ts
 * import { Hono } from 'hono';
 * import { shed } from 'breakwater/hono';
 *
 * const app = new Hono();
 * // 8 model calls at once, 16 more may wait up to 5 s, the rest come back in 2 s.
 * app.use('/v1/chat/*', shed({ maxInFlight: 8, maxQueue: 16, queueTimeoutMs: 5000, retryAfterMs: 2000 }));
 * // 4 MCP tool calls at once, each until its SSE answer ends; the GET notification stream is not held.
 * app.use('/mcp', shed({ maxInFlight: 4, holdUntilBodyEnds: (c) => c.req.method === 'POST' }));
 * ```
 */
export function shed(options: ShedOptions): MiddlewareHandler {
  const valid = validate(optionsSchema, options, 'shed()');
  const { maxInFlight, queueTimeoutMs } = valid;
  const maxQueue = valid.maxQueue ?? DEFAULT_MAX_QUEUE;
  const retryAfterMs = valid.retryAfterMs ?? DEFAULT_RETRY_AFTER_MS;
  const { holdUntilBodyEnds } = valid;
  /** Whether a request keeps its slot until its body ends; undefined: none does (the default). */
  const holds = holdUntilBodyEnds === true ? () => true : holdUntilBodyEnds || undefined;

  let inFlight = 0;
  /**
   * Waiters in arrival order. A `Set` keeps insertion order, gives the oldest in
   * O(1) and lets a waiter whose client left step out in O(1).
   */
  const queue = new Set<() => void>();

  /** Frees a slot: hands it to the oldest waiter (the count stays), or gives it back. */
  function release(): void {
    const oldest = queue.values().next();
    if (oldest.done === true) {
      inFlight--;
      return;
    }
    queue.delete(oldest.value);
    oldest.value();
  }

  function wait(signal: AbortSignal): Promise<QueueOutcome> {
    return new Promise((resolve) => {
      if (signal.aborted) {
        resolve('gone');
        return;
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      const settle = (outcome: QueueOutcome): void => {
        queue.delete(admit);
        signal.removeEventListener('abort', leave);
        if (timer !== undefined) clearTimeout(timer);
        resolve(outcome);
      };
      const admit = (): void => settle('admitted');
      const leave = (): void => settle('gone');
      queue.add(admit);
      signal.addEventListener('abort', leave, { once: true });
      if (queueTimeoutMs !== undefined) timer = setTimeout(() => settle('timeout'), queueTimeoutMs);
    });
  }

  /**
   * Hands the slot to `c.res`'s body when `holds(c)` says so: the body is replaced by a
   * pass-through that releases it once, when the body ends, errors or is cancelled, or
   * when the request's signal aborts (the client went away: Bun's own server before
   * 1.2 never cancelled a streamed body then, as hono's streamSSE() notes), when a
   * middleware in front drops the answer for another, or when the server says the
   * exchange is over (see {@link onExchangeEnd}). It pulls a chunk only when the
   * server asks for one (highWaterMark 0), so the server's backpressure reaches the
   * handler's stream as before. False: the caller releases.
   */
  function holdBody(c: Context, holds: (c: Context) => boolean): boolean {
    // HEAD: Hono answers it with the GET handler's Response minus its body, which it
    // drops unread and uncancelled, so a held slot would never come back. holds(c) comes
    // before reading c.res.body: that read turns @hono/node-server's light Response into
    // a full one, a cost a predicate on c.res's content type spares a JSON answer.
    if (c.req.method === 'HEAD' || !holds(c)) return false;
    const res = c.res;
    const body = bodyOf(res);
    const signal = c.req.raw.signal;
    // A body already read, or being read, is its reader's to end.
    if (!body || body.locked || res.bodyUsed || signal.aborted) return false;
    // The exchange is over and the slot still held: the server sent another answer, so
    // this one is cancelled if nobody reads it. Already over: a middleware in front
    // answered while the handler ran, and that was sent.
    if (
      !onExchangeEnd(c, () => {
        if (holding && !passThrough.locked) passThrough.cancel().catch(() => {});
        end();
      })
    )
      return false;
    const reader = body.getReader();
    let holding = true;
    let unwatch = (): void => {};
    const end = (): void => {
      if (!holding) return;
      holding = false;
      signal.removeEventListener('abort', end);
      unwatch();
      release();
    };
    signal.addEventListener('abort', end, { once: true });
    const passThrough = new ReadableStream<Uint8Array>(
      {
        async pull(controller) {
          try {
            const chunk = await reader.read();
            if (chunk.done) {
              end();
              controller.close();
            } else controller.enqueue(chunk.value);
          } catch (error) {
            end();
            controller.error(error);
          }
        },
        cancel(reason) {
          end();
          return reader.cancel(reason);
        },
      },
      { highWaterMark: 0 },
    );
    c.res = new Response(passThrough, res);
    // A middleware in front may still drop this answer for another once shed() returned:
    // hono/trailing-slash's redirect, a `c.res = …` after next(), app.onError's answer to
    // a throw after next(). The body would then never be read nor cancelled, and
    // @hono/node-server aborts the request's signal only for an answer cut short, so the
    // slot would never come back: it is cancelled. Not when the new answer sends it on
    // (`new Response(c.res.body, c.res)`, also after a `c.res = undefined`, which
    // watchResponse() never passes on) or it is being read (compress()'s pipeThrough(),
    // a clone()): its reader ends or cancels it.
    unwatch = watchResponse(c, (next) => {
      if (!passThrough.locked && bodyOf(next) !== passThrough) passThrough.cancel().catch(() => {});
    });
    return true;
  }

  function refuse(c: Context, detail: string): Response {
    return answer(
      c,
      problemResponse({ status: 503, title: 'Service Unavailable', detail }, retryAfterMs, NOT_RUN),
    );
  }

  return async function shed(c, next) {
    exposeClientHeaders(c);
    if (inFlight < maxInFlight) {
      inFlight++;
    } else if (queue.size < maxQueue) {
      // The slot is handed over by release(), already counted.
      const outcome = await wait(c.req.raw.signal);
      if (outcome === 'timeout') {
        return refuse(c, `no capacity freed up within ${queueTimeoutMs} ms; not processed`);
      }
      if (outcome === 'gone') {
        return answer(
          c,
          problemResponse(
            {
              status: CLIENT_CLOSED_STATUS,
              title: 'Client Closed Request',
              detail: 'the client went away while queued; not processed',
            },
            undefined,
            // Never ran: an idempotency record in front must not keep this answer for the key.
            NOT_RUN,
          ),
        );
      }
    } else {
      return refuse(c, `at capacity (${maxInFlight} requests in flight); not processed`);
    }
    let held = false;
    const error = c.error;
    try {
      await next();
      // An answer app.onError gave while the handler ran is not held: it may be one given
      // in its stead by a middleware in front that stopped waiting (hono/timeout's 504),
      // which the server sent long ago, so a body held in its place would never be read.
      held = holds !== undefined && c.error === error && holdBody(c, holds);
    } finally {
      if (!held) release();
    }
  };
}
