/**
 * @module
 * What the demo prints: one summary per client run (server counts + measured
 * latencies), the table on the terminal, and a self-contained HTML page with an inline
 * SVG chart of the requests per 100 ms the server saw (no scripts, no external assets).
 */

import { type Answers, RETRY_AFTER_GRACE_MS, type StormScript } from './storm.ts';
import type { CallResult } from './workload.ts';

/** The chart's bucket: requests per this many ms at the server. */
export const BUCKET_MS = 100;

/** Everything the report says about one client's run. */
export interface RunSummary {
  client: string;
  calls: number;
  /** Calls that ended with a 2xx, as the caller saw them. */
  succeeded: number;
  /** Requests that reached the server (counted by the server). */
  requests: number;
  /** Requests that arrived inside a Retry-After window the server had sent (counted by the server). */
  inWindow: number;
  /** How the server answered this client's requests. */
  answers: Answers;
  /** `POST /orders` executions beyond the first per order id (counted by the handler). */
  duplicates: number;
  p50Ms: number;
  p99Ms: number;
  breakerOpens: number | undefined;
  /** Wall time of the run, in ms. */
  durationMs: number;
  /** Arrival times at the server, ms since the run began. */
  arrivals: number[];
  /** How the failed calls ended (`503`, `ECONNRESET`, `CIRCUIT_OPEN`, ...), with counts. */
  failures: Record<string, number>;
  /**
   * For breakwater: why `retry()` gave up on the failed calls (`give-up` events' `why`),
   * and the failed calls' attempts as the wire saw them (`503 429 ECONNRESET`), with counts.
   */
  gaveUp?: { why: Record<string, number>; attempts: Record<string, number> };
}

/** Nearest-rank percentile of `values` (`p` in 0..100); 0 for none. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1] as number;
}

/** Counts of each distinct text in `texts`, most frequent first in the output of {@link counted}. */
function tally(texts: Iterable<string>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const text of texts) out[text] = (out[text] ?? 0) + 1;
  return out;
}

/** `503 x120, ECONNRESET x14`: most frequent first. */
function counted(counts: Record<string, number>): string {
  return Object.entries(counts)
    .sort((a, b) => b[1] - a[1])
    .map(([what, n]) => `${what} x${n}`)
    .join(', ');
}

/**
 * The failed calls' attempts (`attemptsOf(index)`: each attempt's status or error code,
 * in order), joined as `503 429 ECONNRESET`, with counts.
 */
export function failedAttempts(
  results: readonly CallResult[],
  attemptsOf: (index: number) => readonly string[] | undefined,
): Record<string, number> {
  const failed = results.flatMap((r, index) =>
    r.ok ? [] : [(attemptsOf(index) ?? []).join(' ') || 'none sent'],
  );
  return tally(failed);
}

/** Failed calls by how they ended. */
export function failuresOf(results: readonly CallResult[]): Record<string, number> {
  return tally(results.filter((r) => !r.ok).map((r) => r.outcome));
}

/** Requests per {@link BUCKET_MS} at the server, from 0 to `untilMs`. */
export function perBucket(arrivals: readonly number[], untilMs: number): number[] {
  const buckets = new Array<number>(Math.max(1, Math.ceil(untilMs / BUCKET_MS))).fill(0);
  for (const t of arrivals) {
    const i = Math.min(buckets.length - 1, Math.max(0, Math.floor(t / BUCKET_MS)));
    buckets[i] = (buckets[i] ?? 0) + 1;
  }
  return buckets;
}

function ms(value: number): string {
  return value >= 10_000 ? `${(value / 1000).toFixed(1)} s` : `${Math.round(value)} ms`;
}

/** The table's header and one row per run, as cells. */
function tableCells(runs: readonly RunSummary[]): string[][] {
  const header = [
    'client',
    'calls ok',
    'requests at server',
    'inside Retry-After',
    'duplicate orders',
    'p50',
    'p99',
    'breaker opens',
  ];
  const rows = runs.map((r) => [
    r.client,
    `${r.succeeded}/${r.calls}`,
    `${r.requests} (${(r.requests / r.calls).toFixed(2)}x)`,
    String(r.inWindow),
    String(r.duplicates),
    ms(r.p50Ms),
    ms(r.p99Ms),
    r.breakerOpens === undefined ? '-' : String(r.breakerOpens),
  ]);
  return [header, ...rows];
}

/** The results table, columns two spaces apart (numbers right-aligned). */
export function formatTable(runs: readonly RunSummary[]): string {
  const cells = tableCells(runs);
  const widths = (cells[0] as string[]).map((_, col) =>
    Math.max(...cells.map((row) => (row[col] ?? '').length)),
  );
  return cells
    .map((row, i) =>
      row
        .map((cell, col) => {
          const width = widths[col] ?? 0;
          return col === 0 || i === 0 ? cell.padEnd(width) : cell.padStart(width);
        })
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** How each column was measured: printed under the table. */
export function formatNotes(concurrency: number): string {
  return [
    'calls ok            calls that ended with a 2xx, as the caller saw them',
    'requests at server  every request that reached the server, counted there (x = per call: load amplification)',
    'inside Retry-After  requests sent while a Retry-After the server had given was still running, counted by',
    '                    the server from what each request carries, stamped as it was handed to fetch (the',
    '                    same for every client): its send time, and the windows its client had read by then;',
    `                    a window counts against other calls from ${RETRY_AFTER_GRACE_MS} ms after the client read it (until then`,
    "                    its answer was still on its way); the refused call's own resend counts however soon",
    '                    it comes',
    'duplicate orders    POST /orders executions beyond the first per order id, counted by the order handler',
    `p50, p99            per call, from its planned start to its end (waiting for one of ${concurrency} slots included;`,
    "                    a call that waits out the server's Retry-After is slower, and more likely to succeed)",
    'breaker opens       breakwater `breaker` events with state "open" (its circuit opens after more failures',
    '                    in a row than there are calls in flight: see examples/demo/clients.ts)',
  ].join('\n');
}

/**
 * One paragraph per run on how its calls failed, e.g. `503 x120, ECONNRESET x14`; for
 * breakwater's failed calls, also what each one's attempts met and why `retry()` did not
 * send it again (`attempts`: all of them used; `budget`, `deadline`, `unsafe-to-resend`, ...).
 */
export function formatFailures(runs: readonly RunSummary[]): string {
  const width = Math.max(...runs.map((r) => r.client.length));
  const indent = ' '.repeat(width + 2);
  return runs
    .map((r) => {
      const failed = counted(r.failures);
      const lines = [`${r.client.padEnd(width)}  failed calls: ${failed === '' ? 'none' : failed}`];
      if (failed !== '' && r.gaveUp !== undefined) {
        lines.push(`${indent}their attempts: ${counted(r.gaveUp.attempts)}`);
        const why = counted(r.gaveUp.why);
        lines.push(`${indent}why retry() stopped (give-up events): ${why === '' ? 'none' : why}`);
      }
      return lines.join('\n');
    })
    .join('\n');
}

/** The clients as lines: `  naive retry  any error, 5xx or 429 retried ...`. */
export function formatClients(clients: readonly (readonly [string, string])[]): string {
  const width = Math.max(...clients.map(([name]) => name.length));
  return clients.map(([name, about]) => `  ${name.padEnd(width)}  ${about}`).join('\n');
}

/** The script as lines: `0.0-0.5 s  healthy`. */
export function formatScript(script: StormScript): string {
  return script.phases
    .map((p) => {
      const to = Number.isFinite(p.toMs) ? `${(p.toMs / 1000).toFixed(1)} s` : 'end';
      return `  ${(p.fromMs / 1000).toFixed(1)} s - ${to}`.padEnd(20) + p.what;
    })
    .join('\n');
}

// -- HTML -------------------------------------------------------------------------

const COLORS = ['#d1495b', '#edae49', '#00798c', '#6c4f9e'];
const PHASE_FILL: Record<string, string> = {
  healthy: '#f4f4f4',
  overloaded: '#fde0dc',
  'rate-limited': '#fff1d0',
  flaky: '#e3e6f7',
  recovered: '#e6f4ea',
};

function escapeHtml(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[ch] as string,
  );
}

/** The chart: one stepped line per client of requests per 100 ms at the server, over the phases. */
export function chartSvg(runs: readonly RunSummary[], script: StormScript): string {
  const width = 960;
  const height = 360;
  const left = 48;
  const right = 16;
  const top = 58;
  const bottom = 40;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  // A loop, not Math.max(...arrivals): a run can count 300,000 requests (100,000 calls
  // sent 3 times each), and V8 throws a RangeError past about 125,000 spread arguments.
  let lastArrival = script.stormMs;
  for (const run of runs) for (const t of run.arrivals) if (t > lastArrival) lastArrival = t;
  const untilMs = Math.ceil((lastArrival + 1) / 500) * 500;
  const series = runs.map((r) => perBucket(r.arrivals, untilMs));
  const peak = Math.max(1, ...series.flat());
  const yMax = Math.ceil(peak / 20) * 20; // so the four grid steps are whole numbers
  const x = (t: number): number => left + (t / untilMs) * plotW;
  const y = (n: number): number => top + plotH - (n / yMax) * plotH;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="requests per ${BUCKET_MS} ms at the server, per client">`,
  );
  out.push('<style>text{font:12px system-ui,sans-serif;fill:#333}.small{font-size:11px;fill:#555}</style>');
  for (const phase of script.phases) {
    const from = x(phase.fromMs);
    const to = x(Math.min(phase.toMs, untilMs));
    out.push(
      `<rect x="${from.toFixed(1)}" y="${top}" width="${(to - from).toFixed(1)}" height="${plotH}" fill="${PHASE_FILL[phase.name] ?? '#fff'}"/>`,
    );
    out.push(
      `<text class="small" x="${(from + 4).toFixed(1)}" y="${top - 6}">${escapeHtml(phase.name)}</text>`,
    );
  }
  for (let i = 0; i <= 4; i++) {
    const n = (yMax * i) / 4;
    out.push(
      `<line x1="${left}" x2="${width - right}" y1="${y(n).toFixed(1)}" y2="${y(n).toFixed(1)}" stroke="#ddd"/>`,
    );
    out.push(
      `<text class="small" x="${left - 6}" y="${(y(n) + 4).toFixed(1)}" text-anchor="end">${n}</text>`,
    );
  }
  for (let t = 0; t <= untilMs; t += 500) {
    out.push(
      `<text class="small" x="${x(t).toFixed(1)}" y="${height - bottom + 16}" text-anchor="middle">${(t / 1000).toFixed(1)}</text>`,
    );
  }
  out.push(
    `<text x="${left + plotW / 2}" y="${height - 6}" text-anchor="middle">seconds since the client's run began (requests per ${BUCKET_MS} ms at the server)</text>`,
  );
  series.forEach((buckets, i) => {
    const points: string[] = [];
    buckets.forEach((n, b) => {
      points.push(
        `${x(b * BUCKET_MS).toFixed(1)},${y(n).toFixed(1)}`,
        `${x((b + 1) * BUCKET_MS).toFixed(1)},${y(n).toFixed(1)}`,
      );
    });
    const run = runs[i] as RunSummary;
    out.push(
      `<polyline fill="none" stroke="${COLORS[i % COLORS.length]}" stroke-width="2" stroke-linejoin="round" points="${points.join(' ')}" data-client="${escapeHtml(run.client)}" data-per-100ms="${buckets.join(',')}"><title>${escapeHtml(run.client)}</title></polyline>`,
    );
    const lx = left + i * 260;
    out.push(`<rect x="${lx}" y="12" width="16" height="4" fill="${COLORS[i % COLORS.length]}"/>`);
    out.push(`<text x="${lx + 22}" y="18">${escapeHtml(run.client)}: ${run.requests} requests</text>`);
  });
  out.push(`<rect x="${left}" y="${top}" width="${plotW}" height="${plotH}" fill="none" stroke="#999"/>`);
  out.push('</svg>');
  return out.join('\n');
}

/**
 * The page's style. A figure never wraps ("1381 ms" broken after "1381" reads as two
 * figures): the headers wrap instead, between words only (a hyphenated word such as
 * "Retry-After" is kept whole). A table too wide for the window scrolls inside its own
 * box, and the 960 px chart shrinks to the page's width, so at 800 px nothing pushes
 * the page sideways.
 */
const PAGE_CSS = [
  'body{font:15px/1.5 system-ui,sans-serif;max-width:1000px;margin:2rem auto;padding:0 1rem;color:#222}',
  '.table{overflow-x:auto;margin:1rem 0}table{border-collapse:collapse}',
  'th,td{padding:.3rem .5rem;border-bottom:1px solid #ddd;text-align:right}th{vertical-align:bottom}',
  'td,.word{white-space:nowrap}td{font-variant-numeric:tabular-nums}',
  'th:first-child,td:first-child{text-align:left}',
  'svg{display:block;max-width:100%;height:auto}',
  'pre{background:#f6f6f6;padding:.8rem;overflow:auto;font-size:13px}',
].join('\n');

/** A header cell's text, its hyphenated words each kept on one line. */
function headerHtml(text: string): string {
  return escapeHtml(text).replace(/\S*-\S*/g, (word) => `<span class="word">${word}</span>`);
}

/** A table of `header` and `rows` (text, escaped here), in a box that scrolls when too wide. */
function tableHtml(header: readonly string[], rows: readonly (readonly string[])[]): string {
  return [
    '<div class="table"><table>',
    `<thead><tr>${header.map((h) => `<th>${headerHtml(h)}</th>`).join('')}</tr></thead>`,
    '<tbody>',
    ...rows.map((row) => `<tr>${row.map((cell) => `<td>${escapeHtml(cell)}</td>`).join('')}</tr>`),
    '</tbody></table></div>',
  ].join('\n');
}

/** The server's own tally per run: what it did to each client's requests. */
function answersTable(runs: readonly RunSummary[]): string {
  const columns: [string, (a: Answers) => number][] = [
    ['handled', (a) => a.handled],
    ['of which slow', (a) => a.slow],
    ['503 + Retry-After', (a) => a.shed503],
    ['429 + retry-after-ms', (a) => a.limited429],
    ['reset before running', (a) => a.resetBefore],
    ['order reset after running', (a) => a.resetAfterOrder],
  ];
  const seconds = (r: RunSummary): string => `${(r.durationMs / 1000).toFixed(1)} s`;
  return tableHtml(
    ['client', ...columns.map(([h]) => h), 'run time'],
    runs.map((r) => [r.client, ...columns.map(([, get]) => String(get(r.answers))), seconds(r)]),
  );
}

/** The whole page: what ran, the chart, the table, how it was measured. */
export function reportHtml(
  runs: readonly RunSummary[],
  script: StormScript,
  settings: { calls: number; concurrency: number },
): string {
  const [header, ...rows] = tableCells(runs) as [string[], ...string[][]];
  const phases = script.phases
    .map((p) => {
      const to = Number.isFinite(p.toMs) ? `${(p.toMs / 1000).toFixed(1)} s` : 'end';
      return `<li><b>${(p.fromMs / 1000).toFixed(1)} s – ${to}</b>: ${escapeHtml(p.what)}</li>`;
    })
    .join('\n');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>breakwater demo: ${settings.calls} calls through a storm (seed ${script.seed})</title>
<style>
${PAGE_CSS}
</style>
</head>
<body>
<h1>breakwater demo</h1>
<p>The same ${settings.calls} calls (reads and orders, ${settings.concurrency} concurrent) ran through each client, one
after the other, against a local upstream following the same seeded fault script (seed ${script.seed}):</p>
<ul>
${phases}
</ul>
<h2>Requests per ${BUCKET_MS} ms at the server</h2>
${chartSvg(runs, script)}
<h2>Results</h2>
${tableHtml(header, rows)}
<h2>How the server answered each client</h2>
${answersTable(runs)}
<h2>How each figure was measured</h2>
<pre>${escapeHtml(formatNotes(settings.concurrency))}</pre>
<pre>${escapeHtml(formatFailures(runs))}</pre>
</body>
</html>
`;
}
