import { Hono } from 'hono';
import { z } from 'zod';
import type { AppEnv } from '../context';
import { withTx } from '../db/tx';
import { AppError } from '../errors';
import { InstallationWorkspaceId } from '../installations/store';
import { validInput } from '../lib/json-body';
import { log } from '../log';
import { requireAdmin } from '../middleware';
import { givenUpRow, listGivenUp } from './given-up';
import { typingMaintenance } from './maintenance';
import { REFUSED, RowId, removeManually } from './manual-removal';
import { OPERATIONAL_QUERY, type WorkspaceTypingStatus } from './operational';

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
    const workspaceId = validInput(InstallationWorkspaceId, c.req.param('workspaceId'));
    const q = validInput(PageQuery, c.req.query());
    const page = await withTx(c.var.db(), { budgetMs: 5000, maxAttempts: 1 }, (tx) =>
      listGivenUp(tx, { workspaceId, state: q.state, limit: q.limit, after: q.after }),
    );
    return c.json({ workspace_id: workspaceId, state: q.state, ...page });
  })
  .post('/rows/:rowId/remove', async (c) => {
    const rowId = validInput(RowId, c.req.param('rowId'));
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
