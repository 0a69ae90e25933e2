/**
 * @module
 * For the tests of a call that must not hang (a failure body that stalls, a cancel that
 * never ends): the call is raced with a timer, which is always cleared.
 */

/**
 * What `call` settles to (its error when it fails), or 'still waiting after <ms> ms' when it
 * has not settled by then.
 */
export async function settledWithin(ms: number, call: Promise<unknown>): Promise<unknown> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const hung = new Promise((resolve) => {
    timer = setTimeout(() => resolve(`still waiting after ${ms} ms`), ms);
  });
  try {
    return await Promise.race([call.catch((e: unknown) => e), hung]);
  } finally {
    clearTimeout(timer);
  }
}
