import type { Pool, PoolClient } from '@neondatabase/serverless';
import { withTx } from '../db/tx';
import { runtimeMessagesParams, runtimeMessagesSql } from '../effects/mailbox';
import { AppError } from '../errors';
import { readHold, TURN_START_LOCK } from './pause';
import { inputText } from './session';
import type { InputMessage } from './types';

/**
 * Re-running a failed turn (issue 33 item 4, docs/operations.md "Re-run a failed turn"): a new
 * turn over the failed turn's inputs, with a new reply uuid, started by the conversation actor
 * like any other turn (debounce, pause gate, badge settlement, failure notice).
 *
 * The request is decided in one transaction under the conversation's state-row lock (its
 * actor_instances row, FOR NO KEY UPDATE: every fenced commit of the actor updates that row, so
 * no turn of the chat can start or end while the request decides; the webhook's inserts only
 * take KEY SHARE on it and are not held up), then TURN_START_LOCK on the installation row, the
 * lock a pause conflicts with (pause.ts): a pause either committed first (the request reads it:
 * 409 `installation_paused`) or waits for this commit, and then holds the re-run's inputs like
 * any input it finds (they wait for the resume and its backlog choice, backlog.ts).
 *
 * The re-run travels as the failed turn's inputs again, one mailbox message each, keyed
 * `in:rerun:<turn>:<position>` with the webhook's own payload (plus `rerunOf`): a shape the
 * previous release already handles as inputs (conversation.ts `onInput`), so a host that still
 * runs it during a deploy answers the re-run instead of discarding an unknown message
 * (docs/operations.md "Re-run a failed turn", the rollout note).
 */
export const RERUN_KEY_PREFIX = 'in:rerun:';

/** A turn's id in the routes: its reply uuid (channel_turns.delivery_key). */
export const TURN_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const BUDGET_MS = 10_000;
/** At most this many inputs are re-run: one turn's worth (conversation.ts MAX_TURN_INPUTS). */
const MAX_INPUTS = 50;

const FIND_TURN = `
select t.session_id, t.turn_no
  from channel_turns t join channel_conversations c on c.id = t.session_id
 where t.delivery_key = $1 and c.installation_id = $2
 limit 1`;

/** The conversation's state row, locked: what the actor last committed. */
const LOCK_STATE = `
select (i.state -> 'turn') is not null and i.state -> 'turn' <> 'null'::jsonb as running,
       exists (select 1 from jsonb_array_elements(coalesce(i.state -> 'pending', '[]'::jsonb)) p
                where p ? 'rerunOf') as rerun_held,
       exists (select 1 from actor_mailbox m
                where m.instance_id = i.id and m.state = 'pending'
                  and m.message_key like '${RERUN_KEY_PREFIX}%') as rerun_queued
  from actor_instances i where i.id = $1
   for no key update of i`;

/** Read again under the locks: a concurrent request's mark is visible to this statement. */
const TURN = `
select t.outcome, t.rerun_requested_at is not null as rerun, t.context_revision, t.first_position,
       t.cutoff_position, c.installation_id, c.workspace_id, c.app_id, c.chat_id, c.thread_id,
       exists (select 1 from channel_turns r where r.session_id = t.session_id and r.outcome is null) as running
  from channel_turns t join channel_conversations c on c.id = t.session_id
 where t.session_id = $1 and t.turn_no = $2
   for update of t`;

/** The turn's inputs as the webhook recorded them (its revision, first..cutoff, answered ones only). */
const INPUTS = `
select position, context_revision, message_id, sender_open_id, message_type, content, message_created_at_ms
  from lark_inbound_messages
 where session_id = $1 and context_revision = $2 and position between $3 and $4 and unanswered is null
 order by position
 limit ${MAX_INPUTS}`;

const MARK = `update channel_turns set rerun_requested_at = app_now() where session_id = $1 and turn_no = $2`;

export interface Rerun {
  sessionId: string;
  turnNo: number;
  inputs: number;
}

interface TurnRow {
  outcome: string | null;
  rerun: boolean;
  context_revision: string;
  first_position: string;
  cutoff_position: string;
  installation_id: string;
  workspace_id: string;
  app_id: string;
  chat_id: string;
  thread_id: string | null;
  running: boolean;
}

interface InputRow {
  position: string;
  context_revision: string;
  message_id: string;
  sender_open_id: string | null;
  message_type: string;
  content: string;
  message_created_at_ms: string | null;
}

/**
 * Re-runs the failed turn named by its reply uuid (`turnId`, channel_turns.delivery_key) of
 * installation `installationId`. Null: no such turn. Throws 409 AppErrors with stable codes
 * (`turn_not_failed`, `turn_already_rerun`, `turn_running`, `installation_paused`,
 * `turn_inputs_gone`); nothing is written then. The caller wakes the conversation's host
 * after the commit (a lost wake-up is the minute poll's).
 */
export async function rerunTurn(pool: Pool, installationId: string, turnId: string): Promise<Rerun | null> {
  return withTx(pool, { budgetMs: BUDGET_MS }, async (tx) => {
    const found = await tx.query<{ session_id: string; turn_no: number }>(FIND_TURN, [
      turnId,
      installationId,
    ]);
    const named = found.rows[0];
    if (!named) return null;
    const sessionId = named.session_id;
    const turnNo = named.turn_no;
    // The same order as the actor's own commit (state row, then the installation row).
    const state = (
      await tx.query<{ running: boolean; rerun_held: boolean; rerun_queued: boolean }>(LOCK_STATE, [
        sessionId,
      ])
    ).rows[0];
    // The instance outlives its conversation's rows (conversation.ts instance retention), so a
    // turn without one is not expected; refused rather than failing on the mailbox's key.
    if (!state)
      throw new AppError('turn_inputs_gone', 'The conversation of this turn is gone', { sessionId });
    await tx.query(TURN_START_LOCK, [installationId]);
    // Its own statement after the lock: it sees a pause that committed while the lock waited. A
    // resume still being applied (`resuming`) is no reason to refuse: these messages queue
    // behind its message, so the conversation takes them as new inputs after its choice.
    if ((await readHold(tx, installationId, sessionId)) === 'paused')
      throw new AppError('installation_paused', 'The installation is paused: resume it first', {
        installationId,
      });
    const turn = (await tx.query<TurnRow>(TURN, [sessionId, turnNo])).rows[0];
    if (!turn) return null; // deleted by retention since it was found
    if (turn.outcome === null || turn.running || state.running)
      throw new AppError('turn_running', 'A turn of this chat is running: re-run once it has ended', {
        sessionId,
      });
    if (turn.outcome !== 'failed' && turn.outcome !== 'retired')
      throw new AppError('turn_not_failed', `Only a failed turn can be re-run (this one: ${turn.outcome})`, {
        outcome: turn.outcome,
      });
    if (turn.rerun) throw new AppError('turn_already_rerun', 'This turn was re-run already', { turnNo });
    if (state.rerun_held || state.rerun_queued)
      throw new AppError('turn_running', 'A re-run of this chat is waiting to start', { sessionId });
    const inputs = await loadInputs(tx, sessionId, turnNo, turn);
    if (inputs.length === 0)
      throw new AppError('turn_inputs_gone', "The turn's recorded inputs are gone: nothing to re-run", {
        turnNo,
      });
    await tx.query(MARK, [sessionId, turnNo]);
    // No `on conflict`: the mark above is checked under the same locks, so these keys are new;
    // a duplicate would be a bug and rolls the request back.
    const messages = inputs.map((m) => ({ key: `${RERUN_KEY_PREFIX}${turnNo}:${m.position}`, payload: m }));
    await tx.query(runtimeMessagesSql('$1', '$2', '$3'), [sessionId, ...runtimeMessagesParams(messages)]);
    return { sessionId, turnNo, inputs: inputs.length };
  });
}

/** The webhook's payload (accept.ts `acceptParams`) rebuilt from the recorded input rows. */
async function loadInputs(
  tx: PoolClient,
  sessionId: string,
  turnNo: number,
  t: TurnRow,
): Promise<InputMessage[]> {
  const { rows } = await tx.query<InputRow>(INPUTS, [
    sessionId,
    t.context_revision,
    t.first_position,
    t.cutoff_position,
  ]);
  const session = {
    installationId: t.installation_id,
    workspaceId: t.workspace_id,
    appId: t.app_id,
    chatId: t.chat_id,
    threadId: t.thread_id,
  };
  return rows.map((r) => ({
    session,
    position: Number(r.position),
    contextRevision: Number(r.context_revision),
    messageId: r.message_id,
    senderOpenId: r.sender_open_id,
    text: inputText(r.message_type, r.content),
    createdAtMs: r.message_created_at_ms === null ? null : Number(r.message_created_at_ms),
    rerunOf: turnNo,
  }));
}
