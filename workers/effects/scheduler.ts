import type { Pool } from '@neondatabase/serverless';
import { withStatement } from '../db/tx';
import { log } from '../log';
import type { EffectRow, Queryable } from './types';

export const MAX_CLAIM_BATCH = 500;

export interface ClaimOptions {
  limit: number;
  /** Only effects of this origin instance (an ActorHost runs its own instance's effects). */
  instanceId?: string;
  kinds?: string[];
}

/**
 * One statement, `effects_claim` (migrations/functions/effects_write_back.sql): pick due pending
 * effects with `skip locked`, mark them processing for this process. A pending claim locks only
 * the effect, never the instance. The process must be registered and not stopped, and the
 * claim refreshes its heartbeat (an update, so a row lock): a prune that deleted the process
 * first leaves the claim nothing, and a prune queued behind the claim re-reads the fresh
 * heartbeat and keeps the new owner. Claims never wait on effects (`skip locked`), so holding
 * the process row cannot close a lock cycle. A SQL function since issue 35's pipelined drain:
 * the completion of one batch runs the same claim after its write (`completeEffects`'
 * `claimNext`), and the claim has one home.
 */
export async function claimEffects(
  q: Queryable,
  processId: string,
  opts: ClaimOptions,
): Promise<EffectRow[]> {
  const { rows } = await q.query<EffectRow>(CLAIM_SQL, [processId, ...claimParams(opts)]);
  return rows;
}

const CLAIM_SQL = 'select * from effects_claim($1, $2, $3, $4)';

/** The claim's own parameters after the process (instance, kinds, limit), as both SQL functions take them. */
function claimParams(opts: ClaimOptions) {
  return [opts.instanceId ?? null, opts.kinds ?? null, Math.min(opts.limit, MAX_CLAIM_BATCH)];
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
 * Write-backs are one statement each, effects_complete / effects_fail (migrations/functions/effects_write_back.sql): the
 * instance locks (`for share`, ordered by id) in their own statement first, so every instance
 * lock is held before the first effect lock (spec: completion/failure lock the instance before
 * the effect); then the effects `for update` in id order, `live` evaluated on the row version
 * locked (read committed re-reads a row changed while it waited, so a claim retired, requeued
 * or taken over meanwhile is not live), the write of the live rows and the runtime's callback
 * messages, in one statement. One round trip per batch instead of begin, 2 statements, one
 * mailbox insert per notified instance and commit: the drain was round-trip bound (issue 18).
 */
const COMPLETE_SQL = 'select * from effects_complete($1, $2, $3, $4)';
const COMPLETE_THEN_CLAIM_SQL = 'select * from effects_complete_then_claim($1, $2, $3, $4, $5, $6, $7)';
const FAIL_SQL = 'select * from effects_fail($1, $2, $3, $4)';

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

export interface WriteBackResult {
  accepted: string[];
  rejected: string[];
}

/**
 * Completes a batch; each must match a live processing claim by `processId`. With `claimNext`,
 * the same statement then claims the next batch (`effects_complete_then_claim`): one
 * transaction, so one commit per batch of a drain instead of two, and the claim runs after
 * the completion's locks, never waiting and never locking an instance (the spec's lock order
 * holds). If the statement fails, neither happened: the batch stays claimed and nothing new is.
 */
export async function completeEffects(
  pool: Pool,
  processId: string,
  results: { id: string; result: unknown }[],
  budgetMs = 5000,
  claimNext?: ClaimOptions,
): Promise<WriteBackResult & { next?: EffectRow[] }> {
  if (results.length === 0)
    return claimNext
      ? { accepted: [], rejected: [], next: await claimEffects(pool, processId, claimNext) }
      : { accepted: [], rejected: [] };
  // Last result wins for a repeated id, as one update per row allows.
  const resultOf = new Map(results.map((r) => [r.id, r.result ?? null]));
  const ids = [...resultOf.keys()];
  const params = [
    processId,
    ids,
    ids.map((id) => JSON.stringify(resultOf.get(id))),
    Math.max(1, Math.floor(budgetMs)),
  ];
  // With claimNext the claimed rows follow the completion's (`claimed`), their write-back columns null.
  const { rows } = await withStatement({ budgetMs }, () =>
    pool.query<WriteBackRow & EffectRow & { claimed?: boolean }>(
      claimNext ? COMPLETE_THEN_CLAIM_SQL : COMPLETE_SQL,
      claimNext ? [...params, ...claimParams(claimNext)] : params,
    ),
  );
  const { live, rejected } = splitLive(
    rows.filter((r) => !r.claimed),
    processId,
    ids,
    'complete',
  );
  const accepted = live.map((r) => r.id);
  return claimNext ? { accepted, rejected, next: rows.filter((r) => r.claimed) } : { accepted, rejected };
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
  const { rows } = await withStatement({ budgetMs }, () =>
    pool.query<WriteBackRow>(FAIL_SQL, [
      processId,
      ids,
      ids.map((id) => errorOf.get(id) ?? ''),
      Math.max(1, Math.floor(budgetMs)),
    ]),
  );
  const { live, rejected } = splitLive(rows, processId, ids, 'fail');
  const dead = live.filter((r) => r.attempts >= r.max_attempts);
  return { accepted: live.map((r) => r.id), rejected, dead: dead.map((r) => r.id) };
}
