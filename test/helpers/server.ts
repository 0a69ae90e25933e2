/**
 * @module
 * A real HTTP server on 127.0.0.1 (port 0) for tests, built on `node:http` so the
 * same fixture runs under Node, Deno and Bun. Each request is answered by a
 * {@link Behaviour}: a normal response, or one of the ways real servers misbehave
 * (slow headers, a reset before or after the request is read, a close without a
 * response, a reset in the middle of the body, never answering).
 *
 * Always close it: `await using` is not on every runtime yet, so use
 * {@link withServer}, which closes the server (and every socket on it) in `finally`.
 */

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo, Socket } from 'node:net';

/** Loopback only: tests never talk to any other address. */
const HOST = '127.0.0.1';

/** A request as the server received it, body fully read. */
export interface ReceivedRequest {
  method: string;
  /** Path and query, as sent on the request line. */
  url: string;
  /** Lower-cased header names, as node:http reports them. */
  headers: Record<string, string | string[] | undefined>;
  body: Uint8Array;
  /** The body decoded as UTF-8, for convenience. */
  text: string;
}

/** How the server answers one request. */
export type Behaviour =
  | {
      /** Default 200. */
      status?: number;
      headers?: Record<string, string | string[]>;
      body?: string | Uint8Array;
      /** Wait this long before sending the response headers. */
      delayMs?: number;
    }
  /** Read the whole request, then reset the connection (no response). */
  | { reset: 'after-read' }
  /** Send the status line, headers and `body`, then reset before the body ends. */
  | { reset: 'mid-body'; status?: number; headers?: Record<string, string>; body: string }
  /** Send the status line, headers and `body`, then stall: the body never ends (until close). */
  | { stall: 'mid-body'; status?: number; headers?: Record<string, string>; body: string }
  /** Read the whole request, then close the connection cleanly with no response. */
  | { close: 'no-response' }
  /** Read the request and never answer (until the server is closed). */
  | { hang: true };

/** Decides the behaviour for the n-th request (0-based). */
export type Handler = (req: ReceivedRequest, index: number) => Behaviour | Promise<Behaviour>;

/** A running test server. */
export interface TestServer {
  /** `http://127.0.0.1:PORT` (no trailing slash). */
  origin: string;
  port: number;
  /** Every request received so far, in arrival order. */
  requests: ReceivedRequest[];
  /** Connections accepted so far (including ones reset before a request was read). */
  connections(): number;
  /** Closes the listener and destroys every open socket. Idempotent. */
  close(): Promise<void>;
}

/** Options for {@link startServer}. */
export interface ServerOptions {
  /**
   * Misbehave at connection level, before any request is parsed: `'reset'` sends
   * a TCP RST right after accept. Applies to every connection.
   */
  onConnect?: 'reset';
}

/** Whether this runtime's sockets can send a real RST. */
export const canReset: boolean = typeof Socket.prototype.resetAndDestroy === 'function';

/**
 * Ends a socket with a TCP RST where the runtime supports it (`resetAndDestroy`,
 * Node >= 16.17), else with a plain destroy; tests that care which one happened
 * read {@link canReset}.
 */
function reset(socket: Socket): void {
  if (canReset) socket.resetAndDestroy();
  else socket.destroy();
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function readBody(req: IncomingMessage): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const chunks: Uint8Array[] = [];
    req.on('data', (chunk: Uint8Array) => chunks.push(chunk));
    req.on('end', () => {
      const size = chunks.reduce((n, c) => n + c.byteLength, 0);
      const out = new Uint8Array(size);
      let offset = 0;
      for (const c of chunks) {
        out.set(c, offset);
        offset += c.byteLength;
      }
      resolve(out);
    });
    req.on('error', reject);
  });
}

async function answer(behaviour: Behaviour, res: ServerResponse, hung: Set<ServerResponse>): Promise<void> {
  const socket = res.socket as Socket;
  if ('reset' in behaviour) {
    if (behaviour.reset === 'mid-body') {
      res.writeHead(behaviour.status ?? 200, {
        'content-length': String(behaviour.body.length * 2),
        ...behaviour.headers,
      });
      res.write(behaviour.body);
      // Give the first chunk time to leave before the RST overtakes it.
      await delay(20);
    }
    reset(socket);
    return;
  }
  if ('stall' in behaviour) {
    res.writeHead(behaviour.status ?? 200, {
      'content-length': String(behaviour.body.length * 2),
      ...behaviour.headers,
    });
    res.write(behaviour.body);
    hung.add(res);
    return;
  }
  if ('close' in behaviour) {
    socket.destroy();
    return;
  }
  if ('hang' in behaviour) {
    hung.add(res);
    return;
  }
  if (behaviour.delayMs) await delay(behaviour.delayMs);
  if (socket.destroyed) return;
  const body = behaviour.body ?? '';
  res.writeHead(behaviour.status ?? 200, behaviour.headers);
  res.end(body);
}

/** Starts a server on 127.0.0.1, port 0. Prefer {@link withServer}, which always closes it. */
export async function startServer(handler: Handler, options: ServerOptions = {}): Promise<TestServer> {
  const requests: ReceivedRequest[] = [];
  const sockets = new Set<Socket>();
  const hung = new Set<ServerResponse>();
  let accepted = 0;

  let arrivals = 0;
  const server = createServer(async (req, res) => {
    // Numbered on arrival, before the body is read, so concurrent requests never share one.
    const index = arrivals++;
    let body: Uint8Array;
    try {
      body = await readBody(req);
    } catch {
      // The client left while its request was being read (an abort): nothing to answer. On
      // Bun and Deno the rejection went unhandled and failed whichever test ran.
      return;
    }
    const received: ReceivedRequest = {
      method: req.method ?? '',
      url: req.url ?? '',
      headers: { ...req.headers },
      body,
      text: new TextDecoder().decode(body),
    };
    requests.push(received);
    try {
      await answer(await handler(received, index), res, hung);
    } catch (error) {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(`test handler threw: ${String(error)}`);
    }
  });
  server.on('connection', (socket: Socket) => {
    accepted++;
    if (options.onConnect === 'reset') {
      reset(socket);
      return;
    }
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, HOST, () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  let closing: Promise<void> | undefined;
  return {
    origin: `http://${HOST}:${port}`,
    port,
    requests,
    connections: () => accepted,
    close() {
      closing ??= new Promise<void>((resolve) => {
        for (const res of hung) res.destroy();
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
        // Keep-alive sockets that arrive after close() are refused by the listener.
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      });
      return closing;
    },
  };
}

/** Runs `fn` against a fresh server and always closes the server afterwards. */
export async function withServer<T>(
  handler: Handler,
  fn: (server: TestServer) => Promise<T>,
  options?: ServerOptions,
): Promise<T> {
  const server = await startServer(handler, options);
  try {
    return await fn(server);
  } finally {
    await server.close();
  }
}

/** A handler that answers every request the same way. */
export function always(behaviour: Behaviour): Handler {
  return () => behaviour;
}

/** A handler that answers the n-th request with `behaviours[n]` (the last one repeats). */
export function sequence(...behaviours: Behaviour[]): Handler {
  return (_req, index) => behaviours[Math.min(index, behaviours.length - 1)] ?? {};
}

/**
 * A handler whose first request's answer (`first`) comes only once a second request has
 * arrived, which then waits until that answer is sent plus `settleMs`: a first attempt's
 * late answer lands while the second attempt runs. Every other request gets a 200.
 */
export function lateFirstAnswer(first: Behaviour, settleMs = 50): Handler {
  let firstAnswered: () => void = () => {};
  const answered = new Promise<void>((resolve) => {
    firstAnswered = resolve;
  });
  let secondArrived: () => void = () => {};
  const arrival = new Promise<void>((resolve) => {
    secondArrived = resolve;
  });
  return async (_req, index) => {
    if (index === 0) {
      await arrival;
      firstAnswered();
      return first;
    }
    if (index === 1) {
      secondArrived();
      await answered;
      await delay(settleMs);
    }
    return { status: 200 };
  };
}

/** A port that was listening a moment ago and is now closed: connecting to it is refused. */
export async function closedPort(): Promise<number> {
  const server = await startServer(always({}));
  await server.close();
  return server.port;
}
