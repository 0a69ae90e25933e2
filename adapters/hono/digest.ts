/**
 * @module
 * SHA-256 as lower-case hex, for store keys the server-side middleware derive from what
 * a client sends (idempotency fingerprints, long rate-limit ids): fixed-length, so a
 * client cannot make store entries of any size. Web Crypto, on every runtime.
 */

/** SHA-256 of `parts` joined (strings as UTF-8), as lower-case hex. */
export async function sha256Hex(...parts: BlobPart[]): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', await new Blob(parts).arrayBuffer());
  return Array.from(new Uint8Array(digest), (byte) => byte.toString(16).padStart(2, '0')).join('');
}
