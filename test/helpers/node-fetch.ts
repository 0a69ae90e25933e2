/**
 * @module
 * A base fetch answering as node-fetch (v2, v3) does, for the middlewares that drop or
 * read a response's body: one written for web streams fails on it.
 */

import { Readable } from 'node:stream';
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
