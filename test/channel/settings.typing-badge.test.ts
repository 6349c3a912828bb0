import { describe, expect, it } from 'vitest';
import { advanceDbClock, blockedBehind, uid } from '../helpers/db';
import { admin, emu, installApp } from '../lark/helpers';
import {
  engineSuite,
  fireDebounce,
  newChat,
  repliesTo,
  sayAwaitable,
  typingOn,
  untilSettled,
  untilWithdrawn,
} from './helpers';
import { appCalls, callsAbout, countedToday, ledgerRows, setSettings } from './settings-helpers';

/**
 * Issue 33 item 1, `typing_badge` (docs/operations.md "Installation settings"), through the
 * real Worker and the emulator: the webhook's accept statement decides the badge from the
 * installation's settings in its own snapshot (workers/channel/accept.ts).
 */
const suite = engineSuite();
const { pool } = suite;

describe('typing_badge', { timeout: 60_000 }, () => {
  it('typing_badge.off: no Add at all and no ledger row, and the message is still answered', async () => {
    const app = await installApp();
    await setSettings(app, { typing_badge: 'off' });
    const chat = newChat(app);
    const { messageId, afterAnswer } = await sayAwaitable(chat, 'answer me without a badge');
    await afterAnswer;
    expect(await ledgerRows(pool, messageId)).toEqual([]);
    await fireDebounce(pool, chat);
    expect((await untilSettled(pool, chat, 1)).outcome).toBe('delivered');
    expect(await repliesTo(messageId)).toHaveLength(1);
    // Not one reaction call about the message, before or after the turn.
    for (const route of ['reactions.create', 'reactions.delete', 'reactions.list'])
      expect(await callsAbout(route, messageId), route).toEqual([]);
    expect(await ledgerRows(pool, messageId)).toEqual([]);
    // The ledger's own history is untouched too: no quota skip was recorded for it.
    const { rows } = await pool.query(
      `select 1 from typing_incidents t join lark_installations i on i.workspace_id = t.workspace_id
        where i.id = $1`,
      [app.installationId],
    );
    expect(rows).toEqual([]);
  });

  it('typing_badge.quiet_held: while a recorded 429 holds a reaction route of the app, quiet registers nothing and sends nothing; on still registers (and the gate refuses the Add); once the hold passes, quiet badges again', async () => {
    const app = await installApp();
    await setSettings(app, { typing_badge: 'quiet' });
    const chat = newChat(app);
    // Lark answers the first Add 429 with a 60 s reset: the gate records the hold.
    await emu('faults', { route: 'reactions.create', kind: '429', resetSeconds: 60 });
    const first = await sayAwaitable(chat, 'the Add meets the 429');
    await first.afterAnswer;
    expect((await ledgerRows(pool, first.messageId))[0]).toMatchObject({ add_state: 'not_added' });
    const { rows: holds } = await pool.query(
      `select route from lark_rate_limits where app_id = $1 and not_before > app_now()`,
      [app.appId],
    );
    expect(holds).toEqual([{ route: 'reactions.create' }]);

    const held = await sayAwaitable(chat, 'while the hold lasts');
    await held.afterAnswer;
    expect(await ledgerRows(pool, held.messageId)).toEqual([]);
    expect(await callsAbout('reactions.create', held.messageId)).toEqual([]);

    // Contrast: under `on` the same hold still registers the badge; the client's gate then
    // holds the Add back (nothing sent, and a call held back is not counted).
    await setSettings(app, { typing_badge: 'on' });
    const counted = await countedToday(pool, app);
    const on = await sayAwaitable(chat, 'on, under the hold');
    await on.afterAnswer;
    expect((await ledgerRows(pool, on.messageId))[0]).toMatchObject({ add_state: 'not_added' });
    expect(await callsAbout('reactions.create', on.messageId)).toEqual([]);
    expect(await countedToday(pool, app)).toBe(counted);

    // The hold passes (database time): quiet badges again.
    await setSettings(app, { typing_badge: 'quiet' });
    await advanceDbClock(pool, 61_000);
    const after = await sayAwaitable(chat, 'after the reset');
    await after.afterAnswer;
    expect((await ledgerRows(pool, after.messageId))[0]).toMatchObject({ add_state: 'added' });
    expect(await typingOn(after.messageId)).toBe(1);
  });

  it('typing_badge.quiet_budget: every Lark call the app sends is counted once; over its daily budget quiet adds no badge, and back under it (budget none) it does', async () => {
    const app = await installApp();
    await setSettings(app, { typing_badge: 'quiet', typing_daily_call_budget: 1 });
    const chat = newChat(app);
    expect(await countedToday(pool, app)).toBe(0);
    const under = await sayAwaitable(chat, 'under the budget');
    await under.afterAnswer;
    expect(await typingOn(under.messageId)).toBe(1);
    // The count is exactly the calls the emulator answered for the app (token and Add).
    const sent = await appCalls(app);
    expect(sent.map((c) => c.route).sort()).toEqual(['reactions.create', 'token']);
    expect(await countedToday(pool, app)).toBe(sent.length);

    const over = await sayAwaitable(chat, 'over the budget');
    await over.afterAnswer;
    expect(await ledgerRows(pool, over.messageId)).toEqual([]);
    expect(await callsAbout('reactions.create', over.messageId)).toEqual([]);
    expect(await countedToday(pool, app)).toBe(sent.length);

    await setSettings(app, { typing_daily_call_budget: 'none' });
    const unbounded = await sayAwaitable(chat, 'no budget');
    await unbounded.afterAnswer;
    expect(await typingOn(unbounded.messageId)).toBe(1);
    // The turn's reply and withdrawals are counted like any call.
    await fireDebounce(pool, chat);
    expect((await untilSettled(pool, chat, 1)).outcome).toBe('delivered');
    await untilWithdrawn(chat, [under.messageId, unbounded.messageId]);
    expect(await countedToday(pool, app)).toBe((await appCalls(app)).length);
  });

  it('settings.snapshot_wins: a change committed while a message’s accept statement waits is not seen by it: that message is answered and badged wholly under the old values; the next one under the new', async () => {
    const app = await installApp();
    const chat = newChat(app);
    const opening = await sayAwaitable(chat, 'opens the conversation');
    await opening.afterAnswer;
    // The accept statement's conversation upsert waits on this lock, its snapshot already taken.
    const locker = await pool.connect();
    try {
      await locker.query('begin');
      await locker.query('select 1 from channel_conversations where id = $1 for update', [chat.sessionId]);
      const { rows } = await locker.query<{ pid: number }>('select pg_backend_pid() as pid');
      const inFlight = sayAwaitable(chat, 'in flight during the change');
      await blockedBehind(pool, rows[0]!.pid);
      const res = await admin(`/${app.installationId}/settings`, {
        method: 'PATCH',
        body: { operator: 'race', settings: { typing_badge: 'off', reply_in_groups: 'mentioned' } },
      });
      expect(res.status).toBe(200);
      await locker.query('commit');
      const { messageId, afterAnswer } = await inFlight;
      await afterAnswer;
      // Old values, both halves: badged and answered.
      expect((await ledgerRows(pool, messageId))[0]).toMatchObject({ add_state: 'added' });
      const { rows: input } = await pool.query(
        'select unanswered from lark_inbound_messages where message_id = $1',
        [messageId],
      );
      expect(input).toEqual([{ unanswered: null }]);
      await fireDebounce(pool, chat);
      const turn = await untilSettled(pool, chat, 1);
      expect(turn).toMatchObject({ outcome: 'delivered', anchor_message_id: messageId, input_count: 2 });
    } finally {
      locker.release();
    }
    // After the change: an unmentioned group message is recorded only.
    const next = await sayAwaitable(chat, `after the change ${uid('m')}`);
    await next.afterAnswer;
    expect(await ledgerRows(pool, next.messageId)).toEqual([]);
    const { rows: later } = await pool.query(
      'select unanswered from lark_inbound_messages where message_id = $1',
      [next.messageId],
    );
    expect(later).toEqual([{ unanswered: 'not_mentioned' }]);
  });
});
