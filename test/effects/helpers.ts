import type { Pool } from '@neondatabase/serverless';
import { afterAll, afterEach } from 'vitest';
import { withTx } from '../../workers/db/tx';
import { commitActor } from '../../workers/effects/commit';
import { EffectStage, type EmitOptions } from '../../workers/effects/emit';
import { ensureInstance, loadInstance } from '../../workers/effects/mailbox';
import { registerProcess, stopProcess } from '../../workers/effects/processes';
import { claimEffects } from '../../workers/effects/scheduler';
import { type EffectHandle, effectConfig } from '../../workers/effects/types';
import { advanceDbClock, setDbClockOffset, testPool, uid } from '../helpers/db';

/** The production defaults (30 s liveness floor, 100 candidates per pass). */
export const config = effectConfig();

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

/**
 * A one-connection pool for a racer, with that connection's backend pid learned first:
 * everything the racer runs goes through this backend, so a barrier (waitUntilBlocked) waits
 * on exactly it. A pool that opened a second connection instead would fail that barrier loudly.
 */
export async function racer(): Promise<{ pool: Pool; pid: number }> {
  const pool = testPool(1);
  const { rows } = await pool.query<{ pid: number }>('select pg_backend_pid() as pid');
  return { pool, pid: rows[0]!.pid };
}

/**
 * Awaits `work`, which runs on backend `pid`, and fails the moment that backend waits on a
 * lock (pg_blocking_pids): proves a path never blocks, with no wall-clock bound. The locks it
 * could wait on are held by the test, so a wait cannot end before this sees it.
 */
export async function neverBlocked<T>(pool: Pool, pid: number, work: Promise<T>): Promise<T> {
  let settled = false;
  const done = work.finally(() => {
    settled = true;
  });
  for (let polls = 0; !settled; polls++) {
    const { rows } = await pool.query<{ by: number[] }>('select pg_blocking_pids($1::int) as by', [pid]);
    if (rows[0]!.by.length > 0) {
      // Handled by design: the test fails on the throw below; the work's own outcome no longer matters.
      done.catch(() => undefined);
      throw new Error(`backend ${pid} waited on a lock held by ${rows[0]!.by.join(', ')}`);
    }
    if (polls > 10_000) throw new Error(`work on backend ${pid} never settled`);
  }
  return done;
}

export { withTx };

/**
 * A recovery-bound effect of a new `type` instance whose owner claimed it, stopped, and has
 * been silent ten minutes (database time): the next poll or check retires it.
 */
export async function stoppedOwnerEffect(pool: Pool, type: string) {
  const inst = await newInstance(pool, type);
  const [h] = await emit(pool, inst, [{ opts: { recovery: { operation: 'replace' } } }]);
  const owner = await registerProcess(pool, type);
  await claimOf(pool, owner, inst);
  await stopProcess(pool, owner);
  await advanceDbClock(pool, 10 * 60_000);
  return { inst, handle: h!, owner };
}

/**
 * A race test file's scope: its pool, and `opened`, where tests push the racer pools and held
 * locks they open. After each test (a failed one too) they are closed in order and the clock is
 * reset, so a failure never leaves a lock that hangs the next test.
 */
export function raceScope(max = 12) {
  const pool = testPool(max);
  const opened: { end(): Promise<void> }[] = [];
  afterEach(async () => {
    for (const o of opened.splice(0)) await o.end();
    await setDbClockOffset(pool, 0);
  });
  afterAll(() => pool.end());
  return { pool, opened };
}
