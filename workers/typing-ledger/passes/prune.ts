import type { Pool } from '@neondatabase/serverless';
import { type Clock, systemClock } from '../../clock';
import { withTx } from '../../db/tx';
import { type PassScope, PRUNE_BUDGET_MS, PRUNE_LIMIT, scopeParam, TOMBSTONE_RETENTION_MS } from './limits';

/**
 * Success (cleaned) and failure (abandoned) tombstones, seven days after their terminal
 * timestamp. A terminal row holds no secret (the 0040 check constraint forbids a snapshot
 * on it), so this is the record's end, not a redaction. The cutoff is read once (see
 * expire.ts): `Index Cond` on the terminal index, so an empty pass costs a few pages, not a
 * walk of every tombstone.
 */
export const PRUNE_TOMBSTONES = `
with now as materialized (select app_now() as t),
old as (
  select id from channel_typing_reaction
  where (cleaned_at is not null or abandoned_at is not null)
    and coalesce(cleaned_at, abandoned_at) <= (select t from now) - $2 * interval '1 millisecond'
    and ($3::text[] is null or workspace_id = any($3::text[]))
  order by coalesce(cleaned_at, abandoned_at)
  limit $1
  for update skip locked
)
delete from channel_typing_reaction where id = any(array(select id from old))`;

/**
 * Settlement cutoffs only matter while a registration for their inputs can still arrive
 * (seconds; a message older than two minutes is refused). Kept as long as the tombstones.
 */
export const PRUNE_CUTOFFS = `
with now as materialized (select app_now() as t),
old as (
  select ctid as c from channel_typing_settlement
  where created_at <= (select t from now) - $2 * interval '1 millisecond'
  order by created_at
  limit $1
  for update skip locked
)
delete from channel_typing_settlement where ctid = any(array(select c from old))`;

/**
 * Lark rate-limit resets (lark/rate-limits.ts) whose time has passed: an expired row holds
 * nothing back, and the next 429 inserts a fresh one. Index `lark_rate_limits_not_before`;
 * the delete finds its rows by ctid (a join on the three key columns planned as a hash join
 * over a sequential scan). The rows are locked by this statement, so no upsert can move them
 * in between; the age is checked again anyway.
 */
export const PRUNE_RATE_LIMITS = `
with now as materialized (select app_now() as t),
old as (
  select ctid as c from lark_rate_limits
  where not_before <= (select t from now)
  order by not_before
  limit $1
  for update skip locked
)
delete from lark_rate_limits
where ctid = any(array(select c from old)) and not_before <= (select t from now)`;

export interface PruneReport {
  pruned: number;
  cutoffsPruned: number;
  rateLimitsPruned: number;
  durationMs: number;
}

/**
 * The pruning pass: its own two-second budget, at most 1,000 rows across tombstones,
 * settlement cutoffs and expired rate-limit resets, SKIP LOCKED.
 */
export async function runPruning(
  pool: Pool,
  opts: { scope?: PassScope; clock?: Clock; budgetMs?: number; limit?: number } = {},
): Promise<PruneReport> {
  const clock = opts.clock ?? systemClock;
  const started = clock.now();
  const limit = opts.limit ?? PRUNE_LIMIT;
  const scope = scopeParam(opts.scope);
  const counts = await withTx(
    pool,
    { budgetMs: opts.budgetMs ?? PRUNE_BUDGET_MS, maxAttempts: 1, clock },
    async (tx) => {
      const a = await tx.query(PRUNE_TOMBSTONES, [limit, TOMBSTONE_RETENTION_MS, scope]);
      const pruned = a.rowCount ?? 0;
      // Cutoffs and rate-limit resets share the row cap; a scoped (test) run leaves other
      // workspaces' data, and the apps' shared resets, alone.
      const left = scope ? 0 : limit - pruned;
      const b = left > 0 ? await tx.query(PRUNE_CUTOFFS, [left, TOMBSTONE_RETENTION_MS]) : { rowCount: 0 };
      const cutoffsPruned = b.rowCount ?? 0;
      const rest = left - cutoffsPruned;
      const c = rest > 0 ? await tx.query(PRUNE_RATE_LIMITS, [rest]) : { rowCount: 0 };
      return { pruned, cutoffsPruned, rateLimitsPruned: c.rowCount ?? 0 };
    },
  );
  return { ...counts, durationMs: clock.now() - started };
}
