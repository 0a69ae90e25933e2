/**
 * @module
 * Run by test/network-redirect.test.ts as `deno run --location=<a test server's URL>`, where
 * Deno reads every fetch's URL against the location: calls the chain with URLs that do not
 * parse, a relative URL and the location's own URL (the server answers each with a redirect
 * whose Location does not parse), and prints one JSON line: for each call, what it failed
 * with (the error's name, its code, the server and URL it names) and whether the chain
 * marked it as may-have-run.
 */

import { RAN } from '../../src/call.ts';
import { createFetch } from '../../src/chain.ts';

const page = (globalThis as { location?: { href: string } }).location?.href;
if (page === undefined) throw new Error('run me with deno run --location=<url>');
const outcomes: Record<string, unknown> = {};
for (const url of ['http://[::1', '//[::1/x', '/orders?token=s3cret', page]) {
  let ran = false;
  const fetch = createFetch({
    use: [
      async function read(call, next) {
        try {
          return await next(call);
        } finally {
          ran = call.bag.has(RAN);
        }
      },
    ],
  });
  try {
    const response = await fetch(url);
    outcomes[url] = { status: response.status };
  } catch (error) {
    const { name, code, request, message } = error as {
      name: string;
      code?: string;
      request?: { key: string; url: string };
      message: string;
    };
    outcomes[url] = { name, code, key: request?.key, url: request?.url, ran, secret: /s3cret/.test(message) };
  }
}
console.log(JSON.stringify(outcomes));
