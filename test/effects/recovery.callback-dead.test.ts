import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { BACKLOG_QUERY, COUNT_CAP } from '../../workers/admin/backlog';
import { DEAD_LETTERS } from '../../workers/console/queries';
import { requeueDeadMessage } from '../../workers/effects/dead-letters';
import { loadInstance } from '../../workers/effects/mailbox';
import { registerProcess } from '../../workers/effects/processes';
import { runRecoveryPass } from '../../workers/effects/recovery';
import { effectRegistry } from '../../workers/effects/registry';
import { drainStep } from '../../workers/effects/runner';
import { claimEffects } from '../../workers/effects/scheduler';
import { effectConfig } from '../../workers/effects/types';
import { setDbClockOffset, testPool } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { ageHeartbeat, config, emit, newInstance } from './helpers';

/**
 * Issue 35 hole 10: a recovery callback (`effect:<id>:recovery`) that keeps failing is
 * dead-lettered like any message, but marked apart: its own alert event, a count in the status
 * view, a mark in the console's dead letters; and it stays requeueable.
 */
let broken = true;
effectRegistry.registerActor<{ recovered: number }>({
  type: 'callback-dead',
  initialState: () => ({ recovered: 0 }),
  handle(event, s) {
    if (event.type === 'message' && event.key.endsWith(':recovery')) {
      if (broken) throw new Error('recovery handler bug');
      return { recovered: (s?.recovered ?? 0) + 1 };
    }
    return s;
  },
});

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());
const twoAttempts = effectConfig({ ...config, mailboxMaxAttempts: 2 });

describe('a recovery callback that keeps failing', () => {
  it('is dead-lettered with its own alert event, counted in the status view, marked in the console, and requeueable', async () => {
    const inst = await newInstance(pool, 'callback-dead');
    const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'redo' } } }]);
    const dead = await registerProcess(pool, 'gone');
    await claimEffects(pool, dead, { limit: 1, instanceId: inst });
    await ageHeartbeat(pool, dead, 31_000);
    expect((await runRecoveryPass(pool, config)).retired).toBe(1);
    const key = `effect:${h!.effectId}:recovery`;

    const logs = captureLogLines({ quiet: true });
    try {
      await expect(drainStep(pool, effectRegistry, inst, twoAttempts)).rejects.toThrow(
        'recovery handler bug',
      );
      expect((await drainStep(pool, effectRegistry, inst, twoAttempts)).deadLettered).toBe(true);
    } finally {
      logs.restore();
    }
    const alert = logs.events('actor_recovery_callback_dead');
    expect(alert).toHaveLength(1);
    expect(alert[0]).toMatchObject({
      level: 'error',
      instanceId: inst,
      effectId: h!.effectId,
      messageKey: key,
    });
    expect(logs.events('actor_message_dead')).toEqual([]); // one incident, one line

    const backlog = (await pool.query(BACKLOG_QUERY, [COUNT_CAP, 30_000])).rows[0];
    expect(backlog.dead_recovery_callbacks).toBe(1);
    const letters = (await pool.query(DEAD_LETTERS)).rows.filter((r) => r.message_key === key);
    expect(letters).toMatchObject([{ recovery_callback: true }]);

    // Requeued once the handler is fixed: delivered, and the actor learns of the retirement.
    broken = false;
    expect(await requeueDeadMessage(pool, letters[0].id)).toBe(inst);
    expect((await drainStep(pool, effectRegistry, inst, twoAttempts)).handled).toBe(true);
    expect((await loadInstance(pool, inst))!.state).toEqual({ recovered: 1 });
    expect((await pool.query(BACKLOG_QUERY, [COUNT_CAP, 30_000])).rows[0].dead_recovery_callbacks).toBe(0);
  });
});
