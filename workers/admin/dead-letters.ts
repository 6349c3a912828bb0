import { type Context, Hono } from 'hono';
import type { z } from 'zod';
import { Operator, recordAction } from '../console/audit';
import type { AppEnv } from '../context';
import { actorHostStub } from '../effects/actor-host-stub';
import {
  actOnDeadLetters,
  BULK_WAKE_LIMIT,
  type BulkAction,
  BulkInput,
  type BulkPreview,
  type BulkResult,
  dbNowMs,
  parseBulk,
  previewDeadLetters,
} from '../effects/dead-letters-bulk';
import { readJsonBody } from '../lib/json-body';
import { log } from '../log';
import { requireAdmin } from '../middleware';

/** The admin routes' bodies: the bulk fields, and the operator recorded with an action. */
export const PreviewBody = BulkInput;
export const ActionBody = BulkInput.extend({ operator: Operator });

/** Wakes requeued instances' hosts after the commit; a lost wake-up is the minute poll's to recover. */
function wakeAfterCommit(c: Context<AppEnv>, instances: string[]) {
  const woken = Promise.all(
    instances.slice(0, BULK_WAKE_LIMIT).map((id) =>
      actorHostStub(c.env, id)
        .wake(id)
        .catch((err: unknown) => log.warn('dead_letters_wake_failed', { instanceId: id, error: err })),
    ),
  );
  try {
    c.executionCtx.waitUntil(woken);
  } catch {
    // By design: no execution context (a direct app.request in a test); the wake-ups still run.
  }
}

/**
 * The one implementation of the bulk preview, requeue and discard, for the admin routes below
 * and the console's `dead-bulk-*` actions: validated before anything is read (400 with a
 * stable code, nothing written), one page a call, the hosts woken after the page committed.
 */
export async function bulkDeadLetters(
  c: Context<AppEnv>,
  mode: 'preview',
  input: z.infer<typeof BulkInput>,
): Promise<BulkPreview>;
export async function bulkDeadLetters(
  c: Context<AppEnv>,
  mode: BulkAction,
  input: z.infer<typeof BulkInput>,
): Promise<BulkResult>;
export async function bulkDeadLetters(
  c: Context<AppEnv>,
  mode: 'preview' | BulkAction,
  input: z.infer<typeof BulkInput>,
): Promise<BulkPreview | BulkResult> {
  const pool = c.var.db();
  const { bounds, page } = parseBulk(input, mode, await dbNowMs(pool));
  if (mode === 'preview') return previewDeadLetters(pool, bounds, page);
  const result = await actOnDeadLetters(pool, mode, bounds, page);
  wakeAfterCommit(c, result.instances);
  return result;
}

/** What an audit row says of a bulk action: the range, and what the page changed. */
export function bulkAudit(r: BulkResult) {
  return {
    target: `${r.installation}:${r.from}..${r.to}`,
    outcome: `${r.action === 'requeue' ? 'requeued' : 'discarded'} ${r.changed}${r.next ? `, next ${r.next}` : ''}`,
  };
}

/**
 * Dead letters in bulk (docs/operations.md "Dead letters in bulk"), mounted at
 * /admin/effects/dead-letters. Requeue and discard are recorded in console_audit with their
 * operator, as console actions are; a preview changes nothing and is not recorded.
 */
export const deadLettersAdmin = new Hono<AppEnv>()
  .use('*', requireAdmin())
  .post('/preview', async (c) => {
    const input = await readJsonBody(c, PreviewBody);
    return c.json(await bulkDeadLetters(c, 'preview', input));
  })
  .post('/requeue', async (c) => act(c, 'requeue'))
  .post('/discard', async (c) => act(c, 'discard'));

async function act(c: Context<AppEnv>, action: BulkAction) {
  const { operator, ...input } = await readJsonBody(c, ActionBody);
  const r = await bulkDeadLetters(c, action, input);
  await recordAction(c.var.db(), {
    operator,
    action: `dead-letters.${action}`,
    requestId: c.var.requestId,
    ...bulkAudit(r),
  });
  const { instances: _hosts, ...body } = r;
  return c.json({ ...body, woken: Math.min(r.instances.length, BULK_WAKE_LIMIT) });
}
