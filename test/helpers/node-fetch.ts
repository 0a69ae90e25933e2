/**
 * @module
 * A base fetch answering as node-fetch (v2, v3) does, for the middlewares that drop or
 * read a response's body: one written for web streams fails on it.
 */

import { request } from 'node:http';
import type { Socket } from 'node:net';
import { PassThrough, Readable } from 'node:stream';
import type { FetchLike } from '../../src/call.ts';

/**
 * The global fetch, answering as node-fetch (v2, v3) does: the body (of each clone too) a
 * Node Readable, with neither getReader() nor cancel().
 */
export const nodeFetchShaped: FetchLike = async (input, init) => {
  const answer = await fetch(input, init);
  const bytes = new Uint8Array(await answer.arrayBuffer());
  const { status, statusText, ok, headers, url } = answer;
  const shaped = (): Response =>
    ({
      status,
      statusText,
      ok,
      headers,
      url,
      bodyUsed: false,
      body: Readable.from([bytes]),
      clone: shaped,
    }) as never;
  return shaped();
};

/**
 * A base fetch answering as node-fetch v2 does over real connections: `node:http` with no
 * keep-alive (`agent: false`, so a connection let go closes), the body the socket's
 * stream piped into a PassThrough (neither getReader() nor cancel()), headers and method
 * sent as given. `open()` waits (up to 2 s) for the connections to close and counts those
 * still open: a body a middleware dropped without reading on or destroying keeps its
 * connection for good. Read the body of the answer you get (`resume()`) before asking.
 */
export function nodeFetchOverHttp(): { fetch: FetchLike; open: () => Promise<number> } {
  const sockets: Socket[] = [];
  const fetch: FetchLike = (input, init) =>
    new Promise((resolve, reject) => {
      const url = input instanceof Request ? input.url : String(input);
      const headers = Object.fromEntries(new Headers(init?.headers));
      const sent = request(url, { agent: false, method: init?.method ?? 'GET', headers }, (answer) => {
        sockets.push(answer.socket);
        const { statusCode: status = 0, statusMessage: statusText = '', rawHeaders } = answer;
        const pairs: [string, string][] = [];
        for (let i = 0; i < rawHeaders.length; i += 2)
          pairs.push([rawHeaders[i], rawHeaders[i + 1]] as never);
        resolve({
          status,
          statusText,
          ok: status >= 200 && status < 300,
          redirected: false,
          headers: new Headers(pairs),
          url,
          bodyUsed: false,
          body: answer.pipe(new PassThrough()),
          clone: () => ({ body: new PassThrough() }),
        } as never);
      });
      sent.on('error', reject).end();
    });
  const open = async (): Promise<number> => {
    const count = (): number => sockets.filter((socket) => !socket.destroyed).length;
    for (let waited = 0; waited < 2000 && count() > 0; waited += 20)
      await new Promise((resolve) => setTimeout(resolve, 20));
    return count();
  };
  return { fetch, open };
}
