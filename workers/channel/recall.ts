import type { Pool } from '@neondatabase/serverless';
import { actorHostStub } from '../effects/actor-host-stub';
import { enqueueCtes } from '../effects/mailbox';
import type { Config, Env } from '../env';
import { receiptCte } from '../lark/event-receipts';
import type { Recall } from '../lark/schemas';
import { log } from '../log';
import * as ledger from '../typing-ledger';
import { CONVERSATION_ACTOR } from './session';

/** The conversation's mailbox key of a recall (conversation.ts `onRecall`). */
export const RECALL_KEY_PREFIX = 'recall:';

/** What the conversation gets with a recall: the recalled input, where it sits. */
export interface RecallPayload {
  installationId: string;
  messageId: string;
  position: number;
  contextRevision: number;
}

/**
 * A user's recall (`im.message.recalled_v1`), as ONE autocommit statement before the answer:
 * - the event_id receipt gates the rest (a duplicate delivery writes nothing);
 * - `channel_recalled_messages` records the recall by (installation, message id), whether or
 *   not the message arrived yet: the one record every later decision reads (a second event
 *   for the same message, under another event id, writes nothing more);
 * - when the input is recorded and answered, its conversation gets a `recall:<message id>`
 *   message, for what a recall does to a reply already delivered (reply-deletion.ts).
 * No lock on the turn: the reply's post claim (reply-claim.ts) reads this row with a snapshot
 * taken after it holds the turn row, so the recall is seen when it committed before the claim's
 * check, and is after the claim otherwise; either order is a consistent one (a recall after the
 * claim meets the delivered reply: reply-deletion.ts decides at the settlement too).
 * Nothing of this waits for Lark; the badge comes off after the answer (`afterRecallAnswered`).
 */
const RECALL = `
with ${receiptCte('im.message.recalled_v1')}, recall as (
  insert into channel_recalled_messages
         (installation_id, message_id, chat_id, event_id, recall_type, recall_time_ms)
  select $1, $3, $4, $2, $5, $6 from receipt
  on conflict (installation_id, message_id) do nothing
  returning 1
), input as (
  select i.session_id, i.position, i.context_revision
    from lark_inbound_messages i
   where exists (select 1 from recall)
     and i.installation_id = $1 and i.message_id = $3
     and i.session_id is not null and i.unanswered is null
), ${enqueueCtes({
  instanceId: 'input.session_id',
  actorType: `'${CONVERSATION_ACTOR}'`,
  actorKey: `substr(input.session_id, ${CONVERSATION_ACTOR.length + 2})`,
  state: `'{}'::jsonb`,
  key: `'${RECALL_KEY_PREFIX}' || $3::text`,
  payload: `jsonb_build_object('installationId', $1::text, 'messageId', $3::text, 'position', input.position, 'contextRevision', input.context_revision)`,
  from: 'input',
})}
select exists (select 1 from receipt) as accepted,
       exists (select 1 from recall) as recorded,
       (select session_id from input) as session_id`;

export type RecallOutcome = { kind: 'duplicate' } | { kind: 'recorded'; sessionId: string | null };

/** Records one verified recall (one round trip). Throws on a database error: nothing was written. */
export async function acceptRecall(
  pool: Pick<Pool, 'query'>,
  installationId: string,
  eventId: string,
  recall: Recall,
): Promise<RecallOutcome> {
  const { rows } = await pool.query<{ accepted: boolean; recorded: boolean; session_id: string | null }>(
    RECALL,
    [installationId, eventId, recall.messageId, recall.chatId, recall.recallType, recall.recallTimeMs],
  );
  const row = rows[0]!;
  // A second event for a recall already recorded (another event id) is a duplicate too.
  if (!row.accepted || !row.recorded) return { kind: 'duplicate' };
  return { kind: 'recorded', sessionId: row.session_id };
}

/**
 * After the 200 (waitUntil), for a newly recorded recall: the input's badge is withdrawn by the
 * ledger's normal path (its row settles as `recalled`, then `withdrawAfterCommit`), on the
 * request's pool; then the conversation is woken for its `recall:` message. The settle is its
 * own statement after the recall's commit, so it also finds an input that a webhook recorded
 * meanwhile; an input recorded later still is never badged (accept.ts reads the recall, and
 * the Add's revalidation, liveness.ts, withdraws an Add that raced it). Never throws: what
 * fails is logged once, and the ledger's retry pass owns a settled row's withdrawal anyway.
 */
export function afterRecallAnswered(
  env: Env,
  config: Config,
  recall: { installationId: string; messageId: string; sessionId: string | null },
  pool: Pool,
): { dbDone: Promise<void>; done: Promise<void> } {
  const dbDone = (async () => {
    const ids = await ledger.settleRecalledInput(pool, recall);
    if (ids.length === 0) return;
    const results = await ledger.withdrawAfterCommit(pool, config.SECRET_KEYS, ids);
    const unfinished = Object.entries(results).filter(([, o]) => o === 'retryable' || o === 'error');
    if (unfinished.length > 0)
      log.warn('channel_recall_withdraw_unfinished', {
        installationId: recall.installationId,
        rows: unfinished.length,
      });
  })().catch((err: unknown) =>
    log.error('channel_recall_withdraw_failed', { installationId: recall.installationId, error: err }),
  );
  const { sessionId } = recall;
  const woken = sessionId
    ? actorHostStub(env, sessionId)
        .wake(sessionId)
        .then(
          () => undefined,
          (err: unknown) => log.warn('channel_wake_failed', { sessionId, error: err }),
        )
    : Promise.resolve();
  return { dbDone, done: Promise.all([dbDone, woken]).then(() => undefined) };
}
