/**
 * @module
 * An abortable sleep, for retry's backoff and the breaker's pacing waits: an abort
 * ends it at once with the caller's own reason, and the timer and the listener are
 * removed either way, so nothing is left behind to keep a process alive.
 */

import { abortReason } from './call.ts';

/** Waits `ms`, or rejects at once with the signal's reason (see {@link abortReason}) when it aborts. */
export function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(abortReason(signal));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
  });
}
