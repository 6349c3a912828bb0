import type { Pool, PoolClient } from '@neondatabase/serverless';
import { expect } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { waitUntilBlocked } from '../helpers/db';

/** The key column of each table a lock-protocol test holds or names a row of. */
const KEY = {
  actor_instances: 'id',
  effects: 'id',
  effect_recoveries: 'effect_id',
  effect_processes: 'id',
  effect_recovery_checks: 'id',
  channel_typing_reaction: 'id',
} as const;
export type LockedTable = keyof typeof KEY;

/** A connection holding row locks in an open transaction until `release()` (commit). */
export interface Holder {
  client: PoolClient;
  pid: number;
  release(): Promise<void>;
}

/**
 * Opens a transaction on its own connection and locks the given rows `for update`: the
 * barrier a racing operation blocks on. `cleanup` gets the release so a failed test never
 * leaves the lock behind.
 */
export async function holdRows(
  pool: Pool,
  cleanup: { end(): Promise<void> }[],
  rows: [LockedTable, string][],
): Promise<Holder> {
  const client = await pool.connect();
  await client.query('begin');
  const { rows: me } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
  let held = true;
  const holder: Holder = {
    client,
    pid: me[0]!.pid,
    async release() {
      if (!held) return;
      held = false;
      await client.query('commit');
      client.release();
    },
  };
  cleanup.push({ end: holder.release });
  for (const [table, key] of rows) {
    const res = await client.query(`select 1 from ${table} where ${KEY[table]} = $1 for update`, [key]);
    if (res.rowCount !== 1) throw new Error(`no ${table} row ${key} to hold`);
  }
  return holder;
}

/** A row by table and key, as `table (page,tuple)`: what `waitsOn` reports. */
export async function rowOf(pool: Pool, table: LockedTable, key: string): Promise<string> {
  const { rows } = await pool.query<{ ctid: string }>(
    `select ctid::text as ctid from ${table} where ${KEY[table]} = $1`,
    [key],
  );
  if (!rows[0]) throw new Error(`no ${table} row ${key}`);
  return `${table} ${rows[0].ctid}`;
}

/**
 * Waits until backend `pid` is blocked, then names the row it is blocked on, as `rowOf`
 * spells it. A backend waiting for a row lock holds (or queues for) the heavyweight tuple
 * lock of that exact row version, which pg_locks shows with its table, page and tuple; a
 * wait on anything else (a unique-index insert, a table lock) names no row and returns
 * `other`.
 */
export async function waitsOn(pool: Pool, pid: number): Promise<string> {
  await waitUntilBlocked(pool, pid);
  const { rows } = await pool.query<{ row: string }>(
    `select c.relname || ' (' || l.page || ',' || l.tuple || ')' as row
       from pg_locks l join pg_class c on c.oid = l.relation
      where l.pid = $1 and l.locktype = 'tuple'`,
    [pid],
  );
  return rows.length === 1 ? rows[0]!.row : 'other';
}

const SEQ_SCAN =
  'set local enable_indexscan = off; set local enable_indexonlyscan = off; ' +
  'set local enable_bitmapscan = off; set local enable_mergejoin = off';

/** Runs `fn` in a transaction whose plans scan tables sequentially (heap order). */
export function inHeapOrder<T>(p: Pool, fn: (tx: Parameters<Parameters<typeof withTx>[2]>[0]) => Promise<T>) {
  return withTx(p, { budgetMs: 10_000 }, async (tx) => {
    await tx.query(SEQ_SCAN);
    return fn(tx);
  });
}

/**
 * Lays `[lo, mid, hi]` out on the heap as hi, mid, lo (each update appends a row version), so a
 * path that locks in heap order locks against ID order; the layout is asserted, never assumed.
 */
export async function layOutAgainstIdOrder(
  pool: Pool,
  table: 'effects' | 'effect_recoveries',
  ids: string[],
) {
  const [lo, mid, hi] = ids;
  const [key, touch] = table === 'effects' ? ['id', 'kind = kind'] : ['effect_id', 'timeout_ms = timeout_ms'];
  for (const id of [mid, lo]) await pool.query(`update ${table} set ${touch} where ${key} = $1`, [id]);
  const { rows } = await pool.query<{ id: string }>(
    `select ${key} as id from ${table} where ${key} = any($1::uuid[]) order by ctid`,
    [ids],
  );
  expect(rows.map((r) => r.id)).toEqual([hi, mid, lo]);
}
