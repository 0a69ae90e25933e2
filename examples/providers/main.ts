/**
 * @module
 * The providers example's entry: runs {@link runProviderCalls} and tells the whole
 * story (the server's script, what it counted, what the caller saw, one response's
 * rate limits).
 *
 * Run with `node --import tsx examples/providers/main.ts`. Exit code 0 when the
 * breakwater client sent nothing inside an announced window and resent no 500'd POST;
 * 1 otherwise, naming what broke on stderr.
 */

import process from 'node:process';
import { formatCaller, formatRateLimits, formatScript, formatTable, runProviderCalls } from './calls.ts';

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
