import type { PoolClient } from '@neondatabase/serverless';
import { metric } from '../metrics';
import {
  eligible,
  NOW,
  type RetentionCursor,
  type RetentionLimits,
  type RetentionTable,
  retentionMs,
  START_KEY,
  TABLE_NAME,
} from './eligibility';

/** Rows per database batch, fixed by the spec. */
export const BATCH_ROWS = 250;

export interface BatchResult {
  table: RetentionTable;
  selected: number;
  deleted: number;
  /** The last key picked, or null when nothing was: the table is swept to its end. */
  last: RetentionCursor | null;
  /** Fewer rows than the limit: nothing eligible remains after `last` in this table. */
  exhausted: boolean;
}

/**
 * One batch is one statement: pick up to `limit` eligible rows after the cursor in key
 * order (an index range scan that stops at the limit), lock them, delete them. A row a
 * concurrent transaction deleted first is simply not returned by the delete: deleting an
 * already deleted row is a no-op, never an error. Rows are locked with plain `for update`
 * rather than skipped: the cleanup is a singleton, writers never hold receipt or fence rows
 * for longer than their transaction budget, and the batch's lock_timeout bounds the wait.
 */
function deleteSql(table: RetentionTable): string {
  const name = TABLE_NAME[table];
  return `with ${NOW}, picked as (
    select actor_id, operation_id, created_at from ${name}
    where ${eligible({ retentionMs: '$1', drainGraceMs: '$2' })}
      and (created_at, actor_id, operation_id) > ($3::timestamptz, $4::text, $5::text)
    order by created_at, actor_id, operation_id
    limit $6
    for update
  ), gone as (
    delete from ${name} t
    using unnest(array(select actor_id from picked order by created_at, actor_id, operation_id),
                 array(select operation_id from picked order by created_at, actor_id, operation_id))
          as p(actor_id, operation_id)
    where t.actor_id = p.actor_id and t.operation_id = p.operation_id
    returning 1
  ), last as (
    select created_at::text as created_at, actor_id, operation_id from picked
    order by created_at desc, actor_id desc, operation_id desc limit 1
  )
  select (select count(*) from picked)::int as selected, (select count(*) from gone)::int as deleted,
    last.created_at, last.actor_id, last.operation_id
  from (select 1) one left join last on true`;
}

export const BATCH_SQL: Record<RetentionTable, string> = {
  receipts: deleteSql('receipts'),
  fences: deleteSql('fences'),
};

export async function deleteBatch(
  client: Pick<PoolClient, 'query'>,
  table: RetentionTable,
  limits: RetentionLimits,
  after: RetentionCursor | null,
  limit = BATCH_ROWS,
): Promise<BatchResult> {
  const from = after && after.table === table ? after : START_KEY;
  const { rows } = await client.query<{
    selected: number;
    deleted: number;
    created_at: string | null;
    actor_id: string | null;
    operation_id: string | null;
  }>(BATCH_SQL[table], [
    retentionMs(limits, table),
    limits.drainGraceMs,
    from.createdAt,
    from.actorId,
    from.operationId,
    Math.min(limit, BATCH_ROWS),
  ]);
  const row = rows[0]!;
  metric('retention_batch_rows', row.deleted, 'deleted', table);
  const last =
    row.created_at !== null
      ? { table, createdAt: row.created_at, actorId: row.actor_id!, operationId: row.operation_id! }
      : null;
  return { table, selected: row.selected, deleted: row.deleted, last, exhausted: row.selected < limit };
}
