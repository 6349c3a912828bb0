import type { Pool, PoolClient } from '@neondatabase/serverless';
import { Deadline } from '../clock';
import type { ActorContext, EffectExecutor, EffectRunContext } from '../effects/registry';
import { LarkApiError } from '../lark/errors';
import { log } from '../log';
import { type ChannelDeps, type ChannelRun, channelExecutor } from './reply';

type Q = Pick<PoolClient, 'query'> | Pick<Pool, 'query'>;

/**
 * `recall_reply: on` (issue 33 item 2): a delivered reply is deleted once every input of its
 * turn is recalled (one recalled input among others leaves the reply: it still answers them).
 * Decided by the conversation actor, serially, at the two points where it can become true:
 * a `recall:` message for an input of a delivered turn, and the delivered settlement of a
 * turn whose inputs were recalled while it ran (after its post claim, reply-claim.ts). The
 * decision is the row of `channel_reply_deletions`, written in the actor's fenced commit with
 * the effect that carries it out, and read before deciding, so a turn's reply is decided once.
 */
export const REPLY_DELETE_KIND = 'channel.reply-delete';

export interface ReplyDeleteArgs {
  sessionId: string;
  installationId: string;
  turnNo: number;
  replyMessageId: string;
}

/** Lark's answers for a message that is no longer there: 230002 not found (emulator/open-api.ts). */
const DELETE_GONE_CODES = new Set([230002]);

/** A delivered turn, as the decision reads it (from the actor state or from channel_turns). */
interface DeliveredTurn {
  turnNo: number;
  contextRevision: number;
  firstPosition: number;
  cutoffPosition: number;
  replyMessageId: string;
}

/**
 * Whether `recall_reply` is on and every input of the turn is recalled, with no deletion
 * decided yet. The inputs are the turn's range of answered inputs; a range whose inputs were
 * pruned decides nothing (at least one recalled input must be there to see).
 */
const DUE = `
select exists (
  select 1 from lark_installation_settings st
   where st.installation_id = $2 and st.recall_reply = 'on'
     and not exists (select 1 from channel_reply_deletions d where d.session_id = $1 and d.turn_no = $3)
     and exists (select 1 from lark_inbound_messages i
                   join channel_recalled_messages r
                     on r.installation_id = i.installation_id and r.message_id = i.message_id
                  where i.session_id = $1 and i.context_revision = $4
                    and i.position between $5 and $6 and i.unanswered is null)
     and not exists (select 1 from lark_inbound_messages i
                      where i.session_id = $1 and i.context_revision = $4
                        and i.position between $5 and $6 and i.unanswered is null
                        and not exists (select 1 from channel_recalled_messages r
                                         where r.installation_id = i.installation_id
                                           and r.message_id = i.message_id))
) as due`;

async function deletionDue(q: Q, sessionId: string, installationId: string, t: DeliveredTurn) {
  const { rows } = await q.query<{ due: boolean }>(DUE, [
    sessionId,
    installationId,
    t.turnNo,
    t.contextRevision,
    t.firstPosition,
    t.cutoffPosition,
  ]);
  return rows[0]?.due === true;
}

/** The delivered turn that covers a recalled input, if one does (at most one: turns do not overlap). */
async function deliveredTurnCovering(
  q: Q,
  sessionId: string,
  input: { position: number; contextRevision: number },
): Promise<DeliveredTurn | null> {
  const { rows } = await q.query<{
    turn_no: number;
    first_position: string;
    cutoff_position: string;
    reply_message_id: string;
  }>(
    `select turn_no, first_position, cutoff_position, reply_message_id from channel_turns
      where session_id = $1 and context_revision = $2 and $3 between first_position and cutoff_position
        and outcome = 'delivered' and reply_message_id is not null
      limit 1`,
    [sessionId, input.contextRevision, input.position],
  );
  const r = rows[0];
  return r
    ? {
        turnNo: r.turn_no,
        contextRevision: input.contextRevision,
        firstPosition: Number(r.first_position),
        cutoffPosition: Number(r.cutoff_position),
        replyMessageId: r.reply_message_id,
      }
    : null;
}

/** Emits the deletion when due: the effect and its decision row in the same fenced commit. */
async function decide(ctx: ActorContext, installationId: string, t: DeliveredTurn): Promise<void> {
  const sessionId = ctx.instanceId;
  if (!(await ctx.read((db) => deletionDue(db, sessionId, installationId, t)))) return;
  const args: ReplyDeleteArgs = {
    sessionId,
    installationId,
    turnNo: t.turnNo,
    replyMessageId: t.replyMessageId,
  };
  ctx.emit(REPLY_DELETE_KIND, args, { maxAttempts: 5 });
  ctx.inCommit(async (tx) => {
    await tx.query(
      `insert into channel_reply_deletions (session_id, turn_no, installation_id, reply_message_id)
       values ($1, $2, $3, $4)`,
      [sessionId, t.turnNo, installationId, t.replyMessageId],
    );
  });
  // The host runs due effects when it wakes.
  ctx.setTimer(ctx.nowMs);
}

/** A `recall:` message: the reply of the delivered turn covering the input, if every input is recalled now. */
export async function deleteAfterRecall(
  ctx: ActorContext,
  installationId: string,
  input: { position: number; contextRevision: number },
): Promise<void> {
  const turn = await ctx.read((db) => deliveredTurnCovering(db, ctx.instanceId, input));
  if (turn) await decide(ctx, installationId, turn);
}

/** A delivered settlement: its inputs may have been recalled while the turn ran. */
export function deleteAtSettlement(
  ctx: ActorContext,
  installationId: string,
  t: DeliveredTurn,
): Promise<void> {
  return decide(ctx, installationId, t);
}

export type DeletionOutcome = 'deleted' | 'already_gone' | 'refused' | 'already_finished';

const finish = (
  q: Q,
  a: ReplyDeleteArgs,
  outcome: Exclude<DeletionOutcome, 'already_finished'>,
  code: number | null,
) =>
  q.query(
    `update channel_reply_deletions set outcome = $3, lark_code = $4, finished_at = app_now()
      where session_id = $1 and turn_no = $2 and finished_at is null`,
    [a.sessionId, a.turnNo, outcome, code],
  );

/**
 * `channel.reply-delete`: `DELETE /open-apis/im/v1/messages/:id` of the turn's reply, once.
 * Each run counts its attempt on the decision row first; a finished row sends nothing. Lark's
 * delete is idempotent in effect (a second one finds the message gone and says so), so a run
 * after a crash, or beside a restarted host's run, can only meet "already gone", which is
 * recorded as such. Retryable failures (timeouts, 5xx, 429) throw: the effect retries.
 */
export function replyDeleteExecutor(deps: ChannelDeps): EffectExecutor {
  const policy = { kind: REPLY_DELETE_KIND, timeoutMs: 15_000, idempotentByKey: true };
  return channelExecutor(deps, policy, deleteReply);
}

async function deleteReply(a: ReplyDeleteArgs, run: ChannelRun): Promise<{ deletion: DeletionOutcome }> {
  const db = run.db;
  const { rows } = await db((q) =>
    q.query<{ attempts: number }>(
      `update channel_reply_deletions set attempts = attempts + 1
      where session_id = $1 and turn_no = $2 and finished_at is null
      returning attempts`,
      [a.sessionId, a.turnNo],
    ),
  );
  if (!rows[0]) return { deletion: 'already_finished' };
  const installation = await run.installation(a.installationId);
  if (!installation) {
    // Gone with its credentials: nothing can reach the message.
    await db((q) => finish(q, a, 'refused', null));
    return { deletion: 'refused' };
  }
  const lark = run.lark(installation);
  let outcome: Exclude<DeletionOutcome, 'already_finished'> = 'deleted';
  let code: number | null = null;
  try {
    await lark.deleteMessage(a.replyMessageId, { deadline: new Deadline(8000) });
  } catch (err) {
    if (!(err instanceof LarkApiError) || err.kind === 'retryable') throw err;
    code = err.code;
    outcome = err.kind === 'already_gone' || DELETE_GONE_CODES.has(err.code) ? 'already_gone' : 'refused';
  }
  await db((q) => finish(q, a, outcome, code));
  log.info('channel_reply_deleted', {
    sessionId: a.sessionId,
    turnNo: a.turnNo,
    outcome,
    larkCode: code,
  });
  return { deletion: outcome };
}
