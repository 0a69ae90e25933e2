import assert from 'node:assert/strict';
import { test } from 'node:test';
// @ts-types="@anthropic-ai/sdk"
import Anthropic from '@anthropic-ai/sdk';
import { Hono } from 'hono';
import OpenAI from 'openai';
import { anthropicOptions, openaiOptions, readRateLimits } from '../adapters/providers/index.ts';
import { definePolicy } from '../src/policy.ts';
import { MAX_DELAY_MS } from '../src/timing.ts';
import { withApp } from './helpers/hono-server.ts';

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

function serving(path: string, body: unknown, headers: Record<string, string>): Hono {
  const app = new Hono();
  app.post(path, async (c) => {
    await c.req.text(); // read, as a real server does (an unread body leaves a drain timer behind)
    return c.json(body, 200, headers);
  });
  return app;
}

test('readRateLimits reads the OpenAI SDK’s response headers: limits, remaining, Go-duration resets, request id', async () => {
  const completion = {
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 0,
    model: 'test-model',
    choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
  };
  await withApp(serving('/v1/chat/completions', completion, OPENAI_HEADERS), async (server) => {
    const client = new OpenAI({
      baseURL: `${server.origin}/v1`,
      apiKey: 'sk-test',
      ...openaiOptions(definePolicy()),
    });
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
  await withApp(serving('/v1/messages', message, ANTHROPIC_HEADERS), async (server) => {
    const client = new Anthropic({
      baseURL: server.origin,
      apiKey: 'sk-ant-test',
      ...anthropicOptions(definePolicy()),
    });
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
