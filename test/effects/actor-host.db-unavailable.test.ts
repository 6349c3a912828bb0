import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PUMP_RETRY_MS } from '../../durable-objects/actor-host';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { enqueueMessage, ensureInstance } from '../../workers/effects/mailbox';
import { effectRegistry } from '../../workers/effects/registry';
import { refusedRole, testPool, uid } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';

effectRegistry.registerActor<{ seen: number }>({
  type: 'unavailable-test',
  initialState: () => ({ seen: 0 }),
  handle: (_event, s) => ({ seen: ((s as { seen?: number }).seen ?? 0) + 1 }),
});

const pool = testPool(1);
const refused = refusedRole(pool, 'pumprefused');
beforeAll(() => refused.create());
afterAll(async () => {
  await refused.drop();
  await pool.end();
});

/** Fires the host's alarm with `DATABASE_URL` replaced (the pump opens its pools from `this.env`). */
async function alarmWith(instanceId: string, DATABASE_URL: string) {
  const host = actorHostStub(env, instanceId);
  const logs = captureLogLines({ quiet: true });
  try {
    const firedAt = Date.now();
    const planned = await runInDurableObject(host, async (instance, state) => {
      await state.storage.put('instanceId', instanceId);
      const own = instance as unknown as { env: typeof env };
      const real = own.env;
      own.env = { ...real, DATABASE_URL };
      try {
        await instance.alarm();
      } finally {
        own.env = real;
      }
      return state.storage.get<number>('alarm:planned');
    });
    // The retry is armed PUMP_RETRY_MS after the failure, which comes between these two instants.
    const retryArmed = planned !== undefined && planned > firedAt && planned <= Date.now() + PUMP_RETRY_MS;
    return { events: logs.lines.map((l) => `${l.level}:${l.event}`), retryArmed };
  } finally {
    logs.restore();
  }
}

describe('ActorHost pump when the database is unavailable', () => {
  it('effects.pump_refusal_is_a_warning: a refused connection logs actor_host_pump_deferred (warn, not an error) and retries from the alarm, which then delivers', async () => {
    const inst = await ensureInstance(pool, 'unavailable-test', uid('u'));
    await enqueueMessage(pool, inst, 'in:1', 'waits for the database');
    const { events, retryArmed } = await alarmWith(inst, refused.url);
    expect(events).toContain('warn:actor_host_pump_deferred');
    expect(events).not.toContain('error:actor_host_pump_failed');
    expect(retryArmed).toBe(true);
    const pending = await pool.query('select state from actor_mailbox where instance_id = $1', [inst]);
    expect(pending.rows).toEqual([{ state: 'pending' }]);

    // The server takes connections again: the retry alarm delivers the message.
    expect(await runDurableObjectAlarm(actorHostStub(env, inst))).toBe(true);
    const done = await pool.query('select state from actor_mailbox where instance_id = $1', [inst]);
    expect(done.rows).toEqual([{ state: 'delivered' }]);
  });

  it('effects.pump_error_stays_an_error: a failure that is not the database being unavailable (a database that does not exist) still logs actor_host_pump_failed', async () => {
    const inst = await ensureInstance(pool, 'unavailable-test', uid('u'));
    await enqueueMessage(pool, inst, 'in:1', 'a misconfiguration, not an overload');
    const missing = new URL(env.DATABASE_URL);
    missing.pathname = `/no_such_db_${crypto.randomUUID().slice(0, 8)}`;

    const { events, retryArmed } = await alarmWith(inst, missing.toString());
    expect(events).toContain('error:actor_host_pump_failed');
    expect(events).not.toContain('warn:actor_host_pump_deferred');
    expect(retryArmed).toBe(true);
  });
});
