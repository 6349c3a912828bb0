import type { Pool } from '@neondatabase/serverless';

/** Row count and content checksum of one table. */
export interface TableSum {
  rows: number;
  md5: string;
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
                    md5(coalesce(string_agg(x::text, ',' order by x::text), '')) as md5 from ${t} x`,
        )
        .join('\nunion all\n'),
    );
  return statement;
}

/**
 * Row count and content (md5 of every row's text, in a stable order) of every table: two
 * equal snapshots mean nothing was inserted, updated or deleted anywhere in between.
 */
export async function tableSums(pool: Pool): Promise<Record<string, TableSum>> {
  const { rows } = await pool.query<{ t: string } & TableSum>(await checksumStatement(pool));
  return Object.fromEntries(rows.map(({ t, ...sum }) => [t, sum]));
}

/** The tables whose count or content differ between two snapshots. */
export function changedTables(before: Record<string, TableSum>, after: Record<string, TableSum>): string[] {
  const names = new Set([...Object.keys(before), ...Object.keys(after)]);
  return [...names].filter((t) => before[t]?.rows !== after[t]?.rows || before[t]?.md5 !== after[t]?.md5);
}
