/**
 * @module
 * The command-line pieces the examples with flags share: a usage error (exit code 2,
 * as most CLIs), strict flag parsing, and whole-number flags with bounds.
 */

import process from 'node:process';
import { type ParseArgsConfig, parseArgs } from 'node:util';

/** Exit code for a bad command line. */
export const EXIT_USAGE = 2;

/** A command-line mistake: printed with a hint, exit code {@link EXIT_USAGE}. */
export class UsageError extends Error {}

/** The flags' values, `parseArgs` strict (an unknown flag or a missing value is a {@link UsageError}). */
export function parseFlags<const O extends NonNullable<ParseArgsConfig['options']>>(
  args: string[],
  options: O,
): ReturnType<typeof parseArgs<{ options: O; strict: true }>>['values'] {
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: false }).values;
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

/** `--name`'s whole number from `min` to `max`, or `fallback` when not given. */
export function integer(
  name: string,
  raw: string | undefined,
  fallback: number,
  min: number,
  max: number,
): number {
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new UsageError(
      `--${name} must be a whole number from ${min} to ${max}, got ${JSON.stringify(raw)}`,
    );
  }
  return value;
}

/**
 * The command line of an example that takes no options: `--help` (`-h`) prints `help`
 * and exits 0; anything else is refused before anything runs, on stderr with a hint,
 * exit code {@link EXIT_USAGE}. Returns when the command line is empty.
 */
export function noOptions(args: string[], help: string): void {
  let values: { help?: boolean };
  try {
    values = parseFlags(args, { help: { type: 'boolean', short: 'h' } });
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`${error.message}\nrun with --help for the options\n`);
    process.exit(EXIT_USAGE);
  }
  if (values.help === true) {
    process.stdout.write(help);
    process.exit(0);
  }
}
