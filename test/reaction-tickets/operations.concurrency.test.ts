import { afterAll, describe, expect, it } from 'vitest';
import { testPool } from '../helpers/db';
import { opId, PATIENT, put, reactions, seedWorld, ticketFor } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

describe('concurrent connections on one message', () => {
  it('racing the same operation: one application, one receipt, every reply carries it', async () => {
    const w = await seedWorld();
    const [actor, token, message] = [w.actors[0]!, w.tokens[0]!, w.messages[0]!];
    const op = opId();
    const intent = { messageId: message, emoji: '🏁', desired: 'present' as const };
    const ticket = await ticketFor(token, op, intent);
    const replies = await Promise.all(
      Array.from({ length: 8 }, () => put(token, op, ticket, intent, PATIENT)),
    );
    expect(replies.map((r) => r.status)).toEqual(Array(8).fill(200));
    const receipts = new Set(replies.map((r) => JSON.stringify(r.body.receipt)));
    expect(receipts.size).toBe(1);
    expect(replies.filter((r) => !r.body.replayed)).toHaveLength(1);
    const { rows } = await pool.query(
      'select count(*)::int as n from private.chat_reaction_operations where actor_id = $1 and operation_id = $2',
      [actor, op],
    );
    expect(rows[0].n).toBe(1);
    expect((await reactions(token, message)).body.reactionVersion).toBe(1);
  });

  it('racing different operations of many actors: no lost update, one receipt per operation', async () => {
    const n = 8;
    const w = await seedWorld(n);
    const message = w.messages[0]!;
    const ops = w.actors.map(() => opId());
    const intents = w.actors.map((_, i) => ({
      messageId: message,
      emoji: i % 2 ? '👍' : '🎉',
      desired: 'present' as const,
    }));
    const tickets = await Promise.all(w.actors.map((_, i) => ticketFor(w.tokens[i]!, ops[i]!, intents[i]!)));
    const replies = await Promise.all(
      w.actors.map((_, i) => put(w.tokens[i]!, ops[i]!, tickets[i]!, intents[i]!, PATIENT)),
    );
    expect(replies.map((r) => r.status)).toEqual(Array(n).fill(200));
    // Message serialization: every change got its own version, 1..n, none lost or shared.
    expect(replies.map((r) => r.body.receipt.reactionVersion).sort((x, y) => x - y)).toEqual(
      Array.from({ length: n }, (_, i) => i + 1),
    );
    const current = (await reactions(w.tokens[0]!, message)).body;
    expect(current.reactionVersion).toBe(n);
    expect(current.reactions.reduce((s: number, r: { count: number }) => s + r.count, 0)).toBe(n);
    const { rows } = await pool.query(
      'select count(*)::int as n from private.chat_reaction_operations where message_id = $1',
      [message],
    );
    expect(rows[0].n).toBe(n);
  });

  it('one actor racing add and remove of the same emoji ends in the state of the last applied receipt', async () => {
    const w = await seedWorld();
    const [token, message] = [w.tokens[0]!, w.messages[0]!];
    const intents = Array.from({ length: 6 }, (_, i) => ({
      messageId: message,
      emoji: '🔁',
      desired: (i % 2 ? 'absent' : 'present') as 'present' | 'absent',
    }));
    const ops = intents.map(() => opId());
    const tickets = await Promise.all(intents.map((intent, i) => ticketFor(token, ops[i]!, intent)));
    const replies = await Promise.all(
      intents.map((intent, i) => put(token, ops[i]!, tickets[i]!, intent, PATIENT)),
    );
    expect(replies.every((r) => r.status === 200)).toBe(true);
    const current = (await reactions(token, message)).body;
    const present = current.reactions.some((r: { emoji: string }) => r.emoji === '🔁');
    // The final state equals the desired state of whichever receipt changed it last.
    const changing = replies.map((r) => r.body.receipt).filter((r) => r.outcome !== 'unchanged');
    const lastChange = changing.sort((x, y) => x.reactionVersion - y.reactionVersion).at(-1);
    expect(present).toBe(lastChange ? lastChange.desired === 'present' : false);
    expect(current.reactionVersion).toBe(lastChange?.reactionVersion ?? 0);
    expect(new Set(replies.map((r) => r.body.receipt.operationId)).size).toBe(6);
  });
});
