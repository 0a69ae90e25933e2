/**
 * @module
 * `mcpResend()`: tells breakwater which MCP requests are safe to send twice.
 *
 * Every MCP request over Streamable HTTP is a POST, so by method alone none of them
 * may be resent after a 503 or a connection reset: the server may have run it. Most
 * of them only read (`tools/list`, `resources/read`, `ping`), and some tools say in
 * their annotations that they only read or that repeating them changes nothing. This
 * reads the JSON-RPC body the SDK sends and marks the call idempotent (DESIGN.md §5)
 * when every message in it is one of those; everything else (a `tools/call` of any
 * other tool, answers to the server's sampling or elicitation requests, unknown
 * methods, bodies that are not JSON) stays unmarked and is never resent on a guess.
 */

import * as z from 'zod/mini';
import type { Call, Middleware, Next } from '../../src/call.ts';
import { functionOption, validate } from '../../src/options.ts';

/**
 * The longest body read, in UTF-16 code units (256 Ki): the SDK's bodies are strings
 * it just built, so parsing costs time, not memory, and a bigger body is left unmarked.
 */
export const DEFAULT_MAX_BODY_CHARS = 262_144;
/** How many tool names `learn()` keeps: a server listing more cannot grow memory without end. */
const MAX_TOOLS = 4096;

/**
 * JSON-RPC methods a client sends that change nothing when they run twice:
 * - reads: `ping`, the `*\/list` methods, `prompts/get`, `resources/read`,
 *   `completion/complete`, `tasks/get`, `tasks/result`;
 * - setters whose second run leaves the same state: `logging/setLevel`,
 *   `resources/subscribe`, `resources/unsubscribe`;
 * - `initialize`: a lost answer is always followed by a fresh `initialize` (the
 *   client cannot go on without one), so resending it now does what the caller would
 *   do anyway, sooner; at worst the server keeps an unused session until it expires;
 * - the spec's client notifications: `initialized`, `cancelled`, `progress` and
 *   `roots/list_changed` announce state, and a second copy announces the same.
 */
const SAFE_METHODS: ReadonlySet<string> = new Set([
  'ping',
  'initialize',
  'tools/list',
  'prompts/list',
  'prompts/get',
  'resources/list',
  'resources/templates/list',
  'resources/read',
  'resources/subscribe',
  'resources/unsubscribe',
  'completion/complete',
  'logging/setLevel',
  'tasks/get',
  'tasks/list',
  'tasks/result',
  'notifications/initialized',
  'notifications/cancelled',
  'notifications/progress',
  'notifications/roots/list_changed',
]);

/** A tool as `tools/list` describes it: the part resend safety reads. */
export interface McpToolInfo {
  /** The tool's name, as `tools/call` names it (`params.name`): hints are learned per name. */
  name: string;
  /** The server's hints (MCP `ToolAnnotations`); only `readOnlyHint` and `idempotentHint` are read. */
  annotations?: { readOnlyHint?: boolean | undefined; idempotentHint?: boolean | undefined } | undefined;
}

/** Options for {@link mcpResend}. */
export interface McpResendOptions {
  /**
   * Tools you vouch for as safe to call twice, by name or by a predicate, on top of
   * what the server's annotations say. Default: none.
   */
  tools?: readonly string[] | ((name: string) => boolean) | undefined;
  /**
   * Trust the server's `readOnlyHint` / `idempotentHint` from `tools/list` (passed to
   * `learn()`). Default `true`. The hints come from the server: a server that lies
   * about them gets its own tool called twice. Set `false` for servers you do not
   * trust; then only `tools` counts.
   */
  hints?: boolean | undefined;
  /** The longest body parsed, in characters. Default 262,144; a longer body is left unmarked. */
  maxBodyChars?: number | undefined;
}

/** A `tools/list` result (`await client.listTools()`): one page of the server's tools. */
export interface McpToolsList {
  /** The tools on this page: only `name` and `annotations` are read; at most 4096 tools are remembered as safe. */
  tools: readonly McpToolInfo[];
  /** Where the listing goes on (MCP pagination); absent on its last page. */
  nextCursor?: string | undefined;
}

/** The `mcpResend()` middleware, with the tool list it learns from. */
export interface McpResend extends Middleware {
  /**
   * Records which tools the server annotates as read-only or idempotent, from one
   * `tools/list` result: `learn(await client.listTools())` for a listing's first page,
   * `learn(await client.listTools({ cursor }), cursor)` for each later one. A first
   * page (no `cursor`) replaces every hint learned before, so a tool the server dropped
   * or stripped of its hints stops being resent. A page requested with the cursor the
   * previous page's `nextCursor` gave adds to that listing; any other page (stale, out
   * of order, an unknown cursor) only forgets: each tool it names stops being resent.
   * A bare array of tools (`result.tools`) is a page without a `nextCursor`. Tools you
   * list in `tools` are never forgotten. Ignored with `hints: false`. A call of a tool
   * forgotten while it runs, or while retry waits to resend it, is no longer resent.
   *
   * When the server sends `notifications/tools/list_changed`, call `learn({ tools: [] })`
   * (an empty first page: every learned hint is forgotten, `tools` stay) or list again:
   * until then the hints describe the old tools, and one turned destructive would still
   * be resent. `resilientMcpClient()` does this itself.
   */
  learn(list: McpToolsList | readonly McpToolInfo[], cursor?: string): void;
  /** Whether this call's body is MCP traffic that is safe to send twice. */
  isSafe(call: Call): boolean;
}

/** Shared by `mcpResend()` and `mcpFetch()`, whose options include these. */
export const resendShape: {
  /** Checks {@link McpResendOptions.tools}: an array of names or a function. */
  tools: z.ZodMiniOptional<z.ZodMiniType<string[] | ((name: string) => boolean)>>;
  /** Checks {@link McpResendOptions.hints}: a boolean. */
  hints: z.ZodMiniOptional<z.ZodMiniType<boolean>>;
  /** Checks {@link McpResendOptions.maxBodyChars}: a whole number, at least 0. */
  maxBodyChars: z.ZodMiniOptional<z.ZodMiniType<number>>;
} = {
  tools: z.optional(z.union([z.array(z.string()), functionOption<(name: string) => boolean>()])),
  hints: z.optional(z.boolean()),
  maxBodyChars: z.optional(z.number().check(z.int(), z.minimum(0))),
};

const optionsSchema = z.optional(z.strictObject(resendShape));

/**
 * A parsed JSON value's own field `key` (never an inherited one: a polluted
 * `Object.prototype.method` must not make a response look like a `ping`).
 */
export function own(value: unknown, key: string): unknown {
  // Object() boxes primitives and turns null into {}: none of them owns a JSON-RPC field.
  return Object.hasOwn(Object(value), key) ? (value as Record<string, unknown>)[key] : undefined;
}

/**
 * Marks MCP calls idempotent when every JSON-RPC message in the body is read-only
 * (see the module doc), or a `tools/call` of a tool that is safe to call twice (by
 * the server's `readOnlyHint` / `idempotentHint`, learned with `learn()`, or listed
 * in `tools`). Put it anywhere in a `createFetch()` chain: retry reads the mark when
 * it judges a failed attempt. With `definePolicy()`, use `mcpFetch()`.
 *
 * Only string bodies up to `maxBodyChars` are parsed; other bodies, garbage and
 * parse errors leave the call as it was, never throw.
 *
 * @example
 * ```ts
 * import { captureStatus, createFetch, retry } from 'breakwater';
 * import { mcpResend } from 'breakwater/mcp';
 *
 * const resend = mcpResend({ tools: ['search'] });
 * const fetch = createFetch({ use: [resend, retry(), captureStatus()] });
 * const transport = new StreamableHTTPClientTransport(new URL('https://mcp.example.com/mcp'), { fetch });
 * await client.connect(transport);
 * resend.learn(await client.listTools()); // tools annotated readOnlyHint/idempotentHint
 * ```
 */
export function mcpResend(options?: McpResendOptions): McpResend {
  const valid = validate(optionsSchema, options, 'mcpResend()');
  const vouched = valid?.tools;
  const hints = valid?.hints ?? true;
  const maxBodyChars = valid?.maxBodyChars ?? DEFAULT_MAX_BODY_CHARS;
  const listed = new Set(Array.isArray(vouched) ? vouched : []);
  /** Tools the current listing annotates as safe (never the user's own `tools`). */
  const learned = new Set<string>();
  /** The `nextCursor` of the current listing's latest page: the only cursor whose page may add. */
  let next: string | undefined;
  /**
   * Calls this middleware marked on tools that retry still holds, with those tools' names:
   * `learn()` unmarks those it made unsafe, without reading their bodies again (a server
   * may send list_changed at will, and bodies run to `maxBodyChars`).
   */
  const inFlight = new Map<Call, unknown[]>();
  /**
   * Calls this middleware marked on tools (held weakly): inside `retry()` each attempt
   * passes here again, and the mark is judged again then, not taken for the caller's own.
   */
  const ours = new WeakSet<Call>();

  /** Called only inside isSafe()'s try: a predicate that throws vouches for nothing. */
  function safeTool(name: unknown): boolean {
    return (
      typeof name === 'string' &&
      (learned.has(name) || listed.has(name) || (typeof vouched === 'function' && vouched(name) === true))
    );
  }

  /**
   * A JSON-RPC 2.0 request or notification with a safe method. Names match exactly
   * (JSON-RPC method names are case-sensitive): `Tools/List` or ` ping` is unknown,
   * so unsafe. A message without a method (a response to the server) is not safe. The
   * name of a tool it calls goes to `names`.
   */
  function safeMessage(message: unknown, names: unknown[]): boolean {
    const method = own(message, 'method');
    if (own(message, 'jsonrpc') !== '2.0' || typeof method !== 'string') return false;
    if (SAFE_METHODS.has(method)) return true;
    const name = own(own(message, 'params'), 'name');
    names.push(name);
    return method === 'tools/call' && safeTool(name);
  }

  /** Whether the tools of a call are all still safe; a predicate that throws vouches for nothing. */
  function safeTools(names: unknown[]): boolean {
    try {
      return names.every(safeTool);
    } catch {
      return false;
    }
  }

  /** The names of the tools a safe call calls (none for safe methods alone); undefined when it is not safe. */
  function judge(call: Call): unknown[] | undefined {
    try {
      const body = call.body;
      if (call.method !== 'POST' || typeof body !== 'string' || body.length > maxBodyChars) return undefined;
      const parsed: unknown = JSON.parse(body);
      const messages = Array.isArray(parsed) ? parsed : [parsed];
      // Only a body exactly as JSON.stringify() writes it (as the SDK sends) is judged. A
      // key given twice ({"method":"ping","method":"tools/call"}) reads as its last value
      // here but as its first on some servers; re-serialising drops one copy, so it differs.
      // A batch is as safe as its least safe message; an empty batch is not a request.
      const names: unknown[] = [];
      return JSON.stringify(parsed) === body &&
        messages.length > 0 &&
        messages.every((message) => safeMessage(message, names))
        ? names
        : undefined;
    } catch {
      // Not JSON, or a getter on the caller's init that throws: not marked, and the
      // fetch underneath reports the init's problem itself.
      return undefined;
    }
  }

  function isSafe(call: Call): boolean {
    return judge(call) !== undefined;
  }

  const middleware = function mcpResend(call: Call, next: Next): Promise<Response> {
    // Marked already by its caller: nothing to add, and nothing of ours to take back.
    if (call.idempotent && !ours.has(call)) return next(call);
    // Judged at every pass: a tool forgotten since an earlier attempt's mark (a resend
    // retry decided on it) does not let this attempt's failure be resent too.
    const names = judge(call);
    call.idempotent = names !== undefined;
    // Safe by its methods alone: nothing learn() forgets can change that.
    if (names === undefined || names.length === 0) return next(call);
    ours.add(call);
    // A live mark: inside retry() the call leaves inFlight between attempts, and retry
    // looks at the mark again after its wait, when learn() may have forgotten a tool.
    // Once found unsafe it stays so (learn() sets it false for a call in flight).
    let safe = true;
    Object.defineProperty(call, 'idempotent', {
      configurable: true,
      get: () => (safe &&= safeTools(names)),
      set: (value: boolean) => {
        safe = value;
      },
    });
    inFlight.set(call, names);
    return next(call).finally(() => inFlight.delete(call));
  } as McpResend;
  middleware.isSafe = isSafe;
  middleware.learn = (list, cursor) => {
    // An array owns no `tools`: it is the tools themselves.
    const tools = own(list, 'tools') ?? list;
    if (!hints || !Array.isArray(tools)) return;
    // A first page starts a new listing: what earlier listings said is stale.
    if (cursor === undefined) {
      learned.clear();
      next = cursor;
    }
    // Only a first page or the one the current listing points to next may add; a stale
    // or unknown page may describe an older tool set, so it can only take marks away.
    const adds = cursor === next;
    if (adds) next = own(list, 'nextCursor') as string | undefined;
    for (const tool of tools as readonly (McpToolInfo | null)[]) {
      // A name that is not a string may be stored but never matches: safeTool() checks.
      const name = tool?.name as string;
      const hinted = tool?.annotations;
      if (adds && (hinted?.readOnlyHint === true || hinted?.idempotentHint === true)) {
        if (learned.size < MAX_TOOLS) learned.add(name);
      } else {
        learned.delete(name);
      }
    }
    // A hint forgotten while a call runs (tools/list_changed, a listing without the tool):
    // retry judges that call's failure unmarked, so a tool the server has just made
    // destructive is not resent. One learned again meanwhile stays unmarked.
    for (const [call, names] of inFlight) if (!safeTools(names)) call.idempotent = false;
  };
  return middleware;
}
