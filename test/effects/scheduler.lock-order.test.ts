import { describe, expect, it } from 'vitest';
import { registerProcess } from '../../workers/effects/processes';
import { completeEffects, failEffects } from '../../workers/effects/scheduler';
import { waitUntilBlocked } from '../helpers/db';
import { claimOf, effectRow, emit, newInstance, raceScope } from './helpers';
import { openRacer } from './pairs';
import { holdRows } from './row-locks';

const { pool, opened } = raceScope();

/**
 * spec: "Completion/failure lock the instance before the effect." With only the effect row
 * held elsewhere, a write-back that is blocked must already hold its instance lock: a third
 * session cannot lock the instance.
 */
describe('spec: completion and failure lock the instance before the effect', () => {
  for (const op of ['complete', 'fail'] as const) {
    it(`${op}: blocked on the effect row, it already holds the instance lock`, async () => {
      const inst = await newInstance(pool, 'lock-order');
      const [h] = await emit(pool, inst, [{}]);
      const owner = await registerProcess(pool, 'lock-order');
      await claimOf(pool, owner, inst);

      const holder = await holdRows(pool, opened, [['effects', h!.effectId]]);
      const r = await openRacer(opened);
      const writeBack =
        op === 'complete'
          ? completeEffects(r.pool, owner, [{ id: h!.effectId, result: 1 }])
          : failEffects(r.pool, owner, [{ id: h!.effectId, error: 'x' }]);
      await waitUntilBlocked(pool, r.pid);
      // The racer waits on the effect; the instance is already its (for share).
      await expect(
        pool.query('select id from actor_instances where id = $1 for update nowait', [inst]),
      ).rejects.toMatchObject({ code: '55P03' });
      await holder.release();
      expect((await writeBack).accepted).toEqual([h!.effectId]);
      expect(await effectRow(pool, h!.effectId)).toMatchObject({
        status: op === 'complete' ? 'completed' : 'pending',
        locked_by: null,
      });
    });
  }
});
