import { createExecutionContext, runDurableObjectAlarm, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { type Agent, setAgentOverride } from '../../workers/agents';
import type { ConversationState } from '../../workers/channel/conversation';
import { sessionIdOf } from '../../workers/channel/session';
import type { TurnOutcome } from '../../workers/channel/typing-hooks';
import { actorHostStub } from '../../workers/effects/actor-host-stub';
import { loadInstance } from '../../workers/effects/mailbox';
import worker from '../../workers/index';
import { advanceDbClock, setDbClockOffset, testPool, uid } from '../helpers/db';
import { buildEvent, emu, installApp, submit, type TestApp } from '../lark/helpers';

/** The test debounce (vitest.config.ts CHANNEL_DEBOUNCE_MS) plus a margin. */
export const PAST_DEBOUNCE_MS = 21_000;

export interface EngineSuite {
  pool: Pool;
  /** Installed in beforeAll: read it inside tests, not at file level. */
  readonly app: TestApp;
}

/**
 * The setup the engine test files share: their own pool, one installed Lark app, and after
 * each test the DB clock back at zero, no agent override and no emulator faults left.
 */
export function engineSuite(): EngineSuite {
  const pool = testPool(4);
  let app: TestApp | undefined;
  beforeAll(async () => {
    app = await installApp();
  }, 60_000);
  afterEach(async () => {
    setAgentOverride(null);
    await emu('faults', undefined, 'DELETE');
    await setDbClockOffset(pool, 0);
  });
  afterAll(() => pool.end());
  return {
    pool,
    get app() {
      if (!app) throw new Error('engineSuite: app is installed in beforeAll');
      return app;
    },
  };
}

export interface Chat {
  app: TestApp;
  chatId: string;
  sessionId: string;
}

export function newChat(app: TestApp): Chat {
  const chatId = `oc_${uid('c').replace(/[^A-Za-z0-9]/g, '')}`;
  return {
    app,
    chatId,
    sessionId: sessionIdOf({ installationId: app.installationId, chatId, threadId: null }),
  };
}

/** A user message delivered to the webhook the way Lark does; returns its Lark message id. */
export async function say(chat: Chat, text: string): Promise<string> {
  const built = await buildEvent(chat.app, { message: { text, chat_id: chat.chatId, chat_type: 'group' } });
  const res = await submit(chat.app.installationId, built.request);
  expect(res.status).toBe(200);
  return built.message_id!;
}

/**
 * `say` through the Worker's handler with an execution context of the test's own, so the test
 * can await what the webhook left in `waitUntil` (the host's wake-up and the Typing Add)
 * instead of polling for its effects.
 */
export async function sayAwaitable(
  chat: Chat,
  text: string,
): Promise<{ messageId: string; afterAnswer: Promise<void> }> {
  const built = await buildEvent(chat.app, { message: { text, chat_id: chat.chatId, chat_type: 'group' } });
  const { afterAnswer } = await submitAwaitable(chat.app, built.request);
  return { messageId: built.message_id!, afterAnswer };
}

/**
 * Submits a delivery the emulator built (`buildEvent`) through the Worker's handler, expects
 * the 200, and returns what the webhook left in `waitUntil` (the wake-up and the Typing Add).
 */
export async function submitAwaitable(
  app: TestApp,
  request: { headers: Record<string, string>; body: string },
): Promise<{ afterAnswer: Promise<void>; body: Record<string, unknown> }> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(
    new Request(`http://test/lark/events/${app.installationId}`, {
      method: 'POST',
      headers: request.headers,
      body: request.body,
    }),
    env,
    ctx,
  );
  expect(res.status).toBe(200);
  const body = (await res.json()) as Record<string, unknown>;
  return { afterAnswer: waitOnExecutionContext(ctx), body };
}

export const host = (chat: Chat) => actorHostStub(env, chat.sessionId);

/** Waits for the wake-up the webhook sent (or pumps once more): the mailbox is drained after it. */
export const pump = (chat: Chat) => host(chat).wake(chat.sessionId);

export async function stateOf(pool: Pool, chat: Chat): Promise<ConversationState> {
  return (await loadInstance(pool, chat.sessionId))!.state as ConversationState;
}

export interface TurnRow {
  session_id: string;
  turn_no: number;
  context_revision: string;
  first_position: string;
  cutoff_position: string;
  input_count: number;
  anchor_message_id: string;
  delivery_key: string;
  generation: number;
  effect_id: string;
  outcome: TurnOutcome | null;
  reply_message_id: string | null;
}

/** A chat's turns, oldest first (the tests' read of channel_turns; production reads none whole). */
export async function turns(pool: Pool, chat: Chat): Promise<TurnRow[]> {
  const { rows } = await pool.query<TurnRow>(
    `select session_id, turn_no, context_revision, first_position, cutoff_position, input_count,
            anchor_message_id, delivery_key, generation, effect_id, outcome, reply_message_id
       from channel_turns where session_id = $1 order by turn_no limit 100`,
    [chat.sessionId],
  );
  return rows;
}

/** Moves database time past the debounce and runs the host's alarm (the debounce timer). */
export async function fireDebounce(pool: Pool, chat: Chat): Promise<void> {
  await advanceDbClock(pool, PAST_DEBOUNCE_MS);
  await runDurableObjectAlarm(host(chat));
  await pump(chat);
}

/**
 * Drives timers until turn `turnNo` has an outcome: each round moves database time by
 * `stepMs`, runs the alarm, and pumps. No sleeping: time is the database test clock.
 */
export async function untilSettled(pool: Pool, chat: Chat, turnNo: number, stepMs = 3000, rounds = 8) {
  for (let i = 0; i < rounds; i++) {
    const t = (await turns(pool, chat)).find((r) => r.turn_no === turnNo);
    if (t?.outcome) return t;
    await advanceDbClock(pool, stepMs);
    await runDurableObjectAlarm(host(chat));
    await pump(chat);
  }
  throw new Error(`turn ${turnNo} of ${chat.sessionId} did not settle`);
}

export interface EmuReply {
  message_id: string;
  content: string;
  parent_id: string;
}

export async function repliesTo(messageId: string): Promise<EmuReply[]> {
  return (await emu<{ items: EmuReply[] }>(`messages/${messageId}/replies`)).items;
}

export const textOf = (r: EmuReply) => (JSON.parse(r.content) as { text: string }).text;

/** How many `Typing` reactions (any operator) the emulator holds on a message. */
export const typingOn = async (messageId: string): Promise<number> =>
  (
    await emu<{ items: { reaction_type: { emoji_type: string } }[] }>(`messages/${messageId}/reactions`)
  ).items.filter((r) => r.reaction_type.emoji_type === 'Typing').length;

/** Runs the host until the turn-settled effect has withdrawn the badges; fails after `rounds`. */
export async function untilWithdrawn(chat: Chat, ids: string[], rounds = 5): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    if ((await Promise.all(ids.map(typingOn))).every((n) => n === 0)) return;
    await runDurableObjectAlarm(host(chat));
    await pump(chat);
  }
  throw new Error(`Typing still on ${ids.join(', ')} after ${rounds} host rounds`);
}

/** An agent that is down: every generation of a turn fails. */
export const brokenAgent: Agent = { name: 'broken', reply: () => Promise.reject(new Error('agent is down')) };

/** One message whose turn fails (the agent is down for all its generations); the agent is back after. */
export async function failedTurn(
  pool: Pool,
  chat: Chat,
  text = 'please answer',
): Promise<{ messageId: string; turn: TurnRow }> {
  setAgentOverride(brokenAgent);
  const messageId = await say(chat, text);
  await pump(chat);
  await fireDebounce(pool, chat);
  const turn = await untilSettled(pool, chat, 1);
  expect(turn.outcome).toBe('failed');
  setAgentOverride(null);
  return { messageId, turn };
}
