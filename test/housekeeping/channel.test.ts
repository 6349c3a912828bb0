import { describe, expect, it } from 'vitest';
import { newEffectId } from '../../workers/effects/ids';
import { channelSeeds, existing } from './channel-seed';
import { runSteps } from './helpers';

const { pool, newSeed } = channelSeeds();

const turnKeys = async (sessions: string[]) => {
  const { rows } = await pool.query(
    `select session_id || '#' || turn_no as k from channel_turns where session_id = any($1::text[]) order by 1`,
    [sessions],
  );
  return rows.map((r) => r.k);
};

describe('channel_turns retention', () => {
  it('deletes terminal turns settled over 7 days ago and keeps running, recent and still-needed ones', async () => {
    const seed = newSeed();
    const s = await seed.conversation();
    await seed.turn(s, 1, 1, 2, 8); // old terminal: deleted
    await seed.turn(s, 2, 3, 3, 1); // recent terminal: kept
    await seed.turn(s, 3, 4, 4, null); // running (no outcome) for 10 days: kept
    const pendingEffect = newEffectId();
    await seed.effect(s, 'pending', pendingEffect);
    await seed.turn(s, 4, 5, 5, 8, pendingEffect); // its effect is still pending: kept
    const live = await seed.conversation();
    await seed.turn(live, 1, 1, 3, 8); // a live ledger row at position 2 <= cutoff: kept
    await seed.ledger(live, 'om_live', 2, true);
    const done = await seed.conversation();
    await seed.turn(done, 1, 1, 3, 8); // its ledger row is terminal: deleted
    await seed.ledger(done, 'om_done', 2, false);

    expect((await runSteps(pool, ['turns'])).turns).toBe(2);
    expect(await turnKeys([s, live, done])).toEqual([`${live}#1`, `${s}#2`, `${s}#3`, `${s}#4`].sort());
  });

  it('deletes at most batchRows turns per run', async () => {
    const seed = newSeed();
    const s = await seed.conversation();
    for (let n = 1; n <= 5; n++) await seed.turn(s, n, n, n, 9);
    expect((await runSteps(pool, ['turns'], { batchRows: 2 })).turns).toBe(2);
    expect(await turnKeys([s])).toHaveLength(3);
    expect((await runSteps(pool, ['turns'])).turns).toBe(3);
    expect(await turnKeys([s])).toEqual([]);
  });
});

describe('lark_inbound_messages retention', () => {
  it('deletes old settled inputs and keeps pending, in-turn, ledger-live and recent ones', async () => {
    const seed = newSeed();
    const s = await seed.conversation({
      state: { pending: [{ position: 5, messageId: 'x' }], turn: { inputs: [{ position: 4 }] }, turnNo: 2 },
    });
    const settled = await seed.input(s, 1, 8);
    await seed.turn(s, 1, 1, 1, 8);
    await seed.ledger(s, await seed.messageIdOf(settled), 1, false);
    const liveLedger = await seed.input(s, 2, 8);
    await seed.ledger(s, await seed.messageIdOf(liveLedger), 2, true);
    const inMailbox = await seed.input(s, 3, 8);
    await seed.mailbox(s, 'in:3', 'pending');
    const inRunningTurn = await seed.input(s, 4, 8);
    const actorPending = await seed.input(s, 5, 8);
    const coveredByOpenTurn = await seed.input(s, 6, 8);
    await seed.turn(s, 2, 6, 6, null);
    const deliveredOrphan = await seed.input(s, 7, 8);
    await seed.mailbox(s, 'in:7', 'delivered');
    const recent = await seed.input(s, 8, 1);
    const preEngine = await seed.input(null, 0, 8);

    expect((await runSteps(pool, ['inputs'])).inputs).toBe(3);
    const all = [
      settled,
      liveLedger,
      inMailbox,
      inRunningTurn,
      actorPending,
      coveredByOpenTurn,
      deliveredOrphan,
      recent,
      preEngine,
    ];
    expect(await existing(pool, 'lark_inbound_messages', 'id', all)).toEqual(
      [liveLedger, inMailbox, inRunningTurn, actorPending, coveredByOpenTurn, recent].sort(),
    );
  });

  it('deletes at most batchRows inputs per run', async () => {
    const seed = newSeed();
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push(await seed.input(null, 0, 9));
    expect((await runSteps(pool, ['inputs'], { batchRows: 2 })).inputs).toBe(2);
    expect(await existing(pool, 'lark_inbound_messages', 'id', ids)).toHaveLength(3);
    expect((await runSteps(pool, ['inputs'])).inputs).toBe(3);
    expect(await existing(pool, 'lark_inbound_messages', 'id', ids)).toEqual([]);
  });
});

describe('channel_conversations retention', () => {
  it('deletes a conversation idle for 30 days with nothing left, keeps every one something still needs', async () => {
    const seed = newSeed();
    const idle = await seed.conversation({ idleDays: 31 });
    const recent = await seed.conversation({ idleDays: 29 });
    const withInput = await seed.conversation({ idleDays: 31 });
    await seed.input(withInput, 1, 31);
    const withTurn = await seed.conversation({ idleDays: 31 });
    await seed.turn(withTurn, 1, 1, 1, 1);
    const withLiveLedger = await seed.conversation({ idleDays: 31 });
    await seed.ledger(withLiveLedger, 'om_l', 1, true);
    const withCutoff = await seed.conversation({ idleDays: 31 });
    await seed.settlement(withCutoff, 10);
    const withMailbox = await seed.conversation({ idleDays: 31 });
    await seed.mailbox(withMailbox, 'in:10', 'delivered');
    const withEffect = await seed.conversation({ idleDays: 31 });
    await seed.effect(withEffect, 'pending');
    const actorPending = await seed.conversation({
      idleDays: 31,
      state: { pending: [{ position: 11 }], turn: null },
    });
    const actorTurn = await seed.conversation({ idleDays: 31, state: { pending: [], turn: { turnNo: 4 } } });
    const actorTimer = await seed.conversation({ idleDays: 31, wakeAtMs: Date.now() });
    const withTombstone = await seed.conversation({ idleDays: 31 });
    await seed.ledger(withTombstone, 'om_t', 1, false); // terminal ledger row: not a reason to keep
    const withCompletedEffect = await seed.conversation({ idleDays: 31 });
    await seed.effect(withCompletedEffect, 'completed');

    expect((await runSteps(pool, ['conversations'])).conversations).toBe(3);
    const all = [
      idle,
      recent,
      withInput,
      withTurn,
      withLiveLedger,
      withCutoff,
      withMailbox,
      withEffect,
      actorPending,
      actorTurn,
      actorTimer,
      withTombstone,
      withCompletedEffect,
    ];
    const kept = all.filter((id) => ![idle, withTombstone, withCompletedEffect].includes(id));
    expect(await existing(pool, 'channel_conversations', 'id', all)).toEqual(kept.sort());
    // The actor instance belongs to the effect runtime and stays.
    expect(await existing(pool, 'actor_instances', 'id', [idle])).toEqual([idle]);
  });

  it('deletes at most batchRows conversations per run', async () => {
    const seed = newSeed();
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push(await seed.conversation({ idleDays: 40 }));
    expect((await runSteps(pool, ['conversations'], { batchRows: 2 })).conversations).toBe(2);
    expect(await existing(pool, 'channel_conversations', 'id', ids)).toHaveLength(3);
    expect((await runSteps(pool, ['conversations'])).conversations).toBe(3);
    expect(await existing(pool, 'channel_conversations', 'id', ids)).toEqual([]);
  });
});
