import {
  createExecutionContext,
  createScheduledController,
  runDurableObjectAlarm,
  waitOnExecutionContext,
} from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { enqueueMessage, ensureInstance, loadInstance } from '../../workers/effects/mailbox';
import { effectRegistry } from '../../workers/effects/registry';
import type { Env } from '../../workers/env';
import worker from '../../workers/index';
import { uid } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { channelSeeds, existing } from '../housekeeping/channel-seed';

/**
 * The minute cron's steps (typing-maintenance arm, effect recovery, mailbox polling, effect
 * retention, housekeeping) are isolated: a step that fails is logged under its own event
 * and every later step still runs. Faults are real: a miswired binding, a renamed table.
 */
const { pool, newSeed } = channelSeeds();

effectRegistry.registerActor<{ seen: string[] }>({
  type: 'minute-cron-test',
  initialState: () => ({ seen: [] }),
  handle: (event, s) => ({
    seen: [...((s as { seen?: string[] }).seen ?? []), event.type === 'message' ? event.key : 'timer'],
  }),
});

const seen = async (id: string) => ((await loadInstance(pool, id))!.state as { seen?: string[] }).seen ?? [];

/** The Worker's scheduled handler for the minute cron, with these bindings, to its end. */
async function minuteCron(bindings: Env): Promise<void> {
  const ctx = createExecutionContext();
  await worker.scheduled(
    createScheduledController({ cron: '* * * * *', scheduledTime: Date.now() }),
    bindings,
    ctx,
  );
  await waitOnExecutionContext(ctx);
}

/**
 * The poll only schedules a host's pump (its alarm at now: issue 35); the harness parks alarms,
 * so the test runs the one the poll set. False when the poll scheduled nothing.
 */
const pumpScheduled = (instance: string) => runDurableObjectAlarm(actorHostStub(env, instance));

/** Work for the two later steps: a message whose wake-up was lost, an idle conversation. */
async function laterWork() {
  const instance = await ensureInstance(pool, 'minute-cron-test', uid('c'));
  await enqueueMessage(pool, instance, 'in:lost', 'nobody woke the host');
  const idle = await newSeed().conversation({ idleDays: 31 });
  return { instance, idle };
}

describe('minute cron: one failing step never stops the others', () => {
  it('the typing-maintenance arm failing (binding wired to the wrong class) still runs polling and housekeeping', async () => {
    const { instance, idle } = await laterWork();
    // A real Durable Object binding, of a class that has no ensureArmed().
    const miswired = { ...env, TYPING_MAINTENANCE: env.WORKSPACE_QUOTA } as unknown as Env;
    const logs = captureLogLines();
    await minuteCron(miswired).finally(logs.restore);

    expect(logs.events('typing_maintenance_arm_failed')).toEqual([
      expect.objectContaining({ level: 'error', error: expect.objectContaining({ name: 'TypeError' }) }),
    ]);
    expect(logs.events('cron_failed')).toEqual([]);
    expect(await pumpScheduled(instance)).toBe(true);
    expect(await seen(instance)).toEqual(['in:lost']);
    expect(await existing(pool, 'channel_conversations', 'id', [idle])).toEqual([]);
  });

  it('the recovery pass failing (its table renamed) still runs polling, the other retention tables and housekeeping', async () => {
    const { instance, idle } = await laterWork();
    const logs = captureLogLines();
    await pool.query('alter table effect_recovery_checks rename to effect_recovery_checks_renamed');
    try {
      await minuteCron(env as unknown as Env);
    } finally {
      await pool.query('alter table effect_recovery_checks_renamed rename to effect_recovery_checks');
      logs.restore();
    }

    // The class and SQLSTATE of the driver's error (undefined_table), not a generic 'error'.
    expect(logs.events('effect_recovery_pass_failed')).toEqual([
      expect.objectContaining({
        level: 'error',
        error: expect.objectContaining({ name: 'DatabaseError', code: '42P01' }),
      }),
    ]);
    // The instance retention reads checks too (an instance with one is not idle): it fails
    // alone, after every other table's batch ran.
    expect(logs.events('effect_retention_failed').map((l) => l.table)).toEqual(['checks', 'instances']);
    expect(logs.events('cron_failed')).toEqual([]);
    // Polling ran: the host whose wake-up was lost is scheduled, and its pump delivers the message.
    expect(await pumpScheduled(instance)).toBe(true);
    expect(await seen(instance)).toEqual(['in:lost']);
    expect(await existing(pool, 'channel_conversations', 'id', [idle])).toEqual([]);
  });
});
