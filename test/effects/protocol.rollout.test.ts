import { afterAll, describe, expect, it } from 'vitest';
import { pruneEffectRows } from '../../workers/effects/cron';
import { registerProcess, stopProcess } from '../../workers/effects/processes';
import { EFFECT_PROTOCOL_VERSION } from '../../workers/effects/types';
import { backendPid, blockedBehind, testPool } from '../helpers/db';
import { config, emit, newInstance } from './helpers';

/**
 * Issue 35 hole 8: the binding-lifetime rule (migration 0013: a binding lives while its effect
 * is pending or processing) is protocol 3. A version-2 Worker still running during a rollout
 * (its actor hosts, and its retention, which deletes bindings a live effect keeps) blocks
 * recovery-enabled emits; and retention now announces its protocol too, so the guard of any
 * later version sees an older retention pass the way it sees an older claimer.
 */
const pool = testPool();
afterAll(() => pool.end());

describe('rollout safety of the effect protocol', () => {
  it('the binding-lifetime rule is protocol 3: a live version-2 process blocks recovery-enabled emits', async () => {
    expect(EFFECT_PROTOCOL_VERSION).toBeGreaterThanOrEqual(3);
    const v2 = await registerProcess(pool, 'actor-host', 2);
    const inst = await newInstance(pool);
    try {
      await expect(emit(pool, inst, [{ opts: { recovery: { operation: 'redo' } } }])).rejects.toMatchObject({
        code: 'precondition_failed',
      });
      // Ordinary effects are not affected.
      await emit(pool, inst, [{}]);
    } finally {
      await stopProcess(pool, v2);
    }
    await emit(pool, inst, [{ opts: { recovery: { operation: 'redo' } } }]);
  });

  it('a retention pass runs as a registered process of its protocol version, and leaves no row behind', async () => {
    // Hold a delivered message past retention: the pass's mailbox batch waits on its row lock.
    const inst = await newInstance(pool);
    await pool.query(
      `insert into actor_mailbox (instance_id, message_key, payload, state, delivered_at_ms)
       values ($1, 'old', 'null', 'delivered', app_now_ms() - 2 * 86400000)`,
      [inst],
    );
    const holder = await pool.connect();
    await holder.query('begin');
    await holder.query(
      "select id from actor_mailbox where instance_id = $1 and message_key = 'old' for update",
      [inst],
    );
    const pass = pruneEffectRows(pool, config);
    let during: { role: string; protocol_version: number }[];
    try {
      await blockedBehind(pool, await backendPid(holder));
      during = (
        await pool.query<{ role: string; protocol_version: number }>(
          "select role, protocol_version from effect_processes where role = 'effect-retention' and stopped_at_ms is null",
        )
      ).rows;
    } finally {
      await holder.query('rollback');
      holder.release();
    }
    expect((await pass).failed).toEqual([]);
    expect(during).toEqual([{ role: 'effect-retention', protocol_version: EFFECT_PROTOCOL_VERSION }]);
    const after = await pool.query("select 1 from effect_processes where role = 'effect-retention'");
    expect(after.rowCount).toBe(0);
  });
});
