/**
 * @module
 * An answer that never ends, for tests of the limits on what SDKs are handed: how far a
 * client read it tells whether the limit stopped the reading.
 */

/**
 * Where a {@link flood} stops (32 MiB): far past any limit under test, and past what
 * sockets and runtimes buffer ahead (Bun reads about 5 MiB ahead).
 */
export const FLOOD_BYTES: number = 32 * 1024 * 1024;

/** 64 KiB: what each read of a flood gets. */
const CHUNK_BYTES = 64 * 1024;

/** A flood's answers and how far they were read. */
export interface Flood {
  /** A fresh answer (200, `headers`): `head`, then `fill` repeated, as fast as it is read. */
  answer(): Response;
  /** A fresh answer as {@link Flood.answer}'s, with `status`: a failure whose body never ends. */
  failure(status: number): Response;
  /** Bytes of `fill` handed out so far, over every answer. */
  produced(): number;
}

/**
 * An answer that goes on: `head`, then 64 KiB of `fill` after 64 KiB, as fast as it is
 * read, stopped after `bound` bytes only so code without a limit still ends.
 */
export function flood(
  head: string,
  fill: string,
  headers: Record<string, string>,
  bound: number = FLOOD_BYTES,
): Flood {
  const chunk = new TextEncoder().encode(fill.repeat(CHUNK_BYTES / fill.length));
  let produced = 0;
  const respond = (status: number): Response => {
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        // An empty chunk is not sent: some servers take one for the end of the body.
        if (head !== '') controller.enqueue(new TextEncoder().encode(head));
      },
      pull(controller) {
        if (produced >= bound) return controller.close();
        produced += chunk.length;
        controller.enqueue(chunk);
      },
    });
    return new Response(body, { status, headers });
  };
  return {
    answer: () => respond(200),
    failure: respond,
    produced: () => produced,
  };
}
