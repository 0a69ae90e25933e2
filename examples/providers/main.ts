/**
 * @module
 * The providers example's entry: runs {@link runProviderCalls} and tells the whole
 * story (the server's script, what it counted, what the caller saw, one response's
 * rate limits).
 *
 * Run with `node --import tsx examples/providers/main.ts`. Exit code 0 when the
 * breakwater client sent nothing inside an announced window and resent no 500'd POST;
 * 1 otherwise, naming what broke on stderr; 2 for any option but `--help`.
 */

import process from 'node:process';
import { noOptions } from '../cli.ts';
import { formatCaller, formatRateLimits, formatScript, formatTable, runProviderCalls } from './calls.ts';

const HELP = `breakwater providers example: 40 chat completions through the openai SDK against a
local rate-limiting provider, as the SDK ships vs on openaiOptions(policy). The server counts
requests, requests inside a Retry-After window it announced, and completions run twice.

usage: node --import tsx examples/providers/main.ts

It takes no options. Everything runs on 127.0.0.1; nothing leaves the machine (no API key).
Exit codes: 0 done, 1 breakwater did not hold (said on stderr), 2 bad options.
`;

noOptions(process.argv.slice(2), HELP);
const comparison = await runProviderCalls();
console.log(
  [
    ...formatScript(),
    '',
    ...formatTable(comparison),
    '',
    ...formatCaller(comparison),
    '',
    ...formatRateLimits(comparison),
  ].join('\n'),
);
if (comparison.problems.length > 0) {
  console.error(`openaiOptions(policy) did not hold: ${comparison.problems.join('; ')}`);
  process.exitCode = 1;
}
