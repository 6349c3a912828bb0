import { runtimeMessagesParams, runtimeMessagesSql } from './mailbox';
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

export interface LockedEffect {
  id: string;
  kind: string;
  status: string;
  locked_by: string | null;
  attempts: number;
  max_attempts: number;
  result: unknown;
  last_error: string | null;
}

/**
 * The owner processes by ID (`for share`) and database wall time, in one round trip. The
 * aggregate emits its single row only after the locking subquery has returned, and locked,
 * every row; `app_now_ms()` is computed for that row, so after the last lock is held. It is
 * volatile and not inlined (its test-clock sub-select), so it reads a fresh snapshot then, as
 * a separate statement would. With no owners the row still comes: the time, empty arrays.
 */
const OWNERS_THEN_NOW_SQL = `select app_now_ms() as now,
        coalesce(array_agg(l.id::text), '{}') as ids,
        coalesce(array_agg(l.heartbeat_at_ms::text), '{}') as heartbeats,
        coalesce(array_agg(l.superseded_at_ms is not null), '{}') as superseded
   from (select id, heartbeat_at_ms, superseded_at_ms from effect_processes
          where id = any($1::bigint[]) order by id for share) l`;

/**
 * Locks, in the one order every recovery path uses: the origin instance; the effects by
 * ID; their bindings by effect ID; then the current owner processes by ID (after all
 * effect and binding locks). Database wall time is read only after every lock is held.
 * One statement per table, so the order is the statements' order, never a plan's choice.
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
  const { rows } = await tx.query<{
    now: string;
    ids: string[];
    heartbeats: string[];
    superseded: boolean[];
  }>(OWNERS_THEN_NOW_SQL, [owners]);
  const { now, ids, heartbeats, superseded } = rows[0]!;
  return {
    effects: new Map(effects.rows.map((e) => [e.id, e])),
    bindings: new Map(bindings.rows.map((b) => [b.effect_id, b])),
    /** Locked heartbeat (ms) by owner process id; a missing owner has none. */
    heartbeats: new Map(ids.map((id, i) => [id, Number(heartbeats[i])])),
    /** Owners a restarted host marked as its previous incarnation (supersedeProcess). */
    superseded: new Set(ids.filter((_, i) => superseded[i])),
    now: Number(now),
  };
}

/** What a stale decision writes to one effect. */
type Transition = 'retired' | 'dead' | 'pending';

const STALE_LAST_ATTEMPT = 'owner stale after last attempt';

/**
 * Every transition of one decision and its runtime messages, in one statement: bindings
 * stamped retired, effects moved (retired: completed with the claim cleared; dead; back to
 * pending), then the messages in array order. Every effect and binding row it writes is
 * locked already, and the mailbox's foreign key reuses the instance lock: no new lock
 * order. One statement, so the transitions and the messages succeed or fail together.
 * $1 instance, $2 effect ids, $3 transitions, $4 now, $5 dead error, $6/$7 messages.
 */
const WRITE_SQL = `with t as (
    select * from unnest($2::uuid[], $3::text[]) as t(id, next)
  ), retired as (
    update effect_recoveries r set retired_at_ms = $4::bigint
      from t where r.effect_id = t.id and t.next = 'retired'
  ), moved as (
    update effects e
       set status = case t.next when 'retired' then 'completed' else t.next end,
           locked_by = null, locked_at_ms = null,
           finished_at_ms = case t.next when 'pending' then e.finished_at_ms else $4::bigint end,
           run_at_ms = case t.next when 'pending' then $4::bigint else e.run_at_ms end,
           last_error = case t.next when 'dead' then $5::text else e.last_error end
      from t where e.id = t.id
  )
  ${runtimeMessagesSql('$1', '$6', '$7')}`;

export interface DecideResult {
  outcomes: Map<string, RecoveryOutcome>;
  /** Effects this transaction retired (the caller wakes the origin's host after commit). */
  retired: string[];
  /** Response outcome per check request id. */
  checkOutcomes: Map<string, RecoveryOutcome>;
}

/** What the locks returned about one effect's owner, at decision time. */
export interface OwnerSeen {
  /** The owner's locked heartbeat; undefined when the owner process is gone. */
  heartbeatMs: number | undefined;
  /** The owner was marked as its host's previous incarnation (supersedeProcess). */
  superseded: boolean;
}

/** One effect's decision: its outcome, and what it writes (a transition, a runtime message). */
export interface EffectDecision {
  out: RecoveryOutcome;
  transition?: Transition;
  message?: { key: string; payload: unknown };
}

/**
 * The decision for one effect, pure: from what the locks returned (the effect, its binding,
 * its owner) and database time read after the last lock. A processing effect's owner is
 * stale when it is gone, when its heartbeat is older than greatest(runtime floor, the
 * binding's timeout) (a heartbeat exactly at that cutoff is not stale: `<`), or when it is
 * superseded and the kind may be taken over at once (idempotent by key). A stale effect with a
 * recovery operation is retired; one without goes back to pending, or dead after its last
 * attempt.
 */
export function decideEffect(
  e: LockedEffect | undefined,
  b: RecoveryBindingRow | undefined,
  owner: OwnerSeen,
  nowMs: number,
  config: { staleAfterMs: number; takeover: ReadonlySet<string> },
): EffectDecision {
  if (b?.retired_at_ms) return { out: { outcome: 'already_retired', retiredAtMs: Number(b.retired_at_ms) } };
  if (!e) return { out: { outcome: 'missing' } };
  if (e.status === 'completed') return { out: { outcome: 'completed', result: e.result } };
  if (e.status === 'dead') return { out: { outcome: 'dead', error: e.last_error } };
  if (e.status === 'pending') return { out: { outcome: 'pending' } };
  const effective = Math.max(config.staleAfterMs, Number(b?.timeout_ms ?? 0));
  // A superseded owner (the host's previous incarnation) may still be running, so it loses
  // at once only claims that may run twice by design (idempotent by key).
  const stale =
    owner.heartbeatMs === undefined ||
    owner.heartbeatMs < nowMs - effective ||
    (owner.superseded && config.takeover.has(e.kind));
  if (!stale) return { out: { outcome: 'deferred', ownerId: e.locked_by! } };
  if (b?.recovery_operation)
    return {
      out: { outcome: 'retired', retiredAtMs: nowMs },
      transition: 'retired',
      message: {
        key: recoveryKey(e.id),
        payload: {
          effectId: e.id,
          kind: e.kind,
          operation: b.recovery_operation,
          retiredAtMs: nowMs,
          attempts: e.attempts,
        },
      },
    };
  if (e.attempts >= e.max_attempts)
    return {
      out: { outcome: 'dead', error: STALE_LAST_ATTEMPT },
      transition: 'dead',
      message: { key: failedKey(e.id), payload: { effectId: e.id, error: STALE_LAST_ATTEMPT } },
    };
  return { out: { outcome: 'pending' }, transition: 'pending' };
}

/**
 * One response per check, after the recovery messages, pure. The first check of a retired
 * effect is the winner; later checks of the same effect see the shared retirement; a check
 * whose binding is gone answers `expired`.
 */
export function answerChecks(
  checks: { requestId: string; effectId: string }[],
  bound: ReadonlySet<string>,
  outcomes: ReadonlyMap<string, RecoveryOutcome>,
): { checkOutcomes: Map<string, RecoveryOutcome>; messages: { key: string; payload: unknown }[] } {
  const checkOutcomes = new Map<string, RecoveryOutcome>();
  const messages: { key: string; payload: unknown }[] = [];
  const answered = new Set<string>();
  for (const c of [...checks].sort((a, b) => Number(a.requestId) - Number(b.requestId))) {
    let out: RecoveryOutcome = bound.has(c.effectId)
      ? (outcomes.get(c.effectId) ?? { outcome: 'missing' })
      : { outcome: 'expired' };
    if (out.outcome === 'retired' && answered.has(c.effectId))
      out = { outcome: 'already_retired', retiredAtMs: out.retiredAtMs };
    answered.add(c.effectId);
    checkOutcomes.set(c.requestId, out);
    messages.push({
      key: checkKey(c.effectId, c.requestId),
      payload: { effectId: c.effectId, requestId: c.requestId, ...out },
    });
  }
  return { checkOutcomes, messages };
}

/**
 * The decision for a set of effects of one origin instance, inside the caller's
 * transaction: every lock in the one order (`lockAll`), each effect decided (`decideEffect`),
 * the checks answered (`answerChecks`), and all writes in one statement (`WRITE_SQL`) whatever
 * the batch size; any failure throws and the caller's rollback undoes the whole decision.
 */
export async function decideRecovery(
  tx: Queryable,
  instanceId: string,
  effectIds: string[],
  checks: { requestId: string; effectId: string }[],
  config: Pick<EffectRuntimeConfig, 'staleAfterMs' | 'takeoverKinds'>,
): Promise<DecideResult> {
  const sorted = [...new Set(effectIds)].sort();
  const locked = await lockAll(tx, instanceId, sorted);
  if (!locked) {
    const outcomes = new Map<string, RecoveryOutcome>(sorted.map((id) => [id, { outcome: 'missing' }]));
    return { outcomes, retired: [], checkOutcomes: new Map() };
  }
  const { effects, bindings, heartbeats, superseded, now } = locked;
  const rule = { staleAfterMs: config.staleAfterMs, takeover: new Set(config.takeoverKinds ?? []) };
  const outcomes = new Map<string, RecoveryOutcome>();
  const retired: string[] = [];
  const transitions: { id: string; next: Transition }[] = [];
  const messages: { key: string; payload: unknown }[] = [];
  for (const id of sorted) {
    const e = effects.get(id);
    const owner = e?.locked_by ?? null;
    const d = decideEffect(
      e,
      bindings.get(id),
      {
        heartbeatMs: owner ? heartbeats.get(owner) : undefined,
        superseded: owner !== null && superseded.has(owner),
      },
      now,
      rule,
    );
    outcomes.set(id, d.out);
    if (d.transition) transitions.push({ id, next: d.transition });
    if (d.message) messages.push(d.message);
    if (d.transition === 'retired') retired.push(id);
  }
  const answers = answerChecks(checks, new Set(bindings.keys()), outcomes);
  messages.push(...answers.messages);
  if (transitions.length > 0 || messages.length > 0)
    await tx.query(WRITE_SQL, [
      instanceId,
      transitions.map((t) => t.id),
      transitions.map((t) => t.next),
      now,
      STALE_LAST_ATTEMPT,
      ...runtimeMessagesParams(messages),
    ]);
  return { outcomes, retired, checkOutcomes: answers.checkOutcomes };
}
