/**
 * @module
 * `captureStatus()`: remembers what a failing server said (status, Retry-After, the
 * start of the body, its error message, safe headers) before an SDK turns the
 * response into an error that has lost all of it.
 *
 * The caller's body is never consumed: the snapshot reads a bounded prefix from a
 * clone (a tee of the body) and cancels that branch. Only responses with status >= 400
 * pay for this; every other response costs one comparison. Streaming bodies
 * (`text/event-stream`) are never read, and a body that trickles in slowly is read
 * for at most `bodyWaitMs` (default 1 s).
 */

import * as z from 'zod/mini';
import { ATTACH, type Call, type FetchLike, type Middleware, type Next } from './call.ts';
import { validate } from './options.ts';
import { redactUrl, safeHeaders } from './redact.ts';
import { retryDelay } from './timing.ts';

/** Default number of body bytes kept in a snapshot (DESIGN.md §4: 2 KiB). */
export const DEFAULT_BODY_BYTES = 2048;
/** The most body bytes a snapshot may be configured to keep: a snapshot is a hint, not a copy. */
const MAX_BODY_BYTES = 64 * 1024;
/** How long a snapshot waits for the body prefix before keeping what it has, by default. */
export const DEFAULT_BODY_WAIT_MS = 1000;
/** The longest configurable wait: a snapshot must never hold a response back for long. */
const MAX_BODY_WAIT_MS = 30_000;
/** How many servers' last snapshots are kept (least recently written dropped first). */
const MAX_KEYS = 1000;
/** `serverMessage` fallback (a non-JSON body) is cut to this many characters. */
const MAX_MESSAGE_CHARS = 400;

/** What a failing server said, frozen at the moment the response headers arrived. */
export interface StatusSnapshot {
  /** The server's name in breakwater. */
  readonly key: string;
  readonly method: string;
  /** Redacted: no userinfo, no query values. */
  readonly url: string;
  readonly status: number;
  readonly statusText: string;
  /** The server's requested wait (see `retryDelay`), or undefined. */
  readonly retryAfterMs: number | undefined;
  /** The start of the body, decoded and collapsed to one line (at most `bodyBytes` bytes read). */
  readonly body: string;
  /** The error message from a JSON error body, else the body cut to 400 characters; undefined when empty. */
  readonly serverMessage: string | undefined;
  /** Allowlisted headers only: timing, rate limits, request ids, content type. */
  readonly headers: Readonly<Record<string, string>>;
  /** When the response arrived, epoch ms. */
  readonly at: number;
}

/** A fetch whose snapshots belong to it alone (one connect attempt, say). */
export interface CaptureScope {
  /** Use this fetch for the operation; its failure responses are recorded here. */
  readonly fetch: FetchLike;
  /** The latest snapshot taken through this scope's fetch. */
  last(): StatusSnapshot | undefined;
  /** Every snapshot taken through this scope's fetch, oldest first. */
  all(): readonly StatusSnapshot[];
}

/** The `captureStatus()` middleware, with its readers. */
export interface CaptureStatus extends Middleware {
  /** The latest snapshot for a server key, from any call. */
  last(key: string): StatusSnapshot | undefined;
  /**
   * A fetch whose snapshots are kept apart from every other call's, so a status from
   * one response is never paired with a Retry-After from another, even for concurrent
   * requests to the same key. `fetch` defaults to the chain this capture is part of.
   */
  scope(fetch?: FetchLike): CaptureScope;
}

/** Options for {@link captureStatus}. */
export interface CaptureStatusOptions {
  /** Body bytes kept in a snapshot. Default 2048; at most 65,536. */
  bodyBytes?: number | undefined;
  /**
   * How long to wait for those bytes, in ms, before keeping what arrived. Default
   * 1000. The caller gets the response only after this, so it bounds the delay a
   * slow error body can add.
   */
  bodyWaitMs?: number | undefined;
}

/** Carries a scope from a scoped fetch into the chain, on the init object. */
const SCOPE = Symbol.for('breakwater.captureScope');
/** Where a snapshot of the current response is left for `throwOnStatus()` on the same call. */
const LAST_SNAPSHOT = Symbol('breakwater.lastSnapshot');

interface ScopeRecorder {
  snapshots: StatusSnapshot[];
}

const optionsSchema = z.optional(
  z.strictObject({
    bodyBytes: z.optional(
      z.number().check(z.int('must be a whole number of bytes'), z.minimum(0), z.maximum(MAX_BODY_BYTES)),
    ),
    bodyWaitMs: z.optional(z.number().check(z.minimum(0), z.maximum(MAX_BODY_WAIT_MS))),
  }),
);

/** Collapses whitespace runs (newlines included) to single spaces. */
function oneLine(text: string): string {
  let out = '';
  let space = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    // tab, LF, VT, FF, CR, space
    if (c === 9 || c === 10 || c === 11 || c === 12 || c === 13 || c === 32) {
      space = out.length > 0;
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += text[i];
  }
  return out;
}

function stringAt(value: unknown, ...path: string[]): string | undefined {
  let v = value;
  for (const step of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<string, unknown>)[step];
  }
  return typeof v === 'string' && v.length > 0 ? v : undefined;
}

/**
 * The message of a JSON error body, from the shapes servers use: `{error:{message}}`
 * (OpenAI, JSON-RPC `{error:{code,message}}`), `{type:'error',error:{message}}`
 * (Anthropic), `{error:'...'}`, `{message}`, and RFC 9457 `{detail}` / `{title}`.
 */
export function jsonErrorMessage(text: string): string | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  return (
    stringAt(parsed, 'error', 'message') ??
    stringAt(parsed, 'error') ??
    stringAt(parsed, 'message') ??
    stringAt(parsed, 'detail') ??
    stringAt(parsed, 'title')
  );
}

/** The message a person should see for a body: a JSON error message, else the body on one line, cut. */
export function serverMessageOf(text: string): string | undefined {
  const fromJson = jsonErrorMessage(text);
  const message = oneLine(fromJson ?? text);
  if (message.length === 0) return undefined;
  return message.length > MAX_MESSAGE_CHARS ? `${message.slice(0, MAX_MESSAGE_CHARS)}…` : message;
}

function isStreaming(response: Response): boolean {
  const type = response.headers.get('content-type');
  return type?.toLowerCase().includes('text/event-stream') === true;
}

/**
 * Reads at most `bytes` bytes from a stream, for at most `waitMs`, then cancels it.
 * Never throws: a broken stream yields what arrived before it broke.
 */
export async function readPrefix(
  stream: ReadableStream<Uint8Array> | null,
  bytes: number,
  waitMs: number = DEFAULT_BODY_WAIT_MS,
): Promise<string> {
  if (stream === null || bytes === 0) {
    await stream?.cancel().catch(() => {});
    return '';
  }
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), waitMs);
  });
  try {
    while (size < bytes) {
      const next = await Promise.race([reader.read(), timedOut]);
      if (next === 'timeout' || next.done) break;
      chunks.push(next.value);
      size += next.value.byteLength;
    }
  } catch {
    // The body broke: keep what arrived.
  } finally {
    clearTimeout(timer);
    reader.cancel().catch(() => {});
  }
  const joined = new Uint8Array(Math.min(size, bytes));
  let offset = 0;
  for (const chunk of chunks) {
    const take = Math.min(chunk.byteLength, joined.byteLength - offset);
    joined.set(chunk.subarray(0, take), offset);
    offset += take;
    if (offset === joined.byteLength) break;
  }
  // A cut may split a UTF-8 sequence: decoding in stream mode holds the partial
  // character back instead of adding a replacement character past the byte limit.
  return new TextDecoder().decode(joined, { stream: size > bytes });
}

/**
 * Takes a snapshot of a failure response without consuming the caller's body:
 * the prefix is read from a clone, which is then cancelled.
 */
export async function takeSnapshot(
  call: Call,
  response: Response,
  bodyBytes: number = DEFAULT_BODY_BYTES,
  bodyWaitMs: number = DEFAULT_BODY_WAIT_MS,
): Promise<StatusSnapshot> {
  const at = Date.now();
  let text = '';
  if (!isStreaming(response) && response.body !== null && bodyBytes > 0 && !response.bodyUsed) {
    text = await readPrefix(response.clone().body, bodyBytes, bodyWaitMs);
  }
  return Object.freeze({
    key: call.key,
    method: call.method,
    url: redactUrl(call.href),
    status: response.status,
    statusText: response.statusText,
    retryAfterMs: retryDelay(response.headers, at),
    body: oneLine(text),
    serverMessage: serverMessageOf(text),
    headers: Object.freeze(safeHeaders(response.headers)),
    at,
  });
}

/**
 * The snapshot `captureStatus()` already took of this exact response on this call,
 * so `throwOnStatus()` outside it does not read the body a second time.
 */
export function snapshotFor(call: Call, response: Response): StatusSnapshot | undefined {
  const left = call.bag.get(LAST_SNAPSHOT) as { response: Response; snapshot: StatusSnapshot } | undefined;
  return left?.response === response ? left.snapshot : undefined;
}

/**
 * Records an immutable snapshot of every response with status >= 400: per server
 * key (`capture.last(key)`) and per scope (`capture.scope()`).
 *
 * @example
 * ```ts
 * import { captureStatus, createFetch } from 'breakwater';
 *
 * const capture = captureStatus();
 * const fetch = createFetch({ use: [capture] });
 * const connect = capture.scope();
 * try {
 *   await someSdk.connect({ fetch: connect.fetch });
 * } catch (error) {
 *   const said = connect.last(); // { status: 503, retryAfterMs: 7000, serverMessage: '...' }
 * }
 * ```
 */
export function captureStatus(options?: CaptureStatusOptions): CaptureStatus {
  const valid = validate(optionsSchema, options, 'captureStatus()');
  const bodyBytes = valid?.bodyBytes ?? DEFAULT_BODY_BYTES;
  const bodyWaitMs = valid?.bodyWaitMs ?? DEFAULT_BODY_WAIT_MS;
  const byKey = new Map<string, StatusSnapshot>();
  let chain: FetchLike | undefined;

  function remember(snapshot: StatusSnapshot): void {
    byKey.delete(snapshot.key);
    byKey.set(snapshot.key, snapshot);
    if (byKey.size > MAX_KEYS) byKey.delete(byKey.keys().next().value as string);
  }

  const capture = async function captureStatus(call: Call, next: Next): Promise<Response> {
    const response = await next(call);
    if (response.status < 400) return response;
    const snapshot = await takeSnapshot(call, response, bodyBytes, bodyWaitMs);
    remember(snapshot);
    const scope = (call.init as { [SCOPE]?: ScopeRecorder } | undefined)?.[SCOPE];
    scope?.snapshots.push(snapshot);
    call.bag.set(LAST_SNAPSHOT, { response, snapshot });
    call.emit({ type: 'captured', key: snapshot.key, snapshot });
    return response;
  } as CaptureStatus & { [ATTACH](fetch: FetchLike): void };

  capture.last = (key) => byKey.get(key);
  capture.scope = (fetch) => {
    const target = fetch ?? chain;
    if (typeof target !== 'function') {
      throw new TypeError(
        'capture.scope(): this capture is not part of a createFetch() chain yet; pass the chain’s fetch: capture.scope(fetch)',
      );
    }
    const recorder: ScopeRecorder = { snapshots: [] };
    return {
      fetch: (input, init) => target(input, { ...init, [SCOPE]: recorder } as RequestInit),
      last: () => recorder.snapshots.at(-1),
      all: () => [...recorder.snapshots],
    };
  };
  capture[ATTACH] = (fetch) => {
    chain = fetch;
  };
  return capture;
}
