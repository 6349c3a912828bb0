import { describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { registerProcess } from '../../workers/effects/processes';
import { processRecoveryChecks, requestEffectRecovery } from '../../workers/effects/recovery';
import { advanceDbClock, blockedBehind } from '../helpers/db';
import { ageHeartbeat, claimOf, config, emit, newInstance, raceScope } from './helpers';
import { openRacer } from './pairs';
import { holdRows } from './row-locks';

const { pool, opened } = raceScope();

describe('spec: "After waiting for these locks, the decision uses … a locked heartbeat, database wall time"', () => {
  it('time that passed while the decision waited on the owner lock counts: fresh when it started, retired after', async () => {
    const inst = await newInstance(pool, 'locked-time');
    const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'replace' } } }]);
    const owner = await registerProcess(pool, 'locked-time');
    await claimOf(pool, owner, inst);
    await ageHeartbeat(pool, owner, 20_000); // inside the 30 s floor: fresh when the batch starts
    const { requestId } = await withTx(pool, { budgetMs: 5000 }, (tx) => requestEffectRecovery(tx, inst, h!));
    // Something holds the owner row (no heartbeat written): the batch waits on its last lock.
    const holder = await holdRows(pool, opened, [['effect_processes', owner]]);
    const r = await openRacer(opened);
    const batch = processRecoveryChecks(r.pool, inst, config);
    expect(await blockedBehind(pool, holder.pid)).toBe(r.pid);
    // A minute passes during the wait: the heartbeat is now 80 s old.
    await advanceDbClock(pool, 60_000);
    const { rows } = await pool.query<{ now: string }>('select app_now_ms() as now');
    await holder.release();
    const out = (await batch).get(requestId);
    expect(out).toMatchObject({ outcome: 'retired' });
    expect((out as { retiredAtMs: number }).retiredAtMs).toBeGreaterThanOrEqual(Number(rows[0]!.now));
  });
});
