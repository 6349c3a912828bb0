import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { pollInstancesWithWork } from '../../workers/effects/cron';
import { ensureInstance, instancesWithWork } from '../../workers/effects/mailbox';
import { registerProcess } from '../../workers/effects/processes';
import { runRecoveryPass } from '../../workers/effects/recovery';
import { EffectRegistry } from '../../workers/effects/registry';
import { claimEffects } from '../../workers/effects/scheduler';
import { setDbClockOffset, testPool } from '../helpers/db';
import { ageHeartbeat, config, emit } from './helpers';

/**
 * Issue 35 hole 3: the minute poll is fair. A backlog on low instance ids must not hide a
 * high-id instance whose `:recovery` message lost its wake-up (a lost wake costs at most a
 * minute). The plan at scale (due-order index, no sequential scan): test/node/effects/poll-and-origin.scale.test.ts.
 */
const registry = new EffectRegistry().registerActor({
  type: 'fair',
  initialState: () => ({}),
  handle: (_e, s) => s,
});

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

describe('fair polling', () => {
  it('1,001 due messages on the lowest-id instance plus a lost-wake :recovery message on the highest-id one: one poll wakes the latter', async () => {
    const low = await ensureInstance(pool, 'fair', '0000-backlog');
    const high = await ensureInstance(pool, 'fair', 'zzzz-recovered');
    // Not-yet-due delayed messages of instances in between: the poll never wakes them.
    for (const key of ['5000-delayed-a', '5001-delayed-b'])
      await pool.query(
        `insert into actor_mailbox (instance_id, message_key, payload, available_at_ms)
         select $1, 'later:' || g, 'null', app_now_ms() + 3600000 from generate_series(1, 500) g`,
        [await ensureInstance(pool, 'fair', key)],
      );
    await pool.query(
      `insert into actor_mailbox (instance_id, message_key, payload)
       select $1, 'in:' || g, 'null' from generate_series(1, 1001) g`,
      [low],
    );
    // The high instance's claim dies; the pass retires it, and its wake-up is lost.
    const [h] = await emit(pool, high, [{ opts: { recovery: { operation: 'redo' } } }]);
    const dead = await registerProcess(pool, 'gone');
    await claimEffects(pool, dead, { limit: 1, instanceId: high });
    await ageHeartbeat(pool, dead, 31_000);
    expect((await runRecoveryPass(pool, config)).retired).toBe(1);
    const { rows } = await pool.query(
      'select 1 from actor_mailbox where instance_id = $1 and message_key = $2',
      [high, `effect:${h!.effectId}:recovery`],
    );
    expect(rows).toHaveLength(1);

    const woken: string[] = [];
    const report = await pollInstancesWithWork(pool, async (id) => void woken.push(id), registry);
    expect(woken.sort()).toEqual([low, high].sort());
    expect(report).toMatchObject({ polled: 2, unregistered: 0 });
    // The oldest due work first: the backlog's messages are older than the recovery message.
    expect(await instancesWithWork(pool, 1, { actorTypes: ['fair'] })).toEqual([low]);
  });
});
