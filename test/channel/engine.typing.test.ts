import { runDurableObjectAlarm } from 'cloudflare:test';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { setDbClockOffset, testPool } from '../helpers/db';
import { emu, installApp, type TestApp } from '../lark/helpers';
import { fireDebounce, host, newChat, pump, say, untilSettled } from './helpers';

const pool = testPool(4);
let app: TestApp;
beforeAll(async () => {
  app = await installApp();
}, 60_000);
afterEach(() => setDbClockOffset(pool, 0));
afterAll(() => pool.end());

const typingOn = async (messageId: string) =>
  (
    await emu<{ items: { reaction_type: { emoji_type: string } }[] }>(`messages/${messageId}/reactions`)
  ).items.filter((r) => r.reaction_type.emoji_type === 'Typing').length;

describe('engine and typing ledger together', { timeout: 40_000 }, () => {
  it('every coalesced input of a delivered turn is settled in the terminal transaction and loses its badge', async () => {
    const chat = newChat(app);
    const ids = [await say(chat, 'a'), await say(chat, 'b'), await say(chat, 'c')];
    await pump(chat);
    // The Adds run in the webhook's waitUntil: wait for them to land (bounded poll).
    for (let i = 0; i < 100 && (await Promise.all(ids.map(typingOn))).some((n) => n === 0); i++)
      await new Promise((r) => setTimeout(r, 50));
    expect(await Promise.all(ids.map(typingOn))).toEqual([1, 1, 1]);
    await fireDebounce(pool, chat);
    const turn = await untilSettled(pool, chat, 1);
    expect(turn.outcome).toBe('delivered');
    const { rows } = await pool.query<{ source_message_id: string; settled: boolean }>(
      `select source_message_id, settled_at is not null as settled from channel_typing_reaction
        where session_id = $1 order by input_position`,
      [chat.sessionId],
    );
    expect(rows.map((r) => r.source_message_id)).toEqual(ids);
    expect(rows.every((r) => r.settled)).toBe(true);
    // The after-commit withdrawal runs as the durable channel.turn-settled effect.
    for (let i = 0; i < 5 && (await Promise.all(ids.map(typingOn))).some((n) => n > 0); i++) {
      await runDurableObjectAlarm(host(chat));
      await pump(chat);
    }
    expect(await Promise.all(ids.map(typingOn))).toEqual([0, 0, 0]);
  });
});
