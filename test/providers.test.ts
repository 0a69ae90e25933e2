import assert from 'node:assert/strict';
import { createServer as createTcpServer } from 'node:net';
import { test } from 'node:test';
import { gzipSync } from 'node:zlib';
// @ts-types="@ai-sdk/openai"
import { createOpenAI } from '@ai-sdk/openai';
// @ts-types="@anthropic-ai/sdk"
import Anthropic from '@anthropic-ai/sdk';
// @ts-types="ai"
import { APICallError, generateText, type LanguageModel, RetryError } from 'ai';
import { Hono } from 'hono';
import { streamSSE } from 'hono/streaming';
import OpenAI from 'openai';
import {
  aiSdkOptions,
  anthropicOptions,
  openaiOptions,
  type PresetOptions,
  providerConfig,
  readRateLimits,
  toHttpStatusError,
} from '../adapters/providers/index.ts';
import { createFetch } from '../src/chain.ts';
import { CircuitOpenError, HttpStatusError } from '../src/errors.ts';
import { definePolicy, type Policy } from '../src/policy.ts';
import { throwOnStatus } from '../src/status.ts';
import { MAX_DELAY_MS } from '../src/timing.ts';
import { announcedWindows } from './helpers/announced-windows.ts';
import { type AppServer, withApp } from './helpers/hono-server.ts';
import { always, type Handler, sequence, withServer } from './helpers/server.ts';
import { settledWithin } from './helpers/settled.ts';

/** A short retry schedule: tests wait milliseconds, not the default half second. */
const FAST = { backoff: { initialMs: 5, jitter: 'none' as const } };

const completion = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 0,
  model: 'test-model',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
};

const message = {
  id: 'msg_1',
  type: 'message',
  role: 'assistant',
  model: 'claude-test',
  content: [{ type: 'text', text: 'hi' }],
  stop_reason: 'end_turn',
  stop_sequence: null,
  usage: { input_tokens: 1, output_tokens: 1 },
};

const openaiError = (text: string) => ({
  error: { message: text, type: 'requests', code: null, param: null },
});
const anthropicError = (type: string, text: string) => ({ type: 'error', error: { type, message: text } });

/** What the fake provider saw: one entry per request, with the SDK's own retry counter. */
interface Seen {
  method: string;
  path: string;
  retryCount: string | null;
}

/**
 * A fake provider: every request to `path` is answered by the next of `answers`
 * (the last one repeats), and recorded.
 */
function provider(path: string, answers: Array<() => Response>): { app: Hono; seen: Seen[] } {
  const seen: Seen[] = [];
  const app = new Hono();
  app.all(path, async (c) => {
    // Read the body, as a real server does: one left unread makes @hono/node-server
    // start a drain timer when the connection closes, which Deno's sanitizer flags.
    await c.req.text();
    seen.push({
      method: c.req.method,
      path: c.req.path,
      retryCount: c.req.header('x-stainless-retry-count') ?? null,
    });
    return (answers[Math.min(seen.length, answers.length) - 1] as () => Response)();
  });
  return { app, seen };
}

const json =
  (status: number, body: unknown, headers: Record<string, string> = {}) =>
  () =>
    new Response(JSON.stringify(body), {
      status,
      headers: { 'content-type': 'application/json', ...headers },
    });

/** The OpenAI SDK on the preset, pointed at the fake provider. */
function openaiClient(server: AppServer, policy: Policy, options?: PresetOptions): OpenAI {
  return new OpenAI({ baseURL: `${server.origin}/v1`, apiKey: 'sk-test', ...openaiOptions(policy, options) });
}

/** The Anthropic SDK on the preset, pointed at the fake provider. */
function anthropicClient(server: AppServer, policy: Policy): Anthropic {
  return new Anthropic({ baseURL: server.origin, apiKey: 'sk-ant-test', ...anthropicOptions(policy) });
}

/** A chat model of the AI SDK's OpenAI provider on the preset, pointed at the fake provider. */
function aiSdkModel(server: AppServer, policy: Policy): LanguageModel {
  return createOpenAI({ baseURL: `${server.origin}/v1`, apiKey: 'sk-test', ...aiSdkOptions(policy) }).chat(
    'test-model',
  );
}

const ask = { model: 'test-model', messages: [{ role: 'user' as const, content: 'hello' }] };
const askClaude = {
  model: 'claude-test',
  max_tokens: 16,
  messages: [{ role: 'user' as const, content: 'hello' }],
};

test('openaiOptions: a 429 with retry-after-ms is sent twice in all under a 2-attempt policy, not 2 × 3 times', async () => {
  const { app, seen } = provider('/v1/chat/completions', [
    json(429, openaiError('slow down'), { 'retry-after-ms': '5' }),
  ]);
  await withApp(app, async (server) => {
    const policy = definePolicy({ retry: { attempts: 2, ...FAST } });
    const client = openaiClient(server, policy);
    await assert.rejects(client.chat.completions.create(ask), (error: unknown) => {
      return error instanceof OpenAI.RateLimitError && error.status === 429;
    });
    assert.equal(seen.length, 2, 'the SDK must not retry on top of the policy');
    assert.deepEqual(
      seen.map((s) => s.retryCount),
      ['0', '1'],
      'the SDK’s one attempt, sent twice by the policy: the resend counts the request before it',
    );
  });
});

test('openaiOptions: each resend says in x-stainless-retry-count how many requests went before it, as the SDK’s own retries would', async () => {
  // The SDK sends 0 on its first attempt; with its retries off every breakwater resend said 0
  // too, and a server counting retries by the header saw none.
  const { app, seen } = provider('/v1/chat/completions', [
    json(429, openaiError('slow down'), { 'retry-after-ms': '5' }),
    json(503, openaiError('busy'), { 'retry-after-ms': '5', 'x-should-retry': 'true' }),
    json(200, completion),
  ]);
  await withApp(app, async (server) => {
    const result = await openaiClient(server, definePolicy({ retry: FAST })).chat.completions.create(ask);
    assert.equal(result.choices[0]?.message.content, 'hi');
    assert.deepEqual(
      seen.map((s) => s.retryCount),
      ['0', '1', '2'],
    );
  });
});

test('openaiOptions: a resend after auth() refreshed the token on a 401 counts in x-stainless-retry-count too, and the next call starts again at 0', async () => {
  const { app, seen } = provider('/v1/chat/completions', [
    json(401, openaiError('expired')),
    json(200, completion),
  ]);
  await withApp(app, async (server) => {
    const client = openaiClient(server, definePolicy({ retry: FAST }), {
      auth: { token: 'old-token', refresh: () => 'new-token' },
    });
    await client.chat.completions.create(ask);
    await client.chat.completions.create(ask);
    assert.deepEqual(
      seen.map((s) => s.retryCount),
      ['0', '1', '0'],
    );
  });
});

test('openaiOptions: a first request keeps the x-stainless-retry-count it was given; one not written as a number is never renumbered', async () => {
  // A request's own headers override the SDK's count (buildHeaders): '1e3' went out as '1000'.
  const { app, seen } = provider('/v1/chat/completions', [
    json(429, openaiError('slow down'), { 'retry-after-ms': '5' }),
    json(200, completion),
  ]);
  await withApp(app, async (server) => {
    const client = openaiClient(server, definePolicy({ retry: FAST }));
    for (const count of ['1e3', '007', '3']) {
      await client.chat.completions.create(ask, { headers: { 'x-stainless-retry-count': count } });
    }
    assert.deepEqual(
      seen.map((s) => s.retryCount),
      ['1e3', '1e3', '007', '3'],
    );
  });
});

test('openaiOptions: a 429 with retry-after-ms then a 200 gives the completion after exactly 2 requests', async () => {
  const { app, seen } = provider('/v1/chat/completions', [
    json(429, openaiError('slow down'), { 'retry-after-ms': '30' }),
    json(200, completion),
  ]);
  await withApp(app, async (server) => {
    const policy = definePolicy({ name: 'openai', retry: FAST });
    const client = openaiClient(server, policy);
    const started = performance.now();
    const result = await client.chat.completions.create(ask);
    assert.equal(result.choices[0]?.message.content, 'hi');
    assert.ok(performance.now() - started >= 25, 'the server’s 30 ms were waited out');
    assert.equal(seen.length, 2);
    assert.equal(policy.stats('openai').lastFailure?.status, 429);
  });
});

test('openaiOptions: the Responses API goes through the policy too (429, then the response)', async () => {
  const response = {
    id: 'resp_1',
    object: 'response',
    created_at: 0,
    status: 'completed',
    model: 'test-model',
    output: [
      {
        type: 'message',
        id: 'msg_1',
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'output_text', text: 'hi', annotations: [] }],
      },
    ],
  };
  const { app, seen } = provider('/v1/responses', [
    json(429, openaiError('slow down'), { 'retry-after-ms': '5' }),
    json(200, response),
  ]);
  await withApp(app, async (server) => {
    const client = openaiClient(server, definePolicy({ retry: FAST }));
    const result = await client.responses.create({ model: 'test-model', input: 'hello' });
    assert.equal(result.output_text, 'hi');
    assert.equal(seen.length, 2);
  });
});

test('openaiOptions: a POST answered 500 without x-should-retry is not resent', async () => {
  const { app, seen } = provider('/v1/chat/completions', [json(500, openaiError('boom'))]);
  await withApp(app, async (server) => {
    const client = openaiClient(server, definePolicy({ retry: FAST }));
    await assert.rejects(
      client.chat.completions.create(ask),
      (error: unknown) => error instanceof OpenAI.InternalServerError && error.status === 500,
    );
    assert.equal(seen.length, 1, 'the completion may have run: not sent again');
  });
});

test('openaiOptions: a POST answered 500 with x-should-retry: true is resent, the server having said so', async () => {
  const { app, seen } = provider('/v1/chat/completions', [
    json(500, openaiError('boom'), { 'x-should-retry': 'true' }),
    json(200, completion),
  ]);
  await withApp(app, async (server) => {
    const client = openaiClient(server, definePolicy({ retry: FAST }));
    const result = await client.chat.completions.create(ask);
    assert.equal(result.choices[0]?.message.content, 'hi');
    assert.equal(seen.length, 2);
  });
});

test('openaiOptions: a streamed completion is not cut by an attempt timeout shorter than the stream', async () => {
  // The deadlines cover the wait for headers, which a loaded machine must not eat: a
  // warm-up request pays the process's cold start (a first request through the SDK takes
  // hundreds of ms there), and the stream is held open past the deadlines by the server's
  // clock: they run from before the request arrived, so what is sent TOTAL_MS + 50 ms after
  // its arrival comes after both, however late the timers fire.
  const ATTEMPT_MS = 200;
  const TOTAL_MS = 250;
  const chunks = ['Hel', 'lo, ', 'wor', 'ld'];
  let holdMs = 0;
  const app = new Hono();
  app.post('/v1/chat/completions', async (c) => {
    await c.req.text();
    const arrived = performance.now();
    return streamSSE(c, async (stream) => {
      for (const [index, content] of chunks.entries()) {
        // The first chunk at once, the rest once both deadlines have passed.
        if (index === 1) await stream.sleep(Math.max(0, arrived + holdMs - performance.now()));
        const chunk = {
          id: 'chatcmpl-1',
          object: 'chat.completion.chunk',
          created: 0,
          model: 'test-model',
          choices: [
            { index: 0, delta: { content }, finish_reason: index === chunks.length - 1 ? 'stop' : null },
          ],
        };
        await stream.writeSSE({ data: JSON.stringify(chunk) });
      }
      await stream.writeSSE({ data: '[DONE]' });
    });
  });
  const streamedText = async (client: OpenAI): Promise<string> => {
    let text = '';
    for await (const chunk of await client.chat.completions.create({ ...ask, stream: true })) {
      text += chunk.choices[0]?.delta.content ?? '';
    }
    return text;
  };
  await withApp(app, async (server) => {
    assert.equal(await streamedText(openaiClient(server, definePolicy({}))), 'Hello, world', 'the warm-up');
    holdMs = TOTAL_MS + 50;
    const policy = definePolicy({ timeout: { attemptMs: ATTEMPT_MS, totalMs: TOTAL_MS } });
    const started = performance.now();
    assert.equal(await streamedText(openaiClient(server, policy)), 'Hello, world');
    assert.ok(performance.now() - started >= holdMs, 'the stream outlived both deadlines');
  });
});

test('anthropicOptions: a 529 with retry-after and x-should-retry is sent twice in all under a 2-attempt policy', async () => {
  const { app, seen } = provider('/v1/messages', [
    json(529, anthropicError('overloaded_error', 'Overloaded'), {
      'retry-after': '0',
      'x-should-retry': 'true',
    }),
  ]);
  await withApp(app, async (server) => {
    const policy = definePolicy({ retry: { attempts: 2, ...FAST } });
    const client = anthropicClient(server, policy);
    await assert.rejects(client.messages.create(askClaude), (error: unknown) => {
      return error instanceof Anthropic.APIError && error.status === 529;
    });
    assert.equal(seen.length, 2, 'the SDK must not retry on top of the policy');
  });
});

test('anthropicOptions: a 529 with retry-after then a 200 gives the message after exactly 2 requests', async () => {
  const { app, seen } = provider('/v1/messages', [
    json(529, anthropicError('overloaded_error', 'Overloaded'), {
      'retry-after': '0',
      'x-should-retry': 'true',
    }),
    json(200, message),
  ]);
  await withApp(app, async (server) => {
    const client = anthropicClient(server, definePolicy({ retry: FAST }));
    const result = await client.messages.create(askClaude);
    assert.deepEqual(result.content, [{ type: 'text', text: 'hi' }]);
    assert.deepEqual(
      seen.map((s) => [s.method, s.path, s.retryCount]),
      [
        ['POST', '/v1/messages', '0'],
        ['POST', '/v1/messages', '1'],
      ],
    );
  });
});

test('anthropicOptions: a POST answered 529 without x-should-retry is not resent (it may have run)', async () => {
  const { app, seen } = provider('/v1/messages', [
    json(529, anthropicError('overloaded_error', 'Overloaded'), { 'retry-after': '0' }),
  ]);
  await withApp(app, async (server) => {
    const client = anthropicClient(server, definePolicy({ retry: FAST }));
    await assert.rejects(client.messages.create(askClaude), (error: unknown) => {
      return error instanceof Anthropic.APIError && error.status === 529;
    });
    assert.equal(seen.length, 1);
  });
});

test('aiSdkOptions: generateText through createOpenAI sees 2 requests for a 429 then a 200', async () => {
  const { app, seen } = provider('/v1/chat/completions', [
    json(429, openaiError('slow down'), { 'retry-after-ms': '5' }),
    json(200, completion),
  ]);
  await withApp(app, async (server) => {
    const model = aiSdkModel(server, definePolicy({ retry: FAST }));
    const result = await generateText({ model, prompt: 'hello', maxRetries: 0 });
    assert.equal(result.text, 'hi');
    assert.equal(seen.length, 2);
    // The AI SDK sends no x-stainless-retry-count: none is added to the resend.
    assert.deepEqual(
      seen.map((s) => s.retryCount),
      [null, null],
    );
  });
});

test('aiSdkOptions: with maxRetries: 0 a lasting 429 is sent twice in all under a 2-attempt policy, not 2 × 3 times', async () => {
  const { app, seen } = provider('/v1/chat/completions', [
    json(429, openaiError('slow down'), { 'retry-after-ms': '5' }),
  ]);
  await withApp(app, async (server) => {
    const model = aiSdkModel(server, definePolicy({ retry: { attempts: 2, ...FAST } }));
    await assert.rejects(
      generateText({ model, prompt: 'hello', maxRetries: 0 }),
      (error: unknown) => APICallError.isInstance(error) && error.statusCode === 429,
    );
    assert.equal(seen.length, 2);
  });
});

test('the presets pass onEvent, key and the fetch underneath to the policy', async () => {
  const { app } = provider('/v1/chat/completions', [json(200, completion)]);
  await withApp(app, async (server) => {
    const events: string[] = [];
    let baseCalls = 0;
    const client = openaiClient(server, definePolicy({ retry: false }), {
      fetch: (input, init) => {
        baseCalls++;
        return fetch(input, init);
      },
      onEvent: (event) => events.push(`${event.type} ${'key' in event ? event.key : ''}`),
      key: 'openai-primary',
    });
    await client.chat.completions.create(ask);
    assert.equal(baseCalls, 1);
    assert.ok(events.includes('attempt openai-primary'), `events: ${events.join(', ')}`);
  });
});

test('the presets reject a value that is not a policy, and unknown options, with a TypeError naming each', () => {
  assert.throws(
    () => openaiOptions({} as never),
    (error: unknown) =>
      error instanceof TypeError &&
      /openaiOptions\(policy\): must be a policy from definePolicy\(\)/.test(error.message),
  );
  assert.throws(
    () => anthropicOptions(definePolicy(), { retries: 3, onEvent: 'log' } as never),
    (error: unknown) =>
      error instanceof TypeError &&
      /unknown option "retries"/.test(error.message) &&
      /onEvent: must be a function/.test(error.message),
  );
});

test('providerConfig fills in model-API deadlines, keeps the user’s fields, and stays plain JSON for definePolicy', () => {
  assert.deepEqual(definePolicy(providerConfig()).resolved.timeout, { attemptMs: 300_000, totalMs: 540_000 });
  const config = providerConfig({ name: 'openai', timeout: { attemptMs: 60_000 }, retry: { attempts: 4 } });
  assert.deepEqual(config, {
    name: 'openai',
    timeout: { attemptMs: 60_000, totalMs: 540_000 },
    retry: { attempts: 4 },
  });
  assert.deepEqual(JSON.parse(JSON.stringify(definePolicy(config))), config);
  assert.equal(providerConfig({ timeout: false }).timeout, false);
  assert.throws(
    () => definePolicy(providerConfig({ timeout: 'long' } as never)),
    /definePolicy\(\)\.timeout/,
  );
});

test('toHttpStatusError on the OpenAI SDK’s RateLimitError gives the status, the wait, the message and the request id', async () => {
  const { app } = provider('/v1/chat/completions', [
    json(429, openaiError('Rate limit reached for requests'), {
      'retry-after-ms': '1500',
      'x-request-id': 'req_abc',
      'x-ratelimit-remaining-requests': '0',
    }),
  ]);
  await withApp(app, async (server) => {
    const client = openaiClient(server, definePolicy({ retry: false }));
    const error = await client.chat.completions.create(ask).catch((e: unknown) => e);
    assert.ok(error instanceof OpenAI.RateLimitError, 'error instanceof OpenAI.RateLimitError');
    const converted = toHttpStatusError(error);
    assert.ok(converted instanceof HttpStatusError, 'converted instanceof HttpStatusError');
    assert.equal(converted.status, 429);
    assert.equal(converted.retryable, true);
    assert.equal(converted.retryAfterMs, 1500);
    assert.equal(converted.serverMessage, 'Rate limit reached for requests');
    assert.equal(converted.headers['x-request-id'], 'req_abc');
    assert.equal(converted.cause, error);
  });
});

test('toHttpStatusError on the Anthropic SDK’s 529 error gives the status, the Retry-After wait and the message', async () => {
  const { app } = provider('/v1/messages', [
    json(529, anthropicError('overloaded_error', 'Overloaded'), {
      'retry-after': '7',
      'request-id': 'req_01',
    }),
  ]);
  await withApp(app, async (server) => {
    const client = anthropicClient(server, definePolicy({ retry: false }));
    const error = await client.messages.create(askClaude).catch((e: unknown) => e);
    assert.ok(error instanceof Anthropic.APIError, 'error instanceof Anthropic.APIError');
    const converted = toHttpStatusError(error);
    assert.equal(converted?.status, 529);
    assert.equal(converted?.retryable, true);
    assert.equal(converted?.retryAfterMs, 7000);
    assert.equal(converted?.serverMessage, 'Overloaded');
  });
});

test('toHttpStatusError on the AI SDK’s APICallError reads statusCode, responseHeaders and responseBody', async () => {
  const { app } = provider('/v1/chat/completions', [
    json(503, openaiError('upstream busy'), { 'retry-after': '3' }),
  ]);
  await withApp(app, async (server) => {
    const model = aiSdkModel(server, definePolicy({ retry: false }));
    const error = await generateText({
      model,
      prompt: 'hello',
      maxRetries: 0,
    }).catch((e: unknown) => e);
    assert.ok(APICallError.isInstance(error), 'APICallError.isInstance(error)');
    const converted = toHttpStatusError(error);
    assert.equal(converted?.status, 503);
    assert.equal(converted?.retryAfterMs, 3000);
    assert.equal(converted?.serverMessage, 'upstream busy');
    assert.match(converted?.body ?? '', /upstream busy/);
  });
});

test('toHttpStatusError returns breakwater’s own HttpStatusError from inside the SDK’s connection error', async () => {
  const { app } = provider('/v1/chat/completions', [json(503, openaiError('down'))]);
  await withApp(app, async (server) => {
    const client = openaiClient(server, definePolicy({ retry: false }), {
      fetch: createFetch({ use: [throwOnStatus()] }),
    });
    const error = await client.chat.completions.create(ask).catch((e: unknown) => e);
    assert.ok(error instanceof OpenAI.APIConnectionError, String(error));
    const converted = toHttpStatusError(error);
    assert.ok(converted instanceof HttpStatusError, 'converted instanceof HttpStatusError');
    assert.equal(converted, (error as Error).cause);
    assert.equal(converted.status, 503);
  });
});

test('toHttpStatusError returns undefined for what carries no failure status', async () => {
  const client = new OpenAI({
    baseURL: 'http://127.0.0.1:9/v1',
    apiKey: 'sk-test',
    ...openaiOptions(definePolicy({ retry: false })),
  });
  const refused = await client.chat.completions.create(ask).catch((e: unknown) => e);
  assert.ok(refused instanceof OpenAI.APIConnectionError, 'refused instanceof OpenAI.APIConnectionError');
  assert.equal(toHttpStatusError(refused), undefined);
  const looped: Error & { cause?: unknown } = new Error('loop');
  looped.cause = looped;
  const hostile = new Proxy(new Error('x'), {
    get() {
      throw new Error('trap');
    },
  });
  for (const [index, value] of [
    undefined,
    null,
    429,
    'HTTP 429',
    { status: 429 },
    new Error('x'),
    looped,
    hostile,
  ].entries()) {
    assert.equal(toHttpStatusError(value), undefined, `value #${index}`);
  }
  for (const status of [200, 302, 600, 429.5, '429']) {
    assert.equal(
      toHttpStatusError(Object.assign(new Error('x'), { status, headers: new Headers() })),
      undefined,
    );
  }
});

test('a 429 asking to wait longer than the policy allows reaches the caller as the SDK’s connection error; toHttpStatusError recovers the 429 and its wait', async () => {
  const { app, seen } = provider('/v1/chat/completions', [
    json(429, openaiError('daily limit reached'), { 'retry-after': '3600' }),
  ]);
  await withApp(app, async (server) => {
    const client = openaiClient(server, definePolicy({ retry: FAST }));
    const error = await client.chat.completions.create(ask).catch((e: unknown) => e);
    assert.ok(
      error instanceof OpenAI.APIConnectionError,
      'the policy failed fast instead of sleeping an hour',
    );
    assert.equal(seen.length, 1);
    const converted = toHttpStatusError(error);
    assert.equal(converted?.status, 429);
    assert.equal(converted?.retryAfterMs, 3_600_000);
  });
});

test('toHttpStatusError returns undefined when the policy’s paused key failed the call fast: nothing was sent', async () => {
  const { app, seen } = provider('/v1/chat/completions', [
    json(429, openaiError('daily limit reached'), { 'retry-after': '3600' }),
  ]);
  await withApp(app, async (server) => {
    const client = openaiClient(server, definePolicy({ retry: false }));
    await client.chat.completions.create(ask).catch(() => {});
    const error = await client.chat.completions.create(ask).catch((e: unknown) => e);
    assert.equal(seen.length, 1, 'the second call was not sent');
    assert.ok(error instanceof OpenAI.APIConnectionError, 'error instanceof OpenAI.APIConnectionError');
    assert.equal((error as Error).cause instanceof CircuitOpenError, true);
    assert.equal(toHttpStatusError(error), undefined);
  });
});

test('toHttpStatusError finds the status under the AI SDK’s RetryError when its own retries were left on', async () => {
  const { app, seen } = provider('/v1/chat/completions', [
    json(503, openaiError('upstream busy'), { 'retry-after-ms': '1' }),
  ]);
  await withApp(app, async (server) => {
    const model = aiSdkModel(server, definePolicy({ retry: false }));
    const error = await generateText({
      model,
      prompt: 'hello',
      maxRetries: 1,
    }).catch((e: unknown) => e);
    assert.ok(RetryError.isInstance(error), 'RetryError.isInstance(error)');
    assert.equal(seen.length, 2, 'the AI SDK retried once on its own');
    assert.equal(toHttpStatusError(error)?.status, 503);
  });
});

test('toHttpStatusError keeps at most 2 KiB of a huge AI SDK error body and 400 characters of its message', () => {
  const huge = 'x'.repeat(1_000_000);
  const error = new APICallError({
    message: huge,
    url: 'http://127.0.0.1/v1/chat/completions',
    requestBodyValues: {},
    statusCode: 500,
    responseHeaders: { 'retry-after': '2', 'bad header name': 'v', 'x-request-id': 'r\u0000' },
    responseBody: huge,
  });
  const converted = toHttpStatusError(error);
  assert.equal(converted?.status, 500);
  assert.equal(converted?.retryAfterMs, 2000);
  assert.equal(converted?.body.length, 2048);
  assert.equal(converted?.serverMessage?.length, 401);
});

const NOW = Date.UTC(2026, 0, 15, 12, 0, 0);

/** Headers as api.openai.com sends them on a chat completion. */
const OPENAI_HEADERS = {
  'x-request-id': 'req_7f3c0a',
  'x-ratelimit-limit-requests': '10000',
  'x-ratelimit-remaining-requests': '9999',
  'x-ratelimit-reset-requests': '6ms',
  'x-ratelimit-limit-tokens': '30000000',
  'x-ratelimit-remaining-tokens': '29999980',
  'x-ratelimit-reset-tokens': '1m2.5s',
};

/** Headers as api.anthropic.com sends them on a message. */
const ANTHROPIC_HEADERS = {
  'request-id': 'req_011CSHoEeqs5C35K2UUqR7Fy',
  'anthropic-ratelimit-requests-limit': '4000',
  'anthropic-ratelimit-requests-remaining': '3999',
  'anthropic-ratelimit-requests-reset': '2026-01-15T12:00:01Z',
  'anthropic-ratelimit-tokens-limit': '480000',
  'anthropic-ratelimit-tokens-remaining': '0',
  'anthropic-ratelimit-tokens-reset': '2026-01-15T12:00:07.250Z',
  'anthropic-ratelimit-input-tokens-limit': '400000',
  'anthropic-ratelimit-input-tokens-remaining': '0',
  'anthropic-ratelimit-input-tokens-reset': '2026-01-15T12:00:07.250Z',
  'anthropic-ratelimit-output-tokens-limit': '80000',
  'anthropic-ratelimit-output-tokens-remaining': '79990',
  'anthropic-ratelimit-output-tokens-reset': '2026-01-15T13:00:00+01:00',
};

test('readRateLimits reads the OpenAI SDK’s response headers: limits, remaining, Go-duration resets, request id', async () => {
  const { app } = provider('/v1/chat/completions', [json(200, completion, OPENAI_HEADERS)]);
  await withApp(app, async (server) => {
    const client = openaiClient(server, definePolicy());
    const { response } = await client.chat.completions
      .create({ model: 'test-model', messages: [{ role: 'user', content: 'hello' }] })
      .withResponse();
    assert.deepEqual(readRateLimits(response.headers, NOW), {
      requests: { limit: 10_000, remaining: 9_999, resetMs: 6, resetAt: new Date(NOW + 6) },
      tokens: { limit: 30_000_000, remaining: 29_999_980, resetMs: 62_500, resetAt: new Date(NOW + 62_500) },
      requestId: 'req_7f3c0a',
    });
  });
});

test('readRateLimits reads the Anthropic SDK’s response headers: four windows, RFC 3339 resets, the wait for the exhausted one', async () => {
  const { app } = provider('/v1/messages', [json(200, message, ANTHROPIC_HEADERS)]);
  await withApp(app, async (server) => {
    const client = anthropicClient(server, definePolicy());
    const { response } = await client.messages
      .create({ model: 'claude-test', max_tokens: 16, messages: [{ role: 'user', content: 'hello' }] })
      .withResponse();
    const at = (iso: string) => new Date(iso);
    assert.deepEqual(readRateLimits(response.headers, NOW), {
      requests: { limit: 4000, remaining: 3999, resetMs: 1000, resetAt: at('2026-01-15T12:00:01Z') },
      tokens: { limit: 480_000, remaining: 0, resetMs: 7250, resetAt: at('2026-01-15T12:00:07.250Z') },
      inputTokens: { limit: 400_000, remaining: 0, resetMs: 7250, resetAt: at('2026-01-15T12:00:07.250Z') },
      // 13:00 at +01:00 is 12:00 UTC: now, so no wait.
      outputTokens: { limit: 80_000, remaining: 79_990, resetMs: 0, resetAt: at('2026-01-15T12:00:00Z') },
      // The exhausted token windows ask for a wait (the core's retryDelay): their reset.
      retryAfterMs: 7250,
      requestId: 'req_011CSHoEeqs5C35K2UUqR7Fy',
    });
  });
});

test('readRateLimits takes a plain object with names in any case, and retry-after-ms as the wait', () => {
  assert.deepEqual(
    readRateLimits(
      { 'X-RateLimit-Remaining-Requests': '0', 'Retry-After-Ms': '1500', 'X-Request-Id': 'r1' },
      NOW,
    ),
    { requests: { remaining: 0 }, retryAfterMs: 1500, requestId: 'r1' },
  );
});

test('readRateLimits takes an SDK error’s headers as the SDKs type them, absent ones included', () => {
  // The README names them as inputs; an APICallError for a network failure and the
  // SDKs' connection errors carry none (typed `| undefined`): nothing to read, so {}.
  const network = new APICallError({ message: 'offline', url: 'http://x', requestBodyValues: {} });
  assert.deepEqual(readRateLimits(network.responseHeaders), {});
  assert.deepEqual(readRateLimits(new OpenAI.APIConnectionError({}).headers), {});
  assert.deepEqual(readRateLimits(new Anthropic.APIConnectionError({}).headers), {});
});

test('readRateLimits leaves out every garbage field and never throws', () => {
  const garbage = {
    'x-ratelimit-limit-requests': '-5',
    'x-ratelimit-remaining-requests': '1e3',
    'x-ratelimit-reset-requests': '-1s',
    'x-ratelimit-limit-tokens': '9'.repeat(400),
    'x-ratelimit-remaining-tokens': ' ',
    'x-ratelimit-reset-tokens': '5 minutes',
    'anthropic-ratelimit-requests-limit': '0x10',
    'anthropic-ratelimit-requests-reset': '2026-02-30T00:00:00Z',
    'anthropic-ratelimit-tokens-reset': `2026-01-15T12:00:00.${'1'.repeat(5000)}Z`,
    'anthropic-ratelimit-input-tokens-remaining': '12.5',
    'anthropic-ratelimit-output-tokens-reset': 'tomorrow',
    'retry-after': 'soon',
  };
  assert.deepEqual(readRateLimits(garbage, NOW), {});
  const hostile = new Proxy(
    {},
    {
      ownKeys() {
        throw new Error('trap');
      },
    },
  );
  for (const headers of [hostile, null, undefined, 42, 'x-ratelimit-limit-requests: 5', new Headers()]) {
    assert.deepEqual(readRateLimits(headers as never, NOW), {});
  }
});

test('readRateLimits caps a far reset at the longest delay a timer can wait, and keeps a past reset’s instant', () => {
  const limits = readRateLimits(
    {
      'x-ratelimit-reset-tokens': '99999999h',
      'anthropic-ratelimit-requests-reset': '2026-01-15T11:59:00Z',
    },
    NOW,
  );
  assert.deepEqual(limits, {
    tokens: { resetMs: MAX_DELAY_MS, resetAt: new Date(NOW + MAX_DELAY_MS) },
    requests: { resetMs: 0, resetAt: new Date('2026-01-15T11:59:00Z') },
  });
});

test('providerConfig passes a config that is not an object through untouched, for definePolicy to reject', () => {
  for (const bad of [null, 42, 'openai', ['x']]) {
    assert.equal(providerConfig(bad as never), bad);
    assert.throws(() => definePolicy(providerConfig(bad as never)), TypeError, `config ${String(bad)}`);
  }
});

test('providerConfig treats a timeout field set to undefined as not set: the preset’s deadline stays', () => {
  assert.deepEqual(
    definePolicy(providerConfig({ timeout: { attemptMs: undefined } } as never)).resolved.timeout,
    {
      attemptMs: 300_000,
      totalMs: 540_000,
    },
  );
});

test('readRateLimits takes the request id only as one token of visible ASCII, and falls back to request-id', () => {
  assert.deepEqual(readRateLimits({ 'x-request-id': '', 'request-id': 'req_2' }, NOW), {
    requestId: 'req_2',
  });
  const joined = new Headers([
    ['x-request-id', 'req_a'],
    ['x-request-id', 'req_b'],
  ]);
  assert.deepEqual(readRateLimits(joined, NOW), {}, 'two ids joined by ", " name no one request');
  for (const id of ['req_1\r\nx-injected: 1', 'req 1', 'req_\u00e9', 'req_\u0000']) {
    assert.deepEqual(readRateLimits({ 'x-request-id': id }, NOW), {}, JSON.stringify(id));
  }
});

test('toHttpStatusError keeps the status when the headers, the message or the body cannot be read', () => {
  const trap = () => {
    throw new Error('trap');
  };
  /** A status error whose `name` field is a getter that throws. */
  const throwing = (fields: object, name: string) =>
    Object.defineProperty(Object.assign(new Error('x'), fields), name, { get: trap });
  const cases: Array<[string, Error]> = [
    ['headers that are not pairs', Object.assign(new Error('x'), { status: 429, headers: [1, 2] })],
    [
      'headers whose traps throw',
      Object.assign(new Error('x'), {
        status: 429,
        headers: new Proxy({}, { has: trap, ownKeys: trap, get: trap }),
      }),
    ],
    ['a headers getter that throws', throwing({ status: 429 }, 'headers')],
    ['an error body getter that throws', throwing({ status: 429, headers: new Headers() }, 'error')],
    ['an AI SDK body getter that throws', throwing({ statusCode: 429 }, 'responseBody')],
    [
      'an AI SDK body that is an array',
      Object.assign(new Error('x'), { statusCode: 429, responseBody: ['x'] }),
    ],
  ];
  for (const [label, error] of cases) {
    const converted = toHttpStatusError(error);
    assert.ok(converted instanceof HttpStatusError, label);
    assert.equal(converted.status, 429, label);
    assert.equal(converted.retryable, true, label);
    assert.equal(converted.cause, error, label);
  }
});

test('anthropicOptions: a message that uses up the request quota holds the next call until its RFC 3339 reset, and the server sends no 429', async () => {
  const QUOTA_MS = 300;
  const arrivals: number[] = [];
  let resetAt = 0;
  let refused = 0;
  const app = new Hono();
  app.post('/v1/messages', async (c) => {
    await c.req.text();
    const now = Date.now();
    arrivals.push(now);
    if (now < resetAt) {
      refused++;
      return c.json(
        anthropicError('rate_limit_error', 'Number of requests has exceeded your rate limit'),
        429,
      );
    }
    resetAt = now + QUOTA_MS;
    // One request per window: this one used the quota up, as the headers say.
    return c.json(message, 200, {
      'anthropic-ratelimit-requests-limit': '1',
      'anthropic-ratelimit-requests-remaining': '0',
      'anthropic-ratelimit-requests-reset': new Date(resetAt).toISOString(),
    });
  });
  await withApp(app, async (server) => {
    const client = anthropicClient(server, definePolicy({ retry: FAST }));
    await client.messages.create(askClaude);
    const result = await client.messages.create(askClaude);
    assert.deepEqual(result.content, [{ type: 'text', text: 'hi' }]);
    assert.equal(refused, 0, 'no request was sent before the reset');
    assert.equal(arrivals.length, 2);
    const gap = (arrivals[1] ?? 0) - (arrivals[0] ?? 0);
    assert.ok(gap >= QUOTA_MS - 10, `the second call went ${gap} ms after the first, before the reset`);
  });
});

/**
 * A fake Anthropic API that is overloaded for `overloadMs` after its first request (the
 * default: for good): it answers 529 `overloaded_error` with `retry-after: 1` and
 * `x-should-retry: true`, as Anthropic does, then the message. Each call is named by its
 * prompt; the ledger counts the requests sent inside an announced Retry-After.
 */
function overloadedAnthropic(overloadMs = Number.POSITIVE_INFINITY) {
  const ledger = announcedWindows(
    async (c) => ((await c.req.json()) as { messages: { content: string }[] }).messages[0]?.content ?? '',
  );
  let first: number | undefined;
  const app = new Hono();
  app.use(ledger.middleware);
  app.post('/v1/messages', (c) => {
    first ??= Date.now();
    if (Date.now() - first >= overloadMs) return c.json(message);
    return c.json(anthropicError('overloaded_error', 'Overloaded'), 529 as 503, {
      'retry-after': '1',
      'x-should-retry': 'true',
    });
  });
  const client = (server: AppServer, policy: Policy) =>
    new Anthropic({
      baseURL: server.origin,
      apiKey: 'sk-ant-test',
      ...anthropicOptions(policy, { fetch: ledger.stamp() }),
    });
  const ask = (claude: Anthropic, prompt: string) =>
    claude.messages.create({ ...askClaude, messages: [{ role: 'user', content: prompt }] });
  return { app, ledger, client, ask };
}

test('anthropicOptions: a 529 overloaded_error with retry-after pauses the key: calls made meanwhile wait it out, none is sent into it, and every one gets its message', async () => {
  // Overloaded for 500 ms: over by the time the 1 s the first 529 asked for has passed.
  const anthropic = overloadedAnthropic(500);
  await withApp(anthropic.app, async (server) => {
    const policy = definePolicy(providerConfig());
    const claude = anthropic.client(server, policy);
    const calls = [anthropic.ask(claude, 'call 0')];
    while (anthropic.ledger.windows.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    // Five more calls while the server is overloaded, 50 ms apart, as an agent makes them.
    for (let i = 1; i <= 5; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      calls.push(anthropic.ask(claude, `call ${i}`));
    }
    // Every call settles before any assertion: none is left running into the next test.
    const results = await Promise.allSettled(calls);
    assert.deepEqual(
      results.map((r) => (r.status === 'fulfilled' ? r.value.content : String(r.reason))),
      Array(6).fill([{ type: 'text', text: 'hi' }]),
    );
    assert.deepEqual(anthropic.ledger.inside(), [], 'no request inside the announced Retry-After');
    // The first call twice (its 529, then its message), the other five once, after the pause.
    assert.deepEqual(
      anthropic.ledger.requests.map((r) => r.status),
      [529, 200, 200, 200, 200, 200, 200],
    );
    assert.equal(policy.stats(server.origin).breaker?.state, 'closed');
  });
});

test('anthropicOptions: a 529 that lasts past the retry attempts reaches the caller as the SDK’s 529 error, each resend after the announced wait; toHttpStatusError gives 529 and the wait', async () => {
  const anthropic = overloadedAnthropic();
  await withApp(anthropic.app, async (server) => {
    const claude = anthropic.client(server, definePolicy(providerConfig()));
    const error = await anthropic.ask(claude, 'call 0').catch((e: unknown) => e);
    assert.ok(error instanceof Anthropic.APIError && error.status === 529, String(error));
    assert.equal(anthropic.ledger.requests.length, 3, 'the default 3 attempts');
    assert.deepEqual(anthropic.ledger.inside(), [], 'each resend waited out the Retry-After');
    const converted = toHttpStatusError(error);
    assert.equal(converted?.status, 529);
    assert.equal(converted?.retryAfterMs, 1000);
    assert.equal(converted?.retryable, true);
    assert.equal(converted?.serverMessage, 'Overloaded');
  });
});

/** An app that answers every request `status` with `{ "error": message }`, as many OpenAI-compatible servers do. */
function stringError(status: number, message: string): Hono {
  const app = new Hono();
  app.post('*', async (c) => {
    await c.req.text();
    return c.json({ error: message }, status as 404);
  });
  return app;
}

test('toHttpStatusError reads an error body whose error is a string as the server’s message, through the OpenAI and Anthropic SDKs, as the core does', async () => {
  await withApp(stringError(404, "model 'tiny' not found"), async (server) => {
    const policy = definePolicy({ retry: false });
    const openai = new OpenAI({ baseURL: `${server.origin}/v1`, apiKey: 'k', ...openaiOptions(policy) });
    const claude = new Anthropic({ baseURL: server.origin, apiKey: 'k', ...anthropicOptions(policy) });
    const errors = [
      await openai.chat.completions
        .create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }] })
        .catch((e: unknown) => e),
      await claude.messages
        .create({ model: 'tiny', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] })
        .catch((e: unknown) => e),
    ];
    for (const error of errors) {
      const converted = toHttpStatusError(error);
      assert.ok(converted instanceof HttpStatusError, String(error));
      assert.equal(converted.status, 404);
      assert.equal(converted.serverMessage, "model 'tiny' not found");
    }
    // What the core reads from the same response, for comparison.
    const snapshot = policy.stats(server.origin).lastFailure;
    assert.equal(snapshot?.serverMessage, "model 'tiny' not found");
  });
});

test('toHttpStatusError reads the server’s message from the AI SDK’s responseBody when the provider found none, as the core does', async () => {
  // The AI SDK's providers read only their own error shape; for any other body their
  // APICallError's message is the reason phrase ('Not Found'), and the server's words
  // are only in responseBody.
  const bodies: Array<[string, () => Response]> = [
    ['{ error: string }', () => Response.json({ error: "model 'tiny' not found" }, { status: 404 })],
    ['plain text', () => new Response("model 'tiny' not found", { status: 404 })],
  ];
  for (const [shape, answer] of bodies) {
    const { app } = provider('/v1/chat/completions', [answer]);
    await withApp(app, async (server) => {
      const policy = definePolicy({ retry: false });
      const error = await generateText({
        model: aiSdkModel(server, policy),
        prompt: 'hi',
        maxRetries: 0,
      }).catch((e: unknown) => e);
      assert.ok(APICallError.isInstance(error), shape);
      const converted = toHttpStatusError(error);
      assert.equal(converted?.status, 404, shape);
      assert.equal(converted?.serverMessage, "model 'tiny' not found", shape);
      // What the core reads from the same response, for comparison.
      assert.equal(policy.stats(server.origin).lastFailure?.serverMessage, "model 'tiny' not found", shape);
    });
  }
});

test('toHttpStatusError keeps the status when a Headers object cannot be read (a subclass or proxy that throws)', () => {
  const trap = () => {
    throw new Error('trap');
  };
  class ThrowingHeaders extends Headers {
    override get(): string | null {
      return trap();
    }
    override entries(): HeadersIterator<[string, string]> {
      return trap();
    }
    override [Symbol.iterator](): HeadersIterator<[string, string]> {
      return this.entries();
    }
  }
  const cases: Array<[string, unknown]> = [
    ['a Headers subclass whose reads throw', new ThrowingHeaders({ 'retry-after': '1' })],
    [
      'a proxy of Headers whose get trap throws',
      new Proxy(new Headers({ 'retry-after': '1' }), { get: trap }),
    ],
  ];
  for (const [label, headers] of cases) {
    const error = Object.assign(new Error('x'), { status: 503, headers });
    const converted = toHttpStatusError(error);
    assert.ok(converted instanceof HttpStatusError, label);
    assert.equal(converted.status, 503, label);
    assert.equal(converted.retryable, true, label);
    assert.equal(converted.cause, error, label);
  }
});

/** An SSE body of OpenAI chat-completion chunks, one per piece of text. */
function completionChunks(...pieces: string[]): string {
  return pieces
    .map((content) => {
      const chunk = {
        id: 'chatcmpl-1',
        object: 'chat.completion.chunk',
        created: 0,
        model: 'test-model',
        choices: [{ index: 0, delta: { content }, finish_reason: null }],
      };
      return `data: ${JSON.stringify(chunk)}\n\n`;
    })
    .join('');
}

test('openaiOptions: a streamed completion that breaks after its first tokens fails the stream and is not sent again, even with idempotency keys on', async () => {
  await withServer(
    always({
      reset: 'mid-body',
      headers: { 'content-type': 'text/event-stream' },
      body: completionChunks('Hel', 'lo'),
    }),
    async (server) => {
      const policy = definePolicy({ retry: FAST, idempotencyKeys: true });
      const client = new OpenAI({
        baseURL: `${server.origin}/v1`,
        apiKey: 'sk-test',
        ...openaiOptions(policy),
      });
      let text = '';
      await assert.rejects(async () => {
        for await (const chunk of await client.chat.completions.create({ ...ask, stream: true })) {
          text += chunk.choices[0]?.delta.content ?? '';
        }
      });
      assert.equal(text, 'Hello', 'the tokens sent before the break were delivered');
      assert.equal(server.requests.length, 1, 'a stream that delivered tokens is never resent');
    },
  );
});

test('anthropicOptions: a streamed message that breaks after its first tokens fails the stream and is not sent again', async () => {
  const event = (type: string, data: object) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  await withServer(
    always({
      reset: 'mid-body',
      headers: { 'content-type': 'text/event-stream' },
      body:
        event('message_start', { message: { ...message, content: [], stop_reason: null } }) +
        event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
        event('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'Hel' } }),
    }),
    async (server) => {
      const client = new Anthropic({
        baseURL: server.origin,
        apiKey: 'sk-ant-test',
        ...anthropicOptions(definePolicy({ retry: FAST })),
      });
      let text = '';
      await assert.rejects(async () => {
        for await (const event of await client.messages.create({ ...askClaude, stream: true })) {
          if (event.type === 'content_block_delta' && event.delta.type === 'text_delta')
            text += event.delta.text;
        }
      });
      assert.equal(text, 'Hel', 'the tokens sent before the break were delivered');
      assert.equal(server.requests.length, 1, 'a stream that delivered tokens is never resent');
    },
  );
});

test('openaiOptions: a completion whose connection is reset after the server read it is not sent again; with idempotency keys on it is, under the same key', async () => {
  const answered = {
    status: 200,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(completion),
  };
  await withServer(sequence({ reset: 'after-read' }, answered), async (server) => {
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(definePolicy({ retry: FAST })),
    });
    const error = await client.chat.completions.create(ask).catch((e: unknown) => e);
    assert.ok(error instanceof OpenAI.APIConnectionError, String(error));
    assert.equal(server.requests.length, 1, 'the completion may have run: not sent again');
  });
  await withServer(sequence({ reset: 'after-read' }, answered), async (server) => {
    const policy = definePolicy({ retry: FAST, idempotencyKeys: true });
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(policy),
    });
    const result = await client.chat.completions.create(ask);
    assert.equal(result.choices[0]?.message.content, 'hi');
    const keys = server.requests.map((request) => request.headers['idempotency-key']);
    assert.equal(keys.length, 2);
    assert.ok(typeof keys[0] === 'string' && keys[0] === keys[1], `keys: ${keys.join(', ')}`);
  });
});

test('toHttpStatusError: a 401 is not retryable, nor a 503 the server marked x-should-retry: false', async () => {
  const { app } = provider('/v1/chat/completions', [
    json(401, openaiError('Incorrect API key provided')),
    json(503, openaiError('do not retry'), { 'x-should-retry': 'false', 'retry-after': '1' }),
  ]);
  await withApp(app, async (server) => {
    const client = openaiClient(server, definePolicy({ retry: false }));
    const unauthorized = toHttpStatusError(
      await client.chat.completions.create(ask).catch((e: unknown) => e),
    );
    assert.equal(unauthorized?.status, 401);
    assert.equal(unauthorized?.retryable, false);
    const refused = toHttpStatusError(await client.chat.completions.create(ask).catch((e: unknown) => e));
    assert.equal(refused?.status, 503);
    assert.equal(refused?.retryable, false, 'x-should-retry: false overrides the status rule');
  });
});

/** A call of each SDK (OpenAI, Anthropic, the AI SDK) on `server` through `policy`, not yet made. */
function everySdk(server: AppServer, policy: Policy): Array<() => Promise<unknown>> {
  return [
    () => openaiClient(server, policy).chat.completions.create(ask),
    () => anthropicClient(server, policy).messages.create(askClaude),
    () => generateText({ model: aiSdkModel(server, policy), prompt: 'hello', maxRetries: 0 }),
  ];
}

/**
 * A failure of `status` whose body stops after `body` and never ends; `headers` over a JSON
 * content-type.
 */
function stalling(status: number, headers: Record<string, string> = {}, body = '{"error":'): Handler {
  return always({
    stall: 'mid-body',
    status,
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
}

test('a failure body that stalls is ended at the policy’s capture.bodyWaitMs, so each SDK throws its status error instead of waiting on', async () => {
  await withServer(stalling(502), async (server) => {
    const policy = definePolicy({ retry: false, capture: { bodyWaitMs: 100 } });
    for (const call of everySdk(server, policy)) {
      const outcome = await settledWithin(2000, call());
      assert.equal(toHttpStatusError(outcome)?.status, 502, String(outcome));
    }
  });
});

/**
 * What one ask to the server at `origin` with `key` fails with, through each preset in
 * turn (OpenAI, Anthropic, the AI SDK), none retrying.
 */
async function presetErrors(origin: string, key: string): Promise<unknown[]> {
  const policy = definePolicy({ retry: false });
  return [
    await new OpenAI({ baseURL: `${origin}/v1`, apiKey: key, ...openaiOptions(policy) }).chat.completions
      .create(ask)
      .catch((e: unknown) => e),
    await new Anthropic({ baseURL: origin, apiKey: key, ...anthropicOptions(policy) }).messages
      .create(askClaude)
      .catch((e: unknown) => e),
    await generateText({
      model: createOpenAI({ baseURL: `${origin}/v1`, apiKey: key, ...aiSdkOptions(policy) }).chat('m'),
      prompt: 'hello',
      maxRetries: 0,
    }).catch((e: unknown) => e),
  ];
}

test('a key the server quotes back in a 401 is hidden from the SDK’s error and toHttpStatusError’s, on all three presets', async () => {
  const key = 'sk-proj-quoted0123456789abcdef';
  const app = new Hono();
  // As OpenAI-compatible servers do: the key as received, whole, in the message.
  app.post('*', async (c) => {
    await c.req.text();
    const sent = c.req.header('x-api-key') ?? c.req.header('authorization')?.replace('Bearer ', '');
    return c.json({ error: { message: `Incorrect API key provided: ${sent}.`, type: 'auth' } }, 401);
  });
  await withApp(app, async (server) => {
    const errors = await presetErrors(server.origin, key);
    for (const error of errors) {
      const converted = toHttpStatusError(error);
      assert.equal(converted?.status, 401, String(error));
      assert.match(converted.serverMessage ?? '', /^Incorrect API key provided: \[redacted\]\.$/);
      for (const shown of [
        (error as Error).message,
        converted.message,
        converted.body,
        JSON.stringify(converted),
      ])
        assert.doesNotMatch(shown, /quoted0123456789abcdef/);
    }
  });
});

test('a failure whose reason phrase the server wrote in UTF-8 reaches the SDK as its status error', async () => {
  // Node's fetch reads the phrase byte by byte into characters past 255, which a
  // Response cannot be built with.
  const phrase = Buffer.from('Überlastet – bitte später', 'utf8').toString('latin1');
  const body = '{"error":{"message":"overloaded now"}}';
  const answer = `HTTP/1.1 503 ${phrase}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`;
  const server = createTcpServer((socket) =>
    socket.once('data', () => socket.end(Buffer.from(answer, 'latin1'))),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = server.address() as { port: number };
    const client = new OpenAI({
      baseURL: `http://127.0.0.1:${port}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(definePolicy({ retry: false })),
    });
    const error = await client.chat.completions.create(ask).catch((e: unknown) => e);
    assert.equal(toHttpStatusError(error)?.status, 503, String(error));
    assert.equal(toHttpStatusError(error)?.serverMessage, 'overloaded now');
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});

test('a key the server quotes back in its reason phrase is hidden from the SDK’s error and toHttpStatusError’s, on all three presets', async () => {
  const key = 'sk-proj-phrase0123456789abcdef';
  // An old app server's 401: the credential as received in the reason phrase, no body.
  // The AI SDK takes the phrase for its error's message when the body is empty or not JSON.
  const server = createTcpServer((socket) =>
    socket.once('data', (data) => {
      const sent = /^(?:authorization: bearer|x-api-key:) *(\S+)/im.exec(data.toString())?.[1];
      socket.end(`HTTP/1.1 401 Invalid key ${sent}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`);
    }),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const origin = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    const errors = await presetErrors(origin, key);
    for (const error of errors) {
      const converted = toHttpStatusError(error);
      assert.equal(converted?.status, 401, String(error));
      for (const shown of [String(error), converted.message, JSON.stringify(converted)])
        assert.doesNotMatch(shown, /phrase0123456789abcdef/);
    }
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});

test('a caller who aborts while a failure body is still coming gets the SDK’s abort error, not a status error', async () => {
  await withServer(stalling(503), async (server) => {
    const client = openaiClient(server, definePolicy({ retry: false, capture: { bodyWaitMs: 5000 } }));
    const controller = new AbortController();
    const started = performance.now();
    setTimeout(() => controller.abort(), 100);
    const error = await client.chat.completions
      .create(ask, { signal: controller.signal })
      .catch((e: unknown) => e);
    assert.ok(error instanceof OpenAI.APIUserAbortError, String(error));
    assert.ok(performance.now() - started < 2000, 'the abort ended the read at once');
  });
});

test('a failure reaches the AI SDK as its status error when the caller’s signal is a polyfill’s, with no throwIfAborted()', async () => {
  // node-fetch v2's abort-controller: `aborted` and an abort event, no reason, no
  // throwIfAborted(). The AI SDK hands the caller's abortSignal to the fetch as it is.
  class PolyfillSignal extends EventTarget {
    aborted = false;
    onabort = null;
  }
  const { app, seen } = provider('/v1/chat/completions', [json(400, openaiError('bad request'))]);
  await withApp(app, async (server) => {
    const error = await generateText({
      model: aiSdkModel(server, definePolicy({ retry: false })),
      prompt: 'hello',
      maxRetries: 0,
      abortSignal: new PolyfillSignal() as unknown as AbortSignal,
    }).catch((e: unknown) => e);
    assert.ok(APICallError.isInstance(error), String(error));
    assert.equal(error.statusCode, 400);
    assert.equal(seen.length, 1);
  });
});

test('a failure body that stalls holds each SDK’s error for capture.bodyWaitMs once, not once in the capture and again in the preset', async () => {
  const waitMs = 500;
  await withServer(stalling(503, { 'retry-after': '7' }), async (server) => {
    // No breaker: the Retry-After would pace the key, holding the next SDK's call.
    const policy = definePolicy({ retry: false, breaker: false, capture: { bodyWaitMs: waitMs } });
    for (const call of everySdk(server, policy)) {
      const started = performance.now();
      const error = await call().catch((e: unknown) => e);
      const took = performance.now() - started;
      assert.equal(toHttpStatusError(error)?.status, 503, String(error));
      assert.equal(toHttpStatusError(error)?.retryAfterMs, 7000, 'Retry-After still reaches the SDK');
      assert.ok(took < waitMs * 1.5, `took ${Math.round(took)} ms for a ${waitMs} ms wait`);
    }
  });
});

test('a failure body that stalls under a status outside 400-599 (600, a 302 without Location) is ended at capture.bodyWaitMs too: the SDKs read every answer that is not ok', async () => {
  const sockets = new Set<import('node:net').Socket>();
  for (const status of ['600 Weird', '302 Found']) {
    // Chunked: the first bytes of the body, then nothing, ever.
    const head = `HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{"err\r\n`;
    const server = createTcpServer((socket) => {
      sockets.add(socket);
      socket.once('data', () => socket.write(head));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as { port: number };
      const policy = definePolicy({ retry: false, breaker: false, capture: { bodyWaitMs: 100 } });
      const calls = [
        () =>
          new OpenAI({
            baseURL: `http://127.0.0.1:${port}/v1`,
            apiKey: 'sk-test',
            ...openaiOptions(policy),
          }).chat.completions.create(ask),
        () =>
          generateText({
            model: createOpenAI({
              baseURL: `http://127.0.0.1:${port}/v1`,
              apiKey: 'k',
              ...aiSdkOptions(policy),
            }).chat('m'),
            prompt: 'hello',
            maxRetries: 0,
          }),
      ];
      for (const call of calls) {
        const outcome = await settledWithin(2000, call());
        const error = outcome as { status?: number; statusCode?: number };
        assert.equal(
          error.status ?? error.statusCode,
          Number.parseInt(status, 10),
          `${status}: ${String(outcome)}`,
        );
      }
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  }
});

/** A stack trace in the error's details: the body is longer than capture.bodyBytes (2 KiB by default). */
const longDetail = Array.from({ length: 80 }, (_, i) => `    at handler (/srv/app/route.js:${i}:7)`).join(
  '\n',
);

test('an error body longer than capture.bodyBytes still reaches each SDK as its typed error, with its type and code', async () => {
  const app = new Hono();
  app.post('/v1/chat/completions', () =>
    Response.json(
      {
        error: {
          message: 'slow down',
          type: 'requests',
          code: 'rate_limit_exceeded',
          param: null,
          longDetail,
        },
      },
      { status: 429 },
    ),
  );
  app.post('/v1/messages', () =>
    Response.json(
      { type: 'error', error: { type: 'authentication_error', message: 'invalid x-api-key', longDetail } },
      { status: 401 },
    ),
  );
  await withApp(app, async (server) => {
    const policy = definePolicy({ retry: false, breaker: false });
    assert.ok(
      JSON.stringify(longDetail).length > policy.resolved.capture.bodyBytes,
      'JSON.stringify(longDetail).length > policy.resolved.capture.bodyBytes',
    );
    const openai = await openaiClient(server, policy)
      .chat.completions.create(ask)
      .catch((e: unknown) => e);
    assert.ok(openai instanceof OpenAI.RateLimitError, String(openai));
    assert.equal(openai.code, 'rate_limit_exceeded');
    assert.equal(openai.type, 'requests');
    const anthropic = await anthropicClient(server, policy)
      .messages.create(askClaude)
      .catch((e: unknown) => e);
    assert.ok(anthropic instanceof Anthropic.AuthenticationError, String(anthropic));
    assert.equal((anthropic.error as { error?: { type?: string } }).error?.type, 'authentication_error');
    const aiSdk = await generateText({
      model: aiSdkModel(server, policy),
      prompt: 'hello',
      maxRetries: 0,
    }).catch((e: unknown) => e);
    assert.ok(APICallError.isInstance(aiSdk), String(aiSdk));
    assert.equal(aiSdk.message, 'slow down');
    assert.equal((aiSdk.data as { error?: { code?: string } }).error?.code, 'rate_limit_exceeded');
  });
});

test('a failure body the capture snapshot holds whole is not read, hidden and redacted a second time for the SDK', async () => {
  const app = new Hono();
  app.post('*', () =>
    Response.json(openaiError('see https://status.example.com/?token=s3cr3t-v4lue'), { status: 400 }),
  );
  await withApp(app, async (server) => {
    let clones = 0;
    // Every read of a failure body for its text (capture's snapshot, the preset's) reads a clone.
    const counting = (input: RequestInfo | URL, init?: RequestInit) =>
      fetch(input, init).then((response) => {
        const clone = response.clone.bind(response);
        return Object.defineProperty(response, 'clone', {
          value: () => {
            clones += 1;
            return clone();
          },
        });
      });
    const error = await openaiClient(server, definePolicy({ retry: false }), { fetch: counting })
      .chat.completions.create(ask)
      .catch((e: unknown) => e);
    assert.ok(error instanceof OpenAI.BadRequestError, String(error));
    assert.equal(error.type, 'requests');
    assert.doesNotMatch(error.message, /s3cr3t/);
    assert.equal(clones, 1, 'the body was read once, by the capture');
  });
});

test('a failure body in another charset reaches the OpenAI SDK decoded in it, and labelled UTF-8, alike short or past capture.bodyBytes; a gzipped or empty one as it does without the preset', async () => {
  // The SDK reads any body as UTF-8 (text()). A short body reached it as the snapshot read
  // it and a long one as read whole: both decoded as UTF-8 ('Requ\uFFFDte'), and once the
  // snapshot read the charset, only the short one was decoded.
  const said = (message: string, detail = '') =>
    JSON.stringify({ error: { message, type: 't', code: 'c', detail } });
  const answer = (body: Uint8Array | null, headers: Record<string, string>) => () =>
    new Response(body && new Uint8Array(body), { status: 400, headers });
  const latin1 = { 'content-type': 'application/json; charset=iso-8859-1' };
  const utf16 = { 'content-type': 'application/json;Charset="UTF-16LE"' };
  const utf16le = (text: string) => Buffer.from(text, 'utf16le');
  const gzip = { 'content-type': 'application/json', 'content-encoding': 'gzip' };
  const decoded: Record<string, () => Response> = {
    latin1: answer(Buffer.from(said('Requête refusée'), 'latin1'), latin1),
    'latin1-long': answer(Buffer.from(said('Requête refusée', longDetail), 'latin1'), latin1),
    utf16: answer(utf16le(said('Requête refusée')), utf16),
    'utf16-long': answer(utf16le(said('Requête refusée', longDetail)), utf16),
  };
  const answers: Record<string, () => Response> = {
    ...decoded,
    gzip: answer(gzipSync(said('zipped')), gzip),
    'gzip-long': answer(gzipSync(said('zipped', longDetail)), gzip),
    empty: answer(null, {}),
  };
  const app = new Hono();
  app.post('/:kind/v1/*', (c) => (answers[c.req.param('kind')] as () => Response)());
  await withApp(app, async (server) => {
    for (const kind of Object.keys(answers)) {
      const seen = [];
      for (const options of [openaiOptions(definePolicy({ retry: false })), { maxRetries: 0 }]) {
        const error = await new OpenAI({
          baseURL: `${server.origin}/${kind}/v1`,
          apiKey: 'sk-test',
          ...options,
        }).chat.completions
          .create(ask)
          .catch((e: unknown) => e);
        assert.ok(error instanceof OpenAI.BadRequestError, `${kind}: ${String(error)}`);
        seen.push({ message: error.message, code: error.code, type: error.type, headers: error.headers });
      }
      const [preset, alone] = seen as [(typeof seen)[0], (typeof seen)[0]];
      if (kind in decoded) {
        assert.deepEqual(
          { message: preset.message, code: preset.code, type: preset.type },
          { message: '400 Requête refusée', code: 'c', type: 't' },
          kind,
        );
        assert.equal(preset.headers.get('content-type'), 'application/json; charset=utf-8', kind);
      } else {
        assert.deepEqual({ ...preset, headers: 0 }, { ...alone, headers: 0 }, kind);
      }
    }
  });
});

test('a failure body of type text/event-stream reaches the SDK empty and at once, as the README says, even when the stream stays open', async () => {
  await withServer(
    stalling(
      429,
      { 'content-type': 'text/event-stream' },
      'event: error\ndata: {"error":{"message":"slow down"}}\n\n',
    ),
    async (server) => {
      const policy = definePolicy({ retry: false, breaker: false, capture: { bodyWaitMs: 1000 } });
      const started = performance.now();
      const error = await openaiClient(server, policy)
        .chat.completions.create(ask)
        .catch((e: unknown) => e);
      const took = performance.now() - started;
      assert.ok(error instanceof OpenAI.RateLimitError, String(error));
      assert.equal(error.message, '429 status code (no body)');
      assert.ok(took < 500, `took ${Math.round(took)} ms: the stream was waited for`);
    },
  );
});

test('the SDKs’ FormData check before their first upload (fetch("data:,")) is not the probe of a half-open circuit: the upload is, and other calls wait for its answer', async () => {
  // The OpenAI and Anthropic SDKs ask their fetch once, before the first upload, whether it
  // encodes FormData, by fetching `data:,` (internal/uploads.js, supportsFormData). Through
  // the policy, under the provider's key (`name`), that local answer was a success: it
  // closed a half-open circuit the provider had not answered, and the next call went out.
  const sdks = [
    {
      name: 'openai',
      client: (origin: string, policy: Policy, fetch: PresetOptions['fetch']) =>
        new OpenAI({ baseURL: `${origin}/v1`, apiKey: 'sk-test', ...openaiOptions(policy, { fetch }) }),
      list: (client: OpenAI) => client.models.list(),
      upload: (client: OpenAI) =>
        client.files.create({ file: new File(['{}\n'], 'batch.jsonl'), purpose: 'batch' }),
      uploaded: {
        id: 'file-1',
        object: 'file',
        bytes: 3,
        created_at: 0,
        filename: 'batch.jsonl',
        purpose: 'batch',
      },
    },
    {
      name: 'anthropic',
      client: (origin: string, policy: Policy, fetch: PresetOptions['fetch']) =>
        new Anthropic({ baseURL: origin, apiKey: 'sk-ant-test', ...anthropicOptions(policy, { fetch }) }),
      list: (client: Anthropic) => client.models.list(),
      upload: (client: Anthropic) => client.beta.files.upload({ file: new File(['hi'], 'notes.txt') }),
      uploaded: {
        id: 'file_1',
        type: 'file',
        filename: 'notes.txt',
        mime_type: 'text/plain',
        size_bytes: 2,
        created_at: '2026-01-01T00:00:00Z',
      },
    },
  ] as const;
  for (const sdk of sdks) {
    let lists = 0;
    // The fetch underneath answers `data:` itself with no body: the SDK reads only the
    // response's constructor, and a body left unread fails Deno's resource sanitizer.
    const checks: string[] = [];
    const underneath: PresetOptions['fetch'] = (input, init) => {
      if (String(input).startsWith('data:')) {
        checks.push(String(input));
        return Promise.resolve(new Response(null));
      }
      return fetch(input, init);
    };
    let arrived!: () => void;
    const uploadArrived = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const app = new Hono();
    app.get('/v1/models', (c) => {
      lists++;
      return c.json(openaiError('down'), 503);
    });
    app.post('/v1/files', async (c) => {
      await c.req.text();
      arrived();
      await released;
      return c.json(sdk.uploaded);
    });
    await withApp(app, async (server) => {
      const policy = definePolicy({
        name: sdk.name,
        retry: false,
        breaker: { consecutiveFailures: 1, open: { initialMs: 100, jitter: 'none' } },
      });
      // biome-ignore lint/suspicious/noExplicitAny: one loop over two SDKs' clients
      const client = sdk.client(server.origin, policy, underneath) as any;
      await assert.rejects(sdk.list(client)); // the 503 opens the circuit
      assert.equal(policy.stats(sdk.name).breaker?.state, 'open');
      await new Promise((resolve) => setTimeout(resolve, 250)); // past the 100 ms open time
      const upload = sdk.upload(client);
      try {
        await uploadArrived;
        // The upload is the half-open probe, still unanswered: another call fails fast.
        const error = await sdk.list(client).catch((e: unknown) => e);
        assert.equal((error as Error).cause instanceof CircuitOpenError, true, `${sdk.name}: ${error}`);
        assert.equal(lists, 1, `${sdk.name}: nothing sent to the server while the probe is out`);
      } finally {
        release();
        await upload;
      }
      assert.equal(
        policy.stats(sdk.name).breaker?.state,
        'closed',
        `${sdk.name}: the upload's answer closed it`,
      );
      assert.deepEqual(checks, ['data:,'], `${sdk.name}: the SDK's check reached the fetch underneath, once`);
    });
  }
});
