/**
 * The error a request whose answer broke mid-way (the server reset the connection after
 * its headers) must fail with, through any adapter: a breakwater `NetworkError` in the
 * response phase, maybe sent, naming the request, not the runtime's own error.
 */
import assert from 'node:assert/strict';
import { NetworkError } from '../../src/errors.ts';

/** Asserts `error` is that `NetworkError` for a POST to `path` of the server named `key`. */
export function assertBrokenAnswer(error: unknown, path: string, key: string): void {
  assert.ok(error instanceof NetworkError, String(error));
  assert.equal(error.phase, 'response');
  assert.equal(error.sent, 'maybe');
  // Node and Bun say the peer reset the connection; Deno says only `error reading a body from connection`.
  assert.match(error.code, /^(?:ECONNRESET|ENETWORK)$/);
  assert.ok(
    error.message.startsWith(`POST http://127.0.0.1:`) &&
      error.message.includes(`${path} (server "${key}") failed: network error`),
    error.message,
  );
}
