/**
 * A server that answers a redirect within its origin and goes away at once (a deploy, a
 * crash), so the hop's connection is refused at the request's own address and port; it
 * comes back on the same port only when asked, so a resend is sure to reach it and count.
 * Shared by test/redirect-server-gone.test.ts (the chain) and test/ky-redirect.test.ts
 * (ky's Request). Loopback only.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { NetworkError } from '../../src/errors.ts';

/** Loopback only. */
const HOST = '127.0.0.1';

/** A server that goes away after its first answer, and comes back when asked. */
export interface GoneServer {
  origin: string;
  /** `METHOD path body` of every request it got, in order (no body: `METHOD path`). */
  requests: string[];
  /** Listens again on the same port (once; later calls wait for the same). */
  back(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Answers its first request with `status` to `location` and `Connection: close`, then stops
 * listening in the same tick (the client, in this process, cannot connect before), so the
 * hop is refused. Any later request gets `200 "result"`. Nothing waits on a timer.
 */
export async function goneAfterRedirect(status: number, location: string): Promise<GoneServer> {
  const requests: string[] = [];
  const sockets = new Set<Socket>();
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      body += chunk;
    });
    req.on('end', () => {
      requests.push(`${req.method} ${req.url} ${body}`.trim());
      if (requests.length > 1) {
        res.end('"result"');
        return;
      }
      res.writeHead(status, { location, connection: 'close' });
      res.end();
      server.close();
    });
  };
  const listen = (port: number) =>
    new Promise<Server>((resolve, reject) => {
      const next = createServer(handler);
      next.on('connection', (socket: Socket) => {
        sockets.add(socket);
        socket.on('close', () => sockets.delete(socket));
      });
      next.once('error', reject);
      next.listen(port, HOST, () => resolve(next));
    });
  let server = await listen(0);
  const { port } = server.address() as AddressInfo;
  let coming: Promise<void> | undefined;
  return {
    origin: `http://${HOST}:${port}`,
    requests,
    back() {
      coming ??= listen(port).then((again) => {
        server = again;
      });
      return coming;
    },
    async close() {
      await coming?.catch(() => {});
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => (server.listening ? server.close(() => resolve()) : resolve()));
    },
  };
}

/** What a call settled with, as the fields a caller judges a resend on. */
export async function failure(
  call: Promise<unknown>,
): Promise<{ name: string; code?: string; sent?: string; phase?: string }> {
  try {
    const result = await call;
    return { name: `answered ${result instanceof Response ? result.status : JSON.stringify(result)}` };
  } catch (error) {
    if (!(error instanceof NetworkError)) return { name: String(error) };
    return { name: error.name, code: error.code, sent: error.sent, phase: error.phase };
  }
}

/** The hop's refusal, after the request ran: maybe sent. */
export const MAYBE_RAN = { name: 'NetworkError', code: 'ECONNREFUSED', sent: 'maybe', phase: 'send' };
