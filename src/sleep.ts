/**
 * @module
 * An abortable sleep, for retry's backoff and the breaker's pacing waits: an abort
 * ends it at once with the caller's own reason, and the timer and the listener are
 * removed either way, so nothing is left behind to keep a process alive.
 */

/** Waits `ms`, or rejects at once with `signal.reason` when the signal aborts. */
export function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise<void>((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
