import type { PoolClient } from '@neondatabase/serverless';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runExpiration } from '../../workers/typing-ledger/passes/expire';
import { advanceDbClock, backendPid, blockedBehindAll, setDbClockOffset, testPool, uid } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { buildEvent, emu, installApp, type TestApp } from '../lark/helpers';
import { newChat, submitAwaitable } from './helpers';

/**
 * The per-workspace quota of 1,000 pending slots, end to end through the webhook (spec "Retry
 * and retention limits"; the unique partial index channel_typing_reaction_quota arbitrates).
 * Events are signed by the emulator and submitted to the Worker's handler; Add calls are
 * counted in the emulator's call log.
 */
const pool = testPool(6);
const logs = captureLogLines();
let a: TestApp;
let b: TestApp;
const workspaceOf = new Map<TestApp, string>();

beforeAll(async () => {
  [a, b] = [await installApp(), await installApp()];
  for (const app of [a, b]) {
    const { rows } = await pool.query<{ workspace_id: string }>(
      'select workspace_id from lark_installations where id = $1',
      [app.installationId],
    );
    workspaceOf.set(app, rows[0]!.workspace_id);
  }
}, 60_000);
afterEach(async () => {
  await emu('faults', undefined, 'DELETE');
  await setDbClockOffset(pool, 0);
});
afterAll(async () => {
  logs.restore();
  await pool.end();
});

/**
 * Fills every slot of the app's workspace except `free` with pending rows (taskless false,
 * Add recorded, so no pass touches them). `expiringSlot`, when given, is a row registered
 * seven days minus one hour ago: the first slot the lifetime expiry frees.
 */
async function fillSlots(app: TestApp, free: number[], expiringSlot?: number) {
  await pool.query(
    `insert into channel_typing_reaction (id, workspace_id, installation_id, app_id, session_id,
       source_message_id, input_position, context_revision, quota_slot, add_state, taskless,
       created_at, expires_at)
     select 'fill_' || $1 || s, $2, $3, $4, 'fill_' || $1, 'om_fill_' || $1 || s, s, 0, s, 'added', false,
            case when s = $6 then app_now() - interval '7 days' + interval '1 hour' else app_now() end,
            case when s = $6 then app_now() + interval '1 hour' else app_now() + interval '7 days' end
     from generate_series(1, 1000) s where s <> all($5::int[])`,
    [uid('f'), workspaceOf.get(app), app.installationId, app.appId, free, expiringSlot ?? 0],
  );
}

const pending = async (app: TestApp) =>
  (
    await pool.query<{ n: number }>(
      `select count(*)::int as n from channel_typing_reaction
        where workspace_id = $1 and cleaned_at is null and abandoned_at is null`,
      [workspaceOf.get(app)],
    )
  ).rows[0]!.n;

interface Call {
  route: string;
  messageId?: string;
  status: number | 'dropped';
}
/** Add calls the emulator received for these messages. */
async function addCalls(messageIds: string[]): Promise<Call[]> {
  const { calls } = await emu<{ calls: Call[] }>('calls?route=reactions.create');
  return calls.filter((c) => c.messageId && messageIds.includes(c.messageId));
}

async function ledgerRows(messageIds: string[]) {
  const { rows } = await pool.query<{ source_message_id: string; quota_slot: number; workspace_id: string }>(
    `select source_message_id, quota_slot, workspace_id from channel_typing_reaction
      where source_message_id = any($1::text[])`,
    [messageIds],
  );
  return rows;
}

const typingOn = async (messageId: string, appId: string) =>
  (
    await emu<{ items: { operator: { operator_id: string }; reaction_type: { emoji_type: string } }[] }>(
      `messages/${messageId}/reactions`,
    )
  ).items.filter((r) => r.reaction_type.emoji_type === 'Typing' && r.operator.operator_id === appId).length;

/** An event for a new message in a new chat of `app`, built and signed by the emulator. */
async function event(app: TestApp, text: string) {
  const built = await buildEvent(app, {
    message: { text, chat_id: newChat(app).chatId, chat_type: 'group' },
  });
  return { messageId: built.message_id!, request: built.request };
}

describe('the quota race through the webhook', { timeout: 60_000 }, () => {
  it('999 slots taken, 8 events racing for the last one: exactly 1,000 pending rows and ONE Add; every input is recorded; another workspace still gets its badge meanwhile', async () => {
    const FREE = 777;
    await fillSlots(a, [FREE]);
    expect(await pending(a)).toBe(999);
    const racers = await Promise.all(Array.from({ length: 8 }, (_, i) => event(a, `race ${i}`)));
    const other = await event(b, 'other workspace');
    const skippedBefore = logs.events('typing_add_skipped').length;

    // Force the overlap: an uncommitted registration holds the last free slot, so every
    // racer's statement picks that slot and queues on the quota index behind it.
    const holder: PoolClient = await pool.connect();
    let answers: { afterAnswer: Promise<void> }[];
    try {
      await holder.query('begin');
      await holder.query(
        `insert into channel_typing_reaction (id, workspace_id, installation_id, app_id, session_id,
           source_message_id, input_position, context_revision, quota_slot, expires_at)
         values ($1, $2, $3, $4, 'holder', $1, 1, 0, $5, app_now() + interval '7 days')`,
        [uid('holder'), workspaceOf.get(a), a.installationId, a.appId, FREE],
      );
      const holderPid = await backendPid(holder);
      const answering = racers.map((r) => submitAwaitable(a, r.request));
      const blocked = await blockedBehindAll(pool, holderPid, 8);
      expect(blocked).toHaveLength(8);

      // Workspace B has its own slots: its event is answered and registered while A's queue waits.
      await (await submitAwaitable(b, other.request)).afterAnswer;
      expect(await ledgerRows([other.messageId])).toEqual([
        expect.objectContaining({ workspace_id: workspaceOf.get(b) }),
      ]);
      expect(await addCalls([other.messageId])).toEqual([expect.objectContaining({ status: 200 })]);
      expect(await typingOn(other.messageId, b.appId)).toBe(1);
      expect(await blockedBehindAll(pool, holderPid, 8)).toHaveLength(8);

      await holder.query('rollback');
      answers = await Promise.all(answering);
    } finally {
      await holder.query('rollback').catch(() => undefined);
      holder.release();
    }
    await Promise.all(answers.map((x) => x.afterAnswer)); // every Add that was sent has returned

    const ids = racers.map((r) => r.messageId);
    expect(await pending(a)).toBe(1000);
    const won = await ledgerRows(ids);
    expect(won).toEqual([expect.objectContaining({ quota_slot: FREE, workspace_id: workspaceOf.get(a) })]);
    const adds = await addCalls(ids);
    expect(adds).toEqual([expect.objectContaining({ messageId: won[0]!.source_message_id, status: 200 })]);
    expect(await typingOn(won[0]!.source_message_id, a.appId)).toBe(1);

    // The losers' inputs are recorded and queued all the same: the skip is cosmetic.
    const { rows: inputs } = await pool.query<{ n: number }>(
      `select count(*)::int as n from lark_inbound_messages m
         join actor_mailbox q on q.instance_id = m.session_id and q.message_key = 'in:' || m.position
        where m.message_id = any($1::text[])`,
      [ids],
    );
    expect(inputs[0]!.n).toBe(8);
    const skipped = logs.events('typing_add_skipped').slice(skippedBefore);
    expect(skipped).toHaveLength(7);
    for (const s of skipped)
      expect(s).toMatchObject({
        workspaceId: workspaceOf.get(a),
        installationId: a.installationId,
        reason: 'contended',
      });
  });

  it('a full workspace skips the Add; once a row passes its lifetime the expiry pass frees its slot and the next event takes exactly that slot', async () => {
    const app = await installApp();
    const { rows } = await pool.query<{ workspace_id: string }>(
      'select workspace_id from lark_installations where id = $1',
      [app.installationId],
    );
    workspaceOf.set(app, rows[0]!.workspace_id);
    const EXPIRING = 321;
    await fillSlots(app, [], EXPIRING);
    expect(await pending(app)).toBe(1000);

    const full = await event(app, 'no room');
    await (await submitAwaitable(app, full.request)).afterAnswer;
    expect(await ledgerRows([full.messageId])).toEqual([]);
    expect(await addCalls([full.messageId])).toEqual([]);
    expect(logs.events('typing_add_skipped').at(-1)).toMatchObject({
      installationId: app.installationId,
      reason: 'quota_full',
    });

    // Past the expiring row's seven-day lifetime: the expiry pass abandons it and frees its slot.
    await advanceDbClock(pool, 3_600_000 + 60_000);
    const report = await runExpiration(pool, { scope: { workspaceIds: [workspaceOf.get(app)!] } });
    expect(report.expired).toBe(1);
    expect(await pending(app)).toBe(999);

    const next = await event(app, 'room again');
    await (await submitAwaitable(app, next.request)).afterAnswer;
    expect(await ledgerRows([next.messageId])).toEqual([expect.objectContaining({ quota_slot: EXPIRING })]);
    expect(await addCalls([next.messageId])).toEqual([expect.objectContaining({ status: 200 })]);
    expect(await typingOn(next.messageId, app.appId)).toBe(1);
    expect(await pending(app)).toBe(1000);

    // And the workspace is full again.
    const after = await event(app, 'full again');
    await (await submitAwaitable(app, after.request)).afterAnswer;
    expect(await ledgerRows([after.messageId])).toEqual([]);
    expect(await addCalls([after.messageId])).toEqual([]);
  });
});
