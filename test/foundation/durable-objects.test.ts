import {
  createExecutionContext,
  createScheduledController,
  runDurableObjectAlarm,
  runInDurableObject,
  waitOnExecutionContext,
} from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it, vi } from 'vitest';
import { MAINTENANCE_PERIOD_MS } from '../../durable-objects/typing-maintenance';
import worker from '../../workers/index';

const maintenance = () => env.TYPING_MAINTENANCE.get(env.TYPING_MAINTENANCE.idFromName('singleton'));

describe('TypingMaintenance alarm', () => {
  it('fires, then re-arms from stored state after the alarm is lost', async () => {
    const stub = maintenance();
    // A previous pass ran 29.5 s ago: the next one is due half a second from now.
    const previous = Date.now() - 29_500;
    await runInDurableObject(stub, async (_, state) => {
      await state.storage.deleteAlarm();
      await state.storage.put('lastRunAt', previous);
    });
    const armed = await stub.ensureArmed();
    expect(armed).toEqual({ alarmAt: previous + MAINTENANCE_PERIOD_MS, rearmed: true });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const { lastRunAt, alarmAt } = await stub.status();
    expect(lastRunAt).toBeGreaterThan(previous);
    expect(alarmAt).toBe(lastRunAt! + MAINTENANCE_PERIOD_MS);

    // Simulate an eviction that lost the alarm: the next arm is derived from lastRunAt.
    await runInDurableObject(stub, (_, state) => state.storage.deleteAlarm());
    expect(await stub.ensureArmed()).toEqual({ alarmAt: lastRunAt! + MAINTENANCE_PERIOD_MS, rearmed: true });
    // Armed already: a second arm changes nothing.
    expect(await stub.ensureArmed()).toEqual({ alarmAt: lastRunAt! + MAINTENANCE_PERIOD_MS, rearmed: false });
  });

  it('runs one pass when two triggers land in the same window', async () => {
    const stub = maintenance();
    await stub.ensureArmed();
    await runDurableObjectAlarm(stub);
    const first = (await stub.status()).lastRunAt;
    // A second alarm in the same window (a cron re-arm racing the alarm) must not run again.
    await runInDurableObject(stub, (_, state) => state.storage.setAlarm(Date.now()));
    await runDurableObjectAlarm(stub);
    expect((await stub.status()).lastRunAt).toBe(first);
  });
});

describe('cron dispatch', () => {
  it('"* * * * *" reaches the maintenance arm', async () => {
    const stub = maintenance();
    await runInDurableObject(stub, (_, state) => state.storage.deleteAlarm());
    const ctx = createExecutionContext();
    await worker.scheduled(
      createScheduledController({ cron: '* * * * *', scheduledTime: Date.now() }),
      env,
      ctx,
    );
    await waitOnExecutionContext(ctx);
    expect((await stub.status()).alarmAt).not.toBeNull();
  });

  it('"0 * * * *" reaches the retention owner', async () => {
    const scheduledTime = Date.UTC(2026, 10, 29, 12);
    const ctx = createExecutionContext();
    await worker.scheduled(createScheduledController({ cron: '0 * * * *', scheduledTime }), env, ctx);
    await waitOnExecutionContext(ctx);
    const cleanup = env.RETENTION_CLEANUP.get(env.RETENTION_CLEANUP.idFromName('singleton'));
    expect(await cleanup.lastCronAt()).toBe(scheduledTime);
  });

  it('logs an unknown expression as an error', async () => {
    const spy = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    const ctx = createExecutionContext();
    await worker.scheduled(createScheduledController({ cron: '*/5 * * * *' }), env, ctx);
    await waitOnExecutionContext(ctx);
    expect(spy.mock.calls.some(([line]) => String(line).includes('cron_unknown_expression'))).toBe(true);
    spy.mockRestore();
  });
});
