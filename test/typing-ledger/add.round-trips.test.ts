import type { Pool } from '@neondatabase/serverless';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { addTypingBadge, settleTurnInputs } from '../../workers/typing-ledger';
import { testPool, uid } from '../helpers/db';
import { countRoundTrips } from '../helpers/round-trips';
import { makeInstallation, newMessage, register, registeredId, row, typingOf } from './helpers';

/**
 * The Add's round trips after the webhook's answer, on the webhook's one connection (the bench
 * counts them as "same-connection trips after answer/event"): each ledger write and each
 * revalidation read is one one-shot, never a begin/statement/commit transaction.
 */
let pool: Pool;
beforeAll(() => {
  pool = testPool(4);
});
afterAll(() => pool.end());

const live = {
  isInputLive: async (q: Pick<Pool, 'query'>) => (await q.query('select true as live')).rows[0].live,
};

describe('Typing Add round trips', () => {
  it('an Add that stays: the record and the two revalidation reads are one round trip each, no transaction', async () => {
    const inst = await makeInstallation(pool);
    const messageId = await newMessage();
    const reg = await register(pool, inst, { sessionId: uid('s'), messageId, position: 1 });
    const trips = countRoundTrips(pool);
    expect(await addTypingBadge(pool, reg, live)).toBe('added');
    trips.stop();
    expect(trips.texts.filter((t) => /^(begin|commit|rollback)/.test(t))).toEqual([]);
    // One rate-gate read per Lark call (the tenant token's, on this cold token cache, and the
    // Add's), then the record and the two revalidation reads: three where there were seven.
    const gate = /^with held as/;
    expect(trips.texts.filter((t) => gate.test(t))).toHaveLength(2);
    expect(trips.texts.filter((t) => !gate.test(t)).map((t) => t.slice(0, 33))).toEqual([
      'update channel_typing_reaction se',
      'select r.session_id, (r.settled_a',
      'select true as live',
    ]);
    expect(await typingOf(messageId, inst.appId)).toHaveLength(1);
    expect(await row(pool, registeredId(reg))).toMatchObject({ add_state: 'added' });
  });

  it('an Add whose turn already ended is withdrawn and its row cleaned, still without a transaction', async () => {
    const inst = await makeInstallation(pool);
    const messageId = await newMessage();
    const sessionId = uid('s');
    const reg = await register(pool, inst, { sessionId, messageId, position: 1 });
    await withTx(pool, { budgetMs: 3000 }, (tx) =>
      settleTurnInputs(tx, {
        sessionId,
        contextRevision: 0,
        cutoffPosition: 1,
        settledBy: 'turn:test',
        outcome: 'delivered',
      }),
    );
    const trips = countRoundTrips(pool);
    expect(await addTypingBadge(pool, reg, live)).toBe('withdrawn_after_add');
    trips.stop();
    expect(trips.texts.filter((t) => /^(begin|commit|rollback)/.test(t))).toEqual([]);
    expect(await typingOf(messageId, inst.appId)).toHaveLength(0);
    expect((await row(pool, registeredId(reg))).cleaned_at).not.toBeNull();
  });
});
