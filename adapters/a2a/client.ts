/**
 * @module
 * `createA2AClient()`: an `@a2a-js/sdk` client whose every request (the card GET
 * included) goes through a breakwater policy, and whose errors keep the HTTP status.
 *
 * The SDK turns a failing response into `Error('HTTP error for GetTask! Status: 503
 * Service Unavailable. Response: ...')`: the status survives only in the message and
 * `Retry-After` not at all. The client returned here maps such errors to an
 * `HttpStatusError` built from the capture snapshot of one of the same client's recent
 * failure responses (status, `retryAfterMs`, `serverMessage`, safe headers), with the
 * SDK's error as `cause`. Errors that carry no status (an A2A error such as `TaskNotFoundError`,
 * breakwater's own errors, aborts) pass through unchanged.
 *
 * The SDK is loaded with a dynamic `import()` on the first call, so importing
 * `breakwater/a2a` for the resolver alone never loads it.
 */

import type { Client, ClientConfig } from '@a2a-js/sdk/client';
import * as z from 'zod/mini';
import { maxResponseBytesSchema } from '../../src/body-limit.ts';
import { Call, type FetchLike, type Middleware, type Next } from '../../src/call.ts';
import type { StatusSnapshot } from '../../src/capture.ts';
import { BreakwaterError, isAbort, oneLine, requestSummary } from '../../src/errors.ts';
import { clientOptionsShape, policySchema, validate } from '../../src/options.ts';
import type { Policy, PolicyClientOptions } from '../../src/policy.ts';
import { redactText } from '../../src/redact.ts';
import { SNAPSHOT, type Snapshotted, wrapHttpError } from '../../src/status.ts';
import { AGENT_CARD_PATH, AgentCardError, resolveAgentCardThrough, signalOption } from './card.ts';
import { type A2AFetchOptions, a2aIdempotent, limitBodies } from './fetch.ts';

/**
 * How `@a2a-js/sdk` (0.3 and 1.x, JSON-RPC and REST transports) words a failing
 * status: `HTTP error for GetTask! Status: 503 Service Unavailable. ...`, `HTTP error
 * establishing stream for SendStreamingMessage: 503 ...`, `HTTP error for /v1/tasks:
 * 503 ...`, `Failed to fetch Agent Card from <url>: 503`. Anchored at the start: the
 * SDK's typed A2A errors carry the agent's own message (`TaskNotFoundError('... Status:
 * 503')`), which must not pass for a status. Fixed words, no nested quantifiers:
 * linear on any message.
 */
const SDK_STATUS =
  /^(?:HTTP error (?:for \S+?(?:! Status:|:)|establishing stream for \S+:)|Failed to fetch Agent Card from \S+:) ([1-5]\d\d)\b/;

/**
 * Failure responses a client keeps for its error mapping (32): enough for an agent's
 * concurrent calls failing together, and bounded however long the client lives.
 */
const MAX_FAILURES = 32;

/**
 * How much of the SDK's complaint about a card its issue shows (200 characters): it may
 * quote the card. Its first 1,000 are redacted first, so a URL cut at the end still has
 * its userinfo and query values hidden, and a huge quote costs no long redaction pass.
 */
const MAX_CARD_PROBLEM_CHARS = 200;
/** How much of that complaint is read and redacted before it is cut (1,000 characters). */
const MAX_CARD_PROBLEM_READ_CHARS = 1000;

/**
 * Options for {@link createA2AClient}. Under `policy`, those of `a2aFetch()`
 * (`PolicyClientOptions`: `auth`, `onEvent`, `key`, the base `fetch`) apply to every
 * request, the card GET included; without one, `auth`, `onEvent` and `key` are refused.
 */
export interface CreateA2AClientOptions extends PolicyClientOptions {
  /** Every request (card and JSON-RPC / REST calls) goes through the chain `a2aFetch(policy, options)` builds. */
  policy?: Policy | undefined;
  /**
   * Under `policy`, the base fetch. Without `policy`, the whole chain to use as is
   * (a `createFetch()` with `a2aIdempotent()` in front of its retry, say): then failure
   * bodies reach the SDK uncut, and it reads each one whole, with no deadline.
   * Default: the global `fetch`.
   */
  fetch?: FetchLike | undefined;
  /** The card's path relative to `cardUrl` (see `resolveAgentCard`). Default `.well-known/agent-card.json`. */
  path?: string | undefined;
  /** Passed to the SDK's `ClientFactory`: interceptors, polling, accepted output modes. */
  clientConfig?: ClientConfig | undefined;
  /** Transport names tried before the card's order, e.g. `['JSONRPC']` (copied: a list written `as const` is taken). */
  preferredTransports?: readonly string[] | undefined;
  /**
   * Under `policy`, the largest answer handed to the SDK, in bytes (a whole JSON
   * answer, or one SSE event); past it the call fails with a `BreakwaterError`, code
   * `RESPONSE_TOO_LARGE`. Default 32 MiB; `Infinity`: no limit. See `a2aFetch()`.
   */
  maxResponseBytes?: A2AFetchOptions['maxResponseBytes'];
  /**
   * Aborts the card GET (its policy's retries and `Retry-After` waits included); the
   * abort reason is thrown as is. Default: none, so only the card's deadlines end it.
   * Each call of the client takes its own signal (the SDK's per-call options).
   */
  signal?: AbortSignal | undefined;
}

/**
 * The bindings this client has a transport for, as the SDK's `ClientFactory` matches
 * names (upper-cased): the JSON-RPC and the HTTP+JSON (REST) ones registered below.
 */
const BINDINGS = /^(?:JSONRPC|HTTP\+JSON)$/;

/** Whether the SDK's factory has a transport for `binding` (it upper-cases names to match them). */
function spoken(binding: unknown): boolean {
  return BINDINGS.test(`${binding}`.toUpperCase());
}

/** The options only a policy's chain takes: its per-client pieces (a2aFetch() requires a policy for them too). */
const POLICY_ONLY = ['auth', 'onEvent', 'key'] as const;

const optionsSchema = z.optional(
  z
    .strictObject({
      ...clientOptionsShape,
      policy: z.optional(policySchema),
      path: z.optional(z.string()),
      clientConfig: z.optional(
        z.custom<ClientConfig>((value) => typeof value === 'object' && value !== null, 'must be an object'),
      ),
      // Checked here, before the card GET: the SDK refuses an unknown name only once the card is in.
      preferredTransports: z.optional(
        z.array(z.string().check(z.refine(spoken, 'must be "JSONRPC" or "HTTP+JSON"'))),
      ),
      maxResponseBytes: maxResponseBytesSchema,
      signal: signalOption,
    })
    .check(
      // Without a policy, `fetch` is the whole chain: a token or listener given beside it
      // would go nowhere, and the agent would get requests without the token, unannounced.
      z.superRefine((options, context) => {
        for (const name of POLICY_ONLY) {
          if (options.policy === undefined && options[name] !== undefined)
            context.addIssue({
              code: 'custom',
              path: [name],
              input: options[name],
              message: 'needs a policy (without one, fetch is the whole chain)',
            });
        }
      }),
    ),
);

/** When the server said the caller may try again: the response's arrival plus its delay. */
function waitUntil(said: StatusSnapshot): number {
  return said.at + (said.retryAfterMs ?? 0);
}

/**
 * The `HttpStatusError` an SDK error stands for, when its message names a status
 * (or, from the REST binding, its generic `A2AError` carries one; or the JSON-RPC
 * binding's generic `JsonRpcTransportError` is a failure body's JSON): built from one of
 * `failures` (this client's recent failure responses, so its Retry-After and message
 * belong to a response of this client), or from the status alone. Anything else is
 * returned unchanged.
 *
 * The SDK's error names no request, so two concurrent failures of one status look
 * alike in it: of those with that status (of any, for an error built from a JSON body),
 * the ones whose body its message quotes (else all), and of those the one asking to
 * wait longest (the latest on a tie). A caller is never told to wait less than its
 * agent asked; at worst longer, with another request's message.
 */
function withStatus(error: unknown, failures: readonly StatusSnapshot[]): unknown {
  if (error instanceof BreakwaterError || isAbort(error, undefined) || !(error instanceof Error))
    return error;
  // The REST binding words errors as google.rpc.Status bodies: the SDK then throws its
  // generic `A2AError` with the server's message and the status as `statusCode` (its typed
  // errors, `TaskNotFoundError` and the like, have their own names; an SSE error event's is 200).
  // Its message is the server's own text, so only `statusCode` counts, and only a failing
  // HTTP status (a server may answer 600: wrapHttpError would refuse it).
  const rest = (error as { statusCode?: unknown }).statusCode as number;
  // The JSON-RPC binding's generic error, built from a body with an `error` field: on a
  // stream request from any failure body with one (a gateway's `{"error":{"message":
  // "overloaded"}}`), on others from one with `jsonrpc` too, so a 429 or 503 lost its
  // status and Retry-After. The A2A 0.3 REST binding words a `{code, message}` body it
  // has no class for as `Error('REST error: <message> (Code: <code>)')`, status lost too.
  // Either stands for a failure response whose body it was built from (a body the
  // snapshot cut or redacted matches none: the error then passes through), never for an
  // agent's own JSON-RPC error answered 200, which no failure recorded.
  let envelope: unknown;
  try {
    envelope =
      error.name === 'JsonRpcTransportError' &&
      JSON.stringify((error as { errorResponse?: unknown }).errorResponse);
  } catch {}
  const legacy = error.name === 'Error' && /^REST error: /.test(error.message);
  const matching =
    envelope || legacy
      ? failures.filter((said) => {
          try {
            const body = JSON.parse(said.body);
            return envelope
              ? JSON.stringify(body) === envelope
              : // Its ` Data: ...` suffix, if any, follows.
                error.message.startsWith(`REST error: ${body.message} (Code: ${body.code})`);
          } catch {
            return false;
          }
        })
      : failures;
  // A body that matches names no status itself: that of the one chosen below among all
  // whose body it is (a gateway may give its 429 and its 503 the same body).
  const code =
    envelope || legacy
      ? matching[0]?.status
      : error.name === 'A2AError' && rest !== undefined
        ? Number.isInteger(rest) && rest >= 400 && rest < 600 && rest
        : Number(SDK_STATUS.exec(error.message)?.[1]);
  if (!code) return error;
  const recent = envelope || legacy ? matching : matching.filter((said) => said.status === code);
  // Read only to choose among several: without a policy nothing is recorded, and the
  // SDK's message quotes the whole uncut body (megabytes, redacted for nothing).
  // Redacted and on one line, as the snapshots' bodies are. A message that throws matches none.
  let message = '';
  try {
    if (recent[1]) message = redactText(oneLine(error.message));
  } catch {}
  const quoted = recent.filter((said) => said.body && message.includes(said.body));
  let said: StatusSnapshot | undefined;
  for (const failure of quoted[0] ? quoted : recent) {
    if (!said || waitUntil(failure) >= waitUntil(said)) said = failure;
  }
  return wrapHttpError(said?.status ?? code, said, error);
}

/**
 * `client` with every method's failure passed through the `map` that `begin()` gives as
 * the method is called: promises, async generators (`sendMessageStream`,
 * `resubscribeTask`) and synchronous throws.
 */
function mapErrors<T extends object>(client: T, begin: () => (error: unknown) => unknown): T {
  return new Proxy(client, {
    get(target, property) {
      const value = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]): unknown => {
        const map = begin();
        let result: unknown;
        try {
          result = value.apply(target, args);
        } catch (error) {
          throw map(error);
        }
        if (result instanceof Promise) {
          return result.catch((error: unknown) => {
            throw map(error);
          });
        }
        const stream = result as AsyncGenerator<unknown> | null | undefined;
        if (typeof stream?.next !== 'function' || !(Symbol.asyncIterator in stream)) return result;
        return (async function* mapped() {
          try {
            return yield* stream;
          } catch (error) {
            throw map(error);
          }
        })();
      };
    },
  });
}

/**
 * Resolves the agent card at `cardUrl` with `resolveAgentCard` and builds an
 * `@a2a-js/sdk` client from it whose JSON-RPC and REST transports (v1.0, and v0.3
 * through the SDK's compat layer) send through `a2aFetch(policy)`. Failures that the
 * SDK reports only in a message come back as `HttpStatusError` with the SDK's error
 * as `cause`. Requires `@a2a-js/sdk` 1.x (`ClientFactory`, `legacyCompat`).
 *
 * @example
 * ```ts
 * import { definePolicy } from 'breakwater';
 * import { createA2AClient } from 'breakwater/a2a';
 * import { Role } from '@a2a-js/sdk';
 *
 * const client = await createA2AClient('https://agent.example.com', {
 *   policy: definePolicy({ name: 'travel-agent' }),
 * });
 * const reply = await client.sendMessage({
 *   message: { messageId: crypto.randomUUID(), role: Role.ROLE_USER, parts: [{ content: { $case: 'text', value: 'Plan a trip' } }] },
 * });
 * ```
 */
export async function createA2AClient(
  cardUrl: string | URL,
  options?: CreateA2AClientOptions,
): Promise<Client> {
  const valid = validate(optionsSchema, options, 'createA2AClient()') ?? {};
  const { policy, fetch: base, auth, onEvent, key } = valid;
  /** This client's latest failure responses, oldest first: the ones its SDK errors may stand for. */
  const failures: StatusSnapshot[] = [];
  /** Keeps each failure response the SDK gets (outside retry: the last attempt's, the one its error describes). */
  async function rememberFailures(call: Call, next: Next): Promise<Response> {
    const response = await next(call);
    const said = (response as Snapshotted)[SNAPSHOT];
    if (said && failures.push(said) > MAX_FAILURES) failures.shift();
    return response;
  }
  /** Whether the card is in: until then the one request through the chain is the card GET. */
  let carded = false;
  /** `piece` for the SDK's requests only: the card GET is resolveAgentCard's to read and cap. */
  const sdkOnly = (piece: Middleware): Middleware =>
    function sdkOnly(call: Call, next: Next): Promise<Response> {
      return carded ? piece(call, next) : next(call);
    };
  // a2aFetch()'s chain, plus the record (inside the body cap, which hands on a copy). One
  // chain for the card GET too, so one auth() stamps both: a token refreshed for the card
  // serves the calls, rather than each refreshing on its own (a rotating refresh token
  // spent twice).
  const chain = policy
    ? policy.fetch(base, {
        auth,
        onEvent,
        key,
        use: [
          a2aIdempotent(),
          sdkOnly(limitBodies(policy.resolved.capture.bodyWaitMs, valid.maxResponseBytes)),
          sdkOnly(rememberFailures),
        ],
      })
    : base;
  const fetchImpl = (chain ?? ((input, init) => globalThis.fetch(input, init))) as typeof fetch;
  /** Maps with the failures since `last`: a call's error stands for none that came before it began. */
  const toStatus = (error: unknown, last?: StatusSnapshot): unknown =>
    withStatus(error, failures.slice(failures.indexOf(last as StatusSnapshot) + 1));
  // Under a policy the card GET goes through its chain directly, so errors name its key.
  const card = await resolveAgentCardThrough(
    cardUrl,
    { policy, fetch: fetchImpl, path: valid.path, signal: valid.signal },
    key,
  );
  carded = true;
  const sdk = await import('@a2a-js/sdk/client');
  const legacyCompat = { enabled: true };
  const cardResolver = new sdk.DefaultAgentCardResolver({ fetchImpl, legacyCompat });
  let issue: string | undefined;
  try {
    // The SDK translates an A2A 0.3 card to 1.0 before use, and needs more of it than
    // both versions require (defaultInputModes, each skill's tags, a known security scheme
    // type, lists where lists belong): its RequestMalformedError (or TypeError) would blame
    // a request for what is a card the agent served, so it is an AgentCardError here.
    // So is a card that names no interface this client speaks (only gRPC, an unknown
    // binding): the SDK's factory would fail on it with a bare Error naming no card.
    const normalized = cardResolver.normalizeAgentCard(card) as { supportedInterfaces?: unknown };
    const listed = normalized.supportedInterfaces;
    if (!(Array.isArray(listed) && listed.some((item) => spoken(item?.protocolBinding))))
      issue = 'card.supportedInterfaces: none is JSONRPC or HTTP+JSON';
  } catch (error) {
    // The SDK's own errors, with string messages.
    const said = redactText(oneLine(`${(error as Error).message}`.slice(0, MAX_CARD_PROBLEM_READ_CHARS)));
    issue = `card: the SDK cannot translate it: ${said.slice(0, MAX_CARD_PROBLEM_CHARS)}`;
  }
  if (issue) {
    const href = new URL(valid.path ?? AGENT_CARD_PATH, cardUrl).href;
    throw new AgentCardError(
      'AGENT_CARD_INVALID',
      'is not a usable agent card',
      requestSummary(new Call(href, undefined, key ?? policy?.resolved.name, undefined).key, 'GET', href),
      [issue],
    );
  }
  const factory = new sdk.ClientFactory({
    transports: [
      new sdk.JsonRpcTransportFactory({ fetchImpl, legacyCompat }),
      new sdk.RestTransportFactory({ fetchImpl, legacyCompat }),
    ],
    cardResolver,
    clientConfig: valid.clientConfig,
    preferredTransports: valid.preferredTransports,
  } as ConstructorParameters<typeof sdk.ClientFactory>[0]);
  try {
    return mapErrors(await factory.createFromAgentCard(card as never), () => {
      const last = failures.at(-1);
      return (error) => {
        // The REST binding's errors keep every header of the response (`headers`), a
        // session's Set-Cookie too, which a logged error (util.inspect, pino) would show.
        try {
          delete (error as { headers: Record<string, string> }).headers['set-cookie'];
        } catch {}
        return toStatus(error, last);
      };
    });
  } catch (error) {
    throw toStatus(error);
  }
}
