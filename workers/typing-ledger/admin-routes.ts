import { Hono } from 'hono';
import type { AppEnv } from '../context';
import { withTx } from '../db/tx';
import type { Env } from '../env';
import { requireAdmin } from '../middleware';

/** The one TypingMaintenance object the minute cron and these routes talk to. */
export function typingMaintenance(env: Env) {
  return env.TYPING_MAINTENANCE.get(env.TYPING_MAINTENANCE.idFromName('singleton'));
}

/**
 * The spec's read-only operational query, per workspace, on app_now() (the database clock).
 * Counts and timestamps only: no snapshot, no message or reaction id leaves this route.
 */
export const OPERATIONAL_QUERY = `
select workspace_id,
  count(*) filter (where cleaned_at is null and abandoned_at is null)::int as pending,
  count(*) filter (where cleaned_at is null and abandoned_at is null
                   and created_at <= app_now() - interval '7 days')::int as overdue_redaction,
  count(*) filter (where abandoned_at is not null)::int as abandoned,
  min(created_at) filter (where cleaned_at is null and abandoned_at is null) as oldest_pending
from channel_typing_reaction
group by workspace_id
order by workspace_id`;

export interface WorkspaceTypingStatus {
  workspace_id: string;
  pending: number;
  overdue_redaction: number;
  abandoned: number;
  oldest_pending: Date | null;
}

/** Operator routes of the typing-reaction maintenance (docs/operations.md). */
export const typingAdmin = new Hono<AppEnv>()
  .use('*', requireAdmin())
  .get('/status', async (c) => {
    const { rows } = await withTx(c.var.db(), { budgetMs: 10_000, maxAttempts: 1 }, (tx) =>
      tx.query<WorkspaceTypingStatus>(OPERATIONAL_QUERY),
    );
    const maintenance = await typingMaintenance(c.env).status();
    return c.json({ workspaces: rows, maintenance });
  })
  .post('/enable', async (c) => c.json(await typingMaintenance(c.env).enable()))
  .post('/disable', async (c) => c.json(await typingMaintenance(c.env).disable()))
  .post('/stop', async (c) => c.json(await typingMaintenance(c.env).stop()));
