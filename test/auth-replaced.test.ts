import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inspect } from 'node:util';
import { auth } from '../src/auth.ts';
import { captureStatus } from '../src/capture.ts';
import { createFetch } from '../src/chain.ts';
import { HttpStatusError } from '../src/errors.ts';
import type { BreakwaterEvent } from '../src/events.ts';
import { definePolicy } from '../src/policy.ts';
import { throwOnStatus } from '../src/status.ts';
import { type Handler, withServer } from './helpers/server.ts';

const OLD = 'sk-old-0123456789abcdef';
const NEW = 'sk-new-9876543210fedcba';

/** 401 for OLD; for NEW, a 500 whose body quotes the token the first request went with. */
const quotesOld: Handler = (req) =>
  req.headers.authorization === `Bearer ${NEW}`
    ? {
        status: 500,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ error: { message: `session for ${OLD} was replaced mid-request` } }),
      }
    : { status: 401, body: 'expired' };

test('a failure answer to auth()’s resend that quotes the token the first request went with shows it nowhere: message, body, serverMessage, snapshot, captured event', async () => {
  await withServer(quotesOld, async (server) => {
    const events: BreakwaterEvent[] = [];
    const capture = captureStatus();
    const chains = [
      createFetch({
        onEvent: (e) => events.push(e),
        use: [throwOnStatus(), capture, auth({ token: OLD, refresh: () => NEW })],
      }),
      definePolicy({ retry: { attempts: 1 } }).fetch(undefined, {
        auth: { token: OLD, refresh: () => NEW },
        onEvent: (e) => events.push(e),
        use: [throwOnStatus()],
      }),
    ];
    for (const fetch of chains) {
      const error = await fetch(`${server.origin}/v1/run`).then(
        () => assert.fail('a 500 is thrown'),
        (caught: unknown) => caught,
      );
      assert.ok(error instanceof HttpStatusError, String(error));
      assert.equal(error.status, 500);
      assert.match(error.serverMessage ?? '', /^session for \[redacted\] was replaced/);
      for (const shown of [
        error.message,
        error.body,
        error.serverMessage,
        inspect(error),
        JSON.stringify(error),
      ])
        assert.ok(!String(shown).includes(OLD.slice(7)), `OLD shown: ${shown}`);
    }
    assert.ok(
      events.some((e) => e.type === 'captured'),
      'a captured event',
    );
    const shownEvents = inspect(events, { depth: Number.POSITIVE_INFINITY });
    assert.ok(!shownEvents.includes(OLD.slice(7)), `OLD shown in events: ${shownEvents}`);
    const snapshot = inspect(capture.last(server.origin));
    assert.ok(!snapshot.includes(OLD.slice(7)), `OLD shown in the snapshot: ${snapshot}`);
    assert.deepEqual(
      server.requests.map((r) => r.headers.authorization),
      [`Bearer ${OLD}`, `Bearer ${NEW}`, `Bearer ${OLD}`, `Bearer ${NEW}`],
    );
  });
});
