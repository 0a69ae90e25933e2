/**
 * @module
 * `toHttpStatusError()`: a provider SDK's status error as breakwater's
 * `HttpStatusError`, so one `catch` handles every client the same way. Read
 * structurally, without importing any SDK: the OpenAI and Anthropic SDKs' `APIError`
 * (`status`, `headers`, `error`), the AI SDK's `APICallError` (`statusCode`,
 * `responseHeaders`, `responseBody`), and breakwater's own errors wrapped as `cause`
 * (the SDKs wrap what their `fetch` throws in a connection error).
 */

import { isRetryableStatus } from '../../src/classify.ts';
import { BreakwaterError, HttpStatusError, oneLine } from '../../src/errors.ts';
import { errorMessageOf, toHeaders } from '../../src/status.ts';
import { type HeadersLike, retryDelay } from '../../src/timing.ts';

/** How many `cause` / `lastError` links are followed before giving up: a cycle or a deep chain costs no more. */
const MAX_CAUSE_DEPTH = 8;

/** A `serverMessage` longer than this many characters is cut (as the core cuts one it reads from a body). */
const MAX_MESSAGE_CHARS = 400;

/** The fields read from an SDK error. All optional: the value is untrusted. */
interface SdkErrorShape {
  /** OpenAI, Anthropic. */
  status?: unknown;
  headers?: unknown;
  /**
   * OpenAI: the body's `error` (`{ message }`, or the string many compatible servers
   * send); Anthropic: the whole body (`{ error: { message } }` or `{ error: '...' }`).
   */
  error?: unknown;
  /** AI SDK. */
  statusCode?: unknown;
  responseHeaders?: unknown;
  responseBody?: unknown;
  /** Wrappers: the SDKs' connection errors (`cause`), the AI SDK's `RetryError` (`lastError`). */
  cause?: unknown;
  lastError?: unknown;
}

/**
 * Characters of an SDK's string read at most: a message or body may be megabytes, and
 * nothing past this survives the cut (an `HttpStatusError` keeps 2 KiB of body).
 */
const MAX_READ_CHARS = 4096;

/** A string worth keeping: non-empty, on one line, at most {@link MAX_MESSAGE_CHARS}. */
function text(value: unknown): string | undefined {
  const line = typeof value === 'string' ? oneLine(value.slice(0, MAX_READ_CHARS)) : '';
  if (line === '') return undefined;
  return line.length > MAX_MESSAGE_CHARS ? `${line.slice(0, MAX_MESSAGE_CHARS)}…` : line;
}

/**
 * The server's message in an AI SDK `responseBody`, read as the core reads an error
 * body: a JSON body's message, else the text itself. The AI SDK's providers read only
 * their own error shape, and for any other body (`{ "error": "..." }`, plain text)
 * their message is the reason phrase. Undefined for a body too long to read whole
 * (the provider parsed that one: its message stands).
 */
function messageOfBody(body: unknown): string | undefined {
  if (typeof body !== 'string' || body.length > MAX_READ_CHARS) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    // Not JSON: the message is the text itself.
  }
  return errorMessageOf(parsed) ?? body;
}

/** What `read` returns, or undefined when a getter or proxy trap it meets throws. */
function safely<T>(read: () => T): T | undefined {
  try {
    return read();
  } catch {
    return undefined;
  }
}

/**
 * The error from one SDK error object, or undefined when it carries no failure
 * status. Past the status, each part is read on its own: headers, a message or a
 * body that cannot be read leave that part out, not the status.
 */
function fromSdkError(error: Error & SdkErrorShape): HttpStatusError | undefined {
  const aiSdk = error.statusCode !== undefined;
  const status = aiSdk ? error.statusCode : error.status;
  if (!Number.isInteger(status) || (status as number) < 400 || (status as number) > 599) return undefined;
  // Headers that cannot be read (a throwing getter or proxy trap) are left out, not the
  // status. Copied here: toHeaders() passes a Headers through, and a subclass or proxy
  // of one could throw later, when the status rule and the timing headers read it.
  const headers = safely(() => {
    const source = aiSdk ? error.responseHeaders : error.headers;
    return new Headers(toHeaders(source instanceof Object ? (source as HeadersLike) : undefined));
  });
  return new HttpStatusError({
    status: status as number,
    retryable: isRetryableStatus(status as number, headers),
    retryAfterMs: headers && retryDelay(headers),
    // Read as the core reads a JSON error body. OpenAI keeps the body's `error` (an
    // object, or the string many compatible servers send), Anthropic the whole body.
    serverMessage: safely(() => {
      const body = error.error;
      return (
        text(errorMessageOf({ error: body }) ?? errorMessageOf(body)) ??
        (aiSdk ? (text(messageOfBody(error.responseBody)) ?? text(error.message)) : undefined)
      );
    }),
    body: safely(() => {
      const body = error.responseBody;
      return typeof body === 'string' ? body.slice(0, MAX_READ_CHARS) : undefined;
    }),
    headers,
    cause: error,
  });
}

/**
 * A provider SDK's status error as an `HttpStatusError`: the status, whether
 * breakwater would retry it by default (the core's default retryable statuses, not a
 * policy's `retry.statuses`, and `x-should-retry`), the server's
 * requested wait (`retryAfterMs`, from `retry-after-ms`, `Retry-After` and the
 * providers' reset headers), the server's message, a safe subset of the headers, and
 * the SDK's error as `cause`.
 *
 * Understands the OpenAI and Anthropic SDKs' `APIError` (`status`, `headers`), the
 * AI SDK's `APICallError` (`statusCode`, `responseHeaders`, `responseBody`), and
 * looks through `cause` and `lastError` (the AI SDK's `RetryError`). The SDKs wrap
 * what breakwater's fetch throws in their connection error (`APIConnectionError`,
 * message "Connection error."): an `HttpStatusError` in there is returned as is, and
 * so is the 429, 503 or 529 under a `RetryAfterTooLongError` (the server asked for a
 * longer wait than the policy allows, so the policy failed fast instead of returning
 * the response). An open circuit or a closed gate gives `undefined`: that call was
 * never sent, and the status in its `cause` belongs to an earlier call.
 * No SDK is imported: the fields are read structurally.
 *
 * @param error - Anything caught.
 * @returns The `HttpStatusError`, or `undefined` when `error` carries no 4xx/5xx status (a network error, a timeout, a user abort, not an error at all).
 *
 * @example
 * ```ts
 * try {
 *   await client.messages.create({ model, max_tokens: 1024, messages });
 * } catch (error) {
 *   const status = toHttpStatusError(error);
 *   if (status?.retryable) queue.later(job, status.retryAfterMs ?? 30_000);
 *   else throw error;
 * }
 * ```
 */
export function toHttpStatusError(error: unknown): HttpStatusError | undefined {
  let current = error;
  try {
    for (let depth = 0; depth < MAX_CAUSE_DEPTH && current instanceof Error; depth++) {
      if (current instanceof HttpStatusError) return current;
      // breakwater's other errors end the search, but one: the `cause` of an open
      // circuit or a closed gate is an earlier call's failure (this one was never
      // sent), while a wait too long to honour has this call's response as its cause.
      if (current instanceof BreakwaterError && current.code !== 'RETRY_AFTER_TOO_LONG') return undefined;
      const found = fromSdkError(current);
      if (found !== undefined) return found;
      const { cause, lastError } = current as SdkErrorShape;
      current = cause ?? lastError;
    }
  } catch {
    // A getter or proxy trap on the error that throws: nothing usable in it.
  }
  return undefined;
}
