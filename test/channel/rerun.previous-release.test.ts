import { env } from 'cloudflare:workers';
import { beforeAll, describe, expect, it } from 'vitest';
import { droppedExecutor } from '../../workers/channel/backlog';
import { failureNoticeExecutor } from '../../workers/channel/failure-notice';
import { replyExecutor, settledExecutor } from '../../workers/channel/reply';
import { rerunTurn } from '../../workers/channel/rerun';
import { registerProcess } from '../../workers/effects/processes';
import { EffectRegistry } from '../../workers/effects/registry';
import { drainInstance, runClaimedEffects } from '../../workers/effects/runner';
import { effectConfig } from '../../workers/effects/types';
import { type Env, loadConfig } from '../../workers/env';
import { advanceDbClock } from '../helpers/db';
import { installApp } from '../lark/helpers';
import { engineSuite, failedTurn, newChat, PAST_DEBOUNCE_MS, repliesTo, stateOf, turns } from './helpers';
import { conversationActor as previousConversationActor } from './previous-release/conversation';

/**
 * The rollout note of docs/operations.md "Re-run a failed turn": a re-run's messages reach a
 * host still running the previous release's conversation actor. Its shape (`in:rerun:…`, the
 * webhook's input payload) is one that release handles as inputs, so the re-run is answered
 * there too, under a new reply uuid; only `rerun_of` is not written.
 */
const suite = engineSuite();
const { pool } = suite;

const config = () => loadConfig(env as unknown as Env);
/** The previous release's actor with this release's effect executors (their contracts did not change). */
const previous = new EffectRegistry()
  .registerActor(previousConversationActor(() => ({ debounceMs: 20_000, maxDebounceMs: 80_000 })))
  .registerEffect(replyExecutor({ config, agentBinding: () => undefined }))
  .registerEffect(settledExecutor({ config }))
  .registerEffect(failureNoticeExecutor({ config }))
  .registerEffect(droppedExecutor({ config }));

let runner = '';
beforeAll(async () => {
  runner = await registerProcess(pool, 'previous-release-host');
});

describe('re-run through the previous release (issue 33 item 4, rollout)', { timeout: 60_000 }, () => {
  it('rerun.previous_release_answers: a host on the previous release answers the re-run as inputs, under a new uuid', async () => {
    const app = await installApp();
    const chat = newChat(app);
    const { messageId, turn: failed } = await failedTurn(pool, chat, 'answer me, old host');

    // Accepted (no wake-up: this release's host is not asked); the old host handles it.
    expect(await rerunTurn(pool, app.installationId, failed.delivery_key)).toMatchObject({ inputs: 1 });
    await drainInstance(pool, previous, chat.sessionId, effectConfig());
    expect((await stateOf(pool, chat)).pending.map((p) => p.messageId)).toEqual([messageId]);
    await advanceDbClock(pool, PAST_DEBOUNCE_MS);
    for (let round = 0; round < 6; round++) {
      await drainInstance(pool, previous, chat.sessionId, effectConfig());
      await runClaimedEffects(pool, previous, runner, { limit: 10, instanceId: chat.sessionId });
      if ((await turns(pool, chat))[1]?.outcome) break;
      await advanceDbClock(pool, 1000);
    }
    const [, again] = await turns(pool, chat);
    expect(again).toMatchObject({ turn_no: 2, outcome: 'delivered', anchor_message_id: messageId });
    expect(again!.delivery_key).not.toBe(failed.delivery_key);
    const replies = await repliesTo(messageId);
    expect(replies.map((r) => (r as unknown as { reply_uuid: string }).reply_uuid)).toEqual([
      again!.delivery_key,
    ]);
    const { rows } = await pool.query(
      'select rerun_of from channel_turns where session_id = $1 and turn_no = 2',
      [chat.sessionId],
    );
    expect(rows).toEqual([{ rerun_of: null }]);
  });
});
