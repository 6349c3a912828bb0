import { type Q, TARGET_COLUMNS, type WithdrawTarget } from '../types';
import { BACKOFF_BASE_MS, BACKOFF_MAX_MS, type PassScope, RETRY_CLAIM_LIMIT, scopeParam } from './limits';

export interface ClaimedRow extends WithdrawTarget {
  workspace_id: string;
  /** The claim count after this claim: the write-back fence. */
  attempts: number;
}

/**
 * ONE statement: due rows (not terminal, next attempt reached, still inside the seven-day
 * lifetime) locked with SKIP LOCKED, and the claim recorded before any remote call: attempts
 * + 1 and next_attempt_at = now + 30 s · 2^(attempts) capped at one hour. The lock ends with
 * the statement, so no lock is held across the remote calls; a concurrent worker cannot
 * claim the row again in this window because its next attempt has moved. app_now() is read
 * once (see expire.ts): `Index Cond: next_attempt_at <= $1` ends the scan at the first row
 * not yet due instead of filtering every pending row (the index also holds the null ones).
 * last_attempt_at records the claim for operators (the manual-removal listing, 0082).
 */
export const CLAIM = `
with now as materialized (select app_now() as t),
due as (
  select id from channel_typing_reaction
  where cleaned_at is null and abandoned_at is null
    and next_attempt_at <= (select t from now) and expires_at > (select t from now)
    and ($2::text[] is null or workspace_id = any($2::text[]))
  order by next_attempt_at
  limit $1
  for update skip locked
)
update channel_typing_reaction
set attempts = attempts + 1, last_attempt_at = (select t from now),
    next_attempt_at = (select t from now)
                      + least($4::float8, $3::float8 * power(2, least(attempts, 30))) * interval '1 millisecond',
    updated_at = (select t from now)
where id = any(array(select id from due))
returning ${TARGET_COLUMNS}, workspace_id, attempts`;

export async function claimDue(
  q: Q,
  opts: { limit?: number; scope?: PassScope } = {},
): Promise<ClaimedRow[]> {
  const limit = Math.min(opts.limit ?? RETRY_CLAIM_LIMIT, RETRY_CLAIM_LIMIT);
  const { rows } = await q.query<ClaimedRow>(CLAIM, [
    limit,
    scopeParam(opts.scope),
    BACKOFF_BASE_MS,
    BACKOFF_MAX_MS,
  ]);
  return rows;
}

export interface RetryNote {
  id: string;
  attempts: number;
  error: string;
  /** Not before now + this (Lark's 429 reset); 0 keeps the claim's backoff. */
  notBeforeMs: number;
  /**
   * Lark refused the app's credentials (10014/10015) on this attempt. Only ever sets the row's
   * classification (migration 0120); a deferral, a held route or another failure leaves it, and
   * only the rotation that makes the row due clears it.
   */
  credentialsRefused?: boolean;
}

/**
 * Failed outcomes of one pass, in one statement. Fenced by the claim count: if another
 * worker claimed the row since, its bookkeeping wins. Only ever pushes next_attempt_at later.
 * A failed withdrawal (`retry:…`, not a 429 deferral: nothing was sent) is also a
 * `withdraw_failed` incident for the console (migration 0090).
 */
export async function noteFailures(q: Q, notes: RetryNote[]): Promise<void> {
  if (notes.length === 0) return;
  await q.query(
    `with now as materialized (select app_now() as t),
     u as (
       update channel_typing_reaction r
       set last_error = x.error, updated_at = (select t from now),
           next_attempt_at = greatest(r.next_attempt_at, (select t from now) + x.wait * interval '1 millisecond'),
           credentials_refused = r.credentials_refused or coalesce(x.refused, false)
       from unnest($1::text[], $2::int[], $3::text[], $4::bigint[], $5::boolean[])
            as x(id, attempts, error, wait, refused)
       where r.id = x.id and r.attempts = x.attempts and r.cleaned_at is null and r.abandoned_at is null
       returning r.workspace_id, x.error)
     insert into typing_incidents (workspace_id, kind)
     select workspace_id, 'withdraw_failed' from u where error like 'retry:%'`,
    [
      notes.map((n) => n.id),
      notes.map((n) => n.attempts),
      notes.map((n) => n.error),
      notes.map((n) => n.notBeforeMs),
      notes.map((n) => n.credentialsRefused ?? null),
    ],
  );
}
