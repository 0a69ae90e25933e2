// A failure answer whose body never ends, read by a middleware while the caller aborts:
// nobody gets that answer, so whoever was reading its body must let it go (DESIGN §2: a
// dropped response has its body cancelled), or its connection is held for as long as
// the server sends.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createFetch, type FetchLike, type Middleware } from '../../src/index.ts';

/**
 * Sends one call through `reader` (a middleware that reads a failure's body:
 * `captureStatus()`, `throwOnStatus()`) to a 500 whose body trickles a byte every 20 ms,
 * through a fetch that drops the signal (so only breakwater can let the body go), and
 * aborts it 20 ms after the answer's headers are in. Asserts the call rejects with the
 * abort's reason; resolves to whether the server saw its connection close within 3 s.
 */
export async function abortWhileFailureBodyRead(reader: Middleware): Promise<'closed' | 'held'> {
  const deafFetch: FetchLike = (input, init) => {
    const { signal: _ignored, ...rest } = init ?? {};
    return globalThis.fetch(input, rest);
  };
  let closed: () => void = () => {};
  const serverSawClose = new Promise<'closed'>((resolve) => {
    closed = () => resolve('closed');
  });
  const server = createServer((_req, res) => {
    res.writeHead(500, { 'content-type': 'text/plain' });
    res.write('busy');
    const timer = setInterval(() => res.write('.'), 20);
    res.on('close', () => {
      clearInterval(timer);
      closed();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = server.address() as AddressInfo;
    const controller = new AbortController();
    const reason = new Error('the user left');
    const fetch = createFetch({
      fetch: deafFetch,
      use: [
        reader,
        // The abort comes once the answer's headers are in, while `reader` reads its body.
        async function abortWhileRead(call, next) {
          const response = await next(call);
          setTimeout(() => controller.abort(reason), 20);
          return response;
        },
      ],
    });
    let rejection: unknown;
    await fetch(`http://127.0.0.1:${port}/`, { signal: controller.signal }).then(
      () => {},
      (error: unknown) => {
        rejection = error;
      },
    );
    if (rejection !== reason)
      throw new Error(`the call did not reject with the abort's reason: ${rejection}`);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const outcome = await Promise.race([
      serverSawClose,
      new Promise<'held'>((resolve) => {
        timer = setTimeout(() => resolve('held'), 3000);
      }),
    ]);
    clearTimeout(timer);
    return outcome;
  } finally {
    server.closeAllConnections?.();
    await new Promise((resolve) => server.close(resolve));
  }
}

/**
 * A loopback server whose first answer is `status` with `Retry-After: 1`, its headers sent
 * at once and its body trickled a byte every 50 ms (never ending), and every later answer a
 * 200. Resolves to what `run` does with its origin, and to when (`performance.now()`) the
 * first answer's headers went and each later request came.
 */
export async function withTrickledAnswer(
  status: number,
  run: (origin: string) => Promise<void>,
): Promise<{ headersSent: number; later: number[] }> {
  let headersSent = Number.NaN;
  const later: number[] = [];
  const server = createServer((_req, res) => {
    if (!Number.isNaN(headersSent)) {
      later.push(performance.now());
      res.end('ok');
      return;
    }
    res.writeHead(status, { 'retry-after': '1', 'content-type': 'application/json' });
    res.write('{"error":');
    headersSent = performance.now();
    const timer = setInterval(() => res.write(' '), 50);
    res.on('close', () => clearInterval(timer));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    await run(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  } finally {
    server.closeAllConnections?.();
    await new Promise((resolve) => server.close(resolve));
  }
  return { headersSent, later };
}
