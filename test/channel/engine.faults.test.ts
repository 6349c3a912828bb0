import { runDurableObjectAlarm } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { httpAgent, setAgentOverride } from '../../workers/agents';
import { registerProcess } from '../../workers/effects/processes';
import { effectRegistry } from '../../workers/effects/registry';
import { drainInstance } from '../../workers/effects/runner';
import { claimEffects, completeEffects } from '../../workers/effects/scheduler';
import { effectConfig } from '../../workers/effects/types';
import { ageHeartbeat } from '../effects/helpers';
import { runCron } from '../helpers/cron';
import { advanceDbClock } from '../helpers/db';
import { emu } from '../lark/helpers';
import {
  type Chat,
  engineSuite,
  fireDebounce,
  host,
  newChat,
  PAST_DEBOUNCE_MS,
  pump,
  repliesTo,
  say,
  stateOf,
  textOf,
  turns,
  untilSettled,
} from './helpers';

const suite = engineSuite();
const { pool } = suite;

/** An agent that never answers: only its timeout (or the effect's budget) ends the call. */
const silentAgent = httpAgent({
  url: 'http://agent.invalid/reply',
  timeoutMs: 50,
  signingSecret: 'test-agent-signing-secret-0123456789',
  fetch: (_input, init) =>
    new Promise<Response>((_resolve, reject) =>
      init?.signal?.addEventListener('abort', () => reject(init.signal!.reason)),
    ),
});

/** Flushes the debounce without running the reply, so a test can play the doomed worker. */
async function flushOnly(chat: Chat) {
  await advanceDbClock(pool, PAST_DEBOUNCE_MS);
  await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
  const s = await stateOf(pool, chat);
  expect(s.turn).not.toBeNull();
  return s.turn!;
}

/** A process claims the reply, optionally runs it (posting to Lark), then dies silently. */
async function doomedWorkerRuns(chat: Chat, opts: { deliver: boolean }) {
  const dead = await registerProcess(pool, 'doomed-worker');
  const [claimed] = await claimEffects(pool, dead, { limit: 10, instanceId: chat.sessionId });
  expect(claimed?.kind).toBe('channel.reply');
  if (opts.deliver)
    await effectRegistry.executor('channel.reply')!.run(
      {
        id: claimed!.id,
        kind: claimed!.kind,
        args: claimed!.args,
        attempts: claimed!.attempts,
        instanceId: chat.sessionId,
      },
      AbortSignal.timeout(10_000),
    );
  await ageHeartbeat(pool, dead, 31_000);
  return { claimed: claimed!, dead };
}

/**
 * The minute cron, then the chat's host alarm it scheduled: the cron's wake-up only schedules
 * the host's pump (ActorHost.schedule), and test alarms run when a test runs them.
 */
const minuteCron = async (chat: Chat) => {
  await runCron('* * * * *');
  await runDurableObjectAlarm(host(chat));
};

describe('conversation turns under faults', { timeout: 40_000 }, () => {
  it('the agent timing out fails each generation; after the last the turn settles failed, with no reply', async () => {
    setAgentOverride(silentAgent);
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'will the agent answer?');
    await pump(chat);
    await fireDebounce(pool, chat);
    const turn = await untilSettled(pool, chat, 1, 5000);
    expect(turn).toMatchObject({ outcome: 'failed', generation: 3, reply_message_id: null });
    expect(await repliesTo(anchor)).toEqual([]);
    const { rows } = await pool.query<{ status: string; last_error: string }>(
      `select status, last_error from effects where origin_instance_id = $1 and kind = 'channel.reply'`,
      [chat.sessionId],
    );
    expect(rows).toHaveLength(3);
    for (const r of rows) {
      expect(r.status).toBe('dead');
      expect(r.last_error).toMatch(/agent did not answer within 50 ms/);
    }
    expect((await stateOf(pool, chat)).turn).toBeNull();

    // The conversation is not stuck: the next message gets its reply.
    setAgentOverride(null);
    const next = await say(chat, 'and now?');
    await pump(chat);
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 2)).toMatchObject({ outcome: 'delivered' });
    expect((await repliesTo(next)).map(textOf)).toEqual(['echo: and now?']);
  });

  it('the worker dying after delivery but before completion: recovery, a replacement generation, no second post (uuid)', async () => {
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'reply once please');
    await pump(chat);
    const running = await flushOnly(chat);
    const { claimed, dead } = await doomedWorkerRuns(chat, { deliver: true });
    const posted = await repliesTo(anchor);
    expect(posted).toHaveLength(1);
    expect((posted[0] as unknown as { reply_uuid: string }).reply_uuid).toBe(running.deliveryKey);
    expect(running.deliveryKey).toBe(claimed.id);

    await minuteCron(chat); // retires the effect, puts effect:<id>:recovery in the mailbox, wakes the host
    const turn = await untilSettled(pool, chat, 1);
    expect(turn).toMatchObject({ outcome: 'delivered', generation: 2, delivery_key: claimed.id });
    expect(turn.reply_message_id).toBe(posted[0]!.message_id);
    expect(await repliesTo(anchor)).toHaveLength(1);
    const { rows } = await pool.query<{ retired_at_ms: string | null }>(
      'select retired_at_ms from effect_recoveries where effect_id = $1',
      [claimed.id],
    );
    expect(rows[0]!.retired_at_ms).not.toBeNull();

    // The doomed worker's late completion is refused: its claim was retired.
    const late = await completeEffects(pool, dead, [
      { id: claimed.id, result: { outcome: 'delivered', replyMessageId: posted[0]!.message_id } },
    ]);
    expect(late).toEqual({ accepted: [], rejected: [claimed.id] });
    expect(await turns(pool, chat)).toHaveLength(1);
  });

  it("a replacement generation later than Lark's one-hour uuid dedup does not post again: the turn fails visibly", async () => {
    // Found by the chaos run (seed 1000): the reply applied at Lark, the runtime restarted
    // under it, and recovery ran after a clock jump past the dedup window: a second reply.
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'reply once, even after an outage');
    await pump(chat);
    await flushOnly(chat);
    await doomedWorkerRuns(chat, { deliver: true });
    expect(await repliesTo(anchor)).toHaveLength(1);
    // The outage: neither the minute cron nor anything else runs for two hours (Lark's clock too).
    await advanceDbClock(pool, 2 * 3_600_000);
    await emu('clock', { advanceMs: 2 * 3_600_000 });
    try {
      await minuteCron(chat);
      expect(await untilSettled(pool, chat, 1)).toMatchObject({ outcome: 'failed', generation: 2 });
      expect(await repliesTo(anchor)).toHaveLength(1);
    } finally {
      // The file's later tests sign webhook deliveries on the Worker's clock: put both back.
      await advanceDbClock(pool, -2 * 3_600_000);
      await emu('clock', { advanceMs: -2 * 3_600_000 });
    }
  });

  it("a Lark user's message gets a reply exactly once even when a worker dies mid-turn before posting", async () => {
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'are you there?');
    await pump(chat);
    await flushOnly(chat);
    await doomedWorkerRuns(chat, { deliver: false });
    expect(await repliesTo(anchor)).toEqual([]);
    await minuteCron(chat);
    expect(await untilSettled(pool, chat, 1)).toMatchObject({ outcome: 'delivered', generation: 2 });
    expect((await repliesTo(anchor)).map(textOf)).toEqual(['echo: are you there?']);
  });

  it('a reply applied by Lark whose response was lost is retried under the same uuid and posted once', async () => {
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'lossy network');
    await pump(chat);
    await emu('faults', { route: 'reply', kind: 'lost_response', times: 1 });
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 1)).toMatchObject({ outcome: 'delivered', generation: 2 });
    expect(await repliesTo(anchor)).toHaveLength(1);
  });

  it('a recalled anchor settles the turn as anchor_gone without retrying', async () => {
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'never mind');
    await pump(chat);
    await emu(`messages/${anchor}/recall`, {});
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 1)).toMatchObject({ outcome: 'anchor_gone', generation: 1 });
  });
});
