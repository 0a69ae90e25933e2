/**
 * @module
 * The MCP agent example's entry: runs {@link runMcpAgent} and tells the whole story
 * (the server's script, each client's turn log, the server's counts).
 *
 * Run with `node --import tsx examples/mcp-agent/main.ts`. Exit code 0 when
 * breakwater ran no tool twice and sent fewer requests to the server while it was
 * down than the naive loop; 1 otherwise, naming what broke on stderr; 2 for any option
 * but `--help`.
 */

import process from 'node:process';
import { noOptions } from '../cli.ts';
import { formatLogs, formatScript, formatTable, runMcpAgent } from './agent.ts';

const HELP = `breakwater MCP agent example: an agent's 12 turns against a flaky local MCP server
(the SDK's McpServer), a naive 3-tries loop vs resilientMcpClient(): duplicate tool runs,
Retry-After, a start gate while the server is down. The server counts what each cost it.

usage: node --import tsx examples/mcp-agent/main.ts

It takes no options. Everything runs on 127.0.0.1; nothing leaves the machine. Exit codes:
0 done, 1 breakwater did not hold (said on stderr), 2 bad options.
`;

noOptions(process.argv.slice(2), HELP);
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
