import { runDurableObjectAlarm } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { PAUSE_LOCK } from '../../workers/channel/pause';
import { effectRegistry } from '../../workers/effects/registry';
import { drainInstance } from '../../workers/effects/runner';
import { effectConfig } from '../../workers/effects/types';
import { advanceDbClock, backendPid, blockedBehind } from '../helpers/db';
import { admin, emu, errorCode, installApp, type TestApp } from '../lark/helpers';
import {
  type Chat,
  engineSuite,
  host,
  newChat,
  PAST_DEBOUNCE_MS,
  pump,
  repliesTo,
  say,
  sayAwaitable,
  stateOf,
  textOf,
  turns,
  typingOn,
  untilSettled,
  untilWithdrawn,
} from './helpers';

const suite = engineSuite();
const { pool } = suite;

const pause = (app: TestApp) => admin(`/${app.installationId}/pause`, { body: { operator: 'alice' } });
const resume = (app: TestApp, backlog: string) =>
  admin(`/${app.installationId}/resume`, { body: { operator: 'bob', backlog } });

/** A message whose Typing Add has finished (or was never sent), so a test can count badges. */
async function sayAndBadge(chat: Chat, text: string): Promise<string> {
  const { messageId, afterAnswer } = await sayAwaitable(chat, text);
  await afterAnswer;
  return messageId;
}

/** Debounces pass for every chat; each host runs its timer and drains. */
async function fireAll(chats: Chat[]) {
  await advanceDbClock(pool, PAST_DEBOUNCE_MS);
  for (const chat of chats) {
    await runDurableObjectAlarm(host(chat));
    await pump(chat);
  }
}

async function ledgerRows(chat: Chat) {
  const { rows } = await pool.query<{ source_message_id: string; settle_outcome: string | null }>(
    `select source_message_id, settle_outcome from channel_typing_reaction
      where session_id = $1 order by input_position`,
    [chat.sessionId],
  );
  return rows;
}

describe('pause and resume (issue 33 paused)', { timeout: 60_000 }, () => {
  it('pause.race_with_turn_start: a turn start racing the pause gives way once the pause is acknowledged', async () => {
    const app = await installApp();
    const chat = newChat(app);
    await say(chat, 'start a turn unless paused');
    await pump(chat);
    await advanceDbClock(pool, PAST_DEBOUNCE_MS);
    const holder = await pool.connect();
    let answered: Response;
    try {
      await holder.query('begin');
      await holder.query(PAUSE_LOCK, [app.installationId]);
      const holderPid = await backendPid(holder);
      // The pause queues first for the installation's row ...
      const pausing = pause(app);
      const pausePid = await blockedBehind(pool, holderPid);
      // ... then the turn start: its handler has read "not paused", its commit waits for the row.
      const draining = drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
      // Queued behind the pause for the row's lock: blocked by the holder or by the pause.
      await blockedBehind(pool, [holderPid, pausePid]);
      await holder.query('commit');
      answered = await pausing;
      await draining;
    } finally {
      holder.release();
    }
    expect(answered.status).toBe(200);
    expect(await answered.json()).toMatchObject({ settings: { paused: 'on' } });
    // The start read the pause in its commit and was handled again: no turn, the input waits.
    expect(await turns(pool, chat)).toEqual([]);
    expect((await stateOf(pool, chat)).pending).toHaveLength(1);
    await advanceDbClock(pool, PAST_DEBOUNCE_MS);
    await runDurableObjectAlarm(host(chat));
    await pump(chat);
    expect(await turns(pool, chat)).toEqual([]);
  });

  it('pause.inputs_recorded_not_badged: while paused an input is acknowledged and recorded, with no badge and no turn', async () => {
    const app = await installApp();
    expect((await pause(app)).status).toBe(200);
    const chat = newChat(app);
    const messageId = await sayAndBadge(chat, 'anyone there?');
    await pump(chat);
    await fireAll([chat]);
    expect(await typingOn(messageId)).toBe(0);
    const { calls } = await emu<{ calls: unknown[] }>(`calls?route=reactions.create&message_id=${messageId}`);
    expect(calls).toEqual([]);
    expect(await ledgerRows(chat)).toEqual([]);
    expect(await turns(pool, chat)).toEqual([]);
    const { rows } = await pool.query('select 1 from lark_inbound_messages where message_id = $1', [
      messageId,
    ]);
    expect(rows).toHaveLength(1);
    expect((await stateOf(pool, chat)).pending.map((p) => p.messageId)).toEqual([messageId]);
  });

  it('resume.answer_newest_turn_only: each chat answers its backlog with one turn, its newest inputs only', async () => {
    const app = await installApp();
    const [a, b, c] = [newChat(app), newChat(app), newChat(app)];
    const a1 = await sayAndBadge(a, 'first, before the pause');
    const a2 = await sayAndBadge(a, 'second, before the pause');
    await pump(a);
    expect(await typingOn(a1)).toBe(1);
    expect((await pause(app)).status).toBe(200);
    const a3 = await say(a, 'third, while paused');
    const b1 = await say(b, 'only one, while paused');
    // More than one turn's worth (MAX_TURN_INPUTS = 50): the oldest is not answered.
    const cs: string[] = [];
    for (let i = 1; i <= 51; i++) cs.push(await say(c, `c${i}`));
    for (const chat of [a, b, c]) await pump(chat);
    await fireAll([a, b, c]);
    for (const chat of [a, b, c]) expect(await turns(pool, chat)).toEqual([]);

    const res = await resume(app, 'answer');
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({
      settings: { paused: 'off' },
      backlog: 'answer',
      conversations: 3,
    });
    for (const chat of [a, b, c]) {
      await pump(chat);
      expect(await untilSettled(pool, chat, 1)).toMatchObject({ outcome: 'delivered' });
    }
    await fireAll([a, b, c]);
    const [ta, tb, tc] = [await turns(pool, a), await turns(pool, b), await turns(pool, c)];
    expect(ta.map((t) => [t.anchor_message_id, t.input_count])).toEqual([[a3, 3]]);
    expect(tb.map((t) => [t.anchor_message_id, t.input_count])).toEqual([[b1, 1]]);
    expect(tc.map((t) => [t.anchor_message_id, t.input_count])).toEqual([[cs[50], 50]]);
    expect((await repliesTo(a3)).map(textOf)).toHaveLength(1);
    for (const m of [a1, a2, cs[0]!]) expect(await repliesTo(m)).toEqual([]);
    expect((await stateOf(pool, c)).pending).toEqual([]);
    await untilWithdrawn(a, [a1, a2]);
  });

  it('resume.drop: nothing of the backlog is answered and the badges of dropped inputs are withdrawn', async () => {
    const app = await installApp();
    const chat = newChat(app);
    const m1 = await sayAndBadge(chat, 'before the pause');
    const m2 = await sayAndBadge(chat, 'also before the pause');
    await pump(chat);
    expect([await typingOn(m1), await typingOn(m2)]).toEqual([1, 1]);
    expect((await pause(app)).status).toBe(200);
    const m3 = await sayAndBadge(chat, 'while paused');
    await pump(chat);

    const res = await resume(app, 'drop');
    expect(await res.json()).toMatchObject({ backlog: 'drop', conversations: 1 });
    await pump(chat);
    await untilWithdrawn(chat, [m1, m2]);
    await fireAll([chat]);
    expect(await turns(pool, chat)).toEqual([]);
    for (const m of [m1, m2, m3]) expect(await repliesTo(m)).toEqual([]);
    expect((await stateOf(pool, chat)).pending).toEqual([]);
    expect(await ledgerRows(chat)).toEqual([
      { source_message_id: m1, settle_outcome: 'dropped' },
      { source_message_id: m2, settle_outcome: 'dropped' },
    ]);

    // Resumed: the next message is answered on its own.
    const m4 = await say(chat, 'after the resume');
    await pump(chat);
    await fireAll([chat]);
    expect(await untilSettled(pool, chat, 1)).toMatchObject({ anchor_message_id: m4, input_count: 1 });
  });

  it('pause.routes: audited with the operator, idempotent, 400 for a bad backlog, 404 for no installation', async () => {
    const app = await installApp();
    expect((await pause(app)).status).toBe(200);
    const again = await pause(app);
    expect(await again.json()).toMatchObject({ changed: [] });
    const bad = await resume(app, 'maybe');
    expect(bad.status).toBe(400);
    expect(await errorCode(bad)).toBe('validation_failed');
    expect(await (await resume(app, 'drop')).json()).toMatchObject({ changed: [{ setting: 'paused' }] });
    expect(await (await resume(app, 'drop')).json()).toMatchObject({ changed: [], conversations: 0 });
    const { rows } = await pool.query(
      'select operator, action, outcome from console_audit where target = $1 order by id',
      [`${app.installationId}:paused`],
    );
    expect(rows).toEqual([
      { operator: 'alice', action: 'installation.pause', outcome: 'off -> on' },
      { operator: 'bob', action: 'installation.resume', outcome: 'on -> off (backlog: drop)' },
    ]);
    for (const res of [
      await admin('/li_doesnotexist/pause', { body: { operator: 'alice' } }),
      await admin('/li_doesnotexist/resume', { body: { operator: 'alice', backlog: 'drop' } }),
    ])
      expect(res.status).toBe(404);
  });
});
