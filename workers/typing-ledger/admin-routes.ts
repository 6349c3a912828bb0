import { Hono } from 'hono';
import { z } from 'zod';
import type { AppEnv } from '../context';
import { withTx } from '../db/tx';
import type { Env } from '../env';
import { AppError } from '../errors';
import { InstallationWorkspaceId } from '../installations/store';
import { log } from '../log';
import { requireAdmin } from '../middleware';
import { givenUpRow, listGivenUp } from './given-up';
import { removeManually } from './manual-removal';

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

export const RowId = z.string().regex(/^[A-Za-z0-9_-]{1,100}$/, 'a ledger row id');
/** A page: `after` is the previous page's `next` (`<microseconds>.<row id>`). */
export const PageQuery = z.strictObject({
  state: z.enum(['abandoned', 'overdue']).default('abandoned'),
  limit: z.coerce.number().int().min(1).max(100).default(50),
  after: z
    .string()
    .regex(/^\d{1,17}\.[A-Za-z0-9_-]{1,100}$/, 'a cursor from a previous page')
    .transform((v) => ({ us: v.slice(0, v.indexOf('.')), id: v.slice(v.indexOf('.') + 1) }))
    .optional(),
});

/** Path and query input: 400 `validation_failed` naming the field, never the value. */
export function valid<T extends z.ZodType>(schema: T, raw: unknown): z.output<T> {
  const parsed = schema.safeParse(raw);
  if (!parsed.success)
    throw new AppError(
      'validation_failed',
      'Request validation failed',
      parsed.error.issues.map((i) => ({ path: i.path, message: i.message })),
    );
  return parsed.data;
}

export const REFUSED = {
  unknown_row: ['not_found', 'No such typing-reaction row'],
  cleaned: ['typing_row_cleaned', 'The badge was already confirmed gone'],
  active: [
    'typing_row_active',
    'The row is pending inside its lifetime: its turn and the maintenance passes own it',
  ],
  no_credentials: [
    'typing_no_credentials',
    'The installation is gone (or names another app) and no snapshot is left: remove the badge in Lark',
  ],
} as const;

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
  .post('/stop', async (c) => c.json(await typingMaintenance(c.env).stop()))
  // Manual removal (docs/operations.md "Badges the service gave up on").
  .get('/workspaces/:workspaceId/rows', async (c) => {
    const workspaceId = valid(InstallationWorkspaceId, c.req.param('workspaceId'));
    const q = valid(PageQuery, c.req.query());
    const page = await withTx(c.var.db(), { budgetMs: 5000, maxAttempts: 1 }, (tx) =>
      listGivenUp(tx, { workspaceId, state: q.state, limit: q.limit, after: q.after }),
    );
    return c.json({ workspace_id: workspaceId, state: q.state, ...page });
  })
  .post('/rows/:rowId/remove', async (c) => {
    const rowId = valid(RowId, c.req.param('rowId'));
    const r = await removeManually(c.var.db(), c.var.config.SECRET_KEYS, rowId);
    // One line per manual action, refused or done: ids and outcome only, never a credential
    // (`via` names which credentials were used; log.ts would redact a `credentials` field).
    log.info('typing_manual_removal', {
      rowId,
      outcome: r.kind === 'done' ? r.outcome : r.kind,
      ...(r.kind === 'done' ? { code: r.code, via: r.via } : {}),
    });
    if (r.kind !== 'done') {
      const [code, message] = REFUSED[r.kind];
      throw new AppError(code, message);
    }
    const row = await givenUpRow(c.var.db(), rowId);
    return c.json({
      outcome: r.outcome,
      code: r.code,
      ...(r.retryAfterSeconds !== undefined ? { retry_after_seconds: r.retryAfterSeconds } : {}),
      via: r.via,
      row,
    });
  });
