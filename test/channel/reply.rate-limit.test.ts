import { runDurableObjectAlarm } from 'cloudflare:test';
import { beforeEach, describe, expect, it } from 'vitest';
import { setAgentOverride } from '../../workers/agents';
import type { Agent } from '../../workers/agents/types';
import { advanceDbClock } from '../helpers/db';
import { emu, larkBase } from '../lark/helpers';
import {
  type Chat,
  engineSuite,
  fireDebounce,
  host,
  newChat,
  pump,
  repliesTo,
  say,
  textOf,
  turns,
} from './helpers';

/**
 * Issue 33 item 3: the reply route honours Lark's 429 holds as the reaction routes do
 * (lark/rate-limits.ts). A reply Lark refused with 429, or one whose route a recorded reset
 * still holds, posts nothing; the turn runs the same generation again at the reset (same
 * uuid, no replacement counted), and a turn past its deadline (REPLY_UUID_SAFE_MS) fails.
 */
const suite = engineSuite();
const { pool } = suite;

/** Echoes like the default agent and counts how often it was asked. */
function countingAgent(): Agent & { asked: number } {
  const agent = {
    name: 'counting',
    asked: 0,
    async reply(turn: Parameters<Agent['reply']>[0]) {
      agent.asked++;
      return { text: `echo: ${turn.inputs.map((i) => i.text).join(' / ')}` };
    },
  };
  return agent;
}

const replyCalls = async (anchor: string) =>
  (await emu<{ calls: { status: number }[] }>(`calls?route=reply&message_id=${encodeURIComponent(anchor)}`))
    .calls;

/** Moves database time and runs what came due: the chat host's alarm, then a pump. */
async function laterBy(chat: Chat, ms: number) {
  await advanceDbClock(pool, ms);
  await runDurableObjectAlarm(host(chat));
  await pump(chat);
}

/** The installed app's recorded reply reset (one row per app and route), set to now + `seconds`. */
async function holdReply(seconds: number) {
  await pool.query(
    `insert into lark_rate_limits (api_base, app_id, route, not_before, updated_at)
     values ($1, $2, 'reply', app_now() + $3 * interval '1 second', app_now())
     on conflict (api_base, app_id, route) do update set not_before = excluded.not_before`,
    [larkBase().replace(/\/+$/, ''), suite.app.appId, seconds],
  );
}

// The suite's one app is shared by the tests: each starts with no reset recorded for it.
beforeEach(async () => {
  await pool.query('delete from lark_rate_limits where app_id = $1', [suite.app.appId]);
});

const turnOf = async (chat: Chat) => (await turns(pool, chat)).find((t) => t.turn_no === 1)!;

describe('the reply route and Lark rate limits', { timeout: 40_000 }, () => {
  it('reply.honours_429_reset: a reply answered 429 posts nothing until the reset, then posts once, same generation', async () => {
    const agent = countingAgent();
    setAgentOverride(agent);
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'busy app');
    await pump(chat);
    await emu('faults', { route: 'reply', kind: '429', resetSeconds: 30, times: 1 });
    await fireDebounce(pool, chat);
    expect((await replyCalls(anchor)).map((c) => c.status)).toEqual([429]);
    // The reset is recorded for every isolate, as for the reaction routes.
    const { rows: holds } = await pool.query(
      `select 1 from lark_rate_limits where api_base = $1 and app_id = $2 and route = 'reply' and not_before > app_now()`,
      [larkBase().replace(/\/+$/, ''), suite.app.appId],
    );
    expect(holds).toHaveLength(1);
    // Inside the reset: nothing is sent, the turn waits, it is still generation 1.
    await laterBy(chat, 10_000);
    expect(await replyCalls(anchor)).toHaveLength(1);
    expect(await turnOf(chat)).toMatchObject({ outcome: null, generation: 1 });
    expect(agent.asked).toBe(1);
    // Past the reset: one post, delivered, the one reply on the anchor.
    await laterBy(chat, 21_000);
    expect(await turnOf(chat)).toMatchObject({ outcome: 'delivered', generation: 1 });
    expect((await repliesTo(anchor)).map(textOf)).toEqual(['echo: busy app']);
    expect((await replyCalls(anchor)).map((c) => c.status)).toEqual([429, 200]);
  });

  it('reply.honours_recorded_hold: while a reset recorded elsewhere holds the route, the agent is not asked and nothing is sent', async () => {
    const agent = countingAgent();
    setAgentOverride(agent);
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'held before the turn');
    await pump(chat);
    // Past the debounce (fireDebounce moves 21 s), 19 s of it left.
    await holdReply(40);
    await fireDebounce(pool, chat);
    expect(agent.asked).toBe(0);
    expect(await replyCalls(anchor)).toEqual([]);
    expect(await turnOf(chat)).toMatchObject({ outcome: null, generation: 1 });
    await laterBy(chat, 21_000);
    expect(agent.asked).toBe(1);
    expect(await turnOf(chat)).toMatchObject({ outcome: 'delivered', generation: 1 });
    expect(await repliesTo(anchor)).toHaveLength(1);
  });

  it('reply.hold_bounded_by_turn_deadline: a hold that outlasts the turn deadline fails the turn, never posts late', async () => {
    const agent = countingAgent();
    setAgentOverride(agent);
    const chat = newChat(suite.app);
    const anchor = await say(chat, 'held for hours');
    await pump(chat);
    await holdReply(7200);
    await fireDebounce(pool, chat);
    expect(await turnOf(chat)).toMatchObject({ outcome: null });
    // The retry comes at the reset, two hours on: the turn is past its deadline by then.
    await laterBy(chat, 2 * 3_600_000 + 1000);
    expect(await turnOf(chat)).toMatchObject({ outcome: 'failed' });
    expect(agent.asked).toBe(0);
    expect(await replyCalls(anchor)).toEqual([]);
  });
});
