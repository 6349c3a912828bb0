import { runDurableObjectAlarm } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { enqueueMessage, ensureInstance, loadInstance, pruneMailbox } from '../../workers/effects/mailbox';
import { effectRegistry } from '../../workers/effects/registry';
import { drainInstance } from '../../workers/effects/runner';
import { advanceDbClock, setDbClockOffset, testPool, uid } from '../helpers/db';
import { config } from './helpers';

interface PoisonState {
  seen: string[];
}

// Counts every delivery of each key (module scope: the host runs in this isolate too).
const deliveries = new Map<string, number>();

effectRegistry.registerActor<PoisonState>({
  type: 'poison-test',
  initialState: () => ({ seen: [] }),
  handle(event, s) {
    const state = { seen: [], ...(s as Partial<PoisonState>) };
    if (event.type !== 'message') return state;
    deliveries.set(event.key, (deliveries.get(event.key) ?? 0) + 1);
    if ((event.payload as { poison?: boolean } | null)?.poison)
      throw new Error(`cannot parse message ${event.key}`);
    return { seen: [...state.seen, event.key] };
  },
});

const pool = testPool();
afterEach(async () => {
  vi.restoreAllMocks();
  await setDbClockOffset(pool, 0);
});
afterAll(() => pool.end());

async function mailboxRow(instanceId: string, key: string) {
  const { rows } = await pool.query<{
    state: string;
    attempts: number;
    last_error: string | null;
    dead_at_ms: string | null;
  }>(
    'select state, attempts, last_error, dead_at_ms from actor_mailbox where instance_id = $1 and message_key = $2',
    [instanceId, key],
  );
  return rows[0];
}

const seen = async (id: string) => ((await loadInstance(pool, id))!.state as Partial<PoisonState>).seen ?? [];

/** Log lines (parsed) written to console.error whose event is `event`. */
function errorLines(spy: { mock: { calls: unknown[][] } }, event: string) {
  return spy.mock.calls
    .map((c) => {
      try {
        return JSON.parse(String(c[0])) as Record<string, unknown>;
      } catch {
        return null;
      }
    })
    .filter((l): l is Record<string, unknown> => l?.event === event);
}

describe('poison messages', () => {
  it('a throwing handler keeps its message first in line, then after 5 failed deliveries it is dead and the next message is delivered', async () => {
    const inst = await ensureInstance(pool, 'poison-test', uid('p'));
    const bad = uid('bad');
    await enqueueMessage(pool, inst, bad, { poison: true, apiToken: 'sekrit-payload-value' });
    await enqueueMessage(pool, inst, 'good', { poison: false });
    const errors = vi.spyOn(console, 'error');

    for (let i = 1; i <= 4; i++) {
      await expect(drainInstance(pool, effectRegistry, inst, config)).rejects.toThrow(/cannot parse/);
      expect(await mailboxRow(inst, bad)).toMatchObject({ state: 'pending', attempts: i });
      expect(await seen(inst)).toEqual([]); // order kept: nothing overtakes the failing message
    }
    expect(await drainInstance(pool, effectRegistry, inst, config)).toBe(2);
    const dead = await mailboxRow(inst, bad);
    expect(dead).toMatchObject({ state: 'dead', attempts: 5 });
    expect(dead!.last_error).toContain('cannot parse');
    expect(dead!.last_error).not.toContain('sekrit');
    expect(await seen(inst)).toEqual(['good']);

    const logged = errorLines(errors, 'actor_message_dead');
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ instanceId: inst, messageKey: bad, attempts: 5 });
    expect(JSON.stringify(logged[0])).not.toContain('sekrit');

    // Never redelivered.
    expect(await drainInstance(pool, effectRegistry, inst, config)).toBe(0);
    expect(deliveries.get(bad)).toBe(5);
  });

  it('the attempt bound is configurable', async () => {
    const inst = await ensureInstance(pool, 'poison-test', uid('p'));
    const bad = uid('bad');
    await enqueueMessage(pool, inst, bad, { poison: true });
    const strict = { ...config, mailboxMaxAttempts: 2 };
    await expect(drainInstance(pool, effectRegistry, inst, strict)).rejects.toThrow(/cannot parse/);
    expect(await drainInstance(pool, effectRegistry, inst, strict)).toBe(1);
    expect(await mailboxRow(inst, bad)).toMatchObject({ state: 'dead', attempts: 2 });
  });

  it('the ActorHost retries a failing message from its own alarm until it is dead, then drains the rest', async () => {
    const inst = await ensureInstance(pool, 'poison-test', uid('p'));
    const bad = uid('bad');
    await enqueueMessage(pool, inst, bad, { poison: true });
    await enqueueMessage(pool, inst, 'after', {});
    const host = actorHostStub(env, inst);
    const failed = await host.wake(inst).then(
      () => null,
      (err: unknown) => err,
    );
    expect(String(failed)).toMatch(/cannot parse/);
    // No further wake-up from outside: each retry comes from the alarm the failure armed.
    for (let i = 2; i <= 5; i++) expect(await runDurableObjectAlarm(host)).toBe(true);
    expect(await mailboxRow(inst, bad)).toMatchObject({ state: 'dead', attempts: 5 });
    expect(await seen(inst)).toEqual(['after']);
  });

  it('retention prunes dead messages like delivered ones, and keeps pending ones', async () => {
    const inst = await ensureInstance(pool, 'poison-test', uid('p'));
    const bad = uid('bad');
    await enqueueMessage(pool, inst, bad, { poison: true });
    await drainInstance(pool, effectRegistry, inst, { ...config, mailboxMaxAttempts: 1 });
    await enqueueMessage(pool, inst, 'later', { poison: true }, { delayMs: 10 * 86_400_000 });
    expect(await mailboxRow(inst, bad)).toMatchObject({ state: 'dead' });
    await advanceDbClock(pool, config.mailboxRetentionMs + 60_000);
    await pruneMailbox(pool, config.mailboxRetentionMs, 1000);
    expect(await mailboxRow(inst, bad)).toBeUndefined();
    expect(await mailboxRow(inst, 'later')).toMatchObject({ state: 'pending' });
  });
});
