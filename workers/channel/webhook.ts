import type { Pool, PoolClient } from '@neondatabase/serverless';
import { Hono } from 'hono';
import type { AppEnv } from '../context';
import { withTx } from '../db/tx';
import { AppError } from '../errors';
import { loadInstallation } from '../installations/store';
import { MessageReceiveEvent } from '../lark/schemas';
import { openDelivery } from '../lark/verify';
import { log } from '../log';
import {
  afterInboundAnswered,
  type InboundMessage,
  type RecordedInput,
  recordInboundMessage,
} from './inbound';

/** Lark allows 3 s for the answer (1 s for the URL check); the transaction gets half. */
const WEBHOOK_TX_BUDGET_MS = 1500;
const MAX_BODY_BYTES = 256 * 1024;
const INSTALLATION_ID = /^li_[A-Za-z0-9]{1,40}$/;
/** Lark retries for about 7.1 h; receipts are kept 24 h, well past that. */
export const RECEIPT_RETENTION_MS = 24 * 3600_000;

/**
 * POST /lark/events/:installationId: Lark's event webhook. Verifies (workers/lark/verify.ts),
 * then for a user's im.message.receive_v1 inserts the event_id receipt and records the
 * input in ONE transaction, and only then answers 200. Everything else is acknowledged and
 * ignored. Rejections are 4xx lark_* codes with nothing written.
 */
export const webhook = new Hono<AppEnv>().post('/lark/events/:installationId', async (c) => {
  const receivedAtMs = c.var.clock.now();
  const declared = Number(c.req.header('content-length') ?? 0);
  if (declared > MAX_BODY_BYTES) throw new AppError('payload_too_large', 'Event body too large');
  const raw = new Uint8Array(await c.req.arrayBuffer());
  if (raw.length > MAX_BODY_BYTES) throw new AppError('payload_too_large', 'Event body too large');
  const installationId = c.req.param('installationId');
  const installation = INSTALLATION_ID.test(installationId)
    ? await loadInstallation(c.var.db(), c.var.config.SECRET_KEYS, installationId)
    : undefined;
  if (!installation) throw new AppError('lark_unknown_installation', 'No such Lark installation');

  const delivery = await openDelivery(raw, c.req.raw.headers, installation, receivedAtMs).catch((err) => {
    if (err instanceof AppError)
      log.warn('lark_event_rejected', { installationId, code: err.code, requestId: c.var.requestId });
    throw err;
  });
  if (delivery.kind === 'challenge') return c.json({ challenge: delivery.challenge });
  if (delivery.kind === 'legacy') return c.json({ ok: true, ignored: 'schema_1.0' });

  const { header, event } = delivery.envelope;
  if (header.event_type !== 'im.message.receive_v1') return c.json({ ok: true, ignored: header.event_type });
  const parsed = MessageReceiveEvent.safeParse(event);
  if (!parsed.success)
    throw new AppError('lark_bad_event', 'im.message.receive_v1 event does not match its schema');
  // Messages from apps (this one included) never start a turn: no loops, no self-replies.
  if (parsed.data.sender.sender_type !== 'user') return c.json({ ok: true, ignored: 'sender_not_user' });

  const inbound: InboundMessage = {
    installation,
    eventId: header.event_id,
    event: parsed.data,
    receivedAtMs,
  };
  const recorded = await withTx(c.var.db(), { budgetMs: WEBHOOK_TX_BUDGET_MS }, (tx) =>
    acceptOnce(tx, inbound, c.var.config.SECRET_KEYS),
  );
  if (!recorded) return c.json({ ok: true, duplicate: true });
  runAfterAnswer(c, recorded);
  return c.json({ ok: true });
});

/** The dedup receipt and the input, together: a duplicate event_id records nothing. */
async function acceptOnce(
  tx: PoolClient,
  inbound: InboundMessage,
  keys: AppEnv['Variables']['config']['SECRET_KEYS'],
): Promise<RecordedInput | null> {
  const { rowCount } = await tx.query(
    `insert into lark_event_receipts (installation_id, event_id, event_type)
     values ($1, $2, 'im.message.receive_v1')
     on conflict do nothing`,
    [inbound.installation.id, inbound.eventId],
  );
  if (!rowCount) return null;
  return recordInboundMessage(tx, inbound, keys);
}

function runAfterAnswer(
  c: { env: AppEnv['Bindings']; var: AppEnv['Variables']; executionCtx: ExecutionContext },
  recorded: RecordedInput,
) {
  const task = afterInboundAnswered(c.env, c.var.config, recorded).catch((err: unknown) =>
    log.error('lark_after_answer_failed', { installationId: recorded.typing.installationId, error: err }),
  );
  try {
    c.executionCtx.waitUntil(task);
  } catch {
    // No execution context (a direct app.request in a unit test): the task still runs.
  }
}

/** Deletes receipts older than the retention, at most `limit` per call (oldest first). */
export async function pruneEventReceipts(q: Pick<Pool, 'query'>, limit = 1000): Promise<number> {
  const { rowCount } = await q.query(
    `delete from lark_event_receipts r
     using (select installation_id, event_id from lark_event_receipts
            where received_at < app_now() - $1 * interval '1 millisecond'
            order by received_at limit $2) old
     where r.installation_id = old.installation_id and r.event_id = old.event_id`,
    [RECEIPT_RETENTION_MS, limit],
  );
  return rowCount ?? 0;
}
