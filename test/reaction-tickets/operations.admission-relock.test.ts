import { afterAll, describe, expect, it } from 'vitest';
import { MESSAGE_LOCK_SQL } from '../../workers/reaction-tickets/locks';
import { blockedBehind, lockHolders, testPool } from '../helpers/db';
import { opId, PATIENT, put, seedWorld, ticketFor } from './helpers';

/**
 * Issue 29 "also still open": sign-out and membership were read once, after the operation
 * lock, and not again after the message lock, so a removal or sign-out committed while a
 * ticketed write waited on the message row did not stop it. Admission is now read again after
 * the last lock, in the statement that reads fresh time (migrations/functions/reaction_tickets.sql).
 * Forced: the message row is held, the write waits on it, the admission changes, the row is
 * released.
 */
const pool = testPool();
const hold = lockHolders(pool);
afterAll(() => pool.end());

async function raceAgainst(change: (w: Awaited<ReturnType<typeof seedWorld>>) => Promise<void>) {
  const w = await seedWorld(2, 1);
  const intent = { messageId: w.messages[0]!, emoji: '👍', desired: 'present' as const };
  const operationId = opId();
  const ticket = await ticketFor(w.tokens[0]!, operationId, intent);
  const holder = await hold(MESSAGE_LOCK_SQL, [[intent.messageId]]);
  const pending = put(w.tokens[0]!, operationId, ticket, intent, PATIENT);
  await blockedBehind(pool, holder.pid);
  await change(w);
  await holder.query('commit');
  const res = await pending;
  const { rows } = await pool.query(
    `select (select count(*)::int from private.message_reactions where message_id = $1) as reactions,
            (select count(*)::int from private.chat_reaction_operations where operation_id = $2) as receipts`,
    [intent.messageId, operationId],
  );
  return { status: res.status, code: res.body?.error?.code, written: rows[0] };
}

describe('admission is read again after the message lock', () => {
  it('operations.admission_after_last_lock: a membership removed while the write waits → 404, nothing written', async () => {
    const out = await raceAgainst(async (w) => {
      await pool.query(
        'delete from private.conversation_members where actor_id = $1 and conversation_id = $2',
        [w.actors[0], w.conversationId],
      );
    });
    expect(out).toEqual({ status: 404, code: 'not_found', written: { reactions: 0, receipts: 0 } });
  });

  it('operations.signout_after_last_lock: a sign-out committed while the write waits → 401, nothing written', async () => {
    const out = await raceAgainst(async (w) => {
      await pool.query(
        "update private.actors set signed_out_at = app_now() + interval '10 seconds' where id = $1",
        [w.actors[0]],
      );
    });
    expect(out).toEqual({ status: 401, code: 'unauthorized', written: { reactions: 0, receipts: 0 } });
  });

  it('positive control: with nothing changed the waiting write applies', async () => {
    const out = await raceAgainst(async () => undefined);
    expect(out).toEqual({ status: 200, code: undefined, written: { reactions: 1, receipts: 1 } });
  });
});
