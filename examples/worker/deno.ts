/**
 * @module
 * The Deno entry, for `deno serve` (which serves the default export's `fetch`):
 *
 * ```sh
 * UPSTREAM=http://127.0.0.1:9000 deno serve --host 127.0.0.1 --port 8787 \
 *   --allow-net --allow-env=UPSTREAM examples/worker/deno.ts
 * ```
 */

import type { UpstreamEnv } from 'breakwater/hono';
import type { Hono } from 'hono';
import { createApp } from './app.ts';

// Only what this file uses, so `tsc` (which has no Deno types) checks it too.
declare const Deno: { env: { get(name: string): string | undefined } };

const upstream = Deno.env.get('UPSTREAM');
if (upstream === undefined || upstream === '') {
  throw new Error('set UPSTREAM to the inventory service origin, e.g. UPSTREAM=http://127.0.0.1:9000');
}

const app: Hono<UpstreamEnv> = createApp(upstream);
export default app;
