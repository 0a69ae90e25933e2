/**
 * @module
 * `resolveAgentCard()`: fetches an A2A agent card through breakwater, so a 429 or
 * 503 with `Retry-After` is waited out by the policy (a card GET is idempotent by
 * method, so it may be resent), a failing status becomes an `HttpStatusError` that
 * keeps the status, and the untrusted body is read under a byte cap and a deadline
 * and checked before anyone relies on it.
 *
 * The SDK's own `DefaultAgentCardResolver` keeps the status only in its message
 * (`Failed to fetch Agent Card from <url>: 503`), buffers the whole body with
 * `response.json()` and trusts its shape.
 */

import * as z from 'zod/mini';
import { abortReason, Call, dropBody, type FetchLike, type KeyOption } from '../../src/call.ts';
import {
  BreakwaterError,
  isAbort,
  type RequestSummary,
  requestSummary,
  TimeoutError,
  type TimeoutScope,
} from '../../src/errors.ts';
import { type FetchStage, normalizeNetworkError } from '../../src/network.ts';
import { functionOption, policySchema, validate } from '../../src/options.ts';
import type { Policy } from '../../src/policy.ts';
import { redactText } from '../../src/redact.ts';
import { SNAPSHOT, type Snapshotted, statusError } from '../../src/status.ts';
import { MAX_DELAY_MS } from '../../src/timing.ts';

/**
 * Where the card lives, relative to the base URL: the SDK's default (A2A 0.3 and
 * 1.0 both name `agent-card.json`; `agent.json` was A2A 0.2's name). Relative, as
 * in the SDK, so `https://host/agents/a/` reads `/agents/a/.well-known/agent-card.json`
 * and both resolvers read the same URL for the same input.
 */
export const AGENT_CARD_PATH = '.well-known/agent-card.json';

/**
 * The largest card body read (1 MiB). Real cards are a few KB (a name, some skills,
 * interfaces, security schemes; signatures add under 1 KB each): 1 MiB leaves two
 * orders of magnitude of headroom while bounding what a misconfigured or hostile
 * server (a catch-all route streaming a large file) can make a client hold.
 */
const DEFAULT_MAX_BYTES = 1024 * 1024;
/** How long the body may take after the headers arrived (10 s): a card is small. */
const DEFAULT_BODY_TIMEOUT_MS = 10_000;
/**
 * How long a whole resolution (headers and body) may take when no policy bounds it
 * (10 s). Without a deadline, a server that accepts the connection and never answers
 * would hold the caller forever; a card is one small GET, so a healthy server answers
 * in well under a second, and 10 s still covers a cold start or a slow TLS handshake.
 */
const DEFAULT_TIMEOUT_MS = 10_000;
/** Problems listed in an {@link AgentCardError} message; the rest are counted. */
const MAX_LISTED_ISSUES = 10;
/**
 * The most items a card's checked lists (skills and their tags, interfaces, modes)
 * may hold together. Real cards list tens. Each bad item costs the schema check
 * several objects, so a 1 MiB card of 340,000 `{}` skills took about 1 s and over
 * 128 MB of heap to reject (a Worker's whole memory): such a card is refused first.
 */
const MAX_CARD_ITEMS = 10_000;
/** The card's lists the schema checks item by item. */
const CARD_LISTS = [
  'skills',
  'supportedInterfaces',
  'additionalInterfaces',
  'defaultInputModes',
  'defaultOutputModes',
];

/** One way to reach the agent (A2A 1.0 `supportedInterfaces[]`). */
export interface AgentInterface {
  /**
   * Where the agent is reached: an absolute http: or https: URL without userinfo (only
   * https: on a card fetched over https), or for a gRPC binding any gRPC target
   * (`host:port`, `dns:///host:port`), which no fetch reaches.
   */
  url: string;
  /** `JSONRPC`, `HTTP+JSON`, `GRPC`, or another binding's name. */
  protocolBinding: string;
  /** `1.0`, `0.3`, ... */
  protocolVersion?: string;
  /** A2A 1.0: the tenant id to send in requests to this interface (several agents behind one endpoint). */
  tenant?: string;
  /** Any other field the server sent, kept as sent and not checked. */
  [field: string]: unknown;
}

/** One skill the agent advertises. */
export interface AgentSkill {
  /** The skill's id, unique within the card (checked as a string, not for uniqueness). */
  id: string;
  /** A name for people. */
  name: string;
  /** What the skill does, for people and for a model choosing a skill; checked only when present. */
  description?: string;
  /** Keywords for the skill; checked (strings) only when present. */
  tags?: string[];
  /** Any other field the server sent (`examples`, `inputModes`, ...), kept as sent and not checked. */
  [field: string]: unknown;
}

/**
 * An agent card as checked by {@link resolveAgentCard}: the fields a client acts on,
 * in A2A 1.0 form (`supportedInterfaces`) or A2A 0.3 form (`url`, `preferredTransport`,
 * `additionalInterfaces`). Every other field the server sent is kept as sent.
 */
export interface AgentCard {
  /** The agent's name, for people: a non-empty string. */
  name: string;
  /** The agent's own version (not the protocol's): any string. */
  version: string;
  /** What the agent does, for people; checked only when present. */
  description?: string;
  /** A2A 1.0: where and how to reach the agent, preferred first. */
  supportedInterfaces?: AgentInterface[];
  /** A2A 0.3: the preferred endpoint. */
  url?: string;
  /** A2A 0.3: the protocol version of `url`. */
  protocolVersion?: string;
  /** A2A 0.3: the binding `url` is reached by (`JSONRPC`, `HTTP+JSON`, `GRPC`, ...). */
  preferredTransport?: string;
  /** A2A 0.3: other ways to reach the agent, each with its binding as `transport`. */
  additionalInterfaces?: { url: string; transport: string; [field: string]: unknown }[];
  /**
   * What the agent supports, which decides the calls the SDK makes; required (may be `{}`),
   * each flag checked as a boolean when present, absent meaning not supported.
   */
  capabilities: {
    /** Whether it can stream a task's progress and answer (Server-Sent Events). */
    streaming?: boolean;
    /** Whether it can push task updates to a webhook the client registers. */
    pushNotifications?: boolean;
    /** Whether an authenticated client may fetch a fuller card. */
    extendedAgentCard?: boolean;
    /** Any other capability the server sent, kept as sent. */
    [field: string]: unknown;
  };
  /** The skills the agent advertises; required (may be empty). */
  skills: AgentSkill[];
  /** Media types the agent accepts for every skill (`text/plain`, `application/json`, ...), unless a skill says otherwise. */
  defaultInputModes?: string[];
  /** Media types the agent answers in for every skill, unless a skill says otherwise. */
  defaultOutputModes?: string[];
  /** Any other field the server sent (`provider`, `securitySchemes`, `signatures`, ...), kept as sent and not checked. */
  [field: string]: unknown;
}

/** What went wrong with a card the server did send. */
export type AgentCardErrorCode = 'AGENT_CARD_TOO_LARGE' | 'AGENT_CARD_NOT_JSON' | 'AGENT_CARD_INVALID';

/**
 * The server answered with a card that cannot be used: larger than the cap, not
 * JSON, or missing or mistyping a field a client relies on. `issues` names every
 * bad path (values from the card are cut short and never shown for secret-looking
 * names). Not retried: the same request would get the same card.
 */
export class AgentCardError extends BreakwaterError {
  /**
   * Spelled out, as each core error's (src/errors.ts): a minifier renames the class, and
   * both `error.name` and `instanceof` across two copies of breakwater (ESM and CommonJS,
   * BreakwaterError's `Symbol.hasInstance`) read this name. A getter, not a static field:
   * where class fields are assigned (useDefineForClassFields: false, Babel's loose mode),
   * assigning a function's read-only `name` threw while the module loaded.
   */
  static override get name(): string {
    return 'AgentCardError';
  }
  /**
   * What is wrong with the card: `AGENT_CARD_TOO_LARGE` (the body passed `maxBytes`),
   * `AGENT_CARD_NOT_JSON` (it does not parse), `AGENT_CARD_INVALID` (a field a client
   * relies on is missing or mistyped, an endpoint is unsafe, the card lists more than
   * 10,000 items, or an https request was redirected to http: see `issues`).
   */
  declare readonly code: AgentCardErrorCode;
  /** One line per problem, `card.path: what is wrong (got ...)`; empty unless `AGENT_CARD_INVALID`. */
  declare readonly issues: readonly string[];

  constructor(code: AgentCardErrorCode, problem: string, request: RequestSummary, issues: string[] = []) {
    const listed = issues.slice(0, MAX_LISTED_ISSUES).join('; ');
    const more = issues.length > MAX_LISTED_ISSUES ? ` (and ${issues.length - MAX_LISTED_ISSUES} more)` : '';
    super(
      `agent card at ${request.url} (server "${request.key}") ${problem}${listed ? `: ${listed}${more}` : ''}`,
      code,
      { request },
    );
    this.issues = Object.freeze(issues);
  }
}

const text = z.string();
const texts = z.optional(z.array(text));

/**
 * An endpoint the SDK will send the client's messages (and its credentials) to: an
 * absolute http: or https: URL. fetch takes other schemes too, and none of them is an
 * A2A endpoint: `file:` and `ftp:` reach what the card names, and a `data:` URL
 * "answers" with whatever the card wrote, without any server. A card fetched over
 * https may not name a plain http: endpoint either: that card arrived authenticated and
 * private, and would send messages and bearer tokens across the network in clear (the
 * A2A spec requires HTTPS in production). A card fetched over http may name either:
 * the caller chose plain http already (a local or test agent). Nor may it hold a user
 * name or password: A2A credentials come from the card's security schemes, Node's fetch
 * refuses such a URL (quoting it, password and all, in its TypeError) while Deno's and
 * Bun's send it as Basic credentials, and runtimes' errors would show it.
 */
function endpoint(secure: boolean) {
  // A value that starts with the scheme's letters parses to that scheme; the URL parser's
  // clean-ups (case, stripped tabs, leading control characters) only make this refuse more.
  return z.url({ message: 'must be an absolute URL', abort: true }).check(
    z.refine((value: string) => (secure ? /^https:/i : /^https?:/i).test(value), {
      message: `must be an ${secure ? 'https: URL, as the card was fetched over https' : 'http: or https: URL'}`,
      abort: true,
    }),
    z.refine((value: string) => {
      const url = new URL(value);
      return !url.username && !url.password;
    }, 'must not hold a user name or password'),
  );
}

/** The gRPC binding's name, in any case (the SDK matches bindings so). */
const grpc = text.check(z.regex(/^grpc$/i, { abort: true }));

/**
 * One interface (`binding`: its binding's field, A2A 1.0 `protocolBinding`, 0.3
 * `transport`) whose `url` is an endpoint (`to`), or a gRPC one's at any target: gRPC
 * clients take `host:port` or `dns:///host:port`, which the SDK's own multi-transport
 * agent lists, and no fetch ever reaches it. The endpoint's branch comes first: its
 * problems are the ones reported when neither fits.
 */
function anInterface(binding: string, to: ReturnType<typeof endpoint>) {
  const shape = { protocolVersion: z.optional(text), tenant: z.optional(text) };
  // Not an object: told once, not once per branch.
  return z.pipe(
    z.looseObject({}),
    z.union([
      z.looseObject({ ...shape, url: to, [binding]: text }),
      z.looseObject({ ...shape, url: text, [binding]: grpc }),
    ]),
  );
}

/**
 * Whether a card is in A2A 0.3 form, its `url` then its endpoint, as `@a2a-js/sdk` tells
 * (`isLegacyAgentCard`): a non-empty `supportedInterfaces` makes it 1.0; else no such
 * field, a field only 0.3 has, or a protocolVersion from 0.3 up to 1.0 (or blank) makes
 * it 0.3. A 1.0 card has no `url`: beside an empty list, one names no endpoint the SDK
 * reads, and createA2AClient found no interface in such a card that was taken here.
 */
function v03(card: Record<string, unknown>): boolean {
  return (
    !('supportedInterfaces' in card) ||
    'preferredTransport' in card ||
    'additionalInterfaces' in card ||
    'supportsAuthenticatedExtendedCard' in card ||
    // A protocolVersion the SDK reads as 0.3 to 1.0 (its major 0, its minor 3 or more), or blank.
    /^\s*(?:$|0+\.0*(?:[3-9]|[1-9]\d))/.test(`${card.protocolVersion}`)
  );
}

/**
 * What both spec versions require and a client acts on: a name, a version, the
 * capabilities (streaming, push, extended card decide which calls the SDK makes),
 * the skills, and an endpoint (see {@link endpoint}; `secure`: the card was fetched
 * over https; `grpcUrl`: its `url` is a gRPC target, any text). Descriptive fields are
 * checked only when present. Loose objects: unknown fields pass through, so newer
 * cards keep working.
 */
function cardSchema(secure: boolean, grpcUrl: boolean) {
  const to = endpoint(secure);
  return z
    .looseObject({
      name: text.check(z.minLength(1, 'must be a non-empty string')),
      version: text,
      description: z.optional(text),
      supportedInterfaces: z.optional(z.array(anInterface('protocolBinding', to))),
      // A 0.3 card's url is reached by its preferred transport: a gRPC one's is a gRPC target.
      url: z.optional(grpcUrl ? text : to),
      protocolVersion: z.optional(text),
      preferredTransport: z.optional(text),
      additionalInterfaces: z.optional(z.array(anInterface('transport', to))),
      capabilities: z.looseObject({
        streaming: z.optional(z.boolean()),
        pushNotifications: z.optional(z.boolean()),
        extendedAgentCard: z.optional(z.boolean()),
      }),
      skills: z.array(z.looseObject({ id: text, name: text, description: z.optional(text), tags: texts })),
      defaultInputModes: texts,
      defaultOutputModes: texts,
    })
    .check(
      z.refine((card) => !!card.supportedInterfaces?.length || (card.url !== undefined && v03(card)), {
        message: 'must list at least one interface (A2A 1.0), or the card must have a url (A2A 0.3 only)',
        path: ['supportedInterfaces'],
        // Reported alongside other problems, not only once the rest is fixed.
        when: (payload) => payload.value !== null && typeof payload.value === 'object',
      }),
    );
}

/**
 * The card schemas for cards fetched over http (0) and https (1), +2 for a card whose
 * `preferredTransport` is gRPC, built on first use.
 */
const cardSchemas: ReturnType<typeof cardSchema>[] = [];

/** The most redirects a card fetched over https follows: fetch's own limit (WHATWG Fetch). */
const MAX_REDIRECTS = 20;

/** The error for a card asked for over https whose redirects led over plain http. */
function insecure(request: RequestSummary): AgentCardError {
  return new AgentCardError('AGENT_CARD_INVALID', 'is not a usable agent card', request, [
    'card: asked for over https, answered over plain http (a redirect)',
  ]);
}

/** Options for {@link resolveAgentCard}. */
export interface ResolveAgentCardOptions {
  /**
   * The fetch to GET the card with: a breakwater chain, or under `policy` the base
   * fetch. Default: the global `fetch`.
   */
  fetch?: FetchLike | undefined;
  /** GET through `policy.fetch(fetch)`: its retries, pacing, breaker and timeouts apply. Default: none. */
  policy?: Policy | undefined;
  /**
   * The card's path, resolved against `baseUrl` as a relative URL. Default
   * `.well-known/agent-card.json`; `''` reads `baseUrl` itself; an A2A 0.2 server
   * needs `'/.well-known/agent.json'`.
   */
  path?: string | undefined;
  /** The most body bytes read (default 1,048,576); a larger card fails with `AGENT_CARD_TOO_LARGE`. */
  maxBytes?: number | undefined;
  /** How long the body may take once the headers arrived, in ms (default 10,000). */
  bodyTimeoutMs?: number | undefined;
  /**
   * How long the whole resolution (headers, the policy's retries and waits, body) may
   * take, in ms; past it a `TimeoutError` (`scope: 'total'`) is thrown. Default 10,000
   * without a policy (or under a policy whose timeouts are off), so a server that never
   * answers cannot hang the caller; none under a policy with timeouts, whose deadlines
   * already bound the wait. Setting it adds this deadline under a policy too.
   */
  timeoutMs?: number | undefined;
  /** Aborts the request and the body read; the abort reason is thrown as is. */
  signal?: AbortSignal | undefined;
}

/** A timer delay in ms: at least 1, and at most what `setTimeout` holds (a larger one fires at once). */
const msOption = z.optional(z.number().check(z.minimum(1), z.maximum(MAX_DELAY_MS)));

/** A caller's `signal` option: an `AbortSignal`, or none. */
export const signalOption: z.ZodMiniOptional<z.ZodMiniCustom<AbortSignal>> = /* @__PURE__ */ z.optional(
  /* @__PURE__ */ z.custom<AbortSignal>((value) => value instanceof AbortSignal, 'must be an AbortSignal'),
);

const optionsSchema = z.optional(
  z.strictObject({
    fetch: z.optional(functionOption<FetchLike>()),
    policy: z.optional(policySchema),
    path: z.optional(text),
    maxBytes: z.optional(z.number().check(z.int(), z.minimum(1))),
    bodyTimeoutMs: msOption,
    timeoutMs: msOption,
    signal: signalOption,
  }),
);

/**
 * Runs `work` under a deadline of `ms` (none when `undefined`) that also follows
 * `outer`, the caller's signal. A caller's abort keeps its own reason (user aborts are
 * never wrapped); a missed deadline is a `TimeoutError` naming the redacted URL.
 * `work` gets a signal that aborts either way, and is raced as well: a `fetch` (or a
 * body) that ignores its signal must not keep the caller waiting. The timer and the
 * listener on `outer` are removed on every path, so nothing outlives the call or
 * keeps a process alive.
 */
async function within<T>(
  ms: number | undefined,
  scope: TimeoutScope,
  request: RequestSummary,
  outer: AbortSignal | undefined,
  work: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  // Aborted already: nothing starts, not even a `fetch` that would ignore the signal. Not
  // throwIfAborted(): a polyfill's signal (React Native's global one) has none.
  if (outer?.aborted) throw abortReason(outer);
  const controller = new AbortController();
  const signal = controller.signal;
  const stop = new Promise<never>((_, reject) => {
    signal.addEventListener('abort', () => reject(signal.reason));
  });
  const follow = (): void => controller.abort(outer?.reason);
  outer?.addEventListener('abort', follow);
  const timer = ms && setTimeout(() => controller.abort(new TimeoutError({ scope, ms, request })), ms);
  try {
    return await Promise.race([work(signal), stop]);
  } finally {
    clearTimeout(timer);
    outer?.removeEventListener('abort', follow);
  }
}

/**
 * A failed GET or body read as breakwater reports it: an abort as it is, a network
 * failure as a `NetworkError`, a runtime's refusal with its URLs redacted. Without a
 * policy's chain, the runtime's own error would reach the caller, and it can quote the
 * URL: Deno and Bun with its query values, Node with its userinfo, password included.
 */
function failure(error: unknown, signal: AbortSignal, request: RequestSummary, stage?: FetchStage): unknown {
  if (isAbort(error, signal)) return error;
  const network = normalizeNetworkError(error, request, stage);
  if (network || !(error instanceof TypeError)) return network ?? error;
  // Replaced only when there is a URL to redact: any other TypeError keeps its cause and
  // stack, and one whose message is not a string (or throws) is not turned into a crash here.
  try {
    const message = `${error.message}`;
    const redacted = redactText(message);
    return redacted === message ? error : new TypeError(redacted);
  } catch {
    return error;
  }
}

/**
 * Reads the whole body, at most `maxBytes` bytes and for at most
 * `timeoutMs`: a declared length over the cap fails before a byte is read, and a
 * body that grows past it is cancelled at once, so memory never exceeds the cap.
 */
async function readCapped(
  response: Response,
  maxBytes: number,
  timeoutMs: number,
  request: RequestSummary,
  outer: AbortSignal | undefined,
): Promise<Uint8Array> {
  const tooLarge = (): AgentCardError =>
    new AgentCardError('AGENT_CARD_TOO_LARGE', `is larger than the ${maxBytes}-byte limit`, request);
  const declared = Number(response.headers.get('content-length') ?? Number.NaN);
  const body = response.body;
  if (declared > maxBytes || body === null) {
    // Started, not waited for: a relayed body's cancel may settle late or never (as in
    // statusError() and retry()), and under a policy no deadline would end the wait.
    dropBody(response);
    if (body === null) return new Uint8Array();
    throw tooLarge();
  }
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    // The read ends at the deadline, or at once on abort.
    await within(timeoutMs, 'attempt', request, outer, async (signal) => {
      for (;;) {
        const next = await reader.read().catch((error: unknown) => {
          // A body that broke mid-way is a network failure like any other, in the response phase.
          throw failure(error, signal, request, 'body');
        });
        if (next.done) return;
        size += next.value.byteLength;
        if (size > maxBytes) throw tooLarge();
        chunks.push(next.value);
      }
    });
  } finally {
    // After `done` this is a no-op; otherwise it stops the transfer (too large, timed
    // out, aborted) and ends the loop still waiting on `read()`.
    reader.cancel().catch(() => {});
  }
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return bytes;
}

/** Checks parsed JSON against the card schema (`secure`: fetched over https), naming every bad path. */
function checkCard(json: unknown, request: RequestSummary, secure: boolean): AgentCard {
  const list = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);
  const card = json as Record<string, unknown> | null;
  let items = 0;
  for (const name of CARD_LISTS) items += list(card?.[name]).length;
  for (const skill of list(card?.skills)) {
    if (items > MAX_CARD_ITEMS) break;
    items += list((skill as Record<string, unknown> | null)?.tags).length;
  }
  if (items > MAX_CARD_ITEMS) {
    throw new AgentCardError('AGENT_CARD_INVALID', 'is not a usable agent card', request, [
      `card: more than ${MAX_CARD_ITEMS} skills, tags, interfaces and modes together`,
    ]);
  }
  // In any case, as the SDK matches bindings: its url is then never fetched (see anInterface).
  const grpcUrl = /^grpc$/i.test(`${card?.preferredTransport}`);
  const kind = +secure + 2 * +grpcUrl;
  const schema = cardSchemas[kind] ?? cardSchema(secure, grpcUrl);
  cardSchemas[kind] = schema;
  try {
    return validate(schema, json, 'card') as AgentCard;
  } catch (error) {
    // validate() words its TypeError for options ("invalid options for card:\n  - ...");
    // its lines (path, problem, a safe view of the value) are what a card error lists.
    // A URL that failed to parse may still hold userinfo or a query's secrets
    // (`host/a2a?api_key=...`): its value is never shown.
    const lines = (error as Error).message
      .split('\n  - ')
      .slice(1)
      .map((line) => {
        const got = line.lastIndexOf(' (got "');
        return got > 0 && line.slice(0, line.indexOf(': ')).endsWith('.url')
          ? `${line.slice(0, got)} (got a string, not shown)`
          : line;
      });
    throw new AgentCardError('AGENT_CARD_INVALID', 'is not a usable agent card', request, lines);
  }
}

/**
 * Fetches and checks an A2A agent card.
 *
 * The GET goes through `options.fetch` (or `policy.fetch(options.fetch)`), so a 429
 * or 503 with `Retry-After` is waited out and resent by the policy. A failing final
 * status throws an `HttpStatusError` (status, `retryAfterMs`, `serverMessage`,
 * redacted URL). The body is read under `maxBytes` and `bodyTimeoutMs`; a body that
 * is too large, not JSON, or not a usable card throws an {@link AgentCardError}: a
 * card's endpoints (`url`, `supportedInterfaces[].url`, `additionalInterfaces[].url`)
 * must be http: or https: URLs, and https: only when the card was fetched over https
 * (a gRPC interface's, and the `url` of a 0.3 card preferring gRPC, may be any gRPC
 * target); a card asked for over https and answered over plain http (a redirect) is
 * refused. A redirect to another origin is left to fetch, so the credentials your `fetch`
 * adds (an `auth()` in it) do not follow it there.
 * Without a policy, the whole resolution ends at `timeoutMs` (default 10 s) with a
 * `TimeoutError`, so a server that never answers cannot hang the caller.
 * Sends the same `A2A-Version: 1.0` header as the SDK's resolver.
 *
 * @example
 * ```ts
 * import { definePolicy } from 'breakwater';
 * import { resolveAgentCard } from 'breakwater/a2a';
 *
 * const policy = definePolicy({ name: 'travel-agent' });
 * const card = await resolveAgentCard('https://agent.example.com', { policy });
 * const skills = card.skills.map((skill) => skill.id);
 * ```
 */
export async function resolveAgentCard(
  baseUrl: string | URL,
  options?: ResolveAgentCardOptions,
): Promise<AgentCard> {
  const valid = validate(optionsSchema, options, 'resolveAgentCard()') ?? {};
  return resolveAgentCardThrough(baseUrl, {
    ...valid,
    fetch: valid.policy ? valid.policy.fetch(valid.fetch) : valid.fetch,
  });
}

/**
 * {@link resolveAgentCard} with its options checked, through `options.fetch` as the whole
 * chain (default the global fetch). Under `options.policy`, a chain that policy built:
 * `createA2AClient()`'s own, so the card GET and the client's calls share one `auth()`;
 * the policy's timeouts then bound the wait as in `resolveAgentCard`. `key` is the chain's
 * `key` option (default the policy's name, else the URL's origin), for messages.
 */
export async function resolveAgentCardThrough(
  baseUrl: string | URL,
  valid: ResolveAgentCardOptions,
  key?: KeyOption,
): Promise<AgentCard> {
  const fetch = valid.fetch ?? globalThis.fetch;
  let url: URL | undefined;
  try {
    url = new URL(valid.path ?? AGENT_CARD_PATH, baseUrl);
  } catch {}
  // A card is fetched over HTTP(S); any other scheme is the caller's mistake, not a server fault.
  if (url?.protocol !== 'http:' && url?.protocol !== 'https:')
    throw new TypeError('resolveAgentCard(): baseUrl must be an absolute http(s) URL');
  const href = url.href;
  const secure = url.protocol === 'https:';
  const init: RequestInit = { headers: { accept: 'application/json', 'a2a-version': '1.0' } };
  const call = new Call(href, init, key ?? valid.policy?.resolved.name, undefined);
  const request = requestSummary(call.key, 'GET', href);
  // A policy with timeouts already bounds the wait for headers; anything else gets a
  // deadline, so a server that accepts and never answers cannot hang the caller.
  const ms = valid.timeoutMs ?? (valid.policy?.resolved.timeout ? undefined : DEFAULT_TIMEOUT_MS);
  return within(ms, 'total', request, valid.signal, async (signal) => {
    init.signal = signal;
    // Over https, redirects within the origin are followed here, hop by hop: fetch tells
    // only the last URL, and a hop over plain http lets whoever answered it choose every hop
    // after it, an https server of their own included. One to another origin is left to
    // fetch (the hop that named it asked again, following): each hop here is a call of the
    // caller's fetch, whose credentials (an auth() in it, a wrapper's Authorization) then
    // went to that origin too, which fetch's own redirects and auth()'s keep them off. A
    // hop over plain http past it is seen only when it is the last (below).
    if (secure) init.redirect = 'manual';
    let at = href;
    let response: Response;
    for (let hops = 0; ; hops++) {
      const following = init.redirect === 'follow';
      response = await fetch(at, init).catch((error: unknown) => {
        throw failure(error, signal, request);
      });
      const location = response.headers.get('location');
      // A browser hides a redirect it was asked not to follow (an opaque one, status 0): it
      // follows it then itself, and refuses plain http from https on its own.
      if (response.type === 'opaqueredirect') init.redirect = 'follow';
      else if (
        !secure ||
        following ||
        location === null ||
        response.status < 300 ||
        response.status > 399 ||
        hops >= MAX_REDIRECTS
      )
        break;
      else {
        dropBody(response);
        // A Location that is no URL (which fetch would fail on) is refused as plain http is.
        let to = '';
        try {
          to = new URL(location, at).href;
        } catch {}
        if (!to.startsWith('https:')) throw insecure(request);
        if (new URL(to).origin === new URL(at).origin) at = to;
        else init.redirect = 'follow';
      }
    }
    if (!response.ok) {
      // The reason phrase as the chain's capture hid what its call sent (an auth() token,
      // which an old app server may quote there): this call, the chain's caller, knows none of it.
      const said = (response as Snapshotted)[SNAPSHOT];
      if (said) Object.defineProperty(response, 'statusText', { value: said.statusText });
      throw await statusError(call, response);
    }
    const body = await readCapped(
      response,
      valid.maxBytes ?? DEFAULT_MAX_BYTES,
      valid.bodyTimeoutMs ?? DEFAULT_BODY_TIMEOUT_MS,
      request,
      signal,
    );
    // Fetch follows a redirect from https to plain http (browsers block such mixed content;
    // runtimes do not): such a card crossed the network in clear, and anyone on the path
    // could have named the endpoints, https ones included, that get the client's messages
    // and tokens. Only after a redirect: a custom fetch may route an https URL to a local
    // TLS proxy by plain http itself. Checked once read, so the read's end cancels the body.
    if (secure && response.redirected && /^http:/i.test(response.url)) throw insecure(request);
    let json: unknown;
    try {
      // `fatal`: invalid UTF-8 is not a card, rather than a card with U+FFFD in its name.
      json = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body));
    } catch {
      // JSON.parse's message quotes the body: only the content type is shown.
      const type = (response.headers.get('content-type') ?? 'none').slice(0, 60);
      throw new AgentCardError('AGENT_CARD_NOT_JSON', `is not JSON (content-type ${type})`, request);
    }
    return checkCard(json, request, secure);
  });
}
