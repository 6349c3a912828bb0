import { abortAllDurableObjects, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { RESTART_PICKUP_MS } from '../../workers/effects/host-config';
import { ensureInstance, loadInstance } from '../../workers/effects/mailbox';
import { effectRegistry } from '../../workers/effects/registry';
import { completeEffects } from '../../workers/effects/scheduler';
import { advanceDbClock, backendPid, blockedBehind, setDbClockOffset, testPool, uid } from '../helpers/db';
import { effectRow, emit } from './helpers';

/**
 * Issue 31 item 4: a host restarted mid-effect (deploy, eviction, crash) tells its previous
 * incarnation's process from itself. Effects whose executor is idempotent by key are taken
 * over at once (the old incarnation's late write-back is fenced away by owner); every other
 * effect keeps the staleness rule, because the platform does not promise the old incarnation
 * has stopped (docs/effects.md "Restarts and deploys").
 */
interface TakeoverState {
  recovered: number;
  completed: number;
}

const GATE = 7_204_311;
// How many times each kind's executor started, in this isolate (both incarnations share it).
const runs = { idem: 0, plain: 0 };

/** Waits on an advisory lock the test holds: the run is provably in flight while it waits. */
async function gated(kind: 'idem' | 'plain') {
  runs[kind]++;
  const gate = testPool(1);
  try {
    await gate.query('select pg_advisory_lock_shared($1)', [GATE]);
    return { ran: kind };
  } finally {
    await gate.end();
  }
}

effectRegistry
  .registerActor<TakeoverState>({
    type: 'takeover-test',
    initialState: () => ({ recovered: 0, completed: 0 }),
    handle(event, s) {
      const state = { recovered: 0, completed: 0, ...(s as Partial<TakeoverState>) };
      if (event.type === 'message' && event.key.endsWith(':recovery'))
        return { ...state, recovered: state.recovered + 1 };
      if (event.type === 'message' && event.key.endsWith(':completed'))
        return { ...state, completed: state.completed + 1 };
      return state;
    },
  })
  .registerEffect({ kind: 'test.takeover.idem', idempotentByKey: true, run: () => gated('idem') })
  .registerEffect({ kind: 'test.takeover.plain', run: () => gated('plain') });

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

/**
 * A host whose pump claimed the instance's effect and runs it (blocked on the gate), then the
 * runtime restarts every object (as a deploy does). Returns the gate connection, still held,
 * and the first incarnation's process id.
 */
async function restartMidRun(inst: string, effectId: string) {
  const gate = await pool.connect();
  await gate.query('select pg_advisory_lock($1)', [GATE]);
  const host = actorHostStub(env, inst);
  // Its promise rejects when the object is aborted below: that is the restart.
  const first = host.wake(inst).catch((err: unknown) => err);
  await blockedBehind(pool, await backendPid(gate));
  const owner = (await effectRow(pool, effectId))!.locked_by!;
  expect(owner).not.toBeNull();
  // While it holds the claim its alarm is never further than RESTART_PICKUP_MS away: alarms
  // survive the restart, so this bounds how soon the next incarnation's first pump comes.
  const planned = await runInDurableObject(host, (_o, state) => state.storage.get<number>('alarm:planned'));
  expect(planned! - Date.now()).toBeLessThanOrEqual(RESTART_PICKUP_MS);
  await abortAllDurableObjects();
  await first;
  return { gate, owner, host: actorHostStub(env, inst) };
}

describe('a restarted ActorHost and its previous incarnation', () => {
  it('effects.takeover_idempotent_at_once: an effect idempotent by key is taken over by the restarted host in its first pump, and the old owner write-back is fenced', async () => {
    const inst = await ensureInstance(pool, 'takeover-test', uid('t'));
    const [h] = await emit(pool, inst, [{ kind: 'test.takeover.idem', opts: { notifyOnComplete: true } }]);
    const { gate, owner, host } = await restartMidRun(inst, h!.effectId);
    try {
      // The old owner's heartbeat is fresh: by the staleness rule alone nothing is due.
      await gate.query('select pg_advisory_unlock($1)', [GATE]);
      const report = await host.wake(inst);
      expect(report).toMatchObject({ completed: 1 });
      const row = await effectRow(pool, h!.effectId);
      expect(row).toMatchObject({ status: 'completed', result: { ran: 'idem' }, attempts: 2 });
      expect(row!.locked_by).toBeNull();
      expect(runs.idem).toBe(2);
      // The first incarnation's late write-back (its executor answering after the restart)
      // changes nothing: the claim is no longer its own.
      expect(await completeEffects(pool, owner, [{ id: h!.effectId, result: { late: true } }])).toMatchObject(
        {
          accepted: [],
        },
      );
      expect((await effectRow(pool, h!.effectId))!.result).toEqual({ ran: 'idem' });
      expect(((await loadInstance(pool, inst))!.state as TakeoverState).completed).toBe(1);
    } finally {
      gate.release();
    }
  });

  it('effects.takeover_keeps_staleness_rule: any other effect of the previous incarnation waits for the staleness floor, then is recovered', async () => {
    const floorMs = Number(env.EFFECT_STALE_AFTER_MS ?? 30_000);
    const inst = await ensureInstance(pool, 'takeover-test', uid('t'));
    const [h] = await emit(pool, inst, [
      { kind: 'test.takeover.plain', opts: { recovery: { operation: 'settle-failed' } } },
    ]);
    const { gate, owner, host } = await restartMidRun(inst, h!.effectId);
    try {
      await host.wake(inst);
      // Still the old owner's: it may be running yet, and this kind may not run twice.
      expect(await effectRow(pool, h!.effectId)).toMatchObject({ status: 'processing', locked_by: owner });
      expect(runs.plain).toBe(1);
      await advanceDbClock(pool, floorMs + 1000);
      await host.wake(inst);
      expect(((await loadInstance(pool, inst))!.state as TakeoverState).recovered).toBe(1);
      expect(runs.plain).toBe(1);
    } finally {
      await gate.query('select pg_advisory_unlock($1)', [GATE]);
      gate.release();
    }
  });

  it('a host that released its process keeps no previous-incarnation record: a later pump takes nothing over', async () => {
    const inst = await ensureInstance(pool, 'takeover-test', uid('t'));
    await emit(pool, inst, [{ kind: 'test.takeover.idem' }]);
    const host = actorHostStub(env, inst);
    expect(await host.wake(inst)).toMatchObject({ completed: 1 });
    const kept = await runInDurableObject(host, (_o, state) => state.storage.list());
    expect([...kept.keys()].filter((k) => k.startsWith('process'))).toEqual([]);
  });
});
