/**
 * @module
 * The MCP agent example's entry: runs {@link runMcpAgent} and tells the whole story
 * (the server's script, each client's turn log, the server's counts).
 *
 * Run with `node --import tsx examples/mcp-agent/main.ts`. Exit code 0 when
 * breakwater ran no tool twice and sent fewer requests to the server while it was
 * down than the naive loop; 1 otherwise, naming what broke on stderr.
 */

import process from 'node:process';
import { formatLogs, formatScript, formatTable, runMcpAgent } from './agent.ts';

const comparison = await runMcpAgent();
console.log(
  [
    ...formatScript(),
    '',
    ...formatLogs(comparison),
    '',
    ...formatTable(comparison),
    `done in ${comparison.elapsedMs} ms`,
  ].join('\n'),
);
for (const problem of comparison.problems) console.error(`FAILED: ${problem}`);
process.exitCode = comparison.problems.length === 0 ? 0 : 1;
