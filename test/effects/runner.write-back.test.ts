import { afterAll, describe, expect, it } from 'vitest';
import { registerProcess } from '../../workers/effects/processes';
import { EffectRegistry } from '../../workers/effects/registry';
import { runClaimedEffects } from '../../workers/effects/runner';
import { testPool } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { effectRow, emit, newInstance } from './helpers';

/**
 * Issue 35 hole 7: a batch's two write-backs are independent. A completion that times out (a
 * lock timeout is not retried) must not cost the batch its failures, and the loss is logged
 * once, with the effect ids whose outcome was not written.
 */
const registry = new EffectRegistry()
  .registerEffect({ kind: 'wb.ok', run: async () => ({ ok: true }) })
  .registerEffect({
    kind: 'wb.fails',
    run: async () => {
      throw new Error('remote said no');
    },
  });

const pool = testPool();
afterAll(() => pool.end());

describe('write-backs under a lock timeout', () => {
  it("a completion that times out on its instance lock still lets the batch's failures be written; the loss is logged once with the effect ids", async () => {
    const locked = await newInstance(pool);
    const free = await newInstance(pool);
    const [ok] = await emit(pool, locked, [{ kind: 'wb.ok' }]);
    const [bad] = await emit(pool, free, [{ kind: 'wb.fails' }]);
    const proc = await registerProcess(pool, 'wb');
    // Holds the completing effect's instance: the completion waits on it past its budget.
    const holder = await pool.connect();
    await holder.query('begin');
    await holder.query('select id from actor_instances where id = $1 for update', [locked]);
    const logs = captureLogLines({ quiet: true });
    let report: Awaited<ReturnType<typeof runClaimedEffects>>;
    try {
      report = await runClaimedEffects(pool, registry, proc, { limit: 10, writeBackBudgetMs: 500 });
    } finally {
      logs.restore();
      await holder.query('rollback');
      holder.release();
    }
    expect(report).toMatchObject({ claimed: 2, completed: 0, failed: 1, lost: 1 });
    // The failure was written: retried on its backoff, the claim cleared.
    expect(await effectRow(pool, bad!.effectId)).toMatchObject({
      status: 'pending',
      locked_by: null,
      last_error: 'remote said no',
    });
    // The completion was not: still this process's claim (recovery's to decide, by the rules).
    expect(await effectRow(pool, ok!.effectId)).toMatchObject({ status: 'processing', locked_by: proc });
    const lost = logs.events('effect_write_back_lost');
    expect(lost).toHaveLength(1);
    expect(lost[0]).toMatchObject({ op: 'complete', processId: proc, effectIds: [ok!.effectId], count: 1 });
  });
});
