import type pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { uuidv7Sql } from '../../../scripts/lib/effect-ids';
import { PRUNE_EFFECTS_SQL, PRUNE_ID_CLOCK_MARGIN_MS, pruneEffects } from '../../../workers/effects/recovery';
import { planReads, scratchDatabase } from '../scratch-database';

/**
 * Issue 35 (the drain's rate): effect pruning reads the primary key in ID order, bounded by the
 * staging time the UUIDv7 ID carries, so no index has to follow `finished_at_ms` and a batch
 * completion inserts into one index fewer (migrations/0260_effects_prune_by_id.sql). Pinned on a
 * scratch database at scale: 30,000 effects past retention, 5,000 delayed pending effects staged
 * before the cutoff (the only rows a pass reads and keeps), and 45,000 recent ones it must never
 * read.
 */
const db = scratchDatabase('rl_effprune');
const DAY = 86_400_000;
let pool: pg.Pool;

beforeAll(async () => {
  pool = await db.open();
  await pool.query(`insert into actor_instances (id, actor_type, actor_key)
                    select 'prune:' || g, 'prune', g::text from generate_series(0, 99) g`);
  const seed = (n: number, stagedAt: string, status: string, rest: string) =>
    pool.query(
      `insert into effects (id, origin_instance_id, kind, status, locked_by, finished_at_ms, run_at_ms)
       select ${uuidv7Sql(`${stagedAt} + g`)}, 'prune:' || (g % 100), 'noop', '${status}', ${rest}
         from generate_series(1, ${n}) g`,
    );
  // Staged three days ago, finished then: past the 1-day retention.
  await seed(30_000, `app_now_ms() - ${3 * DAY}`, 'completed', `null, app_now_ms() - ${3 * DAY}, 0`);
  // Staged two days ago, delayed by a week (MAX_EFFECT_DELAY_MS): old IDs that stay.
  await seed(5_000, `app_now_ms() - ${2 * DAY}`, 'pending', `null, null, app_now_ms() + ${5 * DAY}`);
  // Staged this past hour: finished, processing. Newer than the cutoff: never read.
  await seed(40_000, 'app_now_ms() - 3600000', 'completed', 'null, app_now_ms(), 0');
  await seed(5_000, 'app_now_ms() - 60000', 'processing', '1, null, 0');
  await pool.query('analyze');
}, 120_000);

afterAll(async () => {
  await db.drop();
});

it('effect pruning reads the primary key in ID order, bounded by the cutoff the IDs carry, and no finished index exists', async () => {
  const { rows: plan } = await pool.query(`explain (format json) ${PRUNE_EFFECTS_SQL}`, [
    DAY,
    1000,
    PRUNE_ID_CLOCK_MARGIN_MS,
  ]);
  const reads = planReads(plan[0]['QUERY PLAN'], 'effects');
  expect(reads.length).toBeGreaterThan(0);
  for (const r of reads) {
    expect(r.type).not.toBe('Seq Scan');
    expect(r.index).toBe('effects_pkey');
  }
  expect(reads.some((r) => /\(id < /.test(String(r.cond)))).toBe(true);
  const { rows: idx } = await pool.query(
    `select indexname from pg_indexes where tablename = 'effects' and indexdef like '%finished_at_ms%'`,
  );
  expect(idx).toEqual([]);
});

it('a pass deletes only terminal effects past retention, and reads no effect staged after the cutoff', async () => {
  let deleted = 0;
  for (let n = await pruneEffects(pool, DAY, 1000); n > 0; n = await pruneEffects(pool, DAY, 1000))
    deleted += n;
  expect(deleted).toBe(30_000);
  const { rows } = await pool.query<{ status: string; n: number }>(
    'select status, count(*)::int n from effects group by 1 order by 1',
  );
  expect(rows).toEqual([
    { status: 'completed', n: 40_000 },
    { status: 'pending', n: 5_000 },
    { status: 'processing', n: 5_000 },
  ]);
  // The pass that finds nothing: it reads the 5,000 old pending effects (kept) and stops at the
  // bound, before the 45,000 staged in the last hour.
  const client = await pool.connect();
  try {
    await client.query('begin');
    const { rows: plan } = await client.query(`explain (analyze, format json) ${PRUNE_EFFECTS_SQL}`, [
      DAY,
      1000,
      PRUNE_ID_CLOCK_MARGIN_MS,
    ]);
    await client.query('rollback');
    const read = planReads(plan[0]['QUERY PLAN'], 'effects').reduce(
      (s, r) => s + Number(r.node['Actual Rows'] ?? 0) + Number(r.node['Rows Removed by Filter'] ?? 0),
      0,
    );
    expect(read).toBeLessThanOrEqual(5_000);
  } finally {
    client.release();
  }
});

it('an effect ID that is not a UUIDv7 is refused where it is stored (pruning relies on the time it carries)', async () => {
  await expect(
    pool.query(
      `insert into effects (id, origin_instance_id, kind) values (gen_random_uuid(), 'prune:1', 'noop')`,
    ),
  ).rejects.toMatchObject({ code: '23514', constraint: 'effects_id_v7' });
});
