import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { pruneEffectRows } from '../../workers/effects/cron';
import { enqueueMessage } from '../../workers/effects/mailbox';
import { registerProcess, stopProcess } from '../../workers/effects/processes';
import { requestEffectRecovery } from '../../workers/effects/recovery';
import { claimEffects, completeEffects, failEffects } from '../../workers/effects/scheduler';
import { setDbClockOffset, testPool } from '../helpers/db';
import { bindingRow, config, effectRow, emit, newInstance } from './helpers';

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

const DAY = 86_400_000;

const exists = async (sql: string, args: unknown[]) => ((await pool.query(sql, args)).rowCount ?? 0) > 0;

/** Seeds one row per runtime table that is past retention, and one that is not. */
async function seed() {
  const inst = await newInstance(pool);
  await enqueueMessage(pool, inst, 'delivered', null);
  await enqueueMessage(pool, inst, 'dead', null);
  await enqueueMessage(pool, inst, 'pending', null, { delayMs: 30 * DAY });
  await pool.query(
    `update actor_mailbox set state = 'delivered', delivered_at_ms = app_now_ms()
      where instance_id = $1 and message_key = 'delivered'`,
    [inst],
  );
  await pool.query(
    `update actor_mailbox set state = 'dead', dead_at_ms = app_now_ms(), attempts = 5
      where instance_id = $1 and message_key = 'dead'`,
    [inst],
  );
  const [done, failed, owned] = await emit(pool, inst, [
    { opts: { recovery: { operation: 'r' } } },
    { opts: { maxAttempts: 1 } },
    { opts: { recovery: { operation: 'r', timeoutMs: 7 * DAY } } },
  ]);
  const worker = await registerProcess(pool, 'retention-test');
  expect(await claimEffects(pool, worker, { limit: 10, instanceId: inst })).toHaveLength(3);
  await completeEffects(pool, worker, [{ id: done!.effectId, result: 1 }]);
  await failEffects(pool, worker, [{ id: failed!.effectId, error: 'x' }]);
  // A check on the completed effect, resolved right away.
  await withTx(pool, { budgetMs: 5000 }, (tx) => requestEffectRecovery(tx, done!.instanceId, done!));
  await pool.query(
    `update effect_recovery_checks set outcome = 'completed', resolved_at_ms = app_now_ms()
      where effect_id = $1`,
    [done!.effectId],
  );
  const idle = await registerProcess(pool, 'retention-test');
  await stopProcess(pool, idle);
  return { inst, done: done!, failed: failed!, owned: owned!, worker, idle };
}

describe('retention of the runtime tables (minute cron)', () => {
  it('prunes delivered/dead messages, terminal effects, resolved checks, expired bindings and idle processes; keeps owners and pending work', async () => {
    const s = await seed();
    expect(await pruneEffectRows(pool, config)).toEqual({
      mailbox: 0,
      effects: 0,
      checks: 0,
      bindings: 0,
      processes: 0,
      instances: 0,
      failed: [],
    });
    // Nothing is past retention yet.
    expect(await effectRow(pool, s.done.effectId)).toMatchObject({ status: 'completed' });

    await setDbClockOffset(pool, 8 * DAY); // past every retention, and the bindings' lifetime
    // One pass: delivered + dead message, two terminal effects, one check, the finished effect's
    // binding (the processing one's binding outlives its effect), the idle process.
    expect(await pruneEffectRows(pool, config)).toEqual({
      mailbox: 2,
      effects: 2,
      checks: 1,
      bindings: 1,
      processes: 1,
      instances: 0,
      failed: [],
    });

    const keyGone = async (key: string) =>
      !(await exists('select 1 from actor_mailbox where instance_id = $1 and message_key = $2', [
        s.inst,
        key,
      ]));
    expect(await keyGone('delivered')).toBe(true);
    expect(await keyGone('dead')).toBe(true);
    expect(await keyGone('pending')).toBe(false);
    expect(await keyGone(`effect:${s.failed.effectId}:failed`)).toBe(false); // still pending
    expect(await effectRow(pool, s.done.effectId)).toBeUndefined();
    expect(await effectRow(pool, s.failed.effectId)).toBeUndefined();
    expect(await effectRow(pool, s.owned.effectId)).toMatchObject({ status: 'processing' });
    expect(await exists('select 1 from effect_recovery_checks where effect_id = $1', [s.done.effectId])).toBe(
      false,
    );
    expect(await bindingRow(pool, s.done.effectId)).toBeUndefined(); // expired
    expect(await bindingRow(pool, s.owned.effectId)).toBeDefined(); // its effect is still processing
    expect(await exists('select 1 from effect_processes where id = $1', [s.idle])).toBe(false);
    expect(await exists('select 1 from effect_processes where id = $1', [s.worker])).toBe(true); // owner
  });

  it('each table gets one bounded batch per pass', async () => {
    for (let i = 0; i < 3; i++) await seed();
    await setDbClockOffset(pool, 8 * DAY);
    // Three eligible rows of every kind, one batch each (the mailbox has one for delivered, one for dead).
    expect(await pruneEffectRows(pool, config, { batch: 1 })).toEqual({
      mailbox: 2,
      effects: 1,
      checks: 1,
      bindings: 1,
      processes: 1,
      instances: 0,
      failed: [],
    });
  });

  it('a table that cannot be pruned within its budget does not stop the others', async () => {
    await seed();
    await setDbClockOffset(pool, 8 * DAY);
    const holder = await pool.connect();
    try {
      await holder.query('begin');
      await holder.query('lock table effect_recovery_checks in access exclusive mode');
      // The lock is held until the pass returns: the checks batch must time out (lock_timeout
      // is its budget) while every other table's batch runs in its own transaction.
      const report = await pruneEffectRows(pool, config, { batch: 100_000, budgetMs: 1_000 });
      // The instance retention reads the checks table too (an instance with a check stays).
      expect(report.failed).toEqual(['checks', 'instances']);
      expect(report.bindings + report.processes).toBeGreaterThan(0); // the later tables still ran
    } finally {
      await holder.query('rollback');
      holder.release();
    }
  });
});
