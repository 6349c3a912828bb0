import { describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { registerProcess } from '../../workers/effects/processes';
import { processRecoveryChecks, requestEffectRecovery } from '../../workers/effects/recovery';
import { advanceDbClock, blockedBehind } from '../helpers/db';
import { ageHeartbeat, claimOf, config, emit, newInstance, racer, raceScope } from './helpers';

const { pool, opened } = raceScope();

describe('spec: "After waiting for these locks, the decision uses … a locked heartbeat, database wall time"', () => {
  it('time that passed while the decision waited on the owner lock counts: fresh when it started, retired after', async () => {
    const inst = await newInstance(pool, 'locked-time');
    const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'replace' } } }]);
    const owner = await registerProcess(pool, 'locked-time');
    await claimOf(pool, owner, inst);
    await ageHeartbeat(pool, owner, 20_000); // inside the 30 s floor: fresh when the batch starts
    const { requestId } = await withTx(pool, { budgetMs: 5000 }, (tx) => requestEffectRecovery(tx, inst, h!));
    const holder = await pool.connect();
    try {
      // Something holds the owner row (no heartbeat written): the batch waits on its last lock.
      await holder.query('begin');
      await holder.query('select id from effect_processes where id = $1 for update', [owner]);
      const holderPid = Number((await holder.query('select pg_backend_pid() as p')).rows[0].p);
      const r = await racer();
      opened.push(r.pool);
      const batch = processRecoveryChecks(r.pool, inst, config);
      expect(await blockedBehind(pool, holderPid)).toBe(r.pid);
      // A minute passes during the wait: the heartbeat is now 80 s old.
      await advanceDbClock(pool, 60_000);
      const { rows } = await pool.query<{ now: string }>('select app_now_ms() as now');
      await holder.query('commit');
      const out = (await batch).get(requestId);
      expect(out).toMatchObject({ outcome: 'retired' });
      expect((out as { retiredAtMs: number }).retiredAtMs).toBeGreaterThanOrEqual(Number(rows[0]!.now));
    } finally {
      holder.release();
    }
  });
});
