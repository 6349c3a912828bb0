import type pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { uuidv7Sql } from '../../../scripts/lib/effect-ids';
import { INSTANCES_WITH_WORK_SQL } from '../../../workers/effects/mailbox';
import { RECOVERY_DUE_SQL, STALE_CANDIDATES_OF_INSTANCE_SQL } from '../../../workers/effects/recovery';
import { planReads, scratchDatabase } from '../scratch-database';

/**
 * Issue 35 holes 3 and 4, pinned by plan on a scratch database at scale:
 * - every pump's RECOVERY_DUE_SQL and the host's own pass (STALE_CANDIDATES_OF_INSTANCE_SQL)
 *   read one instance's processing effects through `effects_origin_status`, never every
 *   effect in flight in the service (12,000 here, across 1,200 instances, all with live owners);
 * - the minute poll reads due messages through `actor_mailbox_due` (due-time order), never a
 *   sequential scan of the mailbox.
 */
const db = scratchDatabase('rl_eff35');
let pool: pg.Pool;

beforeAll(async () => {
  pool = await db.open();
  await pool.query(`insert into actor_instances (id, actor_type, actor_key)
                    select 'scale:' || g, 'scale', g::text from generate_series(0, 1199) g`);
  const { rows } = await pool.query<{ id: string }>(
    `insert into effect_processes (role, protocol_version)
     select 'live', 2 from generate_series(1, 40) returning id`,
  );
  const owners = rows.map((r) => r.id);
  // 12,000 effects in flight (10 per instance), owners spread over 40 live processes, and
  // 40,000 finished ones kept for retention.
  await pool.query(
    `insert into effects (id, origin_instance_id, kind, status, locked_by, locked_at_ms, attempts)
     select ${uuidv7Sql('app_now_ms() - 100000 + g')}, 'scale:' || (g % 1200), 'noop', 'processing',
            ($1::bigint[])[1 + g % 40], app_now_ms(), 1
       from generate_series(1, 12000) g`,
    [owners],
  );
  await pool.query(`insert into effects (id, origin_instance_id, kind, status, finished_at_ms)
                    select ${uuidv7Sql('app_now_ms() - 50000 + g')}, 'scale:' || (g % 1200), 'noop', 'completed', app_now_ms()
                      from generate_series(1, 40000) g`);
  // Mailbox: 60,000 delivered, 3,000 pending not yet due (delayed), 200 pending due.
  await pool.query(`insert into actor_mailbox (instance_id, message_key, payload, state, delivered_at_ms)
                    select 'scale:' || (g % 1200), 'old:' || g, 'null', 'delivered', app_now_ms()
                      from generate_series(1, 60000) g`);
  await pool.query(`insert into actor_mailbox (instance_id, message_key, payload, available_at_ms)
                    select 'scale:' || (g % 1200), 'later:' || g, 'null', app_now_ms() + 3600000
                      from generate_series(1, 3000) g`);
  await pool.query(`insert into actor_mailbox (instance_id, message_key, payload)
                    select 'scale:' || (g % 1200), 'now:' || g, 'null' from generate_series(1, 200) g`);
  await pool.query('analyze');
}, 120_000);

afterAll(async () => {
  await db.drop();
});

async function plan(sql: string, params: unknown[]) {
  const { rows } = await pool.query(`explain (format json) ${sql}`, params);
  return rows[0]['QUERY PLAN'];
}

it('every pump reads only its own instance processing effects: RECOVERY_DUE_SQL and the host pass lead on origin_instance_id (12,000 in flight)', async () => {
  for (const [sql, params] of [
    [RECOVERY_DUE_SQL, ['scale:7', 30_000, []]],
    [STALE_CANDIDATES_OF_INSTANCE_SQL, [30_000, 100, [], 'scale:7']],
  ] as const) {
    const effects = planReads(await plan(sql, [...params]), 'effects');
    expect(effects.length).toBeGreaterThan(0);
    for (const r of effects) {
      expect(r.type).not.toBe('Seq Scan');
      expect(r.index).toBe('effects_origin_status');
      expect(r.cond).toMatch(/origin_instance_id/);
    }
  }
  const { rows } = await pool.query<{ due: string | null }>(RECOVERY_DUE_SQL, ['scale:7', 30_000, []]);
  expect(rows[0]!.due).not.toBeNull();
});

it('the minute poll reads due messages in due-time order through actor_mailbox_due, never a scan of the mailbox', async () => {
  const p = await plan(INSTANCES_WITH_WORK_SQL, [50, ['scale'], 1000]);
  const mailbox = planReads(p, 'actor_mailbox');
  expect(mailbox.map((r) => r.type)).not.toContain('Seq Scan');
  expect(mailbox.map((r) => r.index)).toContain('actor_mailbox_due');
  expect(planReads(p, 'effects').map((r) => r.type)).not.toContain('Seq Scan');
  const { rows } = await pool.query<{ id: string }>(INSTANCES_WITH_WORK_SQL, [50, ['scale'], 1000]);
  expect(rows).toHaveLength(50);
});
