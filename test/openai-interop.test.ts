import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import { definePolicy } from '../src/policy.ts';
import { withServer } from './helpers/server.ts';

const completion = JSON.stringify({
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 0,
  model: 'test-model',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
});

test('the OpenAI SDK on breakwater’s fetch: a 429 with retry-after-ms is waited out once, for the key', async () => {
  await withServer(
    (_req, index) =>
      index === 0
        ? {
            status: 429,
            headers: { 'retry-after-ms': '50', 'content-type': 'application/json' },
            body: '{"error":{"message":"slow down"}}',
          }
        : { status: 200, headers: { 'content-type': 'application/json' }, body: completion },
    async (server) => {
      const policy = definePolicy({ name: 'openai' });
      // The SDK's own retries are off: breakwater decides, honouring the server's delay.
      const client = new OpenAI({
        baseURL: `${server.origin}/v1`,
        apiKey: 'sk-test',
        fetch: policy.fetch(),
        maxRetries: 0,
      });
      const started = performance.now();
      const result = await client.chat.completions.create({
        model: 'test-model',
        messages: [{ role: 'user', content: 'hello' }],
      });
      assert.equal(result.choices[0]?.message.content, 'hi');
      assert.ok(performance.now() - started >= 45, 'performance.now() - started >= 45');
      assert.equal(server.requests.length, 2);
      assert.equal(server.requests[1]?.url, '/v1/chat/completions');
      assert.equal(policy.stats('openai').lastFailure?.serverMessage, 'slow down');
    },
  );
});

test('the OpenAI SDK on breakwater’s fetch: a POST answered 500 is not resent, and the SDK sees the status', async () => {
  await withServer(
    () => ({
      status: 500,
      headers: { 'content-type': 'application/json' },
      body: '{"error":{"message":"boom"}}',
    }),
    async (server) => {
      const client = new OpenAI({
        baseURL: `${server.origin}/v1`,
        apiKey: 'sk-test',
        fetch: definePolicy({ name: 'openai' }).fetch(),
        maxRetries: 0,
      });
      await assert.rejects(
        client.chat.completions.create({
          model: 'test-model',
          messages: [{ role: 'user', content: 'hello' }],
        }),
        (error: unknown) => error instanceof OpenAI.APIError && error.status === 500,
      );
      assert.equal(
        server.requests.length,
        1,
        'a chat completion may have run: not resent without an Idempotency-Key',
      );
    },
  );
});
