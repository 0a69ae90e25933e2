/**
 * Smoke test for examples/mcp-agent/: an MCP agent's 12 turns against a flaky local
 * McpServer, through a naive retry loop and through `resilientMcpClient()`. The example
 * serves through node:http and runs under Node, so this starts it as a child process
 * (`node --import tsx examples/mcp-agent/main.ts`), which works the same from Node,
 * Deno and Bun.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatTable, type Ledger } from '../examples/mcp-agent/agent.ts';
import { runExample } from './helpers/example.ts';
import { allowSlowTests } from './helpers/slow-tests.ts';

await allowSlowTests();

/** The figures table's row starting with `label`: [naive, breakwater]. */
function figures(stdout: string, label: string): [number, number] {
  const line = stdout.split('\n').find((l) => l.startsWith(label));
  const match = line?.slice(label.length).match(/^ +(\d+) +(\d+)$/);
  assert.ok(match, `no figures for "${label}" in:\n${stdout}`);
  return [Number(match[1]), Number(match[2])];
}

/** The log lines of one client's section (`naive:` or `breakwater:`), by turn. */
function turns(stdout: string, client: string): Map<number, string> {
  const lines = stdout.split('\n');
  const start = lines.findIndex((l) => l.startsWith(`${client}:`));
  assert.ok(start >= 0, `no section for ${client} in:\n${stdout}`);
  const byTurn = new Map<number, string>();
  for (const line of lines.slice(start + 1)) {
    const match = line.match(/^ {2}turn +(\d+) {2}(.*)$/);
    if (match === null) break;
    byTurn.set(Number(match[1]), match[2] ?? '');
  }
  return byTurn;
}

test('the MCP agent example: breakwater runs create_ticket once per ask, fails fast while the server is down, and keeps out of Retry-After windows; the naive loop does neither', async () => {
  const run = await runExample('mcp-agent/main.ts');
  assert.equal(run.code, 0, `stderr:\n${run.stderr}\nstdout:\n${run.stdout}`);
  assert.ok(run.stdout.split('\n').length < 40, 'the story fits in 40 lines');
  const breakwater = turns(run.stdout, 'breakwater');
  const naive = turns(run.stdout, 'naive');

  // Every ticket turn reached create_ticket, the outage's included: the start gate's
  // window outlasts the outage, so the connect it lets through finds the server back,
  // and no recovered turn is refused (on a loaded machine, keyed by turns, the outage
  // outlasted the window: its probe re-armed the gate, turns 10 and 12 never asked).
  const [naiveAsked, breakwaterAsked] = figures(run.stdout, 'tickets the agent asked for');
  assert.deepEqual([naiveAsked, breakwaterAsked], [4, 4]);
  // The 503 after create_ticket ran: the naive loop ran it again, breakwater did not.
  assert.deepEqual(figures(run.stdout, 'create_ticket executions'), [5, 4]);
  assert.deepEqual(figures(run.stdout, 'duplicate create_ticket executions'), [1, 0]);
  // search is annotated readOnlyHint: both resend it after turn 4's 503. Otherwise each
  // turn searches once, unless it failed before: at connect (the outage, the gate), or
  // the naive loop's tools/list on turn 3 when all 3 tries met the overload.
  const searches = (log: Map<number, string>) =>
    12 + 1 - [...log.values()].filter((line) => /^(connect|tools\/list): /.test(line)).length;
  assert.deepEqual(figures(run.stdout, 'search executions'), [searches(naive), searches(breakwater)]);
  // The outage: breakwater's first connect (3 attempts), then the gate sends nothing. The
  // naive loop tries 3 times a turn, on two turns at least (the server is back on turn 8
  // at the earliest), and on turn 8 too when it comes within 470 ms.
  const [naiveDown, breakwaterDown] = figures(run.stdout, 'requests while down (from turn 6)');
  assert.equal(breakwaterDown, 3);
  assert.ok(naiveDown >= 6, `the naive loop tried again on the next down turn: ${naiveDown}`);
  // Counted against what each client had read: the naive loop resends create_ticket 20 ms
  // after a 503 asking for 300 ms; breakwater waits out every such answer.
  const [naiveInside, breakwaterInside] = figures(run.stdout, 'requests inside a Retry-After window');
  assert.equal(breakwaterInside, 0);
  assert.ok(naiveInside > 0, `the naive loop ignores Retry-After: ${naiveInside}`);
  const [naiveRequests, breakwaterRequests] = figures(run.stdout, 'requests received');
  assert.ok(breakwaterRequests < naiveRequests, `${breakwaterRequests} < ${naiveRequests}`);

  assert.match(breakwater.get(3) ?? '', /^ok; tools\/list HTTP 503 resent after 100 ms, as the server asked/);
  assert.match(breakwater.get(4) ?? '', /^ok; search HTTP 503 resent after 10 ms$/);
  assert.match(
    breakwater.get(5) ?? '',
    /^create_ticket: HttpStatusError 503, retryAfterMs 300, "ticket queue overloaded"; not resent/,
  );
  assert.match(
    breakwater.get(6) ?? '',
    /^connect: HttpStatusError 503, "no healthy upstream";.* gate closed/,
  );
  // Turn 7 comes a turn's thinking into the gate's window; the turns after it are refused
  // until the window ends (turns 8 and 9 on a quiet machine), then one connect goes
  // through and the server is back: no later turn fails.
  const back = [8, 9, 10].find((n) => !/^connect: GateClosedError/.test(breakwater.get(n) ?? ''));
  assert.ok(back !== undefined, `the gate let no connect through by turn 10:\n${run.stdout}`);
  for (let n = 7; n < back; n++) {
    assert.match(breakwater.get(n) ?? '', /^connect: GateClosedError, nothing sent/);
  }
  assert.match(breakwater.get(back) ?? '', /^ok; the gate let one connect through: cleared$/);
  assert.deepEqual(
    [...breakwater.keys()].filter((n) => n > back),
    [],
    'no turn fails or resends after the gate lets a connect through',
  );

  // The naive loop on turn 3: its tries 20 ms apart all meet the 100 ms overload, or on a
  // loaded machine the later ones come past it.
  assert.match(
    naive.get(3) ?? '',
    /^(tools\/list: "Streamable HTTP error: .*; 3 tries|ok; tools\/list failed, ok on try [23])$/,
  );
  assert.match(naive.get(4) ?? '', /^ok; search failed, ok on try 2$/);
  assert.match(naive.get(5) ?? '', /^ok; create_ticket failed, ok on try 2$/);
  for (const turn of [6, 7])
    assert.match(naive.get(turn) ?? '', /^connect: "Streamable HTTP error: .*; 3 tries$/);
});

test('the MCP agent example counts duplicate create_ticket executions per ticket at the server: a ticket that never ran does not hide one that ran twice', () => {
  // 4 asks, 4 executions: ticket 2 ran twice, ticket 10 never ran.
  const ledger = (tickets: [string, number][]): Ledger => ({
    requests: 20,
    whileDown: 0,
    insideRetryAfter: 0,
    runs: { search: 12, create_ticket: tickets.reduce((sum, [, runs]) => sum + runs, 0) },
    tickets: new Map(tickets),
  });
  const naive = {
    log: [],
    ticketsAsked: 4,
    ledger: ledger([
      ['turn 2', 2],
      ['turn 5', 1],
      ['turn 12', 1],
    ]),
  };
  const breakwater = {
    log: [],
    ticketsAsked: 4,
    ledger: ledger([
      ['turn 2', 1],
      ['turn 5', 1],
      ['turn 10', 1],
      ['turn 12', 1],
    ]),
  };
  const table = formatTable({ naive, breakwater, elapsedMs: 0, problems: [] }).join('\n');
  assert.deepEqual(figures(table, 'create_ticket executions'), [4, 4]);
  assert.deepEqual(figures(table, 'duplicate create_ticket executions'), [1, 0]);
});

test('the mcp-agent example takes no options: --help prints its usage and exits 0, anything else is refused with exit code 2 before it runs', async () => {
  const [help, bad] = await Promise.all([
    runExample('mcp-agent/main.ts', ['--help']),
    runExample('mcp-agent/main.ts', ['--bogus']),
  ]);
  assert.equal(help.code, 0, help.stderr);
  assert.match(help.stdout, /^usage: node --import tsx examples\/mcp-agent\/main\.ts$/m);
  assert.doesNotMatch(help.stdout, /^counted by the server/m, '--help ran the example');
  assert.equal(bad.code, 2, `${bad.stderr}\n${bad.stdout}`);
  assert.match(bad.stderr, /--bogus/);
  assert.match(bad.stderr, /--help/);
  assert.equal(bad.stdout, '', 'a refused command line ran the example');
});
