import type { Pool } from '@neondatabase/serverless';
import { withTx } from '../../workers/db/tx';
import { commitActor } from '../../workers/effects/commit';
import { EffectStage, type EmitOptions } from '../../workers/effects/emit';
import { ensureInstance, loadInstance } from '../../workers/effects/mailbox';
import { claimEffects } from '../../workers/effects/scheduler';
import { type EffectHandle, effectConfig } from '../../workers/effects/types';
import { uid } from '../helpers/db';

// Files share one database: a high scan limit so other files' leftovers never crowd out ours.
export const config = effectConfig({ staleAfterMs: 30_000, claimScanLimit: 10_000 });

/** A fresh instance of type `t` with its own key. */
export async function newInstance(pool: Pool, type = 'test'): Promise<string> {
  return ensureInstance(pool, type, uid('a'));
}

/** Emits through a fenced commit at the instance's current revision. */
export async function emit(
  pool: Pool,
  instanceId: string,
  specs: { kind?: string; args?: unknown; opts?: EmitOptions }[],
): Promise<EffectHandle[]> {
  const inst = await loadInstance(pool, instanceId);
  const stage = new EffectStage(instanceId);
  const handles = specs.map((s) => stage.emit(s.kind ?? 'noop', s.args ?? {}, s.opts));
  await withTx(pool, { budgetMs: 5000 }, (tx) =>
    commitActor(
      tx,
      { instanceId, expectedRevision: inst!.revision, state: inst!.state, effects: stage.staged },
      config,
    ),
  );
  return handles;
}

/** Claims exactly the given effect for `processId` (claims due effects of its instance). */
export async function claimOf(pool: Pool, processId: string, instanceId: string) {
  return claimEffects(pool, processId, { limit: 100, instanceId });
}

export async function effectRow(pool: Pool, id: string) {
  const { rows } = await pool.query('select * from effects where id = $1', [id]);
  return rows[0] as
    | {
        status: string;
        locked_by: string | null;
        attempts: number;
        result: unknown;
        last_error: string | null;
      }
    | undefined;
}

export async function bindingRow(pool: Pool, id: string) {
  const { rows } = await pool.query('select * from effect_recoveries where effect_id = $1', [id]);
  return rows[0] as { retired_at_ms: string | null } | undefined;
}

export async function messages(pool: Pool, instanceId: string) {
  const { rows } = await pool.query<{ message_key: string; payload: Record<string, unknown>; state: string }>(
    'select message_key, payload, state from actor_mailbox where instance_id = $1 order by id',
    [instanceId],
  );
  return rows;
}

/** Moves a process's heartbeat into the past (database time), as if it went silent. */
export async function ageHeartbeat(pool: Pool, processId: string, ms: number) {
  await pool.query('update effect_processes set heartbeat_at_ms = app_now_ms() - $2 where id = $1', [
    processId,
    ms,
  ]);
}

/** Waits until `n` backends of this database are waiting on a lock (pg_locks), polling. */
export async function waitForLockWaiters(pool: Pool, n: number, timeoutMs = 10_000): Promise<void> {
  const started = Date.now();
  for (;;) {
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock'`,
    );
    if ((rows[0]?.n ?? 0) >= n) return;
    if (Date.now() - started > timeoutMs) throw new Error(`only ${rows[0]?.n} lock waiters, wanted ${n}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export { withTx };
