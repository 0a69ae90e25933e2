/**
 * @module
 * Option validation shared by every factory: a bad option is a `TypeError` that
 * names every offending path and the value found there, so a user fixes all of
 * them in one go. Values that look like credentials are described by type only.
 */

import type * as z from 'zod/mini';

/** Option names whose values must never be printed. */
const SECRET_NAME = /token|secret|password|authorization|api[-_]?key|cookie/i;

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
  const problems = result.error.issues.map((issue) => {
    if (issue.code === 'unrecognized_keys') {
      return `${formatPath(where, issue.path)}: unknown option${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => JSON.stringify(k)).join(', ')}`;
    }
    const got = describeValue(valueAt(value, issue.path), issue.path);
    return `${formatPath(where, issue.path)}: ${issue.message} (got ${got})`;
  });
  throw new TypeError(`invalid options for ${where}:\n  - ${problems.join('\n  - ')}`);
}
