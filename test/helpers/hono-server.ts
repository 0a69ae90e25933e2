/**
 * @module
 * Serves a Hono app (or any `fetch` handler) on 127.0.0.1, port 0, through
 * `@hono/node-server` (node:http underneath), which runs on Node, Deno and Bun alike,
 * and always closes it.
 */

import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { type ServerType, serve } from '@hono/node-server';
import { Hono } from 'hono';

/** Anything with a fetch handler: a Hono app, or `{ fetch }`. */
export interface FetchApp {
  fetch: (request: Request, ...rest: never[]) => Response | Promise<Response>;
}

/** A running app server. */
export interface AppServer {
  origin: string;
  close(): Promise<void>;
}

/** Starts `app` on 127.0.0.1:0. Prefer {@link withApp}. */
export async function startApp(app: FetchApp): Promise<AppServer> {
  let server: ServerType | undefined;
  const port = await new Promise<number>((resolve) => {
    server = serve(
      {
        fetch: app.fetch as (request: Request) => Response | Promise<Response>,
        port: 0,
        hostname: '127.0.0.1',
      },
      (info: AddressInfo) => resolve(info.port),
    );
  });
  let closing: Promise<void> | undefined;
  return {
    origin: `http://127.0.0.1:${port}`,
    close() {
      closing ??= new Promise<void>((resolve) => {
        const s = server as ServerType & { closeAllConnections?: () => void };
        s.close(() => resolve());
        s.closeAllConnections?.();
      });
      return closing;
    },
  };
}

/** Runs `fn` against `app` served on loopback, and always closes the server. */
export async function withApp<T>(app: FetchApp, fn: (server: AppServer) => Promise<T>): Promise<T> {
  const server = await startApp(app);
  try {
    return await fn(server);
  } finally {
    await server.close();
  }
}

/**
 * An upstream app whose handler hangs until its client goes away, reporting when
 * it saw the close; `received` resolves when a request arrived at `path`.
 */
export function hangingUpstream(path = '/'): {
  app: Hono;
  received: Promise<void>;
  closed: Promise<number>;
} {
  let onReceived: () => void = () => {};
  let onClosed: (at: number) => void = () => {};
  const received = new Promise<void>((resolve) => {
    onReceived = resolve;
  });
  const closed = new Promise<number>((resolve) => {
    onClosed = resolve;
  });
  const app = new Hono();
  app.get(path, async (c) => {
    onReceived();
    const signal = c.req.raw.signal;
    await new Promise<void>((resolve) => {
      signal.addEventListener('abort', () => resolve(), { once: true });
    });
    onClosed(Date.now());
    return c.text('too late');
  });
  return { app, received, closed };
}

/**
 * `inner`, with every POST whose body contains `marker` (a JSON-RPC method or tool name,
 * quoted) answered by `answer()` instead: one call of a real server made to misbehave.
 */
export function answeringPosts(inner: FetchApp, marker: string, answer: () => Response): FetchApp {
  return {
    async fetch(request: Request): Promise<Response> {
      const text = request.method === 'POST' ? await request.clone().text() : '';
      return text.includes(marker) ? answer() : inner.fetch(request);
    },
  };
}

/** Asserts the upstream saw its connection close within 500 ms of `abortedAt` (gives up after 1 s). */
export async function assertClosedSoon(closed: Promise<number>, abortedAt: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const closedAt = await Promise.race([
    closed,
    new Promise<number>((resolve) => {
      timer = setTimeout(() => resolve(Number.POSITIVE_INFINITY), 1000);
    }),
  ]);
  clearTimeout(timer);
  assert.ok(closedAt - abortedAt < 500, `the upstream saw the close after ${closedAt - abortedAt} ms`);
}
