import { runDurableObjectAlarm } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { afterTurnSettled, type TurnOutcome, type TurnSettlement } from '../../workers/channel/typing-hooks';
import { loadConfig } from '../../workers/env';
import { type Installation, loadInstallation } from '../../workers/installations/store';
import { sweepDeliveryAnchor } from '../../workers/typing-ledger';
import {
  engineSuite,
  fireDebounce,
  host,
  newChat,
  pump,
  submitAwaitable,
  turns,
  untilSettled,
} from '../channel/helpers';
import { uid } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { emu, releaseHeld, untilHeld } from '../lark/helpers';
import { keys, makeInstallation, newMessage, reactionsOn, register } from './helpers';

/**
 * The delivery-anchor fallback (workers/typing-ledger/anchor.ts): when a reply is delivered and
 * its anchor message has no ledger row (a badge from before the ledger), the anchor is swept
 * for OUR `Typing` with the installation's current credentials. A message with a ledger row
 * belongs to the ledger: no list call. A listing that fails deletes nothing.
 */
const suite = engineSuite();
const { pool } = suite;
const logs = captureLogLines();
afterAll(() => logs.restore());

let inst: Installation;
beforeAll(async () => {
  inst = await makeInstallation(pool);
});

interface Call {
  route: string;
  messageId?: string;
  status: number | 'dropped';
}
/** The emulator's Open API calls about one message. */
const callsOn = async (messageId: string, route?: string) =>
  (await emu<{ calls: Call[] }>(`calls?message_id=${encodeURIComponent(messageId)}`)).calls.filter(
    (c) => !route || c.route === route,
  );

/** A message carrying our app's legacy `Typing`, a human's, another app's, and our own THUMBSUP. */
async function crowdedAnchor(appId: string, messageId?: string) {
  const id = messageId ?? (await newMessage());
  const add = (body: Record<string, string>) =>
    emu<{ reaction_id: string }>(`messages/${id}/reactions`, body);
  const ours = await add({ emoji_type: 'Typing', app_id: appId });
  const human = await add({ emoji_type: 'Typing', user_open_id: `ou_${uid('h').slice(2)}` });
  const otherApp = await add({ emoji_type: 'Typing', app_id: 'cli_someoneelse' });
  const ourThumb = await add({ emoji_type: 'THUMBSUP', app_id: appId });
  return {
    messageId: id,
    ours: ours.reaction_id,
    kept: [human.reaction_id, otherApp.reaction_id, ourThumb.reaction_id].sort(),
  };
}

const remaining = async (messageId: string) =>
  (await reactionsOn(messageId)).map((r) => r.reaction_id).sort();

describe('delivery-anchor fallback sweep', { timeout: 40_000 }, () => {
  it("a legacy anchor (no ledger row) loses only our app's Typing: humans', other apps' and our other reactions are kept", async () => {
    const a = await crowdedAnchor(inst.appId);
    expect(await sweepDeliveryAnchor(pool, inst, a.messageId)).toBe('cleaned');
    expect(await remaining(a.messageId)).toEqual(a.kept);
    const deletes = await callsOn(a.messageId, 'reactions.delete');
    expect(deletes).toEqual([expect.objectContaining({ status: 200 })]);
    // Nothing of ours left: a second sweep lists and deletes nothing.
    expect(await sweepDeliveryAnchor(pool, inst, a.messageId)).toBe('nothing');
    expect(await callsOn(a.messageId, 'reactions.delete')).toHaveLength(1);
    expect(await remaining(a.messageId)).toEqual(a.kept);
  });

  it('our Typing on the second page of the listing is found and removed; the 50 others are kept', async () => {
    const messageId = await newMessage();
    for (let i = 0; i < 50; i++)
      await emu(`messages/${messageId}/reactions`, { emoji_type: 'Typing', user_open_id: `ou_p${i}` });
    const ours = await emu<{ reaction_id: string }>(`messages/${messageId}/reactions`, {
      emoji_type: 'Typing',
      app_id: inst.appId,
    });
    expect(await sweepDeliveryAnchor(pool, inst, messageId)).toBe('cleaned');
    const left = await reactionsOn(messageId);
    expect(left).toHaveLength(50);
    expect(left.some((r) => r.reaction_id === ours.reaction_id)).toBe(false);
    expect((await callsOn(messageId, 'reactions.list')).length).toBe(2);
  });

  it('an anchor with a ledger row belongs to the ledger: no list call, no delete, every badge kept', async () => {
    const a = await crowdedAnchor(inst.appId);
    // The ledger registered this message: its row, not the fallback, owns our badge there.
    const reg = await register(pool, inst, { sessionId: uid('s'), messageId: a.messageId, position: 1 });
    expect(reg.kind).toBe('registered');
    expect(await sweepDeliveryAnchor(pool, inst, a.messageId)).toBe('ledger_owned');
    expect(await callsOn(a.messageId)).toEqual([]);
    expect(await remaining(a.messageId)).toEqual([a.ours, ...a.kept].sort());
  });

  it('a listing that fails (5xx) deletes nothing: outcome failed, typing_anchor_sweep_failed logged once', async () => {
    const a = await crowdedAnchor(inst.appId);
    await emu('faults', { route: 'reactions.list', kind: '5xx', status: 503 });
    const before = logs.events('typing_anchor_sweep_failed').length;
    expect(await sweepDeliveryAnchor(pool, inst, a.messageId)).toBe('failed');
    expect(await callsOn(a.messageId, 'reactions.list')).toEqual([expect.objectContaining({ status: 503 })]);
    expect(await callsOn(a.messageId, 'reactions.delete')).toEqual([]);
    expect(await remaining(a.messageId)).toEqual([a.ours, ...a.kept].sort());
    const failed = logs.events('typing_anchor_sweep_failed').slice(before);
    expect(failed).toEqual([
      expect.objectContaining({ level: 'warn', installationId: inst.id, outcome: 'retryable' }),
    ]);
    expect(JSON.stringify(failed)).not.toContain(inst.appSecret);
  });

  it('a listing that fails on its second page deletes nothing either (a partial view acknowledges nothing)', async () => {
    const messageId = await newMessage();
    const ours = await emu<{ reaction_id: string }>(`messages/${messageId}/reactions`, {
      emoji_type: 'Typing',
      app_id: inst.appId,
    });
    for (let i = 0; i < 50; i++)
      await emu(`messages/${messageId}/reactions`, { emoji_type: 'Typing', user_open_id: `ou_q${i}` });
    // Page one (our badge on it) answers; page two fails. Both calls are held in turn so the
    // 5xx is armed only once page one has been answered.
    await emu('faults', { route: 'reactions.list', kind: 'hold', times: 2 });
    const sweeping = sweepDeliveryAnchor(pool, inst, messageId);
    await untilHeld('reactions.list');
    expect(await releaseHeld()).toEqual({ released: 1 });
    await untilHeld('reactions.list');
    await emu('faults', { route: 'reactions.list', kind: '5xx' });
    expect(await releaseHeld()).toEqual({ released: 1 });
    expect(await sweeping).toBe('failed');
    expect(await callsOn(messageId, 'reactions.list')).toHaveLength(2);
    expect(await callsOn(messageId, 'reactions.delete')).toEqual([]);
    expect((await reactionsOn(messageId)).some((r) => r.reaction_id === ours.reaction_id)).toBe(true);
  });
});

describe('the fallback through afterTurnSettled', { timeout: 60_000 }, () => {
  const config = () => loadConfig(env as never);
  const settlement = async (
    messageId: string,
    outcome: TurnOutcome,
    installationId = suite.app.installationId,
  ): Promise<TurnSettlement> => {
    const i = (await loadInstallation(pool, keys(), installationId))!;
    return {
      sessionId: uid('s'),
      installationId,
      workspaceId: i.workspaceId,
      appId: i.appId,
      turnNo: 1,
      contextRevision: 1,
      cutoffPosition: 1,
      positions: [1],
      messageIds: [messageId],
      anchorMessageId: messageId,
      outcome,
      replyMessageId: outcome === 'delivered' ? 'om_reply' : null,
    };
  };

  it.each<TurnOutcome>(['failed', 'retired', 'anchor_gone'])(
    'a %s turn leaves a legacy anchor alone: the fallback runs on delivery only (no list call, badge kept)',
    async (outcome) => {
      const a = await crowdedAnchor(suite.app.appId);
      await afterTurnSettled(config(), await settlement(a.messageId, outcome));
      expect(await callsOn(a.messageId)).toEqual([]);
      expect(await remaining(a.messageId)).toEqual([a.ours, ...a.kept].sort());
    },
  );

  it("a delivered turn whose anchor predates the ledger: the turn-settled effect removes our Typing and keeps the human's and the other app's", async () => {
    const chat = newChat(suite.app);
    // A message Lark created three minutes ago: a replay older than two minutes gets no
    // ledger row and no Add, exactly like a message from before the ledger existed.
    await emu('clock', { advanceMs: -180_000 });
    const old = await emu<{ message_id: string }>('messages', { text: 'from before', chat_id: chat.chatId });
    await emu('clock', { advanceMs: 180_000 });
    const a = await crowdedAnchor(suite.app.appId, old.message_id);
    const built = await emu<{ request: { headers: Record<string, string>; body: string } }>('events', {
      app_id: suite.app.appId,
      deliver: 'return',
      message_id: old.message_id,
    });
    await (await submitAwaitable(suite.app, built.request)).afterAnswer;
    const { rows } = await pool.query('select 1 from channel_typing_reaction where source_message_id = $1', [
      old.message_id,
    ]);
    expect(rows).toHaveLength(0);
    await pump(chat);
    await fireDebounce(pool, chat);
    const turn = await untilSettled(pool, chat, 1);
    expect(turn).toMatchObject({ outcome: 'delivered', anchor_message_id: old.message_id });
    // The channel.turn-settled effect runs on the host's next wake-up.
    for (let i = 0; i < 5 && (await remaining(a.messageId)).includes(a.ours); i++) {
      await runDurableObjectAlarm(host(chat));
      await pump(chat);
    }
    expect(await remaining(a.messageId)).toEqual(a.kept);
    expect(await callsOn(a.messageId, 'reactions.delete')).toEqual([
      expect.objectContaining({ status: 200 }),
    ]);
    expect((await turns(pool, chat))[0]!.outcome).toBe('delivered');
  });
});
