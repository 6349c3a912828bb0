import { env } from 'cloudflare:workers';
import { beforeAll, describe, expect, it } from 'vitest';
import { droppedExecutor } from '../../workers/channel/backlog';
import { failureNoticeExecutor } from '../../workers/channel/failure-notice';
import { acceptRecall } from '../../workers/channel/recall';
import { resendRecalls } from '../../workers/channel/recall-sweep';
import { replyExecutor, settledExecutor } from '../../workers/channel/reply';
import { registerProcess } from '../../workers/effects/processes';
import { EffectRegistry, effectRegistry } from '../../workers/effects/registry';
import { drainInstance, runClaimedEffects } from '../../workers/effects/runner';
import { effectConfig } from '../../workers/effects/types';
import { type Env, loadConfig } from '../../workers/env';
import { advanceDbClock, uid } from '../helpers/db';
import { emu, installApp } from '../lark/helpers';
import { engineSuite, fireDebounce, newChat, pump, say, untilSettled } from './helpers';
import { conversationActor as previousConversationActor } from './previous-release/conversation';
import { callsAbout, setSettings } from './settings-helpers';

/**
 * docs/operations.md "Recalled messages", during a deploy: a recall's `recall:` message drained
 * by a host still on a release without recalls is a no-op there, so the reply of a turn
 * delivered before the recall stayed under `recall_reply: on`. The recall itself is in Postgres
 * (the webhook's statement), and the minute sweep (recall-sweep.ts) sends it again: this
 * release's host then deletes the reply once.
 */
const suite = engineSuite();
const { pool } = suite;

const config = () => loadConfig(env as unknown as Env);
/** The previous release's conversation actor with this release's executors (test/channel/rerun.previous-release.test.ts). */
const previous = new EffectRegistry()
  .registerActor(previousConversationActor(() => ({ debounceMs: 20_000, maxDebounceMs: 80_000 })))
  .registerEffect(replyExecutor({ config, agentBinding: () => undefined }))
  .registerEffect(settledExecutor({ config }))
  .registerEffect(failureNoticeExecutor({ config }))
  .registerEffect(droppedExecutor({ config }));

let runner = '';
beforeAll(async () => {
  runner = await registerProcess(pool, 'recall-sweep-host');
});

const deletions = async (sessionId: string) =>
  (
    await pool.query<{ turn_no: number; outcome: string | null }>(
      'select turn_no, outcome from channel_reply_deletions where session_id = $1 order by turn_no',
      [sessionId],
    )
  ).rows;

describe('a recall through a deploy (issue 33, the two-version rule)', { timeout: 60_000 }, () => {
  it('recall.sweep_after_previous_release: a recall message an old host drained is sent again; the reply is deleted once', async () => {
    const app = await installApp();
    await setSettings(app, { recall_reply: 'on' });
    const chat = newChat(app);
    const messageId = await say(chat, 'answer, then I take it back');
    await pump(chat);
    await fireDebounce(pool, chat);
    const turn = await untilSettled(pool, chat, 1);
    expect(turn.outcome).toBe('delivered');
    const replyId = turn.reply_message_id!;

    // The webhook's statement (a new Worker answered the recall); no wake-up: the conversation's
    // host is still on the previous release, which drains the `recall:` message as a no-op.
    await emu(`messages/${messageId}/recall`, {});
    expect(
      await acceptRecall(pool, app.installationId, uid('ev'), {
        messageId,
        chatId: chat.chatId,
        recallType: 'message_owner',
        recallTimeMs: Date.now(),
      }),
    ).toEqual({ kind: 'recorded', sessionId: chat.sessionId });
    await drainInstance(pool, previous, chat.sessionId, effectConfig());
    await runClaimedEffects(pool, previous, runner, { limit: 10, instanceId: chat.sessionId });
    expect(await deletions(chat.sessionId)).toEqual([]);
    expect(await callsAbout('messages.delete', replyId)).toEqual([]);

    // Not yet a minute old: the sweep leaves it to the first message.
    expect(await resendRecalls(pool)).toEqual([]);
    await advanceDbClock(pool, 61_000);
    expect(await resendRecalls(pool)).toEqual([chat.sessionId]);
    // The same ten-minute bucket: the mailbox's key makes it once.
    await resendRecalls(pool);
    const { rows: sent } = await pool.query<{ n: number }>(
      `select count(*)::int as n from actor_mailbox where instance_id = $1 and message_key like 'recall:%:again:%'`,
      [chat.sessionId],
    );
    expect(sent).toEqual([{ n: 1 }]);

    // This release's host handles it: the deletion is decided and run, once.
    for (let round = 0; round < 3; round++) {
      await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
      await runClaimedEffects(pool, effectRegistry, runner, { limit: 10, instanceId: chat.sessionId });
      await advanceDbClock(pool, 1000);
    }
    expect(await deletions(chat.sessionId)).toEqual([{ turn_no: 1, outcome: 'deleted' }]);
    expect((await callsAbout('messages.delete', replyId)).map((c) => c.status)).toEqual([200]);
    // Decided: the sweep sends it no more.
    await advanceDbClock(pool, 600_000);
    expect(await resendRecalls(pool)).toEqual([]);
  });
});
