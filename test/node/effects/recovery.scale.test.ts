import type { Pool } from '@neondatabase/serverless';
import pg from 'pg';
import { afterAll, expect, inject, it } from 'vitest';
import { uuidv7Sql } from '../../../scripts/lib/effect-ids';
import { migrate } from '../../../scripts/lib/migrator';
import { adminQuery, withDatabase } from '../../../scripts/lib/postgres';
import { INSTANCES_WITH_WORK_SQL } from '../../../workers/effects/mailbox';
import { runRecoveryPass, STALE_CANDIDATES_SQL } from '../../../workers/effects/recovery';
import { effectConfig } from '../../../workers/effects/types';
import { MIGRATIONS_DIR } from '../../setup/stack';

const adminUrl = inject('adminUrl');
const name = `rl_eff_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
let pool: pg.Pool | undefined;

afterAll(async () => {
  await pool?.end();
  await adminQuery(adminUrl, `drop database if exists ${name} with (force)`).catch(() => undefined);
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
  await adminQuery(adminUrl, `create database ${name}`);
  const url = withDatabase(adminUrl, name);
  await migrate(url, { dir: MIGRATIONS_DIR });
  pool = new pg.Pool({ connectionString: url, max: 4 });
  // A client the final `drop database … with (force)` terminates (a hook that timed out left it
  // busy) must not crash the run with an unhandled 'error': the timed-out hook already fails.
  pool.on('error', (err) => console.error(`${name}: pool client error after the test: ${err.message}`));
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
