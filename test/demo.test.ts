/**
 * Smoke tests for `npm run demo` (examples/demo/). The demo's upstream resets sockets
 * through node:http, so it always runs under Node: these tests start it as a child
 * process (`node --import tsx examples/demo/main.ts`), which works the same from Node,
 * Deno and Bun.
 */

import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { type ExampleRun, runExample } from './helpers/example.ts';

/** A short run: three clients through a 2 s storm take about 8 s in all. */
const SHORT_RUN = ['--calls', '120', '--seed', '1', '--storm-ms', '2000', '--quiet'];
/** The demo with `args`. */
function demo(args: string[]): Promise<ExampleRun> {
  return runExample('demo/main.ts', args);
}

/** The results table's row for a client, as cells (columns are two or more spaces apart). */
function row(stdout: string, client: string): string[] {
  const line = stdout.split('\n').find((l) => l.startsWith(`${client}  `));
  assert.ok(line, `no table row for ${client} in:\n${stdout}`);
  return line.split(/ {2,}/).map((cell) => cell.trim());
}

test('a short demo run prints the table: breakwater sends no duplicate order and nothing inside a Retry-After window, the naive loop does', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'breakwater-demo-'));
  try {
    const html = join(dir, 'report.html');
    const run = await demo([...SHORT_RUN, '--html', html]);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /^client +calls ok +requests at server +inside Retry-After +duplicate orders/m);

    // client, calls ok, requests at server, inside Retry-After, duplicate orders, p50, p99, breaker opens
    const plain = row(run.stdout, 'plain fetch');
    const naive = row(run.stdout, 'naive retry');
    const breakwater = row(run.stdout, 'breakwater');
    for (const cells of [plain, naive, breakwater]) assert.equal(cells.length, 8, cells.join(' | '));
    assert.equal(breakwater[3], '0', 'breakwater requests inside a Retry-After window');
    assert.equal(breakwater[4], '0', 'breakwater duplicate order executions');
    assert.ok(
      Number(naive[3]) > 0 || Number(naive[4]) > 0,
      `the naive loop should show requests inside Retry-After windows or duplicates: ${naive.join(' | ')}`,
    );
    assert.equal(plain[2], '120 (1.00x)', 'plain fetch sends each call once');
    assert.ok(
      Number.parseInt(naive[2] ?? '', 10) > Number.parseInt(breakwater[2] ?? '', 10),
      'naive load > breakwater load',
    );

    const page = await readFile(html, 'utf8');
    assert.match(page, /^<!doctype html>/);
    assert.match(page, /<svg[^>]*>/);
    const series = [...page.matchAll(/<polyline [^>]*points="([^"]+)"[^>]*data-client="([^"]+)"/g)];
    assert.deepEqual(
      series.map((m) => m[2]),
      ['plain fetch', 'naive retry', 'breakwater'],
    );
    for (const m of series) assert.ok((m[1] ?? '').split(' ').length > 10, `few points for ${m[2]}`);
    assert.doesNotMatch(page, /<script|https?:\/\/(?!www\.w3\.org\/2000\/svg)/, 'the page is self-contained');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('the demo documents its flags with --help and exits 0', async () => {
  const run = await demo(['--help']);
  assert.equal(run.code, 0, run.stderr);
  for (const flag of ['--seed', '--calls', '--concurrency', '--storm-ms', '--html', '--quiet', '--help']) {
    assert.ok(run.stdout.includes(flag), `--help does not mention ${flag}`);
  }
});

test('the demo refuses an unknown flag with a message on stderr and exit code 2', async () => {
  const run = await demo(['--bogus']);
  assert.equal(run.code, 2);
  assert.match(run.stderr, /--bogus/);
  assert.match(run.stderr, /--help/);
  assert.equal(run.stdout, '');
});

test('the demo refuses a bad flag value with exit code 2', async () => {
  const run = await demo(['--calls', 'many']);
  assert.equal(run.code, 2);
  assert.match(run.stderr, /--calls must be a whole number/);
});
