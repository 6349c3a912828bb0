import { afterAll, describe, expect, it } from 'vitest';
import { registerProcess, stopProcess } from '../../workers/effects/processes';
import { runRecoveryPass } from '../../workers/effects/recovery';
import { claimEffects } from '../../workers/effects/scheduler';
import { advanceDbClock, setDbClockOffset, testPool } from '../helpers/db';
import { config, emit, newInstance } from './helpers';

// Its own file: every processing effect in the database is a candidate once the clock moves.
const pool = testPool();
afterAll(async () => {
  await setDbClockOffset(pool, 0);
  await pool.end();
});

const RECOVERY = { recovery: { operation: 'replace' } };

describe('spec: "Automatic polling checks at most claimScanLimit stale candidates per pass"', () => {
  it('more stale candidates than the limit: each pass handles exactly the limit, in id order', async () => {
    const inst = await newInstance(pool, 'check-states');
    const handles = await emit(
      pool,
      inst,
      Array.from({ length: 5 }, () => ({ opts: RECOVERY })),
    );
    const owner = await registerProcess(pool, 'check-states');
    expect(await claimEffects(pool, owner, { limit: 10, instanceId: inst })).toHaveLength(5);
    await stopProcess(pool, owner);
    await advanceDbClock(pool, 10 * 60_000);
    const limited = { ...config, claimScanLimit: 3 };
    const ids = handles.map((h) => h.effectId).sort();
    const retired = async () =>
      (
        await pool.query<{ effect_id: string }>(
          'select effect_id from effect_recoveries where origin_instance_id = $1 and retired_at_ms is not null order by effect_id',
          [inst],
        )
      ).rows.map((r) => r.effect_id);

    expect(await runRecoveryPass(pool, limited)).toMatchObject({ candidates: 3, retired: 3 });
    expect(await retired()).toEqual(ids.slice(0, 3));
    expect(await runRecoveryPass(pool, limited)).toMatchObject({ candidates: 2, retired: 2 });
    expect(await retired()).toEqual(ids);
    expect(await runRecoveryPass(pool, limited)).toMatchObject({ candidates: 0, retired: 0 });
  });
});
