import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { resolveAgentCard } from '../adapters/a2a/index.ts';
import { NetworkError } from '../src/errors.ts';

/** A port on 127.0.0.1 that nothing listens on: bound, then closed. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Everything an error shows: its message, its JSON form and its own fields. */
function shown(error: unknown): string {
  const e = error as Error;
  return `${e.message} ${JSON.stringify(e)} ${JSON.stringify(Object.entries(e))}`;
}

test('without a policy, a refused card GET is a NetworkError that shows no userinfo or query values', async () => {
  const port = await closedPort();
  // A base read as is (`path: ''`) keeps its query into the request.
  const queried = await resolveAgentCard(`http://127.0.0.1:${port}/card?api_key=SECRET-QUERY`, {
    path: '',
  }).catch((e: unknown) => e);
  assert.ok(queried instanceof NetworkError, shown(queried));
  assert.equal(queried.code, 'ECONNREFUSED');
  assert.ok(!shown(queried).includes('SECRET'), shown(queried));
  // Node refuses a URL with userinfo before connecting (a TypeError); Deno and Bun connect.
  const withUser = await resolveAgentCard(`http://agent:SECRET-PASSWORD@127.0.0.1:${port}/`).catch(
    (e: unknown) => e,
  );
  assert.ok(withUser instanceof NetworkError || withUser instanceof TypeError, shown(withUser));
  assert.ok(!shown(withUser).includes('SECRET'), shown(withUser));
});
