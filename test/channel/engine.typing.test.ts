import { describe, expect, it } from 'vitest';
import { effectRegistry } from '../../workers/effects/registry';
import { drainInstance } from '../../workers/effects/runner';
import { effectConfig } from '../../workers/effects/types';
import { runExpiration } from '../../workers/typing-ledger/passes/expire';
import { advanceDbClock } from '../helpers/db';
import { emu, releaseHeld, untilHeld } from '../lark/helpers';
import {
  engineSuite,
  fireDebounce,
  newChat,
  PAST_DEBOUNCE_MS,
  sayAwaitable,
  typingOn,
  untilSettled,
  untilWithdrawn,
} from './helpers';

const suite = engineSuite();
const { pool } = suite;

const ledgerRow = async (messageId: string) =>
  (
    await pool.query<{
      workspace_id: string;
      taskless: boolean;
      settled_at: Date | null;
      cleaned_at: Date | null;
      retention_outcome: string | null;
    }>(
      `select workspace_id, taskless, settled_at, cleaned_at, retention_outcome
         from channel_typing_reaction where source_message_id = $1`,
      [messageId],
    )
  ).rows[0]!;

describe('engine and typing ledger together', { timeout: 40_000 }, () => {
  it('the inputs of a running turn keep their badge past the two-minute taskless expiry until the turn settles', async () => {
    const chat = newChat(suite.app);
    const { messageId: id, afterAnswer } = await sayAwaitable(chat, 'a long-running question');
    await afterAnswer; // the host woke and the Add is recorded
    expect(await typingOn(id)).toBe(1);
    expect((await ledgerRow(id)).taskless).toBe(true);
    // The flush alone: the turn starts (its fenced commit) but its reply has not run.
    await advanceDbClock(pool, PAST_DEBOUNCE_MS);
    await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
    expect((await ledgerRow(id)).taskless).toBe(false);

    // The agent is still working three minutes later: the expiration pass must leave it.
    await advanceDbClock(pool, 3 * 60_000);
    const { workspace_id } = await ledgerRow(id);
    const report = await runExpiration(pool, { scope: { workspaceIds: [workspace_id] } });
    expect(report.tasklessExpired).toBe(0);
    const during = await ledgerRow(id);
    expect(during.settled_at).toBeNull();
    expect(during.retention_outcome).toBeNull();
    expect(await typingOn(id)).toBe(1);

    // Terminal settlement of the turn withdraws it.
    expect((await untilSettled(pool, chat, 1)).outcome).toBe('delivered');
    await untilWithdrawn(chat, [id]);
    expect(await typingOn(id)).toBe(0);
    expect((await ledgerRow(id)).cleaned_at).not.toBeNull();
  });

  it('an input whose turn is already terminal when the Add returns loses its badge at once', async () => {
    const chat = newChat(suite.app);
    // Lark holds the Add: the engine's record of the turn ends while it is in flight.
    await emu('faults', { route: 'reactions.create', kind: 'hold' });
    const { messageId: id, afterAnswer } = await sayAwaitable(chat, 'ended before the Add returned');
    await untilHeld('reactions.create');
    const { rows } = await pool.query<{ position: string; context_revision: string }>(
      'select position, context_revision from lark_inbound_messages where message_id = $1',
      [id],
    );
    // Only the engine knows: its turn covering this input is terminal, while the ledger row
    // itself is not settled (so the ledger's own check alone would keep the badge).
    await pool.query(
      `insert into channel_turns (session_id, turn_no, context_revision, first_position, cutoff_position,
         input_count, anchor_message_id, delivery_key, effect_id, outcome, settled_at)
       values ($1, 1, $2, $3, $3, 1, $4, 'test', gen_random_uuid(), 'failed', app_now())`,
      [chat.sessionId, rows[0]!.context_revision, rows[0]!.position, id],
    );
    expect(await releaseHeld()).toEqual({ released: 1 });
    await afterAnswer; // the Add returned, revalidated against the engine, and withdrew
    const row = await ledgerRow(id);
    expect(row.settled_at).toBeNull();
    expect(row.cleaned_at).not.toBeNull();
    expect(await typingOn(id)).toBe(0);
    const { calls } = await emu<{ calls: { route: string; status: number }[] }>('calls');
    expect(calls.some((c) => c.route === 'reactions.delete' && c.status === 200)).toBe(true);
  });

  it('every coalesced input of a delivered turn is settled in the terminal transaction and loses its badge', async () => {
    const chat = newChat(suite.app);
    const ids: string[] = [];
    for (const text of ['a', 'b', 'c']) {
      const { messageId, afterAnswer } = await sayAwaitable(chat, text);
      await afterAnswer; // the Add runs in the webhook's waitUntil
      ids.push(messageId);
    }
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
    await untilWithdrawn(chat, ids);
    expect(await Promise.all(ids.map(typingOn))).toEqual([0, 0, 0]);
  });
});
