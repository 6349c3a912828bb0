import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { registerProcess } from '../../workers/effects/processes';
import {
  processRecoveryChecks,
  requestEffectRecovery,
  runRecoveryPass,
} from '../../workers/effects/recovery';
import { completeEffects } from '../../workers/effects/scheduler';
import { setDbClockOffset, testPool } from '../helpers/db';
import {
  ageHeartbeat,
  bindingRow,
  claimOf,
  config,
  effectRow,
  emit,
  messages,
  newInstance,
  waitForLockWaiters,
} from './helpers';

const pool = testPool(12);
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

/** Holds `for update` on the instance row in its own connection until `release()`. */
async function holdInstance(instanceId: string) {
  const client = await pool.connect();
  await client.query('begin');
  await client.query('select id from actor_instances where id = $1 for update', [instanceId]);
  return {
    client,
    async release() {
      await client.query('commit');
      client.release();
    },
  };
}

async function staleOptedIn() {
  const p = await registerProcess(pool, 'w');
  const inst = await newInstance(pool);
  const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'replace' } } }]);
  await claimOf(pool, p, inst);
  await ageHeartbeat(pool, p, 31_000);
  return { p, inst, h: h! };
}

describe('recovery races', () => {
  it('completion racing retirement: exactly one wins and the loser changes nothing', async () => {
    for (const first of ['retire', 'complete'] as const) {
      const { p, inst, h } = await staleOptedIn();
      const lock = await holdInstance(inst);
      const retire = () => runRecoveryPass(pool, { ...config, claimScanLimit: 1000 });
      const complete = () => completeEffects(pool, p, [{ id: h.effectId, result: 'done' }]);
      const a = first === 'retire' ? retire() : complete();
      await waitForLockWaiters(pool, 1);
      const b = first === 'retire' ? complete() : retire();
      await waitForLockWaiters(pool, 2);
      await lock.release();
      const [ra, rb] = await Promise.all([a, b]);
      const completion = (first === 'complete' ? ra : rb) as Awaited<ReturnType<typeof complete>>;
      const retired = (await bindingRow(pool, h.effectId))!.retired_at_ms !== null;
      const recoveryMsgs = (await messages(pool, inst)).filter((m) => m.message_key.endsWith(':recovery'));
      if (first === 'retire') {
        expect(retired).toBe(true);
        expect(completion.rejected).toEqual([h.effectId]);
        expect((await effectRow(pool, h.effectId))!.result).toBeNull();
        expect(recoveryMsgs).toHaveLength(1);
      } else {
        expect(retired).toBe(false);
        expect(completion.accepted).toEqual([h.effectId]);
        expect((await effectRow(pool, h.effectId))!.result).toBe('done');
        expect(recoveryMsgs).toHaveLength(0);
      }
    }
  });

  it('two pollers and explicit checks on one stale effect: one retirement, one response per check', async () => {
    const { inst, h } = await staleOptedIn();
    const [c1, c2] = await withTx(pool, { budgetMs: 5000 }, async (tx) => [
      await requestEffectRecovery(tx, h),
      await requestEffectRecovery(tx, h),
    ]);
    const lock = await holdInstance(inst);
    const pollOnly = { ...config };
    const racers = [
      runRecoveryPass(pool, pollOnly),
      runRecoveryPass(pool, pollOnly),
      processRecoveryChecks(pool, inst, config),
    ];
    await waitForLockWaiters(pool, 3);
    await lock.release();
    const settled = await Promise.allSettled(racers);
    expect(settled.every((s) => s.status === 'fulfilled')).toBe(true);
    const msgs = await messages(pool, inst);
    const keys = msgs.map((m) => m.message_key);
    expect(keys.filter((k) => k.endsWith(':recovery'))).toEqual([`effect:${h.effectId}:recovery`]);
    expect(keys.filter((k) => k === `effect:${h.effectId}:check:${c1!.requestId}`)).toHaveLength(1);
    expect(keys.filter((k) => k === `effect:${h.effectId}:check:${c2!.requestId}`)).toHaveLength(1);
    // Responses come after the recovery message.
    expect(keys.indexOf(`effect:${h.effectId}:recovery`)).toBeLessThan(
      keys.indexOf(`effect:${h.effectId}:check:${c1!.requestId}`),
    );
    const outcomes = msgs.filter((m) => m.message_key.includes(':check:')).map((m) => m.payload.outcome);
    expect(outcomes.filter((o) => o === 'retired').length).toBeLessThanOrEqual(1);
    expect(outcomes.every((o) => o === 'retired' || o === 'already_retired')).toBe(true);
  });

  it('polling never locks a fresh owner or its actor, even past the floor inside the effect grace', async () => {
    const p = await registerProcess(pool, 'w');
    const inst = await newInstance(pool);
    const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'r', timeoutMs: 120_000 } } }]);
    await claimOf(pool, p, inst);
    await ageHeartbeat(pool, p, 60_000); // floor (30 s) passed, the effect's grace (120 s) has not
    const lock = await holdInstance(inst);
    await lock.client.query('select id from effect_processes where id = $1 for update', [p]);
    await lock.client.query('select id from effects where id = $1 for update', [h!.effectId]);
    try {
      const report = await Promise.race([
        runRecoveryPass(pool, config),
        new Promise<never>((_, reject) =>
          setTimeout(() => reject(new Error('polling blocked on a lock')), 3000),
        ),
      ]);
      expect(report.errors).toBe(0);
    } finally {
      await lock.release();
    }
    expect((await effectRow(pool, h!.effectId))!.locked_by).toBe(p);
  });

  it('an explicit check on a fresh owner answers deferred and changes nothing', async () => {
    const p = await registerProcess(pool, 'w');
    const inst = await newInstance(pool);
    const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'r' } } }]);
    await claimOf(pool, p, inst);
    const { requestId } = await withTx(pool, { budgetMs: 5000 }, (tx) => requestEffectRecovery(tx, h!));
    const out = await processRecoveryChecks(pool, inst, config);
    expect(out.get(requestId)).toEqual({ outcome: 'deferred', ownerId: p });
    expect((await bindingRow(pool, h!.effectId))!.retired_at_ms).toBeNull();
  });

  it('requestEffectRecovery runs on the caller transaction while it holds the instance lock', async () => {
    const { inst, h } = await staleOptedIn();
    // The application's commit holds the actor's row lock; staging a check must not need another connection.
    const requestId = await withTx(pool, { budgetMs: 3000 }, async (tx) => {
      await tx.query('select id from actor_instances where id = $1 for update', [inst]);
      return (await requestEffectRecovery(tx, h)).requestId;
    });
    const out = await processRecoveryChecks(pool, inst, config);
    expect(out.get(requestId)).toMatchObject({ outcome: 'retired' });
  });
});
