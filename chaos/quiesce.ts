import type { FaultRunner } from './faults';
import { timed } from './workload';
import type { World } from './world';

/**
 * After the last step: every fault off (held Lark calls dropped, armed cuts and held locks
 * released, the second replica stopped), then the clock walks through the maintenance
 * windows (a debounce, the stale-process window, the two-minute taskless expiry, the retry
 * backoff up to an hour, the Lark token lifetime), running the minute cron and a typing
 * maintenance pass at each stop and waiting until the runtime has nothing due.
 */
export const QUIESCE_STOPS_MS = [0, 2_000, 31_000, 125_000, 600_000, 3_600_000, 3_700_000];

export async function quiesce(world: World, faults: FaultRunner): Promise<void> {
  world.trace.step = null;
  await faults.settle();
  world.lark.faults.clear();
  await world.dbFaults.clear();
  await world.setReplica(false);
  world.trace.add('quiesce: faults off, one runtime');
  for (const dt of QUIESCE_STOPS_MS) {
    if (dt) await world.advanceClock(dt);
    await timed(world, `quiesce +${dt / 1000}s: minute cron`, () => world.primary.minuteCron());
    await waitIdle(world, 5_000);
    await timed(world, `quiesce +${dt / 1000}s: maintenance pass`, () => world.primary.maintenancePass());
    await waitIdle(world, 5_000);
  }
}

/** Polls until nothing is due (effects, mailbox, actor timers, open turns) or `maxMs` passes. */
export async function waitIdle(world: World, maxMs: number): Promise<boolean> {
  const giveUpAt = Date.now() + maxMs;
  for (;;) {
    const { rows } = await world.db.query<{ busy: number }>(`
      select (select count(*) from effects
                where status = 'processing' or (status = 'pending' and run_at_ms <= app_now_ms()))
           + (select count(*) from actor_mailbox where state = 'pending' and available_at_ms <= app_now_ms())
           + (select count(*) from actor_instances where wake_at_ms is not null and wake_at_ms <= app_now_ms())
           + (select count(*) from channel_turns where outcome is null) as busy`);
    if (Number(rows[0]!.busy) === 0) return true;
    if (Date.now() > giveUpAt) {
      world.trace.add(`quiesce: still busy (${rows[0]!.busy}) after ${maxMs} ms`);
      return false;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
