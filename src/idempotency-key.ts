/**
 * @module
 * `idempotencyKey()`: stamps one `Idempotency-Key` on each POST / PATCH call, the
 * same on every attempt, so a server that honours the header runs the operation at
 * most once however often the request is resent (draft-ietf-httpapi-idempotency-key-header).
 *
 * The header is a structured-field string (RFC 8941 §3.3.3), so its value is quoted:
 * `Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`.
 */

import * as z from 'zod/mini';
import { type Call, HTTP_TOKEN, type Middleware, type Next } from './call.ts';
import { describeValue, functionOption, validate } from './options.ts';

/** The header's name (draft-ietf-httpapi-idempotency-key-header §2). */
export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key';
/**
 * Methods keyed by default: the non-idempotent ones a key makes safe to resend
 * (RFC 9110 §9.2.2 already makes PUT and DELETE idempotent).
 */
export const DEFAULT_KEYED_METHODS: readonly string[] = ['POST', 'PATCH'];

/** Options for {@link idempotencyKey}. */
export interface IdempotencyKeyOptions {
  /** Methods that get a key (any case). Default `['POST', 'PATCH']`. */
  methods?: readonly string[] | undefined;
  /**
   * Makes the key's content, once per call; breakwater adds the quotes (and escapes
   * `"` and `\`). Printable ASCII only (RFC 8941 §3.3.3), not empty. Default
   * `crypto.randomUUID()`, a UUID v4 as the draft recommends (built from
   * `crypto.getRandomValues()` where there is no `randomUUID`: a page on plain http).
   */
  generate?: (() => string) | undefined;
}

/**
 * A UUID v4. A page served over plain http (no secure context: an intranet host, a LAN
 * dev server) has no `crypto.randomUUID`, but has `crypto.getRandomValues`: without this
 * fallback every POST there failed with "crypto.randomUUID is not a function". Each
 * `0` / `1` becomes a random hex digit, each `8` one of `8`-`b` (the RFC 9562 variant).
 */
function uuid(): string {
  return (
    crypto.randomUUID?.() ??
    '10000000-1000-4000-8000-100000000000'.replace(/[018]/g, (c) =>
      (+c ^ ((crypto.getRandomValues(new Uint8Array(1))[0] as number) & (15 >> (+c / 4)))).toString(16),
    )
  );
}

const optionsSchema = z.optional(
  z.strictObject({
    methods: z.optional(z.array(z.string().check(z.regex(HTTP_TOKEN, 'must be a method name')))),
    generate: z.optional(functionOption<() => string>()),
  }),
);

/**
 * `content` as a structured-field string: `"` + content + `"`, with `"` and `\`
 * escaped. Anything outside printable ASCII (%x20-7E) cannot be in an sf-string at
 * all, so it is refused rather than silently changed: a key must be byte-identical
 * on every attempt, and a server must see exactly what was generated.
 */
export function sfString(content: string): string {
  // Both patterns are single character classes: linear time on any input.
  const outside = content.search(/[^ -~]/);
  if (outside !== -1) {
    // describeValue quotes the key and cuts a long one short.
    throw new TypeError(
      `idempotency key ${describeValue(content)}: character ${outside} is not printable ASCII (RFC 8941)`,
    );
  }
  // '"' and '\' are the two characters an sf-string escapes.
  return `"${content.replace(/["\\]/g, '\\$&')}"`;
}

/**
 * Stamps one `Idempotency-Key` (a quoted UUID v4) on every POST and PATCH call, the
 * same on every attempt of that call, wherever it sits in the chain: the header is
 * set once on the call and persists across attempts. A key the caller set (any
 * casing, any headers form) is kept, never replaced; a blank one keys nothing, and
 * gets a generated key instead.
 *
 * **Opt in only for servers that honour the header.** A keyed request counts as
 * idempotent (`call.isIdempotent` becomes true), so `retry()` will resend a POST
 * after a 5xx or a connection reset; a server that ignores the key may then run the
 * operation twice (two charges, two messages sent).
 *
 * @example
 * ```ts
 * import { createFetch, idempotencyKey, retry } from 'breakwater';
 *
 * // payments.example.com deduplicates requests by their Idempotency-Key.
 * const fetch = createFetch({ use: [retry(), idempotencyKey()] });
 * await fetch('https://payments.example.com/v1/charges', { method: 'POST', body: '{"amount":100}' });
 * // Idempotency-Key: "3b241101-e2bb-4255-8caf-4136c566a962" on every attempt
 * ```
 */
export function idempotencyKey(options?: IdempotencyKeyOptions): Middleware {
  const valid = validate(optionsSchema, options, 'idempotencyKey()');
  const methods: ReadonlySet<string> = new Set(
    (valid?.methods ?? DEFAULT_KEYED_METHODS).map((method) => method.toUpperCase()),
  );
  const generate = valid?.generate ?? uuid;

  return async function idempotencyKey(call: Call, next: Next): Promise<Response> {
    // Absent on the first attempt only: the header persists on the call, so every
    // later attempt (a retry outside this middleware) carries the same key. A blank one
    // the caller set counts as absent: Headers strips it to an empty key, on which no
    // server can deduplicate, so it would be resent as a POST with no key at all.
    if (methods.has(call.method) && !call.header(IDEMPOTENCY_KEY_HEADER)?.trim()) {
      const content: unknown = generate();
      if (typeof content !== 'string' || content === '') {
        throw new TypeError(
          `idempotencyKey(): generate() returned ${describeValue(content)}, not a non-empty string`,
        );
      }
      call.setHeader(IDEMPOTENCY_KEY_HEADER, sfString(content));
    }
    return next(call);
  };
}
