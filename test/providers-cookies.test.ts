import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inspect } from 'node:util';
import { createOpenAI } from '@ai-sdk/openai';
// @ts-types="@anthropic-ai/sdk"
import Anthropic from '@anthropic-ai/sdk';
import { generateText } from 'ai';
import OpenAI from 'openai';
import {
  aiSdkOptions,
  anthropicOptions,
  openaiOptions,
  toHttpStatusError,
} from '../adapters/providers/index.ts';
import { definePolicy } from '../src/policy.ts';
import { withServer } from './helpers/server.ts';

const COOKIE = 'gw_session=cookie0123456789abcdef';

test('a session cookie a failure response sets is not kept in the SDK’s error on any preset, which still has the status and the wait', async () => {
  // As an LLM gateway with session login (or Cloudflare's __cf_bm in front of a provider) does.
  const handler = () => ({
    status: 429,
    headers: {
      'content-type': 'application/json',
      'retry-after': '7',
      'set-cookie': [`${COOKIE}; Path=/; HttpOnly`],
    },
    body: JSON.stringify({ error: { message: 'slow down', type: 'rate_limit_error' } }),
  });
  await withServer(handler, async ({ origin }) => {
    // No pacing: the 429's wait would hold the next client's call.
    const policy = definePolicy({ retry: false, breaker: false });
    const errors = [
      await new OpenAI({ baseURL: `${origin}/v1`, apiKey: 'k', ...openaiOptions(policy) }).chat.completions
        .create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })
        .catch((e: unknown) => e),
      await new Anthropic({ baseURL: origin, apiKey: 'k', ...anthropicOptions(policy) }).messages
        .create({ model: 'm', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] })
        .catch((e: unknown) => e),
      await generateText({
        model: createOpenAI({ baseURL: `${origin}/v1`, apiKey: 'k', ...aiSdkOptions(policy) }).chat('m'),
        prompt: 'hi',
        maxRetries: 0,
      }).catch((e: unknown) => e),
    ];
    for (const error of errors) {
      const converted = toHttpStatusError(error);
      assert.equal(converted?.status, 429, String(error));
      assert.equal(converted.retryAfterMs, 7000, 'the wait survives');
      assert.doesNotMatch(
        inspect(error, { depth: 6 }),
        /cookie0123456789abcdef/,
        'no cookie in the error as logged',
      );
    }
  });
});
