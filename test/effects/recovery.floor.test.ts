import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { registerProcess } from '../../workers/effects/processes';
import {
  processRecoveryChecks,
  requestEffectRecovery,
  runRecoveryPass,
} from '../../workers/effects/recovery';
import { effectConfig } from '../../workers/effects/types';
import { setDbClockOffset, testPool } from '../helpers/db';
import { ageHeartbeat, bindingRow, claimOf, config, emit, newInstance } from './helpers';

/**
 * Issue 35 proof: the runtime's staleness floor wins over a shorter per-effect timeout, and it
 * is the floor of the runtime that decides (its configuration at decision time), not one
 * persisted with the effect.
 */
const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

/**
 * Database time stopped at `ms` for every connection of this file's database while `fn` runs
 * (the test clock of test/setup/test-clock.sql, replaced and put back): a heartbeat can then sit
 * exactly at the cutoff when the prefilter and the decision read the time, which a moving clock
 * never guarantees.
 */
async function withDbTimeStopped<T>(ms: number, fn: () => Promise<T>): Promise<T> {
  await pool.query(`create or replace function app_now() returns timestamptz
    language sql volatile parallel safe as $$ select to_timestamp(${Math.floor(ms)}::float8 / 1000) $$`);
  try {
    return await fn();
  } finally {
    await pool.query(`create or replace function app_now() returns timestamptz
      language sql volatile parallel safe as $$
        select clock_timestamp() + (select offset_ms from app_test_clock) * interval '1 millisecond' $$`);
  }
}

describe('the staleness floor', () => {
  it('wins over a shorter per-effect timeout, read at decision time', async () => {
    const inst = await newInstance(pool);
    // A 1 s grace: shorter than the 30 s floor, so the floor is the effective timeout.
    const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'redo', timeoutMs: 1000 } } }]);
    const owner = await registerProcess(pool, 'w');
    await claimOf(pool, owner, inst);
    await ageHeartbeat(pool, owner, 10_000); // past its own 1 s grace, inside the 30 s floor
    expect(await runRecoveryPass(pool, config)).toMatchObject({ candidates: 0, retired: 0 });
    await withTx(pool, { budgetMs: 5000 }, (tx) => requestEffectRecovery(tx, inst, h!));
    const first = await processRecoveryChecks(pool, inst, config);
    expect([...first.values()]).toMatchObject([{ outcome: 'deferred', ownerId: owner }]);
    expect((await bindingRow(pool, h!.effectId))!.retired_at_ms).toBeNull();
    // The same effect under a runtime whose floor is 5 s: the decision reads that floor.
    await withTx(pool, { budgetMs: 5000 }, (tx) => requestEffectRecovery(tx, inst, h!));
    const second = await processRecoveryChecks(pool, inst, effectConfig({ staleAfterMs: 5000 }));
    expect([...second.values()]).toMatchObject([{ outcome: 'retired' }]);
  });

  it('a heartbeat exactly at the cutoff is live, in the pass and in the decision; one millisecond older is stale', async () => {
    const inst = await newInstance(pool);
    const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'redo' } } }]);
    const owner = await registerProcess(pool, 'w');
    await claimOf(pool, owner, inst);
    const now = (await pool.query<{ ms: string }>('select app_now_ms() as ms')).rows[0]!.ms;
    const cutoff = Number(now) - config.staleAfterMs;
    const beatAt = (ms: number) =>
      pool.query('update effect_processes set heartbeat_at_ms = $2 where id = $1', [owner, ms]);
    await withDbTimeStopped(Number(now), async () => {
      await beatAt(cutoff);
      // The pass's unlocked prefilter (STALE_CANDIDATES_SQL) and the locked decision agree: `<`.
      expect(await runRecoveryPass(pool, config)).toMatchObject({ candidates: 0, retired: 0 });
      await withTx(pool, { budgetMs: 5000 }, (tx) => requestEffectRecovery(tx, inst, h!));
      const atCutoff = await processRecoveryChecks(pool, inst, config);
      expect([...atCutoff.values()]).toMatchObject([{ outcome: 'deferred', ownerId: owner }]);
      expect((await bindingRow(pool, h!.effectId))!.retired_at_ms).toBeNull();
      await beatAt(cutoff - 1);
      expect(await runRecoveryPass(pool, config)).toMatchObject({ candidates: 1, retired: 1 });
      expect((await bindingRow(pool, h!.effectId))!.retired_at_ms).toBe(now);
    });
  });
});
