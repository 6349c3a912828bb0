import { runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { BUCKET_FULL_AFTER_MS, type WorkspaceQuota } from '../../durable-objects/workspace-quota';

/**
 * Issue 29 "also still open": WorkspaceQuota kept one bucket row per actor forever. A bucket
 * untouched for a minute is full again (capacity = the per-minute rate, refilled at that rate),
 * and a full bucket is what no row means: such rows are pruned, a bounded number per charge.
 */
describe('WorkspaceQuota prunes buckets that have refilled', () => {
  it('quota.prune_full_buckets: rows idle past a full refill go, a recent one stays, the rate is unchanged', async () => {
    const quota = env.WORKSPACE_QUOTA.get(env.WORKSPACE_QUOTA.idFromName(`ws_prune_${crypto.randomUUID()}`));
    const now = Date.now();
    await runInDurableObject(quota, async (obj: WorkspaceQuota, state) => {
      // The table exists once the object started; seed idle and recent buckets.
      await obj.chargeIssuance({ actorId: 'seed', ratePerMinute: 3 });
      const sql = state.storage.sql;
      for (let i = 0; i < 50; i++)
        sql.exec('insert into buckets values (?, 0, ?)', `idle_${i}`, now - BUCKET_FULL_AFTER_MS - 1000);
      sql.exec('insert into buckets values (?, 0, ?)', 'recent', now - 1000);
    });
    const rows = () =>
      runInDurableObject(quota, (_obj, state) =>
        state.storage.sql
          .exec<{ actor_id: string }>('select actor_id from buckets order by actor_id')
          .toArray(),
      );
    expect((await rows()).length).toBe(52);
    // Any charge prunes; the recent (empty) bucket still refuses its actor.
    expect(await quota.chargeIssuance({ actorId: 'other', ratePerMinute: 3 })).toEqual({
      ok: true,
      retryAfterSeconds: 0,
    });
    expect((await rows()).map((r) => r.actor_id)).toEqual(['other', 'recent', 'seed']);
    expect((await quota.chargeIssuance({ actorId: 'recent', ratePerMinute: 3 })).ok).toBe(false);
    // A pruned actor starts full again, as it would have been.
    expect((await quota.chargeIssuance({ actorId: 'idle_0', ratePerMinute: 3 })).ok).toBe(true);
  });
});
