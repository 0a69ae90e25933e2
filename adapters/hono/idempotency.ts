/**
 * @module
 * `idempotency()`: the server half of `Idempotency-Key` (draft-ietf-httpapi-idempotency-key-header).
 * A keyed POST / PATCH runs its handler at most once per key; a repeat gets the first
 * response back, byte for byte, marked `Idempotent-Replayed: true` (the header Stripe
 * sends) and `x-should-retry: false` (resending gets the same answer). That is what
 * makes the client's `idempotencyKey()` safe: a keyed request counts as idempotent
 * there, so `retry()` resends it after a 5xx or a reset.
 *
 * Records live in a {@link Store} (JSON values), keyed by (scope, method, path, key):
 *
 *   absent ──compareAndSet──▶ running ──handler answered──▶ done (replayed)
 *                                 │                      └─▶ unreplayable (409 on repeats)
 *                                 └──handler said "not run"──▶ released (absent again)
 */

import type { Context, Env, MiddlewareHandler } from 'hono';
import * as z from 'zod/mini';
import { functionOption, validate } from '../../src/options.ts';
import { type JsonValue, memoryStore, type Store, storeSchema } from '../../src/store.ts';
import { MAX_DELAY_MS } from '../../src/timing.ts';
import { sha256Hex } from './digest.ts';
import { answer, BODY_HEADERS, exposeClientHeaders, problemResponse, TAKEN_FROM_FRONT } from './problem.ts';
import { NOT_RUN_REQUESTS, NOT_RUN_STATUSES, RUN_TO_END } from './upstream.ts';

/** How long a record is kept (24 h): long enough for any client's retries, as Stripe keeps keys. */
export const DEFAULT_TTL_MS = 86_400_000;
/** Methods that are deduplicated by default: the non-idempotent ones the client keys. */
export const DEFAULT_METHODS: readonly string[] = ['POST', 'PATCH'];
/**
 * The largest request body fingerprinted, and response body stored, by default
 * (256 KiB): tool calls and JSON-RPC bodies are far smaller.
 */
export const DEFAULT_MAX_BODY_BYTES = 262_144;
/**
 * How long one store operation may take (1 s) before it counts as failed. A Redis-like
 * store answers in milliseconds; one that hangs (a network partition, a stuck
 * connection pool) would otherwise hang every keyed request with it. A claim that
 * times out answers 503 (not run), and a final write that times out still lets the
 * response end.
 */
export const DEFAULT_STORE_TIMEOUT_MS = 1000;
/**
 * How long a claim holds its key unless renewed (30 s). The process running the
 * request renews it while it works, so only a claim whose process died (or lost the
 * store) lapses: its key is free again after at most this long, not after `ttlMs`.
 * Long enough that a live process stalled for a moment (a GC pause, a store blip)
 * keeps its claim; Redisson's lock watchdog uses the same lease, renewed as often.
 */
export const DEFAULT_LEASE_MS = 30_000;
/** Renewals per lease: a claim outlives two renewals lost in a row. */
const RENEWALS_PER_LEASE = 3;
/**
 * How long a response body goes on being read after its client left (60 s), so the
 * client's retry finds it recorded: long enough for a slow handler to finish (a model
 * completion takes tens of seconds), short enough that a body that never ends (a
 * feed, a long poll) is not read, nor its key held, for good.
 */
export const DEFAULT_DRAIN_MS = 60_000;
/**
 * Records the default in-memory store keeps at most (least recently used dropped
 * first). A record of a small response is about 340 characters, so 65,536 of them fit
 * in {@link DEFAULT_STORE_BYTES}: at 100 keyed requests a second a record lasts about
 * 11 minutes, far past any client's retries (4,096 lasted 40 s, less than one
 * Retry-After wait of 60 s, and a retry after that ran its handler again).
 */
export const DEFAULT_MAX_RECORDS = 65_536;
/**
 * What the default store's records may weigh together (32 MiB, in characters of
 * JSON; see `memoryStore()`'s `maxBytes`): the count alone let 4,096 records of
 * maximal bodies take 1.3 GiB (6 GiB for text JSON escapes heavily). Raised to
 * {@link RECORD_CHARS_PER_BODY_BYTE} × `maxBodyBytes` when that is more, so one
 * maximal record always fits: the store refuses a larger one, and its key would run
 * again once the claim's lease lapsed.
 */
export const DEFAULT_STORE_BYTES = 33_554_432;
/**
 * The most characters a record takes per body byte, and then some: JSON writes a
 * control character as 6 (`\u0001`), and the rest (status, headers, fingerprint)
 * fits in the other 2.
 */
const RECORD_CHARS_PER_BODY_BYTE = 8;
/** The longest key accepted, in characters of content (the draft sets none; this bounds store keys). */
export const MAX_KEY_CHARS = 255;
/**
 * The most characters of a request's media type kept in its records: RFC 6838 §4.2 allows
 * 127 for a type name and 127 for a subtype, so no registered type is longer, and a
 * client cannot make records of any size through its Content-Type.
 */
const MAX_MEDIA_TYPE_CHARS = 255;
/**
 * The context variable in which hono/request-id keeps the request's id (`c.var.requestId`):
 * a header set in front to it names the exchange, not the answer, so a replay carries the
 * repeat's own.
 */
const REQUEST_ID_VARIABLE = 'requestId';
/** The header that marks a replayed response (Stripe's name, which clients already know). */
export const REPLAYED_HEADER = 'Idempotent-Replayed';
/** The request header carrying the key (draft-ietf-httpapi-idempotency-key-header §2). */
const KEY_HEADER = 'idempotency-key';
/** The scope when no `scope` function is given: one shared namespace. */
const DEFAULT_SCOPE = '';
/** `Retry-After` on a 409 for a request still running: most handlers finish within a second. */
const IN_PROGRESS_RETRY_MS = 1000;
/** `Retry-After` on a 503 when the store fails: a store outage is usually brief. */
const STORE_RETRY_MS = 1000;
/** The largest `maxBodyBytes` accepted (64 MiB): records are held whole, as JSON, in the store. */
const MAX_BODY_BYTES_LIMIT = 67_108_864;
/**
 * What a released claim is swapped for. The Store has no compare-and-delete, and a
 * check followed by a `delete` is two steps: a store that stalls past the lease
 * between them lets another instance claim the key, and the delete then removes that
 * newer claim (its handler runs a second time for the next repeat). One
 * compare-and-set from our claim to this marker removes only our own claim; readers
 * take the marker as absent, and a claim may replace it.
 */
const RELEASED = { state: 'released' } as const;
/** How long the marker lasts: the shortest TTL a store takes, since an expired entry is absent anyway. */
const RELEASED_TTL_MS = 1;
/** Claim attempts before answering 409: a record can vanish between two reads when its owner releases it. */
const CLAIM_ATTEMPTS = 3;
/** Bytes per `String.fromCharCode` call when base64-encoding (keeps the argument list small). */
const BASE64_CHUNK_BYTES = 0x8000;
/** The header by which a server tells a client whether resending is worth it. */
const SHOULD_RETRY = 'x-should-retry';
/** What `x-should-retry` says on answers given before the handler ran: resending is safe. */
const NOT_RUN = { [SHOULD_RETRY]: 'true' };
/** What `x-should-retry` says on answers a resend with the same key would only repeat. */
const FINAL = { [SHOULD_RETRY]: 'false' };
/** Ends the connection after this answer (RFC 9112 §9.6). */
const CLOSE = { connection: 'close' };
/**
 * Response headers never stored: hop-by-hop ones (RFC 9110 §7.6.1, `proxy-*` too), `set-cookie` (a
 * replay must not hand out a session), and `content-length` (recomputed on replay).
 * Names come lower-cased from `Headers`; an anchored list of words matches in linear time.
 */
const UNSTORED_HEADERS =
  /^(connection|keep-alive|te|trailer|transfer-encoding|upgrade|proxy-.*|set-cookie|content-length)$/;
/** Stored statuses whose responses cannot carry a body (fetch's "null body statuses" from 200 up). */
const NULL_BODY_STATUSES: ReadonlySet<number> = new Set([204, 205, 304]);

/** Options for {@link idempotency}. */
export interface IdempotencyOptions<E extends Env = Env> {
  /**
   * Where records are kept. Default: a fresh `memoryStore({ maxEntries: 65_536,
   * maxBytes: 32 MiB })` (LRU + TTL) per `idempotency()` call, `maxBytes` raised to 8 ×
   * `maxBodyBytes` if that is more, so a maximal record fits. A record of a small
   * response is about 340 characters: 65,536 of them last about 11 minutes at 100 keyed
   * requests a second; records of large responses go sooner (128 of 256 KiB). A record
   * a store refuses with a `RangeError` (a `memoryStore` whose `maxBytes` it exceeds) is
   * kept as too large: repeats get 409, as for a body over `maxBodyBytes`. Pass a
   * shared store (Redis or the like) when several instances serve the same clients: a
   * retry may reach another instance.
   */
  store?: Store | undefined;
  /**
   * How long a record of a response is kept, in ms. Default 24 h. A key repeated after
   * that runs the handler again.
   */
  ttlMs?: number | undefined;
  /**
   * How long a claim (the record of a request still running) holds its key unless
   * renewed, in ms. Default 30 s (or `ttlMs`, if shorter). The process running the
   * request renews it every third of that until the response is recorded, so a
   * handler may run for as long as it needs. A claim left by a process that died, or
   * whose store failed on the final write, lapses within `leaseMs`; until then repeats
   * get 409, and after it the key runs again, as it would under a new key (the first
   * run may have had effects: nothing can tell). A process cut off from the store, or
   * stalled, for longer than this loses its claim while its handler runs, and a repeat
   * may run it a second time: keep it well above your longest pause.
   */
  leaseMs?: number | undefined;
  /** Methods deduplicated (any case). Default `['POST', 'PATCH']`; others pass through untouched. */
  methods?: readonly string[] | undefined;
  /**
   * Refuse a request of those methods without a key (400). Default `false`: an unkeyed
   * request passes through, as the draft allows.
   */
  required?: boolean | undefined;
  /**
   * Names the namespace a key lives in, e.g. the authenticated principal. Records are
   * keyed by (scope, method, path, key), so one user can never replay another's
   * response. Default: one namespace for everyone (`''`). **Multi-tenant apps MUST set
   * it** (after their auth middleware), or a client that reuses or guesses another
   * tenant's key gets that tenant's response.
   */
  scope?: ((c: Context<E>) => string | Promise<string>) | undefined;
  /**
   * The largest keyed request body read to fingerprint it, and the largest response
   * body stored for replay, in bytes. Default 256 KiB. A keyed request with a larger body
   * is refused with 413 (it cannot be fingerprinted in bounded memory); a larger
   * response is sent but not stored, and repeats get 409.
   */
  maxBodyBytes?: number | undefined;
  /**
   * How long one store operation (a claim, a read, the final write, a release) may
   * take, in ms, before it counts as failed. Default 1000. A claim or read that takes
   * longer is answered 503 with `Retry-After: 1` and `x-should-retry: true` (the
   * handler did not run), and a claim the store writes after that is released when it
   * lands, so it holds the key for nobody. A final write that takes longer lets the
   * response end all the same (the record lands when the store gets to it; until then
   * repeats get 409).
   */
  storeTimeoutMs?: number | undefined;
  /**
   * How long a response body goes on being read after its client left, in ms, so its
   * retry finds it recorded. Default 60 s. A body that has not ended by then is
   * cancelled (the handler's stream sees it) and recorded as not replayable: repeats
   * get 409, never a second run.
   */
  drainMs?: number | undefined;
}

/** An RFC 9110 §5.6.2 token: what method names are made of. */
const HTTP_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

const optionsSchema = z.optional(
  z.strictObject({
    store: z.optional(storeSchema),
    ttlMs: z.optional(z.number().check(z.minimum(1))),
    methods: z.optional(
      z
        .array(z.string().check(z.regex(HTTP_TOKEN, 'must be a method name')))
        .check(z.minLength(1, 'must list a method')),
    ),
    required: z.optional(z.boolean()),
    scope: z.optional(functionOption<(c: Context) => string | Promise<string>>()),
    maxBodyBytes: z.optional(
      z.number().check(z.int('must be a whole number'), z.minimum(0), z.maximum(MAX_BODY_BYTES_LIMIT)),
    ),
    storeTimeoutMs: z.optional(z.number().check(z.gt(0), z.maximum(MAX_DELAY_MS))),
    leaseMs: z.optional(z.number().check(z.gt(0), z.maximum(MAX_DELAY_MS))),
    drainMs: z.optional(z.number().check(z.minimum(0), z.maximum(MAX_DELAY_MS))),
  }),
);

/** What tells two requests under one key apart (see {@link answerRepeat}). */
type Print = {
  /** SHA-256 of method, path, query and body (see {@link fingerprintBody}), as hex. */
  fingerprint: string;
  /**
   * The request's media type (see {@link mediaType}). Records written before it was part
   * of a request's print have none: those are matched on `fingerprint` alone, as they
   * were then (a repeat of a key first sent before an upgrade is replayed, not a 422), and
   * a version before it, reading a record with one, ignores it alike.
   */
  type?: string;
};

/** A claim on a key: the handler is running (or the process died while it was). */
type RunningRecord = Print & {
  state: 'running';
  /** Epoch ms of the claim. Informative only; kept because earlier versions require it in a claim they read. */
  startedAt: number;
  /**
   * This claim's own name (`crypto.randomUUID()`), which every renewal, release and
   * final write compares on. Fingerprint and start time do not tell two claims apart:
   * the same request claimed again in the same millisecond (by another instance, after
   * this one's lease lapsed) matched them both, so a stale instance's release freed the
   * live claim (and a repeat ran the handler once more), and its final write replaced
   * it. A claim written before there was an id has none: it is read as running (409
   * to repeats) and lapses with its lease, and no claim with an id ever matches it.
   */
  id?: string;
};

/** A stored response, replayed to every repeat. */
type DoneRecord = Print & {
  state: 'done';
  status: number;
  /** Name-value pairs in order (a repeated header stays repeated). */
  headers: [string, string][];
  body: string;
  /** `utf8` when the body is valid UTF-8 (readable in the store), else `base64`. */
  encoding: 'utf8' | 'base64';
};

/** The handler ran, but its response could not be kept: repeats get 409, never a second run. */
type UnreplayableRecord = Print & {
  state: 'unreplayable';
  status: number;
  reason: 'too-large' | 'stream';
};

type IdempotencyRecord = RunningRecord | DoneRecord | UnreplayableRecord;

/** The {@link Print} of a record, as every record but a released one has it. */
const printSchema = { fingerprint: z.string(), type: z.optional(z.string()) };

/** Records come back from a store that may be shared or remote: checked, never trusted. */
const recordSchema = z.discriminatedUnion('state', [
  z.object({
    state: z.literal('running'),
    ...printSchema,
    startedAt: z.number(),
    id: z.optional(z.string()),
  }),
  z.object({
    state: z.literal('done'),
    ...printSchema,
    status: z.number().check(z.int(), z.minimum(200), z.maximum(599)),
    headers: z.array(z.tuple([z.string(), z.string()])),
    body: z.string(),
    encoding: z.enum(['utf8', 'base64']),
  }),
  z.object({
    state: z.literal('unreplayable'),
    ...printSchema,
    status: z.number(),
    reason: z.enum(['too-large', 'stream']),
  }),
  z.object({ state: z.literal(RELEASED.state) }),
]);

/** A valid key's content, for the messages that show one (quoted and bare). */
const EXAMPLE_KEY = '8e03978e-40d5-43e8-bc93-6894a57f9324';

/**
 * A key sent bare, without the quotes the draft asks for (`Idempotency-Key: 8e03978e-…`,
 * as Stripe and Adyen document it, and as most hand-written clients and curl users
 * send it): sf-token characters (RFC 8941 §3.3.4: the RFC 9110 §5.6.2 tchars, `:` and
 * `/`) and `=` (base64 padding, as in RFC 9110 §11.2's token68), in any order. That
 * covers the keys real clients make (UUIDs, ULIDs, base64 and base64url, Stripe-like
 * `idem_…`, `order:42/retry.1`) and leaves out what the strict parse refuses for a
 * reason: a comma (two keys a proxy joined into one field), whitespace, a quote or a
 * backslash (half of a quoted key), `;` (parameters), the other delimiters, control
 * characters and non-ASCII. Being lenient here costs clients that quote nothing: none
 * of these characters needs an escape, so a bare key and its quoted form have the same
 * content, and are the same key. An empty value matches, to be refused as empty.
 * Anchored, one character class: linear time.
 */
const BARE_KEY = /^[!#$%&'*+.^_`|~0-9A-Za-z:/=-]*$/;

/**
 * Reads the header's key: an RFC 8941 §3.3.3 sf-string (`"`, printable ASCII with `\"`
 * and `\\` as the only escapes, `"`), the draft's form, or a bare key (see
 * {@link BARE_KEY}). One linear pass; nothing may follow a closing quote (the draft
 * defines no parameters, and two keys joined by a comma are refused). Returns the
 * key's content, or `undefined` when the value is neither. The pass over a quoted key
 * stops as soon as its content is longer than {@link MAX_KEY_CHARS}, returning it so far.
 */
function parseKey(value: string): string | undefined {
  // Postel's rule, on input only: the draft (draft-ietf-httpapi-idempotency-key-header §2)
  // asks for an sf-string, but a server that refused bare keys would refuse most real
  // clients'. breakwater's own idempotencyKey() sends the quoted form.
  if (value.charCodeAt(0) !== 0x22) return BARE_KEY.test(value) ? value : undefined;
  let key = '';
  for (let i = 1; i < value.length; i++) {
    let c = value.charCodeAt(i);
    if (c === 0x22) return i === value.length - 1 ? key : undefined;
    if (c === 0x5c) {
      c = value.charCodeAt(++i);
      if (c !== 0x22 && c !== 0x5c) return undefined;
    } else if (c < 0x20 || c > 0x7e) {
      return undefined;
    }
    key += value[i];
    if (key.length > MAX_KEY_CHARS) return key;
  }
  return undefined;
}

/**
 * What the fingerprint hashes of a request body. A multipart body's boundary is the
 * sender's random pick, new on every send (fetch's FormData encoding does so, and Hono
 * too when it rebuilds a form an earlier middleware read), so a form is hashed as the
 * pieces between its delimiters (the first line, RFC 2046 §5.1.1: `--` and 1 to 70
 * characters): a resend of the same form is the same request. The pieces, not the
 * body with the delimiter cut out, which would join "a--xyzb" into "ab"; and only a
 * body that also ends with the close delimiter (`--boundary--`, as every fetch and
 * browser sends it) is a form: a text whose first line merely starts with `--` (a
 * diff, an SQL comment) is hashed whole.
 */
async function fingerprintBody(body: Blob): Promise<BlobPart> {
  const bytes = new Uint8Array(await body.arrayBuffer());
  // Not "--" first (45 is '-'): no form, and no decoding of the whole body to find out.
  if (bytes[0] !== 45 || bytes[1] !== 45) return body;
  // "latin1" decodes (as windows-1252) every byte to a character of its own: nothing is lost.
  const text = new TextDecoder('latin1').decode(bytes);
  // Lazy, and "--" allowed before the line's end: an empty form is its close delimiter alone.
  const delimiter = /^--[^\r\n]{1,70}?(?=(--)?(\r\n|$))/.exec(text)?.[0];
  return delimiter && text.trimEnd().endsWith(`${delimiter}--`)
    ? JSON.stringify(text.split(delimiter))
    : body;
}

/**
 * `text` (a path or a query) with its escapes in one form, the one the handler reads
 * alike (Hono's tryDecode: `c.req.param()`, `c.req.query()`). A run of escapes that is
 * UTF-8 is decoded there, so its hex case is no difference (RFC 3986 §6.2.2.1: %2f is
 * %2F) and those of unreserved characters are the characters (§6.2.2.2: ?to=%61 is
 * ?to=a, as a proxy may re-encode it). A run that is not UTF-8 reaches the handler as
 * sent, case and all ("%ff" and "%FF" are two ids, "%61%ff" is not "a%ff"): each of its
 * "%" is a percent sign, as a "%" that starts no escape is, and as "%25" is (the
 * handler of "/orders/100%" gets the id "100%", as that of "/orders/100%25" does).
 */
function normalEscapes(text: string): string {
  return text.replace(/(?:%[\da-f]{2})+|%/gi, (run) => {
    // A "%" that starts no escape, or a lone escape of a byte past ASCII, is never UTF-8:
    // known without decodeURIComponent's throw, microseconds each, which a hostile path
    // of them (a megabyte of "%": seconds of CPU) would multiply.
    if (run.length > 3 || /^%[0-7]/.test(run))
      try {
        decodeURIComponent(run);
        return run.replace(/%[\da-f]{2}/gi, (hex) => {
          const char = String.fromCharCode(Number.parseInt(hex.slice(1), 16));
          return /[\w.~-]/.test(char) ? char : hex.toUpperCase();
        });
      } catch {}
    return run.replace(/%/g, '%25');
  });
}

/**
 * The media type a request's body is labelled with (RFC 9110 §8.3.1), in the one form two
 * labels of the same type share: `type/subtype`, trimmed, in lower case (both names are
 * case-insensitive), without parameters; `''` for none. Parameters are left out: a
 * multipart body's `boundary` is new on every send (and left out of its fingerprint too),
 * and `charset` is said or not as a client library likes (fetch labels a string body
 * `text/plain;charset=UTF-8`; JSON defines none, RFC 8259 §11), so a resend through another
 * library would be refused. A repeat that changes only a parameter is the same request.
 */
function mediaType(value = ''): string {
  return (value.split(';', 1)[0] as string).trim().toLowerCase().slice(0, MAX_MEDIA_TYPE_CHARS);
}

/*
 * Both in plain loops, never an array as long as the body (Array.from, or
 * Uint8Array.from over a string, which lists it first): that holds a pointer per byte,
 * 8 times the body, and took 20 times as long (a 4 MiB binary replay: 600 ms, not 30).
 */
function toBase64(bytes: Uint8Array): string {
  let binary = '';
  for (let i = 0; i < bytes.length; i += BASE64_CHUNK_BYTES) {
    binary += String.fromCharCode(...bytes.subarray(i, i + BASE64_CHUNK_BYTES));
  }
  return btoa(binary);
}

function fromBase64(text: string): Uint8Array<ArrayBuffer> {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/**
 * The response headers a replay may repeat, in order. Not those only the middlewares in
 * front set for this exchange (`fromFront`: hono/request-id's X-Request-Id, a trace id): a
 * repeat's own go out with its replay (see `answer()`), and kept, the first request's id
 * went out with every replay, in place of the repeat's.
 */
function storableHeaders(
  headers: Headers,
  fromFront: (name: string, value: string) => boolean,
): [string, string][] {
  // Headers named in Connection are hop-by-hop too (RFC 9110 §7.6.1).
  const nominated = new Set(
    (headers.get('connection') ?? '').split(',').map((name) => name.trim().toLowerCase()),
  );
  const kept: [string, string][] = [];
  for (const [name, value] of headers) {
    if (UNSTORED_HEADERS.test(name) || nominated.has(name) || fromFront(name, value)) continue;
    kept.push([name, value]);
  }
  return kept;
}

/**
 * The context methods through which a handler sets headers: `c.header()` (and so
 * `c.redirect()`), and those that build an answer from the headers set so far and the
 * ones passed to them.
 */
const SETTERS = ['header', 'body', 'text', 'json', 'html', 'newResponse'] as const;

/**
 * Runs `next`, noting in `names` each header name set behind this middleware meanwhile
 * through one of the {@link SETTERS}. Such a header is the handler's own even when its
 * value is the one set in front (a Content-Language it always sends, which the front
 * negotiated to the same for the first request): replayed, it must stay its own.
 */
async function noteHeaders(c: Context, names: Set<string>, next: () => Promise<void>): Promise<boolean> {
  const methods = c as unknown as Record<string, ((...args: unknown[]) => unknown) | undefined>;
  const saved = SETTERS.map((name) => methods[name]);
  let built = false;
  SETTERS.forEach((name, i) => {
    methods[name] = (...args) => {
      built ||= i > 0;
      // c.header(name, value, options); c.json(data, status | init, headers).
      const given = i ? [(args[1] as ResponseInit | undefined)?.headers, args[2]] : [[[args[0], '']]];
      for (const headers of given) {
        if (headers) for (const key of new Headers(headers as ResponseInit['headers']).keys()) names.add(key);
      }
      return saved[i]?.(...args);
    };
  });
  try {
    await next();
  } finally {
    SETTERS.forEach((name, i) => {
      methods[name] = saved[i];
    });
  }
  return built;
}

/**
 * The record of a response whose whole body was `chunks` (joined through a Blob, which
 * copies them: they may be views into a larger, shared buffer): as text when it is
 * UTF-8, else base64. `headers` as {@link storableHeaders} keeps them.
 */
async function doneRecord(
  print: Print,
  status: number,
  headers: [string, string][],
  chunks: BlobPart[],
): Promise<DoneRecord> {
  const bytes = new Uint8Array(await new Blob(chunks).arrayBuffer());
  let body: string;
  let encoding: DoneRecord['encoding'] = 'utf8';
  try {
    body = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    body = toBase64(bytes);
    encoding = 'base64';
  }
  return { state: 'done', ...print, status, headers, body, encoding };
}

/**
 * Whether the handler's answer says it did not run (the client will resend it), or
 * `errorResponses()` said so of `request` (an upstream's refusal no retry changes).
 */
function saysNotRun(response: Response, request: Request): boolean {
  return (
    NOT_RUN_STATUSES.includes(response.status) ||
    response.headers.get(SHOULD_RETRY)?.toLowerCase() === 'true' ||
    NOT_RUN_REQUESTS.has(request)
  );
}

function replay(record: DoneRecord): Response {
  const headers = new Headers(record.headers);
  headers.set(REPLAYED_HEADER, 'true');
  // Resending the same key gets this same answer until the record expires, so a
  // client that would retry a replayed 500 or 503 should not: it would only burn attempts.
  headers.set(SHOULD_RETRY, 'false');
  // No type the first answer lacked: an empty record replays no body (a body gets a
  // text/plain default from @hono/node-server), and text goes as bytes (a string body
  // gets Response's `text/plain;charset=UTF-8`), so a bodiless 202 stays untyped.
  const body =
    NULL_BODY_STATUSES.has(record.status) || record.body === ''
      ? null
      : record.encoding === 'utf8'
        ? new TextEncoder().encode(record.body)
        : fromBase64(record.body);
  return new Response(body, { status: record.status, headers });
}

/** Replaces the context's response outright (Hono's setter would otherwise merge the old headers in). */
function setResponse(c: Context, response: Response): void {
  c.res = undefined;
  c.res = response;
}

function internalError(): Response {
  return problemResponse({ status: 500, title: 'Internal Server Error' });
}

/**
 * The answer to a repeat of a key that already has a record. Its problems, as all of this
 * middleware's, are of type `about:blank`, so their title is the status's reason phrase
 * (RFC 9457 §4.2.1), as every breakwater problem's is; what happened is in `detail`, and
 * the two 409s differ in `x-should-retry` too (in progress: `true`; not replayable: `false`).
 */
function answerRepeat(record: IdempotencyRecord, print: Print): Response {
  // The same key with another Content-Type is another request, though the bytes match
  // (the draft's 422: JSON and a form say different things). A record with no type
  // predates it (see Print) and is matched on its fingerprint alone.
  if (record.fingerprint !== print.fingerprint || (record.type ?? print.type) !== print.type) {
    return problemResponse({
      status: 422,
      title: 'Unprocessable Content',
      detail:
        'This key was used for a different request (method, target, body or media type). Use a new key.',
    });
  }
  switch (record.state) {
    case 'running':
      return problemResponse(
        {
          status: 409,
          title: 'Conflict',
          detail: 'A request with this key is still running. Retry with the same key.',
        },
        IN_PROGRESS_RETRY_MS,
        NOT_RUN,
      );
    case 'done':
      return replay(record);
    case 'unreplayable':
      return problemResponse(
        {
          status: 409,
          title: 'Conflict',
          detail: `This key's request already ran (status ${record.status}); its response was ${record.reason === 'stream' ? 'a stream' : 'too large'} to keep, and it will not run again.`,
          originalStatus: record.status,
        },
        undefined,
        FINAL,
      );
  }
}

/**
 * Deduplicates keyed requests (draft-ietf-httpapi-idempotency-key-header): the first
 * request with a key runs the handler and its response is stored; a repeat (same
 * scope, method, path and key, same body) gets that response again with
 * `Idempotent-Replayed: true` and `x-should-retry: false` (so a client does not burn
 * its attempts on a replayed 500), and the handler does not run.
 *
 * - **Key**: `Idempotency-Key` must be one key of at most 255 characters: a
 *   structured-field string (`"…"`, printable ASCII), as the draft asks, or bare (`8e03…`,
 *   as Stripe's clients and curl users send it: letters, digits and
 *   `` !#$%&'*+-.^_`|~:/= ``), the same key as its quoted form. Anything else (a list of
 *   keys, whitespace or a stray quote in a bare key, an empty value) is 400. Without a
 *   key the request passes through, unless `required` (400).
 * - **Path**: the one the app routed on (`c.req.path`, percent-decoded as Hono decodes
 *   it, the escapes it keeps in upper case, a `%` that starts none as `%25`), so
 *   `/orders/%61` is the same request as `/orders/a`, `/orders/a%2fb` as `/orders/a%2Fb`
 *   and `/orders/100%` as `/orders/100%25`; `/orders/%2561` is not. Escapes that are not
 *   UTF-8 reach the handler as sent, so they are kept so (`%ff` is not `%FF`, `%61%ff`
 *   not `a%ff`), their `%` read as `%25` (`%ff` is `%25ff`: the handler reads `%ff` for both).
 * - **Fingerprint**: SHA-256 of method, path and query, and body (a multipart body's
 *   random boundary left out, so a resent form matches). The query's escapes of
 *   unreserved characters are decoded, the others upper-cased and a `%` that starts
 *   none read as `%25` (`?to=%61` is `?to=a`), and escapes that are not UTF-8 kept as the
 *   path's are (`?to=%61%ff` is not `?to=a%ff`); parameters' order, `+` and reserved
 *   characters, bare or escaped, stay as sent (`?to=a%26b` is not `?to=a&b`). Beside it,
 *   the request's media type (`Content-Type` without parameters, in lower case): the same
 *   bytes sent as JSON and then as a form are two requests, `Application/JSON;
 *   charset=utf-8` and `application/json` one. Records from before the media type counted
 *   are matched without it. The same
 *   key with a different request is 422; a repeat while the first is still running is 409 with
 *   `Retry-After: 1` and `x-should-retry: true` (it did not run: resend it).
 * - **What is stored**: the response the client got, whatever its status (a 500 from
 *   a handler that threw is stored and replayed: it may have had effects), minus
 *   hop-by-hop headers, `set-cookie`, `content-length` and the headers only middlewares in
 *   front set for the request (a request id: a replay carries the repeat's own). A header
 *   set behind this middleware (`c.header()`, the headers given to `c.json()` and the
 *   like, those of a Response the handler made itself, without `c`, or proxy() passed
 *   on) is kept, even with the value set in front; one written straight into
 *   `c.res.headers` with that value is taken for the front's (nothing tells the two
 *   writes apart), and so is one with the request's id hono/request-id set in front
 *   (`c.var.requestId`), even echoed by the handler: a replay carries the repeat's own
 *   id. A response that says the
 *   request did not run (401, 403, 407, 408, 429, or `x-should-retry: true`) releases
 *   the key instead, so a retry runs the handler. `text/event-stream` responses and
 *   bodies over `maxBodyBytes` are sent but not stored: repeats get 409 "not
 *   replayable", never a second run. Anything rejected before this middleware stores nothing.
 * - **Streaming**: the response is passed on as the handler produces it, never held
 *   back until it ends; its record is written when the body ends (a repeat meanwhile
 *   gets the 409 above), even if the client left early: then for up to `drainMs` (60 s),
 *   after which a body still going is cancelled and recorded as not replayable. If the
 *   handler's body stream breaks, the client's breaks too, and repeats get a 500.
 * - **Limits**: a keyed request body over `maxBodyBytes` is 413 (never buffered whole).
 * - **Store failures fail closed**: a store that throws, or takes over `storeTimeoutMs`
 *   (1 s), gets a 503 with `Retry-After`, and the handler does not run. If only the
 *   final write (or a release) fails, the client gets the handler's response and the
 *   key stays `running` (repeats get 409) until its lease lapses (`leaseMs`, 30 s).
 * - **Claims are leases**: renewed while the request runs, so one left by a process
 *   that died frees its key within `leaseMs`, not `ttlMs`. Each claim carries a random
 *   id, so an instance whose claim lapsed renews, releases or records nothing over the
 *   claim taken after it (even one stamped in the same millisecond).
 *
 * Place it after authentication (so `scope` can name the principal) and after load
 * shedding and rate limits (what they reject never claims a key).
 *
 * @example
 * ```ts
 * import { Hono } from 'hono';
 * import { idempotency } from 'breakwater/hono';
 *
 * const app = new Hono<{ Variables: { user: string } }>();
 * app.use('/v1/*', bearerAuth({ token }), idempotency({ scope: (c) => c.get('user') }));
 * app.post('/v1/charges', async (c) => c.json(await charge(await c.req.json()), 201));
 * // POST /v1/charges  Idempotency-Key: "3b241101-e2bb-4255-8caf-4136c566a962"  → 201 (runs)
 * // the same again                                                            → 201, Idempotent-Replayed: true
 * ```
 *
 * `E` (the app's Env) is `any` unless given, as for Hono's own middleware: `app.use()`
 * passes none to a middleware call written inline, and with `Env` there `c.get('user')`
 * in `scope` did not compile (`'user'` is not assignable to `never`).
 */
// biome-ignore lint/suspicious/noExplicitAny: Hono's MiddlewareHandler default, so scope's c reads the app's variables
export function idempotency<E extends Env = any>(options?: IdempotencyOptions<E>): MiddlewareHandler<E> {
  const valid = validate(optionsSchema, options, 'idempotency()');
  const maxBodyBytes = valid?.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const given: Store =
    valid?.store ??
    memoryStore({
      maxEntries: DEFAULT_MAX_RECORDS,
      maxBytes: Math.max(DEFAULT_STORE_BYTES, RECORD_CHARS_PER_BODY_BYTE * maxBodyBytes),
    });
  /**
   * The store's calls as promises, whatever the store does: a method that throws where
   * it is called (a hand-written adapter's "client closed" guard) fails like one that
   * rejects. Else that throw escaped a renewal's timer (an unhandled rejection, which
   * ends a Node process) and broke the answer of a handler that had run.
   */
  const store = {
    get: async (key: string) => given.get(key),
    compareAndSet: async (...args: Parameters<Store['compareAndSet']>) => given.compareAndSet(...args),
  };
  const ttlMs = valid?.ttlMs ?? DEFAULT_TTL_MS;
  const methods: ReadonlySet<string> = new Set(
    (valid?.methods ?? DEFAULT_METHODS).map((method) => method.toUpperCase()),
  );
  const required = valid?.required ?? false;
  const scope = options?.scope;
  const storeTimeoutMs = valid?.storeTimeoutMs ?? DEFAULT_STORE_TIMEOUT_MS;
  const leaseMs = Math.min(valid?.leaseMs ?? DEFAULT_LEASE_MS, ttlMs);
  const drainMs = valid?.drainMs ?? DEFAULT_DRAIN_MS;
  /**
   * This instance's claims in force, by record key, until their outcome is written.
   * A bounded store drops its least recently used entries, and a claim renewed every
   * 10 s is one of them once enough newer keys arrive (65,536 small records, or 32 MiB, for the default store):
   * its repeat then found the key free and ran the handler a second time. Checked
   * before the store; as large as the requests in flight.
   */
  const claims = new Map<string, RunningRecord>();

  /** `operation`, or a rejection once it has taken longer than `storeTimeoutMs`. */
  function bounded<T>(operation: Promise<T>): Promise<T> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    // Rejected with no reason: every caller turns any store failure into the same answer.
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(reject, storeTimeoutMs);
    });
    return Promise.race([operation, late]).finally(() => clearTimeout(timer));
  }

  /**
   * Frees the key of the claim `running` if it is still ours (one that lapsed may be
   * another request's now): swaps it for {@link RELEASED} in one compare-and-set, never
   * a check and then a delete. Never rejects.
   */
  function release(recordKey: string, running: RunningRecord): Promise<unknown> {
    return store
      .compareAndSet(recordKey, { ...running }, { ...RELEASED }, RELEASED_TTL_MS)
      .catch(() => false);
  }

  /**
   * Renews the claim `running` every third of `leaseMs` until the returned function is
   * called (or the claim is found lost), so it lapses only if this process stops. That
   * function resolves once a renewal under way has settled: a claim it takes again may
   * land after a write sent later (another connection, a store reached over HTTP), and
   * over a free key it would hold the key for nobody until the lease lapsed.
   */
  function keepClaim(recordKey: string, running: RunningRecord): () => Promise<unknown> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stopped = false;
    let renewal: Promise<unknown> | undefined;
    const renewLater = (): void => {
      timer = setTimeout(async () => {
        // A renewal that fails is tried again next time (the lease allows for it); a lost claim is not.
        // One the store dropped (a shared store evicting under memory pressure) is taken again
        // while the key is free: else another instance's repeat ran the handler a second time.
        // Not once the outcome is being written: that write would find the claim, not a free key.
        renewal = bounded(
          store
            .compareAndSet(recordKey, { ...running }, { ...running }, leaseMs)
            .then(
              (kept) =>
                kept || (!stopped && store.compareAndSet(recordKey, undefined, { ...running }, leaseMs)),
            ),
        ).catch(() => true);
        if ((await renewal) && !stopped) renewLater();
      }, leaseMs / RENEWALS_PER_LEASE);
    };
    renewLater();
    return async () => {
      stopped = true;
      clearTimeout(timer);
      await renewal;
    };
  }

  function tooLarge(headers?: typeof CLOSE): Response {
    return problemResponse(
      {
        status: 413,
        title: 'Content Too Large',
        detail: `A keyed request's body may be at most ${maxBodyBytes} bytes.`,
        maxBodyBytes,
      },
      undefined,
      headers,
    );
  }

  /** The request body, or `undefined` when it is over the limit. The handler can still read it. */
  async function requestBody(c: Context<E>): Promise<Blob | undefined> {
    const raw = c.req.raw;
    if (raw.bodyUsed) {
      // An earlier middleware read it through Hono (c.req.json() and the like), which
      // keeps it in memory already; Hono rebuilds it from that cache.
      const bytes = new Blob([await c.req.arrayBuffer()]);
      return bytes.size > maxBodyBytes ? undefined : bytes;
    }
    // Read a clone, so the handler gets the body untouched; the clone's reader is
    // cancelled past the limit, so neither branch buffers more than that.
    const reader = raw.clone().body?.getReader();
    const chunks: BlobPart[] = [];
    let size = 0;
    while (reader !== undefined) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.byteLength;
      if (size > maxBodyBytes) {
        // Not awaited: cancelling one branch of a tee settles only once the other is
        // cancelled too, and the other is the handler's (the runtime drains it).
        reader.cancel().catch(() => {});
        return undefined;
      }
    }
    return new Blob(chunks);
  }

  /**
   * The handler's response, passed on as it is produced (a stream of tokens reaches
   * the client token by token, not once it ends), with a copy of at most
   * `maxBodyBytes` kept on the side; `save` gets the record as soon as it is known: at
   * once for an event stream or a declared over-long body, else when the body ends or
   * passes the limit. The body is read ahead of the client (at most `maxBodyBytes`
   * queued), so the record is saved even when nobody reads the response (the
   * connection dropped); a client that cancels has the rest read for it, so its retry
   * finds the whole response. `fromFront`: see {@link storableHeaders}.
   */
  async function capture(
    response: Response,
    print: Print,
    save: (record: DoneRecord | UnreplayableRecord) => Promise<unknown>,
    fromFront: (name: string, value: string) => boolean,
  ): Promise<Response> {
    const { status, headers, body } = response;
    const stored = storableHeaders(headers, fromFront);
    const unreplayable = (reason: UnreplayableRecord['reason']): Promise<unknown> =>
      save({ state: 'unreplayable', ...print, status, reason });
    // An event stream may run for minutes, and a replay could not reproduce its timing anyway.
    const events = headers.get('content-type')?.toLowerCase().startsWith('text/event-stream');
    if (body === null || events || Number(headers.get('content-length')) > maxBodyBytes) {
      await (body === null
        ? save(await doneRecord(print, status, stored, []))
        : unreplayable(events ? 'stream' : 'too-large'));
      return response;
    }
    const reader = body.getReader();
    let kept: BlobPart[] | undefined = [];
    let size = 0;
    async function read(): Promise<ReadableStreamReadResult<Uint8Array<ArrayBuffer>>> {
      let chunk: ReadableStreamReadResult<Uint8Array<ArrayBuffer>>;
      try {
        chunk = await reader.read();
      } catch (error) {
        // The handler's body broke: the client's copy breaks too, and repeats get a 500
        // (read to its end here, so it is saved before the client sees the break). The
        // copy goes first: a drain timer firing during that write must leave the 500 be.
        kept = undefined;
        await (await capture(internalError(), print, save, fromFront)).arrayBuffer();
        throw error;
      }
      if (kept === undefined) return chunk;
      if (chunk.done) {
        // Let go of the copy before its write, which takes a while: a drain timer that
        // fires meanwhile must find the body ended, not record it as unreplayable.
        const whole = kept;
        kept = undefined;
        await save(await doneRecord(print, status, stored, whole));
      } else {
        kept.push(chunk.value);
        size += chunk.value.byteLength;
        if (size > maxBodyBytes) {
          kept = undefined;
          await unreplayable('too-large');
        }
      }
      return chunk;
    }
    const passed = new ReadableStream<Uint8Array>(
      {
        async pull(controller): Promise<void> {
          const { done, value } = await read();
          if (done) controller.close();
          else controller.enqueue(value);
        },
        async cancel(reason): Promise<void> {
          // Read on for the retry, but not for ever: a body still going after drainMs is
          // given up (cancelling it ends the pending read) and recorded as unreplayable.
          const timer = setTimeout(() => {
            if (kept === undefined) return;
            kept = undefined;
            unreplayable('stream');
            reader.cancel(reason).catch(() => {});
          }, drainMs);
          try {
            while (kept !== undefined && !(await read()).done);
          } finally {
            // Also when the body breaks meanwhile: its 500 is recorded, and the timer must not follow it.
            clearTimeout(timer);
          }
          await reader.cancel(reason);
        },
      },
      { highWaterMark: maxBodyBytes + 1, size: (chunk) => chunk.byteLength },
    );
    return new Response(passed, { status, statusText: response.statusText, headers });
  }

  /**
   * Claims the key (resolving `undefined`), or returns the record that holds it:
   * `running` itself when the key kept being released between the two calls. Throws
   * when the store does, or when a record is not one this middleware wrote.
   */
  async function claim(recordKey: string, running: RunningRecord): Promise<IdempotencyRecord | undefined> {
    /** What the key holds while free: nothing, or a released claim's marker (until it expires). */
    let free: JsonValue | undefined;
    for (let attempt = 0; attempt < CLAIM_ATTEMPTS; attempt++) {
      const claiming = store.compareAndSet(recordKey, free, { ...running }, leaseMs);
      let claimed: boolean;
      try {
        claimed = await bounded(claiming);
      } catch (error) {
        // A claim that lands after its timeout (and the 503) would hold the key for nobody.
        claiming.then(
          (late) => late && release(recordKey, running),
          () => {},
        );
        throw error;
      }
      if (claimed) return undefined;
      free = await bounded(store.get(recordKey));
      // Released (or expired) between the two calls: try to claim it again, over the marker if it is there.
      if (free === undefined) continue;
      const parsed = recordSchema.safeParse(free);
      if (!parsed.success) throw new TypeError('idempotency(): the store holds a record it did not write');
      if (parsed.data.state !== RELEASED.state) return parsed.data as IdempotencyRecord;
    }
    return running;
  }

  return async function idempotency(c, next) {
    if (!methods.has(c.req.method)) return next();
    // Behind cors(): a page on another origin sees Idempotent-Replayed and Retry-After.
    exposeClientHeaders(c);
    const header = c.req.header(KEY_HEADER);
    if (header === undefined) {
      if (!required) return next();
      return answer(
        c,
        problemResponse({
          status: 400,
          title: 'Bad Request',
          detail: `${c.req.method} requests here need an Idempotency-Key header, e.g. "${EXAMPLE_KEY}".`,
        }),
      );
    }
    const key = parseKey(header);
    const refused =
      key === undefined
        ? `must be one key, quoted ("${EXAMPLE_KEY}": printable ASCII) or bare (${EXAMPLE_KEY}: letters, digits and !#$%&'*+-.^_\`|~:/= only)`
        : key === ''
          ? 'must not be empty'
          : key.length > MAX_KEY_CHARS
            ? `must be at most ${MAX_KEY_CHARS} characters long`
            : undefined;
    if (refused !== undefined) {
      return answer(
        c,
        problemResponse({
          status: 400,
          title: 'Bad Request',
          detail: `Idempotency-Key ${refused}`,
        }),
      );
    }

    const declared = Number(c.req.header('content-length'));
    if (declared > maxBodyBytes) return answer(c, tooLarge());
    const body = await requestBody(c);
    // Its body read in part, @hono/node-server kills the connection unannounced once the
    // answer is sent, and the client's next request on it failed ('other side closed'):
    // closing it openly makes the client open another (as nginx does on its own 413).
    if (body === undefined) return answer(c, tooLarge(CLOSE));

    const namespace = scope === undefined ? DEFAULT_SCOPE : await scope(c);
    if (typeof namespace !== 'string') {
      throw new TypeError(`idempotency(): scope() must return a string (got ${typeof namespace})`);
    }
    const method = c.req.method;
    // The path the app routed on (Hono's getPath: percent-decoded but for %25 and the
    // reserved characters), not the raw one: "/orders/%61" reaches the handler of
    // "/orders/a", and keyed by its raw form it ran that handler a second time.
    const path = normalEscapes(c.req.path);
    // The query as sent but for its escapes (see normalEscapes): order, "+" and reserved
    // characters, bare or escaped (a&b is not a%26b), stay as sent: they may change what the app reads.
    const query = normalEscapes(new URL(c.req.url).search);
    // JSON keeps the four parts apart whatever they contain: ("a", "b/c") is not ("a/b", "c").
    const recordKey = `idempotency:${JSON.stringify([namespace, method, path, key])}`;
    const print: Print = {
      fingerprint: await sha256Hex(`${method}\n${path}${query}\n`, await fingerprintBody(body)),
      type: mediaType(c.req.header('content-type')),
    };
    const running: RunningRecord = {
      state: 'running',
      ...print,
      startedAt: Date.now(),
      id: crypto.randomUUID(),
    };

    let holder: IdempotencyRecord | undefined = claims.get(recordKey);
    if (holder !== undefined) return answer(c, answerRepeat(holder, print));
    try {
      holder = await claim(recordKey, running);
    } catch {
      return answer(
        c,
        problemResponse(
          {
            status: 503,
            title: 'Service Unavailable',
            detail:
              'The idempotency store did not answer, so the key could not be checked: not run. Retry with the same key.',
          },
          STORE_RETRY_MS,
          NOT_RUN,
        ),
      );
    }
    if (holder !== undefined) return answer(c, answerRepeat(holder, print));
    claims.set(recordKey, running);
    const forget = (): void => {
      if (claims.get(recordKey) === running) claims.delete(recordKey);
    };

    // The key is ours: from here on the handler may have had effects, so whatever
    // happens, the outcome is recorded (or the key released if the handler says it did not run).
    // Its upstream calls run to their end even if the client leaves: the retry is coming for the answer.
    RUN_TO_END.add(c.req.raw);
    const letGo = keepClaim(recordKey, running);
    // What the middlewares in front set so far, to be left out of the record: a copy, as
    // @hono/node-server's Response may hold the very Headers the handler goes on to set.
    const outer = new Headers(c.newResponse(null).headers);
    // hono/request-id's id for this exchange (its documented variable), whatever its header's name.
    const exchangeId = (c.get as (key: string) => unknown)(REQUEST_ID_VARIABLE);
    const ownNames = new Set<string>();
    let response: Response;
    let built = true;
    try {
      built = await noteHeaders(c, ownNames, next);
      response = c.res;
    } catch {
      // Hono's compose turns a thrown Error into the app's onError response before it
      // reaches here; anything else thrown (a string, say) ends up here.
      response = internalError();
    }
    // An answer the handler built with none of c.body(), c.json() and the like, lacking a
    // header set in front, was made without them (a Response of its own, an upstream's):
    // its headers are its maker's, even one whose value is the front's, but for those
    // answer() took from the front. One built through c lacks a front header only where
    // the handler removed it (c.header(name, undefined)), which says nothing of the others.
    const taken = TAKEN_FROM_FRONT.get(response);
    const made =
      taken !== undefined || (!built && [...outer.keys()].some((name) => !response.headers.has(name)));
    // The headers that describe the body are the answer's whoever set them: answer()
    // never puts the repeat's on a replay, so one left out (a front's Content-Type over
    // the handler's c.body()) would be lost. A header the front set to this exchange's
    // request id is the front's even where the handler set it too: echoing the id, it
    // said "this request's", and kept, a repeat went out with the first request's id.
    const fromFront = (name: string, value: string): boolean =>
      !BODY_HEADERS.test(name) &&
      outer.get(name) === value &&
      (value === exchangeId || (!ownNames.has(name) && (!made || taken?.has(name) === true)));

    if (saysNotRun(response, c.req.raw)) {
      await letGo();
      await bounded(release(recordKey, running)).catch(() => false);
      forget();
      if (response !== c.res) setResponse(c, response);
      return;
    }

    // Only over our own claim, or a free key (the store dropped the claim): a record that
    // expired mid-handler and was claimed again is not overwritten.
    const save = async (record: DoneRecord | UnreplayableRecord): Promise<unknown> => {
      await letGo();
      return bounded(
        store
          .compareAndSet(recordKey, { ...running }, record, ttlMs)
          .then((ours) => ours || store.compareAndSet(recordKey, undefined, record, ttlMs)),
      )
        .catch(
          // A record the store refuses for its size (memoryStore's maxBytes) would leave the
          // claim to lapse and a repeat to run the handler again: it is kept as too large, as
          // a body over maxBodyBytes is (a record smaller than the claim was).
          (error: unknown) =>
            error instanceof RangeError &&
            record.state === 'done' &&
            save({ state: 'unreplayable', ...print, status: record.status, reason: 'too-large' }),
        )
        .finally(forget);
    };
    let sent: Response;
    try {
      sent = await capture(response, print, save, fromFront);
    } catch {
      // Its body could not be read at all (already used): the client, and repeats, get a 500.
      sent = await capture(internalError(), print, save, fromFront);
    }
    setResponse(c, sent);
  };
}
