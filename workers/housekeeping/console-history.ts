import { ctidBatchDelete, deleteBatch, type Q } from './batch';

/**
 * The console's history tables (migration 0090) and their retention periods
 * (docs/retention-rules.md). Every row is history for a panel or the audit; none is work.
 */
export const CONSOLE_RETENTION = {
  /** Operator actions: a quarter covers an incident review. */
  console_audit: '90 days',
  /** ~2,900 runs a day; the panel shows the last 30. */
  typing_maintenance_runs: '3 days',
  /** Quota skips and failed withdrawals; the panel counts 24 h. */
  typing_incidents: '2 days',
  /** One row per app; a failure older than a month is no longer news. */
  lark_api_errors: '30 days',
} as const;

/**
 * One bounded batch of each table, oldest first through its `at` index, `for update skip
 * locked` so two runs split the work. By ctid (batch.ts: the history rows are never updated), except
 * lark_api_errors, whose row is overwritten by the next failure: by key, and the delete
 * re-checks the age so a failure recorded meanwhile stays.
 */
function pruneSql(table: keyof typeof CONSOLE_RETENTION): string {
  const age = CONSOLE_RETENTION[table];
  if (table === 'lark_api_errors')
    return `with now as materialized (select app_now() as t),
old as (select api_base, app_id from lark_api_errors where at < (select t from now) - interval '${age}'
        order by at limit $1 for update skip locked)
delete from lark_api_errors e using old
where e.api_base = old.api_base and e.app_id = old.app_id and e.at < (select t from now) - interval '${age}'`;
  return ctidBatchDelete({
    table,
    where: `at < (select t from now) - interval '${age}'`,
    orderBy: 'at',
    limit: '$1',
  });
}

const STATEMENTS = (Object.keys(CONSOLE_RETENTION) as (keyof typeof CONSOLE_RETENTION)[]).map(pruneSql);

/** Rows deleted across the four tables (at most `batch` from each). */
export async function pruneConsoleHistory(q: Q, batch: number): Promise<number> {
  let deleted = 0;
  for (const sql of STATEMENTS) deleted += await deleteBatch(q, sql, [batch]);
  return deleted;
}
