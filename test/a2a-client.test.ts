import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { inspect } from 'node:util';
// @ts-types="@a2a-js/sdk/server"
import { defaultServerCallContextBuilder, type JsonRpcTransportHandler } from '@a2a-js/sdk/server';
import { AgentCardError, createA2AClient, resolveAgentCard } from '../adapters/a2a/index.ts';
import type { FetchLike } from '../src/call.ts';
import { HttpStatusError } from '../src/errors.ts';
import type { BreakwaterEvent } from '../src/events.ts';
import { definePolicy } from '../src/policy.ts';
import { echoAgent, userMessage } from './helpers/a2a-agent.ts';
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

/** One request the guarded agent received: `card` or the JSON-RPC method, and its Authorization. */
interface Received {
  what: string;
  authorization: string | undefined;
}

/**
 * A real A2A agent (the SDK's DefaultRequestHandler and JsonRpcTransportHandler, its
 * executor echoing the text back as a completed task) behind a token check, on a raw
 * node:http server so that a refusal can quote the credential in its reason phrase, as an
 * old app server may (Node's and Bun's fetch keep the phrase as written). Each request is
 * recorded in `received`; one that `accepts(what, authorization)` refuses is answered 401,
 * quoting its bearer token in the phrase and in a JSON body.
 */
async function withGuardedAgent(
  accepts: (what: string, authorization: string | undefined) => boolean,
  fn: (origin: string, received: Received[], executed: () => number) => Promise<void>,
): Promise<void> {
  const received: Received[] = [];
  let executed = 0;
  let handler: JsonRpcTransportHandler | undefined;
  const server = createServer(async (request, response) => {
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const card = cardWith({
      supportedInterfaces: [{ url: `${origin}/a2a`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' }],
    });
    let body = '';
    for await (const chunk of request) body += chunk;
    let what = 'card';
    if (request.method === 'POST') what = String((JSON.parse(body) as { method?: unknown }).method);
    const authorization = request.headers.authorization;
    received.push({ what, authorization });
    if (!accepts(what, authorization)) {
      // The credential alone, in words that name no credential: text redaction cannot know
      // it there, only hiding what the call sent does.
      const token = authorization?.replace(/^Bearer /, '');
      response.writeHead(401, `Nobody called ${token}`, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ error: { message: `nobody called ${token} here` } }));
      return;
    }
    if (what === 'card') {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify(card));
      return;
    }
    handler ??= echoAgent(card, () => {
      executed++;
    });
    const context = defaultServerCallContextBuilder({
      headers: request.headers,
      requestedVersion: request.headers['a2a-version'],
    } as never);
    const answer = await handler.handle(body, context);
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify(answer));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    await fn(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, received, () => executed);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
}

test('createA2AClient({ policy, auth: { token } }) stamps the token on the card GET and on every JSON-RPC call, as a2aFetch() does', async () => {
  await withGuardedAgent(
    (_, authorization) => authorization === 'Bearer agent-T0k3n',
    async (origin, received, executed) => {
      const client = await createA2AClient(origin, {
        policy: definePolicy({ name: 'echo' }),
        auth: { token: 'agent-T0k3n' },
      });
      const reply = (await client.sendMessage(userMessage('hi'))) as { id?: string };
      assert.ok(typeof reply.id === 'string', `a task: ${inspect(reply)}`);
      await client.getTask({ tenant: '', id: reply.id } as never);
      assert.deepEqual(received, [
        { what: 'card', authorization: 'Bearer agent-T0k3n' },
        { what: 'SendMessage', authorization: 'Bearer agent-T0k3n' },
        { what: 'GetTask', authorization: 'Bearer agent-T0k3n' },
      ]);
      assert.equal(executed(), 1, 'the message ran once');
    },
  );
});

test('createA2AClient’s auth refreshes a refused token once, and the card GET and the calls after it share the new one', async () => {
  await withGuardedAgent(
    (_, authorization) => authorization === 'Bearer fresh-T0k3n',
    async (origin, received, executed) => {
      let refreshes = 0;
      const client = await createA2AClient(origin, {
        policy: definePolicy({ name: 'echo' }),
        auth: {
          token: 'stale-T0k3n',
          refresh: () => {
            refreshes++;
            return 'fresh-T0k3n';
          },
        },
      });
      await client.sendMessage(userMessage('hi'));
      assert.equal(refreshes, 1, 'one refresh, for the card’s 401');
      assert.deepEqual(
        received.map(({ what, authorization }) => `${what} ${authorization}`),
        ['card Bearer stale-T0k3n', 'card Bearer fresh-T0k3n', 'SendMessage Bearer fresh-T0k3n'],
      );
      assert.equal(executed(), 1, 'the message ran once');
    },
  );
});

test('a token the agent quotes back in a 401’s reason phrase and body is in no error createA2AClient or its calls throw', async () => {
  const token = 'opaque-T0k3n-9f8e7d6c5b4a3210';
  const renewed = 'opaque-R3n3w-0a1b2c3d4e5f6789';
  const options = () => ({
    policy: definePolicy({ name: 'echo', retry: false }),
    auth: { token, refresh: () => renewed },
  });
  const errors: unknown[] = [];
  // Every request refused: createA2AClient's card GET fails.
  await withGuardedAgent(
    () => false,
    async (origin) => {
      errors.push(await createA2AClient(origin, options()).catch((e: unknown) => e));
    },
  );
  // The card served, every call refused: the client's calls fail.
  await withGuardedAgent(
    (what) => what === 'card',
    async (origin, received) => {
      const client = await createA2AClient(origin, options());
      errors.push(await client.getTask({ tenant: '', id: 't1' } as never).catch((e: unknown) => e));
      errors.push(await client.sendMessage(userMessage('hi')).catch((e: unknown) => e));
      assert.ok(
        received.some(({ authorization }) => authorization === `Bearer ${renewed}`),
        'the renewed token was sent and refused too',
      );
    },
  );
  for (const error of errors) {
    assert.ok(error instanceof HttpStatusError, `an HttpStatusError: ${inspect(error)}`);
    assert.equal(error.status, 401);
    const shown = inspect(error, { depth: 10 });
    for (const sent of [token, renewed])
      assert.ok(!shown.includes(sent.slice(0, 12)), `the token ${sent} shown in ${shown}`);
  }
});

test('createA2AClient’s onEvent gets an attempt event, under its key, for the card GET and for each call', async () => {
  await withGuardedAgent(
    () => true,
    async (origin) => {
      const events: BreakwaterEvent[] = [];
      const client = await createA2AClient(origin, {
        policy: definePolicy({ name: 'echo' }),
        key: 'travel-agent',
        onEvent: (event) => events.push(event),
      });
      await client.sendMessage(userMessage('hi'));
      const attempts = events.filter((event) => event.type === 'attempt');
      assert.deepEqual(
        attempts.map(({ key, method, url }) => `${key} ${method} ${url}`),
        [`travel-agent GET ${origin}/.well-known/agent-card.json`, `travel-agent POST ${origin}/a2a`],
      );
    },
  );
});

test('createA2AClient without a policy refuses auth, onEvent and key with one TypeError naming each, before any request: only a policy’s chain uses them', async () => {
  await withCard(cardWith({ url: 'http://127.0.0.1:9/a2a' }), async (origin, requests) => {
    const error = await createA2AClient(origin, {
      auth: { token: 'agent-T0k3n' },
      onEvent: () => {},
      key: 'echo',
    }).catch((e: unknown) => e);
    assert.ok(error instanceof TypeError, `a TypeError: ${error}`);
    for (const option of ['auth', 'onEvent', 'key'])
      assert.match(error.message, new RegExp(`createA2AClient\\(\\)\\.${option}: needs a policy`));
    assert.ok(!error.message.includes('agent-T0k3n'), `the token shown in ${error.message}`);
    assert.equal(requests(), 0, 'nothing was sent');
  });
});
