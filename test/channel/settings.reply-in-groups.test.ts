import { describe, expect, it } from 'vitest';
import { emu, installApp, submit, type TestApp } from '../lark/helpers';
import {
  engineSuite,
  fireDebounce,
  newChat,
  repliesTo,
  turns,
  typingOn,
  untilSettled,
  untilWithdrawn,
} from './helpers';
import { appCalls, callsAbout, deliver, ledgerRows, setSettings } from './settings-helpers';

/**
 * Issue 33 item 1, `reply_in_groups` (docs/operations.md "Installation settings"), through the
 * real Worker and the emulator: under `mentioned`, a group message is answered only when it
 * @-mentions the bot's own open_id, fetched once from `GET /open-apis/bot/v3/info`
 * (workers/channel/mentions.ts); an unmentioned one is recorded and acknowledged, and the
 * accept statement writes neither its mailbox message nor its ledger row (accept.ts).
 */
const suite = engineSuite();
const { pool } = suite;

const inputOf = async (messageId: string) =>
  (
    await pool.query<{ unanswered: string | null; position: string }>(
      'select unanswered, position from lark_inbound_messages where message_id = $1',
      [messageId],
    )
  ).rows;

const mailboxOf = async (sessionId: string) =>
  (await pool.query('select message_key from actor_mailbox where instance_id = $1', [sessionId])).rows;

const botInfoCalls = async (app: TestApp) => (await appCalls(app)).filter((c) => c.route === 'bot.info');

describe('reply_in_groups', { timeout: 60_000 }, () => {
  it('reply_in_groups.unmentioned: a group message not mentioning the bot is recorded and acknowledged 200, never badged, never answered; a mentioned one in the same chat is', async () => {
    const app = await installApp();
    await setSettings(app, { reply_in_groups: 'mentioned' });
    const chat = newChat(app);
    const plain = await deliver(chat, { text: 'talking among ourselves' });
    const other = await deliver(chat, {
      text: '@_user_1 what do you think?',
      mentions: [{ open_id: 'ou_someoneelse', name: 'someone' }],
    });
    for (const m of [plain, other]) {
      expect(m.status).toBe(200);
      expect(m.body).toEqual({ ok: true, unanswered: 'not_mentioned' });
      expect(await inputOf(m.messageId)).toMatchObject([{ unanswered: 'not_mentioned' }]);
      expect(await ledgerRows(pool, m.messageId)).toEqual([]);
      expect(await callsAbout('reactions.create', m.messageId)).toEqual([]);
    }
    // No mailbox message, so no turn: the debounce fires on nothing.
    expect(await mailboxOf(chat.sessionId)).toEqual([]);
    await fireDebounce(pool, chat);
    expect(await turns(pool, chat)).toEqual([]);
    expect(await repliesTo(plain.messageId)).toEqual([]);
    expect(await repliesTo(other.messageId)).toEqual([]);

    const asked = await deliver(chat, { text: '@_user_1 please answer', mention_bot: true });
    expect(asked).toMatchObject({ status: 200, body: { ok: true } });
    expect(await inputOf(asked.messageId)).toMatchObject([{ unanswered: null, position: '3' }]);
    expect(await typingOn(asked.messageId)).toBe(1);
    await fireDebounce(pool, chat);
    const turn = await untilSettled(pool, chat, 1);
    expect(turn).toMatchObject({ outcome: 'delivered', anchor_message_id: asked.messageId, input_count: 1 });
    expect(await repliesTo(asked.messageId)).toHaveLength(1);
    await untilWithdrawn(chat, [asked.messageId]);
    // Still nothing for the unmentioned ones, after the turn either.
    expect(await repliesTo(plain.messageId)).toEqual([]);
    expect(await callsAbout('reactions.create', plain.messageId)).toEqual([]);
  });

  it('reply_in_groups.p2p: a direct message is always answered, mentions or not', async () => {
    const app = await installApp();
    await setSettings(app, { reply_in_groups: 'mentioned' });
    const chat = newChat(app);
    const direct = await deliver(chat, { text: 'just between us', chat_type: 'p2p' });
    expect(direct).toMatchObject({ status: 200, body: { ok: true } });
    expect(await inputOf(direct.messageId)).toMatchObject([{ unanswered: null }]);
    await fireDebounce(pool, chat);
    expect((await untilSettled(pool, chat, 1)).outcome).toBe('delivered');
    expect(await repliesTo(direct.messageId)).toHaveLength(1);
    // A p2p message never needs the bot's identity.
    expect(await botInfoCalls(app)).toEqual([]);
  });

  it('reply_in_groups.bot_open_id_cached: the bot’s open_id is fetched once, on the first message with mentions, and kept; messages without mentions and installations answering every group message never fetch it', async () => {
    const app = await installApp();
    await setSettings(app, { reply_in_groups: 'mentioned' });
    const chat = newChat(app);
    await deliver(chat, { text: 'no mentions at all' });
    expect(await botInfoCalls(app)).toEqual([]);
    for (let i = 0; i < 3; i++) {
      expect((await deliver(chat, { text: `@_user_1 question ${i}`, mention_bot: true })).status).toBe(200);
      await deliver(chat, { text: '@_user_1 hi', mentions: [{ open_id: 'ou_friend' }] });
    }
    expect(await botInfoCalls(app)).toHaveLength(1);
    const { rows } = await pool.query(
      'select open_id, app_id from lark_bot_identities where installation_id = $1',
      [app.installationId],
    );
    expect(rows).toEqual([{ open_id: app.botOpenId, app_id: app.appId }]);
    const answered = await pool.query(
      `select count(*)::int as n from lark_inbound_messages where session_id = $1 and unanswered is null`,
      [chat.sessionId],
    );
    expect(answered.rows[0].n).toBe(3);

    // `always`: mentions of anyone are answered without asking who the bot is.
    const always = await installApp();
    const open = newChat(always);
    const m = await deliver(open, { text: '@_user_1 hi', mentions: [{ open_id: 'ou_friend' }] });
    expect(m.body).toEqual({ ok: true });
    expect(await inputOf(m.messageId)).toMatchObject([{ unanswered: null }]);
    expect(await botInfoCalls(always)).toEqual([]);
  });

  it('reply_in_groups.bot_info_unavailable: when Lark cannot say who the bot is, the message is refused 503 with nothing written, and its redelivery is answered', async () => {
    const app = await installApp();
    await setSettings(app, { reply_in_groups: 'mentioned' });
    const chat = newChat(app);
    await emu('faults', { route: 'bot.info', kind: '5xx', status: 502, times: 1 });
    const built = await emu<{
      message_id: string;
      request: { headers: Record<string, string>; body: string };
    }>('events', {
      app_id: app.appId,
      deliver: 'return',
      message: { text: '@_user_1 hello?', chat_id: chat.chatId, chat_type: 'group', mention_bot: true },
    });
    const refused = await submit(app.installationId, built.request);
    expect(refused.status).toBe(503);
    expect(await inputOf(built.message_id)).toEqual([]);
    const receipts = await pool.query('select 1 from lark_event_receipts where installation_id = $1', [
      app.installationId,
    ]);
    expect(receipts.rows).toEqual([]);
    // Lark redelivers the same event: the bot's identity is fetched now, and the message answered.
    const again = await submit(app.installationId, built.request);
    expect(again.status).toBe(200);
    expect(await inputOf(built.message_id)).toMatchObject([{ unanswered: null }]);
    expect(await botInfoCalls(app)).toHaveLength(2);
  });
});
