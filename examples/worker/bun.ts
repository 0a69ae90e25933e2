/**
 * @module
 * The Bun entry: Bun serves a default export that has a `fetch` (plus `port` and
 * `hostname`) when the file is run:
 *
 * ```sh
 * UPSTREAM=http://127.0.0.1:9000 PORT=8787 bun run examples/worker/bun.ts
 * ```
 */

import process from 'node:process';
import { createApp } from './app.ts';

const upstream = process.env.UPSTREAM;
if (upstream === undefined || upstream === '') {
  throw new Error('set UPSTREAM to the inventory service origin, e.g. UPSTREAM=http://127.0.0.1:9000');
}

const app = createApp(upstream);

/** What `bun run` serves. */
const server: {
  hostname: string;
  port: number;
  fetch: (request: Request) => Response | Promise<Response>;
} = {
  hostname: process.env.HOST ?? '127.0.0.1',
  port: Number(process.env.PORT ?? 8787),
  fetch: (request) => app.fetch(request),
};

export default server;
