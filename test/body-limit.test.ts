import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { limitedBody } from '../src/body-limit.ts';
import type { Middleware } from '../src/call.ts';
import { createFetch } from '../src/chain.ts';
import { BreakwaterError } from '../src/errors.ts';
import { withServer } from './helpers/server.ts';

const LIMIT = 1000;

/** Reads bodies through `limitedBody()` at {@link LIMIT}, as the MCP and A2A adapters do. */
const limited: Middleware = async function limited(call, next) {
  return limitedBody(await next(call), LIMIT, call);
};

/** What reading the whole body gave: its events as far as they came, then the error that ended it, if any. */
async function readAll(response: Response): Promise<{ text: string; error: unknown }> {
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let text = '';
  try {
    for (let next = await reader.read(); !next.done; next = await reader.read())
      text += decoder.decode(next.value);
  } catch (error) {
    return { text, error };
  }
  return { text, error: undefined };
}

const tooLarge = (error: unknown): boolean =>
  error instanceof BreakwaterError && error.code === 'RESPONSE_TOO_LARGE';

test('an SSE event over the limit is cut even when one read brings it whole, its blank line and the events around it included', async () => {
  const big = `data: ${'x'.repeat(3 * LIMIT)}\n\n`;
  for (const end of ['\n', '\r\n', '\r']) {
    const first = `data: a${end}${end}`;
    const body = `${first}${big.replaceAll('\n', end)}data: b${end}${end}`;
    await withServer(
      () => ({ headers: { 'content-type': 'text/event-stream' }, body }),
      async (server) => {
        const { text, error } = await readAll(await createFetch({ use: [limited] })(server.origin));
        assert.ok(tooLarge(error), `${JSON.stringify(end)}: ${String(error)}`);
        // The event before the oversized one still goes on; nothing of that one or after it.
        assert.equal(text, first, JSON.stringify(end));
      },
    );
  }
});

test('an SSE event over the limit whose end comes in the same read as the next event is cut, counting what came of it before that read', async () => {
  // Two writes some ms apart: the event's first 600 bytes arrive alone (within the
  // limit), then its last 600 with its blank line and a small event after.
  const split = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(`data: ${'x'.repeat(594)}`);
    setTimeout(() => res.end(`${'x'.repeat(600)}\n\ndata: ok\n\n`), 30);
  });
  await new Promise<void>((resolve) => split.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = split.address() as AddressInfo;
    const { text, error } = await readAll(await createFetch({ use: [limited] })(`http://127.0.0.1:${port}/`));
    assert.ok(tooLarge(error), String(error));
    assert.ok(!text.includes('data: ok'), 'nothing after the oversized event');
  } finally {
    split.closeAllConnections();
    await new Promise((resolve) => split.close(resolve));
  }
});

test('an SSE stream of events each within the limit, several to a read, passes whole', async () => {
  const event = `data: ${'y'.repeat(LIMIT - 8)}\n\n`;
  const body = event.repeat(20);
  await withServer(
    () => ({ headers: { 'content-type': 'text/event-stream' }, body }),
    async (server) => {
      const { text, error } = await readAll(await createFetch({ use: [limited] })(server.origin));
      assert.equal(error, undefined);
      assert.equal(text, body);
    },
  );
});
