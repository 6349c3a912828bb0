import { runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { PumpReport } from '../../durable-objects/actor-host';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { enqueueMessage, ensureInstance } from '../../workers/effects/mailbox';
import { effectRegistry } from '../../workers/effects/registry';
import type { EffectHandle } from '../../workers/effects/types';
import { setDbClockOffset, testPool, uid } from '../helpers/db';

/**
 * Issue 35 hole 5: work that arrives inside a wake is not left for the minute cron. A check a
 * completion callback stages (in the post-effect drain) is answered in that same wake, and a
 * wake that arrives during the last allowed pump of a wake is kept (the host's alarm, now).
 */
interface S {
  effect: EffectHandle | null;
  answers: string[];
}

effectRegistry
  .registerActor<S>({
    type: 'latency-test',
    initialState: () => ({ effect: null, answers: [] }),
    async handle(event, s, ctx) {
      const state: S = { effect: null, answers: [], ...(s as Partial<S>) };
      if (event.type !== 'message') return state;
      if (event.key === 'go') {
        const effect = ctx.emit('latency.ok', {}, { status: { operation: 'probe' }, notifyOnComplete: true });
        return { ...state, effect };
      }
      // The completion callback asks for a status check on the effect it reports.
      if (event.key.endsWith(':completed') && state.effect) await ctx.requestRecovery(state.effect);
      if (event.key.includes(':check:'))
        return { ...state, answers: [...state.answers, (event.payload as { outcome: string }).outcome] };
      return state;
    },
  })
  .registerEffect({ kind: 'latency.ok', run: async () => ({ ok: true }) });

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

describe('no work waits for the minute', () => {
  it('a check staged by a completion callback in the post-effect drain is answered in that same wake', async () => {
    const inst = await ensureInstance(pool, 'latency-test', uid('l'));
    await enqueueMessage(pool, inst, 'go', null);
    await actorHostStub(env, inst).wake(inst);
    const { rows } = await pool.query<{ outcome: string | null }>(
      'select outcome from effect_recovery_checks where origin_instance_id = $1',
      [inst],
    );
    expect(rows).toEqual([{ outcome: 'completed' }]);
    const state = (await pool.query('select state from actor_instances where id = $1', [inst])).rows[0].state;
    expect(state.answers).toEqual(['completed']);
  });

  it('a wake that arrives during the last allowed pump of a wake is kept: the host alarms now', async () => {
    const inst = await ensureInstance(pool, 'latency-test', uid('l'));
    const host = actorHostStub(env, inst);
    const planned = await runInDurableObject(host, async (obj, state) => {
      // Forced interleaving: every pump but the last reports work due at once (so the wake
      // pumps again), and a second wake arrives while the fourth, the last allowed, runs.
      const o = obj as unknown as {
        pump(pool: Pool, id: string): Promise<PumpReport>;
        wake(id: string): Promise<PumpReport>;
      };
      const pump = o.pump.bind(o);
      let n = 0;
      o.pump = async (p, id) => {
        n++;
        if (n === 4) void o.wake(id); // coalesces into this wake
        const r = await pump(p, id);
        return n < 4 ? { ...r, alarmAt: Date.now() } : r;
      };
      try {
        await o.wake(inst);
      } finally {
        o.pump = pump;
      }
      expect(n).toBe(4);
      return state.storage.get<number>('alarm:planned');
    });
    expect(planned, 'the wake that came during the last pump was dropped').toBeDefined();
    expect(planned!).toBeLessThanOrEqual(Date.now());
  });
});
