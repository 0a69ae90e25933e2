import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AgentCardError, createA2AClient, resolveAgentCard } from '../adapters/a2a/index.ts';
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
