/**
 * @module
 * `cappedFailure()`: a failure response with its body bounded in bytes and in time,
 * for the SDKs (MCP, A2A) that read a failure's whole body into their error message.
 * Not exported from the core entry: only the client adapters use it.
 */

/**
 * The most bytes of a failure body an SDK is given (64 KiB). The MCP and A2A SDKs read
 * a failure's whole body into the error they throw (`Error POSTing to endpoint: <body>`,
 * `HTTP error for GetTask! ... Response: <body>`): an error page that never ends (a
 * proxy's, a hostile server's) would grow the client's memory without bound and keep
 * the request open. Real error bodies, OAuth's JSON errors included, are far smaller.
 */
export const MAX_FAILURE_BODY_BYTES: number = 64 * 1024;

/**
 * `response` with another body, and its own status and reason phrase. `new Response()`
 * takes neither as fetch may give them: a status past 599 (fetch passes up to 999
 * through), so a server cannot slip an endless body past the cap by answering 600; a
 * reason phrase that is no ByteString (Node's fetch decodes it as UTF-8, so a Latin-1
 * "503 Réessayez plus tard" from node:http reads "R\uFFFDessayez..."), which would throw
 * a TypeError at the SDK instead of the failure. Built without a phrase and with the
 * status capped at 599, then given both back as own properties.
 */
function rebuilt(response: Response, body: ReadableStream<Uint8Array>): Response {
  const { status, statusText } = response;
  // The body may be cut: a Content-Length would announce bytes that never come (to a
  // proxy passing the response on, say).
  const headers = new Headers(response.headers);
  headers.delete('content-length');
  return Object.defineProperties(new Response(body, { status: Math.min(status, 599), headers }), {
    status: { value: status },
    statusText: { value: statusText },
  });
}

/**
 * `response` with its body ended after {@link MAX_FAILURE_BODY_BYTES}, or `waitMs`
 * after now (the policy's `capture.bodyWaitMs`: a body still coming by then is a
 * stalled one, and the SDK would wait for its end with no deadline of its own). It
 * keeps what arrived; the rest is cancelled, so the connection is let go. The timer
 * ends with the body, whichever way (read, cut, broken, cancelled).
 */
export function cappedFailure(response: Response, waitMs: number): Response {
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
        throw error;
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
  return rebuilt(response, body);
}
