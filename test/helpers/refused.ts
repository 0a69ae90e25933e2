/**
 * @module
 * For the tests of the retryAt a refused call is given (breaker, start gate, pacing): the
 * refusal is asserted to be of its class, and only its retryAt is returned to compare.
 */
import assert from 'node:assert/strict';

/** An error class whose instances say when to try again. */
export type Refusal = new (...args: never[]) => { retryAt: Date };

/**
 * The retryAt (ms since the epoch) of the `refusal` that `call` is rejected with; fails the
 * test if `call` fulfils, or is rejected with anything else.
 */
export function refusedRetryAt(call: Promise<unknown>, refusal: Refusal): Promise<number> {
  return call.then(
    () => assert.fail('refused'),
    (e: unknown) => {
      assert.ok(e instanceof refusal, 'e instanceof refusal');
      return e.retryAt.getTime();
    },
  );
}
