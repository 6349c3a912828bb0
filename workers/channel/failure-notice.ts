import type { Pool, PoolClient } from '@neondatabase/serverless';
import { Deadline } from '../clock';
import type { EffectExecutor, EffectRunContext } from '../effects/registry';
import type { LarkClient } from '../lark/client';
import { LarkApiError } from '../lark/errors';
import { log } from '../log';
import { notice } from './notices';
import {
  type ChannelDeps,
  type ChannelRun,
  channelExecutor,
  DELIVERY_BUDGET_MS,
  REPLY_UUID_SAFE_MS,
} from './reply';
import { FAILURE_NOTICE_KIND, type FailureNoticeArgs } from './types';

type Q = Pick<PoolClient, 'query'> | Pick<Pool, 'query'>;

/**
 * A failed turn's notice to its user (issue 33, installation setting `failure_notice`): a
 * `CrossMark` on the turn's newest input, or a short localized reply to it. Exactly once per
 * failed turn, across crashes:
 *  - the decision is recorded before anything goes to Lark (`channel_failure_notices`, one row
 *    per turn): a run after a crash finishes the recorded kind, whatever the setting says now;
 *  - a reply carries its own uuid derived from the turn (`noticeUuid`, never the reply's), so
 *    Lark posts it once for every run within its one-hour dedup;
 *  - a reaction create is not idempotent at Lark (reference §2: a duplicate create is
 *    UNCONFIRMED), so each create is counted before it is sent, and a run that finds one was
 *    sent lists the message's reactions and records ours instead of creating another. Nor is
 *    the effect idempotent by key: a restarted host does not take a live run over (the
 *    staleness rule), so two runs never create at once.
 * Never for a delivered turn (the settlement emits none), nor for a turn with a streaming card:
 * the card is finished with the interrupted notice instead (card-reply.ts), no second message.
 */
export const FAILURE_EMOJI = 'CrossMark';

/** The notice's Lark uuid (≤ 50 characters): derived from the turn's reply uuid, distinct from it. */
export const noticeUuid = (args: Pick<FailureNoticeArgs, 'deliveryKey'>) => `fn_${args.deliveryKey}`;

interface NoticeRow {
  kind: 'reaction' | 'reply';
  /** The message the notice goes to, decided once (DECIDE). */
  message_id: string;
  add_attempts: number;
  posted: boolean;
  /** Older than Lark's uuid dedup covers (a reply not posted by then is not sent). */
  past_dedup: boolean;
}

const ROW = `kind, message_id, add_attempts, posted_at is not null as posted,
  created_at <= app_now() - $4 * interval '1 millisecond' as past_dedup`;

/**
 * The turn's notice: recorded now with the installation's setting if none is (and the turn is
 * failed, with no card, and the setting is not `none`), else the one recorded before. One
 * statement; no row: no notice.
 *
 * Its target, decided with it: the message the turn's reply claim recorded, if the turn claimed
 * a post (reply-claim.ts), else the turn's newest input not recalled by now. Lark refuses a
 * reaction or a reply on a recalled message (230011), so the settlement's anchor (the newest
 * input) would drop the notice of a turn whose newest input the user withdrew; every
 * input recalled: no notice (nothing is left to answer).
 */
const DECIDE = `
with target as (
  select case when t.reply_claimed_at is not null then t.anchor_message_id
              else (select m.message_id from lark_inbound_messages m
                     where m.session_id = t.session_id
                       and m.position between t.first_position and t.cutoff_position
                       and not exists (select 1 from channel_recalled_messages r
                                        where r.installation_id = $3 and r.message_id = m.message_id)
                     order by m.position desc limit 1)
         end as message_id
    from channel_turns t
   where t.session_id = $1 and t.turn_no = $2 and t.outcome in ('failed', 'retired')
),
decided as (
  insert into channel_failure_notices (session_id, turn_no, installation_id, kind, message_id)
  select $1, $2, $3, s.failure_notice, (select message_id from target)
    from lark_installation_settings s
   where s.installation_id = $3 and s.failure_notice <> 'none'
     and exists (select 1 from target where message_id is not null)
     and not exists (select 1 from channel_reply_cards c where c.session_id = $1 and c.turn_no = $2)
  on conflict (session_id, turn_no) do nothing
  returning ${ROW}
)
select * from decided
union all
select ${ROW} from channel_failure_notices
 where session_id = $1 and turn_no = $2 and not exists (select 1 from decided)`;

async function decide(q: Q, a: FailureNoticeArgs): Promise<NoticeRow | null> {
  const { rows } = await q.query<NoticeRow>(DECIDE, [
    a.sessionId,
    a.turnNo,
    a.installationId,
    REPLY_UUID_SAFE_MS,
  ]);
  return rows[0] ?? null;
}

const countAttempt = (q: Q, a: FailureNoticeArgs) =>
  q.query(
    `update channel_failure_notices set add_attempts = add_attempts + 1
      where session_id = $1 and turn_no = $2`,
    [a.sessionId, a.turnNo],
  );

const markPosted = (q: Q, a: FailureNoticeArgs, posted: { reactionId?: string; replyMessageId?: string }) =>
  q.query(
    `update channel_failure_notices
        set posted_at = coalesce(posted_at, app_now()),
            reaction_id = coalesce(reaction_id, $3), reply_message_id = coalesce(reply_message_id, $4)
      where session_id = $1 and turn_no = $2`,
    [a.sessionId, a.turnNo, posted.reactionId ?? null, posted.replyMessageId ?? null],
  );

/** Our FAILURE_EMOJI on the message, if Lark holds one (every page, within the budget; else throws). */
async function findOurs(lark: LarkClient, messageId: string, appId: string, deadline: Deadline) {
  let pageToken: string | undefined;
  for (let page = 0; page < 20; page++) {
    const res = await lark.listReactions(
      messageId,
      { reactionType: FAILURE_EMOJI, pageToken, pageSize: 50 },
      { deadline },
    );
    const ours = (res.items ?? []).find(
      (r) => r.operator?.operator_type === 'app' && r.operator?.operator_id === appId,
    );
    if (ours) return ours.reaction_id;
    if (!res.has_more) return null;
    pageToken = res.page_token ?? undefined;
    if (!pageToken) break;
  }
  // A partial view proves nothing: the run fails and is retried.
  throw new Error('failure notice: the reactions listing did not finish');
}

export type NoticeOutcome = 'none' | 'posted' | 'already_posted' | 'refused' | 'uuid_window_passed';

async function post(
  lark: LarkClient,
  db: <T>(use: (q: Q) => Promise<T>) => Promise<T>,
  a: FailureNoticeArgs,
  row: NoticeRow,
  appId: string,
): Promise<NoticeOutcome> {
  const deadline = new Deadline(DELIVERY_BUDGET_MS);
  if (row.kind === 'reply') {
    // Lark no longer deduplicates the uuid: an earlier run may have posted, so nothing is sent.
    if (row.past_dedup) return 'uuid_window_passed';
    const content = JSON.stringify({ text: notice('failed', a.locale) });
    const sent = await lark.replyMessage(row.message_id, { content, uuid: noticeUuid(a) }, { deadline });
    await db((q) => markPosted(q, a, { replyMessageId: sent.message_id }));
    return 'posted';
  }
  // A create was sent before (its run died, or lost the answer): ours may be there already.
  if (row.add_attempts > 0) {
    const found = await findOurs(lark, row.message_id, appId, deadline);
    if (found) {
      await db((q) => markPosted(q, a, { reactionId: found }));
      return 'posted';
    }
  }
  await db((q) => countAttempt(q, a));
  const r = await lark.createReaction(row.message_id, FAILURE_EMOJI, { deadline });
  await db((q) => markPosted(q, a, { reactionId: r.reaction_id }));
  return 'posted';
}

/** `channel.failure-notice`, emitted by a failed turn's settlement (conversation.ts `settle`). */
export function failureNoticeExecutor(deps: ChannelDeps): EffectExecutor {
  const policy = {
    kind: FAILURE_NOTICE_KIND,
    timeoutMs: 15_000,
    // Not idempotent by key: a reaction create is not (see above), so a restarted host waits
    // for the old run's process to go stale instead of running beside it.
    idempotentByKey: false,
  };
  return channelExecutor(deps, policy, noticeFailure);
}

async function noticeFailure(a: FailureNoticeArgs, run: ChannelRun): Promise<{ notice: NoticeOutcome }> {
  const db = run.db;
  const row = await db((q) => decide(q, a));
  if (!row) return { notice: 'none' };
  if (row.posted) return { notice: 'already_posted' };
  const installation = await run.installation(a.installationId);
  // The installation is gone, and with it its credentials: nothing can reach the chat.
  if (!installation) return { notice: 'refused' };
  const lark = run.lark(installation);
  try {
    const outcome = await post(lark, db, a, row, installation.appId);
    log.info('channel_failure_notice', {
      sessionId: a.sessionId,
      turnNo: a.turnNo,
      kind: row.kind,
      outcome,
    });
    return { notice: outcome };
  } catch (err) {
    // A refusal retrying cannot change (message recalled, no permission): the notice is
    // dropped, once, with its code. Anything else throws: the effect retries.
    if (!(err instanceof LarkApiError) || err.kind === 'retryable') throw err;
    log.warn('channel_failure_notice_refused', {
      sessionId: a.sessionId,
      turnNo: a.turnNo,
      kind: row.kind,
      larkCode: err.code,
    });
    return { notice: 'refused' };
  }
}
