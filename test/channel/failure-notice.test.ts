import { runDurableObjectAlarm } from 'cloudflare:test';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Agent, setAgentOverride } from '../../workers/agents';
import { FAILURE_EMOJI, noticeUuid } from '../../workers/channel/failure-notice';
import { notice } from '../../workers/channel/notices';
import { FAILURE_NOTICE_KIND } from '../../workers/channel/types';
import { registerProcess } from '../../workers/effects/processes';
import { effectRegistry } from '../../workers/effects/registry';
import { drainInstance, runClaimedEffects } from '../../workers/effects/runner';
import { claimEffects } from '../../workers/effects/scheduler';
import { effectConfig } from '../../workers/effects/types';
import { ageHeartbeat } from '../effects/helpers';
import { runCron } from '../helpers/cron';
import { advanceDbClock } from '../helpers/db';
import { admin, buildEvent, emu } from '../lark/helpers';
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
  submitAwaitable,
  textOf,
  turns,
  untilSettled,
} from './helpers';

const suite = engineSuite();
const { pool } = suite;

/** An agent that is down: every generation fails at once. */
const brokenAgent: Agent = {
  name: 'broken',
  reply: () => Promise.reject(new Error('agent is down')),
};

const setNotice = async (value: 'none' | 'reaction' | 'reply') => {
  const res = await admin(`/${suite.app.installationId}/settings`, {
    method: 'PATCH',
    body: { operator: 'test', settings: { failure_notice: value } },
  });
  expect(res.status).toBe(200);
};

let runner = '';
beforeAll(async () => {
  runner = await registerProcess(pool, 'failure-notice-test-runner');
});

/**
 * The turn's generations run by the test (no host) until the turn fails; its settlement's
 * effects (the notice among them) are left pending, for a doomed worker to take.
 */
async function failTurnLeavingNotice(chat: Chat) {
  setAgentOverride(brokenAgent);
  await advanceDbClock(pool, PAST_DEBOUNCE_MS);
  for (let round = 0; round < 10; round++) {
    await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
    const turn = (await turns(pool, chat))[0];
    if (turn?.outcome) {
      setAgentOverride(null);
      return turn;
    }
    await runClaimedEffects(pool, effectRegistry, runner, { limit: 10, instanceId: chat.sessionId });
    await advanceDbClock(pool, 5000);
  }
  throw new Error('the turn did not fail');
}

/** A process claims the failure notice, runs it to the end (Lark answered), then dies before its write-back. */
async function doomedWorkerPostsNotice(chat: Chat) {
  const dead = await registerProcess(pool, 'doomed-worker');
  const claimed = await claimEffects(pool, dead, { limit: 10, instanceId: chat.sessionId });
  const mine = claimed.find((e) => e.kind === FAILURE_NOTICE_KIND);
  expect(mine).toBeDefined();
  const ran = await effectRegistry.executor(FAILURE_NOTICE_KIND)!.run(
    {
      id: mine!.id,
      kind: mine!.kind,
      args: mine!.args,
      attempts: mine!.attempts,
      instanceId: chat.sessionId,
    },
    AbortSignal.timeout(10_000),
  );
  await ageHeartbeat(pool, dead, 31_000);
  return ran;
}

/** The minute cron (releases a dead process's claims), then the host's pump runs what is due. */
async function recoverAndRun(chat: Chat) {
  await runCron('* * * * *');
  await runDurableObjectAlarm(host(chat));
  await pump(chat);
}

async function noticeEffects(chat: Chat) {
  const { rows } = await pool.query<{ status: string; attempts: number }>(
    `select status, attempts from effects where origin_instance_id = $1 and kind = $2`,
    [chat.sessionId, FAILURE_NOTICE_KIND],
  );
  return rows;
}

async function noticeRows(chat: Chat) {
  const { rows } = await pool.query(
    `select kind, add_attempts, reaction_id, reply_message_id, posted_at is not null as posted
       from channel_failure_notices where session_id = $1 order by turn_no`,
    [chat.sessionId],
  );
  return rows;
}

/** Reaction creates Lark received for a message with this emoji (answered or not). */
async function createsOf(messageId: string, emoji: string) {
  const { calls } = await emu<{ calls: { emojiType?: string }[] }>(
    `calls?route=reactions.create&message_id=${messageId}`,
  );
  return calls.filter((c) => c.emojiType === emoji).length;
}

async function ourFailureReactions(messageId: string) {
  const { items } = await emu<{
    items: { reaction_type: { emoji_type: string }; operator: { operator_id: string } }[];
  }>(`messages/${messageId}/reactions`);
  return items.filter(
    (r) => r.reaction_type.emoji_type === FAILURE_EMOJI && r.operator.operator_id === suite.app.appId,
  ).length;
}

describe('failure notice (issue 33 failure_notice)', { timeout: 40_000 }, () => {
  it('failure_notice.reply_once_across_crash: a worker dying after Lark posted the notice leaves one notice, under its own uuid', async () => {
    await setNotice('reply');
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'will you answer?');
    await pump(chat);
    const turn = await failTurnLeavingNotice(chat);
    expect(turn.outcome).toBe('failed');
    expect(await doomedWorkerPostsNotice(chat)).toEqual({ notice: 'posted' });
    expect(await repliesTo(anchor)).toHaveLength(1);

    // The dead process's claim is released and the notice runs again: Lark's dedup of its uuid.
    await recoverAndRun(chat);
    expect((await noticeEffects(chat)).map((e) => e.status)).toEqual(['completed']);
    const posted = await repliesTo(anchor);
    expect(posted.map(textOf)).toEqual([notice('failed', 'en')]);
    const uuid = (posted[0] as unknown as { reply_uuid: string }).reply_uuid;
    expect(uuid).toBe(noticeUuid({ deliveryKey: turn.delivery_key }));
    expect(uuid).not.toBe(turn.delivery_key);
    expect(await noticeRows(chat)).toEqual([
      {
        kind: 'reply',
        add_attempts: 0,
        reaction_id: null,
        reply_message_id: posted[0]!.message_id,
        posted: true,
      },
    ]);
  });

  it('failure_notice.reply_localized: the notice speaks the turn’s language', async () => {
    await setNotice('reply');
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'Bạn có thể giúp tôi được không?');
    await pump(chat);
    setAgentOverride(brokenAgent);
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 1)).toMatchObject({ outcome: 'failed' });
    await pump(chat);
    expect((await repliesTo(anchor)).map(textOf)).toEqual([notice('failed', 'vi')]);
  });

  it('failure_notice.to_newest_not_recalled: the newest input recalled after the turn failed, the notice goes to the newest input left', async () => {
    await setNotice('reaction');
    const chat = newChat(suite.app);
    const older = await say(chat, 'first part');
    const newest = await say(chat, 'second part');
    await pump(chat);
    const turn = await failTurnLeavingNotice(chat);
    expect(turn).toMatchObject({ outcome: 'failed', anchor_message_id: newest });
    // The user withdraws the newest message before the notice runs: Lark refuses reactions on
    // it (230011), so a notice aimed there would be dropped as refused.
    const recall = await buildEvent(suite.app, { type: 'recall', message_id: newest });
    await (await submitAwaitable(suite.app, recall.request)).afterAnswer;
    await runClaimedEffects(pool, effectRegistry, runner, { limit: 10, instanceId: chat.sessionId });
    expect((await noticeEffects(chat)).map((e) => e.status)).toEqual(['completed']);
    expect(await ourFailureReactions(older)).toBe(1);
    expect(await noticeRows(chat)).toMatchObject([{ kind: 'reaction', posted: true }]);
  });

  it('failure_notice.reaction_once_across_lost_answer: a create Lark applied but never answered is found by listing, not sent again, and the recorded kind wins over a later setting', async () => {
    await setNotice('reaction');
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'react if you fail');
    await pump(chat);
    await failTurnLeavingNotice(chat);
    // The create lands at Lark and its answer is lost: the run fails after sending it.
    await emu('faults', { route: 'reactions.create', kind: 'lost_response', times: 1 });
    await runClaimedEffects(pool, effectRegistry, runner, { limit: 10, instanceId: chat.sessionId });
    expect(await ourFailureReactions(anchor)).toBe(1);
    expect(await noticeRows(chat)).toMatchObject([{ kind: 'reaction', add_attempts: 1, posted: false }]);

    // The operator switches to replies meanwhile: this turn's notice was decided already.
    await setNotice('reply');
    await advanceDbClock(pool, 10_000);
    await runClaimedEffects(pool, effectRegistry, runner, { limit: 10, instanceId: chat.sessionId });
    expect((await noticeEffects(chat)).map((e) => e.status)).toEqual(['completed']);
    expect(await createsOf(anchor, FAILURE_EMOJI)).toBe(1);
    expect(await ourFailureReactions(anchor)).toBe(1);
    expect(await repliesTo(anchor)).toEqual([]);
    const [row] = await noticeRows(chat);
    expect(row).toMatchObject({ kind: 'reaction', add_attempts: 1, posted: true, reply_message_id: null });
    expect((row as { reaction_id: string | null }).reaction_id).not.toBeNull();
  });

  it('failure_notice.none_for_delivered: a delivered turn gets no notice, whatever the setting', async () => {
    await setNotice('reply');
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'answer me normally');
    await pump(chat);
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 1)).toMatchObject({ outcome: 'delivered' });
    await pump(chat);
    expect((await repliesTo(anchor)).map(textOf)).toEqual(['echo: answer me normally']);
    expect(await noticeEffects(chat)).toEqual([]);
    expect(await noticeRows(chat)).toEqual([]);
  });

  it('failure_notice.none_setting: with `none` a failed turn stays silent and nothing is recorded', async () => {
    await setNotice('none');
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'fail quietly');
    await pump(chat);
    setAgentOverride(brokenAgent);
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 1)).toMatchObject({ outcome: 'failed' });
    await pump(chat);
    expect(await repliesTo(anchor)).toEqual([]);
    expect(await createsOf(anchor, FAILURE_EMOJI)).toBe(0);
    expect((await noticeEffects(chat)).map((e) => e.status)).toEqual(['completed']);
    expect(await noticeRows(chat)).toEqual([]);
  });
});
