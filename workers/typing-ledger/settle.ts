import { type Q, UNCERTAIN_SWEEP_AFTER_MS } from './types';

export interface TurnCutoff {
  sessionId: string;
  contextRevision: number | bigint;
  /** The last input position the turn consumed (inclusive). */
  cutoffPosition: number | bigint;
  /** Who settled (`turn:<n>`). */
  settledBy: string;
  /** delivered | failed | retired | anchor_gone (free text, for operators). */
  outcome: string;
}

/**
 * Settles every input of one turn, inside the actor's terminal transaction: all inputs of the
 * session up to the cutoff in that context revision (coalesced ones included) and only those.
 * A later input (position > cutoff) or another revision is never touched, and since this runs
 * in the caller's transaction a rollback authorizes nothing. The cutoff itself is kept for the
 * Add's revalidation (channel/liveness.ts). Rows whose Add never placed a badge are cleaned
 * right here.
 *
 * Every settlement has a task: the engine persists a turn's cutoff in the same fenced commit
 * that emits its reply, so no flush can fail between the two and leave inputs to settle
 * taskless (the spec's failed-flush case). The settlement's `taskless` column (migration
 * 0040) is therefore always false, and a settled row is no longer taskless.
 *
 * Returns the ids whose badges must be withdrawn once the transaction has committed
 * (`withdrawAfterCommit`).
 */
export async function settleTurnInputs(tx: Q, cut: TurnCutoff): Promise<string[]> {
  const { rows } = await tx.query<{ id: string }>(
    `with cutoff as (
       insert into channel_typing_settlement
         (session_id, context_revision, cutoff_position, settled_by, outcome, taskless)
       values ($1, $2, $3, $4, $5, false)
       on conflict do nothing
     ), settled as (
       update channel_typing_reaction
       set settled_at = app_now(), settled_by = $4, settle_outcome = $5,
           taskless = false,
           cleaned_at = case when add_state = 'not_added' then app_now() end,
           credential_snapshot = case when add_state = 'not_added' then null else credential_snapshot end,
           quota_slot = case when add_state = 'not_added' then null else quota_slot end,
           -- the retry pass picks up what the after-commit withdrawal does not finish; an
           -- Add still in flight gets its minute first
           next_attempt_at = case when add_state = 'pending'
             then greatest(app_now(), created_at + $6 * interval '1 millisecond') else app_now() end,
           updated_at = app_now()
       where session_id = $1 and context_revision = $2 and input_position <= $3
         and settled_at is null and cleaned_at is null and abandoned_at is null
       returning id, add_state
     )
     select id from settled where add_state <> 'not_added'`,
    [
      cut.sessionId,
      String(cut.contextRevision),
      String(cut.cutoffPosition),
      cut.settledBy,
      cut.outcome,
      UNCERTAIN_SWEEP_AFTER_MS,
    ],
  );
  return rows.map((r) => r.id);
}

/**
 * A turn (task) claimed these inputs: they are no longer taskless, so the two-minute
 * taskless expiry of the maintenance pass leaves their badges alone.
 */
export async function markInputsTasked(
  tx: Q,
  cut: Pick<TurnCutoff, 'sessionId' | 'contextRevision' | 'cutoffPosition'>,
): Promise<number> {
  const { rowCount } = await tx.query(
    `update channel_typing_reaction set taskless = false, updated_at = app_now()
     where session_id = $1 and context_revision = $2 and input_position <= $3
       and taskless and settled_at is null and cleaned_at is null and abandoned_at is null`,
    [cut.sessionId, String(cut.contextRevision), String(cut.cutoffPosition)],
  );
  return rowCount ?? 0;
}

/**
 * A recalled message (channel/recall.ts): its input's row settles on its own, with outcome
 * `recalled`, whatever its turn does, so the normal withdrawal (`withdrawAfterCommit`) takes
 * its badge off at once; an Add still in flight sees the settlement when it records its result
 * and withdraws, like after any settlement. Rows of other inputs of the turn are untouched.
 * Run after the recall committed, as its own statement: it then sees an input recorded by a
 * webhook that raced the recall. Returns the ids whose badge must be withdrawn.
 */
export async function settleRecalledInput(
  q: Q,
  input: { installationId: string; messageId: string },
): Promise<string[]> {
  const { rows } = await q.query<{ id: string }>(
    `with settled as (
       update channel_typing_reaction
       set settled_at = app_now(), settled_by = 'recall', settle_outcome = 'recalled',
           taskless = false,
           cleaned_at = case when add_state = 'not_added' then app_now() end,
           credential_snapshot = case when add_state = 'not_added' then null else credential_snapshot end,
           quota_slot = case when add_state = 'not_added' then null else quota_slot end,
           next_attempt_at = case when add_state = 'pending'
             then greatest(app_now(), created_at + $3 * interval '1 millisecond') else app_now() end,
           updated_at = app_now()
       where installation_id = $1 and source_message_id = $2
         and settled_at is null and cleaned_at is null and abandoned_at is null
       returning id, add_state
     )
     select id from settled where add_state <> 'not_added'`,
    [input.installationId, input.messageId, UNCERTAIN_SWEEP_AFTER_MS],
  );
  return rows.map((r) => r.id);
}
