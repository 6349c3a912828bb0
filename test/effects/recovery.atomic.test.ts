import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { processRecoveryChecks, requestEffectRecovery } from '../../workers/effects/recovery';
import { setDbClockOffset, testPool } from '../helpers/db';
import { bindingRow, config, effectRow, stoppedOwnerEffect } from './helpers';

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

/** A recovery-bound effect whose owner stopped ten minutes ago, with one open check on it. */
async function staleWithCheck() {
  const { inst, handle, owner } = await stoppedOwnerEffect(pool, 'atomic');
  const { requestId } = await withTx(pool, { budgetMs: 5000 }, (tx) =>
    requestEffectRecovery(tx, inst, handle),
  );
  return { inst, effectId: handle.effectId, requestId, owner };
}

/** A row already under `key`: the runtime's own insert of that key fails (unique violation). */
async function obstacle(inst: string, key: string) {
  await pool.query(
    `insert into actor_mailbox (instance_id, message_key, payload) values ($1, $2, '"obstacle"')`,
    [inst, key],
  );
  return () =>
    pool.query('delete from actor_mailbox where instance_id = $1 and message_key = $2', [inst, key]);
}

async function snapshot(inst: string, effectId: string) {
  const checks = await pool.query('select id, outcome from effect_recovery_checks where effect_id = $1', [
    effectId,
  ]);
  const mailbox = await pool.query<{ message_key: string }>(
    'select message_key from actor_mailbox where instance_id = $1 order by id',
    [inst],
  );
  return {
    effect: await effectRow(pool, effectId),
    binding: await bindingRow(pool, effectId),
    checks: checks.rows,
    keys: mailbox.rows.map((r) => r.message_key),
  };
}

describe('spec: "The terminal transition and effect:<id>:recovery mailbox insertion are atomic … Failure of either insertion rolls the transaction back"', () => {
  for (const failing of ['recovery message', 'check response'] as const) {
    it(`the ${failing} insert fails: retirement, binding, check row and mailbox unchanged; the retry retires once, recovery first, then the response`, async () => {
      const s = await staleWithCheck();
      const key =
        failing === 'recovery message'
          ? `effect:${s.effectId}:recovery`
          : `effect:${s.effectId}:check:${s.requestId}`;
      const remove = await obstacle(s.inst, key);
      const before = await snapshot(s.inst, s.effectId);
      expect(before.effect).toMatchObject({ status: 'processing', locked_by: s.owner });

      await expect(processRecoveryChecks(pool, s.inst, config)).rejects.toMatchObject({ code: '23505' });
      expect(await snapshot(s.inst, s.effectId)).toEqual(before);

      await remove();
      const outcomes = await processRecoveryChecks(pool, s.inst, config);
      expect(outcomes.get(s.requestId)).toMatchObject({ outcome: 'retired' });
      const after = await snapshot(s.inst, s.effectId);
      expect(after.effect).toMatchObject({ status: 'completed', locked_by: null, result: null });
      expect(after.binding?.retired_at_ms).not.toBeNull();
      expect(after.checks).toEqual([{ id: s.requestId, outcome: 'retired' }]);
      expect(after.keys).toEqual([
        `effect:${s.effectId}:recovery`,
        `effect:${s.effectId}:check:${s.requestId}`,
      ]);
      // Nothing left to do: a second batch writes nothing more.
      expect((await processRecoveryChecks(pool, s.inst, config)).size).toBe(0);
      expect((await snapshot(s.inst, s.effectId)).keys).toHaveLength(2);
    });
  }
});
