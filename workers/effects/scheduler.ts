import type { Pool } from '@neondatabase/serverless';
import { withTx } from '../db/tx';
import { log } from '../log';
import { enqueueRuntimeMessages } from './mailbox';
import { completedKey, type EffectRow, failedKey, type Queryable } from './types';

export const MAX_CLAIM_BATCH = 500;

export interface ClaimOptions {
  limit: number;
  /** Only effects of this origin instance (an ActorHost runs its own instance's effects). */
  instanceId?: string;
  kinds?: string[];
}

/**
 * One statement: pick due pending effects with `skip locked`, mark them processing for
 * this process. A pending claim locks only the effect, never the instance. The process
 * must be registered and not stopped.
 */
export async function claimEffects(
  q: Queryable,
  processId: string,
  opts: ClaimOptions,
): Promise<EffectRow[]> {
  const { rows } = await q.query<EffectRow>(
    `with picked as (
       select id from effects
        where status = 'pending' and run_at_ms <= (select app_now_ms())
          and ($2::text is null or origin_instance_id = $2)
          and ($3::text[] is null or kind = any($3::text[]))
        order by run_at_ms, id
        limit $4
        for update skip locked)
     update effects e
        set status = 'processing', locked_by = $1, locked_at_ms = app_now_ms(), attempts = e.attempts + 1
       from picked
      where e.id = picked.id
        and exists (select 1 from effect_processes where id = $1 and stopped_at_ms is null)
     returning e.id, e.origin_instance_id, e.kind, e.args, e.status, e.locked_by, e.attempts,
               e.max_attempts, e.run_at_ms, e.result, e.last_error`,
    [processId, opts.instanceId ?? null, opts.kinds ?? null, Math.min(opts.limit, MAX_CLAIM_BATCH)],
  );
  return rows;
}

interface LockedEffect {
  id: string;
  origin_instance_id: string;
  locked_by: string | null;
  status: string;
  attempts: number;
  max_attempts: number;
  notify_on_complete: boolean;
}

/**
 * Locks the origin instances (ordered) and then the effects (ordered by ID), and splits the
 * effects into those still live-claimed by `processId` and the rest. A late write whose
 * claim was retired, requeued or taken over is rejected and logged.
 */
async function lockForWriteBack(tx: Queryable, processId: string, ids: string[], op: string) {
  await tx.query(
    `select id from actor_instances
      where id in (select origin_instance_id from effects where id = any($1::uuid[]))
      order by id for share`,
    [ids],
  );
  const { rows } = await tx.query<LockedEffect>(
    `select id, origin_instance_id, locked_by, status, attempts, max_attempts, notify_on_complete
       from effects where id = any($1::uuid[]) order by id for update`,
    [ids],
  );
  const live = rows.filter((r) => r.status === 'processing' && r.locked_by === processId);
  const liveIds = new Set(live.map((r) => r.id));
  const rejected = ids.filter((id) => !liveIds.has(id));
  if (rejected.length > 0)
    log.warn('effect_late_write_rejected', {
      op,
      processId,
      effectIds: rejected.slice(0, 20),
      count: rejected.length,
    });
  return { live, rejected };
}

function byInstance<T extends { origin_instance_id: string }>(rows: T[]): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const r of rows) out.set(r.origin_instance_id, [...(out.get(r.origin_instance_id) ?? []), r]);
  return out;
}

export interface WriteBackResult {
  accepted: string[];
  rejected: string[];
}

/** Completes a batch; each must match a live processing claim by `processId`. */
export async function completeEffects(
  pool: Pool,
  processId: string,
  results: { id: string; result: unknown }[],
  budgetMs = 5000,
): Promise<WriteBackResult> {
  if (results.length === 0) return { accepted: [], rejected: [] };
  const ids = results.map((r) => r.id);
  return withTx(pool, { budgetMs }, async (tx) => {
    const { live, rejected } = await lockForWriteBack(tx, processId, ids, 'complete');
    if (live.length === 0) return { accepted: [], rejected };
    const liveIds = new Set(live.map((r) => r.id));
    const accepted = results.filter((r) => liveIds.has(r.id));
    await tx.query(
      `update effects e set status = 'completed', result = r.result::jsonb, locked_by = null,
              locked_at_ms = null, finished_at_ms = app_now_ms()
         from unnest($1::uuid[], $2::text[]) as r(id, result)
        where e.id = r.id`,
      [accepted.map((r) => r.id), accepted.map((r) => JSON.stringify(r.result ?? null))],
    );
    const resultOf = new Map(accepted.map((r) => [r.id, r.result]));
    for (const [instanceId, rows] of byInstance(live.filter((r) => r.notify_on_complete)))
      await enqueueRuntimeMessages(
        tx,
        instanceId,
        rows.map((r) => ({
          key: completedKey(r.id),
          payload: { effectId: r.id, result: resultOf.get(r.id) ?? null },
        })),
      );
    return { accepted: accepted.map((r) => r.id), rejected };
  });
}

/**
 * Fails a batch. Ordinary scheduler behaviour: retry with exponential backoff (2^attempts s,
 * at most an hour), and after the last attempt the effect is dead and its origin receives the
 * failure callback `effect:<id>:failed`.
 */
export async function failEffects(
  pool: Pool,
  processId: string,
  failures: { id: string; error: string }[],
  budgetMs = 5000,
): Promise<WriteBackResult & { dead: string[] }> {
  if (failures.length === 0) return { accepted: [], rejected: [], dead: [] };
  const ids = failures.map((f) => f.id);
  return withTx(pool, { budgetMs }, async (tx) => {
    const { live, rejected } = await lockForWriteBack(tx, processId, ids, 'fail');
    const errorOf = new Map(failures.map((f) => [f.id, f.error.slice(0, 2000)]));
    if (live.length === 0) return { accepted: [], rejected, dead: [] };
    await tx.query(
      `update effects e
          set locked_by = null, locked_at_ms = null, last_error = f.error,
              status = case when e.attempts >= e.max_attempts then 'dead' else 'pending' end,
              finished_at_ms = case when e.attempts >= e.max_attempts then app_now_ms() end,
              run_at_ms = case when e.attempts >= e.max_attempts then e.run_at_ms
                               else app_now_ms() + least(power(2, e.attempts)::bigint * 1000, 3600000) end
         from unnest($1::uuid[], $2::text[]) as f(id, error)
        where e.id = f.id`,
      [live.map((r) => r.id), live.map((r) => errorOf.get(r.id) ?? '')],
    );
    const dead = live.filter((r) => r.attempts >= r.max_attempts);
    for (const [instanceId, rows] of byInstance(dead))
      await enqueueRuntimeMessages(
        tx,
        instanceId,
        rows.map((r) => ({
          key: failedKey(r.id),
          payload: { effectId: r.id, error: errorOf.get(r.id) ?? '' },
        })),
      );
    return { accepted: live.map((r) => r.id), rejected, dead: dead.map((r) => r.id) };
  });
}
