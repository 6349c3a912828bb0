import { afterAll, describe, expect, it } from 'vitest';
import { MESSAGE_LOCK_SQL } from '../../workers/reaction-tickets/locks';
import { backendPid, testPool, waitUntilBlocked } from '../helpers/db';
import { blockedBy, opId, put, type Reply, seedWorld, snapshot, ticketFor } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

/**
 * The ticketed write is one statement (private.reaction_ticket_call, migrations/functions/reaction_tickets.sql), where
 * statement_timeout set by the caller would not arm: the function enforces the request's
 * budgets itself, as lock_timeout before each lock. These prove the budgets still bound a
 * request queued behind a hot message: 503, nothing written, the same operation replayable.
 */
async function whileMessageLocked(message: string, request: () => Promise<Reply>): Promise<Reply> {
  const holder = await pool.connect();
  try {
    await holder.query('begin');
    await holder.query(MESSAGE_LOCK_SQL, [message]);
    const pending = request();
    await waitUntilBlocked(pool, await blockedBy(pool, await backendPid(holder)));
    // The answer arrives while the lock is still held: the budget, not the holder, ended the wait.
    const reply = await pending;
    await holder.query('commit');
    return reply;
  } finally {
    holder.release();
  }
}

function expectBusy(res: Reply) {
  expect(res.status, JSON.stringify(res.body)).toBe(503);
  expect(res.body.error.code).toBe('service_unavailable');
  expect(res.headers.get('retry-after')).toBe('1');
}

describe('one-statement ticketed write: the request budgets still bound its lock waits', () => {
  it('queued past REACTION_LOCK_TIMEOUT_MS on the message lock: 503, nothing written, then applies once', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const op = opId();
    const intent = { messageId: message, emoji: '⏳', desired: 'present' as const };
    const ticket = await ticketFor(token, op, intent);
    const before = await snapshot(pool, message, actor);
    const env = { REACTION_LOCK_TIMEOUT_MS: '200', REACTION_TX_BUDGET_MS: '20000' };
    expectBusy(await whileMessageLocked(message, () => put(token, op, ticket, intent, env)));
    expect(await snapshot(pool, message, actor)).toEqual(before);
    const applied = await put(token, op, ticket, intent);
    expect(applied.status).toBe(200);
    expect(applied.body.replayed).toBe(false);
    expect(applied.body.receipt.outcome).toBe('added');
  });

  // A lock timeout, and a pool statement_timeout (DB_STATEMENT_TIMEOUT_MS, the session's outer
  // ceiling), far longer than the test's own timeout: only the whole budget can end the wait.
  it('the whole REACTION_TX_BUDGET_MS caps a lock wait even when the lock budget is longer', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const op = opId();
    const intent = { messageId: message, emoji: '⌛', desired: 'present' as const };
    const ticket = await ticketFor(token, op, intent);
    const before = await snapshot(pool, message, actor);
    const env = {
      REACTION_LOCK_TIMEOUT_MS: '30000',
      REACTION_TX_BUDGET_MS: '500',
      DB_STATEMENT_TIMEOUT_MS: '60000',
    };
    expectBusy(await whileMessageLocked(message, () => put(token, op, ticket, intent, env)));
    expect(await snapshot(pool, message, actor)).toEqual(before);
  }, 20_000);
});
