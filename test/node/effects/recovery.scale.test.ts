import type { Pool } from '@neondatabase/serverless';
import type pg from 'pg';
import { afterAll, expect, it } from 'vitest';
import { uuidv7Sql } from '../../../scripts/lib/effect-ids';
import { INSTANCES_WITH_WORK_SQL } from '../../../workers/effects/mailbox';
import { runRecoveryPass, STALE_CANDIDATES_SQL } from '../../../workers/effects/recovery';
import { effectConfig } from '../../../workers/effects/types';
import { scratchDatabase } from '../scratch-database';

const db = scratchDatabase('rl_eff', 4);
let pool: pg.Pool | undefined;

afterAll(async () => {
  await db.drop();
});

/** True when an EXPLAIN (format json) tree has a sequential scan of `effects`. */
function scansEffects(node: unknown): boolean {
  if (Array.isArray(node)) return node.some(scansEffects);
  if (node === null || typeof node !== 'object') return false;
  const n = node as Record<string, unknown>;
  if (n['Node Type'] === 'Seq Scan' && n['Relation Name'] === 'effects') return true;
  return Object.values(n).some(scansEffects);
}

it('the recovery pass reads only work in flight: no scan of a 200k-row effects table', async () => {
  pool = await db.open();
  await pool.query(`insert into actor_instances (id, actor_type, actor_key)
                    select 'scale:' || g, 'scale', g::text from generate_series(0, 99) g`);
  await pool.query(`insert into effects (id, origin_instance_id, kind, status, finished_at_ms)
                    select ${uuidv7Sql('app_now_ms() - 200000 + g')}, 'scale:' || (g % 100), 'noop', 'completed', app_now_ms()
                      from generate_series(1, 200000) g`);
  const { rows: dead } = await pool.query<{ id: string }>(
    "insert into effect_processes (role, protocol_version, heartbeat_at_ms) values ('dead', 2, app_now_ms() - 60000) returning id",
  );
  await pool.query(
    `update effects set status = 'processing', locked_by = $1, finished_at_ms = null
      where id in (select id from effects limit 50)`,
    [dead[0]!.id],
  );
  await pool.query(
    `insert into effect_recoveries (effect_id, origin_instance_id, recovery_operation, expires_at_ms)
                    select id, origin_instance_id, 'r', app_now_ms() + 86400000 from effects where locked_by = $1`,
    [dead[0]!.id],
  );
  await pool.query('analyze');

  const plan = await pool.query(`explain (format json) ${STALE_CANDIDATES_SQL}`, [30_000, 100, []]);
  expect(scansEffects(plan.rows[0]['QUERY PLAN'])).toBe(false);
  // The library runs over node-postgres too (the bench's transport).
  const report = await runRecoveryPass(pool as unknown as Pool, effectConfig({ claimScanLimit: 100 }));
  expect(report).toMatchObject({ candidates: 50, retired: 50, errors: 0 });
  const { rows } = await pool.query<{ n: number }>(
    "select count(*)::int as n from actor_mailbox where message_key like 'effect:%:recovery'",
  );
  expect(rows[0]!.n).toBe(50);

  // The minute poll (due messages, timers, delayed/retried effects) reads partial indexes too.
  await pool.query('analyze');
  const poll = await pool.query(`explain (format json) ${INSTANCES_WITH_WORK_SQL}`, [50, ['scale'], 1000]);
  expect(scansEffects(poll.rows[0]['QUERY PLAN'])).toBe(false);
}, 120_000);
