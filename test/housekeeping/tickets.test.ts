import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { advanceDbClock, setDbClockOffset, testPool } from '../helpers/db';
import { issue, opId, put, retire, seedWorld, ticketFor } from '../reaction-tickets/helpers';
import { DAY_MS, runSteps } from './helpers';

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

const TTL_MS = 7 * DAY_MS; // REACTION_TICKET_TTL_SECONDS default
const GRACE_MS = DAY_MS;

async function ticketRows(actorId: string): Promise<string[]> {
  const { rows } = await pool.query<{ operation_id: string }>(
    'select operation_id from private.reaction_tickets where actor_id = $1 order by operation_id',
    [actorId],
  );
  return rows.map((r) => r.operation_id);
}

describe('reaction ticket retention', () => {
  it('deletes a ticket only after expiry plus the grace; a deleted ticket operation gets the terminal outcome-unknown answer through /v1', async () => {
    const w = await seedWorld(1, 1);
    const [token] = w.tokens as [string];
    const intent = { messageId: w.messages[0]!, emoji: '👍', desired: 'present' as const };
    const unused = opId();
    const applied = opId();
    const unusedTicket = await ticketFor(token, unused, intent);
    const appliedTicket = await ticketFor(token, applied, { ...intent, emoji: '🎉' });
    expect((await put(token, applied, appliedTicket, { ...intent, emoji: '🎉' })).status).toBe(200);

    // Expired, but inside the grace: kept, and refused as expired.
    await advanceDbClock(pool, TTL_MS + GRACE_MS / 2);
    const fresh = opId();
    await ticketFor(token, fresh, intent);
    expect((await put(token, unused, unusedTicket, intent)).body.error.code).toBe('operation_expired');
    expect((await runSteps(pool, ['tickets'], { ticketGraceMs: GRACE_MS })).tickets).toBe(0);
    expect(await ticketRows(w.actors[0]!)).toEqual([applied, fresh, unused].sort());

    // Past expiry plus grace: both expired tickets go, the fresh one stays.
    await advanceDbClock(pool, GRACE_MS);
    expect((await runSteps(pool, ['tickets'], { ticketGraceMs: GRACE_MS })).tickets).toBe(2);
    expect(await ticketRows(w.actors[0]!)).toEqual([fresh]);

    // Terminal, and never a claim that the operation was not accepted: "unknown, read the state".
    const late = await put(token, unused, unusedTicket, intent);
    expect(late.status).toBe(410);
    expect(late.body.error.code).toBe('operation_outcome_unknown');
    const lateRetire = await retire(token, unused, unusedTicket);
    expect(lateRetire.status).toBe(410);
    expect(lateRetire.body.error.code).toBe('operation_outcome_unknown');
    const replay = await put(token, applied, appliedTicket, { ...intent, emoji: '🎉' });
    expect(replay.status).toBe(410);
    expect(replay.body.error.code).toBe('operation_outcome_unknown');
    // Nothing applied late: the message still carries only the earlier reaction.
    const { rows } = await pool.query('select emoji from private.message_reactions where message_id = $1', [
      intent.messageId,
    ]);
    expect(rows.map((r) => r.emoji)).toEqual(['🎉']);

    // The receipt keeps its own expiry (FK set null); its operation is past its window, so
    // re-requesting a ticket is the terminal expiry, with the receipt still kept.
    const receipt = await pool.query(
      'select ticket_id, ticket_expires_at from private.chat_reaction_operations where actor_id = $1 and operation_id = $2',
      [w.actors[0], applied],
    );
    expect(receipt.rows[0].ticket_id).toBeNull();
    expect(receipt.rows[0].ticket_expires_at).not.toBeNull();
    const reissue = await issue(token, applied, { ...intent, emoji: '🎉' });
    expect(reissue.body.error.code).toBe('operation_expired');
    expect(reissue.body.error.details.receipt.operationId).toBe(applied);
  });

  it('deletes at most batchRows tickets per run', async () => {
    const w = await seedWorld(1, 1);
    const ids = Array.from({ length: 5 }, () => opId());
    await pool.query(
      `insert into private.reaction_tickets
         (actor_id, operation_id, workspace_id, conversation_id, message_id, emoji, desired, key_version,
          created_at, expires_at)
       select $1, op, $2, $3, $4, '👍', 'present', '1', app_now() - interval '40 days', app_now() - interval '33 days'
         from unnest($5::text[]) op`,
      [w.actors[0], w.workspaceId, w.conversationId, w.messages[0], ids],
    );
    const first = await runSteps(pool, ['tickets'], { batchRows: 2 });
    expect(first.tickets).toBe(2);
    expect(await ticketRows(w.actors[0]!)).toHaveLength(3);
    expect((await runSteps(pool, ['tickets'])).tickets).toBe(3);
    expect(await ticketRows(w.actors[0]!)).toEqual([]);
  });
});
