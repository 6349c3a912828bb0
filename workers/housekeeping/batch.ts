import type { PoolClient } from '@neondatabase/serverless';

export type Q = Pick<PoolClient, 'query'>;

/**
 * One bounded batch of a table whose rows are never updated, deleted by ctid: picked oldest
 * first through the `orderBy` index, `for update skip locked` (two runs split the work), and
 * deleted straight from the heap pages the scan just read (by key it would be one index
 * descent per row). A row updated after the statement's snapshot would keep an invisible
 * ctid and wait for the next run. `where` may read `(select t from now)`: app_now() read once,
 * so the cutoff is the index's `Index Cond` and a run with nothing due reads a few pages.
 */
export function ctidBatchDelete(sql: {
  table: string;
  where: string;
  orderBy: string;
  limit: string;
}): string {
  return `with now as materialized (select app_now() as t),
old as (select ctid as old_ctid from ${sql.table} where ${sql.where}
        order by ${sql.orderBy} limit ${sql.limit} for update skip locked)
delete from ${sql.table} where ctid = any(array(select old_ctid from old))`;
}

/** Runs one housekeeping batch delete; how many rows it deleted. */
export async function deleteBatch(q: Q, statement: string, params: unknown[]): Promise<number> {
  const { rowCount } = await q.query(statement, params);
  return rowCount ?? 0;
}
