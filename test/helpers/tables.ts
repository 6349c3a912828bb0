import type { Pool } from '@neondatabase/serverless';

/** Row count and row versions of one table. */
export interface TableSum {
  rows: number;
  /** Sum and maximum of the live rows' `xmin` (the id of the transaction that wrote each). */
  versions: string;
}

let statement: Promise<string> | undefined;

/**
 * Every base table of the test database, as one `union all` statement (built once per file:
 * the migrations fixed the table set before the file started).
 */
function checksumStatement(pool: Pool): Promise<string> {
  statement ??= pool
    .query<{ t: string }>(
      `select format('%I.%I', table_schema, table_name) as t from information_schema.tables
       where table_type = 'BASE TABLE' and table_schema not in ('pg_catalog', 'information_schema')
       order by 1`,
    )
    .then(({ rows }) =>
      rows
        .map(
          ({ t }) =>
            `select '${t.replaceAll("'", "''")}' as t, count(*)::int as rows,
                    coalesce(sum(xmin::text::bigint), 0) || ':' || coalesce(max(xmin::text::bigint), 0)
                      as versions from ${t}`,
        )
        .join('\nunion all\n'),
    );
  return statement;
}

/**
 * Row count and row versions of every table: two equal snapshots mean nothing was inserted,
 * updated or deleted anywhere in between. Every insert or update writes a row version stamped
 * with its transaction's id (`xmin`), newer than any committed before the first snapshot (the
 * callers take it with no transaction open), so it raises the table's maximum; a delete lowers
 * the count; rolled-back versions are not live. This is stricter than comparing content (an
 * update that rewrites the same values is a write too) and costs one scan with no text
 * conversion or sort: the fuzz suite takes a snapshot per case over a database that grows by
 * thousands of rows, and an md5 of every row's sorted text made each case slower than the last.
 */
export async function tableSums(pool: Pool): Promise<Record<string, TableSum>> {
  const { rows } = await pool.query<{ t: string } & TableSum>(await checksumStatement(pool));
  return Object.fromEntries(rows.map(({ t, ...sum }) => [t, sum]));
}

/** The tables whose count or content differ between two snapshots. */
export function changedTables(before: Record<string, TableSum>, after: Record<string, TableSum>): string[] {
  const names = new Set([...Object.keys(before), ...Object.keys(after)]);
  return [...names].filter(
    (t) => before[t]?.rows !== after[t]?.rows || before[t]?.versions !== after[t]?.versions,
  );
}
