/**
 * @module
 * `npm run demo`: why breakwater exists, in under 30 seconds, with nothing outside
 * this machine. Act 1: a local "stormy" upstream (storm.ts) sheds load with 503 +
 * Retry-After, rate-limits with 429 + retry-after-ms, resets connections before and
 * after running a handler, answers slowly, and then recovers. The same workload runs
 * through plain fetch, a naive retry loop and breakwater, one after the other, and the
 * server counts what each did to it. Acts 2 and 3 (acts.ts) run the MCP agent and
 * model-provider examples and print their tables; `--storm-only` skips them.
 *
 * Run with Node through tsx (`npm run demo`, or `node --import tsx examples/demo/main.ts`):
 * the upstream resets sockets through node:http.
 */

import { unlinkSync } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import process from 'node:process';
import { EXIT_USAGE, UsageError } from '../cli.ts';
import { CLIENT_ABOUT, CLIENT_NAMES, type DemoClient, makeClient } from './clients.ts';
import {
  failedAttempts,
  failuresOf,
  formatClients,
  formatFailures,
  formatNotes,
  formatScript,
  formatTable,
  percentile,
  type RunSummary,
  reportHtml,
} from './report.ts';
import { HELP, parseSettings, type Settings } from './settings.ts';
import { duplicateExecutions, type Ledger, startStorm, stormScript } from './storm.ts';
import { type CallResult, type Progress, planWorkload, runWorkload } from './workload.ts';

/** The live progress line is redrawn at most this often. */
const PROGRESS_EVERY_MS = 100;
/** Act 1's heading, printed when the other acts follow. */
const STORM_TITLE = 'Act 1: an order API in a storm';
/** Signals that end a run early (Ctrl-C, `kill`): the `--html` file is seen to first. */
const INTERRUPTS = ['SIGINT', 'SIGTERM'] as const;

/**
 * Progress on stderr: a line redrawn in place on a terminal; elsewhere (CI logs, pipes)
 * one line per client when it is done.
 */
function progressLine(name: string, quiet: boolean) {
  const live = !quiet && process.stderr.isTTY === true;
  const started = Date.now();
  let drawnAt = 0;
  const text = (p: Progress): string =>
    `${name.padEnd(12)} ${String(p.done).padStart(String(p.total).length)}/${p.total} calls  ok ${p.ok}  failed ${p.failed}  ${((Date.now() - started) / 1000).toFixed(1)} s`;
  return {
    update(p: Progress): void {
      if (!live) return;
      const t = Date.now();
      if (t - drawnAt < PROGRESS_EVERY_MS && p.done < p.total) return;
      drawnAt = t;
      process.stderr.write(`\r${text(p)}\u001b[K`);
    },
    done(p: Progress): void {
      if (quiet) return;
      process.stderr.write(live ? `\r${text(p)}\u001b[K\n` : `${text(p)}\n`);
    },
  };
}

/** An act's progress on stderr: `running` while it runs on a terminal, then its time. */
function actProgress(name: string, quiet: boolean) {
  const live = !quiet && process.stderr.isTTY === true;
  const started = Date.now();
  if (live) process.stderr.write(`${name.padEnd(12)} running`);
  return {
    done(): void {
      if (quiet) return;
      const text = `${name.padEnd(12)} done in ${((Date.now() - started) / 1000).toFixed(1)} s`;
      process.stderr.write(live ? `\r${text}\u001b[K\n` : `${text}\n`);
    },
  };
}

/** One run's figures: the server's counts, and the latencies the caller measured. */
function summarize(
  client: string,
  { breakerOpens, retryLog }: DemoClient,
  results: readonly CallResult[],
  ledger: Ledger,
  durationMs: number,
): RunSummary {
  const latencies = results.map((r) => r.latencyMs);
  const log = retryLog();
  return {
    client,
    calls: results.length,
    succeeded: results.filter((r) => r.ok).length,
    requests: ledger.arrivals.length,
    inWindow: ledger.inWindow,
    answers: { ...ledger.answers },
    duplicates: duplicateExecutions(ledger),
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
    breakerOpens: breakerOpens(),
    durationMs,
    arrivals: ledger.arrivals,
    failures: failuresOf(results),
    ...(log && {
      gaveUp: {
        why: log.gaveUp,
        attempts: failedAttempts(results, (index) => log.attempts.get(String(index))),
      },
    }),
  };
}

/** The `--html` file from before the run until its report is in it. */
interface ReportFile {
  /** Replaces the file's content with `html` (a pipe or a terminal takes it as it comes). */
  write(html: string): Promise<void>;
  /** Closes the file; removes it if this run created it and wrote no report. */
  close(): Promise<void>;
}

/** Opens `path` to append, creating it if need be; says whether it did. */
async function openOrCreate(path: string): Promise<{ handle: FileHandle; created: boolean }> {
  try {
    return { handle: await open(path, 'wx'), created: true };
  } catch (error) {
    if ((error as { code?: string }).code !== 'EEXIST') throw error;
    return { handle: await open(path, 'a'), created: false };
  }
}

/**
 * The `--html` file, opened for writing before anything runs: a path that cannot be
 * written (a missing directory, no permission, a directory) is a usage error now,
 * not a crash after a 20 s run. Opened to append, so an earlier report stays whole
 * until this run has one to replace it with. A run that ends before then, by Ctrl-C,
 * SIGTERM or a crash, leaves no empty file behind (the one this run created is
 * removed) and an earlier report as it was; a signal that comes while the report is
 * being written waits for the write, so the file never holds half a page.
 */
async function openReport(path: string): Promise<ReportFile> {
  let handle: FileHandle;
  let created: boolean;
  try {
    ({ handle, created } = await openOrCreate(path));
  } catch (error) {
    const { code, message } = error as Error & { code?: string };
    throw new UsageError(`--html: cannot write ${path} (${code ?? message})`);
  }
  let state: 'empty' | 'writing' | 'written' = 'empty';
  let deferred: string | undefined;
  const removeIfEmpty = (): void => {
    if (!created || state !== 'empty') return;
    try {
      unlinkSync(path);
    } catch {
      // Already gone (someone removed it meanwhile): nothing to tidy.
    }
  };
  const unguard = (): void => {
    for (const signal of INTERRUPTS) process.off(signal, onSignal);
  };
  // Synchronous: the process ends right after, by the same signal, with no listener left.
  function onSignal(signal: string): void {
    if (state === 'writing') {
      deferred = signal;
      return;
    }
    removeIfEmpty();
    unguard();
    process.kill(process.pid, signal);
  }
  for (const signal of INTERRUPTS) process.on(signal, onSignal);
  return {
    async write(html) {
      // A regular file is replaced whole; a pipe or a terminal (`--html /dev/stdout`)
      // cannot be truncated (EINVAL) and takes the page as it comes, so a signal need
      // not wait for it (its reader may never drain it).
      const regular = (await handle.stat()).isFile();
      state = regular ? 'writing' : 'written';
      try {
        if (regular) await handle.truncate(0);
        await handle.writeFile(html);
      } finally {
        state = 'written';
        unguard();
        if (deferred !== undefined) process.kill(process.pid, deferred);
      }
    },
    async close() {
      unguard();
      await handle.close();
      removeIfEmpty();
    },
  };
}

/** Act 1: the workload through each client in turn, against a fresh storm each. */
async function runStorm(settings: Settings, report: ReportFile | undefined): Promise<RunSummary[]> {
  const script = stormScript(settings.seed, settings.stormMs);
  const plan = planWorkload(settings.seed, settings.calls, settings.stormMs);
  const orders = plan.filter((call) => call.method === 'POST').length;
  const heading = settings.stormOnly ? '' : `${STORM_TITLE}\n`;
  process.stdout.write(
    `${heading}breakwater demo: ${settings.calls} calls (${orders} of them orders), ${settings.concurrency} at a time, ` +
      `through each client in turn,\nagainst a local upstream with this fault script (seed ${settings.seed}):\n` +
      `${formatScript(script)}\n\n${formatClients(CLIENT_NAMES.map((name) => [name, CLIENT_ABOUT[name]]))}\n\n`,
  );
  const runs: RunSummary[] = [];
  for (const name of CLIENT_NAMES) {
    const client = makeClient(name, settings.concurrency);
    const storm = await startStorm(script);
    const progress = progressLine(name, settings.quiet);
    let last: Progress = { done: 0, ok: 0, failed: 0, total: plan.length };
    try {
      const startedAt = storm.begin();
      const results = await runWorkload(
        client.fetch,
        storm.origin,
        plan,
        settings.concurrency,
        startedAt,
        (p) => {
          last = p;
          progress.update(p);
        },
      );
      const durationMs = Date.now() - startedAt;
      progress.done(last);
      runs.push(summarize(name, client, results, storm.ledger, durationMs));
    } finally {
      await storm.close();
    }
  }
  process.stdout.write(
    `${settings.quiet ? '' : '\n'}${formatTable(runs)}\n\n${formatFailures(runs)}\n\n${formatNotes(settings.concurrency)}\n`,
  );
  if (report !== undefined) {
    await report.write(reportHtml(runs, script, settings));
    process.stdout.write(`\nHTML report: ${settings.html}\n`);
  }
  return runs;
}

/**
 * What act 1 must show, or the demo is wrong (issue 6): breakwater ran no order twice
 * and sent nothing inside a Retry-After window the server had given.
 */
function stormProblems(runs: readonly RunSummary[]): string[] {
  const shielded = runs.find((run) => run.client === 'breakwater');
  if (shielded === undefined) return [];
  const found = [
    shielded.duplicates > 0 && `breakwater ran ${shielded.duplicates} order(s) twice`,
    shielded.inWindow > 0 && `breakwater sent ${shielded.inWindow} request(s) inside a Retry-After window`,
  ].filter((problem): problem is string => problem !== false);
  return found.map((problem) => `FAILED (${STORM_TITLE}): ${problem}`);
}

/** Acts 2 and 3, one after the other; what broke in them, each line naming its act. */
async function runActs(quiet: boolean): Promise<string[]> {
  // Loaded only when the acts run: --help, bad flags and --storm-only skip the MCP and openai SDKs.
  const { ACTS } = await import('./acts.ts');
  const problems: string[] = [];
  for (const act of ACTS) {
    process.stdout.write(`\n${act.title}\n${act.intro.join('\n')}\n`);
    const progress = actProgress(act.name, quiet);
    const result = await act.run();
    progress.done();
    process.stdout.write(`${quiet ? '' : '\n'}${result.lines.join('\n')}\n`);
    problems.push(...result.problems.map((problem) => `FAILED (${act.title}): ${problem}`));
  }
  return problems;
}

async function main(): Promise<void> {
  let settings: Settings | 'help';
  let report: ReportFile | undefined;
  try {
    settings = parseSettings(process.argv.slice(2), process.env);
    if (settings !== 'help' && settings.html !== undefined) report = await openReport(settings.html);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`breakwater demo: ${error.message}\nRun with --help for the options.\n`);
    process.exitCode = EXIT_USAGE;
    return;
  }
  if (settings === 'help') {
    process.stdout.write(HELP);
    return;
  }
  let problems: string[];
  try {
    problems = stormProblems(await runStorm(settings, report));
  } finally {
    await report?.close();
  }
  if (!settings.stormOnly) problems.push(...(await runActs(settings.quiet)));
  for (const problem of problems) process.stderr.write(`breakwater demo: ${problem}\n`);
  if (problems.length > 0) process.exitCode = 1;
}

// The reader of stdout went away (`npm run demo | head`, `less` quit early): the run
// goes on without printing, so its `--html` report and exit code still count, rather
// than dying on an unhandled EPIPE with a stack trace. A destroyed stream drops later
// writes without another error.
process.stdout.on('error', (error: Error & { code?: string }) => {
  if (error.code !== 'EPIPE') throw error;
});

main().catch((error: unknown) => {
  process.stderr.write(
    `breakwater demo failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exitCode = 1;
});
