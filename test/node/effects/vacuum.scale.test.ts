import type { Pool } from '@neondatabase/serverless';
import type pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { uuidv7Sql } from '../../../scripts/lib/effect-ids';
import { registerProcess } from '../../../workers/effects/processes';
import { claimEffects, completeEffects } from '../../../workers/effects/scheduler';
import { scratchDatabase } from '../scratch-database';

/**
 * Issue 35: the queue tables are vacuumed by a fixed count of dead row versions, and their
 * vacuums always clean the indexes (migrations/0270_queue_vacuum_policy.sql). A claim reads
 * effects_pending from its front; every claimed effect leaves its old entry there, pointing at a
 * dead version, until a vacuum removes it from the index. Both tables keep a day of finished
 * rows, so autovacuum's default trigger (a fifth of the table) let that front grow all day, and
 * with few dead versions on a large table a vacuum skipped the indexes altogether.
 */
const db = scratchDatabase('rl_effvacuum');
let pool: pg.Pool;
const asPool = () => pool as unknown as Pool;

/** The dead row versions that start an autovacuum of `table` when it holds `rows` rows. */
async function autovacuumTrigger(table: string, rows: number) {
  const { rows: r } = await pool.query<{ dead: number; inserted: number; cleanup: string | null }>(
    `with o as (select coalesce(reloptions, '{}') opts from pg_class where oid = $1::regclass),
          opt as (select split_part(x, '=', 1) k, split_part(x, '=', 2) v from o, unnest(o.opts) x)
     select coalesce((select v from opt where k = 'autovacuum_vacuum_threshold'),
                     current_setting('autovacuum_vacuum_threshold'))::float8
            + coalesce((select v from opt where k = 'autovacuum_vacuum_scale_factor'),
                       current_setting('autovacuum_vacuum_scale_factor'))::float8 * $2 as dead,
            coalesce((select v from opt where k = 'autovacuum_vacuum_insert_threshold'),
                     current_setting('autovacuum_vacuum_insert_threshold'))::float8
            + coalesce((select v from opt where k = 'autovacuum_vacuum_insert_scale_factor'),
                       current_setting('autovacuum_vacuum_insert_scale_factor'))::float8 * $2 as inserted,
            (select v from opt where k = 'vacuum_index_cleanup') as cleanup`,
    [table, rows],
  );
  return r[0]!;
}

beforeAll(async () => {
  pool = await db.open();
  await pool.query(`insert into actor_instances (id, actor_type, actor_key)
                    select 'vac:' || g, 'vac', g::text from generate_series(0, 99) g`);
  // A day's retained effects, finished (100,000 rows, ~3,500 heap pages), then 1,200 due ones.
  await pool.query(
    `insert into effects (id, origin_instance_id, kind, status, finished_at_ms, result)
     select ${uuidv7Sql('app_now_ms() - 3600000 + g')}, 'vac:' || (g % 100), 'noop', 'completed',
            app_now_ms(), 'null' from generate_series(1, 100000) g`,
  );
  await pool.query(
    `insert into effects (id, origin_instance_id, kind)
     select ${uuidv7Sql('app_now_ms() + g')}, 'vac:' || (g % 100), 'noop' from generate_series(1, 1200) g`,
  );
  await pool.query('vacuum analyze effects');
}, 120_000);

afterAll(async () => {
  await db.drop();
});

it('the queue tables are vacuumed after 10,000 dead row versions, whatever they keep, and their vacuums clean the indexes', async () => {
  for (const table of ['effects', 'actor_mailbox'])
    for (const rows of [100_000, 10_000_000]) {
      const t = await autovacuumTrigger(table, rows);
      expect({ table, rows, dead: t.dead, inserted: t.inserted, cleanup: t.cleanup }).toEqual({
        table,
        rows,
        dead: 10_000,
        inserted: 10_000,
        cleanup: 'on',
      });
    }
});

it('a vacuum of effects after the claims of a few effects on a large table still cleans its indexes', async () => {
  // 1,200 claimed and completed through the runtime's own statements: 2,400 dead versions on
  // ~45 heap pages, under the 2% of the table's pages below which a vacuum skipped the indexes
  // and left every claimed effect's entry at the front of effects_pending.
  const processId = await registerProcess(asPool(), 'vacuum-test');
  let done = 0;
  for (;;) {
    const claimed = await claimEffects(pool, processId, { limit: 100 });
    if (claimed.length === 0) break;
    const r = await completeEffects(
      asPool(),
      processId,
      claimed.map((e) => ({ id: e.id, result: null })),
    );
    done += r.accepted.length;
  }
  expect(done).toBe(1200);
  // What autovacuum runs: the table's own options decide whether its indexes are cleaned.
  const client = await pool.connect();
  const notices: string[] = [];
  const onNotice = (m: { message?: string }) => notices.push(m.message ?? '');
  client.on('notice', onNotice);
  try {
    await client.query('vacuum (verbose) effects');
  } finally {
    client.off('notice', onNotice);
    client.release();
  }
  const report = notices.find((m) => /finished vacuuming ".*\.public\.effects"/.test(m));
  expect(report, notices.join('\n')).toBeDefined();
  expect(report).toMatch(/index scans: 1/);
  expect(report).toMatch(/had 2400 dead item identifiers removed/);
});
