import assert from 'node:assert/strict';
import { test } from 'node:test';
// @ts-types="@ai-sdk/openai"
import { createOpenAI } from '@ai-sdk/openai';
// @ts-types="@anthropic-ai/sdk"
import Anthropic from '@anthropic-ai/sdk';
// @ts-types="ai"
import { APICallError, generateText, RetryError } from 'ai';
import { Hono } from 'hono';
import { streamSSE } from 'hono/streaming';
import OpenAI from 'openai';
import {
  aiSdkOptions,
  anthropicOptions,
  openaiOptions,
  providerConfig,
  toHttpStatusError,
} from '../adapters/providers/index.ts';
import { createFetch } from '../src/chain.ts';
import { CircuitOpenError, HttpStatusError } from '../src/errors.ts';
import { definePolicy } from '../src/policy.ts';
import { throwOnStatus } from '../src/status.ts';
import { withApp } from './helpers/hono-server.ts';

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
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(policy),
    });
    await assert.rejects(client.chat.completions.create(ask), (error: unknown) => {
      return error instanceof OpenAI.RateLimitError && error.status === 429;
    });
    assert.equal(seen.length, 2, 'the SDK must not retry on top of the policy');
    assert.deepEqual(
      seen.map((s) => s.retryCount),
      ['0', '0'],
      'both requests come from the SDK’s first attempt',
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
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(policy),
    });
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
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(definePolicy({ retry: FAST })),
    });
    const result = await client.responses.create({ model: 'test-model', input: 'hello' });
    assert.equal(result.output_text, 'hi');
    assert.equal(seen.length, 2);
  });
});

test('openaiOptions: a POST answered 500 without x-should-retry is not resent', async () => {
  const { app, seen } = provider('/v1/chat/completions', [json(500, openaiError('boom'))]);
  await withApp(app, async (server) => {
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(definePolicy({ retry: FAST })),
    });
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
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(definePolicy({ retry: FAST })),
    });
    const result = await client.chat.completions.create(ask);
    assert.equal(result.choices[0]?.message.content, 'hi');
    assert.equal(seen.length, 2);
  });
});

test('openaiOptions: a streamed completion is not cut by an attempt timeout shorter than the stream', async () => {
  const chunks = ['Hel', 'lo, ', 'wor', 'ld'];
  const app = new Hono();
  app.post('/v1/chat/completions', async (c) => {
    await c.req.text();
    return streamSSE(c, async (stream) => {
      for (const [index, content] of chunks.entries()) {
        await stream.sleep(40);
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
  await withApp(app, async (server) => {
    const policy = definePolicy({ timeout: { attemptMs: 50, totalMs: 60 } });
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(policy),
    });
    const started = performance.now();
    const stream = await client.chat.completions.create({ ...ask, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    assert.equal(text, 'Hello, world');
    assert.ok(performance.now() - started >= 150, 'the stream outlived both deadlines');
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
    const client = new Anthropic({
      baseURL: server.origin,
      apiKey: 'sk-ant-test',
      ...anthropicOptions(policy),
    });
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
    const client = new Anthropic({
      baseURL: server.origin,
      apiKey: 'sk-ant-test',
      ...anthropicOptions(definePolicy({ retry: FAST })),
    });
    const result = await client.messages.create(askClaude);
    assert.deepEqual(result.content, [{ type: 'text', text: 'hi' }]);
    assert.deepEqual(
      seen.map((s) => [s.method, s.path, s.retryCount]),
      [
        ['POST', '/v1/messages', '0'],
        ['POST', '/v1/messages', '0'],
      ],
    );
  });
});

test('anthropicOptions: a POST answered 529 without x-should-retry is not resent (it may have run)', async () => {
  const { app, seen } = provider('/v1/messages', [
    json(529, anthropicError('overloaded_error', 'Overloaded'), { 'retry-after': '0' }),
  ]);
  await withApp(app, async (server) => {
    const client = new Anthropic({
      baseURL: server.origin,
      apiKey: 'sk-ant-test',
      ...anthropicOptions(definePolicy({ retry: FAST })),
    });
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
    const openai = createOpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...aiSdkOptions(definePolicy({ retry: FAST })),
    });
    const result = await generateText({ model: openai.chat('test-model'), prompt: 'hello', maxRetries: 0 });
    assert.equal(result.text, 'hi');
    assert.equal(seen.length, 2);
  });
});

test('aiSdkOptions: with maxRetries: 0 a lasting 429 is sent twice in all under a 2-attempt policy, not 2 × 3 times', async () => {
  const { app, seen } = provider('/v1/chat/completions', [
    json(429, openaiError('slow down'), { 'retry-after-ms': '5' }),
  ]);
  await withApp(app, async (server) => {
    const openai = createOpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...aiSdkOptions(definePolicy({ retry: { attempts: 2, ...FAST } })),
    });
    await assert.rejects(
      generateText({ model: openai.chat('test-model'), prompt: 'hello', maxRetries: 0 }),
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
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(definePolicy({ retry: false }), {
        fetch: (input, init) => {
          baseCalls++;
          return fetch(input, init);
        },
        onEvent: (event) => events.push(`${event.type} ${'key' in event ? event.key : ''}`),
        key: 'openai-primary',
      }),
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
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(definePolicy({ retry: false })),
    });
    const error = await client.chat.completions.create(ask).catch((e: unknown) => e);
    assert.ok(error instanceof OpenAI.RateLimitError);
    const converted = toHttpStatusError(error);
    assert.ok(converted instanceof HttpStatusError);
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
    const client = new Anthropic({
      baseURL: server.origin,
      apiKey: 'sk-ant-test',
      ...anthropicOptions(definePolicy({ retry: false })),
    });
    const error = await client.messages.create(askClaude).catch((e: unknown) => e);
    assert.ok(error instanceof Anthropic.APIError);
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
    const openai = createOpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...aiSdkOptions(definePolicy({ retry: false })),
    });
    const error = await generateText({
      model: openai.chat('test-model'),
      prompt: 'hello',
      maxRetries: 0,
    }).catch((e: unknown) => e);
    assert.ok(APICallError.isInstance(error));
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
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(definePolicy({ retry: false }), {
        // A named key: a default (origin) key trips a core quirk that re-throws the
        // nested error as a TypeError (see the report on redactText).
        fetch: createFetch({ use: [throwOnStatus()], key: 'openai' }),
      }),
    });
    const error = await client.chat.completions.create(ask).catch((e: unknown) => e);
    assert.ok(error instanceof OpenAI.APIConnectionError, String(error));
    const converted = toHttpStatusError(error);
    assert.ok(converted instanceof HttpStatusError);
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
  assert.ok(refused instanceof OpenAI.APIConnectionError);
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
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(definePolicy({ retry: FAST })),
    });
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
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(definePolicy({ retry: false })),
    });
    await client.chat.completions.create(ask).catch(() => {});
    const error = await client.chat.completions.create(ask).catch((e: unknown) => e);
    assert.equal(seen.length, 1, 'the second call was not sent');
    assert.ok(error instanceof OpenAI.APIConnectionError);
    assert.equal((error as Error).cause instanceof CircuitOpenError, true);
    assert.equal(toHttpStatusError(error), undefined);
  });
});

test('toHttpStatusError finds the status under the AI SDK’s RetryError when its own retries were left on', async () => {
  const { app, seen } = provider('/v1/chat/completions', [
    json(503, openaiError('upstream busy'), { 'retry-after-ms': '1' }),
  ]);
  await withApp(app, async (server) => {
    const openai = createOpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...aiSdkOptions(definePolicy({ retry: false })),
    });
    const error = await generateText({
      model: openai.chat('test-model'),
      prompt: 'hello',
      maxRetries: 1,
    }).catch((e: unknown) => e);
    assert.ok(RetryError.isInstance(error));
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
