/**
 * @module
 * A server whose reason phrase quotes the credential the call sent, as an old app server
 * may ('HTTP/1.1 401 Invalid token Bearer <token>'). Node's and Bun's fetch keep the phrase
 * as the server wrote it, in statusText (Deno's gives the standard one, so there the tests
 * pass trivially). The token is opaque: redactText() alone would not know it, only hiding
 * what the call sent does.
 *
 * A raw `node:http` server, not `withServer()`: its `Behaviour` has no reason phrase.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FetchLike } from '../../src/call.ts';
import { CircuitOpenError, HttpStatusError } from '../../src/errors.ts';

/** The credential the calls send: opaque, of no shape a redactor knows. */
export const TOKEN = 'opaque-T0k3n-9f8e7d6c5b4a3210';

/** The init of a call that sends {@link TOKEN} as its bearer credential. */
export const SENDS_TOKEN: RequestInit = { headers: { authorization: `Bearer ${TOKEN}` } };

/** How the server answers every request. */
export interface QuotingAnswer {
  status: number;
  /** The phrase's start; the request's Authorization header follows it, after a space. */
  phrase: string;
  headers?: Record<string, string>;
}

/**
 * Runs `fn` with the origin (`http://127.0.0.1:PORT`) of a loopback server that answers
 * every request as `answer` says, its reason phrase quoting the credential the request
 * sent; closes the server (and every socket on it) afterwards.
 */
export async function withReasonPhrase(
  answer: QuotingAnswer,
  fn: (origin: string) => Promise<void>,
): Promise<void> {
  const server = createServer((request, response) => {
    response.writeHead(answer.status, `${answer.phrase} ${request.headers.authorization}`, answer.headers);
    response.end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    await fn(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
}

/** Asserts that none of `texts` shows the token, not even its first 8 characters. */
export function assertNoToken(texts: string[]): void {
  for (const text of texts) assert.ok(!text.includes(TOKEN.slice(0, 8)), `the token shown in ${text}`);
}

/**
 * Sends a call sending the token, which must be answered `status` (the breaker of `fetch`
 * then opens or pauses the key), then another, which the breaker must refuse: resolves to
 * that CircuitOpenError, whose cause is the HttpStatusError of the answer.
 */
export async function refusedAfter(
  fetch: FetchLike,
  origin: string,
  status: number,
): Promise<CircuitOpenError & { cause: HttpStatusError }> {
  const answered = await fetch(origin, SENDS_TOKEN);
  await answered.text();
  assert.equal(answered.status, status);
  const error = await fetch(origin, SENDS_TOKEN).catch((e: unknown) => e);
  assert.ok(error instanceof CircuitOpenError, String(error));
  assert.ok(error.cause instanceof HttpStatusError, 'error.cause instanceof HttpStatusError');
  return error as CircuitOpenError & { cause: HttpStatusError };
}
