/**
 * @module
 * Counts, at the server, the requests sent inside a `Retry-After` window the server had
 * announced to any caller: the measure a user of a shared key cares about (did the
 * client wait as long as the server asked?), taken as `examples/demo/` takes it.
 */

import type { Context, MiddlewareHandler } from 'hono';
import type { FetchLike } from '../../src/call.ts';
import { retryDelay } from '../../src/timing.ts';

/** The header {@link AnnouncedWindows.stamp} writes: the epoch ms the request left for the wire. */
const SENT_AT = 'x-test-sent-at';
/**
 * A request sent this soon after the server announced a window is not counted as inside
 * it: the answer was on its way, not yet read, and no client could have held the request
 * back (loopback takes well under a millisecond; 100 ms is generous on purpose). A
 * resend of the very call that got the answer has no grace: it followed that answer.
 */
const GRACE_MS = 100;

/** One request as the server saw it. */
export interface SeenRequest {
  /** The call it belongs to (the same on every attempt), by the test's `idOf`. */
  id: string;
  /** When the client handed it to fetch, epoch ms (the stamp; else the arrival). */
  sentAt: number;
  /** The status the server answered. */
  status?: number;
}

/** A window the server announced: the request its answer named a delay to, when it left, when it ends (epoch ms). */
export interface AnnouncedWindow {
  to: SeenRequest;
  at: number;
  until: number;
}

/** What {@link announcedWindows} returns. */
export interface AnnouncedWindows {
  /** Put first in the app: records each request, and each answer that names a delay (429, 5xx). */
  middleware: MiddlewareHandler;
  /** Wraps the fetch at the end of the client's chain: stamps when each request leaves. */
  stamp(fetch?: FetchLike): FetchLike;
  /** Every request, in arrival order. */
  requests: SeenRequest[];
  /** Windows announced so far: the request answered, when the answer left, and when the delay it named ends (epoch ms). */
  windows: AnnouncedWindow[];
  /** The requests sent inside a window announced before them. */
  inside(): SeenRequest[];
}

/**
 * A ledger of requests and of the `Retry-After` windows the server announced.
 *
 * @param idOf - The call a request belongs to (a query parameter, a body field).
 */
export function announcedWindows(idOf: (c: Context) => string | Promise<string>): AnnouncedWindows {
  const requests: SeenRequest[] = [];
  const windows: AnnouncedWindow[] = [];
  return {
    requests,
    windows,
    middleware: async function ledger(c, next) {
      const stamped = Number(c.req.header(SENT_AT));
      const seen: SeenRequest = {
        id: await idOf(c),
        sentAt: Number.isSafeInteger(stamped) && stamped <= Date.now() ? stamped : Date.now(),
      };
      requests.push(seen);
      await next();
      seen.status = c.res.status;
      const delayMs = c.res.status >= 429 ? retryDelay(c.res.headers) : undefined;
      if (delayMs !== undefined) {
        const at = Date.now();
        windows.push({ to: seen, at, until: at + delayMs });
      }
    },
    stamp(fetch = globalThis.fetch) {
      return function stamped(input, init) {
        const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
        headers.set(SENT_AT, String(Date.now()));
        return fetch(input, { ...init, headers });
      };
    },
    inside: () =>
      requests.filter((r) =>
        windows.some(
          (w) =>
            (w.at + GRACE_MS <= r.sentAt || (w.to.id === r.id && w.to !== r && w.at <= r.sentAt)) &&
            r.sentAt < w.until,
        ),
      ),
  };
}
