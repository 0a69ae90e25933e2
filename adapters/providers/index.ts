/**
 * @module
 * `breakwater/providers`: model provider SDKs on a breakwater policy. Client options
 * that plug the policy's fetch into the OpenAI, Anthropic and AI SDK clients and turn
 * their own retries off (so one call is never 3 × 3 requests), a policy config with
 * deadlines fit for model APIs, a typed reader for the providers' rate-limit headers,
 * and a converter from the SDKs' status errors to `HttpStatusError`.
 * Imports no provider SDK: everything is typed structurally.
 *
 * @example
 * ```ts
 * import OpenAI from 'openai';
 * import { definePolicy } from 'breakwater';
 * import { openaiOptions, providerConfig, readRateLimits, toHttpStatusError } from 'breakwater/providers';
 *
 * const policy = definePolicy(providerConfig({ name: 'openai' }));
 * const client = new OpenAI({ apiKey: process.env.OPENAI_API_KEY, ...openaiOptions(policy) });
 * try {
 *   const { data, response } = await client.chat.completions
 *     .create({ model: 'gpt-5-mini', messages: [{ role: 'user', content: 'Hi' }] })
 *     .withResponse();
 *   const answer = data.choices[0]?.message.content;
 *   const tokensLeft = readRateLimits(response.headers).tokens?.remaining;
 * } catch (error) {
 *   const waitMs = toHttpStatusError(error)?.retryAfterMs; // the server's requested wait, if it said one
 * }
 * ```
 */

export { toHttpStatusError } from './errors.ts';
export type { AiSdkProviderOptions, PresetOptions, StainlessClientOptions } from './presets.ts';
export { aiSdkOptions, anthropicOptions, openaiOptions, providerConfig } from './presets.ts';
export type { ProviderRateLimits, RateLimitWindow } from './rate-limits.ts';
export { readRateLimits } from './rate-limits.ts';

/** The subpath this module is published under. */
export const ADAPTER: 'breakwater/providers' = 'breakwater/providers';
