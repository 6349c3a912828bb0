import { afterAll, describe, expect, it } from 'vitest';
import { testPool } from '../helpers/db';
import { call, opId, put, retire, seedWorld, ticketFor } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

async function counts(actorId: string) {
  const { rows } = await pool.query(
    `select (select count(*)::int from private.chat_reaction_operations where actor_id = $1) as receipts,
            (select count(*)::int from private.chat_retired_reaction_operations where actor_id = $1) as fences`,
    [actorId],
  );
  return rows[0];
}

describe('receipt and fence lifetimes (migration 0020)', () => {
  it('receipts cascade with their message; fences outlive it and cascade only with their actor', async () => {
    const w = await seedWorld(1, 2);
    const [actor, token] = [w.actors[0]!, w.tokens[0]!];
    const [m1, m2] = w.messages as [string, string];
    const applied = opId();
    const intent = { messageId: m1, emoji: '🧪', desired: 'present' as const };
    expect((await put(token, applied, await ticketFor(token, applied, intent), intent)).status).toBe(200);
    const fenced = opId();
    const fenceTicket = await ticketFor(token, fenced, { ...intent, messageId: m2 });
    expect((await retire(token, fenced, fenceTicket)).status).toBe(200);
    expect(await counts(actor)).toEqual({ receipts: 1, fences: 1 });

    await pool.query('delete from private.messages where id = any($1::text[])', [[m1, m2]]);
    expect(await counts(actor)).toEqual({ receipts: 0, fences: 1 });
    await pool.query('delete from private.actors where id = $1', [actor]);
    expect(await counts(actor)).toEqual({ receipts: 0, fences: 0 });
  });

  it('receipts cascade with their conversation and workspace', async () => {
    for (const table of ['conversations', 'workspaces'] as const) {
      const w = await seedWorld();
      const op = opId();
      const intent = { messageId: w.messages[0]!, emoji: '🧹', desired: 'present' as const };
      await put(w.tokens[0]!, op, await ticketFor(w.tokens[0]!, op, intent), intent);
      expect((await counts(w.actors[0]!)).receipts).toBe(1);
      const id = table === 'conversations' ? w.conversationId : w.workspaceId;
      await pool.query(`delete from private.${table} where id = $1`, [id]);
      expect((await counts(w.actors[0]!)).receipts).toBe(0);
    }
  });

  it('the retention cleanup scans each table by its stable key, and the receipts and fences carry no index without a reader', async () => {
    const { rows } = await pool.query<{ indexdef: string }>(
      "select indexdef from pg_indexes where schemaname = 'private' and tablename in ('chat_reaction_operations', 'chat_retired_reaction_operations')",
    );
    const defs = rows.map((r) => r.indexdef).join('\n');
    for (const t of ['chat_reaction_operations', 'chat_retired_reaction_operations'])
      expect(defs).toMatch(
        new RegExp(
          `ON private\\.${t} USING btree \\(created_at, actor_id, operation_id\\) INCLUDE \\(ticket_expires_at, contract\\)`,
        ),
      );
    // Every ticket write inserts into each receipt index, every retirement into each fence
    // index (the baseline, migrations/0020_baseline_reaction_tickets.sql, keeps none of the two unused ones each had before).
    expect(defs).not.toMatch(
      /ON private\.chat_(retired_)?reaction_operations USING btree \((created_at|ticket_expires_at)\)$/m,
    );
  });

  it('the admin directory refuses to re-home a message under another conversation', async () => {
    const a = await seedWorld();
    const b = await seedWorld();
    const res = await call('PUT', `/admin/messages/${a.messages[0]}`, {
      admin: true,
      body: { conversationId: b.conversationId },
    });
    expect(res.status).toBe(409);
    expect((await call('PUT', '/admin/workspaces/x', { body: {} })).status).toBe(401);
  });
});
