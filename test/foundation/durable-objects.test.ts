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
import { fireRetentionCron } from '../helpers/cron';

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
    // An object of its own: no earlier test's window can swallow the first trigger.
    const stub = env.TYPING_MAINTENANCE.get(env.TYPING_MAINTENANCE.idFromName('same-window'));
    const startedAt = Date.now();
    expect((await stub.status()).lastRunAt).toBeNull();
    expect(await stub.ensureArmed()).toMatchObject({ rearmed: true });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const first = await stub.status();
    // The first trigger ran a pass: it is recorded, with its report.
    expect(first.lastRunAt).toBeGreaterThanOrEqual(startedAt);
    expect(first.lastReport?.at).toBe(first.lastRunAt);
    // A second alarm in the same window (a cron re-arm racing the alarm) must not run again.
    // Set a minute out so the runtime cannot fire it by itself; the test fires it now.
    await runInDurableObject(stub, (_, state) => state.storage.setAlarm(Date.now() + 60_000));
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const second = await stub.status();
    expect(second.lastRunAt).toBe(first.lastRunAt);
    expect(second.lastReport).toEqual(first.lastReport);
    expect(second.alarmAt).toBe(first.lastRunAt! + MAINTENANCE_PERIOD_MS);
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

  it('the main Worker has no hourly cron: "0 * * * *" belongs to the retention Worker', async () => {
    const spy = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    const ctx = createExecutionContext();
    await worker.scheduled(createScheduledController({ cron: '0 * * * *' }), env, ctx);
    await waitOnExecutionContext(ctx);
    expect(spy.mock.calls.some(([line]) => String(line).includes('cron_unknown_expression'))).toBe(true);
    spy.mockRestore();
  });

  it('the retention Worker\'s "0 * * * *" reaches its owner, which the main Worker reads through RETENTION', async () => {
    const scheduledTime = Date.UTC(2026, 10, 29, 12);
    // The auxiliary retention Worker's own scheduled handler, as its Cron Trigger calls it.
    await fireRetentionCron(scheduledTime);
    expect((await env.RETENTION.status()).lastCronAt).toBe(scheduledTime);
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

describe('alarms in tests (DO_ALARMS=manual)', () => {
  it('an armed alarm is parked: no pass runs unless the test fires it', async () => {
    const stub = env.TYPING_MAINTENANCE.get(env.TYPING_MAINTENANCE.idFromName('parked'));
    const { alarmAt } = await stub.ensureArmed();
    // The object reports the time production would fire at (now: it never ran)...
    expect((await stub.status()).alarmAt).toBe(alarmAt);
    // ...while the runtime's alarm sits a day later, beyond any test file's run.
    const runtimeAlarm = await runInDurableObject(stub, (_, state) => state.storage.getAlarm());
    expect(runtimeAlarm! - alarmAt).toBeGreaterThanOrEqual(23 * 3_600_000);
    expect((await stub.status()).lastRunAt).toBeNull();
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect((await stub.status()).lastRunAt).not.toBeNull();
  });
});
