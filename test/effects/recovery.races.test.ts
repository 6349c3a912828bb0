import { describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { registerProcess } from '../../workers/effects/processes';
import {
  processRecoveryChecks,
  requestEffectRecovery,
  runRecoveryPass,
} from '../../workers/effects/recovery';
import { completeEffects } from '../../workers/effects/scheduler';
import { waitUntilBlocked } from '../helpers/db';
import {
  ageHeartbeat,
  bindingRow,
  claimOf,
  config,
  effectRow,
  emit,
  messages,
  neverBlocked,
  newInstance,
  raceScope,
} from './helpers';
import { openRacer } from './pairs';
import { holdRows } from './row-locks';

const { pool, opened } = raceScope(12);

/** Holds `for update` on the instance row in its own connection until `release()`. */
const holdInstance = (instanceId: string) => holdRows(pool, opened, [['actor_instances', instanceId]]);

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
      const retirer = await openRacer(opened);
      const completer = await openRacer(opened);
      const retire = () => runRecoveryPass(retirer.pool, config);
      const complete = () => completeEffects(completer.pool, p, [{ id: h.effectId, result: 'done' }]);
      // `first` queues on the instance lock first, the other behind it: released in that order.
      const a = first === 'retire' ? retire() : complete();
      await waitUntilBlocked(pool, first === 'retire' ? retirer.pid : completer.pid);
      const b = first === 'retire' ? complete() : retire();
      await waitUntilBlocked(pool, first === 'retire' ? completer.pid : retirer.pid);
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
      await requestEffectRecovery(tx, h.instanceId, h),
      await requestEffectRecovery(tx, h.instanceId, h),
    ]);
    const lock = await holdInstance(inst);
    const [poller1, poller2, checker] = await Promise.all([
      openRacer(opened),
      openRacer(opened),
      openRacer(opened),
    ]);
    // Queued on the instance lock in this order, each behind the one before.
    const racers: Promise<unknown>[] = [];
    for (const [r, run] of [
      [poller1, () => runRecoveryPass(poller1.pool, config)],
      [poller2, () => runRecoveryPass(poller2.pool, config)],
      [checker, () => processRecoveryChecks(checker.pool, inst, config)],
    ] as const) {
      racers.push(run());
      await waitUntilBlocked(pool, r.pid);
    }
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
    const poller = await openRacer(opened);
    const report = await neverBlocked(pool, poller.pid, runRecoveryPass(poller.pool, config));
    expect(report.errors).toBe(0);
    await lock.release();
    expect((await effectRow(pool, h!.effectId))!.locked_by).toBe(p);
  });

  it('an explicit check on a fresh owner answers deferred and changes nothing', async () => {
    const p = await registerProcess(pool, 'w');
    const inst = await newInstance(pool);
    const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'r' } } }]);
    await claimOf(pool, p, inst);
    const { requestId } = await withTx(pool, { budgetMs: 5000 }, (tx) =>
      requestEffectRecovery(tx, h!.instanceId, h!),
    );
    const out = await processRecoveryChecks(pool, inst, config);
    expect(out.get(requestId)).toEqual({ outcome: 'deferred', ownerId: p });
    expect((await bindingRow(pool, h!.effectId))!.retired_at_ms).toBeNull();
  });

  it('requestEffectRecovery runs on the caller transaction while it holds the instance lock', async () => {
    const { inst, h } = await staleOptedIn();
    // The application's commit holds the actor's row lock; staging a check must not need another connection.
    const requestId = await withTx(pool, { budgetMs: 3000 }, async (tx) => {
      await tx.query('select id from actor_instances where id = $1 for update', [inst]);
      return (await requestEffectRecovery(tx, h.instanceId, h)).requestId;
    });
    const out = await processRecoveryChecks(pool, inst, config);
    expect(out.get(requestId)).toMatchObject({ outcome: 'retired' });
  });
});
