import { describe, expect, it } from 'vitest';
import { effectRegistry } from '../../workers/effects/registry';
import { drainInstance } from '../../workers/effects/runner';
import { effectConfig } from '../../workers/effects/types';
import { advanceDbClock } from '../helpers/db';
import { emu } from '../lark/helpers';
import {
  engineSuite,
  fireDebounce,
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

describe('conversation turns', { timeout: 30_000 }, () => {
  it('three messages inside the debounce window become one turn with one reply', async () => {
    const chat = newChat(suite.app);
    const ids = [await say(chat, 'one'), await say(chat, 'two'), await say(chat, 'three')];
    await pump(chat);
    const waiting = await stateOf(pool, chat);
    expect(waiting.pending.map((p) => p.messageId)).toEqual(ids);
    expect(waiting.turn).toBeNull();
    expect(await turns(pool, chat)).toEqual([]); // nothing before the debounce

    await fireDebounce(pool, chat);
    const [turn] = await untilSettled(pool, chat, 1).then(() => turns(pool, chat));
    expect(turn).toMatchObject({
      turn_no: 1,
      input_count: 3,
      anchor_message_id: ids[2],
      outcome: 'delivered',
    });
    expect(Number(turn!.cutoff_position)).toBe(waiting.pending[2]!.position);
    const replies = await repliesTo(ids[2]!);
    expect(replies.map(textOf)).toEqual(['echo (3): one | two | three']);
    expect(replies[0]!.message_id).toBe(turn!.reply_message_id);
    expect(await repliesTo(ids[0]!)).toEqual([]);
    expect(await repliesTo(ids[1]!)).toEqual([]);
    expect((await stateOf(pool, chat)).pending).toEqual([]);
  });

  it('a message during a running turn goes to the next turn', async () => {
    const chat = newChat(suite.app);
    const first = await say(chat, 'first');
    await pump(chat);
    await advanceDbClock(pool, PAST_DEBOUNCE_MS);
    // The flush alone (no effect run yet): turn 1 is running with its cutoff recorded.
    await drainInstance(pool, effectRegistry, chat.sessionId, effectConfig());
    const running = await stateOf(pool, chat);
    expect(running.turn).toMatchObject({ turnNo: 1, anchorMessageId: first });
    const [t1] = await turns(pool, chat);
    expect(t1).toMatchObject({ turn_no: 1, outcome: null, input_count: 1 });

    const second = await say(chat, 'second');
    await pump(chat); // runs turn 1's reply and settles it; `second` waits for its debounce
    expect((await turns(pool, chat))[0]).toMatchObject({ outcome: 'delivered', anchor_message_id: first });
    expect((await repliesTo(first)).map(textOf)).toEqual(['echo: first']);
    const after = await stateOf(pool, chat);
    expect(after.turn).toBeNull();
    expect(after.pending.map((p) => p.messageId)).toEqual([second]);

    await fireDebounce(pool, chat);
    const t2 = await untilSettled(pool, chat, 2);
    expect(t2).toMatchObject({ anchor_message_id: second, outcome: 'delivered', input_count: 1 });
    expect(Number(t2.first_position)).toBeGreaterThan(Number(t1!.cutoff_position));
    expect((await repliesTo(second)).map(textOf)).toEqual(['echo: second']);
  });

  it('concurrent events of one conversation get distinct positions and coalesce into one turn', async () => {
    const chat = newChat(suite.app);
    const ids = await Promise.all(['p', 'q', 'r', 's', 't'].map((t) => say(chat, t)));
    await pump(chat);
    const { rows } = await pool.query<{ message_id: string; position: string }>(
      'select message_id, position from lark_inbound_messages where session_id = $1 order by position',
      [chat.sessionId],
    );
    expect(rows.map((r) => Number(r.position))).toEqual([1, 2, 3, 4, 5]);
    expect(new Set(rows.map((r) => r.message_id))).toEqual(new Set(ids));
    const waiting = await stateOf(pool, chat);
    expect(waiting.pending.map((p) => p.position)).toEqual([1, 2, 3, 4, 5]);
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 1)).toMatchObject({ input_count: 5, cutoff_position: '5' });
    const anchor = rows[4]!.message_id;
    expect(await repliesTo(anchor)).toHaveLength(1);
  });

  it('token expiry mid-run: the reply refreshes the tenant token once and posts once', async () => {
    const chat = newChat(suite.app);
    const warm = await say(chat, 'warm the token cache');
    await pump(chat);
    await fireDebounce(pool, chat);
    await untilSettled(pool, chat, 1);
    expect(await repliesTo(warm)).toHaveLength(1);

    const next = await say(chat, 'after expiry');
    await pump(chat);
    // The token expires while the turn waits: the reply is the first call to meet it.
    await emu(`apps/${suite.app.appId}/expire-tokens`, {});
    await emu('calls', undefined, 'DELETE');
    await fireDebounce(pool, chat);
    expect(await untilSettled(pool, chat, 2)).toMatchObject({ outcome: 'delivered', generation: 1 });
    expect((await repliesTo(next)).map(textOf)).toEqual(['echo: after expiry']);
    const { calls } = await emu<{ calls: { route: string; appId?: string; status: number }[] }>('calls');
    // The cached token was refused once (an invalid token names no app, so the log is read
    // whole: files run one at a time), a new one was issued, and the post went through.
    expect(
      calls.filter((c) => c.route === 'reply' || c.route === 'token').map((c) => [c.route, c.status]),
    ).toEqual([
      ['reply', 400],
      ['token', 200],
      ['reply', 200],
    ]);
  });
});
