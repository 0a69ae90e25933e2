/**
 * @module
 * Option validation shared by every factory: a bad option is a `TypeError` that
 * names every offending path and the value found there, so a user fixes all of
 * them in one go. Values that look like credentials are described by type only.
 */

import * as z from 'zod/mini';
import type { BreakwaterEvent } from './events.ts';

/** Whether a value can be called: the test every function-valued option uses. */
export const isFunction = (value: unknown): boolean => typeof value === 'function';

/** A function option, with the message a wrong value gets. */
export function functionOption<F>(message = 'must be a function'): z.ZodMiniType<F> {
  return z.custom<F>(isFunction, message);
}

/** The `key` option shared by `createFetch()`, `policy.fetch()` and the Hono adapters: a name or `(url) => name`. */
export const keyOptionSchema: z.ZodMiniOptional<z.ZodMiniType<string | ((url: URL) => string)>> = z.optional(
  z.union([
    z.string().check(z.minLength(1, 'must be a non-empty string')),
    functionOption<(url: URL) => string>(),
  ]),
);

/** The `onEvent` option: a listener for breakwater's typed events. */
export const onEventSchema: z.ZodMiniOptional<z.ZodMiniType<(event: BreakwaterEvent) => void>> = z.optional(
  functionOption<(event: BreakwaterEvent) => void>(),
);

/** Option names whose values must never be printed. */
const SECRET_NAME = /secret|password|passwd|authorization|cookie|credential|api[-_]?key|token$/i;

/** The longest value shown in an error before it is cut. */
const MAX_SHOWN_CHARS = 60;

/** A short, safe description of a value for an error message. */
export function describeValue(value: unknown, path: readonly PropertyKey[] = []): string {
  const name = String(path.at(-1) ?? '');
  if (SECRET_NAME.test(name) && value !== undefined) return `a ${typeof value} (not shown)`;
  if (typeof value === 'function') return `a function${value.name ? ` (${value.name})` : ''}`;
  if (typeof value === 'string') {
    const shown = value.length > MAX_SHOWN_CHARS ? `${value.slice(0, MAX_SHOWN_CHARS)}…` : value;
    return JSON.stringify(shown);
  }
  if (typeof value === 'bigint') return `${value}n`;
  if (value === null || typeof value !== 'object') return String(value);
  if (Array.isArray(value)) return `an array of ${value.length}`;
  return 'an object';
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let value = root;
  for (const step of path) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<PropertyKey, unknown>)[step];
  }
  return value;
}

function formatPath(where: string, path: readonly PropertyKey[]): string {
  return path.length === 0 ? where : `${where}.${path.map(String).join('.')}`;
}

/**
 * Parses `value` with `schema`, or throws one `TypeError` listing every problem as
 * `where.path: message (got VALUE)`. `where` names the factory, e.g. `createFetch()`.
 */
export function validate<T>(schema: z.ZodMiniType<T>, value: unknown, where: string): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const problems = flatten(result.error.issues, []).map((issue) => {
    if (issue.code === 'unrecognized_keys') {
      const keys = issue.keys ?? [];
      return `${formatPath(where, issue.path)}: unknown option${keys.length > 1 ? 's' : ''} ${keys.map((k) => JSON.stringify(k)).join(', ')}`;
    }
    const got = describeValue(valueAt(value, issue.path), issue.path);
    return `${formatPath(where, issue.path)}: ${explain(issue)} (got ${got})`;
  });
  throw new TypeError(`invalid options for ${where}:\n  - ${problems.join('\n  - ')}`);
}

/** The parts of a zod issue this file reads. */
interface Issue {
  code: string;
  path: PropertyKey[];
  message: string;
  errors?: Issue[][];
  keys?: string[];
  expected?: string;
  values?: unknown[];
  origin?: string;
  minimum?: number | bigint;
  maximum?: number | bigint;
  inclusive?: boolean;
  format?: string;
}

/** zod/mini ships no locale: its default message is "Invalid input". Say what was expected. */
const DEFAULT_MESSAGE = 'Invalid input';

function article(noun: string): string {
  return /^[aeiou]/.test(noun) ? `an ${noun}` : `a ${noun}`;
}

function explain(issue: Issue): string {
  if (issue.message !== DEFAULT_MESSAGE) return issue.message;
  switch (issue.code) {
    case 'invalid_type':
      return `must be ${article(issue.expected ?? 'value of another type')}`;
    case 'invalid_value':
      return `must be one of ${(issue.values ?? []).map((v) => JSON.stringify(v)).join(', ')}`;
    case 'too_small':
      return `must be ${issue.inclusive === false ? 'more than' : 'at least'} ${String(issue.minimum)}${issue.origin === 'string' ? ' characters long' : ''}`;
    case 'too_big':
      return `must be ${issue.inclusive === false ? 'less than' : 'at most'} ${String(issue.maximum)}${issue.origin === 'string' ? ' characters long' : ''}`;
    case 'invalid_format':
      return `must be a valid ${issue.format ?? 'value'}`;
    case 'not_multiple_of':
      return 'must be a whole number';
    default:
      return 'is not valid here';
  }
}

function depth(issues: Issue[]): number {
  return Math.max(0, ...issues.map((issue) => issue.path.length));
}

/**
 * Replaces each failed union (`false | { ... }`, say) by the issues of the branch
 * the value was most likely meant for (the one that got deepest into it), so a typo
 * inside an options object is reported where it is, not as "Invalid input" on the
 * whole object.
 */
function flatten(issues: readonly Issue[], prefix: readonly PropertyKey[]): Issue[] {
  return issues.flatMap((issue) => {
    const path = [...prefix, ...issue.path];
    if (issue.code !== 'invalid_union' || !issue.errors || issue.errors.length === 0)
      return [{ ...issue, path }];
    const typeOnly = (branch: Issue[]): boolean =>
      branch.every((i) => i.path.length === 0 && (i.code === 'invalid_type' || i.code === 'invalid_value'));
    if (issue.errors.every(typeOnly)) {
      // The value fits no branch at all: name every alternative.
      const alternatives = issue.errors.flat().map((i) => explain(i).replace(/^must be (one of )?/, ''));
      return [{ ...issue, code: 'custom', path, message: `must be ${alternatives.join(' or ')}` }];
    }
    let best = issue.errors[0] as Issue[];
    for (const branch of issue.errors) {
      if (
        (typeOnly(best) && !typeOnly(branch)) ||
        (typeOnly(branch) === typeOnly(best) && depth(branch) > depth(best))
      ) {
        best = branch;
      }
    }
    return flatten(best, path);
  });
}
