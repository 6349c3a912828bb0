import { enqueueRuntimeMessages } from './mailbox';
import {
  checkKey,
  type EffectRuntimeConfig,
  failedKey,
  type Queryable,
  type RecoveryBindingRow,
  recoveryKey,
} from './types';

/** What a check (or a poll) concluded about one effect. Callers switch on `outcome`. */
export type RecoveryOutcome =
  | { outcome: 'retired'; retiredAtMs: number }
  | { outcome: 'already_retired'; retiredAtMs: number }
  | { outcome: 'completed'; result: unknown }
  | { outcome: 'dead'; error: string | null }
  | { outcome: 'pending' }
  | { outcome: 'deferred'; ownerId: string }
  | { outcome: 'missing' }
  /** The binding was pruned between staging the check and running it. */
  | { outcome: 'expired' };

interface LockedEffect {
  id: string;
  kind: string;
  status: string;
  locked_by: string | null;
  attempts: number;
  max_attempts: number;
  result: unknown;
  last_error: string | null;
}

interface LockedProcess {
  id: string;
  heartbeat_at_ms: string;
}

/**
 * Locks, in the one order every recovery path uses: the origin instance; the effects by
 * ID; their bindings by effect ID; then the current owner processes by ID (after all
 * effect and binding locks). Database wall time is read only after every lock is held.
 * Returns null when the instance is gone (its effects and bindings went with it).
 */
async function lockAll(tx: Queryable, instanceId: string, effectIds: string[]) {
  const inst = await tx.query('select id from actor_instances where id = $1 for no key update', [instanceId]);
  if (inst.rowCount !== 1) return null;
  const effects = await tx.query<LockedEffect>(
    `select id, kind, status, locked_by, attempts, max_attempts, result, last_error from effects
      where id = any($1::uuid[]) and origin_instance_id = $2 order by id for update`,
    [effectIds, instanceId],
  );
  const bindings = await tx.query<RecoveryBindingRow>(
    `select effect_id, origin_instance_id, recovery_operation, status_operation, timeout_ms,
            retired_at_ms, expires_at_ms
       from effect_recoveries where effect_id = any($1::uuid[]) and origin_instance_id = $2
      order by effect_id for update`,
    [effectIds, instanceId],
  );
  const owners = [
    ...new Set(effects.rows.flatMap((e) => (e.status === 'processing' && e.locked_by ? [e.locked_by] : []))),
  ];
  const procs = await tx.query<LockedProcess>(
    'select id, heartbeat_at_ms from effect_processes where id = any($1::bigint[]) order by id for share',
    [owners],
  );
  const { rows } = await tx.query<{ now: string }>('select app_now_ms() as now');
  return {
    effects: new Map(effects.rows.map((e) => [e.id, e])),
    bindings: new Map(bindings.rows.map((b) => [b.effect_id, b])),
    procs: new Map(procs.rows.map((p) => [p.id, p])),
    now: Number(rows[0]!.now),
  };
}

export interface DecideResult {
  outcomes: Map<string, RecoveryOutcome>;
  /** Effects this transaction retired (the caller wakes the origin's host after commit). */
  retired: string[];
  /** Response outcome per check request id. */
  checkOutcomes: Map<string, RecoveryOutcome>;
}

/**
 * The decision for a set of effects of one origin instance, inside the caller's
 * transaction. A stale owner is one that is missing or whose locked heartbeat is older
 * than greatest(runtime threshold, the binding's timeout). Opted-in stale effects are
 * retired (binding stamped, claim cleared, stored as completed, `effect:<id>:recovery`
 * enqueued); others get ordinary scheduler behaviour (back to pending, or dead after the
 * last attempt). Check responses are enqueued after the recovery message; any insert
 * failure throws and the caller's rollback undoes the whole decision.
 */
export async function decideRecovery(
  tx: Queryable,
  instanceId: string,
  effectIds: string[],
  checks: { requestId: string; effectId: string }[],
  config: Pick<EffectRuntimeConfig, 'staleAfterMs'>,
): Promise<DecideResult> {
  const sorted = [...new Set(effectIds)].sort();
  const result: DecideResult = { outcomes: new Map(), retired: [], checkOutcomes: new Map() };
  const locked = await lockAll(tx, instanceId, sorted);
  if (!locked) {
    for (const id of sorted) result.outcomes.set(id, { outcome: 'missing' });
    return result;
  }
  const { effects, bindings, procs, now } = locked;
  const messages: { key: string; payload: unknown }[] = [];
  for (const id of sorted) {
    const e = effects.get(id);
    const b = bindings.get(id);
    let out: RecoveryOutcome;
    if (b?.retired_at_ms) out = { outcome: 'already_retired', retiredAtMs: Number(b.retired_at_ms) };
    else if (!e) out = { outcome: 'missing' };
    else if (e.status === 'completed') out = { outcome: 'completed', result: e.result };
    else if (e.status === 'dead') out = { outcome: 'dead', error: e.last_error };
    else if (e.status === 'pending') out = { outcome: 'pending' };
    else {
      const owner = e.locked_by ? procs.get(e.locked_by) : undefined;
      const effective = Math.max(config.staleAfterMs, Number(b?.timeout_ms ?? 0));
      const stale = !owner || Number(owner.heartbeat_at_ms) < now - effective;
      if (!stale) out = { outcome: 'deferred', ownerId: e.locked_by! };
      else if (b?.recovery_operation) {
        // Both rows are locked already; one statement saves a round trip per retirement.
        await tx.query(
          `with b as (update effect_recoveries set retired_at_ms = $2 where effect_id = $1 returning effect_id)
           update effects set status = 'completed', locked_by = null, locked_at_ms = null, finished_at_ms = $2
            where id = (select effect_id from b)`,
          [id, now],
        );
        messages.push({
          key: recoveryKey(id),
          payload: {
            effectId: id,
            kind: e.kind,
            operation: b.recovery_operation,
            retiredAtMs: now,
            attempts: e.attempts,
          },
        });
        result.retired.push(id);
        out = { outcome: 'retired', retiredAtMs: now };
      } else if (e.attempts >= e.max_attempts) {
        await tx.query(
          `update effects set status = 'dead', locked_by = null, locked_at_ms = null, finished_at_ms = $2,
                  last_error = 'owner stale after last attempt' where id = $1`,
          [id, now],
        );
        messages.push({
          key: failedKey(id),
          payload: { effectId: id, error: 'owner stale after last attempt' },
        });
        out = { outcome: 'dead', error: 'owner stale after last attempt' };
      } else {
        await tx.query(
          `update effects set status = 'pending', locked_by = null, locked_at_ms = null, run_at_ms = $2
            where id = $1`,
          [id, now],
        );
        out = { outcome: 'pending' };
      }
    }
    result.outcomes.set(id, out);
  }
  // One response per check, after the recovery messages. The first check of a retired
  // effect is the winner; later checks of the same effect see the shared retirement.
  const answered = new Set<string>();
  for (const c of [...checks].sort((a, b) => Number(a.requestId) - Number(b.requestId))) {
    let out: RecoveryOutcome = bindings.has(c.effectId)
      ? (result.outcomes.get(c.effectId) ?? { outcome: 'missing' })
      : { outcome: 'expired' };
    if (out.outcome === 'retired' && answered.has(c.effectId))
      out = { outcome: 'already_retired', retiredAtMs: out.retiredAtMs };
    answered.add(c.effectId);
    result.checkOutcomes.set(c.requestId, out);
    messages.push({
      key: checkKey(c.effectId, c.requestId),
      payload: { effectId: c.effectId, requestId: c.requestId, ...out },
    });
  }
  await enqueueRuntimeMessages(tx, instanceId, messages);
  return result;
}
