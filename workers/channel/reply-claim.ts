import type { Pool } from '@neondatabase/serverless';
import { withTx } from '../db/tx';
import type { ReplyArgs } from './types';

/**
 * "Every input of the turn is recalled" (channel_recalled_messages, recall.ts) for the given
 * Lark message ids: `all` only when there is at least one id and none is left unrecalled.
 */
const UNRECALLED = `
select count(*)::int as unrecalled
  from unnest($2::text[]) as m(message_id)
 where not exists (select 1 from channel_recalled_messages r
                    where r.installation_id = $1 and r.message_id = m.message_id)`;

/** The turn's inputs that are recalled by now (their Lark message ids): the agent is not shown them. */
export async function recalledInputs(
  q: Pick<Pool, 'query'>,
  args: Pick<ReplyArgs, 'session' | 'inputs'>,
): Promise<Set<string>> {
  const { rows } = await q.query<{ message_id: string }>(
    `select message_id from channel_recalled_messages
      where installation_id = $1 and message_id = any($2::text[])`,
    [args.session.installationId, args.inputs.map((i) => i.messageId)],
  );
  return new Set(rows.map((r) => r.message_id));
}

/**
 * The newest of the given Lark message ids (in the turn's order, oldest first) that is not
 * recalled: the message a reply can still go to. No row when every one is recalled.
 */
const NEWEST_UNRECALLED = `
select m.message_id
  from unnest($2::text[]) with ordinality as m(message_id, n)
 where not exists (select 1 from channel_recalled_messages r
                    where r.installation_id = $1 and r.message_id = m.message_id)
 order by m.n desc
 limit 1`;

/** What the claim decided: post to `anchorMessageId`, or nothing (every input recalled). */
export type ReplyClaim = { kind: 'post'; anchorMessageId: string } | { kind: 'recalled' };

/**
 * The decision to post the turn's reply, made once per turn under the turn row's lock
 * (`channel_turns.reply_claimed_at`): the lock first, then the check in a second statement,
 * whose fresh snapshot sees every recall (recall.ts) committed before it. A recall racing the
 * post either committed before that check (it is not the reply's anchor; when it was the last
 * input left, no reply and the turn ends `recalled`) or is ordered after the claim (the reply is
 * posted and stays, or is deleted under `recall_reply: on`, reply-deletion.ts). Two runs of the
 * turn serialize on the lock, so one claim decides.
 * - `post`: to the newest input not recalled, recorded as the turn's `anchor_message_id` by this
 *   claim; or claimed by an earlier generation (it may have posted: the same uuid must go out
 *   again, to the anchor that claim recorded, whatever was recalled since, or Lark's dedup is all
 *   that guards). Lark refuses a reply to a recalled message (230011), so the turn's first
 *   anchor, its newest input, is kept only while it is not recalled;
 * - `recalled`: every input is recalled and no generation claimed: nothing may be posted.
 * One short transaction; no lock outlives it, and the post itself comes after its commit.
 */
export async function claimReplyPost(
  pool: Pool,
  args: Pick<ReplyArgs, 'sessionId' | 'turnNo' | 'session' | 'inputs' | 'anchorMessageId'>,
): Promise<ReplyClaim> {
  return withTx(pool, { budgetMs: 3000 }, async (tx) => {
    const { rows } = await tx.query<{ claimed: boolean; anchor_message_id: string }>(
      `select reply_claimed_at is not null as claimed, anchor_message_id from channel_turns
        where session_id = $1 and turn_no = $2 for no key update`,
      [args.sessionId, args.turnNo],
    );
    // No turn row (an effect older than its turn's retention): nothing to decide against.
    if (!rows[0]) return { kind: 'post', anchorMessageId: args.anchorMessageId };
    if (rows[0].claimed) return { kind: 'post', anchorMessageId: rows[0].anchor_message_id };
    if (args.inputs.length === 0) return { kind: 'post', anchorMessageId: args.anchorMessageId };
    // A new statement, so a new snapshot: a recall that held the lock is visible now.
    const left = await tx.query<{ message_id: string }>(NEWEST_UNRECALLED, [
      args.session.installationId,
      args.inputs.map((i) => i.messageId),
    ]);
    const anchor = left.rows[0]?.message_id;
    if (!anchor) return { kind: 'recalled' };
    await tx.query(
      `update channel_turns set reply_claimed_at = app_now(), anchor_message_id = $3
        where session_id = $1 and turn_no = $2 and reply_claimed_at is null`,
      [args.sessionId, args.turnNo, anchor],
    );
    return { kind: 'post', anchorMessageId: anchor };
  });
}

/**
 * The check before the agent is asked, one read with no lock: `recalled` when no run of the
 * turn claimed the post and every input is recalled already. It agrees with the claim: recalls
 * are never undone, so a claim that would come later finds them too, and one that came earlier
 * is seen here.
 */
export async function recalledBeforeAsking(
  q: Pick<Pool, 'query'>,
  args: Pick<ReplyArgs, 'sessionId' | 'turnNo' | 'session' | 'inputs'>,
): Promise<boolean> {
  if (args.inputs.length === 0) return false;
  const { rows } = await q.query<{ claimed: boolean; unrecalled: number }>(
    `select exists (select 1 from channel_turns
                     where session_id = $3 and turn_no = $4 and reply_claimed_at is not null) as claimed,
            (${UNRECALLED}) as unrecalled`,
    [args.session.installationId, args.inputs.map((i) => i.messageId), args.sessionId, args.turnNo],
  );
  return rows[0]?.claimed === false && rows[0]?.unrecalled === 0;
}
