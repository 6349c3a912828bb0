import type { Pool } from '@neondatabase/serverless';
import { EFFECT_PROTOCOL_VERSION, type Queryable } from './types';

/** Registers a process that may claim effects; returns its id (the claim owner). */
export async function registerProcess(
  q: Queryable,
  role: string,
  protocolVersion = EFFECT_PROTOCOL_VERSION,
): Promise<string> {
  const { rows } = await q.query<{ id: string }>(
    'insert into effect_processes (role, protocol_version) values ($1, $2) returning id',
    [role, protocolVersion],
  );
  return rows[0]!.id;
}

/** Refreshes the heartbeat from database time; false once the process is stopped or pruned. */
export async function heartbeat(q: Queryable, processId: string): Promise<boolean> {
  const res = await q.query(
    `update effect_processes set heartbeat_at_ms = app_now_ms()
      where id = $1 and stopped_at_ms is null`,
    [processId],
  );
  return res.rowCount === 1;
}

/**
 * Marks the process an earlier incarnation of an ActorHost registered and never released
 * (its Durable Object storage kept the id) as superseded: that host has restarted. Its
 * heartbeat is left alone (the platform does not promise the old incarnation has stopped, so
 * it may still beat and keep its other claims), but its claims of kinds idempotent by key
 * become recovery candidates at once (STALE_CANDIDATES_SQL, decideRecovery).
 */
export async function supersedeProcess(q: Queryable, processId: string): Promise<boolean> {
  const res = await q.query(
    `update effect_processes set superseded_at_ms = app_now_ms()
      where id = $1 and superseded_at_ms is null`,
    [processId],
  );
  return res.rowCount === 1;
}

/**
 * Graceful shutdown. Claims without a recovery opt-in go back to pending at once (they run
 * again elsewhere). Opted-in claims are kept, and the heartbeat is left as it was: it is
 * the evidence recovery reads, so those effects are retired only after their own grace.
 * Lock order (effect-recovery.md): the released effects by ID (`mine`, a locking CTE, so the
 * order is the sort's and not the plan's), then the process row. Like a claim it never locks
 * an instance: releasing a claim writes no message, and no instance lock is taken after an
 * effect lock, so it cannot close a cycle with the instance-first paths.
 */
export async function stopProcess(q: Queryable, processId: string): Promise<{ released: number }> {
  const released = await q.query(
    `with mine as (
       select e.id from effects e
        where e.locked_by = $1 and e.status = 'processing'
          and not exists (select 1 from effect_recoveries r
                           where r.effect_id = e.id and r.recovery_operation is not null)
        order by e.id for update of e)
     update effects e set status = 'pending', locked_by = null, locked_at_ms = null, run_at_ms = app_now_ms()
       from mine where e.id = mine.id`,
    [processId],
  );
  await q.query(
    'update effect_processes set stopped_at_ms = app_now_ms() where id = $1 and stopped_at_ms is null',
    [processId],
  );
  return { released: released.rowCount ?? 0 };
}

/**
 * Deletes stopped or long-silent processes, one bounded batch, never one that still owns
 * an effect: its row is the heartbeat evidence recovery needs until that effect is settled.
 */
export async function pruneProcesses(q: Queryable, pruneAfterMs: number, batch = 500): Promise<number> {
  const res = await q.query(
    // The owner filter sits inside the bounded pick: owners never fill the batch and
    // starve the prunable rows behind them.
    `delete from effect_processes where id in (
       select p.id from effect_processes p
        where p.heartbeat_at_ms < (select app_now_ms()) - $1::bigint
          and not exists (select 1 from effects e where e.locked_by = p.id and e.status = 'processing')
        order by p.id limit $2)
       -- Rechecked on the row itself: a claim that refreshed this heartbeat while the delete
       -- waited for the row keeps its process (read committed re-reads a row it waited on).
       and heartbeat_at_ms < (select app_now_ms()) - $1::bigint
       and not exists (select 1 from effects e
                        where e.locked_by = effect_processes.id and e.status = 'processing')`,
    [pruneAfterMs, batch],
  );
  return res.rowCount ?? 0;
}

/**
 * Ends a process that is done with its work: deleted when it owns no processing effect (no
 * recovery will ever read its heartbeat), otherwise stopped with its evidence kept, as
 * `stopProcess` does. The ActorHost calls it after each pump, so the table holds processes
 * with work in flight, not one row per conversation ever seen.
 */
export async function releaseProcess(pool: Pool, processId: string): Promise<'deleted' | 'stopped'> {
  const deleted = await pool.query(
    `delete from effect_processes p where p.id = $1
        and not exists (select 1 from effects e where e.locked_by = p.id and e.status = 'processing')`,
    [processId],
  );
  if ((deleted.rowCount ?? 0) === 1) return 'deleted';
  await stopProcess(pool, processId);
  return 'stopped';
}
