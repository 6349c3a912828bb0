import type { Pool } from '@neondatabase/serverless';
import { withDb } from '../db/pool';
import { actorHostStub } from '../effects/actor-host-stub';
import { enqueueCtes } from '../effects/mailbox';
import { type Env, loadConfig } from '../env';
import { log } from '../log';
import { RECALL_KEY_PREFIX } from './recall';
import { CONVERSATION_ACTOR } from './session';

/** Recalls sent again per minute at most. */
export const RECALL_SWEEP_LIMIT = 100;

/**
 * The backstop of a recall's reply deletion through a deploy (docs/operations.md "Recalled
 * messages", during a deploy): the webhook records every recall in Postgres, but the reply of a
 * turn delivered before it is deleted only when the conversation handles its `recall:` message,
 * and a host still on a release without recalls drains that message as a no-op. Each minute,
 * every recall recorded 1 to 60 minutes ago whose input a delivered turn covers, with no
 * deletion decided for that turn, under `recall_reply: on`, is sent to its conversation again,
 * keyed by the ten-minute bucket (`recall:<message id>:again:<bucket>`, at most six times, the
 * mailbox's key making each one once). The conversation decides as for the first message
 * (reply-deletion.ts `deleteAfterRecall`: nothing unless every input is recalled, at most one
 * deletion per turn), so a message sent again that finds nothing to do changes nothing.
 * One statement over `channel_recalled_messages_recorded`; the hosts are woken after it.
 */
const RESEND = `
with due as (
  select i.session_id, r.installation_id, r.message_id, i.position, i.context_revision
    from channel_recalled_messages r
    join lark_installation_settings s on s.installation_id = r.installation_id and s.recall_reply = 'on'
    join lark_inbound_messages i on i.installation_id = r.installation_id and i.message_id = r.message_id
   where r.recorded_at >= app_now() - interval '60 minutes'
     and r.recorded_at < app_now() - interval '1 minute'
     and i.session_id is not null and i.unanswered is null
     and exists (select 1 from channel_turns t
                  where t.session_id = i.session_id and t.context_revision = i.context_revision
                    and i.position between t.first_position and t.cutoff_position
                    and t.outcome = 'delivered' and t.reply_message_id is not null
                    and not exists (select 1 from channel_reply_deletions d
                                     where d.session_id = t.session_id and d.turn_no = t.turn_no))
   order by r.recorded_at
   limit $1
), ${enqueueCtes({
  instanceId: 'due.session_id',
  actorType: `'${CONVERSATION_ACTOR}'`,
  actorKey: `substr(due.session_id, ${CONVERSATION_ACTOR.length + 2})`,
  state: `'{}'::jsonb`,
  key: `'${RECALL_KEY_PREFIX}' || due.message_id || ':again:' || (app_now_ms() / 600000)::bigint::text`,
  payload: `jsonb_build_object('installationId', due.installation_id, 'messageId', due.message_id, 'position', due.position, 'contextRevision', due.context_revision)`,
  from: 'due',
})}
select distinct session_id from due`;

/** Sends the due recalls again (one statement); returns their conversations. */
export async function resendRecalls(
  pool: Pick<Pool, 'query'>,
  limit = RECALL_SWEEP_LIMIT,
): Promise<string[]> {
  const { rows } = await pool.query<{ session_id: string }>(RESEND, [limit]);
  return rows.map((r) => r.session_id);
}

/** The minute cron's step: sends them, then wakes each conversation's host (a failed wake waits for the poll). */
export async function sweepRecalls(env: Env): Promise<{ conversations: number }> {
  const config = loadConfig(env);
  const sessions = await withDb(config, (pool) => resendRecalls(pool));
  await Promise.all(
    sessions.map((sessionId) =>
      actorHostStub(env, sessionId)
        .wake(sessionId)
        .catch((error: unknown) => log.warn('channel_wake_failed', { sessionId, error })),
    ),
  );
  return { conversations: sessions.length };
}
