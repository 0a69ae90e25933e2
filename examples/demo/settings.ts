/**
 * @module
 * The demo's command line: its flags, their defaults and bounds, and `--help`'s text.
 * Apart from main.ts so that the suite checks every malformed command line without
 * starting a process for each.
 */

import { integer, parseFlags, UsageError } from '../cli.ts';

const DEFAULT_SEED = 1;
const DEFAULT_CALLS = 600;
const DEFAULT_CONCURRENCY = 32;
/** The scripted storm's length: three runs of it (plus the clients' waits) fit in ~20 s. */
const DEFAULT_STORM_MS = 4500;

export const HELP: string = `breakwater demo, in three acts, each comparing breakwater with what people ship:
  1. the same workload through plain fetch, a naive retry loop and breakwater, against
     a local order API having a (seeded, repeatable) bad day;
  2. an MCP agent's 12 turns against a flaky local MCP server: a naive 3-tries loop vs
     resilientMcpClient() (examples/mcp-agent/);
  3. 40 chat completions through the openai SDK against a rate-limiting local provider:
     as it ships vs openaiOptions(policy) (examples/providers/).

usage: npm run demo -- [options]
       node --import tsx examples/demo/main.ts [options]

options (--seed to --html are about act 1, the storm):
  --seed N          fault script and workload seed (default ${DEFAULT_SEED}); the same seed gives
                    the same phases, calls and per-call faults (figures still vary a little
                    with timing: which phase a request lands in depends on when it arrives)
  --calls N         calls per client, about 30% of them orders (default ${DEFAULT_CALLS})
  --concurrency N   calls in flight at once per client (default ${DEFAULT_CONCURRENCY})
  --storm-ms N      length of the scripted storm in ms; calls are spread over it
                    (default ${DEFAULT_STORM_MS}, at least 2000)
  --html FILE       also write a self-contained HTML report with a chart of requests
                    per 100 ms at the server for each client
  --storm-only      run act 1 only
  --quiet           no progress lines on stderr (the acts' output still goes to stdout)
  -h, --help        show this help

Everything runs on 127.0.0.1; nothing leaves the machine. Exit codes: 0 done,
1 the demo failed (or an act found breakwater not holding, said on stderr),
2 bad options.
`;

/** The demo's settings, validated. */
export interface Settings {
  seed: number;
  calls: number;
  concurrency: number;
  stormMs: number;
  html: string | undefined;
  /** Skip acts 2 and 3. */
  stormOnly: boolean;
  quiet: boolean;
}

/** The flags, for `parseArgs` (strict: an unknown flag or a missing value is a usage error). */
const FLAGS = {
  seed: { type: 'string' },
  calls: { type: 'string' },
  concurrency: { type: 'string' },
  'storm-ms': { type: 'string' },
  html: { type: 'string' },
  'storm-only': { type: 'boolean' },
  quiet: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** The npm script that runs the demo (`npm run demo`): npm names it in `npm_lifecycle_event`. */
const NPM_SCRIPT = 'demo';

/**
 * `npm run demo --seed 7 --storm-only` (no `--`) passes the demo only `7`: npm keeps the
 * flags before `--` as its own config, with a warning, and sets `npm_config_seed` and
 * `npm_config_storm_only` in the environment (some, such as `--calls` and `--quiet`,
 * vanish without a trace). Without this check the demo refused a stray `7`, or ran all
 * three acts for 20 s when asked for `--storm-only`.
 */
function npmKeptFlags(args: readonly string[], env: Readonly<Record<string, string | undefined>>): void {
  if (env.npm_lifecycle_event !== NPM_SCRIPT) return;
  const kept = Object.keys(FLAGS).filter(
    (name) => env[`npm_config_${name.replaceAll('-', '_')}`] !== undefined,
  );
  const bare = args[0] !== undefined && !args[0].startsWith('-');
  if (kept.length === 0 && !bare) return;
  const what =
    kept.length > 0
      ? `npm took ${kept.map((name) => `--${name}`).join(', ')} for itself`
      : `unexpected argument ${JSON.stringify(args[0])}`;
  throw new UsageError(
    `${what}: npm run passes on only what follows --, so put the demo's flags after it: npm run demo -- --seed 7 --storm-only`,
  );
}

/**
 * Parses the command line; `help` when `--help` was asked for. `env` (the process's
 * environment) tells whether npm kept some flags for itself.
 */
export function parseSettings(
  args: string[],
  env: Readonly<Record<string, string | undefined>> = {},
): Settings | 'help' {
  npmKeptFlags(args, env);
  const values = parseFlags(args, FLAGS);
  if (values.help) return 'help';
  if (values.html !== undefined && values.html.trim() === '')
    throw new UsageError('--html needs a file name');
  return {
    seed: integer('seed', values.seed, DEFAULT_SEED, 0, 0xffff_ffff),
    calls: integer('calls', values.calls, DEFAULT_CALLS, 1, 100_000),
    concurrency: integer('concurrency', values.concurrency, DEFAULT_CONCURRENCY, 1, 1024),
    stormMs: integer('storm-ms', values['storm-ms'], DEFAULT_STORM_MS, 2000, 120_000),
    html: values.html,
    stormOnly: values['storm-only'] ?? false,
    quiet: values.quiet ?? false,
  };
}
