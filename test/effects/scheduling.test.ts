import { runDurableObjectAlarm } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { pollInstancesWithWork } from '../../workers/effects/cron';
import { enqueueMessage, ensureInstance, instancesWithWork } from '../../workers/effects/mailbox';
import { registerProcess } from '../../workers/effects/processes';
import { effectRegistry } from '../../workers/effects/registry';
import { claimEffects, failEffects } from '../../workers/effects/scheduler';
import { advanceDbClock, setDbClockOffset, testPool, uid } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { effectRow, emit } from './helpers';

// `sched.flaky` fails on its first run of each effect, then succeeds.
const runs = new Map<string, number>();

effectRegistry
  .registerActor<{ n: number }>({
    type: 'sched-test',
    initialState: () => ({ n: 0 }),
    handle(event, s, ctx) {
      if (event.type === 'message' && event.key.startsWith('go')) {
        ctx.emit('sched.ok', { delayed: true }, { delayMs: 60_000 });
        ctx.emit('sched.flaky', {});
      }
      return { n: ((s as { n?: number }).n ?? 0) + 1 };
    },
  })
  .registerEffect({ kind: 'sched.ok', run: async () => ({ ok: true }) })
  .registerEffect({
    kind: 'sched.flaky',
    run: async (e) => {
      const n = (runs.get(e.id) ?? 0) + 1;
      runs.set(e.id, n);
      if (n === 1) throw new Error('first run fails');
      return { ok: n };
    },
  });

const pool = testPool();
afterEach(async () => {
  vi.restoreAllMocks();
  await setDbClockOffset(pool, 0);
});
afterAll(() => pool.end());

const kindOf = async (instanceId: string, kind: string) => {
  const { rows } = await pool.query<{ id: string; status: string; attempts: number }>(
    'select id, status, attempts from effects where origin_instance_id = $1 and kind = $2',
    [instanceId, kind],
  );
  return rows[0]!;
};

/** Runs the minute poll (production limit) and reports which hosts it woke. */
async function poll() {
  const woken: string[] = [];
  const report = await pollInstancesWithWork(pool, async (id) => {
    woken.push(id);
    await actorHostStub(env, id).wake(id);
  });
  return { report, woken };
}

describe('delayed effects and retries run without an outside wake-up', () => {
  it("the host's own alarm runs a retry after its backoff and a delayed effect when due", async () => {
    const inst = await ensureInstance(pool, 'sched-test', uid('s'));
    await enqueueMessage(pool, inst, 'go', null);
    const host = actorHostStub(env, inst);
    const logs = captureLogLines();
    const first = await host.wake(inst).finally(logs.restore);
    expect(first).toMatchObject({ handled: 1, claimed: 1, failed: 1 });
    // The failed run is logged once, with its class, besides being recorded on the effect.
    expect(logs.events('effect_attempt_failed')).toEqual([
      expect.objectContaining({
        kind: 'sched.flaky',
        attempts: 1,
        error: expect.objectContaining({ name: 'Error' }),
      }),
    ]);
    expect(first.alarmAt).not.toBeNull();
    expect(await kindOf(inst, 'sched.flaky')).toMatchObject({ status: 'pending', attempts: 1 });
    expect(await kindOf(inst, 'sched.ok')).toMatchObject({ status: 'pending', attempts: 0 });

    await advanceDbClock(pool, 2_500); // past the 2 s backoff, long before the delay
    expect(await runDurableObjectAlarm(host)).toBe(true);
    expect(await kindOf(inst, 'sched.flaky')).toMatchObject({ status: 'completed', attempts: 2 });
    expect(await kindOf(inst, 'sched.ok')).toMatchObject({ status: 'pending' });

    await advanceDbClock(pool, 60_000);
    expect(await runDurableObjectAlarm(host)).toBe(true);
    expect(await kindOf(inst, 'sched.ok')).toMatchObject({ status: 'completed', attempts: 1 });
    // Nothing left: the host has no reason to wake again.
    expect(await runDurableObjectAlarm(host)).toBe(false);
  });

  it('the minute poll runs a delayed effect committed without waking any host, once due', async () => {
    const inst = await ensureInstance(pool, 'sched-test', uid('s'));
    const [h] = await emit(pool, inst, [{ kind: 'sched.ok', opts: { delayMs: 60_000 } }]);
    expect((await poll()).woken).toEqual([]); // not due yet
    await advanceDbClock(pool, 61_000);
    expect(await instancesWithWork(pool, 50)).toEqual([inst]);
    expect((await poll()).woken).toEqual([inst]);
    expect(await effectRow(pool, h!.effectId)).toMatchObject({ status: 'completed' });
  });

  it('the minute poll runs a retry whose backoff elapsed after another process failed it', async () => {
    const inst = await ensureInstance(pool, 'sched-test', uid('s'));
    const [h] = await emit(pool, inst, [{ kind: 'sched.ok' }]);
    const other = await registerProcess(pool, 'elsewhere');
    expect(await claimEffects(pool, other, { limit: 10, instanceId: inst })).toHaveLength(1);
    await failEffects(pool, other, [{ id: h!.effectId, error: 'boom' }]);
    expect(await effectRow(pool, h!.effectId)).toMatchObject({ status: 'pending', attempts: 1 });
    await advanceDbClock(pool, 2_500);
    expect((await poll()).woken).toEqual([inst]);
    expect(await effectRow(pool, h!.effectId)).toMatchObject({ status: 'completed', attempts: 2 });
  });
});

describe('unregistered actor types', () => {
  it('the poll skips instances of unregistered types and logs them once per pass with a count', async () => {
    const ghosts = [
      await ensureInstance(pool, 'never-registered', uid('g')),
      await ensureInstance(pool, 'never-registered', uid('g')),
    ];
    for (const g of ghosts) await enqueueMessage(pool, g, 'hello', null);
    const live = await ensureInstance(pool, 'sched-test', uid('s'));
    await enqueueMessage(pool, live, 'ping', null);
    const errors = vi.spyOn(console, 'error');

    for (let pass = 1; pass <= 2; pass++) {
      const { report, woken } = await poll();
      // The live instance is delivered on the first pass; the ghosts are never woken.
      expect(woken).toEqual(pass === 1 ? [live] : []);
      expect(report.unregistered).toBe(2);
      const lines = errors.mock.calls
        .map((c) => {
          try {
            return JSON.parse(String(c[0])) as { event: string; instances: number; actorTypes: string[] };
          } catch {
            return null;
          }
        })
        .filter((l) => l?.event === 'effect_poll_unregistered_actor_types')
        .map((l) => l!);
      expect(lines).toHaveLength(pass); // one line per pass, not one per instance
      expect(lines[pass - 1]!.instances).toBe(report.unregistered);
      expect(lines[pass - 1]!.actorTypes.some((t) => t.startsWith('never-registered ('))).toBe(true);
      expect(errors.mock.calls.some((c) => String(c[0]).includes('actor_host_pump_failed'))).toBe(false);
    }
  });

  it('a host woken for an unregistered type (e.g. after a retirement) logs it and arms no retry alarm', async () => {
    const ghost = await ensureInstance(pool, 'never-registered', uid('g'));
    await enqueueMessage(pool, ghost, 'hello', null);
    const host = actorHostStub(env, ghost);
    expect(await host.wake(ghost)).toMatchObject({ handled: 0, alarmAt: null });
    expect(await runDurableObjectAlarm(host)).toBe(false);
  });
});
