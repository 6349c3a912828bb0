import { runDurableObjectAlarm } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { effectRegistry } from '../../workers/effects/registry';
import { drainInstance } from '../../workers/effects/runner';
import { effectConfig } from '../../workers/effects/types';
import { deleteInstallation } from '../../workers/installations/store';
import { advanceDbClock } from '../helpers/db';
import { emu, installApp, releaseHeld, untilHeld } from '../lark/helpers';
import {
  type Chat,
  engineSuite,
  host,
  newChat,
  PAST_DEBOUNCE_MS,
  pump,
  repliesTo,
  sayAwaitable,
  turns,
  untilSettled,
} from './helpers';

/**
 * Issue 28 "Proofs to add", end to end through the real engine (webhook, actor host, reply
 * and turn-settled effects) with the emulator as Lark.
 */
const suite = engineSuite();
const { pool } = suite;

interface Reaction {
  reaction_id: string;
  operator: { operator_id: string; operator_type: string };
  reaction_type: { emoji_type: string };
}
const reactionsOn = async (messageId: string) =>
  (await emu<{ items: Reaction[] }>(`messages/${messageId}/reactions`)).items;
const oursOn = async (messageId: string, appId: string) =>
  (await reactionsOn(messageId)).filter(
    (r) =>
      r.reaction_type.emoji_type === 'Typing' &&
      r.operator.operator_type === 'app' &&
      r.operator.operator_id === appId,
  ).length;

/** Runs the host until none of our badges is left on `ids` (foreign ones stay). */
async function untilOursWithdrawn(chat: Chat, ids: string[], rounds = 6): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    if ((await Promise.all(ids.map((id) => oursOn(id, chat.app.appId)))).every((n) => n === 0)) return;
    await runDurableObjectAlarm(host(chat));
    await pump(chat);
  }
  throw new Error(`our Typing still on ${ids.join(', ')} after ${rounds} host rounds`);
}

const deletesOn = async (messageIds: string[]) => {
  const { calls } = await emu<{ calls: { route: string; messageId?: string; status: number }[] }>(
    'calls?route=reactions.delete',
  );
  return calls.filter((c) => c.messageId && messageIds.includes(c.messageId));
};

describe('typing badges end to end (issue 28 proofs)', { timeout: 60_000 }, () => {
  it("proof.installation_deleted_mid_turn: the installation deleted between the flush and the reply: the turn fails, no reply, every coalesced badge withdrawn with the snapshot, a human's Typing kept", async () => {
    const app = await installApp();
    const chat = newChat(app);
    const ids: string[] = [];
    for (const text of ['one', 'two', 'three']) {
      const { messageId, afterAnswer } = await sayAwaitable(chat, text);
      await afterAnswer;
      ids.push(messageId);
    }
    for (const id of ids) await emu(`messages/${id}/reactions`, { emoji_type: 'Typing' }); // a human's
    expect(await Promise.all(ids.map((id) => oursOn(id, app.appId)))).toEqual([1, 1, 1]);
    // The flush alone: the turn starts (fenced commit), its reply has not run.
    await advanceDbClock(pool, PAST_DEBOUNCE_MS);
    await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
    expect((await turns(pool, chat)).map((t) => t.outcome)).toEqual([null]);
    expect(await deleteInstallation(pool, app.installationId)).toBe(true);

    expect((await untilSettled(pool, chat, 1)).outcome).toBe('failed');
    await untilOursWithdrawn(chat, ids);
    expect(await repliesTo(ids[2]!)).toEqual([]);
    for (const id of ids) {
      const left = await reactionsOn(id);
      expect(left.map((r) => r.operator.operator_type)).toEqual(['user']);
    }
    const { rows } = await pool.query<{ cleaned: boolean; snapshot: boolean }>(
      `select cleaned_at is not null as cleaned, credential_snapshot is not null as snapshot
         from channel_typing_reaction where session_id = $1`,
      [chat.sessionId],
    );
    expect(rows).toEqual(ids.map(() => ({ cleaned: true, snapshot: false })));
  });

  it('proof.add_during_running_turn: an Add released while its own turn is running keeps its badge', async () => {
    const chat = newChat(suite.app);
    // Lark holds the Add; meanwhile the turn covering the input starts (its channel_turns
    // row, as the flush writes it, with no outcome yet).
    await emu('faults', { route: 'reactions.create', kind: 'hold' });
    const { messageId: id, afterAnswer } = await sayAwaitable(chat, 'slow Add');
    await untilHeld('reactions.create');
    const { rows: input } = await pool.query<{ position: string; context_revision: string }>(
      'select position, context_revision from lark_inbound_messages where message_id = $1',
      [id],
    );
    await pool.query(
      `insert into channel_turns (session_id, turn_no, context_revision, first_position, cutoff_position,
         input_count, anchor_message_id, delivery_key, effect_id)
       values ($1, 1, $2, $3, $3, 1, $4, 'test', gen_random_uuid())`,
      [chat.sessionId, input[0]!.context_revision, input[0]!.position, id],
    );
    expect(await releaseHeld()).toEqual({ released: 1 });
    await afterAnswer; // recorded, then revalidated against the engine: the turn still runs
    expect(await oursOn(id, chat.app.appId)).toBe(1);
    const { rows } = await pool.query<{ add_state: string; cleaned: boolean; settled: boolean }>(
      `select add_state, cleaned_at is not null as cleaned, settled_at is not null as settled
         from channel_typing_reaction where source_message_id = $1`,
      [id],
    );
    expect(rows).toEqual([{ add_state: 'added', cleaned: false, settled: false }]);
    const { calls } = await emu<{ calls: { route: string }[] }>(
      `calls?message_id=${id}&route=reactions.delete`,
    );
    expect(calls).toEqual([]);
  });

  it("proof.coalesced_foreign_reactions: three coalesced messages each with a human's Typing, another app's Typing and an app reaction with an empty operator_id: exactly three deletes, every foreign reaction kept, the next input keeps its badge", async () => {
    const chat = newChat(suite.app);
    const other = `cli_other${crypto.randomUUID().replaceAll('-', '').slice(0, 12)}`;
    const ids: string[] = [];
    await emu('calls', undefined, 'DELETE');
    // Each Add is applied but its answer lost: the rows are uncertain, the turn must sweep.
    await emu('faults', { route: 'reactions.create', kind: 'lost_response', times: 3 });
    for (const text of ['a', 'b', 'c']) {
      const { messageId, afterAnswer } = await sayAwaitable(chat, text);
      await afterAnswer;
      ids.push(messageId);
    }
    for (const id of ids) {
      await emu(`messages/${id}/reactions`, { emoji_type: 'Typing' });
      await emu(`messages/${id}/reactions`, { emoji_type: 'Typing', app_id: other });
      await emu(`messages/${id}/reactions`, { emoji_type: 'Typing', operator_type: 'app', operator_id: '' });
    }
    expect(await Promise.all(ids.map((id) => oursOn(id, chat.app.appId)))).toEqual([1, 1, 1]);
    await advanceDbClock(pool, PAST_DEBOUNCE_MS);
    await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
    // The next input arrives after turn 1's flush: it belongs to turn 2.
    const next = await sayAwaitable(chat, 'd');
    await next.afterAnswer;
    expect(await oursOn(next.messageId, chat.app.appId)).toBe(1);

    expect((await untilSettled(pool, chat, 1)).outcome).toBe('delivered');
    await untilOursWithdrawn(chat, ids);
    expect((await deletesOn([...ids, next.messageId])).map((c) => c.status)).toEqual([200, 200, 200]);
    for (const id of ids) {
      const left = await reactionsOn(id);
      expect(
        left
          .map(
            (r) =>
              `${r.operator.operator_type}:${r.operator.operator_id === other ? 'other' : r.operator.operator_id === '' ? 'empty' : 'human'}`,
          )
          .sort(),
      ).toEqual(['app:empty', 'app:other', 'user:human']);
    }
    expect(await oursOn(next.messageId, chat.app.appId)).toBe(1);
  });
});
