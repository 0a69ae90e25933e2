import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Hono } from 'hono';
import { cors } from 'hono/cors';
import { requestId } from 'hono/request-id';
import { idempotency, REPLAYED_HEADER } from '../adapters/hono/idempotency.ts';
import { proxy } from '../adapters/hono/proxy.ts';
import { errorResponses, type UpstreamEnv, upstream } from '../adapters/hono/upstream.ts';
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

/** The headers the 500 must not take from a handler that set them before it threw. */
const HANDLER_HEADERS = [
  'cache-control',
  'etag',
  'last-modified',
  'location',
  'content-disposition',
  'x-trace',
];

/** cors(), requestId(), a front that sets a cookie, `cache-control: no-store` and `x-trace`, then errorResponses() mounted. */
function frontedApp(errors: ReturnType<typeof errorResponses>): Hono<UpstreamEnv> {
  const app = new Hono<UpstreamEnv>();
  app.use(cors());
  app.use(requestId());
  app.use(async (c, next) => {
    c.header('set-cookie', 'theme=dark; Path=/', { append: true });
    await next();
  });
  app.use(errors);
  app.onError(errors);
  return app;
}

test("errorResponses(), mounted with app.use() too, answers a handler that set Cache-Control, ETag, Last-Modified, Location, Content-Disposition and a Set-Cookie before it threw with a 500 carrying none of them, and the request id, cors()'s headers and the cookie set in front, over a real server", async () => {
  let ran = false;
  const errors = errorResponses();
  const app = frontedApp(errors);
  app.post('/login', (c) => {
    ran = true;
    c.header('cache-control', 'public, max-age=3600');
    c.header('etag', '"v1"');
    c.header('last-modified', 'Wed, 02 Dec 2026 12:00:00 GMT');
    c.header('location', '/home');
    c.header('content-disposition', 'attachment; filename="a.json"');
    c.header('x-trace', 'handler');
    c.header('set-cookie', 'sid=half-done; Path=/; HttpOnly', { append: true });
    throw new Error('the session store went away');
  });
  await withApp(app, async ({ origin }) => {
    const res = await fetch(`${origin}/login`, {
      method: 'POST',
      headers: { origin: 'https://page.example', 'x-request-id': 'login-1' },
    });
    assert.equal(ran, true, 'the handler ran');
    assert.deepEqual(await readProblem(res), [
      500,
      ['application/problem+json', null, null, '*', 'login-1'],
      500,
    ]);
    assert.deepEqual(
      [HANDLER_HEADERS.map((name) => res.headers.get(name)), res.headers.getSetCookie()],
      [HANDLER_HEADERS.map(() => null), ['theme=dark; Path=/']],
    );
  });
});

test("errorResponses() mounted puts back the front's value of a header the handler overwrote or removed before it threw (its Cache-Control: no-store over the handler's public), without cors() in front too, over a real server", async () => {
  for (const withCors of [false, true]) {
    let ran = false;
    const errors = errorResponses();
    const app = new Hono();
    if (withCors) app.use(cors());
    app.use(async (c, next) => {
      c.header('cache-control', 'no-store');
      c.header('x-trace', 'front');
      c.header('set-cookie', 'theme=dark; Path=/', { append: true });
      await next();
    });
    app.use(errors);
    app.onError(errors);
    app.get('/page', (c) => {
      ran = true;
      c.header('cache-control', 'public, max-age=3600');
      c.header('x-trace', undefined);
      c.header('set-cookie', 'sid=half-done; Path=/', { append: true });
      throw new Error('render failed');
    });
    await withApp(app, async ({ origin }) => {
      const res = await fetch(`${origin}/page`);
      await res.text();
      assert.deepEqual(
        [
          res.status,
          res.headers.get('cache-control'),
          res.headers.get('x-trace'),
          res.headers.getSetCookie(),
        ],
        [500, 'no-store', 'front', ['theme=dark; Path=/']],
        `cors: ${withCors}`,
      );
      assert.equal(ran, true, 'the handler ran');
    });
  }
});

test("errorResponses() mounted in front of upstream() keeps the Access-Control-Expose-Headers upstream() adds, so a page on another origin reads the 503's Retry-After, over a real server", async () => {
  await withServer(always({ status: 429, headers: { 'retry-after': '5' } }), async (up) => {
    const policy = definePolicy({ name: 'up', retry: { attempts: 1 } });
    const errors = errorResponses({ policy });
    const app = frontedApp(errors);
    app.use(upstream(policy, { throwOnStatus: true }));
    app.get('/tool', async (c) => {
      c.header('cache-control', 'public, max-age=3600');
      return c.json(await (await c.var.fetch(`${up.origin}/x`)).json());
    });
    await withApp(app, async ({ origin }) => {
      const res = await fetch(`${origin}/tool`, { headers: { origin: 'https://page.example' } });
      await res.text();
      assert.deepEqual(
        [
          res.status,
          res.headers.get('retry-after'),
          res.headers.get('access-control-expose-headers')?.includes('retry-after'),
          res.headers.get('cache-control'),
        ],
        [503, '5', true, null],
      );
    });
  });
});
