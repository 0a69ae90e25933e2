/**
 * @module
 * Client options that put a breakwater policy under a model provider's SDK and turn
 * the SDK's own retries off, plus a policy config tuned for model APIs.
 *
 * Why the SDK's retries must go: the OpenAI and Anthropic SDKs retry twice by
 * default, and so does the AI SDK per `generateText` / `streamText` call. With
 * breakwater's fetch underneath, every SDK attempt runs breakwater's retries, so one
 * call becomes up to 3 × 3 = 9 requests, and the SDK's own waits ignore the breaker,
 * the pacing and the retry budget. One layer decides: breakwater.
 */

import * as z from 'zod/mini';
import { cappedFailure } from '../../src/body-limit.ts';
import { abortReason, type Call, dropBody, type FetchLike, type Next } from '../../src/call.ts';
import { clientOptionsShape, policySchema, validate } from '../../src/options.ts';
import type { Policy, PolicyClientOptions, PolicyConfig } from '../../src/policy.ts';
import { redactText } from '../../src/redact.ts';
import {
  bodyText,
  hideSent,
  SNAPSHOT,
  type Snapshotted,
  sdkFailureBody,
  utf8Type,
} from '../../src/status.ts';
import type { TimeoutOptions } from '../../src/timeout.ts';

/**
 * The wait for one attempt's response headers in {@link providerConfig}: 5 minutes.
 * A non-streaming completion sends its headers only when the whole answer is ready,
 * which takes minutes for long or reasoning-heavy outputs; the core's 30 s would cut
 * it (and a POST cut that way is not resent). Node's fetch (undici) stops waiting for
 * headers after 300 s anyway, so longer buys nothing there.
 */
const PROVIDER_ATTEMPT_MS = 300_000;

/**
 * The wait for the whole call in {@link providerConfig}, retries and server-requested
 * waits included: 9 minutes. Under the OpenAI and Anthropic SDKs' own 10-minute
 * `timeout` (which, around breakwater's fetch, covers the same span), so breakwater's
 * deadline fires first: its `TimeoutError` names the server and counts toward the
 * breaker, while the SDK's abort would count as the caller giving up.
 */
const PROVIDER_TOTAL_MS = 540_000;

/**
 * Where the OpenAI and Anthropic SDKs (Stainless) put the number of their earlier attempts
 * at a request, on every request: 0 on their first. Servers read it to tell retries apart.
 */
const RETRY_COUNT = 'x-stainless-retry-count';

/** What {@link openaiOptions}, {@link anthropicOptions} and {@link aiSdkOptions} take besides the policy. */
export interface PresetOptions extends PolicyClientOptions {}

/** Client options for the OpenAI and Anthropic SDKs: spread them into the client's constructor options. */
export interface StainlessClientOptions {
  /** The policy's fetch: every request of the client passes the breakwater chain. */
  fetch: FetchLike;
  /** Always 0: the SDK's own retries are off, breakwater's policy retries. */
  maxRetries: 0;
}

/** Client options for the AI SDK's providers (`createOpenAI`, `createAnthropic`, ...). */
export interface AiSdkProviderOptions {
  /** The policy's fetch: every request of the provider passes the breakwater chain. */
  fetch: FetchLike;
}

// auth() checks its own options in full; here only that `auth` is an object.
const presetOptionsSchema = z.optional(z.strictObject(clientOptionsShape));

/**
 * The policy's fetch for one SDK client, after checking the arguments. A failure
 * response (any status but 2xx and 304) reaches the SDK with its body read here: the
 * capture snapshot's (`capture.bodyBytes`, default 2 KiB, on one line, redacted as
 * breakwater's errors are), or, for a JSON error longer than that, the whole body
 * (at most 64 KiB) read as the snapshot is, all within the policy's
 * `capture.bodyWaitMs` (default 1 s, counted from the headers, the capture's own read
 * included). The SDKs read a failure's
 * whole body into their error, and their `timeout` covers only the wait for headers,
 * so an error page that never ends would hold the call (and grow its memory) for good.
 */
function policyFetch(where: string, policy: Policy, options: PresetOptions | undefined): FetchLike {
  validate(policySchema, policy, `${where}(policy)`);
  const { fetch, ...rest } = validate(presetOptionsSchema, options, `${where}(policy, options)`) ?? {};
  const waitMs = policy.resolved.capture.bodyWaitMs;
  /** Per call the SDK numbers, by the headers that call owns: the count its next request carries. */
  const counts = new WeakMap<object, number>();
  // Outermost: only the response the SDK gets (retry cancels the bodies it drops).
  const capFailures = async function capFailures(call: Call, next: Next): Promise<Response> {
    // With the SDK's retries off, every request says 0 in RETRY_COUNT, breakwater's resends
    // too: a server counting retries by it saw none. The call gets headers of its own here
    // (a copy, once per call the SDK numbers), in which the fetch underneath numbers each
    // request it sends: resends that never went out (a breaker's refusal) count for nothing.
    // A count not written as a number (NaN, '007', '1e3': a request's own headers override
    // the SDK's) is left as it came: the first request carries the count it was given.
    const given = call.header(RETRY_COUNT);
    if (given && `${+given}` === given) {
      call.setHeader(RETRY_COUNT, given);
      counts.set((call.init as RequestInit).headers as Headers, +given);
    }
    const response = await next(call);
    const { status, statusText, headers } = response;
    // The SDKs read the body of every answer that is not ok into their error: a 3xx fetch
    // did not follow (no Location) and a status past 599 (fetch passes up to 999) too.
    // A 304 has no body, nor an opaque redirect (status 0); a success (a stream above
    // all) is never touched.
    if (status < 300 || status === 304) return response;
    // The policy's capture (innermost) waited for this body already, from when its headers
    // came: the read here gets what is left of that wait, so a stalled body holds the SDK
    // for bodyWaitMs in all, not twice. A response no capture saw gets the whole wait.
    const said = (response as Snapshotted)[SNAPSHOT];
    const body = await sdkFailureBody(call, said?.body, async () =>
      // An event stream may never end: unread, as a snapshot leaves it, so the SDK gets it
      // empty at once. A body that breaks keeps the snapshot's start (none without one).
      response.headers.get('content-type')?.toLowerCase().includes('text/event-stream')
        ? ''
        : // In the charset its Content-Type names, as the snapshot's start is: a short body
          // and a long one reach the SDK alike (see bodyText).
          bodyText(cappedFailure(response, (said?.at ?? Date.now()) + waitMs - Date.now(), call)).catch(
            () => '',
          ),
    );
    // Unread when the snapshot held it all, or an event stream (else cappedFailure let it go).
    dropBody(response);
    // A caller who gave up while the body was read gets the abort, not a status error.
    // Not throwIfAborted(): a polyfill's signal (the AI SDK passes the caller's on) has none.
    const signal = call.callerSignal;
    if (signal?.aborted) throw abortReason(signal);
    const kept = new Headers(headers);
    kept.delete('content-length');
    // The body is text decoded here, which the Response below encodes as UTF-8: a charset
    // the server named (`iso-8859-1`) would now mislabel it, for a caller's fetch wrapper or
    // logger that reads by it. (The bytes as sent cannot be kept: the body is the hidden,
    // redacted text, and the SDKs read any body as UTF-8, whatever the type says.)
    const type = headers.get('content-type');
    if (type) kept.set('content-type', utf8Type(type));
    // The SDKs keep a failure's headers on their error (`headers`, the AI SDK's
    // `responseHeaders`), which a logger or util.inspect prints: a gateway's session cookie
    // has no place there. No SDK reads it.
    kept.delete('set-cookie');
    // The status past 599, the reason phrase and URL are set afterwards: a Response cannot
    // be built with them (Node's fetch reads a phrase sent in UTF-8 into characters past 255).
    return Object.defineProperties(new Response(body, { status: Math.min(status, 599), headers: kept }), {
      status: { value: status },
      // Hidden and redacted as the body is: the AI SDK takes the phrase for its error's
      // message when the body is empty or not JSON, and an old app server may quote the
      // credential there (`401 Invalid key sk-…`).
      statusText: { value: redactText(hideSent(call, statusText)) },
      url: { value: response.url },
    });
  };
  // Under the whole chain: each request sent, a resend (retry's, auth()'s after a 401) too,
  // says how many of the call's went before it. The headers are the call's own (above).
  const base: FetchLike = (input, init) => {
    const headers = init?.headers as Headers;
    const count = counts.get(headers) as number;
    if (count >= 0) {
      headers.set(RETRY_COUNT, `${count}`);
      counts.set(headers, count + 1);
    }
    return (fetch ?? globalThis.fetch)(input, init);
  };
  const chained = policy.fetch(base, { ...rest, use: [capFailures] });
  // Before their first upload the OpenAI and Anthropic SDKs fetch `data:,` to learn whether
  // the fetch encodes FormData (internal/uploads.js, supportsFormData). No server answers
  // that: through the policy it was a success on the provider's key, so it could close a
  // half-open circuit or end a pause the provider never lifted. It goes to the fetch underneath.
  return function providerFetch(input, init) {
    return typeof input === 'string' && input.startsWith('data:')
      ? (fetch ?? globalThis.fetch)(input, init)
      : chained(input, init);
  };
}

/**
 * Options for the OpenAI SDK (`openai` ≥ 5): the policy's fetch, and `maxRetries: 0`
 * so the SDK does not retry on top of the policy. The SDK's `x-stainless-retry-count`
 * (0 on every request, its retries being off) is numbered on by the fetch: each request
 * the policy sends says how many of the call's went before it.
 *
 * The SDK's `timeout` is left alone (default 10 minutes). It covers only the wait for
 * response headers (streamed bodies are not timed), which around breakwater's fetch
 * means the whole policy call, retries included: an outer backstop. Keep the policy's
 * `timeout.totalMs` below it so breakwater's own deadline fires first
 * ({@link providerConfig} does).
 *
 * @param policy - A policy from `definePolicy()`; its breaker, pacing and budget are shared by every client built from it.
 * @param options - The fetch underneath (default: the global fetch), `auth`, `onEvent`, `key` (default: the policy's `name`, else the URL's origin).
 * @returns `{ fetch, maxRetries: 0 }`.
 *
 * @example
 * ```ts
 * import OpenAI from 'openai';
 * import { definePolicy } from 'breakwater';
 * import { openaiOptions, providerConfig } from 'breakwater/providers';
 *
 * const policy = definePolicy(providerConfig({ name: 'openai' }));
 * const client = new OpenAI({ apiKey: process.env.OPENAI_API_KEY, ...openaiOptions(policy) });
 * ```
 */
export function openaiOptions(policy: Policy, options?: PresetOptions): StainlessClientOptions {
  return { fetch: policyFetch('openaiOptions', policy, options), maxRetries: 0 };
}

/**
 * Options for the Anthropic SDK (`@anthropic-ai/sdk`): the policy's fetch, and
 * `maxRetries: 0` so the SDK does not retry on top of the policy. The same client
 * options as {@link openaiOptions} (both SDKs are generated by Stainless and share
 * their fetch, retry and timeout handling).
 *
 * The SDK's `timeout` is left alone: setting it would also switch off the SDK's
 * check that refuses non-streaming requests expected to take over 10 minutes.
 *
 * @param policy - A policy from `definePolicy()`.
 * @param options - The fetch underneath (default: the global fetch), `auth`, `onEvent`, `key`.
 * @returns `{ fetch, maxRetries: 0 }`.
 *
 * @example
 * ```ts
 * import Anthropic from '@anthropic-ai/sdk';
 * import { definePolicy } from 'breakwater';
 * import { anthropicOptions, providerConfig } from 'breakwater/providers';
 *
 * const policy = definePolicy(providerConfig({ name: 'anthropic' }));
 * const client = new Anthropic({ apiKey: process.env.ANTHROPIC_API_KEY, ...anthropicOptions(policy) });
 * ```
 */
export function anthropicOptions(policy: Policy, options?: PresetOptions): StainlessClientOptions {
  return { fetch: policyFetch('anthropicOptions', policy, options), maxRetries: 0 };
}

/**
 * Options for an AI SDK provider factory (`createOpenAI`, `createAnthropic`, any
 * provider with a `fetch` setting): the policy's fetch.
 *
 * The AI SDK retries per call, not per provider: pass `maxRetries: 0` to
 * `generateText`, `streamText`, `generateObject`, `embed` and the like, or each of
 * its 2 default retries runs the policy's retries again.
 *
 * @param policy - A policy from `definePolicy()`.
 * @param options - The fetch underneath (default: the global fetch), `auth`, `onEvent`, `key`.
 * @returns `{ fetch }`.
 *
 * @example
 * ```ts
 * import { createOpenAI } from '@ai-sdk/openai';
 * import { generateText } from 'ai';
 * import { definePolicy } from 'breakwater';
 * import { aiSdkOptions, providerConfig } from 'breakwater/providers';
 *
 * const openai = createOpenAI(aiSdkOptions(definePolicy(providerConfig({ name: 'openai' }))));
 * const { text } = await generateText({ model: openai('gpt-5-mini'), prompt: 'Hi', maxRetries: 0 });
 * ```
 */
export function aiSdkOptions(policy: Policy, options?: PresetOptions): AiSdkProviderOptions {
  return { fetch: policyFetch('aiSdkOptions', policy, options) };
}

/**
 * A policy config for model APIs: `config` with longer deadlines filled in where it
 * sets none. Attempt timeout 5 minutes (non-streaming completions send headers only
 * when the answer is done), total 9 minutes (under the SDKs' 10-minute backstop).
 * Everything else is the core's default, which already suits model APIs: 429 and
 * Anthropic's 529 are retried, `retry-after-ms` and the providers' reset headers are
 * honoured up to 60 s, and the key defaults to the URL's origin, so one policy keeps a
 * separate breaker per provider.
 *
 * Returns plain JSON: pass it to `definePolicy()`, which validates it (so a bad
 * `config` throws there, naming every bad path).
 *
 * @param config - Your policy config; its `timeout` fields win over the preset's, and `timeout: false` turns deadlines off.
 * @returns The merged config.
 *
 * @example
 * ```ts
 * const policy = definePolicy(providerConfig({ name: 'openai', retry: { attempts: 4 } }));
 * policy.resolved.timeout; // { attemptMs: 300_000, totalMs: 540_000 }
 * ```
 */
export function providerConfig(config: PolicyConfig = {}): PolicyConfig {
  const given = config?.timeout;
  // Only plain objects are merged; anything else goes through as given, for
  // definePolicy() to report where the user wrote it (a spread would hide a null
  // config, and turn a string into an "unknown option 0").
  if (!isSection(config) || !(given === undefined || isSection(given))) return config;
  const timeout: Record<string, unknown> = { attemptMs: PROVIDER_ATTEMPT_MS, totalMs: PROVIDER_TOTAL_MS };
  // A field set to undefined is not set (definePolicy reads it so): the preset's stays.
  for (const [name, value] of Object.entries(given ?? {})) if (value !== undefined) timeout[name] = value;
  return { ...config, timeout: timeout as TimeoutOptions };
}

/** A value a spread can merge: an object that is not null or an array. */
function isSection(value: unknown): value is object {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
