import { type Context, Hono } from 'hono';
import { z } from 'zod';
import { Operator, recordAction } from '../console/audit';
import type { AppEnv } from '../context';
import { actorHostStub } from '../effects/actor-host-stub';
import { discardDeadMessage, requeueDeadMessage } from '../effects/dead-letters';
import {
  actOnDeadLetters,
  type BulkAction,
  BulkInput,
  type BulkPreview,
  type BulkResult,
  dbNowMs,
  parseBulk,
  previewDeadLetters,
} from '../effects/dead-letters-bulk';
import { WAKE_BUDGET_MS } from '../effects/recovery';
import { AppError } from '../errors';
import { readJsonBody, validInput } from '../lib/json-body';
import { withTimeout } from '../lib/timeout';
import { log } from '../log';
import { requireAdmin } from '../middleware';

/** The admin routes' bodies: the bulk fields, and the operator recorded with an action. */
export const PreviewBody = BulkInput;
export const ActionBody = BulkInput.extend({ operator: Operator });
export const OneBody = z.strictObject({ operator: Operator });
export const MessageId = z.string().regex(/^\d{1,18}$/, 'a mailbox message id');

/** Hosts asked at once; a page's up to 1,000 instances go in rounds of this many. */
const WAKE_CONCURRENCY = 50;

/**
 * Wakes every requeued instance's host, after the page committed (never inside it): each gets
 * `ActorHost.schedule` (its own alarm, now; it returns before the pump, as the minute cron's
 * wakes do), bounded by WAKE_BUDGET_MS, in rounds of WAKE_CONCURRENCY, after the answer
 * (`waitUntil`). A failed one is logged once; the minute cron's mailbox poll delivers it.
 */
function wakeAfterCommit(c: Context<AppEnv>, instances: string[]) {
  const wakeOne = (id: string) =>
    withTimeout(
      actorHostStub(c.env, id).schedule(id),
      WAKE_BUDGET_MS,
      () => new Error(`wake-up did not answer within ${WAKE_BUDGET_MS} ms`),
    ).catch((err: unknown) => log.warn('dead_letters_wake_failed', { instanceId: id, error: err }));
  const woken = (async () => {
    for (let i = 0; i < instances.length; i += WAKE_CONCURRENCY)
      await Promise.all(instances.slice(i, i + WAKE_CONCURRENCY).map(wakeOne));
  })();
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
 * One dead letter by id, for the console's `dead-requeue` / `dead-discard` and the routes
 * below: the effect runtime's one-row statements (fenced by `state = 'dead'`); a message that
 * is not dead (already requeued, discarded or pruned) is 404. A requeue wakes its host after
 * the statement committed.
 */
export async function oneDeadLetter(c: Context<AppEnv>, action: BulkAction, messageId: string) {
  const id = validInput(MessageId, messageId);
  const pool = c.var.db();
  const instanceId =
    action === 'requeue' ? await requeueDeadMessage(pool, id) : await discardDeadMessage(pool, id);
  if (!instanceId) throw new AppError('not_found', 'No such dead-lettered message');
  if (action === 'requeue') wakeAfterCommit(c, [instanceId]);
  return { id, instanceId, outcome: action === 'requeue' ? 'requeued' : 'discarded' };
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
  .post('/discard', async (c) => act(c, 'discard'))
  .post('/:id/requeue', async (c) => actOne(c, 'requeue'))
  .post('/:id/discard', async (c) => actOne(c, 'discard'));

async function actOne(c: Context<AppEnv>, action: BulkAction) {
  const messageId = validInput(MessageId, c.req.param('id'));
  const { operator } = await readJsonBody(c, OneBody);
  const r = await oneDeadLetter(c, action, messageId);
  await recordAction(c.var.db(), {
    operator,
    action: `dead-letter.${action}`,
    target: `mailbox:${r.id}`,
    outcome: r.outcome,
    requestId: c.var.requestId,
  });
  return c.json({ id: r.id, outcome: r.outcome });
}

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
  return c.json({ ...body, woken: r.instances.length });
}
