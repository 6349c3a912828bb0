import { afterAll, describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { enqueueMessage, loadInstance } from '../../workers/effects/mailbox';
import { processRecoveryChecks, requestEffectRecovery } from '../../workers/effects/recovery';
import { effectRegistry } from '../../workers/effects/registry';
import { drainStep } from '../../workers/effects/runner';
import type { EffectHandle } from '../../workers/effects/types';
import { AppError } from '../../workers/errors';
import { setDbClockOffset, testPool } from '../helpers/db';
import { bindingRow, config, effectRow, messages, newInstance, stoppedOwnerEffect } from './helpers';

// An actor that asks for a check on whatever handle its message carries.
effectRegistry.registerActor<{ asked: number }>({
  type: 'cross-actor-checker',
  initialState: () => ({ asked: 0 }),
  handle(event, s, ctx) {
    if (event.type !== 'message') return s;
    ctx.requestRecovery((event.payload as { handle: EffectHandle }).handle);
    return { asked: (s?.asked ?? 0) + 1 };
  },
});

const pool = testPool();
afterAll(async () => {
  await setDbClockOffset(pool, 0);
  await pool.end();
});

/** Another actor's recovery-bound effect whose owner stopped long ago: retirable by a check. */
async function foreignStaleEffect() {
  const { inst, handle } = await stoppedOwnerEffect(pool, 'cross-actor-victim');
  return { victim: inst, handle };
}

const checkRows = async (instanceId: string) =>
  (await pool.query('select id from effect_recovery_checks where origin_instance_id = $1', [instanceId]))
    .rows;

describe('spec: bindings "neither pin instances nor authorize cross-actor access"', () => {
  it("an actor's check on another actor's handle is refused: nothing is written for the other actor, and the turn's outcome says why", async () => {
    const { victim, handle } = await foreignStaleEffect();
    const caller = await newInstance(pool, 'cross-actor-checker');
    await enqueueMessage(pool, caller, 'probe', { handle });
    const before = await loadInstance(pool, caller);

    await expect(drainStep(pool, effectRegistry, caller, config)).rejects.toMatchObject({
      code: 'forbidden',
    });

    // Nothing for the other actor: no check row, no retirement, no message in its mailbox.
    expect(await checkRows(victim)).toEqual([]);
    await processRecoveryChecks(pool, victim, config);
    expect(await effectRow(pool, handle.effectId)).toMatchObject({ status: 'processing' });
    expect((await bindingRow(pool, handle.effectId))?.retired_at_ms).toBeNull();
    expect(await messages(pool, victim)).toEqual([]);
    // The calling turn committed nothing, and its message records why it failed.
    expect((await loadInstance(pool, caller))!.revision).toBe(before!.revision);
    const { rows } = await pool.query<{ last_error: string; attempts: number }>(
      `select last_error, attempts from actor_mailbox where instance_id = $1 and message_key = 'probe'`,
      [caller],
    );
    expect(rows[0]).toMatchObject({ attempts: 1, last_error: expect.stringMatching(/^forbidden: /) });
  });

  it('the library call refuses it too: a check is staged only for the calling instance', async () => {
    const { victim, handle } = await foreignStaleEffect();
    const caller = await newInstance(pool, 'cross-actor-checker');
    const attempt = withTx(pool, { budgetMs: 5000 }, (tx) => requestEffectRecovery(tx, caller, handle));
    await expect(attempt).rejects.toBeInstanceOf(AppError);
    await expect(attempt).rejects.toMatchObject({ code: 'forbidden' });
    expect(await checkRows(victim)).toEqual([]);
    // The owner's own check is accepted.
    await withTx(pool, { budgetMs: 5000 }, (tx) => requestEffectRecovery(tx, victim, handle));
    expect(await checkRows(victim)).toHaveLength(1);
  });
});
