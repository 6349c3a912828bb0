import { abortAllDurableObjects, runDurableObjectAlarm } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { type Agent, type AgentTurn, setAgentOverride } from '../../workers/agents';
import { notice } from '../../workers/channel/notices';
import { registerProcess } from '../../workers/effects/processes';
import { effectRegistry } from '../../workers/effects/registry';
import { drainInstance } from '../../workers/effects/runner';
import { claimEffects } from '../../workers/effects/scheduler';
import { effectConfig } from '../../workers/effects/types';
import { AppError } from '../../workers/errors';
import { ageHeartbeat } from '../effects/helpers';
import { runCron } from '../helpers/cron';
import { advanceDbClock } from '../helpers/db';
import type { CardView } from '../helpers/lark-cards';
import { admin, emu, emuCard, emuCards, untilHeld } from '../lark/helpers';
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
  typingOn,
  untilSettled,
  untilWithdrawn,
} from './helpers';

const suite = engineSuite();
const { pool } = suite;

/** Waits for an observable condition (the emulator's state), never for a fixed time. */
async function until<T>(what: string, read: () => Promise<T>, ok: (v: T) => boolean, ms = 8000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (ok(v)) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 15));
  }
}

const cardsFor = (anchor: string) => emuCards({ message_id: anchor });
const textOfCard = (c: CardView) => c.elements.reply?.text ?? null;
const onlyCard = async (anchor: string) => {
  const cards = await cardsFor(anchor);
  expect(cards).toHaveLength(1);
  return cards[0]!;
};

/** Each generation's steps: a text to show (waited for on the card when it was sent), or the end. */
type Step =
  | { show: string; visible?: false }
  | { done: string }
  | { fail: true }
  | { hang: true }
  | { wait: Promise<void> };

function scriptedAgent(byGeneration: (turn: AgentTurn) => Step[]): Agent {
  return {
    name: 'scripted',
    async reply(turn, signal, onText) {
      for (const step of byGeneration(turn)) {
        if ('show' in step) {
          onText?.(step.show);
          // The next delta only once this one is visible on the sent card (unless the step says
          // the card cannot be visible, e.g. while its send is failing).
          if (step.visible !== false)
            await until(
              `"${step.show}" on the card`,
              () => {
                if (signal.aborted) throw signal.reason;
                return cardsFor(turn.inputs.at(-1)!.messageId);
              },
              (cs) => cs.some((c) => c.sent !== null && textOfCard(c) === step.show),
            );
        }
        if ('wait' in step) await step.wait;
        if ('done' in step) return { text: step.done };
        if ('fail' in step) throw new AppError('agent_failed', 'scripted failure');
        if ('hang' in step)
          await new Promise((_resolve, reject) =>
            signal.addEventListener('abort', () => reject(signal.reason)),
          );
      }
      throw new Error('script without an end');
    },
  };
}

async function cardMode(installationId: string) {
  const res = await admin(`/${installationId}/settings`, {
    method: 'PATCH',
    body: { operator: 'test', settings: { reply_mode: 'card_stream' } },
  });
  expect(res.status).toBe(200);
}

/** Flushes the debounce without running the reply, so a test can play the doomed worker. */
async function flushOnly(chat: Chat) {
  await advanceDbClock(pool, PAST_DEBOUNCE_MS);
  await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
  expect((await stateOf(pool, chat)).turn).not.toBeNull();
}

/** A process claims the reply and (unless `start: false`) starts it; the test decides where it dies. */
async function doomedRun(chat: Chat, opts: { start?: false } = {}) {
  const dead = await registerProcess(pool, 'doomed-worker');
  const [claimed] = await claimEffects(pool, dead, { limit: 10, instanceId: chat.sessionId });
  expect(claimed?.kind).toBe('channel.reply');
  const abort = new AbortController();
  const run = (
    opts.start === false
      ? new Promise<never>(() => {})
      : effectRegistry.executor('channel.reply')!.run(
          {
            id: claimed!.id,
            kind: claimed!.kind,
            args: claimed!.args,
            attempts: claimed!.attempts,
            instanceId: chat.sessionId,
          },
          abort.signal,
        )
  ).then(
    (result) => ({ result }),
    (error: unknown) => ({ error }),
  );
  /** The process is dead: its heartbeat ages past the staleness rule and the cron recovers it. */
  const die = async (opts: { runHost?: false } = {}) => {
    await ageHeartbeat(pool, dead, 31_000);
    await runCron('* * * * *');
    if (opts.runHost !== false) await runDurableObjectAlarm(host(chat));
  };
  return { claimed: claimed!, run, abort, die };
}

async function startedTurn(text: string) {
  const chat = newChat(suite.app);
  await cardMode(suite.app.installationId);
  const anchor = await say(chat, text);
  await pump(chat);
  return { chat, anchor };
}

function expectIncreasing(card: CardView) {
  const seqs = card.sequences.map((s) => s.sequence);
  expect(seqs.length).toBeGreaterThan(0);
  for (let i = 1; i < seqs.length; i++) expect(seqs[i]!).toBeGreaterThan(seqs[i - 1]!);
  expect(seqs.at(-1)!).toBeLessThanOrEqual(2 ** 31 - 1);
}

describe('streaming card replies (issue 34)', { timeout: 40_000 }, () => {
  it('card.stream_lifecycle: one card, sent once as the reply, typed out as the agent answers, finished with the final text', async () => {
    setAgentOverride(
      scriptedAgent(() => [
        { show: 'Hel' },
        { show: 'Hello wor' },
        { show: 'Hello world' },
        { done: 'Hello world!' },
      ]),
    );
    const { chat, anchor } = await startedTurn('say hello');
    await fireDebounce(pool, chat);
    const turn = await untilSettled(pool, chat, 1);
    const card = await onlyCard(anchor);
    expect(turn).toMatchObject({
      outcome: 'delivered',
      generation: 1,
      reply_message_id: card.sent!.message_id,
    });
    expect(card).toMatchObject({ finished: true, streaming: false });
    expect(card.sent).toMatchObject({ reply_to: anchor, uuid: turn.delivery_key });
    expect(textOfCard(card)).toBe('Hello world!');
    // Created with the first text, then the two later texts, then the finish.
    expect(card.sequences.map((s) => s.route)).toEqual([
      'cardkit.content',
      'cardkit.content',
      'cardkit.update',
    ]);
    expectIncreasing(card);
    expect(card.refused).toEqual([]);
    expect(await repliesTo(anchor)).toHaveLength(1);
    await untilWithdrawn(chat, [anchor]);
    expect(await typingOn(anchor)).toBe(0);
  });

  it('card.crash_before_create: a worker that died before anything reached Lark leaves nothing; the replacement streams the one card', async () => {
    setAgentOverride(
      scriptedAgent((t) => [{ show: `gen ${t.generation}` }, { done: `answer of gen ${t.generation}` }]),
    );
    const { chat, anchor } = await startedTurn('crash before create');
    await flushOnly(chat);
    const doomed = await doomedRun(chat, { start: false });
    expect(await cardsFor(anchor)).toEqual([]);
    await doomed.die();
    const turn = await untilSettled(pool, chat, 1);
    expect(turn).toMatchObject({ outcome: 'delivered', generation: 2 });
    const card = await onlyCard(anchor);
    expect(card.finished).toBe(true);
    expect(textOfCard(card)).toBe('answer of gen 2');
    expect(await repliesTo(anchor)).toHaveLength(1);
  });

  it('card.crash_after_create: a card created and recorded but never sent is sent once by the replacement, no second card', async () => {
    setAgentOverride(
      scriptedAgent((t) => [
        { show: `gen ${t.generation}`, visible: t.generation === 1 ? false : undefined },
        { done: `answer of gen ${t.generation}` },
      ]),
    );
    const { chat, anchor } = await startedTurn('crash after create');
    await flushOnly(chat);
    // Every send of the doomed run fails: the card exists and is recorded, nothing is sent.
    await emu('faults', { route: 'reply', kind: '5xx', times: 50 });
    const doomed = await doomedRun(chat);
    expect(await doomed.run).toHaveProperty('error');
    const { rows } = await pool.query<{ card_id: string; sent_message_id: string | null }>(
      'select card_id, sent_message_id from channel_reply_cards where session_id = $1',
      [chat.sessionId],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.sent_message_id).toBeNull();
    expect((await emuCard(rows[0]!.card_id)).sent).toBeNull();
    await emu('faults', undefined, 'DELETE');
    await doomed.die();
    const turn = await untilSettled(pool, chat, 1);
    expect(turn).toMatchObject({ outcome: 'delivered', generation: 2 });
    const card = await onlyCard(anchor);
    expect(card.card_id).toBe(rows[0]!.card_id);
    expect(card.finished).toBe(true);
    expect(textOfCard(card)).toBe('answer of gen 2');
    expect(await repliesTo(anchor)).toHaveLength(1);
  });

  it('card.crash_mid_stream: the replacement continues the sent card above every sequence the old writer used; the old writer, still running, is refused', async () => {
    const gate = () => {
      let open!: () => void;
      const opened = new Promise<void>((r) => {
        open = r;
      });
      return { open, opened };
    };
    const oldGoesOn = gate();
    const newGoesOn = gate();
    setAgentOverride(
      scriptedAgent((t) =>
        t.generation === 1
          ? [
              { show: 'first half' },
              { show: 'first half, more' },
              { wait: oldGoesOn.opened },
              { show: 'first half, stale words', visible: false },
              { hang: true },
            ]
          : [{ show: 'second try' }, { wait: newGoesOn.opened }, { done: 'second try, complete' }],
      ),
    );
    const { chat, anchor } = await startedTurn('crash mid stream');
    await flushOnly(chat);
    const doomed = await doomedRun(chat);
    const [sent] = await until(
      'the old writer streaming',
      () => cardsFor(anchor),
      (cs) => cs.some((c) => textOfCard(c) === 'first half, more'),
    );
    const cardId = sent!.card_id;
    // The old incarnation is still running (a deploy does not promise it stopped) when the
    // recovery hands the turn to a replacement generation.
    // The host's pumps run the replacement, which waits for the test mid-stream: not awaited.
    await doomed.die({ runHost: false });
    const settled = untilSettled(pool, chat, 1);
    await until(
      'the replacement streaming',
      () => emuCard(cardId),
      (c) => textOfCard(c) === 'second try',
    );
    // The old writer pushes again mid-stream of the new one: its sequence is below the new one's.
    oldGoesOn.open();
    const stale = await until(
      'the old writer refused',
      () => emuCard(cardId),
      (c) => c.refused.length > 0,
    );
    expect(stale.streaming).toBe(true);
    expect(stale.refused[0]!.sequence).toBeLessThan(stale.last_sequence);
    expect(textOfCard(stale)).toBe('second try');
    newGoesOn.open();
    expect(await settled).toMatchObject({ outcome: 'delivered', generation: 2 });
    const card = await onlyCard(anchor);
    expect(card.card_id).toBe(cardId);
    expect(card.finished).toBe(true);
    expect(textOfCard(card)).toBe('second try, complete');
    expectIncreasing(card);
    expect(await repliesTo(anchor)).toHaveLength(1);
    doomed.abort.abort(new Error('the old incarnation ends'));
    await doomed.run;
    expect(textOfCard(await emuCard(cardId))).toBe('second try, complete');
  });

  it('card.runtime_restart_mid_stream: the runtime restarts every object mid-stream; the restarted host takes the turn over at once and finishes the one card', async () => {
    setAgentOverride(
      scriptedAgent((t) =>
        t.generation === 1
          ? [{ show: 'before the restart' }, { hang: true }]
          : [{ show: 'after the restart' }, { done: 'after the restart, complete' }],
      ),
    );
    const { chat, anchor } = await startedTurn('restart mid stream');
    await advanceDbClock(pool, PAST_DEBOUNCE_MS);
    // The debounce timer fires and the host runs the reply, which waits in the agent: not awaited.
    const first = runDurableObjectAlarm(host(chat))
      .then(() => pump(chat))
      .catch((err: unknown) => err);
    const [card] = await until(
      'the card streaming',
      () => cardsFor(anchor),
      (cs) => cs.some((c) => c.sent !== null && textOfCard(c) === 'before the restart'),
    );
    await abortAllDurableObjects();
    await first;
    // The restarted host's first pump supersedes the old incarnation's process: the reply is
    // idempotent by key, so it is recovered at once (no staleness wait) and run again.
    const turn = await untilSettled(pool, chat, 1, 1000);
    expect(turn).toMatchObject({ outcome: 'delivered', generation: 2 });
    const finished = await onlyCard(anchor);
    expect(finished.card_id).toBe(card!.card_id);
    expect(finished.finished).toBe(true);
    expect(textOfCard(finished)).toBe('after the restart, complete');
    expectIncreasing(finished);
    expect(await repliesTo(anchor)).toHaveLength(1);
    await untilWithdrawn(chat, [anchor]);
  });

  it.each([
    { point: 'before the card exists', route: 'cardkit.create' },
    { point: 'after the card was created, before it was sent', route: 'reply' },
    { point: 'after it was sent, before the finish', route: 'cardkit.update' },
  ])(
    'card.runtime_restart_at_each_point: the runtime restarts $point; one card sent, finished, one reply',
    async ({ route }) => {
      setAgentOverride(
        scriptedAgent((t) =>
          t.generation === 1
            ? [{ show: 'gen 1', visible: false }, { done: 'answer of gen 1' }]
            : [{ show: 'gen 2' }, { done: 'answer of gen 2' }],
        ),
      );
      const { chat, anchor } = await startedTurn(`restart at ${route}`);
      await emu('faults', { route, kind: 'hold' });
      await advanceDbClock(pool, PAST_DEBOUNCE_MS);
      const first = runDurableObjectAlarm(host(chat))
        .then(() => pump(chat))
        .catch((err: unknown) => err);
      // The call is at Lark, unanswered, when every object restarts; it is then dropped unanswered.
      await untilHeld(route);
      await abortAllDurableObjects();
      await first;
      await emu('faults', undefined, 'DELETE');
      const turn = await untilSettled(pool, chat, 1, 1000);
      expect(turn).toMatchObject({ outcome: 'delivered', generation: 2 });
      const card = await onlyCard(anchor);
      expect(card.finished).toBe(true);
      expect(textOfCard(card)).toBe('answer of gen 2');
      expectIncreasing(card);
      expect(card.sent).toMatchObject({ reply_to: anchor, uuid: turn.delivery_key });
      expect(await repliesTo(anchor)).toHaveLength(1);
      // No second card was sent, refused or not: the reply carrying it went once.
      expect(card.refused.filter((r) => r.route === 'reply')).toEqual([]);
      await untilWithdrawn(chat, [anchor]);
    },
  );

  it('card.crash_before_finish: a sent card whose finish never landed is finished by the replacement with its own answer', async () => {
    setAgentOverride(
      scriptedAgent((t) => [{ show: `gen ${t.generation}` }, { done: `answer of gen ${t.generation}` }]),
    );
    const { chat, anchor } = await startedTurn('crash before finish');
    await flushOnly(chat);
    await emu('faults', { route: 'cardkit.update', kind: '5xx', times: 50 });
    const doomed = await doomedRun(chat);
    const outcome = await doomed.run;
    expect(outcome, JSON.stringify(outcome)).toHaveProperty('error');
    const left = await onlyCard(anchor);
    expect(left).toMatchObject({ streaming: true });
    expect(left.sent).not.toBeNull();
    await emu('faults', undefined, 'DELETE');
    await doomed.die();
    const turn = await untilSettled(pool, chat, 1);
    expect(turn).toMatchObject({ outcome: 'delivered', generation: 2 });
    const card = await onlyCard(anchor);
    expect(card.finished).toBe(true);
    expect(textOfCard(card)).toBe('answer of gen 2');
    expectIncreasing(card);
    expect(await repliesTo(anchor)).toHaveLength(1);
  });

  it('card.interrupted_notice: when no generation can answer, the sent card is finished with the notice in the turn language, and the badge goes; the card is the failure notice, no second message', async () => {
    setAgentOverride(scriptedAgent(() => [{ show: 'Đang nghĩ' }, { fail: true }]));
    const { chat, anchor } = await startedTurn('xin chào, bạn khỏe không?');
    const failureNotice = (value: string) =>
      admin(`/${suite.app.installationId}/settings`, {
        method: 'PATCH',
        body: { operator: 'test', settings: { failure_notice: value } },
      });
    expect((await failureNotice('reply')).status).toBe(200);
    try {
      await fireDebounce(pool, chat);
      const turn = await untilSettled(pool, chat, 1);
      expect(turn).toMatchObject({ outcome: 'failed', generation: 3 });
      // The settlement (badges and the card) runs on the host's next pumps.
      await untilWithdrawn(chat, [anchor]);
      await pump(chat);
      const finished = await onlyCard(anchor);
      expect(finished.finished).toBe(true);
      expect(textOfCard(finished)).toBe(notice('interrupted', 'vi'));
      expect(await repliesTo(anchor)).toHaveLength(1);
      const { rows } = await pool.query(
        `select e.status, n.session_id as notice from effects e
           left join channel_failure_notices n on n.session_id = e.origin_instance_id
          where e.origin_instance_id = $1 and e.kind = 'channel.failure-notice'`,
        [chat.sessionId],
      );
      expect(rows).toEqual([{ status: 'completed', notice: null }]);
    } finally {
      await failureNotice('none');
    }
  });

  it('card.sweep_finishes_leftovers: a card whose settlement could not finish it (Lark refusing every attempt) is finished by the minute sweep', async () => {
    setAgentOverride(scriptedAgent(() => [{ show: '思考中' }, { fail: true }]));
    const { chat, anchor } = await startedTurn('你好，在吗？');
    // Every full update fails while the turn settles: the settlement's three attempts all fail.
    await emu('faults', { route: 'cardkit.update', kind: '5xx', times: 100 });
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 1)).toMatchObject({ outcome: 'failed' });
    for (let i = 0; i < 5; i++) {
      await advanceDbClock(pool, 5000);
      await runDurableObjectAlarm(host(chat));
      await pump(chat);
    }
    const { rows } = await pool.query<{ status: string }>(
      `select status from effects where origin_instance_id = $1 and kind = 'channel.turn-settled'`,
      [chat.sessionId],
    );
    expect(rows).toEqual([{ status: 'dead' }]);
    expect((await onlyCard(anchor)).streaming).toBe(true);
    await emu('faults', undefined, 'DELETE');
    await advanceDbClock(pool, 61_000);
    await runCron('* * * * *');
    const card = await onlyCard(anchor);
    expect(card.finished).toBe(true);
    expect(textOfCard(card)).toBe(notice('interrupted', 'zh'));
    expect(await repliesTo(anchor)).toHaveLength(1);
  });

  it('card.mode_fixed_per_turn: a turn keeps the reply mode its first run chose, whatever the setting says by its next generation (chaos replay reply-mode-switch)', async () => {
    const setMode = (mode: string) =>
      admin(`/${suite.app.installationId}/settings`, {
        method: 'PATCH',
        body: { operator: 'test', settings: { reply_mode: mode } },
      });
    // Text first: the first generation posts its text, then dies; the operator switches to cards.
    setAgentOverride(scriptedAgent((t) => [{ done: `text answer of gen ${t.generation}` }]));
    const textChat = newChat(suite.app);
    await setMode('text');
    const textAnchor = await say(textChat, 'text first, then cards');
    await pump(textChat);
    await flushOnly(textChat);
    const first = await doomedRun(textChat);
    expect(await first.run).toMatchObject({ result: { outcome: 'delivered' } });
    await setMode('card_stream');
    await first.die();
    expect(await untilSettled(pool, textChat, 1)).toMatchObject({ outcome: 'delivered', generation: 2 });
    expect(await cardsFor(textAnchor)).toEqual([]);
    const texts = await repliesTo(textAnchor);
    expect(texts.map((r) => JSON.parse(r.content))).toEqual([{ text: 'text answer of gen 1' }]);

    // Cards first: the first generation's card is streaming when it dies; the operator switches to text.
    setAgentOverride(
      scriptedAgent((t) =>
        t.generation === 1
          ? [{ show: 'card first' }, { hang: true }]
          : [{ show: 'card again' }, { done: 'card, complete' }],
      ),
    );
    const cardChat = newChat(suite.app);
    const cardAnchor = await say(cardChat, 'cards first, then text');
    await pump(cardChat);
    await flushOnly(cardChat);
    const second = await doomedRun(cardChat);
    await until(
      'the card sent',
      () => cardsFor(cardAnchor),
      (cs) => cs.some((c) => c.sent !== null),
    );
    await setMode('text');
    await second.die();
    expect(await untilSettled(pool, cardChat, 1)).toMatchObject({ outcome: 'delivered', generation: 2 });
    const card = await onlyCard(cardAnchor);
    expect(card.finished).toBe(true);
    expect(textOfCard(card)).toBe('card, complete');
    expect(await repliesTo(cardAnchor)).toHaveLength(1);
    second.abort.abort(new Error('the old incarnation ends'));
    await second.run;
  });

  it('card.create_refused_falls_back_to_text: an app CardKit refuses (no scope) still gets its answer, as one text reply', async () => {
    setAgentOverride(scriptedAgent(() => [{ show: 'part', visible: false }, { done: 'the whole answer' }]));
    const { chat, anchor } = await startedTurn('no cardkit here');
    await emu('faults', { route: 'cardkit.create', kind: '5xx', status: 403, times: 50 });
    await fireDebounce(pool, chat);
    const turn = await untilSettled(pool, chat, 1);
    expect(turn).toMatchObject({ outcome: 'delivered', generation: 1 });
    expect(await cardsFor(anchor)).toEqual([]);
    const replies = await repliesTo(anchor);
    expect(replies).toHaveLength(1);
    expect(JSON.parse(replies[0]!.content)).toEqual({ text: 'the whole answer' });
  });
});
