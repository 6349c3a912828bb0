import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { effectsEveryMinute } from '../../workers/effects/cron';
import { ensureInstance } from '../../workers/effects/mailbox';
import { registerProcess } from '../../workers/effects/processes';
import { runRecoveryPass } from '../../workers/effects/recovery';
import { effectRegistry } from '../../workers/effects/registry';
import { claimEffects } from '../../workers/effects/scheduler';
import { withTimeout } from '../../workers/lib/timeout';
import { backendPid, blockedBehind, setDbClockOffset, testPool, uid } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { ageHeartbeat, bindingRow, config, effectRow, emit, messages } from './helpers';

/**
 * Issue 35 hole 1: the minute cron and the recovery pass never wait for a host's pump, and an
 * executor that ignores its signal is bounded by its timeout all the same.
 */
const SLOW_GATE = 7_350_001;
const DEAF_GATE = 7_350_002;
let lateDone: Promise<void> = Promise.resolve();

/** Waits on an advisory lock the test holds: the test sees the wait, so it knows the run is in flight. */
async function waitOnGate(key: number): Promise<void> {
  const gate = testPool(1);
  try {
    await gate.query('select pg_advisory_lock_shared($1)', [key]);
  } finally {
    await gate.end();
  }
}

effectRegistry
  .registerActor({ type: 'pressure-test', initialState: () => ({}), handle: (_e, s) => s })
  .registerEffect({ kind: 'pressure.noop', run: async () => ({ ok: true }) })
  // Honours no signal and outlasts any test: only the bound the runner puts on it ends its run.
  .registerEffect({ kind: 'pressure.slow', timeoutMs: 120_000, run: () => waitOnGate(SLOW_GATE) })
  .registerEffect({
    kind: 'pressure.deaf',
    timeoutMs: 300,
    run: (_e, _signal) => {
      const run = waitOnGate(DEAF_GATE).then(() => ({ late: true }));
      lateDone = run.then(() => undefined);
      return run;
    },
  });

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

/** A recovery-bound effect of `inst` claimed by a process that then went silent past the floor. */
async function staleClaim(inst: string) {
  const [h] = await emit(pool, inst, [{ kind: 'pressure.noop', opts: { recovery: { operation: 'redo' } } }]);
  const dead = await registerProcess(pool, 'elsewhere');
  expect((await claimEffects(pool, dead, { limit: 10, instanceId: inst })).map((e) => e.id)).toEqual([
    h!.effectId,
  ]);
  await ageHeartbeat(pool, dead, 31_000);
  return h!;
}

const plannedAlarm = (inst: string) =>
  runInDurableObject(actorHostStub(env, inst), (_o, state) => state.storage.get<number>('alarm:planned'));

describe('the minute cron under a stuck host', () => {
  it('a cron wake of a host whose executor is blocked does not stop the pass: a second candidate of another host is decided and woken, and retention completes, within the pass budget', async () => {
    const a = await ensureInstance(pool, 'pressure-test', uid('a'));
    const b = await ensureInstance(pool, 'pressure-test', uid('b'));
    // Candidates are decided in effect-id order: A's first, so its wake comes before B's decision.
    const ha = await staleClaim(a);
    const hb = await staleClaim(b);
    const gate = await pool.connect();
    await gate.query('select pg_advisory_lock($1)', [SLOW_GATE]);
    await emit(pool, a, [{ kind: 'pressure.slow' }]);
    const pumping = actorHostStub(env, a).wake(a);
    try {
      await blockedBehind(pool, await backendPid(gate)); // A's pump is inside its executor
      const budgetMs = 3000;
      const started = Date.now();
      const minute = await withTimeout(
        effectsEveryMinute(env, { recoveryBudgetMs: budgetMs }),
        budgetMs + 5000,
        () => new Error('the minute cron did not finish within its pass budget (it waited for a pump)'),
      );
      expect(Date.now() - started).toBeLessThan(budgetMs + 5000);
      expect(minute.recovery).toMatchObject({ retired: 2, errors: 0 });
      expect(minute.pruned.failed).toEqual([]);
      expect((await bindingRow(pool, ha.effectId))!.retired_at_ms).not.toBeNull();
      expect((await bindingRow(pool, hb.effectId))!.retired_at_ms).not.toBeNull();
      // Woken = its pump is scheduled (its own alarm, now); B's alarm then delivers the recovery.
      expect(await plannedAlarm(b)).toBeLessThanOrEqual(Date.now());
      expect(await runDurableObjectAlarm(actorHostStub(env, b))).toBe(true);
      expect((await messages(pool, b)).map((m) => [m.message_key, m.state])).toEqual([
        [`effect:${hb.effectId}:recovery`, 'delivered'],
      ]);
    } finally {
      await gate.query('select pg_advisory_unlock($1)', [SLOW_GATE]);
      gate.release();
    }
    await pumping;
  });

  it('an executor that ignores its signal is bounded by its timeout: the wake returns, the effect fails as timed out, and the late result is fenced away', async () => {
    const inst = await ensureInstance(pool, 'pressure-test', uid('d'));
    const [h] = await emit(pool, inst, [{ kind: 'pressure.deaf' }]);
    const gate = await pool.connect();
    await gate.query('select pg_advisory_lock($1)', [DEAF_GATE]);
    try {
      const report = await withTimeout(
        actorHostStub(env, inst).wake(inst),
        8000,
        () => new Error('the wake did not return: the executor run outlived its timeout'),
      );
      expect(report).toMatchObject({ claimed: 1, completed: 0, failed: 1 });
      expect(await effectRow(pool, h!.effectId)).toMatchObject({
        status: 'pending',
        locked_by: null,
        attempts: 1,
        last_error: expect.stringMatching(/timed out after 300 ms/),
      });
    } finally {
      await gate.query('select pg_advisory_unlock($1)', [DEAF_GATE]);
      gate.release();
    }
    await lateDone; // the run finished after all: its result is never written
    expect(await effectRow(pool, h!.effectId)).toMatchObject({
      status: 'pending',
      result: null,
      attempts: 1,
    });
  });
});

describe('the recovery pass budget', () => {
  it('bounds its whole run, its wakes included: a wake that never answers delays no decision and the pass ends within its budget', async () => {
    const a = await ensureInstance(pool, 'pressure-test', uid('w'));
    const b = await ensureInstance(pool, 'pressure-test', uid('w'));
    await staleClaim(a);
    await staleClaim(b);
    const logs = captureLogLines({ quiet: true });
    const started = Date.now();
    const report = await withTimeout(
      runRecoveryPass(pool, config, { budgetMs: 1500, wake: () => new Promise(() => undefined) }),
      6000,
      () => new Error('the pass waited for a wake past its budget'),
    ).finally(logs.restore);
    expect(Date.now() - started).toBeLessThan(4000);
    expect(report).toMatchObject({ candidates: 2, retired: 2, errors: 0 });
    expect(
      logs
        .events('effect_wake_failed')
        .map((l) => l.instanceId)
        .sort(),
    ).toEqual([a, b].sort());
  });

  it('a retirement wakes its host exactly once, only after commit; a rejected wake logs one effect_wake_failed with the instance id', async () => {
    await runRecoveryPass(pool, config); // candidates an earlier test left (its own pass may have failed)
    const inst = await ensureInstance(pool, 'pressure-test', uid('x'));
    // Two retirements of one host in one pass: still one wake, after both commits.
    const handles = [await staleClaim(inst), await staleClaim(inst)];
    const seen: { instanceId: string; retired: boolean; messages: boolean }[] = [];
    const other = testPool(1);
    const logs = captureLogLines({ quiet: true });
    try {
      const report = await runRecoveryPass(pool, config, {
        wake: async (instanceId) => {
          // A separate connection: the retirements and their messages are committed already.
          const { rows } = await other.query<{ retired: boolean; messages: boolean }>(
            `select (select count(*) = 2 from effect_recoveries
                      where effect_id = any($1::uuid[]) and retired_at_ms is not null) as retired,
                    (select count(*) = 2 from actor_mailbox
                      where instance_id = $2 and message_key = any($3::text[])) as messages`,
            [handles.map((h) => h.effectId), instanceId, handles.map((h) => `effect:${h.effectId}:recovery`)],
          );
          seen.push({ instanceId, ...rows[0]! });
          throw new Error('host unreachable');
        },
      });
      expect(report).toMatchObject({ candidates: 2, retired: 2 });
    } finally {
      logs.restore();
      await other.end();
    }
    expect(seen).toEqual([{ instanceId: inst, retired: true, messages: true }]);
    const failed = logs.events('effect_wake_failed');
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ instanceId: inst, error: { message: 'host unreachable' } });
  });
});
