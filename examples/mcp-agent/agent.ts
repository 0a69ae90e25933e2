/**
 * @module
 * An MCP agent's 12 turns against a local MCP server having a bad day, run twice:
 * through the SDK on plain fetch with a "try everything 3 times" loop, and through
 * `resilientMcpClient()` from `breakwater/mcp`. The server (the SDK's own `McpServer`
 * behind a Hono app with a fault layer) counts what each client did to it.
 *
 * {@link runMcpAgent} runs the comparison and says whether breakwater held; the
 * `format*` functions print it. `main.ts` tells the whole story, `npm run demo` its
 * table (act 2).
 */

// @ts-types="@modelcontextprotocol/sdk/client/index"
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
// @ts-types="@modelcontextprotocol/sdk/client/streamableHttp"
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
// @ts-types="@modelcontextprotocol/sdk/server/mcp"
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
// @ts-types="@modelcontextprotocol/sdk/server/webStandardStreamableHttp"
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import {
  type BreakwaterEvent,
  createGate,
  definePolicy,
  type FetchLike,
  GateClosedError,
  HttpStatusError,
  retryDelay,
} from 'breakwater';
import { resilientMcpClient } from 'breakwater/mcp';
import { Hono } from 'hono';
import * as z from 'zod';
import { listen, stampedFetch } from '../loopback.ts';

const TURNS = 12;
/** The agent's "thinking" between turns (a model call, in a real agent). */
const THINK_MS = 120;
/** Turns on which the agent asks for a ticket. */
const TICKET_TURNS = [2, 5, 10, 12];

/** The server's script, keyed by the agent's turn (the harness tells the server each new turn). */
const OVERLOAD_TURN = 3;
const SEARCH_FAULT_TURN = 4;
const TICKET_FAULT_TURN = 5;
/** The MCP process crashes as this turn starts ... */
const CRASH_TURN = 6;
/**
 * ... and is back this many ms later: an outage lasts a time, as the start gate's
 * window does. Keyed by turns alone (down for turns 6 to 8), it ended whenever the
 * agent reached turn 9: on a loaded machine (load 6-14 on 2 cores) turns 7 and 8 took
 * longer than the gate's window (then 250 ms), turn 8's connect met the server still
 * down, its resends opened the breaker (5 failures in a row) and the gate re-armed for
 * twice as long: the recovered turns 9 to 12 were refused, and with them the tickets of
 * turns 10 and 12 (6 runs in 16 at load 8-12). Unloaded, the naive loop's turns 6, 7
 * and 8 fall inside it (each about 180 ms: 3 tries, then the thinking).
 */
const DOWN_MS = 470;
/**
 * ... and not before this turn: the naive loop meets the outage on two turns at least
 * however slowly its turns go (on a loaded machine its turn 6 alone took more than
 * 470 ms in 5 runs of 16), so the two clients' requests while it is down always compare
 * a loop that tries again each turn with one that does not.
 */
const BACK_TURN = 8;
/** While overloaded, the server sheds everything for this long, and says so in `retry-after-ms`. */
const OVERLOAD_MS = 100;
/**
 * The delay the server names on the 503 it sends after create_ticket ran. Long next to
 * the naive loop's 20 ms before its resend, so that the resend comes inside it however
 * slowly the loop goes: at 50 ms (with 100 or 150 ms for the overload on turn 3), a
 * loaded machine (load 6-14) held the naive loop so long between reading a 503 and
 * resending (over 125 ms) that it sent nothing inside a window in 6 runs of 36. breakwater does not
 * resend the ticket, and holds its next request (turn 6's connect, after a turn's
 * thinking) until the wait is over: the whole key is paced.
 */
const TICKET_RETRY_AFTER_MS = 300;
/** A request this close to the end of a window is not counted as inside it (timers are not exact). */
const WINDOW_GRACE_MS = 5;
/**
 * The wire under each client (below the naive loop, and below breakwater's retry and
 * pacing) stamps each request with when it was sent, and with when the last wait its
 * client had read runs out: the `retry-after-ms` of a 503, counted from when the answer
 * reached the client, as RFC 9110 §10.2.3 counts delay-seconds ("after the response is
 * received"). The server counts a request inside a Retry-After window when it was sent
 * before that. Counted from when the server produced the 503 instead, a loaded machine
 * hid the naive loop's resends: its 503 took more than 80 ms to reach it, so a resend
 * sent 20 ms after reading it came after the window (0 inside in 18 runs of 26 at load
 * 4-12).
 */
const SENT_AT_HEADER = 'x-agent-sent-at';
const TOLD_UNTIL_HEADER = 'x-agent-told-until';

/** The naive loop: every operation tried up to this many times, this far apart. */
const NAIVE_TRIES = 3;
const NAIVE_GAP_MS = 20;
/** How much of an SDK error message the log shows. */
const CLIP_CHARS = 64;

/** breakwater: short backoffs so the example is quick (the defaults start at 500 ms). */
const BACKOFF = { initialMs: 10, maxMs: 40, jitter: 'none' } as const;
/**
 * The start gate's first window after a failed connect. It outlasts {@link DOWN_MS}
 * counted from that connect's failure, which comes after its two resends' backoffs
 * (10 + 20 ms), so the connect it lets through finds the server back on turn 8 or later:
 * turn 7 starts one turn's thinking (120 ms) into the window, within 190 ms in 32 runs at
 * load 7-11, where it would take 460. And it is shorter than four turns' thinking, so the
 * first ticket turn after the outage (turn 10) is never refused, however slowly the
 * turns go.
 */
const GATE_MS = 460;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// --- The server ---------------------------------------------------------------------

/** What the server counted for one client's run. */
export interface Ledger {
  /** Every HTTP request that reached the app. */
  requests: number;
  /** Requests that arrived while the script had the server down. */
  whileDown: number;
  /**
   * Requests sent inside a Retry-After window: before the wait named by an answer their
   * client had read ran out (see {@link TOLD_UNTIL_HEADER}).
   */
  insideRetryAfter: number;
  /** Tool handler executions. */
  runs: { search: number; create_ticket: number };
  /** create_ticket executions per ticket (by its title, which names the turn that asked for it). */
  tickets: Map<string, number>;
}

/** A JSON-RPC error body, as MCP servers send with an HTTP failure. */
function failure(status: number, message: string, headers: Record<string, string> = {}): Response {
  const body = JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message } });
  return new Response(body, { status, headers: { 'content-type': 'application/json', ...headers } });
}

/** A real MCP server with two tools, each counting its executions. Stateless: one per request. */
function mcpServer(ledger: Ledger): McpServer {
  const server = new McpServer({ name: 'tickets', version: '1.0.0' });
  server.registerTool(
    'search',
    {
      description: 'Search tickets',
      inputSchema: { query: z.string() },
      annotations: { readOnlyHint: true },
    },
    async ({ query }) => {
      ledger.runs.search++;
      return { content: [{ type: 'text' as const, text: `no ticket matches "${query}"` }] };
    },
  );
  server.registerTool(
    'create_ticket',
    { description: 'Open a ticket', inputSchema: { title: z.string() } },
    async ({ title }) => {
      ledger.runs.create_ticket++;
      ledger.tickets.set(title, (ledger.tickets.get(title) ?? 0) + 1);
      return { content: [{ type: 'text' as const, text: `ticket #${ledger.runs.create_ticket}: ${title}` }] };
    },
  );
  return server;
}

/**
 * The flaky server: the MCP server behind a fault layer that follows the script.
 * `turn()` is the agent's turn; `down()` says whether the MCP process is gone.
 */
function flakyApp(ledger: Ledger, turn: () => number, down: () => boolean): Hono {
  /** While overloaded, the server sheds every request until then (performance.now() ms). */
  let shedUntil = 0;
  /** Faults already fired, as `${turn} ${what}`: each fires for the first such request of its turn. */
  const fired = new Set<string>();
  function once(what: string): boolean {
    const key = `${turn()} ${what}`;
    if (fired.has(key)) return false;
    fired.add(key);
    return true;
  }

  const app = new Hono();
  app.use('/mcp', async (c, next) => {
    ledger.requests++;
    const sentAt = Number(c.req.header(SENT_AT_HEADER));
    const toldUntil = Number(c.req.header(TOLD_UNTIL_HEADER));
    if (sentAt < toldUntil - WINDOW_GRACE_MS) ledger.insideRetryAfter++;
    if (down()) {
      // The MCP process is gone; the proxy in front of it answers.
      ledger.whileDown++;
      return c.text('no healthy upstream', 503);
    }
    await next();
  });
  // Stateless: no standalone SSE stream.
  app.get('/mcp', (c) => c.body(null, 405, { allow: 'POST' }));
  app.post('/mcp', async (c) => {
    const now = performance.now();
    if (now < shedUntil) {
      const leftMs = Math.ceil(shedUntil - now);
      return failure(503, 'overloaded', { 'retry-after-ms': String(leftMs) });
    }
    const text = await c.req.text();
    let what: string;
    try {
      const message = JSON.parse(text) as { method?: string; params?: { name?: string } };
      what = message.method === 'tools/call' ? `tools/call:${message.params?.name}` : String(message.method);
    } catch {
      return failure(400, 'not JSON');
    }

    if (turn() === OVERLOAD_TURN && what === 'tools/list' && once(what)) {
      shedUntil = now + OVERLOAD_MS;
      return failure(503, 'overloaded', { 'retry-after-ms': String(OVERLOAD_MS) });
    }

    const server = mcpServer(ledger);
    const transport = new WebStandardStreamableHTTPServerTransport({ enableJsonResponse: true });
    await server.connect(transport);
    let response: Response;
    try {
      response = await transport.handleRequest(
        new Request(c.req.url, { method: 'POST', headers: c.req.raw.headers, body: text }),
      );
    } finally {
      await server.close();
    }

    // The tool ran; its answer is lost on the way back.
    if (turn() === SEARCH_FAULT_TURN && what === 'tools/call:search' && once(what)) {
      await response.body?.cancel();
      return failure(503, 'upstream timeout');
    }
    if (turn() === TICKET_FAULT_TURN && what === 'tools/call:create_ticket' && once(what)) {
      await response.body?.cancel();
      return failure(503, 'ticket queue overloaded', { 'retry-after-ms': String(TICKET_RETRY_AFTER_MS) });
    }
    return response;
  });
  return app;
}

/** A running flaky server on 127.0.0.1, port 0. */
interface FlakyServer {
  url: URL;
  ledger: Ledger;
  /** Moves the script to the agent's turn `n`. */
  turn(n: number): void;
  close(): Promise<void>;
}

async function startServer(): Promise<FlakyServer> {
  const ledger: Ledger = {
    requests: 0,
    whileDown: 0,
    insideRetryAfter: 0,
    runs: { search: 0, create_ticket: 0 },
    tickets: new Map(),
  };
  let current = 0;
  /** When the MCP process is back (performance.now() ms) once it has crashed, if the agent has reached {@link BACK_TURN}. */
  let downUntil = 0;
  const app = flakyApp(
    ledger,
    () => current,
    () => current >= CRASH_TURN && (current < BACK_TURN || performance.now() < downUntil),
  );
  const server = await listen(app);
  return {
    url: new URL(`${server.origin}/mcp`),
    ledger,
    turn(n) {
      current = n;
      if (n === CRASH_TURN) downUntil = performance.now() + DOWN_MS;
    },
    close: server.close,
  };
}

// --- The two clients ----------------------------------------------------------------

/** One way for the agent to reach the server. */
interface AgentClient {
  /** A connected client for this turn. */
  connect(): Promise<Client>;
  /** Runs one MCP operation (`step` names it in the log). */
  run<T>(step: string, op: () => Promise<T>): Promise<T>;
  /** Ends the turn's connection. */
  end(): Promise<void>;
  /** What the agent learns from a failure. */
  explain(error: unknown): string;
  /** Starts a new turn's notes. */
  newTurn(): void;
  /** What happened on the way this turn: resends, waits, the gate. */
  notes(): string[];
}

/**
 * The wire under one client: the runtime's fetch, stamping each request with when it
 * was sent and with when the longest wait its client had read runs out (see
 * {@link TOLD_UNTIL_HEADER}), both epoch ms.
 */
function toldWire(): FetchLike {
  const send = stampedFetch(SENT_AT_HEADER);
  let waitUntil = 0;
  return async function told(input, init) {
    const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
    headers.set(TOLD_UNTIL_HEADER, String(waitUntil));
    const response = await send(input, { ...init, headers });
    const waitMs = retryDelay(response.headers);
    if (waitMs !== undefined) waitUntil = Math.max(waitUntil, Date.now() + waitMs);
    return response;
  };
}

/** The SDK on plain fetch, every operation tried up to 3 times, 20 ms apart; a new connection each turn. */
function naiveClient(url: URL): AgentClient {
  const fetch = toldWire();
  let client: Client | undefined;
  const notes: string[] = [];
  async function run<T>(step: string, op: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        const result = await op();
        if (attempt > 1) notes.push(`${step} failed, ok on try ${attempt}`);
        return result;
      } catch (error) {
        if (attempt >= NAIVE_TRIES) {
          notes.push(`${NAIVE_TRIES} tries`);
          throw error;
        }
        await sleep(NAIVE_GAP_MS);
      }
    }
  }
  return {
    newTurn: () => {
      notes.length = 0;
    },
    notes: () => notes,
    run,
    connect: () =>
      run('connect', async () => {
        const fresh = new Client({ name: 'naive-agent', version: '1.0.0' });
        await fresh.connect(new StreamableHTTPClientTransport(url, { fetch }));
        client = fresh;
        return fresh;
      }),
    async end() {
      await client?.close();
      client = undefined;
    },
    // All the caller has: the SDK's message (status and body, no Retry-After).
    explain: (error) => `"${clip(error instanceof Error ? error.message : String(error))}"`,
  };
}

/** `resilientMcpClient()` with a policy: resends what is safe, gates connects, errors with their status. */
function breakwaterClient(url: URL): AgentClient {
  const notes: string[] = [];
  let step = 'connect';
  /** Resends this turn: each step's failure (`search HTTP 503`) with the waits before its resends. */
  const resends = new Map<string, string[]>();
  /**
   * The wait the last failure asked for: a retry event's delayMs is what was left of it once
   * the failure's body had been read (a few ms less).
   */
  let asked: number | undefined;
  const onEvent = (event: BreakwaterEvent) => {
    if (event.type === 'captured') asked = event.snapshot.retryAfterMs;
    if (event.type === 'retry') {
      const what = `${step} ${event.reason}`;
      if (!resends.has(what)) {
        resends.set(what, []);
        notes.push(what);
      }
      const wait =
        event.delaySource === 'server'
          ? `${asked ?? event.delayMs} ms, as the server asked`
          : `${event.delayMs} ms`;
      resends.get(what)?.push(wait);
    } else if (event.type === 'give-up' && event.why === 'unsafe-to-resend') {
      notes.push('not resent: it may have run');
    } else if (event.type === 'gate' && event.state === 'armed') {
      notes.push(`gate closed for ${GATE_MS} ms`);
    } else if (event.type === 'gate' && event.state === 'cleared') {
      notes.push('the gate let one connect through: cleared');
    }
  };
  const mcp = resilientMcpClient({
    client: new Client({ name: 'breakwater-agent', version: '1.0.0' }),
    transport: (fetch) => new StreamableHTTPClientTransport(url, { fetch }),
    policy: definePolicy({ name: 'tickets-mcp', retry: { backoff: BACKOFF } }),
    fetch: toldWire(),
    gate: createGate({
      key: 'tickets-mcp',
      schedule: { initialMs: GATE_MS, maxMs: 4 * GATE_MS, jitter: 'none' },
      onEvent,
    }),
    onEvent,
  });
  return {
    newTurn: () => {
      notes.length = 0;
      resends.clear();
    },
    // A resend's note lists its waits: `connect HTTP 503 resent after 10 ms, 20 ms`.
    notes: () =>
      notes.map((note) => {
        const waits = resends.get(note);
        return waits === undefined ? note : `${note} resent after ${waits.join(', ')}`;
      }),
    run: (name, op) => {
      step = name;
      return op();
    },
    connect: () => {
      step = 'connect';
      return mcp.connect();
    },
    end: () => mcp.close(),
    explain(error) {
      if (error instanceof GateClosedError) {
        const inMs = Math.round((error.retryAt.getTime() - Date.now()) / 10) * 10;
        return `GateClosedError, nothing sent (next try in ~${Math.max(0, inMs)} ms)`;
      }
      if (error instanceof HttpStatusError) {
        const wait = error.retryAfterMs === undefined ? '' : `, retryAfterMs ${error.retryAfterMs}`;
        return `HttpStatusError ${error.status}${wait}, "${error.serverMessage}"`;
      }
      return String(error);
    },
  };
}

/** An error message on one line, cut to fit the log. */
function clip(text: string): string {
  const line = text.replace(/\s+/g, ' ');
  return line.length > CLIP_CHARS ? `${line.slice(0, CLIP_CHARS - 1)}…` : line;
}

// --- The agent ----------------------------------------------------------------------

/** What one run of the agent did, as the agent saw it, and the server's counts. */
export interface AgentRun {
  log: string[];
  ticketsAsked: number;
  ledger: Ledger;
}

/**
 * The agent loop: each turn it connects, lists the tools, searches, and on some
 * turns opens a ticket; then it closes the connection and thinks. A failed step
 * ends the turn (a real agent would tell its model the tools are unavailable).
 */
async function runAgent(make: (url: URL) => AgentClient): Promise<AgentRun> {
  const server = await startServer();
  const agent = make(server.url);
  const log: string[] = [];
  let ticketsAsked = 0;
  try {
    for (let n = 1; n <= TURNS; n++) {
      server.turn(n);
      agent.newTurn();
      let step = 'connect';
      let outcome = 'ok';
      try {
        const client = await agent.connect();
        step = 'tools/list';
        await agent.run(step, () => client.listTools());
        step = 'search';
        await agent.run(step, () => client.callTool({ name: 'search', arguments: { query: `turn ${n}` } }));
        if (TICKET_TURNS.includes(n)) {
          step = 'create_ticket';
          ticketsAsked++;
          await agent.run(step, () =>
            client.callTool({ name: 'create_ticket', arguments: { title: `follow-up from turn ${n}` } }),
          );
        }
      } catch (error) {
        outcome = `${step}: ${agent.explain(error)}`;
      } finally {
        await agent.end();
      }
      const notes = agent.notes();
      if (outcome !== 'ok' || notes.length > 0) {
        log.push(`  turn ${String(n).padStart(2)}  ${[outcome, ...notes].join('; ')}`);
      }
      await sleep(THINK_MS);
    }
  } finally {
    await server.close();
  }
  return { log, ticketsAsked, ledger: server.ledger };
}

// --- The comparison ----------------------------------------------------------------

/** Both runs, side by side, and what breakwater failed to do. */
export interface McpAgentComparison {
  naive: AgentRun;
  breakwater: AgentRun;
  /** Wall time of the two runs (they go side by side). */
  elapsedMs: number;
  /**
   * Empty when breakwater ran create_ticket at most once per ask and sent fewer requests while
   * the server was down than the naive loop; otherwise what broke, one line each.
   */
  problems: string[];
}

/**
 * create_ticket executions beyond the first, per ticket, as the handler counted them.
 * Not executions minus asks: a ticket that never ran would hide one that ran twice.
 */
function duplicates(run: AgentRun): number {
  let extra = 0;
  for (const runs of run.ledger.tickets.values()) extra += runs - 1;
  return extra;
}

/** Runs the agent through both clients, each against its own fresh server. */
export async function runMcpAgent(): Promise<McpAgentComparison> {
  const started = performance.now();
  // Each run has its own server, so the two can go side by side.
  const [naive, breakwater] = await Promise.all([runAgent(naiveClient), runAgent(breakwaterClient)]);
  const elapsedMs = Math.round(performance.now() - started);

  const problems: string[] = [];
  if (duplicates(breakwater) !== 0)
    problems.push(`breakwater ran create_ticket ${duplicates(breakwater)} extra times`);
  if (breakwater.ledger.whileDown >= naive.ledger.whileDown) {
    problems.push(
      `breakwater sent ${breakwater.ledger.whileDown} requests while the server was down, the naive loop ${naive.ledger.whileDown}`,
    );
  }
  return { naive, breakwater, elapsedMs, problems };
}

// --- What it prints -----------------------------------------------------------------

/** The setting in three lines, for a reader who will see only the table. */
export function formatSummary(): string[] {
  return [
    `An agent runs ${TURNS} turns (connect, list tools, search, sometimes create_ticket) against a local MCP`,
    `server that sheds load, loses answers after tools ran, and goes down on turn ${CRASH_TURN} for ${DOWN_MS} ms or more.`,
    `naive: the SDK with a ${NAIVE_TRIES}-tries loop; breakwater: resilientMcpClient() with a start gate.`,
  ];
}

/** The tools, and the server's script by turn. */
export function formatScript(): string[] {
  const when = (turns: string) => `  ${turns.padEnd(11)}`;
  return `An agent runs ${TURNS} turns against a local MCP server (the SDK's McpServer, stateless JSON).
Tools: search (readOnlyHint: true) and create_ticket (no hints). Each turn the agent connects,
lists tools, searches, and on turns ${TICKET_TURNS.join(', ')} opens a ticket. The server's script:
${when(`turn ${OVERLOAD_TURN}`)}overloaded: tools/list gets 503 retry-after-ms: ${OVERLOAD_MS}, and so does all else for ${OVERLOAD_MS} ms
${when(`turn ${SEARCH_FAULT_TURN}`)}search runs, then its answer is replaced by a 503
${when(`turn ${TICKET_FAULT_TURN}`)}create_ticket runs, then its answer is replaced by a 503 retry-after-ms: ${TICKET_RETRY_AFTER_MS}
${when(`turn ${CRASH_TURN}`)}down: a proxy answers every request 503 "no healthy upstream" for ${DOWN_MS} ms,
${when('')}and at least until turn ${BACK_TURN}; then recovered`.split('\n');
}

/** Each client's turn log: the turns that failed or needed a resend, and why. */
export function formatLogs(comparison: McpAgentComparison): string[] {
  return [
    `naive: the SDK on plain fetch, each operation tried up to ${NAIVE_TRIES} times, ${NAIVE_GAP_MS} ms apart`,
    ...comparison.naive.log,
    `breakwater: resilientMcpClient with definePolicy(), start gate ${GATE_MS} ms`,
    ...comparison.breakwater.log,
  ];
}

/** What the server counted, naive and breakwater side by side. */
export function formatTable({ naive, breakwater }: McpAgentComparison): string[] {
  const row = (label: string, a: string | number, b: string | number) =>
    `${label.padEnd(40)}${String(a).padStart(7)}${String(b).padStart(12)}`;
  return [
    row('counted by the server', 'naive', 'breakwater'),
    row('requests received', naive.ledger.requests, breakwater.ledger.requests),
    row(`requests while down (from turn ${CRASH_TURN})`, naive.ledger.whileDown, breakwater.ledger.whileDown),
    row(
      'requests inside a Retry-After window',
      naive.ledger.insideRetryAfter,
      breakwater.ledger.insideRetryAfter,
    ),
    row('search executions', naive.ledger.runs.search, breakwater.ledger.runs.search),
    row('create_ticket executions', naive.ledger.runs.create_ticket, breakwater.ledger.runs.create_ticket),
    row('tickets the agent asked for', naive.ticketsAsked, breakwater.ticketsAsked),
    row('duplicate create_ticket executions', duplicates(naive), duplicates(breakwater)),
  ];
}
