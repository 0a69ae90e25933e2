import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { inspect } from 'node:util';
import { AgentCardError, createA2AClient, resolveAgentCard } from '../adapters/a2a/index.ts';
import type { FetchLike } from '../src/call.ts';
import { HttpStatusError } from '../src/errors.ts';
import { definePolicy } from '../src/policy.ts';
import { withServer } from './helpers/server.ts';

/** A card that passes resolveAgentCard's check, with the given interfaces (A2A 1.0 form). */
function cardWith(fields: Record<string, unknown>) {
  return {
    name: 'echo',
    version: '1.0.0',
    capabilities: {},
    skills: [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    ...fields,
  };
}

/** Serves `card` at the default card path and counts every request; runs `fn` with the origin. */
async function withCard(card: unknown, fn: (origin: string, requests: () => number) => Promise<void>) {
  let requests = 0;
  await withServer(
    () => {
      requests++;
      return { headers: { 'content-type': 'application/json' }, body: JSON.stringify(card) };
    },
    ({ origin }) => fn(origin, () => requests),
  );
}

test('createA2AClient refuses a card that lists no interface the client speaks (gRPC only, an unknown binding) with AgentCardError naming the card, not the SDK’s bare Error', async () => {
  const cards = [
    cardWith({ supportedInterfaces: [{ url: 'agent.example.com:443', protocolBinding: 'GRPC' }] }),
    cardWith({ supportedInterfaces: [{ url: 'http://127.0.0.1:9/a2a', protocolBinding: 'JSONRPC2' }] }),
  ];
  for (const card of cards) {
    await withCard(card, async (origin, requests) => {
      for (const policy of [definePolicy({ name: 'echo' }), undefined]) {
        const error = await createA2AClient(origin, { policy }).catch((e: unknown) => e);
        assert.ok(
          error instanceof AgentCardError,
          `AgentCardError for ${JSON.stringify(card)}, got ${error}`,
        );
        assert.equal(error.code, 'AGENT_CARD_INVALID');
        assert.match(error.message, /agent-card\.json/, 'the message names the card');
        assert.match(error.issues.join('\n'), /JSONRPC/, 'the issue names what the client speaks');
      }
      assert.equal(requests(), 2, 'one card GET per attempt, nothing else');
    });
  }
});

test('a url beside an empty supportedInterfaces is the endpoint only of a card in A2A 0.3 form, as the SDK reads cards: resolveAgentCard refuses the others, as createA2AClient does', async () => {
  const url = 'http://127.0.0.1:9/a2a';
  // The SDK reads a card as A2A 0.3 (its url the endpoint) by a field only 0.3 has, or a
  // 0.3 (or blank) protocolVersion; else as 1.0, whose interfaces are all it reads.
  const cases: [Record<string, unknown>, boolean][] = [
    [{ url, supportedInterfaces: [] }, false],
    [{ url, supportedInterfaces: [], protocolVersion: '1.0' }, false],
    [{ url, supportedInterfaces: [], protocolVersion: '0.2.5' }, false],
    [{ url, supportedInterfaces: [], protocolVersion: '.3' }, false],
    [{ url, supportedInterfaces: [], protocolVersion: '0.3.0' }, true],
    [{ url, supportedInterfaces: [], protocolVersion: ' ' }, true],
    [{ url, supportedInterfaces: [], preferredTransport: 'JSONRPC' }, true],
    [{ url, supportedInterfaces: [], additionalInterfaces: [] }, true],
    [{ url, supportedInterfaces: [], supportsAuthenticatedExtendedCard: false }, true],
    [{ url }, true],
  ];
  for (const [fields, usable] of cases) {
    await withCard(cardWith(fields), async (origin) => {
      const resolved = await resolveAgentCard(origin).catch((e: unknown) => e);
      const client = await createA2AClient(origin).catch((e: unknown) => e);
      for (const [what, outcome] of [
        ['resolveAgentCard', resolved],
        ['createA2AClient', client],
      ] as const) {
        if (usable) {
          assert.ok(!(outcome instanceof Error), `${what} takes ${JSON.stringify(fields)}: ${outcome}`);
        } else {
          assert.ok(
            outcome instanceof AgentCardError,
            `${what} refuses ${JSON.stringify(fields)}: ${outcome}`,
          );
          assert.equal(outcome.code, 'AGENT_CARD_INVALID');
          assert.match(outcome.issues.join('\n'), /^card\.supportedInterfaces: /);
        }
      }
    });
  }
});

test('createA2AClient takes a card whose interface names its binding in another case, as the SDK matches bindings', async () => {
  await withCard(
    cardWith({ supportedInterfaces: [{ url: 'http://127.0.0.1:9/a2a', protocolBinding: 'jsonrpc' }] }),
    async (origin) => {
      const client = await createA2AClient(origin, { policy: definePolicy({ name: 'echo' }) });
      assert.equal(typeof client.sendMessage, 'function', 'a client');
    },
  );
});

test('createA2AClient refuses preferredTransports the client has no transport for with a TypeError naming the path, before any request', async () => {
  await withCard(
    cardWith({ supportedInterfaces: [{ url: 'http://127.0.0.1:9/a2a', protocolBinding: 'JSONRPC' }] }),
    async (origin, requests) => {
      const error = await createA2AClient(origin, { preferredTransports: ['GRPC'] }).catch((e: unknown) => e);
      assert.ok(error instanceof TypeError, String(error));
      assert.match(
        error.message,
        /createA2AClient\(\)\.preferredTransports\.0: must be "JSONRPC" or "HTTP\+JSON"/,
      );
      assert.equal(requests(), 0, 'nothing was sent');
      const client = await createA2AClient(origin, { preferredTransports: ['http+json', 'JSONRPC'] });
      assert.equal(typeof client.getTask, 'function', 'names in any case are taken, as the SDK takes them');
    },
  );
});

test('createA2AClient says what clientConfig must be when it is not an object', async () => {
  const error = await createA2AClient('http://127.0.0.1:9/', { clientConfig: 5 as never }).catch(
    (e: unknown) => e,
  );
  assert.ok(error instanceof TypeError, String(error));
  assert.match(error.message, /createA2AClient\(\)\.clientConfig: must be an object/);
});

test('a credential the agent quotes back in its reason phrase is hidden from the SDK’s own error, the cause of what createA2AClient throws, over JSON-RPC, its message stream and HTTP+JSON', async () => {
  // An old app server's 401: the credential as received in the reason phrase. Node's and
  // Bun's fetch keep the phrase as written (Deno's gives the standard one: there this passes
  // either way). The SDK words every failing status with the phrase; the body it quotes is
  // the capture snapshot's, with credentials hidden, and so must the phrase be.
  const token = 'opaque-T0k3n-9f8e7d6c5b4a3210';
  const server = createServer((request, response) => {
    if (request.url?.endsWith('agent-card.json')) {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/a2a`;
      const interfaces = [
        {
          url,
          protocolBinding: request.url?.includes('rest') ? 'HTTP+JSON' : 'JSONRPC',
          protocolVersion: '1.0',
        },
      ];
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(
        JSON.stringify(cardWith({ supportedInterfaces: interfaces, capabilities: { streaming: true } })),
      );
      return;
    }
    response.writeHead(401, `Unauthorized ${request.headers.authorization}`, {
      'content-type': 'text/plain',
    });
    response.end('denied');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  // The SDK gives no auth option of its own: a fetch under the policy stamps the credential.
  const fetch: FetchLike = (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set('authorization', `Bearer ${token}`);
    return globalThis.fetch(input, { ...init, headers });
  };
  try {
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const errors: unknown[] = [];
    for (const path of ['rpc/.well-known/agent-card.json', 'rest/.well-known/agent-card.json']) {
      const client = await createA2AClient(origin, { policy: definePolicy({ retry: false }), fetch, path });
      errors.push(await client.getTask({ tenant: '', id: 't1' } as never).catch((e: unknown) => e));
      const stream = client.sendMessageStream({
        message: { messageId: 'm1', role: 'ROLE_USER', parts: [{ text: 'hi' }] },
      } as never);
      errors.push(await stream.next().catch((e: unknown) => e));
    }
    for (const error of errors) {
      assert.ok(error instanceof HttpStatusError, `an HttpStatusError: ${inspect(error)}`);
      assert.equal(error.status, 401);
      assert.ok(error.cause instanceof Error, 'the SDK’s error is its cause');
      const shown = inspect(error, { depth: 10 });
      assert.ok(!shown.includes(token.slice(0, 8)), `the token shown in ${shown}`);
    }
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});
