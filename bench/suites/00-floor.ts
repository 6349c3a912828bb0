import type { BenchStack } from '../lib/stack';

type Queryable = { query(sql: string, params?: unknown[]): Promise<unknown> };

import { type BenchRow, timeSequential } from '../lib/stats';

/**
 * The floor every other figure is compared with: one round trip of `select 1` and of a
 * one-row insert, through the Neon driver and bridge, and directly over TCP.
 */
export async function run(stack: BenchStack): Promise<BenchRow[]> {
  const n = Number(process.env.BENCH_N ?? 1000);
  const direct = stack.pg(1);
  const neon = stack.neon(1);
  await direct.query('create table if not exists bench_floor (id bigserial primary key, v int)');
  const rows: BenchRow[] = [];
  for (const [via, pool] of [
    ['tcp (pg)', direct],
    ['neon driver + bridge', neon],
  ] as [string, Queryable][]) {
    await pool.query('select 1'); // connect outside the measurement
    const sel = await timeSequential(n, () => pool.query('select 1'));
    rows.push({ suite: 'floor', case: `select 1 via ${via}`, n, 'p50 ms': sel.p50, 'p99 ms': sel.p99 });
    const ins = await timeSequential(n, (i) => pool.query('insert into bench_floor (v) values ($1)', [i]));
    rows.push({ suite: 'floor', case: `insert 1 row via ${via}`, n, 'p50 ms': ins.p50, 'p99 ms': ins.p99 });
  }
  return rows;
}
