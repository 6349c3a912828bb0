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
});
