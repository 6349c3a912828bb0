import type { Pool } from '@neondatabase/serverless';
import type { Clock } from '../../clock';
import { systemClock } from '../../clock';
import { withTx } from '../../db/tx';
import { log } from '../../log';
import {
  EXPIRE_BUDGET_MS,
  EXPIRE_LIMIT,
  EXPIRE_TASKLESS_SHARE,
  type PassScope,
  scopeParam,
  TASKLESS_EXPIRY_MS,
} from './limits';

/**
 * Seven-day maximum lifetime, every indicator (running tasks, uncertain Adds, permanent
 * credential failures included): abandoned_at recorded, snapshot erased, slot released,
 * cleaned_at left null. next_attempt_at is cleared and the claim also filters on expires_at,
 * so no remote retry is claimed after the deadline. recordAdded never clears abandoned_at:
 * a late Add result cannot resurrect the row (it deletes its own badge instead).
 *
 * Plan shape (docs/typing-maintenance.md "Statement plans"), shared by every pass statement:
 * app_now() is volatile, so compared per row it is a Filter, never an index bound, and a
 * pass with fewer due rows than its cap walked the whole partial index (5 s at 1M rows).
 * Read once in a materialized CTE it is an InitPlan parameter: `Index Cond: expires_at <= $1`
 * stops at the first row not yet due, and every row of the batch gets the same timestamp.
 * The write finds its rows by primary key (`id = any(array(...))`), never a hash join over a
 * sequential scan of the ledger.
 */
export const EXPIRE_LIFETIME = `
with now as materialized (select app_now() as t),
due as (
  select id from channel_typing_reaction
  where expires_at <= (select t from now) and cleaned_at is null and abandoned_at is null
    and ($2::text[] is null or workspace_id = any($2::text[]))
  order by expires_at
  limit $1
  for update skip locked
)
update channel_typing_reaction
set abandoned_at = (select t from now), credential_snapshot = null, quota_slot = null,
    next_attempt_at = null, retention_outcome = 'expired', updated_at = (select t from now)
where id = any(array(select id from due))
returning workspace_id`;

/**
 * Two-minute taskless expiry: the badge is withdrawn (the retry pass runs right after this
 * one and picks the row up: next_attempt_at = now), and settled_at marks cleanup ownership so
 * a late Add deletes its own badge. The INPUT is not settled (no settlement cutoff is written,
 * no task is cancelled, no run restarted): the engine can still process it on later traffic.
 */
export const EXPIRE_TASKLESS = `
with now as materialized (select app_now() as t),
due as (
  select id from channel_typing_reaction
  where taskless and settled_at is null and cleaned_at is null and abandoned_at is null
    and created_at <= (select t from now) - $3 * interval '1 millisecond'
    and ($2::text[] is null or workspace_id = any($2::text[]))
  order by created_at
  limit $1
  for update skip locked
)
update channel_typing_reaction
set settled_at = (select t from now), settled_by = 'maintenance:taskless_expiry',
    settle_outcome = 'taskless_expired', retention_outcome = 'taskless_expired',
    next_attempt_at = (select t from now), updated_at = (select t from now)
where id = any(array(select id from due))
returning workspace_id`;

export interface ExpireReport {
  expired: number;
  tasklessExpired: number;
  durationMs: number;
}

/**
 * The expiration pass: its own two-second database budget (statement_timeout inside withTx),
 * at most 1,000 rows across both kinds, SKIP LOCKED. Lifetime expiry goes first: it erases
 * credentials, the one thing that must not wait. The taskless expiry has its own share of
 * the limit (EXPIRE_TASKLESS_SHARE, issue 28 hole 7): a crash-lost timer must not wait for a
 * week-old lifetime backlog to drain. What the taskless expiry leaves of its share goes back
 * to the lifetime backlog in a second lifetime statement, so an idle taskless side costs
 * the backlog nothing.
 */
export async function runExpiration(
  pool: Pool,
  opts: { scope?: PassScope; clock?: Clock; budgetMs?: number; limit?: number } = {},
): Promise<ExpireReport> {
  const clock = opts.clock ?? systemClock;
  const started = clock.now();
  const limit = opts.limit ?? EXPIRE_LIMIT;
  const scope = scopeParam(opts.scope);
  const { lifetime, taskless } = await withTx(
    pool,
    { budgetMs: opts.budgetMs ?? EXPIRE_BUDGET_MS, maxAttempts: 1, clock },
    async (tx) => {
      const share = Math.min(EXPIRE_TASKLESS_SHARE, limit);
      const a = await tx.query<{ workspace_id: string }>(EXPIRE_LIFETIME, [limit - share, scope]);
      const left = limit - a.rows.length;
      const b =
        left > 0
          ? await tx.query<{ workspace_id: string }>(EXPIRE_TASKLESS, [left, scope, TASKLESS_EXPIRY_MS])
          : { rows: [] };
      // The lifetime statement filled its part: give it what the taskless side did not use.
      const rest = limit - a.rows.length - b.rows.length;
      const c =
        a.rows.length === limit - share && rest > 0
          ? await tx.query<{ workspace_id: string }>(EXPIRE_LIFETIME, [rest, scope])
          : { rows: [] };
      return { lifetime: [...a.rows, ...c.rows], taskless: b.rows };
    },
  );
  warnPerWorkspace('typing_indicators_expired', lifetime);
  warnPerWorkspace('typing_taskless_indicators_expired', taskless);
  return { expired: lifetime.length, tasklessExpired: taskless.length, durationMs: clock.now() - started };
}

/** Spec: expiry emits a warning with workspace ID and count (never a row's contents). */
function warnPerWorkspace(event: string, rows: { workspace_id: string }[]) {
  const counts = new Map<string, number>();
  for (const r of rows) counts.set(r.workspace_id, (counts.get(r.workspace_id) ?? 0) + 1);
  for (const [workspaceId, count] of counts) log.warn(event, { workspaceId, count });
}
