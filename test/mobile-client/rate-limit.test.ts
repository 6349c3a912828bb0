import { env } from 'cloudflare:workers';
import { afterAll, describe, expect, it } from 'vitest';
import { type JournalEntry, recoveryFor } from '../../clients/mobile/src';
import { testPool } from '../helpers/db';
import { put, reactions, seedWorld } from '../reaction-tickets/helpers';
import { type Device, device, ISSUE, RETIRE, serverRows, WRITE } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

/**
 * The request limiter's 429 (`rate_limited`, V1_ACTOR_RATE_LIMIT, on every /v1 route) is
 * never terminal on the device: the entry waits Retry-After and tries again while its ticket
 * can still apply, and an older choice's retirement is never given up, so the newer write
 * waits behind it. The limiter is the real binding, swapped for one that allows 3 requests a
 * minute per actor (TEST_RATE_LIMIT_3, vitest.config.ts).
 */
const tight = { V1_ACTOR_RATE_LIMIT: (env as unknown as Record<string, unknown>).TEST_RATE_LIMIT_3 };

/**
 * The test limiter counts fixed one-minute windows of real time, which no test clock moves. A
 * run that straddles a window turn may see a request let through that the test counts on
 * being refused: only then is the run repeated once, on a fresh world.
 */
async function inOneLimiterWindow(run: () => Promise<void>): Promise<void> {
  const window = () => Math.floor(Date.now() / 60_000);
  const started = window();
  try {
    await run();
  } catch (err) {
    if (window() === started) throw err;
    await run();
  }
}

/** Spends the actor's budget in the tight limiter's current window (until it answers 429). */
async function exhaustLimiter(d: Device, token: string, messageId: string): Promise<void> {
  for (let i = 0; i < 4; i++) {
    const res = await d.network.fetch(`http://device/v1/messages/${messageId}/reactions`, {
      method: 'GET',
      headers: { authorization: `Bearer ${token}` },
    });
    await res.text();
    if (res.status === 429) return;
  }
  throw new Error('the tight limiter never refused');
}

/** Lets the entry's backoff run out and replays once; returns what the pass sent. */
async function nextAttempt(d: Device, entry: JournalEntry): Promise<string[]> {
  d.clock.advance(Math.max(0, entry.nextAttemptAt - d.clock.now()));
  const sent = d.network.log.length;
  await d.client.sync();
  return d.network.log.slice(sent);
}

describe('the request limiter (rate_limited) on the device', () => {
  it('a retirement refused by the limiter is retried with Retry-After, never abandoned; the newer write waits', async () => {
    await inOneLimiterWindow(async () => {
      const w = await seedWorld();
      const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
      const d = device();
      await d.client.signIn({ actorId, token });
      // The older write's outcome is unknown to the device: it may still be on its way.
      d.network.fault('PUT', WRITE, 'drop-request');
      const older = await d.client.choose({ messageId, emoji: '👍', desired: 'present' });
      await d.client.sync();
      const newer = await d.client.choose({ messageId, emoji: '👍', desired: 'absent' });
      expect(older.supersededBy).toBe(newer.operationId);

      d.network.bindings = tight;
      await exhaustLimiter(d, token, messageId);
      for (let i = 0; i < 5; i++) {
        const sent = await nextAttempt(d, older);
        expect(sent).toEqual([`POST /v1/reaction-operations/${older.operationId}/retire`]);
        expect(older.terminal, `refusal ${i + 1}`).toBeNull();
        expect(older.lastError).toBe('rate_limited');
        // Retry-After (the limiter's whole period) is honoured over the shorter backoff.
        expect(older.nextAttemptAt - d.clock.now()).toBeGreaterThanOrEqual(60_000);
        expect(newer.writeSent).toBe(false);
        expect(d.network.count('POST', ISSUE)).toBe(1); // the newer choice waits behind the fence
      }
      expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 0, fences: 0 });

      // The limiter lets requests through again: the fence first, then the newer write.
      d.network.bindings = undefined;
      await nextAttempt(d, older);
      expect(older.terminal).toMatchObject({ outcome: 'superseded' });
      expect(newer.terminal).toMatchObject({ outcome: 'applied', reflected: 'absent' });
      expect(d.network.count('POST', RETIRE)).toBe(6);
      // The older write, delayed in the network, arrives after the newer one: the fence refuses it.
      const delayed = await put(token, older.operationId, older.ticket!.token, older.intent);
      expect(delayed.body.error.code).toBe('operation_retired');
      expect((await reactions(token, messageId)).body.reactions).toEqual([]);
      expect(await serverRows(pool, actorId)).toEqual({ tickets: 2, receipts: 1, fences: 1 });
    });
  });

  it('an issuance or write refused by the limiter never ends as quota: it waits, then applies once', async () => {
    await inOneLimiterWindow(async () => {
      const w = await seedWorld();
      const [actorId, token, messageId] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
      const d = device();
      await d.client.signIn({ actorId, token });
      d.network.bindings = tight;
      await exhaustLimiter(d, token, messageId);
      const entry = await d.client.choose({ messageId, emoji: '🔥', desired: 'present' });
      for (let i = 0; i < 5; i++) {
        expect(await nextAttempt(d, entry)).toEqual(['POST /v1/reaction-tickets']);
        expect(entry.terminal, `refusal ${i + 1}`).toBeNull();
        expect(entry.lastError).toBe('rate_limited');
        expect(recoveryFor(entry, 'en')).toBeNull();
      }
      d.network.bindings = undefined;
      d.network.fault('PUT', WRITE, 'drop-request'); // the write's outcome becomes unknown
      await nextAttempt(d, entry);
      expect(entry.writeSent).toBe(true);
      d.network.bindings = tight;
      await exhaustLimiter(d, token, messageId);
      for (let i = 0; i < 5; i++) {
        expect(await nextAttempt(d, entry)).toEqual([`PUT /v1/reaction-operations/${entry.operationId}`]);
        expect(entry.terminal, `write refusal ${i + 1}`).toBeNull();
        expect(entry.lastError).toBe('rate_limited');
      }
      d.network.bindings = undefined;
      await nextAttempt(d, entry);
      expect(entry.terminal).toMatchObject({ outcome: 'applied', reflected: 'present' });
      expect(await serverRows(pool, actorId)).toEqual({ tickets: 1, receipts: 1, fences: 0 });
    });
  });
});
