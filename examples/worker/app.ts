/**
 * @module
 * A small order service on Hono with `breakwater/hono`, written against Web-standard
 * APIs only, so the very same app runs on Cloudflare workerd (`worker.ts`), Deno
 * (`deno.ts`, `deno serve`) and Bun (`bun.ts`). Each entry only reads where the
 * inventory service lives and hands it to {@link createApp}.
 *
 * - `POST /orders` is rate-limited per client (`x-client`; `RateLimit` /
 *   `RateLimit-Policy` headers, 429 + `Retry-After`), deduplicated by
 *   `Idempotency-Key` (a repeat is replayed with `Idempotent-Replayed: true`), and
 *   reserves stock at the inventory service through a breakwater policy: the
 *   server's `Retry-After` is honoured, transient failures are retried, and the
 *   order's key travels with the reservation, so a retried reservation is safe.
 * - Failures the policy cannot absorb become `application/problem+json` (503 with
 *   `Retry-After`, 504, 502) naming the upstream `inventory`, never its URL.
 * - `GET /health` answers 200 without touching the inventory.
 */

import { definePolicy } from 'breakwater';
import {
  errorResponses,
  idempotency,
  problemResponse,
  rateLimit,
  type UpstreamEnv,
  upstream,
} from 'breakwater/hono';
import { Hono } from 'hono';

/** Orders each client may place per window. */
export const ORDERS_PER_WINDOW = 3;
/** The rate-limit window (a whole number of seconds, as the `RateLimit` headers advertise it). */
export const ORDER_WINDOW_MS = 60_000;

/** An order as `POST /orders` takes it. */
export interface Order {
  sku: string;
  quantity: number;
}

function isOrder(value: unknown): value is Order {
  const order = value as Partial<Order> | null;
  return (
    typeof order === 'object' &&
    order !== null &&
    typeof order.sku === 'string' &&
    order.sku !== '' &&
    Number.isInteger(order.quantity) &&
    (order.quantity as number) > 0
  );
}

/**
 * The order service, calling the inventory service at `inventoryUrl` (an origin such
 * as `http://127.0.0.1:9000`; the app posts to its `/reserve`).
 */
export function createApp(inventoryUrl: string): Hono<UpstreamEnv> {
  const reserveUrl = new URL('/reserve', inventoryUrl).href;
  // One policy for the inventory service: its breaker, pacing and retry budget are
  // shared by every request this app serves. `idempotencyKeys` stamps a fresh key on
  // a reservation whose order came without one, so it too may be resent after a 503.
  const inventory = definePolicy({
    name: 'inventory',
    retry: { attempts: 3, backoff: { initialMs: 10, maxMs: 50 } },
    timeout: { attemptMs: 5_000, totalMs: 15_000 },
    idempotencyKeys: true,
  });

  const app = new Hono<UpstreamEnv>();

  // Mounted as a middleware too, so an error's answer keeps the headers set in front
  // of it and drops those a failing handler set (a Cache-Control a CDN would keep).
  const errors = errorResponses({ policy: inventory });
  app.use(errors);

  app.get('/health', (c) => c.text('ok'));

  app.use(
    '/orders',
    // A real service names the client from its authentication (an API key's id);
    // `x-client` stands in for that here. Without it: 400, never a shared bucket.
    rateLimit({
      limit: ORDERS_PER_WINDOW,
      windowMs: ORDER_WINDOW_MS,
      policyName: 'orders',
      key: (c) => c.req.header('x-client'),
    }),
    // After the rate limit, so a rejected request never claims a key.
    idempotency({ scope: (c) => c.req.header('x-client') ?? '' }),
    // Failure statuses from the inventory (after the policy's retries) become errors
    // that errorResponses() answers: 503 + Retry-After for 429/503, else 502.
    upstream(inventory, { throwOnStatus: true }),
  );

  app.post('/orders', async (c) => {
    let order: unknown;
    try {
      order = await c.req.json();
    } catch {
      order = undefined;
    }
    if (!isOrder(order)) {
      return problemResponse({
        status: 400,
        title: 'Bad Request',
        detail: 'an order is a JSON object { "sku": string, "quantity": positive integer }',
      });
    }
    // The order's key, scoped to its client as this app's own records are (two clients
    // may both send "order-1"), is the reservation's key: the inventory service
    // deduplicates a resent reservation, and breakwater may resend this POST after a
    // 503 or a reset.
    const key = c.req.header('idempotency-key');
    const response = await c.var.fetch(reserveUrl, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(key === undefined
          ? {}
          : { 'idempotency-key': await scopedKey(c.req.header('x-client') ?? '', key) }),
      },
      body: JSON.stringify({ sku: order.sku, quantity: order.quantity }),
    });
    const reservation: unknown = await response.json();
    return c.json({ order, reservation }, 201);
  });

  app.onError(errors);
  return app;
}

/**
 * `key` scoped to `client`, as a structured-field string: the hex SHA-256 of both.
 * A header value holds no newline, so no two pairs hash the same input.
 */
async function scopedKey(client: string, key: string): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(`${client}\n${key}`));
  return `"${Array.from(new Uint8Array(digest), (byte) => byte.toString(16).padStart(2, '0')).join('')}"`;
}
