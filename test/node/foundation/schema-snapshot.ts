import pg from 'pg';

/**
 * The schema of a migrated database as comparable text: everything a migration can create in
 * the project's schemas (tables and their columns in order, constraints with their validity,
 * indexes with their validity, storage options, functions with their source, triggers,
 * sequences, views, types, comments, grants) plus what migrations insert (row counts and the
 * rows' non-time values). Two databases built by different migration histories are the same
 * schema exactly when their snapshots are equal; `diffSnapshots` names what differs.
 *
 * Dropped columns are left out (a column dropped and added back differs only in attnum), and
 * so is the migrator's own bookkeeping (`schema_migrations`, `schema_functions`).
 */
const SCHEMAS = ['public', 'private'];
const BOOKKEEPING = ['schema_migrations', 'schema_functions'];

export type Snapshot = Record<string, string>;

async function lines(c: pg.Client, sql: string, params: unknown[] = []): Promise<string[]> {
  const { rows } = await c.query<{ line: string }>(sql, params);
  return rows.map((r) => r.line);
}

export async function schemaSnapshot(url: string): Promise<Snapshot> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const s = [SCHEMAS, BOOKKEEPING];
    const out: Snapshot = {};
    const relations = await lines(
      c,
      `select format('%s.%s kind=%s persistence=%s options=%s acl=%s comment=%s', n.nspname, r.relname,
                     r.relkind, r.relpersistence, coalesce(r.reloptions::text, '-'),
                     coalesce(r.relacl::text, '-'), coalesce(obj_description(r.oid, 'pg_class'), '-')) as line
         from pg_class r join pg_namespace n on n.oid = r.relnamespace
        where n.nspname = any($1) and r.relkind in ('r', 'p', 'v', 'm', 'S', 'f')
          and not r.relname = any($2)
        order by 1`,
      s,
    );
    for (const l of relations) out[`relation ${l.split(' ')[0]}`] = l;
    const columns = await lines(
      c,
      `select format('%s.%s: %s', n.nspname, r.relname,
               string_agg(format('%s %s%s%s%s%s%s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                                 case when a.attnotnull then ' not null' else '' end,
                                 coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), ''),
                                 case when a.attidentity <> '' then ' identity ' || a.attidentity::text else '' end,
                                 case when a.attgenerated <> '' then ' generated ' || a.attgenerated::text else '' end,
                                 coalesce(' comment ' || col_description(r.oid, a.attnum), ''),
                                 coalesce(' acl ' || a.attacl::text, '')),
                          ', ' order by a.attnum)) as line
         from pg_class r join pg_namespace n on n.oid = r.relnamespace
         join pg_attribute a on a.attrelid = r.oid and a.attnum > 0 and not a.attisdropped
         left join pg_attrdef d on d.adrelid = r.oid and d.adnum = a.attnum
        where n.nspname = any($1) and r.relkind in ('r', 'p', 'v', 'm', 'f')
          and not r.relname = any($2)
        group by n.nspname, r.relname order by 1`,
      s,
    );
    for (const l of columns) out[`columns ${l.split(':')[0]}`] = l;
    const constraints = await lines(
      c,
      `select format('%s.%s %s: %s%s', n.nspname, r.relname, k.conname, pg_get_constraintdef(k.oid),
                     case when k.convalidated then '' else ' (not valid)' end) as line
         from pg_constraint k join pg_class r on r.oid = k.conrelid
         join pg_namespace n on n.oid = r.relnamespace
        where n.nspname = any($1) and not r.relname = any($2) order by 1`,
      s,
    );
    for (const l of constraints) out[`constraint ${l.split(':')[0]}`] = l;
    const indexes = await lines(
      c,
      `select format('%s: %s%s options=%s', x.relname, pg_get_indexdef(i.indexrelid),
                     case when i.indisvalid then '' else ' (invalid)' end, coalesce(x.reloptions::text, '-')) as line
         from pg_index i join pg_class x on x.oid = i.indexrelid
         join pg_namespace n on n.oid = x.relnamespace join pg_class t on t.oid = i.indrelid
        where n.nspname = any($1) and not t.relname = any($2) order by 1`,
      s,
    );
    for (const l of indexes) out[`index ${l.split(':')[0]}`] = l;
    const functions = await lines(
      c,
      `select format('%s.%s(%s) returns %s lang=%s volatility=%s strict=%s secdef=%s config=%s acl=%s comment=%s body=%s',
                     n.nspname, p.proname, pg_get_function_identity_arguments(p.oid),
                     pg_get_function_result(p.oid), l.lanname, p.provolatile, p.proisstrict,
                     p.prosecdef, coalesce(p.proconfig::text, '-'), coalesce(p.proacl::text, '-'),
                     coalesce(obj_description(p.oid, 'pg_proc'), '-'), p.prosrc) as line
         from pg_proc p join pg_namespace n on n.oid = p.pronamespace
         join pg_language l on l.oid = p.prolang
        where n.nspname = any($1) order by 1`,
      [SCHEMAS],
    );
    for (const l of functions) out[`function ${l.split(' returns ')[0]}`] = l;
    const triggers = await lines(
      c,
      `select format('%s: %s', t.tgname, pg_get_triggerdef(t.oid)) as line
         from pg_trigger t join pg_class r on r.oid = t.tgrelid join pg_namespace n on n.oid = r.relnamespace
        where n.nspname = any($1) and not t.tgisinternal order by 1`,
      [SCHEMAS],
    );
    for (const l of triggers) out[`trigger ${l.split(':')[0]}`] = l;
    const views = await lines(
      c,
      `select format('%s.%s: %s', schemaname, viewname, definition) as line
         from pg_views where schemaname = any($1) order by 1`,
      [SCHEMAS],
    );
    for (const l of views) out[`view ${l.split(':')[0]}`] = l;
    const types = await lines(
      c,
      `select format('%s.%s type=%s enum=%s', n.nspname, t.typname, t.typtype,
                     coalesce((select string_agg(e.enumlabel, ',' order by e.enumsortorder)
                                 from pg_enum e where e.enumtypid = t.oid), '-')) as line
         from pg_type t join pg_namespace n on n.oid = t.typnamespace
        where n.nspname = any($1) and t.typtype in ('e', 'd', 'c')
          and not exists (select 1 from pg_class r where r.reltype = t.oid) order by 1`,
      [SCHEMAS],
    );
    for (const l of types) out[`type ${l.split(' ')[0]}`] = l;
    const namespaces = await lines(
      c,
      `select format('%s acl=%s', nspname, coalesce(nspacl::text, '-')) as line
         from pg_namespace where nspname = any($1) order by 1`,
      [SCHEMAS],
    );
    for (const l of namespaces) out[`schema ${l.split(' ')[0]}`] = l;
    // What migrations insert: every table's rows, time columns left out (they hold the
    // moment the migration ran).
    const tables = await c.query<{ name: string; cols: string[] | null }>(
      `select format('%I.%I', n.nspname, r.relname) as name,
              array_agg(quote_ident(a.attname) order by a.attnum)
                filter (where a.atttypid not in ('timestamptz'::regtype, 'timestamp'::regtype)) as cols
         from pg_class r join pg_namespace n on n.oid = r.relnamespace
         join pg_attribute a on a.attrelid = r.oid and a.attnum > 0 and not a.attisdropped
        where n.nspname = any($1) and r.relkind in ('r', 'p') and not r.relname = any($2)
        group by n.nspname, r.relname order by 1`,
      s,
    );
    for (const t of tables.rows) {
      const cols = t.cols?.length ? t.cols.join(', ') : "''";
      const { rows } = await c.query<{ n: number; rows: string | null }>(
        `select count(*)::int as n, string_agg(v::text, ' | ' order by v::text) as rows
           from (select ${cols} from ${t.name}) v`,
      );
      out[`rows ${t.name}`] = `${t.name}: ${rows[0]!.n} ${rows[0]!.rows ?? ''}`;
    }
    return out;
  } finally {
    await c.end();
  }
}

/** Every entry that one snapshot has and the other lacks or has differently, one line each. */
export function diffSnapshots(expected: Snapshot, actual: Snapshot): string[] {
  const keys = [...new Set([...Object.keys(expected), ...Object.keys(actual)])].sort();
  const out: string[] = [];
  for (const k of keys) {
    if (expected[k] === actual[k]) continue;
    if (expected[k] === undefined) out.push(`+ ${actual[k]}`);
    else if (actual[k] === undefined) out.push(`- ${expected[k]}`);
    else out.push(`~ ${k}\n    was: ${expected[k]}\n    now: ${actual[k]}`);
  }
  return out;
}
