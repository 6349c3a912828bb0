import type { Queryable } from './types';

/**
 * Retention of one actor type's instances (issue 35 hole 9). Opt-in: an actor type without
 * a rule keeps its instances forever, because deleting one loses its state (the channel's
 * turn counter and pending list) and nothing in the runtime knows when that is safe.
 */
export interface InstanceRetention {
  /**
   * An instance goes only when its last commit, and the end of every effect it still has,
   * are older than this (database time). At least one day: the runtime's own rows of a
   * finished instance (delivered messages, resolved checks) are pruned within a day.
   */
  idleMs: number;
  /**
   * SQL condition on `i` (the `actor_instances` row) that keeps the instance while it holds.
   * Code of the actor type, never input; read after the instance is locked. The channel's:
   * its conversation row still exists (`workers/channel/conversation.ts`).
   */
  keepWhile?: string;
}

export interface InstanceRetentionRule extends InstanceRetention {
  actorType: string;
}

export const MIN_INSTANCE_IDLE_MS = 86_400_000;

/**
 * Idle, for a locked or candidate instance `i` with cutoff `cutoff` and now `now`: no timer,
 * no mailbox row at all (pending is work; a delivered or dead one is still the dedup record
 * of its key, and goes by the mailbox's own retention), no check at all (an open one is
 * answered into the mailbox; resolved ones go by their own retention), no pending or
 * processing effect and none that ended after the cutoff, and no live binding (one that a
 * check could still ask about). So deleting it deletes only effects and bindings, and those
 * explicitly, in ID order; mailbox rows and checks are never locked here.
 */
const idle = (cutoff: string, now: string) => `i.wake_at_ms is null
   and i.updated_at_ms < ${cutoff}
   and not exists (select 1 from actor_mailbox m where m.instance_id = i.id)
   and not exists (select 1 from effect_recovery_checks c where c.origin_instance_id = i.id)
   and not exists (select 1 from effects e where e.origin_instance_id = i.id
                    and (e.status in ('pending', 'processing') or e.finished_at_ms >= ${cutoff}))
   and not exists (select 1 from effect_recoveries b
                    where b.origin_instance_id = i.id and effect_binding_live(b, ${now}))`;

/** The rules' `keepWhile` conditions as one expression on `i` (code, never input). */
function keepSql(rules: InstanceRetentionRule[]): string {
  const arms = rules
    .filter((r) => r.keepWhile)
    .map((r) => `when ${literal(r.actorType)} then coalesce((${r.keepWhile}), true)`);
  return arms.length === 0 ? 'false' : `case i.actor_type ${arms.join(' ')} else false end`;
}

function literal(s: string): string {
  return `'${s.replaceAll("'", "''")}'`;
}

/**
 * The pick: idle instances of the opted-in types, each type read in its own
 * `actor_instances_idle` range (migrations/0010_baseline_effects.sql), oldest commit first, so the limit stops the
 * scan (a backlog never has to be read whole), locked `for update skip locked`: it never
 * waits on an instance (a commit, a check batch or a completion holding one is passed over
 * until the next minute), so the instance locks cannot close a cycle. The idle rule is inside
 * the bounded pick: instances that must stay never fill the batch. $1 types, $2 idle periods,
 * $3 batch. (Rows a type locked past the final limit stay locked until commit, untouched.)
 */
function pickSql(rules: InstanceRetentionRule[]): string {
  return `with clock as (select app_now_ms() as now)
select p.id from unnest($1::text[], $2::bigint[]) as r(actor_type, idle_ms)
 cross join clock
 cross join lateral (
   select i.id, i.updated_at_ms from actor_instances i
    where i.actor_type = r.actor_type
      and ${idle('(clock.now - r.idle_ms)', 'clock.now')}
      and not (${keepSql(rules)})
    order by i.updated_at_ms, i.id
    limit $3
    for update of i skip locked) p
 order by p.updated_at_ms, p.id
 limit $3`;
}

/**
 * The same conditions re-read in a new statement, after the locks: read committed gives it a
 * snapshot taken after them, so it sees every child committed before the lock, and no child
 * can be added after it (an insert's foreign key check takes `for key share` on the instance,
 * which our `for update` blocks). $1 ids, $2 types, $3 idle periods.
 */
function recheckSql(rules: InstanceRetentionRule[]): string {
  return `with rules as (select * from unnest($2::text[], $3::bigint[]) as r(actor_type, idle_ms)),
     clock as (select app_now_ms() as now)
select i.id from actor_instances i
  join rules r on r.actor_type = i.actor_type
  cross join clock
  cross join lateral (select clock.now - r.idle_ms as cutoff) c
 where i.id = any($1::text[])
   and ${idle('c.cutoff', 'clock.now')}
   and not (${keepSql(rules)})
 order by i.id`;
}

/** Effects of the instances, locked in ID order (the order of every effect lock), deleted. */
const DELETE_EFFECTS = `with locked as (
  select id from effects where origin_instance_id = any($1::text[]) order by id for update)
delete from effects e using locked where e.id = locked.id`;

/** Bindings of the instances, locked in effect-ID order (binding pruning's, a batch's), deleted. */
const DELETE_BINDINGS = `with locked as (
  select effect_id from effect_recoveries where origin_instance_id = any($1::text[])
   order by effect_id for update)
delete from effect_recoveries r using locked where r.effect_id = locked.effect_id`;

export interface InstancePruneReport {
  instances: number;
  effects: number;
  bindings: number;
}

/**
 * Deletes idle instances of the actor types that opted in, one bounded batch, inside the
 * caller's transaction (the minute retention gives it its own, with its budget). Lock order,
 * the runtime's (docs/effects.md): the instances first (skip locked, never waited on), then
 * their effects by ID, then their bindings by effect ID, each class in its own statement, and
 * only then the instance rows, whose foreign keys then find no effect or binding left (and,
 * by the idle rule, no mailbox row or check), so the cascade locks nothing in its own order.
 */
export async function pruneIdleInstances(
  q: Queryable,
  rules: InstanceRetentionRule[],
  batch = 1000,
): Promise<InstancePruneReport> {
  const report: InstancePruneReport = { instances: 0, effects: 0, bindings: 0 };
  const valid = rules.filter((r) => validRule(r));
  if (valid.length === 0 || batch < 1) return report;
  const types = valid.map((r) => r.actorType);
  const idleMs = valid.map((r) => r.idleMs);
  const picked = await q.query<{ id: string }>(pickSql(valid), [types, idleMs, batch]);
  if (picked.rows.length === 0) return report;
  const eligible = await q.query<{ id: string }>(recheckSql(valid), [
    picked.rows.map((r) => r.id),
    types,
    idleMs,
  ]);
  const ids = eligible.rows.map((r) => r.id);
  if (ids.length === 0) return report;
  report.effects = (await q.query(DELETE_EFFECTS, [ids])).rowCount ?? 0;
  report.bindings = (await q.query(DELETE_BINDINGS, [ids])).rowCount ?? 0;
  report.instances =
    (await q.query('delete from actor_instances where id = any($1::text[])', [ids])).rowCount ?? 0;
  return report;
}

function validRule(r: InstanceRetentionRule): boolean {
  return Number.isSafeInteger(r.idleMs) && r.idleMs >= MIN_INSTANCE_IDLE_MS;
}
