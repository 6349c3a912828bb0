import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { enqueueMessage, ensureInstance, loadInstance } from '../../workers/effects/mailbox';
import { registerProcess } from '../../workers/effects/processes';
import { effectRegistry } from '../../workers/effects/registry';
import { claimEffects } from '../../workers/effects/scheduler';
import { runCron } from '../helpers/cron';
import { advanceDbClock, backendPid, blockedBehind, setDbClockOffset, testPool, uid } from '../helpers/db';
import { ageHeartbeat, emit } from './helpers';

interface DebounceState {
  inputs: string[];
  turns: number;
  replies: number;
  recovered: number;
}

// A conversation-shaped actor: debounce inputs, then one turn emits a `reply` effect.
effectRegistry
  .registerActor<DebounceState>({
    type: 'debounce-test',
    initialState: () => ({ inputs: [], turns: 0, replies: 0, recovered: 0 }),
    handle(event, s, ctx) {
      const state: DebounceState = {
        inputs: [],
        turns: 0,
        replies: 0,
        recovered: 0,
        ...(s as Partial<DebounceState>),
      };
      if (event.type === 'timer') {
        ctx.emit(
          'test.reply',
          { inputs: state.inputs },
          { recovery: { operation: 'settle-failed' }, notifyOnComplete: true },
        );
        return { ...state, inputs: [], turns: state.turns + 1 };
      }
      if (event.key.endsWith(':completed')) return { ...state, replies: state.replies + 1 };
      if (event.key.endsWith(':recovery')) return { ...state, recovered: state.recovered + 1 };
      ctx.setTimer(ctx.nowMs + 1000);
      return { ...state, inputs: [...state.inputs, event.key] };
    },
  })
  .registerEffect({ kind: 'test.reply', run: async (e) => ({ echoed: e.args }) })
  .registerEffect({
    kind: 'test.slow',
    // Waits on an advisory lock the test holds: the test sees the wait (pg_blocking_pids), so
    // it knows the run is in flight with its claim committed, and releases it when done.
    run: async () => {
      const gate = testPool(1);
      try {
        await gate.query('select pg_advisory_lock_shared($1)', [SLOW_GATE]);
        return { slow: 'done' };
      } finally {
        await gate.end();
      }
    },
  });

const SLOW_GATE = 7_204_001;

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());
const stateOf = async (id: string) => (await loadInstance(pool, id))!.state as DebounceState;

describe('ActorHost', () => {
  it('drains inputs committed in the application transaction, debounces them into one turn, runs and completes its effect', async () => {
    const inst = await ensureInstance(pool, 'debounce-test', uid('c'));
    await withTx(pool, { budgetMs: 5000 }, async (tx) => {
      await enqueueMessage(tx, inst, 'in:1', 'hello');
      await enqueueMessage(tx, inst, 'in:2', 'again');
    });
    const host = actorHostStub(env, inst);
    const first = await host.wake(inst);
    expect(first).toMatchObject({ handled: 2, claimed: 0 });
    expect(first.alarmAt).not.toBeNull(); // the debounce timer
    expect(await stateOf(inst)).toMatchObject({ inputs: ['in:1', 'in:2'], turns: 0 });

    await advanceDbClock(pool, 1500); // the timer is due by database time
    expect(await runDurableObjectAlarm(host)).toBe(true);
    expect(await stateOf(inst)).toMatchObject({ inputs: [], turns: 1, replies: 1 });
    const { rows } = await pool.query(
      "select status, result from effects where origin_instance_id = $1 and kind = 'test.reply'",
      [inst],
    );
    expect(rows).toEqual([{ status: 'completed', result: { echoed: { inputs: ['in:1', 'in:2'] } } }]);
  });

  it('the minute cron retires a dead process effect and wakes the host, which delivers the recovery message', async () => {
    const inst = await ensureInstance(pool, 'debounce-test', uid('c'));
    // A reply staged by a fenced commit, claimed by a process that then dies.
    const [h] = await emit(pool, inst, [
      { kind: 'test.reply', opts: { recovery: { operation: 'settle-failed' } } },
    ]);
    const dead = await registerProcess(pool, 'elsewhere');
    expect((await claimEffects(pool, dead, { limit: 10, instanceId: inst })).map((e) => e.id)).toEqual([
      h!.effectId,
    ]);
    await ageHeartbeat(pool, dead, 31_000);
    await runCron();
    // The cron only scheduled the host's pump (its alarm, now); the alarm delivers.
    expect(await runDurableObjectAlarm(actorHostStub(env, inst))).toBe(true);
    expect((await stateOf(inst)).recovered).toBe(1);
    const { rows } = await pool.query<{ state: string }>(
      'select state from actor_mailbox where instance_id = $1 and message_key = $2',
      [inst, `effect:${h!.effectId}:recovery`],
    );
    expect(rows).toEqual([{ state: 'delivered' }]);
  });

  it('after the runtime dies mid-turn, the restarted host recovers its claim from its own alarm at the staleness floor, with no cron', async () => {
    const floorMs = Number(env.EFFECT_STALE_AFTER_MS ?? 30_000);
    const silentMs = 10_000;
    const inst = await ensureInstance(pool, 'debounce-test', uid('c'));
    const [h] = await emit(pool, inst, [
      { kind: 'test.reply', opts: { recovery: { operation: 'settle-failed' } } },
    ]);
    // The host's earlier incarnation: it registered a process, claimed the reply and armed its
    // heartbeat alarm, then the runtime died (no more beats). The new incarnation has only
    // what storage kept (its instance id and the alarm; an older version also kept the
    // process id there, and re-heartbeated it on restart).
    const dead = await registerProcess(pool, 'actor-host');
    expect((await claimEffects(pool, dead, { limit: 10, instanceId: inst })).map((e) => e.id)).toEqual([
      h!.effectId,
    ]);
    await ageHeartbeat(pool, dead, silentMs);
    const host = actorHostStub(env, inst);
    await runInDurableObject(host, async (_o, state) => {
      await state.storage.put({ instanceId: inst, processId: dead, 'alarm:planned': Date.now() });
      await state.storage.setAlarm(Date.now() + 86_400_000);
    });
    const heartbeatOf = async () =>
      Number(
        (await pool.query('select heartbeat_at_ms from effect_processes where id = $1', [dead])).rows[0]
          .heartbeat_at_ms,
      );
    const evidence = await heartbeatOf();
    // The restarted runtime fires the stored alarm: the pump must leave the dead process's
    // heartbeat alone (it is the evidence) and arm the alarm for when it turns stale.
    const armedAt = Date.now();
    expect(await runDurableObjectAlarm(host)).toBe(true);
    expect(await heartbeatOf()).toBe(evidence);
    const planned = await runInDurableObject(host, (_o, state) => state.storage.get<number>('alarm:planned'));
    expect(planned, 'no recovery alarm armed').toBeDefined();
    // Due when the silence reaches the floor (plus a 250 ms margin), never the next minute.
    expect(planned! - armedAt).toBeGreaterThanOrEqual(floorMs - silentMs);
    expect(planned! - Date.now()).toBeLessThanOrEqual(floorMs - silentMs + 1000);
    expect((await stateOf(inst))?.recovered ?? 0).toBe(0);
    // Database time reaches the floor; the alarm fires: one pass of this instance retires the
    // reply and the same pump delivers the recovery message. No cron ran.
    await advanceDbClock(pool, floorMs - silentMs + 300);
    expect(await runDurableObjectAlarm(host)).toBe(true);
    expect((await stateOf(inst)).recovered).toBe(1);
    const { rows } = await pool.query<{ state: string }>(
      'select state from actor_mailbox where instance_id = $1 and message_key = $2',
      [inst, `effect:${h!.effectId}:recovery`],
    );
    expect(rows).toEqual([{ state: 'delivered' }]);
    // Nothing of the instance is in flight any more: no recovery alarm stays armed for it.
    const left = await runInDurableObject(host, (_o, state) => state.storage.get<number>('recoveryAt'));
    expect(left).toBeUndefined();
  });

  it('mailbox polling on the minute cron delivers a message whose wake-up was lost', async () => {
    const inst = await ensureInstance(pool, 'debounce-test', uid('c'));
    await enqueueMessage(pool, inst, 'in:lost', 'nobody woke the host');
    await runCron();
    expect(await runDurableObjectAlarm(actorHostStub(env, inst))).toBe(true);
    expect((await stateOf(inst)).inputs).toEqual(['in:lost']);
  });

  it('heartbeats its process from the alarm while it holds a claim', async () => {
    const inst = await ensureInstance(pool, 'debounce-test', uid('c'));
    const [h] = await emit(pool, inst, [
      { kind: 'test.slow', opts: { recovery: { operation: 'settle-failed' } } },
    ]);
    const gate = await pool.connect();
    await gate.query('select pg_advisory_lock($1)', [SLOW_GATE]);
    const host = actorHostStub(env, inst);
    const pumping = host.wake(inst);
    try {
      await blockedBehind(pool, await backendPid(gate)); // the run is in flight
      const { rows: claimed } = await pool.query<{ locked_by: string | null }>(
        'select locked_by from effects where id = $1',
        [h!.effectId],
      );
      const owner = claimed[0]!.locked_by;
      expect(owner).not.toBeNull();
      await ageHeartbeat(pool, owner!, 25_000);
      const heartbeatAt = async () =>
        Number(
          (await pool.query('select heartbeat_at_ms from effect_processes where id = $1', [owner])).rows[0]
            .heartbeat_at_ms,
        );
      const aged = await heartbeatAt();
      expect(await runDurableObjectAlarm(host)).toBe(true);
      // A beat writes app_now_ms(), which is at least the 25 s the heartbeat was aged by.
      expect(await heartbeatAt()).toBeGreaterThanOrEqual(aged + 25_000);
    } finally {
      await gate.query('select pg_advisory_unlock($1)', [SLOW_GATE]);
      gate.release();
    }
    expect(await pumping).toMatchObject({ completed: 1 });
  });
});
