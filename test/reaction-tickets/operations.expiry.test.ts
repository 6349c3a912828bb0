import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  MESSAGE_LOCK_SQL,
  OPERATION_LOCK_SQL,
  RETIREMENT_LOCK_SQL,
} from '../../workers/reaction-tickets/locks';
import { advanceDbClock, backendPid, setDbClockOffset, testPool, waitUntilBlocked } from '../helpers/db';
import {
  blockedBy,
  call,
  DAY_MS,
  opId,
  PATIENT,
  put,
  type Reply,
  reactions,
  retire,
  seedWorld,
  signOut,
  snapshot,
  ticketFor,
  tokenFor,
} from './helpers';

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

const PAST_EXPIRY = 7 * DAY_MS + 1000;

function expectExpired(res: Reply, current: unknown) {
  expect(res.status).toBe(410);
  expect(res.body.error.code).toBe('operation_expired');
  // The terminal answer carries the exact current reactions, as GET returns them.
  expect(res.body.error.details.message).toEqual(current);
}

/**
 * Holds `lockSql` from another connection, starts `request`, waits until its backend is
 * blocked on that lock, moves database time past expiry, releases, and returns the reply.
 */
async function expireWhileBlocked(lockSql: string, params: unknown[], request: () => Promise<Reply>) {
  const holder = await pool.connect();
  try {
    await holder.query('begin');
    await holder.query(lockSql, params);
    const pending = request();
    const waiter = await blockedBy(pool, await backendPid(holder));
    await waitUntilBlocked(pool, waiter);
    await advanceDbClock(pool, PAST_EXPIRY);
    await holder.query('commit');
    return await pending;
  } finally {
    holder.release();
  }
}

describe('terminal expiry (410 operation_expired, nothing mutated)', () => {
  it('expiry before dispatch: an expired unseen operation is refused for write and retire', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const op = opId();
    const intent = { messageId: message, emoji: '👍', desired: 'present' as const };
    const ticket = await ticketFor(token, op, intent);
    await advanceDbClock(pool, PAST_EXPIRY);
    const before = await snapshot(pool, message, actor);
    const current = (await reactions(token, message)).body;
    expectExpired(await put(token, op, ticket, intent), current);
    expectExpired(await retire(token, op, ticket), current);
    expect(await snapshot(pool, message, actor)).toEqual(before);
  });

  it('expiry while waiting on the operation lock', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const op = opId();
    const intent = { messageId: message, emoji: '🔥', desired: 'present' as const };
    const ticket = await ticketFor(token, op, intent);
    const before = await snapshot(pool, message, actor);
    const current = (await reactions(token, message)).body;
    const res = await expireWhileBlocked(OPERATION_LOCK_SQL, [actor, op], () =>
      put(token, op, ticket, intent),
    );
    expectExpired(res, current);
    expect(await snapshot(pool, message, actor)).toEqual(before);
  });

  it('expiry while waiting on the retirement lock (write and retire)', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const op = opId();
    const intent = { messageId: message, emoji: '🚀', desired: 'present' as const };
    const ticket = await ticketFor(token, op, intent);
    const before = await snapshot(pool, message, actor);
    const current = (await reactions(token, message)).body;
    expectExpired(
      await expireWhileBlocked(RETIREMENT_LOCK_SQL, [actor, op], () =>
        put(token, op, ticket, intent, PATIENT),
      ),
      current,
    );
    await setDbClockOffset(pool, 0);
    expectExpired(
      await expireWhileBlocked(RETIREMENT_LOCK_SQL, [actor, op], () => retire(token, op, ticket, PATIENT)),
      current,
    );
    expect(await snapshot(pool, message, actor)).toEqual(before);
  });

  it('an expired delayed request cannot change the result, even when it waited on the message lock', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const delayed = opId();
    const intent = { messageId: message, emoji: '👀', desired: 'present' as const };
    const ticket = await ticketFor(token, delayed, intent);
    const before = await snapshot(pool, message, actor);
    const current = (await reactions(token, message)).body;
    const res = await expireWhileBlocked(MESSAGE_LOCK_SQL, [message], () =>
      put(token, delayed, ticket, intent),
    );
    expectExpired(res, current);
    expect(await snapshot(pool, message, actor)).toEqual(before);
  });

  it('expiry after an unknown response: the replay is terminal and shows the applied state and receipt', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const op = opId();
    const intent = { messageId: message, emoji: '✅', desired: 'present' as const };
    const ticket = await ticketFor(token, op, intent);
    const lost = await put(token, op, ticket, intent); // the client never saw this answer
    expect(lost.status).toBe(200);
    await advanceDbClock(pool, PAST_EXPIRY);
    const before = await snapshot(pool, message, actor);
    const replay = await put(token, op, ticket, intent);
    expectExpired(replay, lost.body.message);
    // It never claims the operation did not apply: the reaction is there, and so is the receipt.
    expect(replay.body.error.details.message.reactions).toEqual([
      { emoji: '✅', count: 1, actorIds: [actor] },
    ]);
    expect(replay.body.error.details.receipt).toEqual(lost.body.receipt);
    expect(await snapshot(pool, message, actor)).toEqual(before);
  });

  it('expiry after sign-out: the old session is refused, and the journal replay after expiry is terminal', async () => {
    const w = await seedWorld();
    const [actor, message] = [w.actors[0]!, w.messages[0]!];
    const oldToken = await tokenFor(actor, { issuedAt: Math.floor(Date.now() / 1000) - 60 });
    const op = opId();
    const intent = { messageId: message, emoji: '🙏', desired: 'present' as const };
    const ticket = await ticketFor(oldToken, op, intent);
    const signedOut = await signOut(actor);
    expect((await put(oldToken, op, ticket, intent)).status).toBe(401);
    await advanceDbClock(pool, PAST_EXPIRY);
    const newToken = await tokenFor(actor, { issuedAt: signedOut });
    const before = await snapshot(pool, message, actor);
    const current = (await reactions(newToken, message)).body;
    expectExpired(await put(newToken, op, ticket, intent), current);
    expectExpired(await retire(newToken, op, ticket), current);
    expect(await snapshot(pool, message, actor)).toEqual(before);
  });

  it('expiry after a newer add or remove: the older operation cannot undo the newer choice', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const thumbs = { messageId: message, emoji: '👍' };
    // Older add, delayed; newer add then newer remove applied.
    const olderAdd = opId();
    const olderAddTicket = await ticketFor(token, olderAdd, { ...thumbs, desired: 'present' });
    // Older remove, delayed, of another emoji that a newer add then set.
    const heart = { messageId: message, emoji: '❤️' };
    const olderRemove = opId();
    const olderRemoveTicket = await ticketFor(token, olderRemove, { ...heart, desired: 'absent' });
    for (const [intent, desired] of [
      [thumbs, 'present'],
      [thumbs, 'absent'],
      [heart, 'present'],
    ] as const) {
      const op = opId();
      const t = await ticketFor(token, op, { ...intent, desired });
      expect((await put(token, op, t, { ...intent, desired })).status).toBe(200);
    }
    await advanceDbClock(pool, PAST_EXPIRY);
    const before = await snapshot(pool, message, actor);
    const current = (await reactions(token, message)).body;
    expect(current.reactions).toEqual([{ emoji: '❤', count: 1, actorIds: [actor] }]);
    expectExpired(await put(token, olderAdd, olderAddTicket, { ...thumbs, desired: 'present' }), current);
    expectExpired(
      await put(token, olderRemove, olderRemoveTicket, { ...heart, emoji: '❤', desired: 'absent' }),
      current,
    );
    expect(await snapshot(pool, message, actor)).toEqual(before);
  });

  it('a new reaction after expiry needs a new ticket: reissuing the expired operation ID is 410', async () => {
    const w = await seedWorld();
    const op = opId();
    const intent = { messageId: w.messages[0]!, emoji: '🎯', desired: 'present' as const };
    await ticketFor(w.tokens[0]!, op, intent);
    await advanceDbClock(pool, PAST_EXPIRY);
    const again = await call('POST', '/v1/reaction-tickets', {
      token: w.tokens[0]!,
      body: { operationId: op, ...intent },
    });
    expect(again.status).toBe(410);
    expect(again.body.error.code).toBe('operation_expired');
    const fresh = opId();
    const t = await ticketFor(w.tokens[0]!, fresh, intent);
    expect((await put(w.tokens[0]!, fresh, t, intent)).status).toBe(200);
  });
});
