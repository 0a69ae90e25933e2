/**
 * @module
 * Response bodies bounded for the SDKs (MCP, A2A) that read them whole: `cappedFailure()`
 * cuts a failure's body in bytes and in time (the SDKs read it whole into their error
 * message); `limitedBody()` fails a success body, or one SSE event, past a byte limit
 * (the SDKs read a JSON answer whole with `response.json()` and buffer an SSE event to
 * its end), or ends an SSE answer there with the events its caller gives. Not exported from the core entry: only the client adapters use them.
 */

import * as z from 'zod/mini';
import { abortReason, type Call } from './call.ts';
import { BreakwaterError, describeRequest, requestSummary } from './errors.ts';
import { CR, DEFAULT_MAX_RESPONSE_BYTES, LF, MAX_FAILURE_BODY_BYTES } from './limits.ts';
import { fetchFailure } from './network.ts';

export { DEFAULT_MAX_RESPONSE_BYTES, MAX_FAILURE_BODY_BYTES };

/** `maxResponseBytes`: a whole number of bytes above 0, or `Infinity` for no limit. */
export const maxResponseBytesSchema: z.ZodMiniOptional<z.ZodMiniType<number>> = /* @__PURE__ */ z.optional(
  /* @__PURE__ */ z.custom<number>(
    (value) => value === Infinity || (Number.isSafeInteger(value) && (value as number) > 0),
    'must be a whole number of bytes above 0, or Infinity (no limit)',
  ),
);

/**
 * The type given to an SSE event cut past the limit when the stream is ended with
 * `ending` events instead of failed: no SDK reads it as a message (the MCP SDK reads
 * only untyped and `message` events; WHATWG HTML's EventSource fires it at no `onmessage`).
 */
const CUT_EVENT_TYPE = 'breakwater-cut';

/**
 * For an SSE answer to `call` cut past its limit: the SSE events that end it cleanly in
 * place of the failure (`error`), or `''` to fail it with `error`. The MCP SDK only reports a
 * broken answer stream through `onerror`, and the request waits for its own timeout
 * (60 s by default); events that answer the request end it at once.
 */
export type CutEnding = (error: BreakwaterError, call: Call) => string;

/** Whether `byte` ends an SSE line. */
const breaks = (byte: number | undefined): boolean => byte === LF || byte === CR;

/**
 * The index just past the last blank line in `chunk`, where an SSE event ends (WHATWG
 * HTML, "Parsing an event stream": an empty line dispatches the event), or -1. `last`
 * and `prior` are the stream's two bytes before the chunk, so a blank line split across
 * chunks is seen. A blank line is two line ends in a row: any two of LF / CR but a lone
 * CRLF, which is one. The scan goes back from the chunk's last line end to its last blank
 * line: for a flushed event, its last two bytes; for a chunk cut inside an event, about
 * an event's length. Only a chunk inside one long event is read whole (one loop step per
 * byte, about 130 µs per 64 KiB of short lines on V8). With `from`, the last blank line
 * whose line end is at or before index `from`.
 */
function eventEnd(chunk: Uint8Array, last: number, prior: number, from?: number): number {
  let i = from ?? chunk.length - 1;
  if (from === undefined && !breaks(chunk[i])) {
    // Straight to the last line end: the last LF, or a CR after it (CR line ends). The CR
    // search covers only what follows that LF: over a whole chunk of LF line ends it is
    // a full native pass (~23 µs per 64 KiB on V8), for every chunk cut inside an event.
    const lf = chunk.lastIndexOf(LF);
    const cr = chunk.subarray(lf + 1).lastIndexOf(CR);
    i = cr < 0 ? lf : lf + 1 + cr;
  }
  for (; i >= 0; i--) {
    const byte = chunk[i];
    // Most bytes end no line: one test each, no call.
    if (byte !== LF && byte !== CR) continue;
    const before = i > 0 ? chunk[i - 1] : last;
    if (!breaks(before)) continue;
    // CRLF is one line end, so a blank line only if a line end comes before it.
    if (before === CR && byte === LF && !breaks(i > 1 ? chunk[i - 2] : i === 1 ? last : prior)) continue;
    return i + 1;
  }
  return -1;
}

/**
 * What a read of `call`'s body that rejected with `error` fails with. A body that broke
 * mid-way (a reset, a server gone) is a network failure like any other, in the response
 * phase: the runtime's own error (Node's `terminated`, Deno's `error reading a body from
 * connection`, Bun's `ECONNRESET`) names no request. Once the caller has aborted, its own
 * reason (DESIGN §4), even when the read failed on a break that came first: Node and Bun
 * report the break, Deno the abort. Anything else as the chain passes fetch's own errors
 * on (`fetchFailure()`: with the URLs its message quotes redacted).
 */
function broken(error: unknown, call: Call): unknown {
  const signal = call.callerSignal;
  if (signal?.aborted) return abortReason(signal);
  // The URL as given (`href`), as the chain names a request: `call.url` parses it without
  // a base, and threw for the relative URL a browser (or Deno's --location) resolves.
  return fetchFailure(error, requestSummary(call.key, call.method, call.href), 'body');
}

/**
 * `response` with its body failed once it passes `maxBytes`: a `BreakwaterError` with
 * code `RESPONSE_TOO_LARGE` naming the request and the limit, which the SDK's read
 * (`response.json()`, its SSE parser) rejects with. The rest is cancelled, so the
 * connection is let go. For `text/event-stream` the limit is per event, not per stream:
 * a long-lived stream of normal events is never cut, and one event (or one line) past it
 * is, since the SDKs' parsers buffer each to its end. Chunks pass on as they come, with
 * a byte count (and, for SSE, a scan back to the chunk's last blank line) as the only
 * cost. Bytes are counted as the SDK gets them, decoded (after any Content-Encoding); a
 * body whose Content-Length (uncompressed) is over the limit fails at its first read,
 * without reading any of it. A body that breaks mid-way (the connection reset or closed)
 * fails with the `NetworkError` the chain gives when fetch itself fails (phase `response`,
 * sent `maybe`, naming the request), not the runtime's own error; a caller's abort with
 * its own reason. `Infinity` leaves the response as it is.
 *
 * `ending` (SSE only): the events to close a cut stream with instead of failing it. The
 * cut event then goes on to exactly `maxBytes` (the events its last read ended whole, and
 * its own first lines, its `id` among them, arrive as on any stream), is ended with a type
 * of its own (`breakwater-cut`), so the client's parser drops it instead of reading the
 * part as a whole message or joining it to the next event, and the ending's events follow.
 * A client that resumes the stream (`Last-Event-ID`) so resumes past the refused event.
 */
export function limitedBody(response: Response, maxBytes: number, call: Call, ending?: CutEnding): Response {
  const source = response.body;
  if (!source || maxBytes === Infinity) return response;
  const sse =
    response.headers.get('content-type')?.split(';')[0]?.trim().toLowerCase() === 'text/event-stream';
  const reader = source.getReader();
  // A body whose Content-Length is over the limit fails at its first read, before any of
  // it is read (not after maxBytes of it, or never if it stalls first). Not a compressed
  // one: its Content-Length counts encoded bytes, the limit decoded ones.
  const announced =
    !sse && !response.headers.has('content-encoding') ? Number(response.headers.get('content-length')) : 0;
  // Bytes of the body so far; for SSE, of the event not yet ended.
  let size = announced > maxBytes ? announced : 0;
  // The stream's last two bytes, for a blank line split across chunks.
  let last = -1;
  let prior = -1;
  const body = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        // Of a cut SSE chunk, what fits in the limit: it goes on before an ending.
        let kept: Uint8Array | undefined;
        // Of a cut SSE chunk, the events it ended whole: they go on before a failure.
        let whole: Uint8Array | undefined;
        if (size <= maxBytes) {
          const next = await reader.read().catch((error: unknown) => {
            throw broken(error, call);
          });
          if (next.done) return controller.close();
          const chunk = next.value;
          if (!sse) size += chunk.length;
          else if (chunk.length) {
            let end = eventEnd(chunk, last, prior);
            // Each event the chunk ends must fit too, the first with the bytes before the
            // chunk: one over the limit that a read brought whole, blank line and all,
            // passed ('data: a' and 5,000 bytes in one chunk, through a limit of 1,000).
            // Looked for back from the last blank line, and only while the chunk could
            // still hold one too large: each byte is read once, and with the default
            // limit never. The cut then starts at the first such event.
            // (From the last byte but one of that blank line, so a CRLF there is read as two
            // line ends: a 1-byte event, and an event counted a byte short. Cheaper than telling.)
            for (let at = end, from: number; at > 0 && size + at > maxBytes; at = from) {
              from = eventEnd(chunk, last, prior, at - 2);
              if ((from < 0 ? size + at : at - from) > maxBytes) end = from;
            }
            size = end < 0 ? size + chunk.length : chunk.length - end;
            if (size > maxBytes) {
              kept = chunk.subarray(0, chunk.length - (size - maxBytes));
              if (end > 0) whole = chunk.subarray(0, end);
            } else {
              prior = chunk.length > 1 ? (chunk[chunk.length - 2] as number) : last;
              last = chunk[chunk.length - 1] as number;
            }
          }
          if (size <= maxBytes) return controller.enqueue(chunk);
        }
        reader.cancel().catch(() => {});
        const request = requestSummary(call.key, call.method, call.href);
        const error = new BreakwaterError(
          `${describeRequest(request)} failed: ${sse ? 'an event of the response stream' : 'the response body'} is over the ${maxBytes}-byte limit (maxResponseBytes)`,
          'RESPONSE_TOO_LARGE',
          { request },
        );
        const events = sse && ending ? ending(error, call) : '';
        // Without an ending, the events before the cut one go on, and the next read fails.
        if (!events) {
          if (whole) return controller.enqueue(whole);
          throw error;
        }
        if (kept?.length) {
          controller.enqueue(kept);
          last = kept[kept.length - 1] as number;
        }
        // The cut event's line ended (unless it just was: a second line end would dispatch
        // it as it is), then a blank line dispatches it as a type no client reads as a message.
        // A line cut short ends with a NUL, so no parser reads what arrived of it as the whole
        // field: an `id` with a NUL is ignored, a `retry` that is not all digits too (WHATWG
        // HTML, "Processing the field"); else "id: 42" of "id: 4242" would be the id the
        // client resumes from, "retry: 6" of "retry: 60000" its wait before resuming.
        const cut = breaks(last) ? '' : '\0\n';
        controller.enqueue(new TextEncoder().encode(`${cut}event: ${CUT_EVENT_TYPE}\n\n${events}`));
        controller.close();
      },
      cancel: (reason) => reader.cancel(reason),
    },
    // Read only when the SDK reads: nothing is held here ahead of it.
    { highWaterMark: 0 },
  );
  return rebuilt(response, body);
}

/**
 * `response` with another body, and its own status and reason phrase. `new Response()`
 * takes neither as fetch may give them: a status past 599 (fetch passes up to 999
 * through), so a server cannot slip an endless body past the cap by answering 600; a
 * reason phrase that is no ByteString (Node's fetch decodes it as UTF-8, so a Latin-1
 * "503 Réessayez plus tard" from node:http reads "R\uFFFDessayez..."), which would throw
 * a TypeError at the SDK instead of the failure. Built without a phrase and with the
 * status capped at 599, then given both back as own properties, with the URL it came
 * from and whether it was redirected (a new Response has neither, and every success
 * answer is rebuilt too: the caller sees what the runtime's fetch gave).
 */
function rebuilt(response: Response, body: ReadableStream<Uint8Array>, cut?: boolean): Response {
  // A cut body: a Content-Length would announce bytes that never come (to a proxy
  // passing the response on, say). A body failed past its limit keeps it: the failure
  // then ends the connection, which is how HTTP says the body is incomplete.
  const headers = new Headers(response.headers);
  if (cut) headers.delete('content-length');
  return withBody(response, body, response.statusText, headers);
}

/**
 * `response` with another body (`null`: none) and, if given, another reason phrase or
 * headers; its status (one past 599 too), URL and `redirected` kept, as {@link rebuilt}
 * keeps them (see there why they are given back as own properties). The adapters' copies
 * of a failure answer (the phrase hidden and redacted before an SDK quotes it) are these.
 */
export function withBody(
  response: Response,
  body: ReadableStream<Uint8Array> | null,
  statusText: string = response.statusText,
  headers: Headers = response.headers,
): Response {
  const { status } = response;
  return Object.defineProperties(new Response(body, { status: Math.min(status, 599), headers }), {
    status: { value: status },
    statusText: { value: statusText },
    url: { value: response.url },
    redirected: { value: response.redirected },
  });
}

/**
 * `response` with its body ended after {@link MAX_FAILURE_BODY_BYTES}, or `waitMs`
 * after now (the policy's `capture.bodyWaitMs`: a body still coming by then is a
 * stalled one, and the SDK would wait for its end with no deadline of its own). It
 * keeps what arrived; the rest is cancelled, so the connection is let go. The timer
 * ends with the body, whichever way (read, cut, broken, cancelled). A body that breaks
 * mid-way fails as in {@link limitedBody}: with a `NetworkError` naming `call`'s request
 * (the A2A SDK throws its read's error as it is), or the caller's abort reason.
 */
export function cappedFailure(response: Response, waitMs: number, call: Call): Response {
  const source = response.body;
  if (!source) return response;
  const reader = source.getReader();
  let size = 0;
  let done = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const stop = (reason?: unknown): Promise<void> => {
    done = true;
    clearTimeout(timer);
    return reader.cancel(reason).catch(() => {});
  };
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      timer = setTimeout(() => {
        if (done) return;
        stop();
        controller.close();
      }, waitMs);
    },
    async pull(controller) {
      const next = await reader.read().catch((error: unknown) => {
        stop();
        throw broken(error, call);
      });
      // Ended at the deadline while this read waited.
      if (done) return;
      if (next.done) {
        stop();
        return controller.close();
      }
      const room = MAX_FAILURE_BODY_BYTES - size;
      size += next.value.byteLength;
      controller.enqueue(size > MAX_FAILURE_BODY_BYTES ? next.value.subarray(0, room) : next.value);
      if (size >= MAX_FAILURE_BODY_BYTES) {
        stop();
        controller.close();
      }
    },
    cancel: stop,
  });
  return rebuilt(response, body, true);
}
