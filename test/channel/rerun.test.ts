import { describe, expect, it } from 'vitest';
import { setAgentOverride } from '../../workers/agents';
import { PAUSE_LOCK } from '../../workers/channel/pause';
import { rerunTurn } from '../../workers/channel/rerun';
import { effectRegistry } from '../../workers/effects/registry';
import { drainInstance } from '../../workers/effects/runner';
import { effectConfig } from '../../workers/effects/types';
import { advanceDbClock, backendPid, blockedBehind } from '../helpers/db';
import { admin, errorCode, installApp, type TestApp } from '../lark/helpers';
import {
  brokenAgent,
  type Chat,
  engineSuite,
  failedTurn,
  fireDebounce,
  newChat,
  PAST_DEBOUNCE_MS,
  pump,
  repliesTo,
  say,
  stateOf,
  turns,
  untilSettled,
} from './helpers';

/** Issue 33 item 4: re-running a failed turn (workers/channel/rerun.ts), through the Worker and the emulator. */
const suite = engineSuite();
const { pool } = suite;

const rerun = (app: TestApp, turnId: string, body: unknown = { operator: 'carol' }) =>
  admin(`/${app.installationId}/turns/${turnId}/rerun`, { body });
const pause = (app: TestApp) => admin(`/${app.installationId}/pause`, { body: { operator: 'alice' } });
const resume = (app: TestApp, backlog: string) =>
  admin(`/${app.installationId}/resume`, { body: { operator: 'bob', backlog } });

async function rerunColumns(chat: Chat) {
  const { rows } = await pool.query<{ turn_no: number; rerun_of: number | null; rerun: boolean }>(
    `select turn_no, rerun_of, rerun_requested_at is not null as rerun from channel_turns
      where session_id = $1 order by turn_no`,
    [chat.sessionId],
  );
  return rows;
}

async function rerunMessages(chat: Chat) {
  const { rows } = await pool.query<{ message_key: string }>(
    `select message_key from actor_mailbox where instance_id = $1 and message_key like 'in:rerun:%' order by id`,
    [chat.sessionId],
  );
  return rows.map((r) => r.message_key);
}

/**
 * Waits until `count` backends wait, directly or through one another, on what `holderPid`
 * holds: a row lock's second waiter queues behind the first (its tuple lock), not behind the
 * holder. Polls; never sleeps a fixed time.
 */
async function queuedBehind(holderPid: number, count: number, timeoutMs = 10_000): Promise<void> {
  const started = Date.now();
  for (;;) {
    const { rows } = await pool.query<{ pid: number; by: number[] }>(
      `select pid, pg_blocking_pids(pid) as by from pg_stat_activity where cardinality(pg_blocking_pids(pid)) > 0`,
    );
    const queued = new Set([holderPid]);
    for (let grew = true; grew; ) {
      grew = false;
      for (const r of rows)
        if (!queued.has(r.pid) && r.by.some((b) => queued.has(b))) {
          queued.add(r.pid);
          grew = true;
        }
    }
    if (queued.size - 1 >= count) return;
    if (Date.now() - started > timeoutMs)
      throw new Error(`${queued.size - 1} of ${count} queued behind ${holderPid}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const uuidOf = (r: unknown) => (r as { reply_uuid: string }).reply_uuid;

describe('re-run a failed turn (issue 33 item 4)', { timeout: 90_000 }, () => {
  it('rerun.happy: a new turn over the same inputs posts a reply under a new uuid, recorded with the operator', async () => {
    const app = suite.app;
    const chat = newChat(app);
    const { messageId, turn } = await failedTurn(pool, chat, 'first try fails');
    expect(await repliesTo(messageId)).toEqual([]);

    const res = await rerun(app, turn.delivery_key);
    expect(res.status).toBe(202);
    expect(await res.json()).toEqual({ rerun: { session_id: chat.sessionId, turn_no: 1, inputs: 1 } });
    await pump(chat);
    await fireDebounce(pool, chat);
    const again = await untilSettled(pool, chat, 2);
    expect(again).toMatchObject({ outcome: 'delivered', anchor_message_id: messageId, input_count: 1 });
    expect(again.delivery_key).not.toBe(turn.delivery_key);
    const replies = await repliesTo(messageId);
    expect(replies).toHaveLength(1);
    expect(uuidOf(replies[0])).toBe(again.delivery_key);
    expect(await rerunColumns(chat)).toEqual([
      { turn_no: 1, rerun_of: null, rerun: true },
      { turn_no: 2, rerun_of: 1, rerun: false },
    ]);
    const { rows } = await pool.query(
      'select operator, action, outcome from console_audit where target = $1',
      [`turn:${turn.delivery_key}`],
    );
    expect(rows).toEqual([
      { operator: 'carol', action: 'turn.rerun', outcome: 're-run of turn 1 (1 inputs)' },
    ]);

    // Once: the same failed turn again is refused, and nothing more is queued.
    const twice = await rerun(app, turn.delivery_key);
    expect(twice.status).toBe(409);
    expect(await errorCode(twice)).toBe('turn_already_rerun');
    expect(await rerunMessages(chat)).toEqual([`in:rerun:1:${turn.cutoff_position}`]);
  });

  it('rerun.refusals: 409 for a delivered turn and while paused; 404 for no such turn; 400 for a bad body; nothing written', async () => {
    const app = await installApp();
    const chat = newChat(app);
    const { turn } = await failedTurn(pool, chat);
    const m2 = await say(chat, 'this one is answered');
    await pump(chat);
    await fireDebounce(pool, chat);
    const delivered = await untilSettled(pool, chat, 2);
    expect(delivered.anchor_message_id).toBe(m2);

    const notFailed = await rerun(app, delivered.delivery_key);
    expect(notFailed.status).toBe(409);
    expect(await errorCode(notFailed)).toBe('turn_not_failed');

    expect((await pause(app)).status).toBe(200);
    const paused = await rerun(app, turn.delivery_key);
    expect(paused.status).toBe(409);
    expect(await errorCode(paused)).toBe('installation_paused');
    expect((await resume(app, 'drop')).status).toBe(200);

    // Another installation's turn, an unknown uuid and a malformed id name no turn.
    const other = await installApp();
    for (const res of [
      await rerun(other, turn.delivery_key),
      await rerun(app, crypto.randomUUID()),
      await rerun(app, 'not-a-uuid'),
    ]) {
      expect(res.status).toBe(404);
      expect(await errorCode(res)).toBe('not_found');
    }
    for (const body of [{}, { operator: 'carol', extra: 1 }]) {
      const bad = await rerun(app, turn.delivery_key, body);
      expect(bad.status).toBe(400);
      expect(await errorCode(bad)).toBe('validation_failed');
    }
    expect(await rerunColumns(chat)).toEqual([
      { turn_no: 1, rerun_of: null, rerun: false },
      { turn_no: 2, rerun_of: null, rerun: false },
    ]);
    expect(await rerunMessages(chat)).toEqual([]);
  });

  it('rerun.turn_running: refused while a turn of the chat runs, accepted once it has ended', async () => {
    const app = await installApp();
    const chat = newChat(app);
    const { turn } = await failedTurn(pool, chat);
    await say(chat, 'a new question');
    await pump(chat);
    // The handler starts turn 2 (its reply effect not run yet: no host round).
    await advanceDbClock(pool, PAST_DEBOUNCE_MS);
    await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
    expect((await turns(pool, chat))[1]).toMatchObject({ turn_no: 2, outcome: null });

    const running = await rerun(app, turn.delivery_key);
    expect(running.status).toBe(409);
    expect(await errorCode(running)).toBe('turn_running');
    expect(await rerunMessages(chat)).toEqual([]);

    await untilSettled(pool, chat, 2);
    expect((await rerun(app, turn.delivery_key)).status).toBe(202);
    await pump(chat);
    expect((await stateOf(pool, chat)).pending.map((p) => p.rerunOf)).toEqual([1]);
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 3)).toMatchObject({ outcome: 'delivered', input_count: 1 });
  });

  it('rerun.one_waiting_per_chat: while one re-run of a chat waits to start, a re-run of its other failed turn is refused', async () => {
    const app = await installApp();
    const chat = newChat(app);
    const first = (await failedTurn(pool, chat, 'one')).turn;
    setAgentOverride(brokenAgent);
    await say(chat, 'two');
    await pump(chat);
    await fireDebounce(pool, chat);
    const second = await untilSettled(pool, chat, 2);
    expect(second.outcome).toBe('failed');
    setAgentOverride(null);
    expect((await rerun(app, first.delivery_key)).status).toBe(202);
    for (const settle of [false, true]) {
      if (settle) await pump(chat); // handled: now waiting in the actor's state, not the mailbox
      const refused = await rerun(app, second.delivery_key);
      expect(refused.status).toBe(409);
      expect(await errorCode(refused)).toBe('turn_running');
    }
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 3)).toMatchObject({ outcome: 'delivered', input_count: 1 });
    expect((await rerun(app, second.delivery_key)).status).toBe(202);
  });

  it('rerun.turn_started_before_handled: a re-run whose message arrives after a new turn started waits for that turn, never dropped', async () => {
    const app = await installApp();
    const chat = newChat(app);
    const { messageId, turn } = await failedTurn(pool, chat);
    await say(chat, 'a new question');
    await pump(chat);
    await advanceDbClock(pool, PAST_DEBOUNCE_MS);
    await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
    expect((await turns(pool, chat))[1]).toMatchObject({ turn_no: 2, outcome: null });
    // The window the route cannot close: its commit came first (no turn ran then), the turn
    // start next, the host's handling of the re-run's message last. The route's own message,
    // enqueued as it does (the same statement), stands for it.
    const { rows } = await pool.query<{ message_key: string; payload: unknown }>(
      `select message_key, payload from actor_mailbox where instance_id = $1 and message_key = $2`,
      [chat.sessionId, `in:${turn.cutoff_position}`],
    );
    const payload = { ...(rows[0]!.payload as object), rerunOf: 1 };
    await pool.query(
      `insert into actor_mailbox (instance_id, message_key, payload) values ($1, $2, $3::jsonb)`,
      [chat.sessionId, `in:rerun:1:${turn.cutoff_position}`, JSON.stringify(payload)],
    );
    await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
    expect((await stateOf(pool, chat)).pending.map((p) => p.messageId)).toEqual([messageId]);
    await untilSettled(pool, chat, 2);
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 3)).toMatchObject({
      outcome: 'delivered',
      anchor_message_id: messageId,
      input_count: 1,
    });
    expect(await repliesTo(messageId)).toHaveLength(1);
  });

  it('rerun.exactly_once_race: two requests for one turn, both queued behind the state-row lock, start one turn', async () => {
    const app = await installApp();
    const chat = newChat(app);
    const { messageId, turn } = await failedTurn(pool, chat);
    const holder = await pool.connect();
    let answers: Response[];
    try {
      await holder.query('begin');
      await holder.query('select 1 from actor_instances where id = $1 for no key update', [chat.sessionId]);
      const first = rerun(app, turn.delivery_key);
      const second = rerun(app, turn.delivery_key);
      await queuedBehind(await backendPid(holder), 2);
      await holder.query('commit');
      answers = await Promise.all([first, second]);
    } finally {
      await holder.query('rollback');
      holder.release();
    }
    const statuses = answers.map((r) => r.status).sort();
    expect(statuses).toEqual([202, 409]);
    expect(await errorCode(answers.find((r) => r.status === 409)!)).toBe('turn_already_rerun');
    await pump(chat);
    await fireDebounce(pool, chat);
    await untilSettled(pool, chat, 2);
    await fireDebounce(pool, chat);
    expect((await turns(pool, chat)).map((t) => [t.turn_no, t.outcome])).toEqual([
      [1, 'failed'],
      [2, 'delivered'],
    ]);
    expect(await repliesTo(messageId)).toHaveLength(1);
  });

  it('rerun.pause_race_at_request: a re-run queued behind a pause reads it and is refused, writing nothing', async () => {
    const app = await installApp();
    const chat = newChat(app);
    const { turn } = await failedTurn(pool, chat);
    const holder = await pool.connect();
    let refused: Response;
    let paused: Response;
    try {
      await holder.query('begin');
      await holder.query(PAUSE_LOCK, [app.installationId]);
      const holderPid = await backendPid(holder);
      // The pause queues first for the installation's row, then the re-run (behind either).
      const pausing = pause(app);
      const pausePid = await blockedBehind(pool, holderPid);
      const rerunning = rerun(app, turn.delivery_key);
      await queuedBehind(holderPid, 2);
      expect(pausePid).toBeGreaterThan(0);
      await holder.query('commit');
      [paused, refused] = await Promise.all([pausing, rerunning]);
    } finally {
      await holder.query('rollback');
      holder.release();
    }
    expect(paused.status).toBe(200);
    expect(refused.status).toBe(409);
    expect(await errorCode(refused)).toBe('installation_paused');
    expect(await rerunColumns(chat)).toEqual([{ turn_no: 1, rerun_of: null, rerun: false }]);
    expect(await rerunMessages(chat)).toEqual([]);
  });

  it('rerun.pause_after_accept: a re-run accepted before a pause is never lost to it: it waits for the resume, then is answered (or dropped)', async () => {
    // When the host handles the re-run's message: before the pause, while paused, or only
    // after the resume. The function both routes call (no wake-up of its own) makes the last
    // two exact: the message stays in the mailbox until the test pumps.
    const orders = ['handled_before_pause', 'handled_while_paused', 'handled_after_resume'] as const;
    for (const order of orders)
      for (const backlog of ['answer', 'drop'] as const) {
        const app = await installApp();
        const chat = newChat(app);
        const { messageId, turn } = await failedTurn(pool, chat);
        if (order === 'handled_before_pause') {
          expect((await rerun(app, turn.delivery_key)).status).toBe(202);
          await pump(chat);
        } else {
          expect(await rerunTurn(pool, app.installationId, turn.delivery_key)).toMatchObject({ inputs: 1 });
        }
        expect((await pause(app)).status).toBe(200);
        if (order !== 'handled_after_resume') {
          await pump(chat);
          await fireDebounce(pool, chat);
          await fireDebounce(pool, chat);
          expect(await turns(pool, chat)).toHaveLength(1);
          expect((await stateOf(pool, chat)).pending.map((p) => p.messageId)).toEqual([messageId]);
        } else {
          expect(await rerunMessages(chat)).toEqual([`in:rerun:1:${turn.cutoff_position}`]);
        }

        const res = await resume(app, backlog);
        expect(await res.json(), `${order}, ${backlog}`).toMatchObject({ backlog, conversations: 1 });
        await pump(chat);
        if (backlog === 'answer') {
          expect(await untilSettled(pool, chat, 2)).toMatchObject({
            outcome: 'delivered',
            anchor_message_id: messageId,
          });
          expect(await rerunColumns(chat)).toEqual([
            { turn_no: 1, rerun_of: null, rerun: true },
            { turn_no: 2, rerun_of: 1, rerun: false },
          ]);
          expect(await repliesTo(messageId)).toHaveLength(1);
        } else {
          await fireDebounce(pool, chat);
          expect(await turns(pool, chat), `${order}, ${backlog}`).toHaveLength(1);
          expect((await stateOf(pool, chat)).pending).toEqual([]);
          expect(await repliesTo(messageId)).toEqual([]);
        }
      }
  });
});
