import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { enqueueMessage, ensureInstance, loadInstance } from '../../workers/effects/mailbox';
import { effectRegistry } from '../../workers/effects/registry';
import { drainInstance } from '../../workers/effects/runner';
import { advanceDbClock, setDbClockOffset, testPool, uid } from '../helpers/db';
import { countRoundTrips } from '../helpers/round-trips';
import { config } from './helpers';

interface Seen {
  events: { what: string; nowMs: number; attempts?: number }[];
}

effectRegistry.registerActor<Seen>({
  type: 'drain-trips-test',
  initialState: () => ({ events: [] }),
  handle(event, s, ctx) {
    const state = { events: [], ...(s as Partial<Seen>) };
    if (event.type === 'timer') return { events: [...state.events, { what: 'timer', nowMs: ctx.nowMs }] };
    const p = event.payload as { timer?: number } | null;
    if (p?.timer !== undefined) ctx.setTimer(ctx.nowMs + p.timer);
    return { events: [...state.events, { what: event.key, nowMs: ctx.nowMs }] };
  },
});

const pool = testPool();
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

/** The round trips made outside a transaction (`begin` .. `commit`/`rollback`): the step's reads. */
function readsOutsideTx(texts: string[]): string[] {
  const out: string[] = [];
  let inTx = false;
  for (const t of texts) {
    if (t.startsWith('begin'))
      inTx = true; // withTx's first statement, its begin with it
    else if (t === 'commit' || t === 'rollback') inTx = false;
    else if (!inTx) out.push(t);
  }
  return out;
}

const events = async (id: string) => ((await loadInstance(pool, id))!.state as Seen).events;

describe('drain round trips (bench/suites/50-channel.ts: an actor host pump is mostly these)', () => {
  it('each delivery step reads the instance, its oldest available message and the now in ONE round trip; the empty step that ends the drain is one too', async () => {
    const inst = await ensureInstance(pool, 'drain-trips-test', uid('d'));
    await enqueueMessage(pool, inst, 'm1', {});
    await enqueueMessage(pool, inst, 'm2', {});
    await enqueueMessage(pool, inst, 'later', {}, { delayMs: 60_000 });
    const trips = countRoundTrips(pool);
    expect(await drainInstance(pool, effectRegistry, inst, config)).toBe(2);
    trips.stop();
    // Two deliveries and the step that finds nothing due: three reads, one round trip each
    // (they were three each: instance, message, now).
    expect(readsOutsideTx(trips.texts)).toHaveLength(3);
    expect((await events(inst)).map((e) => e.what)).toEqual(['m1', 'm2']);
  });

  it('a timer is judged due at the same database now the handler is given, and a message not yet available stays', async () => {
    const inst = await ensureInstance(pool, 'drain-trips-test', uid('d'));
    await enqueueMessage(pool, inst, 'arm', { timer: 5_000 });
    await enqueueMessage(pool, inst, 'later', {}, { delayMs: 60_000 });
    expect(await drainInstance(pool, effectRegistry, inst, config)).toBe(1);
    const armedAt = (await events(inst))[0]!.nowMs;
    await advanceDbClock(pool, 4_000);
    expect(await drainInstance(pool, effectRegistry, inst, config)).toBe(0); // not due yet
    await advanceDbClock(pool, 1_500);
    const trips = countRoundTrips(pool);
    expect(await drainInstance(pool, effectRegistry, inst, config)).toBe(1);
    trips.stop();
    expect(readsOutsideTx(trips.texts)).toHaveLength(2);
    const [, timer] = await events(inst);
    expect(timer!.what).toBe('timer');
    expect(timer!.nowMs).toBeGreaterThanOrEqual(armedAt + 5_000);
    expect(timer!.nowMs).toBeLessThan(armedAt + 60_000);
    await advanceDbClock(pool, 60_000);
    expect(await drainInstance(pool, effectRegistry, inst, config)).toBe(1);
    expect((await events(inst)).map((e) => e.what)).toEqual(['arm', 'timer', 'later']);
  });
});
