import { AppError } from '../errors';
import type { StagedEffect } from './emit';
import { EFFECT_PROTOCOL_VERSION, type EffectRuntimeConfig, type Queryable } from './types';

export interface ActorCommit {
  instanceId: string;
  /** The revision the handler read; the commit is refused if it moved. */
  expectedRevision: string | number;
  state: unknown;
  effects?: StagedEffect[];
  /** Mailbox messages this commit consumed; marked delivered in the same transaction. */
  deliveredMessageIds?: string[];
  /** `undefined` keeps the current timer, `null` clears it, a number sets it (epoch ms). */
  wakeAtMs?: number | null;
}

const UPDATE_INSTANCE = `
update actor_instances
   set state = $3::jsonb, revision = revision + 1, updated_at_ms = app_now_ms(),
       wake_at_ms = case when $4::boolean then $5::bigint else wake_at_ms end
 where id = $1 and revision = $2::bigint
returning revision`;

// A live process (not stopped, heartbeat within the floor) on an older lock protocol.
const OUTDATED_LIVE_PROCESS = `
select exists (
  select 1 from effect_processes
   where stopped_at_ms is null and protocol_version < $1
     and heartbeat_at_ms >= (select app_now_ms()) - $2::bigint) as outdated`;

const INSERT_EFFECTS = `
insert into effects (id, origin_instance_id, kind, args, max_attempts, run_at_ms, notify_on_complete)
select e.id, $1, e.kind, e.args::jsonb, e.max_attempts, app_now_ms() + e.delay_ms, e.notify
  from unnest($2::uuid[], $3::text[], $4::text[], $5::int[], $6::bigint[], $7::boolean[])
       as e(id, kind, args, max_attempts, delay_ms, notify)`;

const INSERT_BINDINGS = `
insert into effect_recoveries
  (effect_id, origin_instance_id, recovery_operation, status_operation, timeout_ms, expires_at_ms)
select b.effect_id, $1, b.recovery_operation, b.status_operation, b.timeout_ms, app_now_ms() + $6::bigint
  from unnest($2::uuid[], $3::text[], $4::text[], $5::bigint[])
       as b(effect_id, recovery_operation, status_operation, timeout_ms)
 order by b.effect_id`;

const MARK_DELIVERED = `
update actor_mailbox set state = 'delivered', delivered_at_ms = app_now_ms()
 where instance_id = $1 and id = any($2::bigint[]) and state = 'pending'`;

/**
 * The fenced actor commit. Runs on the caller's transaction connection (`tx` is inside
 * `begin`): the revision check comes first, so a stale revision throws `revision_conflict`
 * before anything is written, and the caller's rollback leaves no trace. Effects, their
 * bindings and the consumed messages are written in the same transaction as the state.
 */
export async function commitActor(
  tx: Queryable,
  commit: ActorCommit,
  config: Pick<EffectRuntimeConfig, 'staleAfterMs' | 'bindingRetentionMs'>,
): Promise<{ revision: string }> {
  const setTimer = commit.wakeAtMs !== undefined;
  const updated = await tx.query<{ revision: string }>(UPDATE_INSTANCE, [
    commit.instanceId,
    String(commit.expectedRevision),
    JSON.stringify(commit.state ?? null),
    setTimer,
    commit.wakeAtMs ?? null,
  ]);
  if (updated.rowCount !== 1)
    throw new AppError('revision_conflict', 'actor state changed since it was read', {
      instanceId: commit.instanceId,
      expectedRevision: String(commit.expectedRevision),
    });
  const effects = commit.effects ?? [];
  if (effects.some((e) => e.binding?.recoveryOperation)) {
    const { rows } = await tx.query<{ outdated: boolean }>(OUTDATED_LIVE_PROCESS, [
      EFFECT_PROTOCOL_VERSION,
      config.staleAfterMs,
    ]);
    if (rows[0]?.outdated)
      throw new AppError(
        'precondition_failed',
        'a live effect process reports an older protocol version; upgrade it before emitting recovery-enabled effects',
      );
  }
  if (effects.length > 0) {
    await tx.query(INSERT_EFFECTS, [
      commit.instanceId,
      effects.map((e) => e.id),
      effects.map((e) => e.kind),
      effects.map((e) => JSON.stringify(e.args)),
      effects.map((e) => e.maxAttempts),
      effects.map((e) => e.delayMs),
      effects.map((e) => e.notifyOnComplete),
    ]);
    const bound = effects.filter((e) => e.binding);
    if (bound.length > 0)
      await tx.query(INSERT_BINDINGS, [
        commit.instanceId,
        bound.map((e) => e.id),
        bound.map((e) => e.binding!.recoveryOperation),
        bound.map((e) => e.binding!.statusOperation),
        bound.map((e) => e.binding!.timeoutMs),
        config.bindingRetentionMs,
      ]);
  }
  if (commit.deliveredMessageIds?.length)
    await tx.query(MARK_DELIVERED, [commit.instanceId, commit.deliveredMessageIds]);
  return { revision: updated.rows[0]!.revision };
}
