import { afterAll, describe, expect, it } from 'vitest';
import { sqlState } from '../../workers/db/tx';
import { testPool } from '../helpers/db';
import { seedWorld } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

/** The SQLSTATE of a statement, or 'ok'; each runs in its own rolled-back transaction. */
async function outcome(sql: string, params: unknown[]): Promise<string> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    await client.query(sql, params);
    return 'ok';
  } catch (err) {
    return sqlState(err) ?? 'unknown';
  } finally {
    await client.query('rollback').catch(() => undefined);
    client.release();
  }
}

const WORD = 'Az09_-';

describe('write-path CHECKs without a counted regex repeat (migrations/0020_baseline_reaction_tickets.sql)', () => {
  it('messages.id: 1 to 128 of [A-Za-z0-9_.:-], exactly as the {1,128} pattern of 0020', async () => {
    const w = await seedWorld(1, 0);
    const insert = (id: string) =>
      outcome('insert into private.messages (id, workspace_id, conversation_id) values ($1, $2, $3)', [
        id,
        w.workspaceId,
        w.conversationId,
      ]);
    const cases: [string, string][] = [
      ['a', 'ok'],
      [`${'m'.repeat(124)}.:_-`, 'ok'],
      ['m'.repeat(129), '23514'],
      ['', '23514'],
      ['bad id', '23514'],
      ['é', '23514'],
      ['a\nb', '23514'],
    ];
    for (const [id, want] of cases) expect([id.length, await insert(id)]).toEqual([id.length, want]);
  });

  it("receipts' operation_id: 8 to 64 of [A-Za-z0-9_-], exactly as the {8,64} pattern of 0020", async () => {
    const w = await seedWorld(1, 1);
    const insert = (op: string) =>
      outcome(
        `insert into private.chat_reaction_operations
           (actor_id, operation_id, workspace_id, conversation_id, message_id, emoji, desired, outcome,
            reaction_version, contract)
         values ($1, $2, $3, $4, $5, '👍', 'present', 'added', 1, 'legacy')`,
        [w.actors[0], op, w.workspaceId, w.conversationId, w.messages[0]],
      );
    const cases: [string, string][] = [
      [WORD.repeat(2).slice(0, 8), 'ok'],
      [WORD.repeat(11).slice(0, 64), 'ok'],
      [WORD.repeat(2).slice(0, 7), '23514'],
      [WORD.repeat(11).slice(0, 65), '23514'],
      ['abcdefg.h', '23514'],
      ['abcdefgh\n', '23514'],
    ];
    for (const [op, want] of cases) expect([op.length, await insert(op)]).toEqual([op.length, want]);
  });
});
