import { afterAll, describe, expect, it } from 'vitest';
import { ISSUANCE_LOCK_SQL } from '../../workers/reaction-tickets/locks';
import { advanceDbClock, blockedBehind, lockHolders, testPool } from '../helpers/db';
import { call, opId, PATIENT, seedWorld } from './helpers';

/**
 * Issue 29 hole 7: issuance decided "inside the admission window" from one clock read, then
 * waited on the actor's issuance lock, then inserted with a new app_now(). When the window
 * ended in between, the insert's `check (expires_at > created_at)` failed (23514) and the
 * answer was a 500. The window is now decided in the insert itself; losing it there is the
 * same terminal 410 `operation_expired` as being past it at the first read.
 */
const pool = testPool();
const hold = lockHolders(pool);
afterAll(() => pool.end());

const TTL_S = 60;

describe('the admission window ends while issuance waits on its lock', () => {
  it('tickets.window_race: 410 operation_expired, nothing written, never a 500', async () => {
    const w = await seedWorld(1, 1);
    // Stamped 55 s ago: inside the 60 s window at the first read.
    const operationId = opId((TTL_S - 5) * 1000);
    const holder = await hold(ISSUANCE_LOCK_SQL, [[w.actors[0]]]);
    const pending = call('POST', '/v1/reaction-tickets', {
      token: w.tokens[0]!,
      env: { ...PATIENT, REACTION_TICKET_TTL_SECONDS: String(TTL_S) },
      body: { operationId, messageId: w.messages[0]!, emoji: '👍', desired: 'present' },
    });
    await blockedBehind(pool, holder.pid);
    // The window ends while the request waits on the lock.
    await advanceDbClock(pool, 10_000);
    await holder.query('commit');
    const res = await pending;
    expect({ status: res.status, code: res.body?.error?.code }).toEqual({
      status: 410,
      code: 'operation_expired',
    });
    expect(res.body.error.details).toMatchObject({ operationId, receipt: null });
    const { rows } = await pool.query(
      'select count(*)::int as n from private.reaction_tickets where actor_id = $1',
      [w.actors[0]],
    );
    expect(rows[0].n).toBe(0);
  });
});
