import { runDurableObjectAlarm } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { isolateGate, type Permit } from '../../workers/db/gate';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { ensureInstance } from '../../workers/effects/mailbox';
import { runRecoveryPass } from '../../workers/effects/recovery';
import { effectRegistry } from '../../workers/effects/registry';
import { advanceDbClock, backendPid, blockedBehind, setDbClockOffset, testPool, uid } from '../helpers/db';
import { bindingRow, config, effectRow, emit } from './helpers';

/**
 * Issue 35 hole 2: a liveness signal never loses to the work it reports on. The isolate's
 * connection budget is squeezed until background work has exactly one place, which the pump
 * takes; the alarm's heartbeat must still land, or a running claim looks stale and is retired
 * while its executor is still at the external system.
 */
const SLOW_GATE = 7_350_101;

effectRegistry
  .registerActor({ type: 'beat-test', initialState: () => ({}), handle: (_e, s) => s })
  .registerEffect({
    kind: 'beat.slow',
    timeoutMs: 120_000,
    run: async () => {
      // The test's own (ungated) pool: the executor takes no place in the budget.
      const gate = testPool(1);
      try {
        await gate.query('select pg_advisory_lock_shared($1)', [SLOW_GATE]);
        return { slow: 'done' };
      } finally {
        await gate.end();
      }
    },
  });

const pool = testPool();
const squeezed: Permit[] = [];
afterEach(async () => {
  for (const p of squeezed.splice(0)) p.release();
  await setDbClockOffset(pool, 0);
});
afterAll(() => pool.end());

/** Takes background places (no connection behind them) until exactly one is left. */
async function squeezeBackgroundToOne(): Promise<void> {
  const s = isolateGate.snapshot();
  for (let i = s.heldBackground; i < s.backgroundCapacity - 1; i++)
    squeezed.push(await isolateGate.acquire('background', 0));
  expect(isolateGate.snapshot().backgroundCapacity - isolateGate.snapshot().heldBackground).toBe(1);
}

describe('heartbeats under the connection budget', () => {
  it('with background work squeezed to one place, the heartbeat of a slow running effect still advances, and 30 s of database time later the effect has not been retired', async () => {
    const inst = await ensureInstance(pool, 'beat-test', uid('b'));
    const host = actorHostStub(env, inst);
    // A first (idle) pump sets the gate's capacity from the host's configuration; squeeze after it.
    await host.wake(inst);
    const [h] = await emit(pool, inst, [{ kind: 'beat.slow', opts: { recovery: { operation: 'redo' } } }]);
    const gate = await pool.connect();
    await gate.query('select pg_advisory_lock($1)', [SLOW_GATE]);
    await squeezeBackgroundToOne();
    const pumping = host.wake(inst);
    try {
      await blockedBehind(pool, await backendPid(gate)); // the run is in flight, the pump holds the place
      const owner = (await effectRow(pool, h!.effectId))!.locked_by!;
      expect(owner).not.toBeNull();
      const heartbeatAt = async () =>
        Number(
          (await pool.query('select heartbeat_at_ms from effect_processes where id = $1', [owner])).rows[0]
            .heartbeat_at_ms,
        );
      for (let step = 0; step < 2; step++) {
        await advanceDbClock(pool, 20_000);
        const before = await heartbeatAt();
        expect(await runDurableObjectAlarm(host)).toBe(true);
        // A beat writes app_now_ms(), at least the 20 s the clock just moved past the old beat.
        expect(await heartbeatAt(), `beat ${step + 1} did not land`).toBeGreaterThanOrEqual(before + 20_000);
      }
      // 40 s of database time after the claim: the owner is alive, so nothing is retired.
      const pass = await runRecoveryPass(pool, config);
      expect(pass.retired).toBe(0);
      expect((await bindingRow(pool, h!.effectId))!.retired_at_ms).toBeNull();
      expect((await effectRow(pool, h!.effectId))!.status).toBe('processing');
    } finally {
      await gate.query('select pg_advisory_unlock($1)', [SLOW_GATE]);
      gate.release();
    }
    expect(await pumping).toMatchObject({ completed: 1 });
  });
});
