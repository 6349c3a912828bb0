import type { PoolClient } from '@neondatabase/serverless';
import { metric } from '../metrics';
import type { TurnOutcome } from './typing-hooks';

export interface TurnStart {
  sessionId: string;
  turnNo: number;
  contextRevision: number;
  firstPosition: number;
  cutoffPosition: number;
  inputCount: number;
  anchorMessageId: string;
  deliveryKey: string;
  effectId: string;
  /** The failed turn this one re-runs (rerun.ts), or null. */
  rerunOf?: number | null;
}

/**
 * The flush: the turn's cutoff and context revision, persisted in the fenced commit that
 * emits its reply (so they exist before any detached work). Idempotent for a re-run commit.
 */
export async function insertTurn(tx: PoolClient, t: TurnStart): Promise<void> {
  await tx.query(
    `insert into channel_turns
       (session_id, turn_no, context_revision, first_position, cutoff_position, input_count,
        anchor_message_id, delivery_key, effect_id, rerun_of)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
    [
      t.sessionId,
      t.turnNo,
      t.contextRevision,
      t.firstPosition,
      t.cutoffPosition,
      t.inputCount,
      t.anchorMessageId,
      t.deliveryKey,
      t.effectId,
      t.rerunOf ?? null,
    ],
  );
}

/** A replacement generation took over the turn's reply (same delivery key). */
export async function replaceTurnEffect(
  tx: PoolClient,
  sessionId: string,
  turnNo: number,
  generation: number,
  effectId: string,
): Promise<void> {
  await tx.query(
    `update channel_turns set generation = $3, effect_id = $4
      where session_id = $1 and turn_no = $2 and outcome is null`,
    [sessionId, turnNo, generation, effectId],
  );
}

/** Terminal: records the outcome once (a turn that already has one is left alone). */
export async function settleTurnRow(
  tx: PoolClient,
  sessionId: string,
  turnNo: number,
  outcome: TurnOutcome,
  replyMessageId: string | null,
): Promise<boolean> {
  const { rows } = await tx.query<{ ms: number }>(
    `update channel_turns set outcome = $3, reply_message_id = $4, settled_at = app_now()
      where session_id = $1 and turn_no = $2 and outcome is null
      returning (extract(epoch from settled_at - started_at) * 1000)::float8 as ms`,
    [sessionId, turnNo, outcome, replyMessageId],
  );
  const settled = rows[0];
  // Turn latency (start to settlement). Written before the commit: a settlement whose
  // transaction is then retried is counted once per try (rare: 40001/40P01 only).
  if (settled) metric('turn_ms', settled.ms, outcome);
  return settled !== undefined;
}
