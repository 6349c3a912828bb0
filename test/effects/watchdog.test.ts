import { afterAll, afterEach, expect, it } from 'vitest';
import { type WatchdogState, watchdogActor, watchdogJob } from '../../examples/watchdog/watchdog';
import { enqueueMessage, ensureInstance, loadInstance } from '../../workers/effects/mailbox';
import { registerProcess } from '../../workers/effects/processes';
import { processRecoveryChecks, runRecoveryPass } from '../../workers/effects/recovery';
import { EffectRegistry } from '../../workers/effects/registry';
import { drainInstance, runClaimedEffects } from '../../workers/effects/runner';
import { claimEffects, completeEffects } from '../../workers/effects/scheduler';
import { setDbClockOffset, testPool, uid } from '../helpers/db';
import { ageHeartbeat, config } from './helpers';

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());
const registry = new EffectRegistry().registerActor(watchdogActor).registerEffect(watchdogJob);
const state = async (id: string) => (await loadInstance(pool, id))!.state as WatchdogState;

it('a lost process leads to one replacement generation, and success settles it once', async () => {
  const inst = await ensureInstance(pool, 'watchdog', uid('w'));
  await enqueueMessage(pool, inst, 'start:job-1', null);
  await drainInstance(pool, registry, inst, config);
  const first = (await state(inst)).current!;
  expect(await state(inst)).toMatchObject({ generation: 1, status: 'running' });

  const dead = await registerProcess(pool, 'worker');
  expect((await claimEffects(pool, dead, { limit: 10, instanceId: inst })).map((e) => e.id)).toEqual([
    first.effectId,
  ]);
  await ageHeartbeat(pool, dead, 31_000);
  expect((await runRecoveryPass(pool, config)).retired).toBe(1);
  await drainInstance(pool, registry, inst, config);
  const s2 = await state(inst);
  expect(s2).toMatchObject({ generation: 2, status: 'running' });
  expect(s2.current!.effectId).not.toBe(first.effectId);
  // The dead generation's late completion is refused by the runtime.
  expect((await completeEffects(pool, dead, [{ id: first.effectId, result: 'late' }])).accepted).toEqual([]);

  const live = await registerProcess(pool, 'worker');
  expect((await runClaimedEffects(pool, registry, live, { limit: 10, instanceId: inst })).completed).toBe(1);
  await drainInstance(pool, registry, inst, config);
  expect(await state(inst)).toMatchObject({
    status: 'done',
    generation: 2,
    result: { ran: { jobKey: 'job-1', generation: 2 } },
  });

  // A later probe answers "completed": same guard, already settled, nothing changes.
  await enqueueMessage(pool, inst, 'probe:1', null);
  await drainInstance(pool, registry, inst, config);
  expect((await state(inst)).generation).toBe(2);
});

it('completed-status repair settles through the same guard, and a status answer never replaces', async () => {
  const inst = await ensureInstance(pool, 'watchdog', uid('w'));
  await enqueueMessage(pool, inst, 'start:job-2', null);
  await drainInstance(pool, registry, inst, config);
  const p = await registerProcess(pool, 'worker');
  await claimEffects(pool, p, { limit: 10, instanceId: inst });
  // Fresh owner: the probe answers "deferred"; the watchdog logs it and starts nothing.
  await enqueueMessage(pool, inst, 'probe:1', null);
  await drainInstance(pool, registry, inst, config);
  await processRecoveryChecks(pool, inst, config);
  await drainInstance(pool, registry, inst, config);
  expect(await state(inst)).toMatchObject({ generation: 1, status: 'running' });
  expect((await state(inst)).log).toContain('status deferred');

  // The effect completes but its success callback is lost (consumed elsewhere).
  const id = (await state(inst)).current!.effectId;
  await completeEffects(pool, p, [{ id, result: { ran: 'ok' } }]);
  await pool.query("update actor_mailbox set state = 'delivered' where message_key = $1", [
    `effect:${id}:completed`,
  ]);
  await enqueueMessage(pool, inst, 'probe:2', null);
  await drainInstance(pool, registry, inst, config);
  await processRecoveryChecks(pool, inst, config);
  await drainInstance(pool, registry, inst, config);
  expect(await state(inst)).toMatchObject({ status: 'done', generation: 1, result: { ran: 'ok' } });
  expect((await state(inst)).log.at(-1)).toBe('done via status repair at generation 1');
});
