import { metric } from '../metrics';
import {
  FIRST_RETRY_MS,
  type Q,
  TARGET_COLUMNS,
  UNCERTAIN_SWEEP_AFTER_MS,
  type WithdrawTarget,
} from './types';

/**
 * Confirmed cleanup: the badge is gone. Erases the sealed snapshot and releases the quota
 * slot in the SAME statement. Terminal rows are never touched again (fence on both outcomes).
 */
export async function recordCleaned(q: Q, id: string): Promise<boolean> {
  const { rows } = await q.query<{ ms: number }>(
    `update channel_typing_reaction
     set cleaned_at = app_now(), credential_snapshot = null, quota_slot = null,
         next_attempt_at = null, last_error = null, updated_at = app_now()
     where id = $1 and cleaned_at is null and abandoned_at is null
     returning (extract(epoch from cleaned_at - created_at) * 1000)::float8 as ms`,
    [id],
  );
  const cleaned = rows[0];
  if (cleaned) metric('badge_lifetime_ms', cleaned.ms, 'cleaned');
  return cleaned !== undefined;
}

export interface AddRecord {
  /** Termination was observed (settled) or the row is already terminal: withdraw at once. */
  ended: boolean;
  /** The row was cleaned or abandoned before this result arrived. */
  terminal: boolean;
}

/**
 * Records a successful Add. Monotonic: it only moves pending/uncertain to added and never
 * touches settled_at/cleaned_at/abandoned_at, so a late Add cannot restore an active state;
 * its reaction id is still kept so the badge can be deleted precisely.
 */
export async function recordAdded(q: Q, id: string, reactionId: string): Promise<AddRecord | undefined> {
  const { rows } = await q.query<AddRecord>(
    `update channel_typing_reaction
     set reaction_id = $2,
         add_state = case when add_state in ('pending', 'uncertain') then 'added' else add_state end,
         add_finished_at = coalesce(add_finished_at, app_now()), updated_at = app_now()
     where id = $1
     returning (settled_at is not null or cleaned_at is not null or abandoned_at is not null) as ended,
               (cleaned_at is not null or abandoned_at is not null) as terminal`,
    [id, reactionId],
  );
  return rows[0];
}

/**
 * The Add ended without a reaction id. `uncertain` (timeout, lost response, 5xx, 231015: it
 * may have applied): claimable for a sweep one minute after registration, and an empty sweep
 * acknowledges nothing before the retention deadline. `not_added` (Lark's answer proves
 * nothing was applied, lark/errors.ts `provesNothingApplied`: 429, a 4xx refusal, a token
 * refused after the refresh, a call held back by a recorded rate-limit reset): nothing can be
 * on the message, so the row is closed right here: terminal, snapshot erased, quota slot
 * freed. `why` goes to last_error as `add:<why>` (e.g. `refused:99991400`, `uncertain:503`).
 */
export async function recordAddFailed(q: Q, id: string, state: 'uncertain' | 'not_added', why: string) {
  await q.query(
    `update channel_typing_reaction
     set add_state = $2, add_finished_at = app_now(), last_error = $3, updated_at = app_now(),
         next_attempt_at = case when $2 = 'uncertain'
           then greatest(coalesce(next_attempt_at, '-infinity'), created_at + $4 * interval '1 millisecond')
           else next_attempt_at end,
         cleaned_at = case when $2 = 'not_added' and abandoned_at is null then app_now() else cleaned_at end,
         credential_snapshot = case when $2 = 'not_added' then null else credential_snapshot end,
         quota_slot = case when $2 = 'not_added' then null else quota_slot end
     where id = $1 and add_state in ('pending', 'uncertain') and cleaned_at is null`,
    [id, state, `add:${why}`, UNCERTAIN_SWEEP_AFTER_MS],
  );
}

/**
 * A failed withdrawal (`error` = `withdraw:…`) counted as a `withdraw_failed` incident for the
 * console, in the statement that records it (migration 0090): `$error` is the row's new
 * last_error, `updated` the update's CTE returning workspace_id.
 */
export const WITHDRAW_FAILED_INCIDENT = (updated: string, error: string) =>
  `insert into typing_incidents (workspace_id, kind)
   select workspace_id, 'withdraw_failed' from ${updated}
   where ${error} like 'withdraw:%' and ${error} not like 'withdraw:unconfirmed:%'`;

/** A failed withdrawal: why (`last_error`), how long Lark asked to wait, and whether it refused the credentials. */
export interface WithdrawFailure {
  delayMs: number;
  error: string;
  credentialsRefused?: boolean;
}

/**
 * A failed withdrawal is left for the maintenance retry pass (it backs off from here). Only
 * ever pushes next_attempt_at later (`greatest`): a re-run of the turn-settled effect must not
 * pull a row the retry pass backed off to an hour back to 30 s. An empty sweep of an
 * unfinished Add (`withdraw:unconfirmed:…`) is the spec's waiting state, not an incident.
 */
export async function scheduleRetry(q: Q, id: string, failure: WithdrawFailure) {
  const { delayMs, error, credentialsRefused } = failure;
  await q.query(
    `with u as (
       update channel_typing_reaction
       set next_attempt_at = greatest(next_attempt_at, app_now() + $2 * interval '1 millisecond'),
           last_error = $3, credentials_refused = credentials_refused or coalesce($4::boolean, false),
           updated_at = app_now()
       where id = $1 and cleaned_at is null and abandoned_at is null
       returning workspace_id)
     ${WITHDRAW_FAILED_INCIDENT('u', '$3::text')}`,
    [id, Math.max(FIRST_RETRY_MS, delayMs), error, credentialsRefused ?? null],
  );
}

/**
 * The Add succeeded but its recording failed and the immediate withdrawal failed too: records
 * the reaction id (as `recordAdded` would) and makes the row due for the retry pass, which
 * deletes a known reaction id precisely whether or not the turn has settled.
 */
export async function scheduleWithdrawal(q: Q, id: string, reactionId: string, failure: WithdrawFailure) {
  const { delayMs, error, credentialsRefused } = failure;
  await q.query(
    `with u as (
       update channel_typing_reaction
       set reaction_id = $2, credentials_refused = credentials_refused or coalesce($5::boolean, false),
           add_state = case when add_state in ('pending', 'uncertain') then 'added' else add_state end,
           add_finished_at = coalesce(add_finished_at, app_now()),
           next_attempt_at = greatest(next_attempt_at, app_now() + $3 * interval '1 millisecond'),
           last_error = $4, updated_at = app_now()
       where id = $1 and cleaned_at is null and abandoned_at is null
       returning workspace_id)
     ${WITHDRAW_FAILED_INCIDENT('u', '$4::text')}`,
    [id, reactionId, Math.max(FIRST_RETRY_MS, delayMs), error, credentialsRefused ?? null],
  );
}

/**
 * Adopts a reaction id a sweep found for an unsettled row (the badge stays while the turn
 * runs): no next attempt, its turn's settlement makes it due again. A row that settled
 * after it was claimed (the retry pass picked `resolve` from the row as claimed) is NOT
 * adopted: its schedule is kept (the after-commit withdrawal may have been held by a 429 or
 * failed, and nothing else would ever claim it again), the id is recorded for a precise
 * delete, and the caller deletes the badge now. The settled check is the update's own
 * re-evaluated row, so a settlement committing in between is seen.
 */
export async function adoptReaction(
  q: Q,
  id: string,
  reactionId: string,
): Promise<'adopted' | 'settled' | 'none'> {
  const { rows } = await q.query<{ settled: boolean }>(
    `update channel_typing_reaction
     set reaction_id = $2, add_state = 'added', add_finished_at = coalesce(add_finished_at, app_now()),
         next_attempt_at = case when settled_at is null then null else next_attempt_at end,
         updated_at = app_now()
     where id = $1 and reaction_id is null and cleaned_at is null and abandoned_at is null
     returning settled_at is not null as settled`,
    [id, reactionId],
  );
  const r = rows[0];
  return r === undefined ? 'none' : r.settled ? 'settled' : 'adopted';
}

/**
 * The seven-day deadline passed before this withdrawal (expiry lags: maintenance stopped, a
 * backlog): the spec's failed terminal, written exactly as the expiry pass writes it
 * (passes/expire.ts EXPIRE_LIFETIME): abandoned_at, snapshot erased, slot released,
 * cleaned_at left null. Fenced on the deadline itself, so only a row really past it ends here.
 */
export async function abandonExpired(q: Q, id: string): Promise<boolean> {
  const { rowCount } = await q.query(
    `update channel_typing_reaction
     set abandoned_at = app_now(), credential_snapshot = null, quota_slot = null,
         next_attempt_at = null, retention_outcome = 'expired', updated_at = app_now()
     where id = $1 and expires_at <= app_now() and cleaned_at is null and abandoned_at is null`,
    [id],
  );
  return (rowCount ?? 0) > 0;
}

export async function loadTargets(
  q: Q,
  ids: string[],
): Promise<(WithdrawTarget & { young_pending: boolean })[]> {
  if (ids.length === 0) return [];
  const { rows } = await q.query<WithdrawTarget & { young_pending: boolean }>(
    `select ${TARGET_COLUMNS},
       (add_state = 'pending' and created_at > app_now() - $2 * interval '1 millisecond') as young_pending
     from channel_typing_reaction
     where id = any($1::text[]) and cleaned_at is null and abandoned_at is null`,
    [ids, UNCERTAIN_SWEEP_AFTER_MS],
  );
  return rows;
}
