import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { parseRateLimit, type RateLimitPolicy, type RateLimitStatus, retryDelay } from '../src/timing.ts';

const NOW = Date.UTC(2026, 10, 29, 17, 0, 0);

test('an Integer of -0 in RateLimit reads as 0, not as negative zero', () => {
  // RFC 9651 §4.2.4: "-0" is a valid Integer, and its value is 0.
  const info = parseRateLimit({ ratelimit: '"a";r=-0;t=-0', 'ratelimit-policy': '"a";q=-0;w=-0' });
  assert.deepStrictEqual(info, {
    limits: [{ policy: 'a', remaining: 0, resetSeconds: 0 }],
    policies: [{ policy: 'a', quota: 0, windowSeconds: 0 }],
  });
});

test('a RateLimit member with an RFC 9651 Date or Display String parameter is read, that parameter ignored', () => {
  // RFC 9651 added two bare item types; an unknown parameter of either type is still
  // an unknown parameter, not a malformed member.
  for (const param of ['acme-at=@1700000000', 'note=%"caf%c3%a9"', 'note=%""', 'neg=@-1']) {
    const headers = { ratelimit: `"a";r=0;t=30;${param}`, 'ratelimit-policy': `"a";q=100;${param};w=60` };
    assert.deepStrictEqual(
      parseRateLimit(headers),
      {
        limits: [{ policy: 'a', remaining: 0, resetSeconds: 30 }],
        policies: [{ policy: 'a', quota: 100, windowSeconds: 60 }],
      },
      param,
    );
    assert.equal(retryDelay(headers, NOW), 30_000, param);
  }
  // A Date is an Integer after its `@`, a Display String ends with its quote.
  for (const param of ['at=@1.5', 'at=@', 'at=@-', 'note=%"a', 'note=%a']) {
    assert.equal(parseRateLimit({ ratelimit: `"a";r=0;t=30;${param}` }), undefined, param);
  }
  // A Date is not an Integer: `t=@30` is no reset, `r=@0` no remaining count.
  assert.deepStrictEqual(parseRateLimit({ ratelimit: '"a";r=0;t=@30, "b";r=@0;t=5' })?.limits, [
    { policy: 'a', remaining: 0 },
  ]);
});

// A differential check of the RateLimit / RateLimit-Policy reader against a slow,
// obviously-correct structured-field parser: RFC 9651 §4.2, step by step, strict.
// parseRateLimit() is lenient per member (a malformed member is skipped up to the
// next top-level comma), so each member is parsed on its own here and kept when
// the strict parser accepts it.

type Bare =
  | { type: 'integer' | 'decimal' | 'date'; value: number }
  | { type: 'string' | 'token' | 'bytes' | 'display'; value: string }
  | { type: 'boolean'; value: boolean };
type Params = Map<string, Bare>;
type Member = { item: Bare | 'inner-list'; params: Params };

class Fail extends Error {}

/** RFC 9651 §4.2 parsing over one string, character by character. */
class Parser {
  at = 0;
  constructor(readonly text: string) {}
  get rest(): string {
    return this.text.slice(this.at);
  }
  peek(): string {
    return this.text[this.at] ?? '';
  }
  take(): string {
    if (this.at >= this.text.length) throw new Fail('end');
    return this.text[this.at++] as string;
  }
  skipSp(): void {
    while (this.peek() === ' ') this.at++;
  }
  skipOws(): void {
    while (this.peek() === ' ' || this.peek() === '\t') this.at++;
  }

  /** §4.2.1 the whole field as a List. */
  list(): Member[] {
    const members: Member[] = [];
    this.skipSp();
    while (this.at < this.text.length) {
      members.push(this.peek() === '(' ? this.innerList() : this.item());
      this.skipOws();
      if (this.at >= this.text.length) return members;
      if (this.take() !== ',') throw new Fail('no comma');
      this.skipOws();
      if (this.at >= this.text.length) throw new Fail('trailing comma');
    }
    return members;
  }

  innerList(): Member {
    this.take(); // (
    for (;;) {
      this.skipSp();
      if (this.peek() === ')') {
        this.take();
        return { item: 'inner-list', params: this.params() };
      }
      this.item();
      const c = this.peek();
      if (c !== ' ' && c !== ')') throw new Fail('inner list');
    }
  }

  item(): Member {
    const item = this.bare();
    return { item, params: this.params() };
  }

  params(): Params {
    const params: Params = new Map();
    while (this.peek() === ';') {
      this.take();
      this.skipSp();
      const key = this.key();
      let value: Bare = { type: 'boolean', value: true };
      if (this.peek() === '=') {
        this.take();
        value = this.bare();
      }
      params.set(key, value);
    }
    return params;
  }

  key(): string {
    if (!/[a-z*]/.test(this.peek())) throw new Fail('key');
    let key = '';
    while (/[a-z0-9_\-.*]/.test(this.peek()) && this.peek() !== '') key += this.take();
    return key;
  }

  bare(): Bare {
    const c = this.peek();
    if (c === '-' || /[0-9]/.test(c)) return this.number();
    if (c === '"') return this.string();
    if (c === ':') return this.bytes();
    if (c === '?') {
      this.take();
      const b = this.take();
      if (b !== '0' && b !== '1') throw new Fail('boolean');
      return { type: 'boolean', value: b === '1' };
    }
    if (c === '@') {
      this.take();
      const n = this.number();
      if (n.type !== 'integer') throw new Fail('date');
      return { type: 'date', value: n.value };
    }
    if (c === '%') return this.display();
    if (/[A-Za-z*]/.test(c) && c !== '') return this.token();
    throw new Fail('bare item');
  }

  /** §4.2.4 */
  number(): Bare {
    let type: 'integer' | 'decimal' = 'integer';
    let sign = 1;
    let digits = '';
    if (this.peek() === '-') {
      this.take();
      sign = -1;
    }
    if (!/[0-9]/.test(this.peek()) || this.peek() === '') throw new Fail('number');
    while (this.at < this.text.length) {
      const c = this.peek();
      if (/[0-9]/.test(c)) digits += this.take();
      else if (type === 'integer' && c === '.') {
        if (digits.length > 12) throw new Fail('decimal integer part');
        digits += this.take();
        type = 'decimal';
      } else break;
      if (type === 'integer' && digits.length > 15) throw new Fail('integer length');
      if (type === 'decimal' && digits.length > 16) throw new Fail('decimal length');
    }
    if (type === 'decimal') {
      if (digits.endsWith('.')) throw new Fail('decimal ends with dot');
      if ((digits.split('.')[1] as string).length > 3) throw new Fail('decimal fraction');
    }
    // An Integer's value is a number: -0 is 0.
    return { type, value: sign * Number(digits) + 0 };
  }

  /** §4.2.5 */
  string(): Bare {
    this.take();
    let out = '';
    for (;;) {
      const c = this.take();
      if (c === '\\') {
        const next = this.take();
        if (next !== '"' && next !== '\\') throw new Fail('escape');
        out += next;
      } else if (c === '"') return { type: 'string', value: out };
      else if (c < ' ' || c > '~') throw new Fail('string char');
      else out += c;
    }
  }

  /** §4.2.6 */
  token(): Bare {
    let out = this.take();
    while (/[!#$%&'*+\-.^_`|~0-9A-Za-z:/]/.test(this.peek()) && this.peek() !== '') out += this.take();
    return { type: 'token', value: out };
  }

  /** §4.2.7 */
  bytes(): Bare {
    this.take();
    const end = this.text.indexOf(':', this.at);
    if (end < 0) throw new Fail('bytes end');
    const b64 = this.text.slice(this.at, end);
    if (!/^[A-Za-z0-9+/=]*$/.test(b64)) throw new Fail('bytes char');
    this.at = end + 1;
    return { type: 'bytes', value: b64 };
  }

  /**
   * RFC 9651 §4.2.10 Display String, its content unchecked (printable ASCII, `%`
   * with two lower-case hex digits, valid UTF-8): parseRateLimit() never reads one,
   * so it only needs to know where it ends.
   */
  display(): Bare {
    this.take();
    if (this.take() !== '"') throw new Fail('display');
    let out = '';
    for (let c = this.take(); c !== '"'; c = this.take()) out += c;
    return { type: 'display', value: out };
  }
}

/** One member's text parsed strictly as a one-member List, or undefined. */
function strictMember(text: string): Member | undefined {
  try {
    const members = new Parser(text.replace(/^[ \t]+|[ \t]+$/g, '')).list();
    return members.length === 1 ? members[0] : undefined;
  } catch (error) {
    if (error instanceof Fail) return undefined;
    throw error;
  }
}

/** Top-level commas, outside quoted strings (an escape inside one is a pair). */
function splitMembers(field: string): string[] {
  const members: string[] = [];
  let current = '';
  let quoted = false;
  for (let i = 0; i < field.length; i++) {
    const c = field[i] as string;
    if (quoted && c === '\\') {
      current += c + (field[i + 1] ?? '');
      i++;
      continue;
    }
    if (c === '"') quoted = !quoted;
    if (c === ',' && !quoted) {
      members.push(current);
      current = '';
    } else current += c;
  }
  members.push(current);
  return members;
}

function nameOf(member: Member): string | undefined {
  const { item } = member;
  return item !== 'inner-list' && (item.type === 'string' || item.type === 'token') ? item.value : undefined;
}

function integer(params: Params, key: string): number | undefined {
  const value = params.get(key);
  return value?.type === 'integer' && value.value >= 0 ? value.value : undefined;
}

function text(params: Params, key: string): string | undefined {
  const value = params.get(key);
  return value?.type === 'string' || value?.type === 'token' ? value.value : undefined;
}

function bytes(params: Params, key: string): string | undefined {
  const value = params.get(key);
  return value?.type === 'bytes' ? value.value : undefined;
}

/** `value` without its undefined fields, as parseRateLimit() leaves absent ones out. */
function defined<T>(value: Record<string, unknown>): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

function referenceLimits(field: string): RateLimitStatus[] {
  const out: RateLimitStatus[] = [];
  for (const text of splitMembers(field)) {
    const member = strictMember(text);
    const policy = member && nameOf(member);
    const remaining = member && integer(member.params, 'r');
    if (member === undefined || policy === undefined || remaining === undefined) continue;
    out.push(
      defined<RateLimitStatus>({
        policy,
        remaining,
        resetSeconds: integer(member.params, 't'),
        partitionKey: bytes(member.params, 'pk'),
      }),
    );
  }
  return out;
}

function referencePolicies(field: string): RateLimitPolicy[] {
  const out: RateLimitPolicy[] = [];
  for (const member of splitMembers(field).map(strictMember)) {
    const policy = member && nameOf(member);
    const quota = member && integer(member.params, 'q');
    if (member === undefined || policy === undefined || quota === undefined) continue;
    out.push(
      defined<RateLimitPolicy>({
        policy,
        quota,
        quotaUnit: text(member.params, 'qu'),
        windowSeconds: integer(member.params, 'w'),
        partitionKey: bytes(member.params, 'pk'),
      }),
    );
  }
  return out;
}

// Generators: valid structured-field pieces, and near misses a real server could send.

const digits = (min: number, max: number) =>
  fc.string({ unit: fc.constantFrom(...'0123456789'), minLength: min, maxLength: max });
const integerText = fc.oneof(
  fc.tuple(fc.constantFrom('', '-'), digits(1, 16)).map(([s, d]) => s + d),
  fc.constantFrom('0', '-0', '00', '1', '30', '999999999999999', '1000000000000000'),
);
const decimalText = fc
  .tuple(fc.constantFrom('', '-'), digits(1, 13), digits(0, 4))
  .map(([s, i, f]) => `${s}${i}.${f}`);
const stringText = fc
  .array(
    fc.oneof(
      fc.constantFrom('a', 'Z', ' ', ',', ';', '=', '\\"', '\\\\', '%', '(', ')', ':', '@'),
      fc.constantFrom('\\q', '\t', '\u00e9', '\u007f'), // invalid inside a String
    ),
    { maxLength: 6 },
  )
  .map((parts) => `"${parts.join('')}"`);
const tokenText = fc
  .tuple(
    fc.constantFrom('a', 'Z', '*', 'default', 'foo:bar/baz', 'x-y.z'),
    fc.constantFrom('', '1', '_', '!', '#', "'"),
  )
  .map(([a, b]) => a + b);
const bytesText = fc.constantFrom(':YWJj:', '::', ':dXNlcjE=:', ':not base64!:');
const bareText = fc.oneof(
  { weight: 4, arbitrary: integerText },
  decimalText,
  stringText,
  tokenText,
  bytesText,
  fc.constantFrom(
    '?0',
    '?1',
    '?2',
    '@1700000000',
    '@-1',
    '@1.5',
    '%"caf%c3%a9"',
    '%"a%C3"',
    '%"bad%zz"',
    '%""',
  ),
);
const keyText = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('r', 't', 'q', 'w', 'qu', 'pk') },
  fc.constantFrom('x', '*k', 'a_b-c.d', 'R', 'T', '1x', 'acme-extension'),
);
const paramText = fc
  .tuple(fc.constantFrom(';', '; ', ';  ', ' ;', ';\t'), keyText, fc.option(bareText, { nil: undefined }))
  .map(([semi, key, value]) => `${semi}${key}${value === undefined ? '' : `=${value}`}`);
const memberText = fc
  .tuple(
    fc.oneof(
      { weight: 6, arbitrary: fc.oneof(stringText, tokenText) },
      bareText,
      fc.constantFrom('("a" "b")', '()', '("a";r=0 b)'),
      fc.constant(''),
    ),
    fc.array(paramText, { maxLength: 5 }),
  )
  .map(([item, params]) => item + params.join(''));
const fieldText = fc
  .tuple(fc.array(memberText, { maxLength: 4 }), fc.constantFrom(', ', ',', ' , ', ',\t', ',  '))
  .map(([members, separator]) => members.join(separator));

test('parseRateLimit keeps exactly the members a strict RFC 9651 parser accepts, member by member', () => {
  fc.assert(
    fc.property(fieldText, fieldText, (limit, policy) => {
      const info = parseRateLimit({ ratelimit: limit, 'ratelimit-policy': policy });
      const limits = referenceLimits(limit.trim());
      const policies = referencePolicies(policy.trim());
      assert.deepStrictEqual(
        info,
        limits.length + policies.length > 0 ? { limits, policies } : undefined,
        `RateLimit: ${limit}\nRateLimit-Policy: ${policy}`,
      );
    }),
    { numRuns: 5_000 },
  );
});

test('retryDelay from RateLimit is the longest t among the members with r=0, by the strict parser', () => {
  fc.assert(
    fc.property(fieldText, (field) => {
      const resets = referenceLimits(field.trim())
        .filter((l) => l.remaining === 0 && l.resetSeconds !== undefined)
        .map((l) => Math.min((l.resetSeconds as number) * 1000, 2 ** 31 - 1));
      const expected = resets.length > 0 ? Math.max(...resets) : undefined;
      assert.equal(retryDelay({ ratelimit: field }, NOW), expected, field);
    }),
    { numRuns: 5_000 },
  );
});
