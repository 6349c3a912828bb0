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
 * must be registered and not stopped, and the claim refreshes its heartbeat (an update, so a
 * row lock): a prune that deleted the process first leaves the claim nothing, and a prune
 * queued behind the claim re-reads the fresh heartbeat and keeps the new owner. Claims never
 * wait on effects (`skip locked`), so holding the process row cannot close a lock cycle. The picked ids go in as an array (`= any(array(...))`,
 * as graphile-worker does): joined `from picked`, the planner hashed the CTE and scanned the
 * whole effects table on every claim (15 ms of a 26 ms claim at 20k rows; it grows with the
 * finished rows kept for retention), where the array probes the primary key 100 times.
 */
export async function claimEffects(
  q: Queryable,
  processId: string,
  opts: ClaimOptions,
): Promise<EffectRow[]> {
  const { rows } = await q.query<EffectRow>(
    `with alive as (
       update effect_processes set heartbeat_at_ms = app_now_ms()
        where id = $1 and stopped_at_ms is null
        returning id),
     picked as (
       select id from effects
        where status = 'pending' and run_at_ms <= (select app_now_ms())
          and ($2::text is null or origin_instance_id = $2)
          and ($3::text[] is null or kind = any($3::text[]))
        order by run_at_ms, id
        limit $4
        for update skip locked)
     update effects e
        set status = 'processing', locked_by = $1, locked_at_ms = (select app_now_ms()), attempts = e.attempts + 1
      where e.id = any(array(select id from picked))
        and exists (select 1 from alive)
     returning e.id, e.origin_instance_id, e.kind, e.args, e.status, e.locked_by, e.attempts,
               e.max_attempts, e.run_at_ms, e.result, e.last_error`,
    [processId, opts.instanceId ?? null, opts.kinds ?? null, Math.min(opts.limit, MAX_CLAIM_BATCH)],
  );
  return rows;
}

interface WriteBackRow {
  id: string;
  origin_instance_id: string;
  notify_on_complete: boolean;
  attempts: number;
  max_attempts: number;
  /** Still processing and claimed by this process when its lock was taken. */
  live: boolean;
}

/**
 * The first statement of every write-back: locks the origin instances (`for share`, ordered
 * by ID). An explicit statement, so every instance lock is held before the first effect lock
 * whatever plan the effect statement gets (spec: completion/failure lock the instance before
 * the effect). $1 = effect ids.
 */
const LOCK_INSTANCES = `
  select id from actor_instances
   where id in (select origin_instance_id from effects where id = any($1::uuid[]))
   order by id for share`;

/**
 * The effect half of a write-back, as a CTE so locking and writing are one statement. `locked`
 * locks the effects in ID order; `live` is evaluated on the row version it locked (read
 * committed re-reads a row changed while it waited), so a claim retired, requeued or taken
 * over in the meantime is not live. $1 = process id, $2 = effect ids.
 */
const LOCK_FOR_WRITE_BACK = `
  with locked as (
    select e.id, e.origin_instance_id, e.notify_on_complete, e.attempts, e.max_attempts,
           (e.status = 'processing' and e.locked_by = $1) as live
      from effects e
     where e.id = any($2::uuid[])
     order by e.id for update)`;

/** Splits the locked rows into live claims and rejected ids; logs a late write. */
function splitLive(rows: WriteBackRow[], processId: string, ids: string[], op: string) {
  const live = rows.filter((r) => r.live);
  const liveIds = new Set(live.map((r) => r.id));
  const rejected = [...new Set(ids)].filter((id) => !liveIds.has(id));
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
  // Last result wins for a repeated id, as one update per row allows.
  const resultOf = new Map(results.map((r) => [r.id, r.result ?? null]));
  const ids = [...resultOf.keys()];
  return withTx(pool, { budgetMs }, async (tx) => {
    await tx.query(LOCK_INSTANCES, [ids]);
    const { rows } = await tx.query<WriteBackRow>(
      `${LOCK_FOR_WRITE_BACK},
       done as (
         update effects e set status = 'completed', result = r.result::jsonb, locked_by = null,
                locked_at_ms = null, finished_at_ms = (select app_now_ms())
           from locked l, unnest($2::uuid[], $3::text[]) as r(id, result)
          where l.live and r.id = l.id and e.id = l.id)
       select id, origin_instance_id, notify_on_complete, attempts, max_attempts, live from locked`,
      [processId, ids, ids.map((id) => JSON.stringify(resultOf.get(id)))],
    );
    const { live, rejected } = splitLive(rows, processId, ids, 'complete');
    if (live.length === 0) return { accepted: [], rejected };
    for (const [instanceId, rows] of byInstance(live.filter((r) => r.notify_on_complete)))
      await enqueueRuntimeMessages(
        tx,
        instanceId,
        rows.map((r) => ({
          key: completedKey(r.id),
          payload: { effectId: r.id, result: resultOf.get(r.id) ?? null },
        })),
      );
    return { accepted: live.map((r) => r.id), rejected };
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
  const errorOf = new Map(failures.map((f) => [f.id, f.error.slice(0, 2000)]));
  const ids = [...errorOf.keys()];
  return withTx(pool, { budgetMs }, async (tx) => {
    await tx.query(LOCK_INSTANCES, [ids]);
    const { rows } = await tx.query<WriteBackRow>(
      `${LOCK_FOR_WRITE_BACK},
       clock as (select app_now_ms() as ms),
       done as (
         update effects e
            set locked_by = null, locked_at_ms = null, last_error = f.error,
                status = case when e.attempts >= e.max_attempts then 'dead' else 'pending' end,
                finished_at_ms = case when e.attempts >= e.max_attempts then clock.ms end,
                run_at_ms = case when e.attempts >= e.max_attempts then e.run_at_ms
                                 else clock.ms + least(power(2, e.attempts)::bigint * 1000, 3600000) end
           from locked l, clock, unnest($2::uuid[], $3::text[]) as f(id, error)
          where l.live and f.id = l.id and e.id = l.id)
       select id, origin_instance_id, notify_on_complete, attempts, max_attempts, live from locked`,
      [processId, ids, ids.map((id) => errorOf.get(id) ?? '')],
    );
    const { live, rejected } = splitLive(rows, processId, ids, 'fail');
    if (live.length === 0) return { accepted: [], rejected, dead: [] };
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
