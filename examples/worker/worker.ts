/**
 * @module
 * The workerd entry (an ES module worker). workerd hands bindings to each request
 * (`env`) rather than to the module, so the app is built on the first request, from
 * the `UPSTREAM` binding (`config.capnp` fills it from the `UPSTREAM` environment
 * variable), and kept for every later one: the rate-limit counters, idempotency
 * records and the policy's breaker live as long as the isolate.
 *
 * workerd runs JavaScript, so this file is bundled first (see README.md):
 * `esbuild examples/worker/worker.ts --bundle --format=esm --platform=neutral
 * --main-fields=module,main --conditions=workerd,worker,browser --outfile=examples/worker/dist/worker.js`
 */

import type { UpstreamEnv } from 'breakwater/hono';
import type { ExecutionContext, Hono } from 'hono';
import { createApp } from './app.ts';

/** The worker's bindings (`config.capnp`). */
export interface WorkerEnv {
  /** The inventory service's origin; `null` when the environment variable is not set. */
  UPSTREAM?: string | null;
}

let app: Hono<UpstreamEnv> | undefined;

/** The module worker: workerd calls `fetch` for every request on the `http` socket. */
const worker: {
  fetch(request: Request, env: WorkerEnv, ctx: ExecutionContext): Response | Promise<Response>;
} = {
  fetch(request, env, ctx) {
    if (app === undefined) {
      const upstream = env.UPSTREAM;
      if (typeof upstream !== 'string' || upstream === '') {
        return new Response('UPSTREAM is not set: start workerd with UPSTREAM=http://host:port\n', {
          status: 500,
        });
      }
      app = createApp(upstream);
    }
    return app.fetch(request, env, ctx);
  },
};

export default worker;
