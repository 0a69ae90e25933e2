import assert from 'node:assert/strict';
import { test } from 'node:test';
// @ts-types="@anthropic-ai/sdk"
import Anthropic from '@anthropic-ai/sdk';
import { Hono } from 'hono';
import OpenAI from 'openai';
import { anthropicOptions, openaiOptions, toHttpStatusError } from '../adapters/providers/index.ts';
import { HttpStatusError } from '../src/errors.ts';
import { definePolicy } from '../src/policy.ts';
import { withApp } from './helpers/hono-server.ts';

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
