import { describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { registerProcess, stopProcess } from '../../workers/effects/processes';
import {
  processRecoveryChecks,
  pruneEffects,
  pruneExpiredBindings,
  requestEffectRecovery,
} from '../../workers/effects/recovery';
import { completeEffects } from '../../workers/effects/scheduler';
import { advanceDbClock, setDbClockOffset } from '../helpers/db';
import { bindingRow, claimOf, config, effectRow, emit, newInstance, racer, raceScope } from './helpers';
import { holdRows, inHeapOrder, layOutAgainstIdOrder, rowOf, waitsOn } from './row-locks';

/**
 * spec: "Lock order is origin instance, effects ordered by ID, recovery bindings ordered by
 * effect ID, ...". Process stop, effect pruning and binding pruning lock many rows of one
 * table in one statement; without an explicit order they lock in plan order, which for a
 * sequential scan is the heap order. Each test pins that plan (a sequential scan, what the
 * planner picks once the table outgrows its indexes' selectivity) and lays the rows out on
 * the heap against ID order: highest ID first, a barrier row, lowest ID last. The path holds
 * the highest row and waits on the barrier; the other path, locking by ID, takes the lowest
 * and waits on the highest. Released, a path in heap order would now want the lowest row: a
 * deadlock (failed by the harness). In ID order it took the lowest row first, so the other
 * path waits behind it instead.
 *
 * Its own file: the heap order is laid out with updates (a new row version goes to the end of
 * the heap), which needs a table with few dead versions; the layout is asserted, never assumed.
 */
const { pool, opened } = raceScope();

async function openRacer() {
  const r = await racer();
  opened.push(r.pool);
  return r;
}

/** Three effects of one instance, claimed by one owner, IDs sorted. */
async function threeClaimed(opts = {}) {
  const inst = await newInstance(pool, 'id-order');
  const handles = await emit(pool, inst, [{ opts }, { opts }, { opts }]);
  const owner = await registerProcess(pool, 'id-order');
  await claimOf(pool, owner, inst);
  return { inst, owner, ids: handles.map((h) => h.effectId).sort() };
}

describe('spec: effects are locked in ID order, bindings in effect-ID order, by every path', () => {
  it('process stop locks the effects it releases in ID order: a completion batch waits behind it, no deadlock', async () => {
    const { owner, ids } = await threeClaimed();
    const [lo, mid, hi] = ids as [string, string, string];
    await layOutAgainstIdOrder(pool, 'effects', ids);
    const holder = await holdRows(pool, opened, [['effects', mid]]);
    const stopper = await openRacer();
    const completer = await openRacer();
    const stop = inHeapOrder(stopper.pool, (tx) => stopProcess(tx, owner));
    expect(await waitsOn(pool, stopper.pid)).toBe(await rowOf(pool, 'effects', mid));
    const complete = completeEffects(completer.pool, owner, [
      { id: lo, result: 1 },
      { id: hi, result: 1 },
    ]);
    // In ID order the stop already holds the lowest effect: the completion waits there.
    expect(await waitsOn(pool, completer.pid)).toBe(await rowOf(pool, 'effects', lo));
    await holder.release();
    expect((await stop).released).toBe(3);
    expect(await complete).toEqual({ accepted: [], rejected: [lo, hi] });
    for (const id of ids)
      expect(await effectRow(pool, id)).toMatchObject({ status: 'pending', locked_by: null });
  });

  it('effect pruning locks in ID order: a late completion batch waits behind it, no deadlock', async () => {
    const { owner, ids } = await threeClaimed();
    const [lo, mid, hi] = ids as [string, string, string];
    const done = await completeEffects(
      pool,
      owner,
      ids.map((id) => ({ id, result: 1 })),
    );
    expect(done.accepted).toHaveLength(3);
    await layOutAgainstIdOrder(pool, 'effects', ids);
    await advanceDbClock(pool, 1000); // finished before now: prunable with retention 0
    const holder = await holdRows(pool, opened, [['effects', mid]]);
    const pruner = await openRacer();
    const late = await openRacer();
    const prune = inHeapOrder(pruner.pool, (tx) => pruneEffects(tx, 0));
    expect(await waitsOn(pool, pruner.pid)).toBe(await rowOf(pool, 'effects', mid));
    const complete = completeEffects(late.pool, owner, [
      { id: lo, result: 2 },
      { id: hi, result: 2 },
    ]);
    expect(await waitsOn(pool, late.pid)).toBe(await rowOf(pool, 'effects', lo));
    await holder.release();
    expect(await prune).toBeGreaterThanOrEqual(3);
    expect(await complete).toEqual({ accepted: [], rejected: [lo, hi] });
    for (const id of ids) expect(await effectRow(pool, id)).toBeUndefined();
  });

  it('binding pruning locks in effect-ID order: a check batch waits behind it, no deadlock', async () => {
    const { inst, owner, ids } = await threeClaimed({ recovery: { operation: 'replace' } });
    const [lo, mid, hi] = ids as [string, string, string];
    await completeEffects(
      pool,
      owner,
      ids.map((id) => ({ id, result: 1 })),
    );
    // Both checks are staged while the bindings live; then the bindings outlive their lifetime.
    const requests = await withTx(pool, { budgetMs: 5000 }, async (tx) => [
      (await requestEffectRecovery(tx, inst, { effectId: lo, instanceId: inst, kind: 'noop' })).requestId,
      (await requestEffectRecovery(tx, inst, { effectId: hi, instanceId: inst, kind: 'noop' })).requestId,
    ]);
    await layOutAgainstIdOrder(pool, 'effect_recoveries', ids);
    await setDbClockOffset(pool, 8 * 86_400_000);
    const holder = await holdRows(pool, opened, [['effect_recoveries', mid]]);
    const pruner = await openRacer();
    const checker = await openRacer();
    const prune = inHeapOrder(pruner.pool, (tx) => pruneExpiredBindings(tx));
    expect(await waitsOn(pool, pruner.pid)).toBe(await rowOf(pool, 'effect_recoveries', mid));
    const batch = processRecoveryChecks(checker.pool, inst, config);
    // The batch holds the instance and both effects, then waits on the lowest binding.
    expect(await waitsOn(pool, checker.pid)).toBe(await rowOf(pool, 'effect_recoveries', lo));
    await holder.release();
    expect(await prune).toBeGreaterThanOrEqual(3);
    const outcomes = await batch;
    expect(requests.map((id) => outcomes.get(id)?.outcome)).toEqual(['expired', 'expired']);
    for (const id of ids) expect(await bindingRow(pool, id)).toBeUndefined();
  });
});
