import { describe, expect, it } from 'vitest';
import { pruneProcesses, registerProcess } from '../../workers/effects/processes';
import { claimEffects } from '../../workers/effects/scheduler';
import { waitUntilBlocked } from '../helpers/db';
import { ageHeartbeat, emit, newInstance, raceScope } from './helpers';
import { openRacer } from './pairs';
import { holdRows } from './row-locks';

const { pool, opened } = raceScope();
const DAY = 86_400_000;

/**
 * spec: "Process pruning excludes effect owners." A process silent past the prune age that
 * claims at the moment pruning runs must either lose (its claim takes nothing) or win (the
 * prune keeps it): never an effect processing under a deleted owner, which recovery would
 * read as missing, hence stale at once, whatever the effect's own grace.
 */
describe('spec: process pruning never deletes an owner, even one claiming while the prune runs', () => {
  async function scene() {
    const inst = await newInstance(pool, 'prune-vs-claim');
    const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'replace', timeoutMs: DAY } } }]);
    const proc = await registerProcess(pool, 'prune-vs-claim');
    await ageHeartbeat(pool, proc, 2 * DAY); // silent past the 1-day prune age, never stopped
    // The test holds the process row so both operations queue on it in a known order.
    const holder = await holdRows(pool, opened, [['effect_processes', proc]]);
    return { inst, h: h!, proc, release: holder.release };
  }

  const ownerless = async (effectId: string) =>
    (
      await pool.query(
        `select e.id from effects e where e.id = $1 and e.status = 'processing'
            and not exists (select 1 from effect_processes p where p.id = e.locked_by)`,
        [effectId],
      )
    ).rows;

  it('the prune queued first: it deletes the process and the late claim takes nothing', async () => {
    const s = await scene();
    const [pruner, claimer] = [await openRacer(opened), await openRacer(opened)];
    const pruned = pruneProcesses(pruner.pool, DAY);
    await waitUntilBlocked(pool, pruner.pid);
    const claimed = claimEffects(claimer.pool, s.proc, { limit: 10, instanceId: s.inst });
    // Today's claim reads the process unlocked and commits at once; a fixed claim queues
    // behind the prune on the process row.
    await Promise.race([claimed, waitUntilBlocked(pool, claimer.pid)]);
    await s.release();
    expect(await pruned).toBe(1);
    expect(await claimed).toEqual([]);
    expect(await ownerless(s.h.effectId)).toEqual([]);
  });

  it('the claim queued first: it claims, and the prune keeps its new owner', async () => {
    const s = await scene();
    const [claimer, pruner] = [await openRacer(opened), await openRacer(opened)];
    const claimed = claimEffects(claimer.pool, s.proc, { limit: 10, instanceId: s.inst });
    await waitUntilBlocked(pool, claimer.pid);
    const pruned = pruneProcesses(pruner.pool, DAY);
    await waitUntilBlocked(pool, pruner.pid);
    await s.release();
    expect((await claimed).map((e) => e.id)).toEqual([s.h.effectId]);
    expect(await pruned).toBe(0);
    expect(await ownerless(s.h.effectId)).toEqual([]);
  });
});
