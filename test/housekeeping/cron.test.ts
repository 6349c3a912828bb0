import { describe, expect, it, vi } from 'vitest';
import { runCron } from '../helpers/cron';
import { seedWorld } from '../reaction-tickets/helpers';
import { channelSeeds, existing } from './channel-seed';
import { runSteps } from './helpers';

const { pool, newSeed } = channelSeeds();

describe('minute cron reaches housekeeping', () => {
  it('"* * * * *" deletes an eligible ticket, turn, input and conversation with the default periods', async () => {
    const w = await seedWorld(1, 1);
    const opIdValue = crypto.randomUUID();
    await pool.query(
      `insert into private.reaction_tickets
         (actor_id, operation_id, workspace_id, conversation_id, message_id, emoji, desired, key_version,
          created_at, expires_at)
       values ($1, $2, $3, $4, $5, '👍', 'present', '1', app_now() - interval '40 days', app_now() - interval '31 days')`,
      [w.actors[0], opIdValue, w.workspaceId, w.conversationId, w.messages[0]],
    );
    const seed = newSeed();
    const s = await seed.conversation({ idleDays: 31 });
    const input = await seed.input(s, 1, 31);
    await seed.turn(s, 1, 1, 1, 30);
    const keep = await seed.conversation({ idleDays: 1 });

    await runCron('* * * * *');

    // One run: turns, then inputs, then the conversation they no longer hold.
    const tickets = await pool.query('select 1 from private.reaction_tickets where operation_id = $1', [
      opIdValue,
    ]);
    expect(tickets.rowCount).toBe(0);
    expect(await existing(pool, 'channel_turns', 'session_id', [s])).toEqual([]);
    expect(await existing(pool, 'lark_inbound_messages', 'id', [input])).toEqual([]);
    expect(await existing(pool, 'channel_conversations', 'id', [s, keep])).toEqual([keep]);
  });

  it('a failing step is logged and the other steps still run', async () => {
    const seed = newSeed();
    const s = await seed.conversation();
    await seed.turn(s, 1, 1, 1, 9);
    const errors = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    const holder = await pool.connect();
    try {
      // Hold the tickets table so the tickets step times out on its lock.
      await holder.query('begin; lock table private.reaction_tickets in access exclusive mode');
      const result = await runSteps(pool, ['tickets', 'turns'], { stepBudgetMs: 500 });
      expect(result.tickets).toBeNull();
      expect(result.turns).toBe(1);
    } finally {
      await holder.query('rollback');
      holder.release();
    }
    expect(errors.mock.calls.some(([line]) => String(line).includes('housekeeping_step_failed'))).toBe(true);
    errors.mockRestore();
    expect(await existing(pool, 'channel_turns', 'session_id', [s])).toEqual([]);
  });

  it('a run skips a row another run holds instead of waiting for it (SKIP LOCKED)', async () => {
    const seed = newSeed();
    const s = await seed.conversation();
    await seed.turn(s, 1, 1, 1, 9);
    await seed.turn(s, 2, 2, 2, 9);
    const holder = await pool.connect();
    try {
      await holder.query('begin');
      await holder.query('select 1 from channel_turns where session_id = $1 and turn_no = 1 for update', [s]);
      // A short lock budget: waiting on the held row would fail the step instead of skipping.
      const result = await runSteps(pool, ['turns'], { stepBudgetMs: 1000 });
      expect(result.turns).toBe(1);
      const { rows } = await pool.query('select turn_no from channel_turns where session_id = $1', [s]);
      expect(rows.map((r) => r.turn_no)).toEqual([1]);
    } finally {
      await holder.query('rollback');
      holder.release();
    }
    await runSteps(pool, ['turns']);
    expect(await existing(pool, 'channel_turns', 'session_id', [s])).toEqual([]);
  });
});
