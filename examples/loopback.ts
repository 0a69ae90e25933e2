/**
 * @module
 * What the examples share: a Hono app served on 127.0.0.1 (port 0, so runs never clash),
 * and the wire every client sends through, which stamps the moment each request leaves.
 * The servers judge Retry-After windows by that stamp (each example names its header),
 * so a request counts from when it was sent, not from when a busy server read it.
 */

import { type ServerType, serve } from '@hono/node-server';
import type { FetchLike } from 'breakwater';

/** A server on loopback: its origin, port, and `close()` (once; every open connection too). */
export interface Loopback {
  origin: string;
  port: number;
  close(): Promise<void>;
}

/** Serves `app` on 127.0.0.1, port 0. */
export async function listen(app: {
  fetch: (request: Request) => Response | Promise<Response>;
}): Promise<Loopback> {
  let server: ServerType | undefined;
  const port = await new Promise<number>((resolve) => {
    server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
  });
  let closing: Promise<void> | undefined;
  return {
    origin: `http://127.0.0.1:${port}`,
    port,
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

/**
 * The runtime's fetch, with the epoch ms each request is handed to it stamped in
 * `header`: below every retry loop and middleware, so each attempt gets its own stamp.
 */
export function stampedFetch(header: string): FetchLike {
  return function stamped(input, init) {
    const given = init?.headers ?? (input instanceof Request ? input.headers : undefined);
    const headers = new Headers(given);
    headers.set(header, String(Date.now()));
    return fetch(input, { ...init, headers });
  };
}
