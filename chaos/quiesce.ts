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

export async function quiesce(
  world: World,
  faults: FaultRunner,
  afterFaults: () => Promise<void> = async () => undefined,
): Promise<void> {
  world.trace.step = null;
  await faults.settle();
  world.lark.faults.clear();
  await world.dbFaults.clear();
  await world.setReplica(false);
  // The rollout completes (or is redone after a rollback): the invariants are those of the new
  // release having taken over whatever the old one left.
  if (world.version !== 'new') await world.restart({ version: 'new' });
  world.trace.add('quiesce: faults off, one runtime on the new release');
  // The operator's follow-ups (workload.ts operatorRetries), before the clock walks.
  await afterFaults();
  for (const dt of QUIESCE_STOPS_MS) {
    if (dt) await world.advanceClock(dt);
    await timed(world, `quiesce +${dt / 1000}s: minute cron`, () => world.primary.minuteCron());
    await waitIdle(world, 5_000);
    await timed(world, `quiesce +${dt / 1000}s: maintenance pass`, () => world.primary.maintenancePass());
    await waitIdle(world, 5_000);
  }
  world.trace.add(`quiesce: ${await summary(world)}`);
}

/** What the schedule left behind, for the trace: turns, ledger rows, replies at Lark. */
async function summary(world: World): Promise<string> {
  const { rows } = await world.db.query<{ turns: string; ledger: string; receipts: number }>(`
    select
      (select coalesce(string_agg(outcome || ' ' || n, ', '), 'none')
         from (select coalesce(outcome, 'open') as outcome, count(*) as n from channel_turns group by 1) t) as turns,
      (select coalesce(string_agg(s || ' ' || n, ', '), 'none')
         from (select case when cleaned_at is not null then 'cleaned' when abandoned_at is not null then 'abandoned'
                           else 'pending' end as s, count(*) as n
                 from channel_typing_reaction group by 1) l) as ledger,
      (select count(*)::int from private.chat_reaction_operations) as receipts`);
  const r = rows[0]!;
  let replies = 0;
  let typing = 0;
  for (const m of world.lark.state.messages.values())
    if (m.parent_id && m.sender.sender_type === 'app') replies++;
  for (const list of world.lark.state.reactions.values())
    typing += list.filter((x) => x.reaction_type.emoji_type === 'Typing').length;
  let sent = 0;
  let streaming = 0;
  for (const c of world.lark.state.cards.cards.values())
    if (c.sent) {
      sent++;
      if (c.finished_at === undefined) streaming++;
    }
  return `turns: ${r.turns}; ledger: ${r.ledger}; receipts: ${r.receipts}; replies at Lark: ${replies} (${sent} cards, ${streaming} streaming); Typing badges at Lark: ${typing}`;
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
