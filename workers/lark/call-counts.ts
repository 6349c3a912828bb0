import type { PoolClient } from '@neondatabase/serverless';

/**
 * The app's Lark calls per UTC day (`lark_call_counts`, migrations/0030_baseline_lark.sql): written by the rate
 * gate's admission of each call (rate-limits.ts `admit`), read by the webhook's accept
 * statement (an installation's `quiet` typing badge against its daily budget) and the console.
 * One row per (API host, App ID, day); the host without trailing slashes, as the gate keys it.
 */

/** The day a call counts in: database time, UTC, so every isolate and reader agrees. */
export const CALL_DAY = `(app_now() at time zone 'UTC')::date`;

/** SQL: the app's calls so far today (0 without a row); both arguments are SQL expressions. */
export function callsTodaySql(apiBase: string, appId: string): string {
  return `coalesce((select c.calls from lark_call_counts c
                     where c.api_base = ${apiBase} and c.app_id = ${appId} and c.day = ${CALL_DAY}), 0)`;
}

/** Days a count is kept after its own: a week of history for the console and incident review. */
export const CALL_COUNT_RETENTION_DAYS = 7;

/**
 * One bounded batch of counts older than the retention, oldest day first, `for update skip
 * locked` (the gate's increments lock only today's rows, which are never due). By key: a row
 * is never re-dated, so the age needs no re-check.
 */
const PRUNE = `
with old as (
  select api_base, app_id, day from lark_call_counts
   where day < ${CALL_DAY} - $2::int
   order by day limit $1
   for update skip locked
)
delete from lark_call_counts c using old
 where c.api_base = old.api_base and c.app_id = old.app_id and c.day = old.day`;

/** Rows deleted (at most `batch`); the housekeeping's `lark_calls` step. */
export async function pruneCallCounts(q: Pick<PoolClient, 'query'>, batch: number): Promise<number> {
  const { rowCount } = await q.query(PRUNE, [batch, CALL_COUNT_RETENTION_DAYS]);
  return rowCount ?? 0;
}
