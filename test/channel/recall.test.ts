import { abortAllDurableObjects, runDurableObjectAlarm } from 'cloudflare:test';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Agent, setAgentOverride } from '../../workers/agents';
import { REPLY_DELETE_KIND } from '../../workers/channel/reply-deletion';
import { registerProcess } from '../../workers/effects/processes';
import { effectRegistry } from '../../workers/effects/registry';
import { drainInstance, runClaimedEffects } from '../../workers/effects/runner';
import { effectConfig } from '../../workers/effects/types';
import { advanceDbClock, blockedBehindAll } from '../helpers/db';
import { buildEvent, emu, emuCards, releaseHeld, type TestApp, untilHeld } from '../lark/helpers';
import {
  type Chat,
  engineSuite,
  fireDebounce,
  host,
  newChat,
  PAST_DEBOUNCE_MS,
  pump,
  repliesTo,
  sayAwaitable,
  submitAwaitable,
  textOf,
  turns,
  typingOn,
  untilSettled,
} from './helpers';
import { callsAbout, ledgerRows, setSettings } from './settings-helpers';

const suite = engineSuite();
const { pool } = suite;

/** A user's recall as Lark delivers it (emulator `type: recall`), through the Worker; its answer. */
async function recall(
  app: TestApp,
  spec: { message_id: string; chat_id?: string; event_id?: string; shape?: 'nested'; withdraw?: false },
): Promise<{ body: Record<string, unknown>; afterAnswer: Promise<void> }> {
  const built = await buildEvent(app, { type: 'recall', ...spec });
  return submitAwaitable(app, built.request);
}

/** A user message in the chat, its badge on once the webhook's after-answer work is done. */
async function badgedMessage(chat: Chat, text: string): Promise<string> {
  const sent = await sayAwaitable(chat, text);
  await sent.afterAnswer;
  await pump(chat);
  expect(await typingOn(sent.messageId)).toBe(1);
  return sent.messageId;
}

async function recalledRows(app: TestApp) {
  const { rows } = await pool.query<{
    message_id: string;
    chat_id: string | null;
    recall_type: string | null;
  }>(
    `select message_id, chat_id, recall_type from channel_recalled_messages where installation_id = $1
      order by recorded_at, message_id limit 100`,
    [app.installationId],
  );
  return rows;
}

async function deletions(chat: Chat) {
  const { rows } = await pool.query<{ turn_no: number; outcome: string | null; attempts: number }>(
    `select turn_no, outcome, attempts from channel_reply_deletions where session_id = $1 order by turn_no`,
    [chat.sessionId],
  );
  return rows;
}

/** Counts the agent's calls; answers like the echo agent. */
function countingAgent(): Agent & { calls: number } {
  const a = {
    name: 'counting',
    calls: 0,
    reply: async (turn: { inputs: { text: string }[] }) => {
      a.calls++;
      return { text: `echo: ${turn.inputs.map((i) => i.text).join(' ')}` };
    },
  };
  return a as unknown as Agent & { calls: number };
}

/** Runs the host (alarm + pump) until what it left due is done: the deletion effect, the settlement. */
async function drainHost(chat: Chat, rounds = 3) {
  for (let i = 0; i < rounds; i++) {
    await advanceDbClock(pool, 3000);
    await runDurableObjectAlarm(host(chat));
    await pump(chat);
  }
}

describe('recalled messages (issue 33 item 2)', { timeout: 40_000 }, () => {
  it('recall before the reply: the badge comes off at once, the turn ends recalled, no reply and no failure notice', async () => {
    await setSettings(suite.app, { failure_notice: 'reply' });
    const agent = countingAgent();
    setAgentOverride(agent);
    const chat = newChat(suite.app);
    const anchor = await badgedMessage(chat, 'never mind');

    const r = await recall(suite.app, { message_id: anchor });
    expect(r.body).toEqual({ ok: true, recalled: true });
    await r.afterAnswer;
    // At once: by the webhook's after-answer work, through the ledger's withdrawal (the
    // emulator, like Lark, answers that a recalled message's reaction is gone with it).
    expect((await callsAbout('reactions.delete', anchor)).map((c) => c.status)).toEqual([400]);
    const [row] = await pool
      .query<{ settled_by: string; settle_outcome: string; cleaned: boolean }>(
        `select settled_by, settle_outcome, cleaned_at is not null as cleaned
         from channel_typing_reaction where source_message_id = $1`,
        [anchor],
      )
      .then((q) => q.rows);
    expect(row).toEqual({ settled_by: 'recall', settle_outcome: 'recalled', cleaned: true });

    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 1)).toMatchObject({ outcome: 'recalled', reply_message_id: null });
    await drainHost(chat);
    expect(agent.calls).toBe(0);
    expect(await repliesTo(anchor)).toEqual([]);
    await setSettings(suite.app, { failure_notice: 'none' });
  });

  it('a recall while Lark holds the Add: the badge the Add then places comes off at once (its revalidation)', async () => {
    const chat = newChat(suite.app);
    await emu('faults', { route: 'reactions.create', kind: 'hold' });
    const sent = await sayAwaitable(chat, 'recalled mid-add');
    await untilHeld('reactions.create');
    // The recall settles the row while its Add is in flight: the withdrawal is left to the Add.
    // (`withdraw: false`: the message stays live at the emulator, so the held Add lands.)
    const r = await recall(suite.app, { message_id: sent.messageId, withdraw: false });
    await r.afterAnswer;
    expect(await callsAbout('reactions.delete', sent.messageId)).toEqual([]);
    expect(await releaseHeld()).toEqual({ released: 1 });
    await sent.afterAnswer;
    expect(await typingOn(sent.messageId)).toBe(0);
    expect((await callsAbout('reactions.delete', sent.messageId)).map((c) => c.status)).toEqual([200]);
    const { rows } = await pool.query<{ settled_by: string; cleaned: boolean }>(
      `select settled_by, cleaned_at is not null as cleaned from channel_typing_reaction
        where source_message_id = $1`,
      [sent.messageId],
    );
    expect(rows).toEqual([{ settled_by: 'recall', cleaned: true }]);
  });

  it('a recall that commits while the message’s accept statement waits (its snapshot older than the recall): the Add comes off by its revalidation', async () => {
    const chat = newChat(suite.app);
    await badgedMessage(chat, 'first');
    const m2 = await buildEvent(suite.app, {
      message: { text: 'second', chat_id: chat.chatId, chat_type: 'group' },
    });
    const m2Id = m2.message_id!;
    const holder = await pool.connect();
    let accepting: ReturnType<typeof submitAwaitable>;
    try {
      await holder.query('begin');
      const pid = (await holder.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
      await holder.query('select 1 from channel_conversations where id = $1 for update', [chat.sessionId]);
      // The accept statement takes its snapshot, then waits on the conversation row.
      accepting = submitAwaitable(suite.app, m2.request);
      await blockedBehindAll(pool, pid, 1);
      const r = await recall(suite.app, { message_id: m2Id, withdraw: false });
      expect(r.body).toEqual({ ok: true, recalled: true });
      await r.afterAnswer;
    } finally {
      await holder.query('commit');
      holder.release();
    }
    const accepted = await accepting!;
    // Its snapshot did not see the recall: recorded as answered, registered, Add sent...
    expect(accepted.body).toEqual({ ok: true });
    await accepted.afterAnswer;
    // ...and withdrawn by the Add's revalidation, which reads the recall (liveness.ts).
    expect(await callsAbout('reactions.create', m2Id)).toHaveLength(1);
    expect(await typingOn(m2Id)).toBe(0);
  });

  it('a turn with one input recalled of two still answers (the other one)', async () => {
    const chat = newChat(suite.app);
    const first = await badgedMessage(chat, 'first');
    const second = await badgedMessage(chat, 'second');
    await (await recall(suite.app, { message_id: first })).afterAnswer;
    expect(await callsAbout('reactions.delete', first)).toHaveLength(1);
    expect(await callsAbout('reactions.delete', second)).toEqual([]);
    expect(await typingOn(second)).toBe(1);
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 1)).toMatchObject({ outcome: 'delivered' });
    // The agent is not shown the recalled input.
    expect((await repliesTo(second)).map(textOf)).toEqual(['echo: second']);
  });

  it('recall after the reply: the reply stays under recall_reply off', async () => {
    const chat = newChat(suite.app);
    const anchor = await badgedMessage(chat, 'keep the answer');
    await fireDebounce(pool, chat);
    const turn = await untilSettled(pool, chat, 1);
    expect(turn.outcome).toBe('delivered');
    await (await recall(suite.app, { message_id: anchor })).afterAnswer;
    await drainHost(chat);
    const replies = await repliesTo(anchor);
    expect(replies.map(textOf)).toEqual(['echo: keep the answer']);
    expect(await callsAbout('messages.delete', turn.reply_message_id!)).toEqual([]);
    expect(await deletions(chat)).toEqual([]);
  });

  it('recall after the reply under recall_reply on: the reply is deleted exactly once, also after a lost answer', async () => {
    await setSettings(suite.app, { recall_reply: 'on' });
    try {
      const chat = newChat(suite.app);
      const anchor = await badgedMessage(chat, 'take it back');
      await fireDebounce(pool, chat);
      const turn = await untilSettled(pool, chat, 1);
      expect(turn.outcome).toBe('delivered');
      const replyId = turn.reply_message_id!;

      // The delete lands at Lark and its answer is lost: the run fails; the retry meets "withdrawn".
      await emu('faults', { route: 'messages.delete', kind: 'lost_response', times: 1 });
      await (await recall(suite.app, { message_id: anchor })).afterAnswer;
      await drainHost(chat, 4);
      const calls = await callsAbout('messages.delete', replyId);
      expect(calls.map((c) => c.status)).toEqual(['dropped', 400]);
      const reply = await emu<{ message: { recalled: boolean; deleted_by?: string } }>(`messages/${replyId}`);
      expect(reply.message).toMatchObject({ recalled: true, deleted_by: suite.app.appId });
      // One run: the client sent the delete again after the lost answer (its one retry of a
      // dropped connection), and Lark said the message was gone already.
      expect(await deletions(chat)).toEqual([{ turn_no: 1, outcome: 'already_gone', attempts: 1 }]);

      // A duplicate of the recall (another event id, same message) decides nothing more.
      expect((await recall(suite.app, { message_id: anchor })).body).toEqual({ ok: true, duplicate: true });
      await drainHost(chat);
      expect(await callsAbout('messages.delete', replyId)).toHaveLength(2);
    } finally {
      await setSettings(suite.app, { recall_reply: 'off' });
    }
  });

  it('recall_reply on, plain run: one delete, recorded deleted', async () => {
    await setSettings(suite.app, { recall_reply: 'on' });
    try {
      const chat = newChat(suite.app);
      const anchor = await badgedMessage(chat, 'gone soon');
      await fireDebounce(pool, chat);
      const turn = await untilSettled(pool, chat, 1);
      await (await recall(suite.app, { message_id: anchor, shape: 'nested' })).afterAnswer;
      await drainHost(chat);
      expect((await callsAbout('messages.delete', turn.reply_message_id!)).map((c) => c.status)).toEqual([
        200,
      ]);
      expect(await deletions(chat)).toEqual([{ turn_no: 1, outcome: 'deleted', attempts: 1 }]);
    } finally {
      await setSettings(suite.app, { recall_reply: 'off' });
    }
  });

  it('recall_reply on, the host dies mid-delete (Lark applies it, nobody hears the answer): recovered, deleted once', async () => {
    await setSettings(suite.app, { recall_reply: 'on' });
    try {
      const chat = newChat(suite.app);
      const anchor = await badgedMessage(chat, 'crash while deleting');
      await fireDebounce(pool, chat);
      const turn = await untilSettled(pool, chat, 1);
      const replyId = turn.reply_message_id!;
      // The delete reaches Lark and waits there unanswered while every object restarts.
      await emu('faults', { route: 'messages.delete', kind: 'hold' });
      const r = await recall(suite.app, { message_id: anchor });
      const answered = r.afterAnswer.catch((err: unknown) => err);
      await untilHeld('messages.delete');
      await abortAllDurableObjects();
      await answered;
      // Lark applies it after all; nobody is left to hear the answer.
      expect(await releaseHeld()).toEqual({ released: 1 });
      expect(await deletions(chat)).toEqual([{ turn_no: 1, outcome: null, attempts: 1 }]);

      // The restarted host takes the delete over: Lark says the message is gone already.
      await drainHost(chat, 4);
      const calls = await callsAbout('messages.delete', replyId);
      expect(calls.map((c) => c.status)).toEqual([200, 400]);
      expect(await deletions(chat)).toEqual([{ turn_no: 1, outcome: 'already_gone', attempts: 2 }]);
      const { rows } = await pool.query<{ status: string }>(
        'select status from effects where origin_instance_id = $1 and kind = $2',
        [chat.sessionId, REPLY_DELETE_KIND],
      );
      expect(rows).toEqual([{ status: 'completed' }]);
    } finally {
      await setSettings(suite.app, { recall_reply: 'off' });
    }
  });

  it('recall_reply on: a 429 and a 5xx on the delete are retried (the effect retries); then one delete, recorded', async () => {
    await setSettings(suite.app, { recall_reply: 'on' });
    try {
      const chat = newChat(suite.app);
      const anchor = await badgedMessage(chat, 'busy lark');
      await fireDebounce(pool, chat);
      const turn = await untilSettled(pool, chat, 1);
      const replyId = turn.reply_message_id!;
      await emu('faults', { route: 'messages.delete', kind: '429', resetSeconds: 2, times: 1 });
      await emu('faults', { route: 'messages.delete', kind: '5xx', status: 502, times: 1 });
      await (await recall(suite.app, { message_id: anchor })).afterAnswer;
      await drainHost(chat, 6);
      expect((await callsAbout('messages.delete', replyId)).map((c) => c.status)).toEqual([429, 502, 200]);
      expect(await deletions(chat)).toEqual([{ turn_no: 1, outcome: 'deleted', attempts: 3 }]);
    } finally {
      await setSettings(suite.app, { recall_reply: 'off' });
      // The 429's hold was recorded in database time ahead of the clock the next test starts at.
      await pool.query('delete from lark_rate_limits where app_id = $1', [suite.app.appId]);
    }
  });

  it('card_stream under recall_reply on: a recall after the card was sent deletes the card message once', async () => {
    await setSettings(suite.app, { reply_mode: 'card_stream', recall_reply: 'on' });
    try {
      const chat = newChat(suite.app);
      const anchor = await badgedMessage(chat, 'stream then recall');
      await fireDebounce(pool, chat);
      const turn = await untilSettled(pool, chat, 1);
      expect(turn.outcome).toBe('delivered');
      const cardMessage = turn.reply_message_id!;
      await (await recall(suite.app, { message_id: anchor })).afterAnswer;
      await drainHost(chat);
      expect((await callsAbout('messages.delete', cardMessage)).map((c) => c.status)).toEqual([200]);
      expect(await deletions(chat)).toEqual([{ turn_no: 1, outcome: 'deleted', attempts: 1 }]);
    } finally {
      await setSettings(suite.app, { reply_mode: 'text', recall_reply: 'off' });
    }
  });

  it('card_stream: every input recalled before the run: no card at all, the turn ends recalled', async () => {
    await setSettings(suite.app, { reply_mode: 'card_stream' });
    try {
      const chat = newChat(suite.app);
      const anchor = await badgedMessage(chat, 'no card please');
      await (await recall(suite.app, { message_id: anchor })).afterAnswer;
      await fireDebounce(pool, chat);
      expect(await untilSettled(pool, chat, 1)).toMatchObject({ outcome: 'recalled' });
      expect(await emuCards({ message_id: anchor })).toEqual([]);
      expect(await callsAbout('reply', anchor)).toEqual([]);
    } finally {
      await setSettings(suite.app, { reply_mode: 'text' });
    }
  });

  it('duplicate recall events: the same event twice, and a second event for the same message, record one recall', async () => {
    const chat = newChat(suite.app);
    const anchor = await badgedMessage(chat, 'twice');
    const built = await buildEvent(suite.app, { type: 'recall', message_id: anchor });
    const first = await submitAwaitable(suite.app, built.request);
    await first.afterAnswer;
    expect(first.body).toEqual({ ok: true, recalled: true });
    const again = await submitAwaitable(suite.app, built.request);
    expect(again.body).toEqual({ ok: true, duplicate: true });
    const other = await recall(suite.app, { message_id: anchor });
    expect(other.body).toEqual({ ok: true, duplicate: true });
    await other.afterAnswer;
    expect((await recalledRows(suite.app)).filter((r) => r.message_id === anchor)).toHaveLength(1);
    expect(await callsAbout('reactions.delete', anchor)).toHaveLength(1);
  });

  it('recall of an unknown message: acknowledged and recorded, nothing else', async () => {
    const messageId = `om_unknown${Date.now()}`;
    const r = await recall(suite.app, { message_id: messageId, chat_id: 'oc_nowhere' });
    expect(r.body).toEqual({ ok: true, recalled: true });
    await r.afterAnswer;
    expect((await recalledRows(suite.app)).filter((x) => x.message_id === messageId)).toEqual([
      { message_id: messageId, chat_id: 'oc_nowhere', recall_type: 'message_owner' },
    ]);
  });

  it('recall before the message arrives: the message is recorded, never answered, never badged', async () => {
    const chat = newChat(suite.app);
    const msg = await emu<{ message_id: string }>('messages', {
      chat_id: chat.chatId,
      chat_type: 'group',
      text: 'out of order',
    });
    await (await recall(suite.app, { message_id: msg.message_id })).afterAnswer;
    const built = await buildEvent(suite.app, { message_id: msg.message_id });
    const { body, afterAnswer } = await submitAwaitable(suite.app, built.request);
    expect(body).toEqual({ ok: true, unanswered: 'recalled' });
    await afterAnswer;
    expect(await ledgerRows(pool, msg.message_id)).toEqual([]);
    expect(await callsAbout('reactions.create', msg.message_id)).toEqual([]);
    await advanceDbClock(pool, PAST_DEBOUNCE_MS);
    await runDurableObjectAlarm(host(chat));
    expect(await turns(pool, chat)).toEqual([]);
    const { rows } = await pool.query<{ unanswered: string }>(
      'select unanswered from lark_inbound_messages where message_id = $1',
      [msg.message_id],
    );
    expect(rows).toEqual([{ unanswered: 'recalled' }]);
  });

  describe('a recall racing the reply (the turn row lock decides)', () => {
    let runner = '';
    beforeAll(async () => {
      runner = await registerProcess(pool, 'recall-race-runner');
    });

    /**
     * An agent that answers when the test lets it. The turn's reply runs in the test's own
     * context here (runClaimedEffects, as failure-notice.test.ts does), so the agent can wait
     * on a promise of the test's.
     */
    function gatedAgent() {
      let release!: () => void;
      let asked!: () => void;
      const wasAsked = new Promise<void>((r) => {
        asked = r;
      });
      const gate = new Promise<void>((r) => {
        release = r;
      });
      const agent: Agent = {
        name: 'gated',
        reply: async (turn) => {
          asked();
          await gate;
          return { text: `echo: ${turn.inputs.map((i) => i.text).join(' ')}` };
        },
      };
      return { agent, wasAsked, release };
    }

    /** The turn starts (its row committed) and its reply run is at the agent; returns the run. */
    async function turnAtAgent(chat: Chat, gated: ReturnType<typeof gatedAgent>) {
      setAgentOverride(gated.agent);
      await advanceDbClock(pool, PAST_DEBOUNCE_MS);
      await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
      expect(await turns(pool, chat)).toHaveLength(1);
      const run = runClaimedEffects(pool, effectRegistry, runner, { limit: 10, instanceId: chat.sessionId });
      await gated.wasAsked;
      // Wrapped: an async function's result is awaited, and the run must not be yet.
      return { run };
    }

    /** The run's completion reaches the conversation, which settles the turn. */
    async function settleRun(chat: Chat, run: Promise<unknown>) {
      await run;
      setAgentOverride(null);
      await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
      return (await turns(pool, chat))[0]!;
    }

    it('a recall that commits while the post claim waits for the turn row stops the reply', async () => {
      const chat = newChat(suite.app);
      const anchor = await badgedMessage(chat, 'race me');
      const gated = gatedAgent();
      const { run } = await turnAtAgent(chat, gated);
      const holder = await pool.connect();
      try {
        await holder.query('begin');
        const pid = (await holder.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
        await holder.query('select 1 from channel_turns where session_id = $1 and turn_no = 1 for update', [
          chat.sessionId,
        ]);
        gated.release();
        // The agent answered; the post claim waits for the turn row.
        await blockedBehindAll(pool, pid, 1);
        const r = await recall(suite.app, { message_id: anchor });
        expect(r.body).toEqual({ ok: true, recalled: true });
        await r.afterAnswer;
      } finally {
        await holder.query('commit');
        holder.release();
      }
      expect(await settleRun(chat, run)).toMatchObject({ outcome: 'recalled', reply_message_id: null });
      expect(await repliesTo(anchor)).toEqual([]);
    });

    it('the newest input recalled while the agent answers: the reply goes to the newest input left, delivered', async () => {
      const chat = newChat(suite.app);
      const older = await badgedMessage(chat, 'first part');
      const newest = await badgedMessage(chat, 'second part');
      const gated = gatedAgent();
      const { run } = await turnAtAgent(chat, gated);
      expect((await turns(pool, chat))[0]).toMatchObject({ input_count: 2, anchor_message_id: newest });
      const r = await recall(suite.app, { message_id: newest });
      expect(r.body).toEqual({ ok: true, recalled: true });
      await r.afterAnswer;
      gated.release();
      const turn = await settleRun(chat, run);
      // Lark refuses a reply to a withdrawn message (230011): the post goes to the older input,
      // and the turn row says where it went.
      expect(turn).toMatchObject({ outcome: 'delivered', anchor_message_id: older });
      expect(await repliesTo(newest)).toEqual([]);
      const replies = await repliesTo(older);
      expect(replies.map((x) => x.message_id)).toEqual([turn.reply_message_id]);
      expect(replies.map(textOf)).toEqual(['echo: first part second part']);
    });

    it('a recall held back until the post is claimed comes after it: the reply stays', async () => {
      const chat = newChat(suite.app);
      const anchor = await badgedMessage(chat, 'too late');
      const gated = gatedAgent();
      const { run } = await turnAtAgent(chat, gated);
      // The recall's insert waits on the test's uncommitted row for the same message.
      const holder = await pool.connect();
      let recalled: Promise<{ body: Record<string, unknown>; afterAnswer: Promise<void> }>;
      try {
        await holder.query('begin');
        const pid = (await holder.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
        await holder.query(
          `insert into channel_recalled_messages (installation_id, message_id, event_id)
           values ($1, $2, 'test-hold')`,
          [suite.app.installationId, anchor],
        );
        // Lark withdraws the message as it sends the event; here the post is to go first, so the
        // emulator keeps it until the reply is posted.
        recalled = recall(suite.app, { message_id: anchor, withdraw: false });
        await blockedBehindAll(pool, pid, 1);
        gated.release();
        // The reply is posted while the recall waits.
        await run;
      } finally {
        await holder.query('rollback');
        holder.release();
      }
      const r = await recalled!;
      expect(r.body).toEqual({ ok: true, recalled: true });
      await r.afterAnswer;
      expect(await settleRun(chat, run)).toMatchObject({ outcome: 'delivered' });
      expect((await repliesTo(anchor)).map(textOf)).toEqual(['echo: too late']);
    });
  });
});
