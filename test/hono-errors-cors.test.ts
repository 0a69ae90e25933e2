import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Hono } from 'hono';
import { cors } from 'hono/cors';
import { requestId } from 'hono/request-id';
import { idempotency, REPLAYED_HEADER } from '../adapters/hono/idempotency.ts';
import { proxy } from '../adapters/hono/proxy.ts';
import { errorResponses } from '../adapters/hono/upstream.ts';
import { definePolicy } from '../src/policy.ts';
import { withApp } from './helpers/hono-server.ts';
import { always, withServer } from './helpers/server.ts';

/** A handler that describes a body of its own (5000 gzipped bytes, a range of them), then throws. */
function throwingFile(app: Hono): void {
  app.post('/file', (c) => {
    c.header('content-length', '999');
    c.header('content-encoding', 'gzip');
    c.header('content-range', 'bytes 0-998/5000');
    throw new Error('ENOENT: the file went away');
  });
}

/** The problem's status, the headers that matter, and its parsed body (the read fails if it is misdescribed). */
async function readProblem(res: Response): Promise<[number, (string | null)[], unknown]> {
  const text = await res.text();
  return [
    res.status,
    ['content-type', 'content-encoding', 'content-range', 'access-control-allow-origin', 'x-request-id'].map(
      (name) => res.headers.get(name),
    ),
    (JSON.parse(text) as { status: number }).status,
  ];
}

test("errorResponses()' 500 is read whole with cors() in front (it makes c.res before next(), whose headers Hono's c.res setter copies onto the answer): the content-length and content-encoding the handler set before it threw are not on it, over a real server", async () => {
  const app = new Hono();
  app.use(cors());
  app.use(requestId());
  throwingFile(app);
  app.onError(errorResponses());
  await withApp(app, async ({ origin }) => {
    const res = await fetch(`${origin}/file`, {
      method: 'POST',
      headers: { origin: 'https://page.example', 'x-request-id': 'file' },
    });
    assert.notEqual(res.headers.get('content-length'), '999');
    assert.deepEqual(await readProblem(res), [
      500,
      ['application/problem+json', null, null, '*', 'file'],
      500,
    ]);
  });
});

test("errorResponses()' 500 is read whole, first and replayed, with cors() and idempotency() in front of a handler that set content-length and content-encoding before it threw, over a real server", async () => {
  let runs = 0;
  const app = new Hono();
  app.use(cors());
  app.use(requestId());
  app.use(async (_c, next) => {
    runs++;
    await next();
  });
  app.use(idempotency());
  throwingFile(app);
  app.onError(errorResponses());
  await withApp(app, async ({ origin }) => {
    const send = (id: string): Promise<Response> =>
      fetch(`${origin}/file`, {
        method: 'POST',
        body: '{}',
        headers: {
          origin: 'https://page.example',
          'content-type': 'application/json',
          'idempotency-key': '"k-1"',
          'x-request-id': id,
        },
      });
    const first = await send('first');
    assert.deepEqual(await readProblem(first), [
      500,
      ['application/problem+json', null, null, '*', 'first'],
      500,
    ]);
    const repeat = await send('repeat');
    assert.equal(repeat.headers.get(REPLAYED_HEADER), 'true');
    assert.deepEqual(await readProblem(repeat), [
      500,
      ['application/problem+json', null, null, '*', 'repeat'],
      500,
    ]);
    assert.equal(runs, 2);
  });
});

test("a proxied answer keeps its own cookies and headers with cors() in front: Hono's c.res setter put the front's over them (the upstream's Set-Cookie was dropped, its Cache-Control replaced), as they are without cors(), over a real server", async () => {
  await withServer(
    always({
      body: 'up',
      headers: {
        'set-cookie': 'sid=upstream; Path=/',
        'cache-control': 'max-age=60',
        'content-type': 'text/plain',
      },
    }),
    async (up) => {
      for (const withCors of [false, true]) {
        const app = new Hono();
        if (withCors) app.use(cors());
        app.use(async (c, next) => {
          c.header('set-cookie', 'sid=front; Path=/', { append: true });
          c.header('set-cookie', 'theme=dark; Path=/', { append: true });
          c.header('cache-control', 'no-store');
          await next();
        });
        app.get(
          '/p',
          proxy(`${up.origin}/x`, { policy: definePolicy({ name: 'up', retry: { attempts: 1 } }) }),
        );
        await withApp(app, async ({ origin }) => {
          const res = await fetch(`${origin}/p`);
          assert.equal(await res.text(), 'up');
          assert.deepEqual(
            [res.headers.getSetCookie(), res.headers.get('cache-control')],
            [['sid=front; Path=/', 'theme=dark; Path=/', 'sid=upstream; Path=/'], 'max-age=60'],
            `cors: ${withCors}`,
          );
        });
      }
    },
  );
});
