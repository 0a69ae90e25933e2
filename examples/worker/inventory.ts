/**
 * @module
 * A stand-in inventory service, so the order service can be tried by hand (README.md,
 * "Run it") without writing one. `POST /reserve` answers a reservation as JSON, and the
 * same reservation again for an `Idempotency-Key` it has seen (a real inventory that
 * honours keys does the same: the order service may resend a reservation). The first
 * attempt of the first reservation, and of every third after it, is answered
 * 503 + `retry-after-ms`, so you can watch the order service's policy wait as asked and
 * resend with the same key. Every request is logged on stdout.
 *
 * ```sh
 * node --import tsx examples/worker/inventory.ts   # http://127.0.0.1:9000; PORT=... moves it (0: any free port)
 * ```
 */

import process from 'node:process';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';

/** Where it listens unless `PORT` says otherwise (the README's `UPSTREAM`). */
const DEFAULT_PORT = 9000;
/** The wait its 503s ask for: long enough to see in the log, short enough for curl. */
const RETRY_AFTER_MS = 300;
/** The 1st new reservation's first attempt is refused, then every this-many-th one's. */
const REFUSE_EVERY = 3;

/** A reservation as the order service gets it back. */
interface Reservation {
  reservation: string;
  sku: string;
  quantity: number;
}

/** The inventory: reservations by `Idempotency-Key`, and when each key's 503 was sent. */
function createInventory(log: (line: string) => void): Hono {
  const byKey = new Map<string, Reservation>();
  const refusedAt = new Map<string, number>();
  let made = 0;
  let seen = 0;

  const app = new Hono();
  app.post('/reserve', async (c) => {
    const body = (await c.req.json().catch(() => ({}))) as { sku?: unknown; quantity?: unknown };
    const key = c.req.header('idempotency-key');
    const shown = key === undefined ? 'no key' : `key ${key.slice(0, 12)}…`;
    const done = key === undefined ? undefined : byKey.get(key);
    if (done !== undefined) {
      log(
        `POST /reserve  ${shown}  -> 200 ${done.reservation} again (a resend of a reservation already made)`,
      );
      return c.json(done);
    }
    if (key !== undefined && !refusedAt.has(key) && seen++ % REFUSE_EVERY === 0) {
      refusedAt.set(key, Date.now());
      log(
        `POST /reserve  ${shown}  -> 503, retry-after-ms: ${RETRY_AFTER_MS} (the order service should wait, then resend)`,
      );
      return c.json({ error: 'busy' }, 503, { 'retry-after-ms': String(RETRY_AFTER_MS) });
    }
    const reservation: Reservation = {
      reservation: `r-${++made}`,
      sku: String(body.sku),
      quantity: Number(body.quantity),
    };
    if (key !== undefined) byKey.set(key, reservation);
    const refused = key === undefined ? undefined : refusedAt.get(key);
    const resent = refused === undefined ? '' : ` (resent ${Date.now() - refused} ms after the 503)`;
    log(`POST /reserve  ${shown}  -> 200 ${reservation.reservation}${resent}`);
    return c.json(reservation);
  });
  return app;
}

const port = Number(process.env.PORT ?? DEFAULT_PORT);
if (!Number.isInteger(port) || port < 0 || port > 65_535) {
  console.error(`PORT must be a port number (0 to 65535), got ${JSON.stringify(process.env.PORT)}`);
  process.exit(2);
}
serve({ fetch: createInventory((line) => console.log(line)).fetch, port, hostname: '127.0.0.1' }, (info) => {
  const origin = `http://127.0.0.1:${info.port}`;
  console.log(`inventory on ${origin} (POST /reserve); start the order service with UPSTREAM=${origin}`);
});
