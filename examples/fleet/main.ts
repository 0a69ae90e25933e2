/**
 * @module
 * The fleet example's entry: runs {@link runFleets} (a fleet of workers pacing alone,
 * then the same fleet sharing one store) and prints what the server counted.
 *
 * Run with `node --import tsx examples/fleet/main.ts [--workers N] [--calls N]
 * [--side-by-side]`. Exit code 0 when the shared fleet sent far fewer requests inside
 * an announced Retry-After window than the fleet alone, earned fewer 429s and got as
 * many calls through; 1 otherwise, naming what broke on stderr; 2 for a bad command line.
 */

import process from 'node:process';
import { EXIT_USAGE, integer, parseFlags, UsageError } from '../cli.ts';
import { DEFAULT_CALLS, DEFAULT_WORKERS, formatScript, formatTable, runFleets } from './fleet.ts';

/** Bounds that keep a run within a minute: the quota lets 6 calls through a second. */
const MAX_WORKERS = 32;
const MAX_CALLS = 10;

const HELP = `breakwater fleet example: shared pacing (definePolicy(config, { store })).

A fleet of workers, each on its own policy, calls one local server whose quota is
shared by everyone (rateLimit() from breakwater/hono, 429 + Retry-After). Twice: each
worker pacing alone, then all sharing one store. The server counts what each cost it.

usage: node --import tsx examples/fleet/main.ts [options]

options:
  --workers N     workers in the fleet, each its own definePolicy() (default ${DEFAULT_WORKERS}, 1 to ${MAX_WORKERS})
  --calls N       calls per worker, one after another (default ${DEFAULT_CALLS}, 1 to ${MAX_CALLS})
  --side-by-side  run the two fleets at once, each against its own server: half the time
  -h, --help      show this help

Everything runs on 127.0.0.1; nothing leaves the machine. Exit codes: 0 done,
1 sharing did not hold (said on stderr), 2 bad options.
`;

/** The flags, for `parseArgs` (strict: an unknown flag or a missing value is a usage error). */
const FLAGS = {
  workers: { type: 'string' },
  calls: { type: 'string' },
  'side-by-side': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** The settings from the command line; `help` when `--help` was asked for. */
function parseSettings(args: string[]): { workers: number; calls: number; sideBySide: boolean } | 'help' {
  const values = parseFlags(args, FLAGS);
  if (values.help) return 'help';
  return {
    workers: integer('workers', values.workers, DEFAULT_WORKERS, 1, MAX_WORKERS),
    calls: integer('calls', values.calls, DEFAULT_CALLS, 1, MAX_CALLS),
    sideBySide: values['side-by-side'] ?? false,
  };
}

let settings: ReturnType<typeof parseSettings>;
try {
  settings = parseSettings(process.argv.slice(2));
} catch (error) {
  if (!(error instanceof UsageError)) throw error;
  process.stderr.write(`${error.message}\nrun with --help for the options\n`);
  process.exit(EXIT_USAGE);
}
if (settings === 'help') {
  process.stdout.write(HELP);
} else {
  const comparison = await runFleets(settings.workers, settings.calls, settings.sideBySide);
  console.log([...formatScript(comparison), '', ...formatTable(comparison)].join('\n'));
  if (comparison.problems.length > 0) {
    console.error(`the shared store did not hold: ${comparison.problems.join('; ')}`);
    process.exitCode = 1;
  }
}
