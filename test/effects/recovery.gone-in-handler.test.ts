import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { enqueueMessage, loadInstance } from '../../workers/effects/mailbox';
import { effectRegistry } from '../../workers/effects/registry';
import { drainStep } from '../../workers/effects/runner';
import type { EffectHandle } from '../../workers/effects/types';
import { AppError } from '../../workers/errors';
import { setDbClockOffset, testPool } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { config, emit, newInstance } from './helpers';

/**
 * Issue 35 hole 6: `ctx.requestRecovery` on a handle with no live binding (never bound, or
 * past its lifetime) is refused where the handler can see it, as `forbidden` is, never inside
 * the commit: there it rolled the whole turn back and counted a failed delivery, and after
 * `mailboxMaxAttempts` the message was dead with the turn's state and effects lost.
 */
interface S {
  refused: string[];
  turns: number;
}

effectRegistry.registerActor<S>({
  type: 'gone-checker',
  initialState: () => ({ refused: [], turns: 0 }),
  async handle(event, s, ctx) {
    const state: S = { refused: [], turns: 0, ...(s as Partial<S>) };
    if (event.type !== 'message') return state;
    const { handle, awaitIt } = event.payload as { handle: EffectHandle; awaitIt: boolean };
    ctx.emit('noop', { turn: state.turns + 1 });
    if (!awaitIt) {
      // A handler that does not wait for the answer: its turn still commits.
      void ctx.requestRecovery(handle);
      return { ...state, turns: state.turns + 1 };
    }
    try {
      await ctx.requestRecovery(handle);
    } catch (err) {
      if (!(err instanceof AppError)) throw err;
      return { refused: [...state.refused, err.code], turns: state.turns + 1 };
    }
    return { ...state, turns: state.turns + 1 };
  },
});

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

const messageRow = async (instanceId: string, key: string) =>
  (
    await pool.query<{ state: string; attempts: number }>(
      'select state, attempts from actor_mailbox where instance_id = $1 and message_key = $2',
      [instanceId, key],
    )
  ).rows[0];

const openChecks = async (instanceId: string) =>
  (await pool.query('select 1 from effect_recovery_checks where origin_instance_id = $1', [instanceId]))
    .rowCount;

describe('a check on a handle with no live binding', () => {
  it('a never-bound handle is refused with gone inside the handler, which catches it; the turn commits and nothing counts as a failed delivery', async () => {
    const inst = await newInstance(pool, 'gone-checker');
    const [unbound] = await emit(pool, inst, [{ kind: 'noop' }]); // no recovery or status binding
    await enqueueMessage(pool, inst, 'probe', { handle: unbound, awaitIt: true });
    const step = await drainStep(pool, effectRegistry, inst, config);
    expect(step).toMatchObject({ handled: true, checkRequestIds: [] });
    expect(step.deadLettered).toBeUndefined();
    expect((await loadInstance(pool, inst))!.state).toEqual({ refused: ['gone'], turns: 1 });
    expect(await messageRow(inst, 'probe')).toEqual({ state: 'delivered', attempts: 0 });
    expect(step.effects).toHaveLength(1); // the turn's own effect was committed with it
    expect(await openChecks(inst)).toBe(0);
  });

  it('a handle past its binding lifetime is refused the same way; a handler that does not wait still commits its turn, and the refusal is logged once', async () => {
    const inst = await newInstance(pool, 'gone-checker');
    const [bound] = await emit(pool, inst, [{ kind: 'noop', opts: { status: { operation: 'probe' } } }]);
    // The effect ended and its binding's lifetime passed (7 days past its end).
    await pool.query(
      "update effects set status = 'completed', finished_at_ms = app_now_ms() - 8 * 86400000 where id = $1",
      [bound!.effectId],
    );
    await pool.query(
      'update effect_recoveries set expires_at_ms = app_now_ms() - 86400000 where effect_id = $1',
      [bound!.effectId],
    );
    await enqueueMessage(pool, inst, 'probe:caught', { handle: bound, awaitIt: true });
    await enqueueMessage(pool, inst, 'probe:ignored', { handle: bound, awaitIt: false });
    const logs = captureLogLines({ quiet: true });
    try {
      expect((await drainStep(pool, effectRegistry, inst, config)).handled).toBe(true);
      expect((await drainStep(pool, effectRegistry, inst, config)).handled).toBe(true);
    } finally {
      logs.restore();
    }
    expect((await loadInstance(pool, inst))!.state).toEqual({ refused: ['gone'], turns: 2 });
    expect(await messageRow(inst, 'probe:caught')).toEqual({ state: 'delivered', attempts: 0 });
    expect(await messageRow(inst, 'probe:ignored')).toEqual({ state: 'delivered', attempts: 0 });
    expect(await openChecks(inst)).toBe(0);
    const refused = logs.events('actor_recovery_check_refused');
    expect(refused).toHaveLength(2);
    expect(refused[0]).toMatchObject({ instanceId: inst, effectId: bound!.effectId, code: 'gone' });
    expect(logs.events('actor_message_failed')).toEqual([]);
  });
});
