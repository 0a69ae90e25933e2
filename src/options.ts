/**
 * @module
 * Option validation shared by every factory: a bad option is a `TypeError` that
 * names every offending path and the value found there, so a user fixes all of
 * them in one go. Values that look like credentials (under a secret-looking name, or
 * shaped like a token) are described by type only; URLs are redacted.
 */

import * as z from 'zod/mini';
import type { AuthOptions } from './auth.ts';
import type { FetchLike } from './call.ts';
import type { BreakwaterEvent } from './events.ts';
import { MAX_READ_CHARS, MAX_SHOWN_CHARS } from './limits.ts';
import type { Policy } from './policy.ts';
import { redactText } from './redact.ts';

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

// The schemas below are marked pure so that a bundle which does not use them (the
// core alone: `createFetch` never takes a policy) drops them with zod's calls.

/**
 * A policy from `definePolicy()`, as the adapters take it: anything with a `fetch()` method
 * and the `resolved` config they read. A `fetch()` alone passed: options given in the
 * policy's place (`openaiOptions({ fetch })`) then failed on `policy.resolved`, as
 * "Cannot read properties of undefined".
 */
export const policySchema: z.ZodMiniType<Policy> = /* @__PURE__ */ z.custom<Policy>(
  (value) =>
    isFunction((value as Partial<Policy> | null)?.fetch) &&
    typeof (value as Partial<Policy>).resolved === 'object',
  'must be a policy from definePolicy()',
);

/** The `auth` option of the adapters: only an object here, since `auth()` checks it in full. */
export const authOptionSchema: z.ZodMiniOptional<z.ZodMiniType<AuthOptions>> = /* @__PURE__ */ z.optional(
  /* @__PURE__ */ z.custom<AuthOptions>(
    (value) => typeof value === 'object' && value !== null,
    'must be auth() options',
  ),
);

/**
 * The client options an adapter passes on to `policy.fetch()` (`PolicyClientOptions`),
 * as a zod shape to spread into the adapter's `z.strictObject({ ...clientOptionsShape, ... })`.
 */
export const clientOptionsShape: {
  fetch: z.ZodMiniOptional<z.ZodMiniType<FetchLike>>;
  auth: typeof authOptionSchema;
  onEvent: typeof onEventSchema;
  key: typeof keyOptionSchema;
} = {
  fetch: /* @__PURE__ */ z.optional(/* @__PURE__ */ functionOption<FetchLike>()),
  auth: authOptionSchema,
  onEvent: onEventSchema,
  key: keyOptionSchema,
};

/**
 * Option names whose values must never be printed: any name containing one of
 * these (`clientSecret`, `password`, `proxyAuthorization`, `cookies`,
 * `credentials`, `apiKey`), or ending in `token`.
 */
const SECRET_NAME = /secret|passw|auth|cookie|cred|api.?key|token$/i;

/**
 * A run of 20 or more characters of a token's alphabet (`sk-proj-…`, `ghp_…`, a JWT, a
 * refresh token, base64 with its `+/=`, a percent-encoded one: without `/` and `%`,
 * AWS's example secret key and a SAS signature fall apart into runs under 20). A token
 * passed in the wrong place (`auth(token)`, `policy.fetch(token)`, `refresh:
 * refreshToken`) sits under a name that does not say so; the settings a user gets wrong
 * are short words and numbers (`"three"`, `"+2000%"`), which stay shown.
 */
const TOKEN_RUN = /[\w.~+/=%-]{20,}/g;

/**
 * What random characters have and words do not: two capitals in a row, or a digit or
 * symbol within 4 characters between separators (`-`, `.`, `_`, `~`, `/`; `v1`, `-3-`
 * and `a2a` are too short to count). A {@link TOKEN_RUN} makes a text hidden only if it
 * also has one of these: a misspelt option name (`maxRetryAfterMilliseconds`), a
 * setting (`safe-for-idempotent-requests`) or a host name stays shown, since an
 * "unknown option" the user cannot read cannot be found. Linear: bounded, no nesting.
 */
const RANDOM_CHARS = /[A-Z]{2}|(?=[\dA-Za-z+=%]{4})[\dA-Za-z+=%]{0,3}[\d+=%]/;

/**
 * An Authorization value (`Bearer …`, `Basic …`, given as `auth('Bearer …')` for
 * `auth({ token })`): its credential may be too short for a {@link TOKEN_RUN} (a dev
 * key, Basic's base64 `user:pass`), and the scheme says what it is.
 */
const AUTH_SCHEME = /\b(?:bearer|basic) +\S/i;

/** The marker for "no message of the schema's own": explain() then says what was expected. */
const DEFAULT_MESSAGE = 'Invalid input';

/** How many problems (and unknown option names) an error lists before `... and N more`. */
const MAX_LISTED = 20;

/** `text`, or its first {@link MAX_SHOWN_CHARS} characters and `…`. */
function cut(text: string): string {
  return text.length > MAX_SHOWN_CHARS ? `${text.slice(0, MAX_SHOWN_CHARS)}…` : text;
}

/**
 * The lines `show` makes of the first {@link MAX_LISTED} items (one or more each), at
 * most that many of them, then `... and N more` for the rest: 100,000 bad entries made
 * a 6.7 MB message.
 */
function listed<T>(items: readonly T[], show: (first: readonly T[]) => string[]): string[] {
  const shown = show(items.slice(0, MAX_LISTED));
  const more = shown.length - MAX_LISTED + Math.max(items.length - MAX_LISTED, 0);
  return more > 0 ? [...shown.slice(0, MAX_LISTED), `... and ${more} more`] : shown;
}

function article(noun: string): string {
  return /^[aeiou]/.test(noun) ? `an ${noun}` : `a ${noun}`;
}

/** A short, safe description of a value for an error message. */
export function describeValue(value: unknown, path: readonly PropertyKey[] = []): string {
  const type = typeof value;
  // A URL (a base URL given for the base fetch) loses its userinfo and query values.
  // Only the start is read: redacting is linear, but 10 MB of URLs took seconds.
  const text = type === 'string' ? redactText((value as string).slice(0, MAX_READ_CHARS)) : '';
  if (
    (value !== undefined && SECRET_NAME.test(String(path.at(-1)))) ||
    AUTH_SCHEME.test(text) ||
    text.match(TOKEN_RUN)?.some((run) => RANDOM_CHARS.test(run))
  )
    return `${article(type)} (not shown)`;
  if (type === 'string') return JSON.stringify(cut(text));
  // Primitives (null included) print as themselves, cut as strings are (a bigint of
  // 3,000 digits printed whole), a bigint with its `n` (`5n` is not the number 5);
  // objects by kind only.
  if (Object(value) !== value) return `${cut(String(value))}${type === 'bigint' ? 'n' : ''}`;
  return Array.isArray(value) ? `an array of ${value.length}` : article(type);
}

/**
 * The parts of a zod issue this file reads. Which fields are present depends on the
 * code, so the formatter mostly tells issues apart by field: `errors`
 * (invalid_union), `keys` (unrecognized_keys), `expected` (invalid_type), `values`
 * (invalid_value).
 */
interface Issue {
  code: string;
  path: PropertyKey[];
  message: string;
  errors?: Issue[][];
  keys?: string[];
  expected?: string;
  values?: unknown[];
  origin?: string;
  minimum?: unknown;
  maximum?: unknown;
  inclusive?: boolean;
}

function depth(issues: Issue[]): number {
  return Math.max(...issues.map((issue) => issue.path.length));
}

/**
 * `value` behind a proxy that calls `fail(path)` when reading `value` at `path` throws
 * (a getter, a proxy's trap), so a second parse can say where the first one broke.
 * Its target is a blank object or array, not `value`: the proxy invariants are checked
 * against the target, and a frozen config's nested objects come back wrapped. Only the
 * reads zod makes by key, and its listing of keys (for unknown options), are followed.
 */
function guard(
  value: unknown,
  path: readonly PropertyKey[],
  fail: (path: readonly PropertyKey[]) => void,
): unknown {
  if (typeof value !== 'object' || value === null) return value;
  const handler: Record<string, (target: object, key?: PropertyKey) => unknown> = {};
  for (const trap of ['get', 'has', 'ownKeys'] as const)
    handler[trap] = (_, key) => {
      const at = key === undefined ? path : [...path, key];
      try {
        const result = (Reflect[trap] as (target: object, key?: PropertyKey) => unknown)(value, key);
        return trap === 'get' ? guard(result, at, fail) : result;
      } catch (error) {
        fail(at);
        throw error;
      }
    };
  return new Proxy(Array.isArray(value) ? [] : {}, handler as ProxyHandler<object>);
}

/**
 * Parses `value` with `schema`, or throws one `TypeError` listing every problem as
 * `where.path: message (got VALUE)`. `where` names the factory, e.g. `createFetch()`.
 * An input that throws when read (a getter, a proxy) is a `TypeError` too, naming the
 * path with the input's error as its `cause`: that error is not quoted, since it may
 * quote a secret.
 */
export function validate<T>(schema: z.ZodMiniType<T>, value: unknown, where: string): T {
  // The per-parse map outranks a global zod config (full `zod` installs English
  // messages process-wide when an app loads it) but not a schema's own message, so
  // every message without one reaches explain() as the marker.
  const options = { error: () => DEFAULT_MESSAGE };
  /**
   * One line per issue. zod reports a failed union only when every branch failed on
   * type; the branch that got deepest into the value (a typo inside an options
   * object, say) is the one the user meant, so its issues are reported where they
   * are. A value that fits no branch even at the top is told every alternative
   * instead (see explain).
   */
  const problems = (issues: readonly Issue[], prefix: readonly PropertyKey[]): string[] =>
    issues.flatMap((issue) => {
      const path = [...prefix, ...issue.path];
      const deepest = (issue.errors ?? []).reduce(
        (best, branch) => (depth(branch) > depth(best) ? branch : best),
        [],
      );
      if (depth(deepest) > 0) return problems(deepest, path);
      // The value at the path, read from the input: an issue's own `input` is the
      // parent object for a refinement that names a field.
      let got = value;
      for (const step of path) got = (got as Record<PropertyKey, unknown> | undefined)?.[step];
      return `${[where, ...path].join('.')}: ${
        issue.keys
          ? `unknown option ${listed(issue.keys, (keys) => keys.map((key) => describeValue(key))).join(', ')}`
          : `${explain(issue)} (got ${describeValue(got, path)})`
      }`;
    });
  let lines: string[];
  let thrown: ErrorOptions | undefined;
  // The message is built inside the try too: it reads the input again.
  try {
    const result = schema.safeParse(value, options);
    if (result.success) return result.data;
    lines = listed(result.error.issues, (first) => problems(first, []));
  } catch (cause) {
    // Parsed again through a guard to find the path: the first read that throws. None
    // throws if the input's reads throw only once, or if zod itself threw (a million
    // bad entries overflow its stack): the path is then the whole input.
    let at: readonly PropertyKey[] | undefined;
    try {
      schema.safeParse(
        guard(value, [], (path) => {
          at ??= path;
        }),
        options,
      );
    } catch {}
    lines = [`${[where, ...(at ?? [])].map(String).join('.')}: could not be read (see cause)`];
    thrown = { cause };
  }
  throw new TypeError(`invalid options for ${where}:\n  - ${lines.join('\n  - ')}`, thrown);
}

/** too_small / too_big wording: [bound excluded, bound included]. */
const BOUND_WORDS: Record<string, [string, string]> = {
  too_small: ['more than', 'at least'],
  too_big: ['less than', 'at most'],
};

function explain(issue: Issue): string {
  const { values } = issue;
  const bound = BOUND_WORDS[issue.code];
  if (issue.message !== DEFAULT_MESSAGE) return issue.message;
  return `must be ${
    issue.errors?.length
      ? issue.errors
          .flat()
          .map((alternative) => explain(alternative).replace(/^must be /, ''))
          .join(' or ')
      : issue.expected
        ? article(issue.expected === 'int' ? 'integer' : issue.expected)
        : values
          ? values.map((v) => describeValue(v)).join(' or ')
          : bound
            ? `${bound[Number(issue.inclusive)]} ${issue.minimum ?? issue.maximum}${issue.origin === 'string' ? ' characters long' : ''}`
            : 'valid'
  }`;
}
