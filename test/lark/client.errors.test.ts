import { afterEach, describe, expect, it, vi } from 'vitest';
import { Deadline } from '../../workers/clock';
import { LarkClient } from '../../workers/lark/client';
import { LarkApiError } from '../../workers/lark/errors';
import { emu, installApp, larkBase, larkFailure } from './helpers';

const call = () => ({ deadline: new Deadline(5000) });

async function client() {
  const app = await installApp();
  const lark = new LarkClient({ baseUrl: larkBase(), appId: app.appId, appSecret: app.appSecret });
  const message = await emu<{ message_id: string }>('messages', { text: 'hello' });
  return { app, lark, messageId: message.message_id };
}

afterEach(async () => {
  await emu('faults', undefined, 'DELETE');
});

describe('LarkClient against the emulator', () => {
  it('creates, lists (paged) and deletes reactions with typed results', async () => {
    const { app, lark, messageId } = await client();
    const created = await lark.createReaction(messageId, 'Typing', call());
    expect(created.operator).toEqual({ operator_id: app.appId, operator_type: 'app' });
    for (let i = 0; i < 3; i++) await emu(`messages/${messageId}/reactions`, { emoji_type: 'Typing' });
    const first = await lark.listReactions(messageId, { reactionType: 'Typing', pageSize: 2 }, call());
    expect(first.items).toHaveLength(2);
    expect(first.has_more).toBe(true);
    const second = await lark.listReactions(
      messageId,
      { reactionType: 'Typing', pageSize: 2, pageToken: first.page_token },
      call(),
    );
    expect(second.has_more).toBe(false);
    expect(second.page_token).toBeUndefined();
    const deleted = await lark.deleteReaction(messageId, created.reaction_id, call());
    expect(deleted.reaction_id).toBe(created.reaction_id);
  });

  it('classifies already-gone: recalled message 231003, deleted reaction 231011', async () => {
    const { lark, messageId } = await client();
    const r = await lark.createReaction(messageId, 'Typing', call());
    await lark.deleteReaction(messageId, r.reaction_id, call());
    const again = await larkFailure(lark.deleteReaction(messageId, r.reaction_id, call()));
    expect([again.kind, again.code, again.httpStatus]).toEqual(['already_gone', 231011, 400]);
    await emu(`messages/${messageId}/recall`, {});
    const recalled = await larkFailure(lark.createReaction(messageId, 'Typing', call()));
    expect([recalled.kind, recalled.code]).toEqual(['already_gone', 231003]);
  });

  it('classifies permanent: unknown emoji 231001, someone else’s reaction 231007', async () => {
    const { lark, messageId } = await client();
    const bad = await larkFailure(lark.createReaction(messageId, 'PROCESSING', call()));
    expect([bad.kind, bad.code]).toEqual(['permanent', 231001]);
    const human = await emu<{ reaction_id: string }>(`messages/${messageId}/reactions`, {
      emoji_type: 'Typing',
      user_open_id: 'ou_human',
    });
    const notMine = await larkFailure(lark.deleteReaction(messageId, human.reaction_id, call()));
    expect([notMine.kind, notMine.code]).toEqual(['permanent', 231007]);
    const otherApp = await emu<{ reaction_id: string }>(`messages/${messageId}/reactions`, {
      emoji_type: 'Typing',
      app_id: 'cli_other',
    });
    expect((await larkFailure(lark.deleteReaction(messageId, otherApp.reaction_id, call()))).code).toBe(
      231007,
    );
  });

  it('classifies retryable: 429 with x-ogw-ratelimit-reset, 5xx, lost response, timeout', async () => {
    const { lark, messageId } = await client();
    await emu('faults', { route: 'reactions.create', kind: '429', resetSeconds: 7 });
    const limited = await larkFailure(lark.createReaction(messageId, 'Typing', call()));
    expect([limited.kind, limited.code, limited.httpStatus, limited.retryAfterSeconds]).toEqual([
      'retryable',
      99991400,
      429,
      7,
    ]);
    await emu('faults', { route: 'reactions.create', kind: '5xx', status: 503 });
    const down = await larkFailure(lark.createReaction(messageId, 'Typing', call()));
    expect([down.kind, down.httpStatus]).toEqual(['retryable', 503]);
    await emu('faults', { route: 'reactions.create', kind: 'lost_response' });
    expect((await larkFailure(lark.createReaction(messageId, 'Typing', call()))).kind).toBe('retryable');
    // The lost create was applied: the reaction exists.
    const seen = await emu<{ items: unknown[] }>(`messages/${messageId}/reactions`);
    expect(seen.items).toHaveLength(1);
    // Lark holds the list unanswered (until afterEach drops it): only the budget can end the
    // call. The timer the client arms is observed, not timed: it must be the caller's 300 ms.
    await emu('faults', { route: 'reactions.list', kind: 'hold' });
    const timers = vi.spyOn(AbortSignal, 'timeout');
    const slow = await larkFailure(lark.listReactions(messageId, {}, { deadline: new Deadline(300) }));
    const armed = timers.mock.calls.map(([ms]) => ms);
    timers.mockRestore();
    expect([slow.kind, slow.code]).toEqual(['retryable', 0]);
    expect(slow.message).toMatch(
      /^GET \/open-apis\/im\/v1\/messages\/:id\/reactions timed out after \d+ ms$/,
    );
    expect(armed).toHaveLength(1);
    expect(armed[0]).toBeGreaterThan(0);
    expect(armed[0]).toBeLessThanOrEqual(300);
    const { held } = await emu<{ held: { route: string }[] }>('faults');
    expect(held).toEqual([{ route: 'reactions.list' }]); // it reached Lark: in flight, not refused
  });

  it('refreshes an expired token once mid-run and retries', async () => {
    const { app, lark, messageId } = await client();
    await lark.createReaction(messageId, 'Typing', call());
    await emu('calls', undefined, 'DELETE');
    await emu(`apps/${app.appId}/expire-tokens`, {});
    await lark.createReaction(messageId, 'OK', call());
    const { calls } = await emu<{ calls: { route: string; appId?: string; status: number }[] }>('calls');
    // An invalid token names no app, so the log is read whole (files run one at a time).
    expect(calls.map((c) => [c.route, c.status])).toEqual([
      ['reactions.create', 400],
      ['token', 200],
      ['reactions.create', 200],
    ]);
  });

  it('gives up after one refresh when the token keeps failing (retryable, code 99991663)', async () => {
    const { lark, messageId } = await client();
    await emu('faults', { route: 'reactions.create', kind: 'expired_token', times: 2 });
    const err = await larkFailure(lark.createReaction(messageId, 'Typing', call()));
    expect([err.kind, err.code]).toEqual(['retryable', 99991663]);
  });

  it('reuses the cached token across calls: one token request per app, each app its own token', async () => {
    // Two fresh apps: neither has a cached token yet.
    const a = await client();
    const b = await client();
    await emu('calls', undefined, 'DELETE');
    for (let i = 0; i < 3; i++) await a.lark.listReactions(a.messageId, {}, call());
    for (let i = 0; i < 2; i++) await b.lark.listReactions(b.messageId, {}, call());
    const { calls } = await emu<{ calls: { route: string; appId?: string; status: number }[] }>('calls');
    // The emulator names the app a token belongs to on every authed call (token calls name none).
    const list = (app: string) => ['reactions.list', app, 200];
    expect(calls.map((c) => [c.route, c.appId ?? null, c.status])).toEqual([
      ['token', null, 200],
      list(a.app.appId),
      list(a.app.appId),
      list(a.app.appId),
      ['token', null, 200],
      list(b.app.appId),
      list(b.app.appId),
    ]);
  });

  it('reply deduplicates by uuid: a retried delivery posts once', async () => {
    const { lark, messageId } = await client();
    await emu('faults', { route: 'reply', kind: 'lost_response' });
    const input = {
      content: JSON.stringify({ text: 'pong' }),
      uuid: `effect-${crypto.randomUUID()}`.slice(0, 50),
    };
    expect((await larkFailure(lark.replyMessage(messageId, input, call()))).kind).toBe('retryable');
    const sent = await lark.replyMessage(messageId, input, call());
    const replies = await emu<{ items: { message_id: string }[] }>(`messages/${messageId}/replies`);
    expect(replies.items.map((m) => m.message_id)).toEqual([sent.message_id]);
  });

  it('a wrong app secret is permanent (10015) and an unknown path a plain-text 404', async () => {
    const app = await installApp();
    const bad = new LarkClient({ baseUrl: larkBase(), appId: app.appId, appSecret: 'wrong' });
    const err = await larkFailure(bad.tenantToken(call()));
    expect([err.kind, err.code]).toEqual(['permanent', 10015]);
    const res = await fetch(`${larkBase()}/open-apis/nothing/here`);
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type')).toMatch(/text\/plain/);
    expect(await res.text()).toBe('404 page not found');
  });

  it('a TypeError of ours on the call path (a body that cannot serialise) is thrown as itself, not a Lark failure', async () => {
    const { lark, messageId } = await client();
    const input = { content: 1n as unknown as string, uuid: `effect-${crypto.randomUUID()}`.slice(0, 50) };
    const err = await lark.replyMessage(messageId, input, call()).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(TypeError);
    expect(err).not.toBeInstanceOf(LarkApiError);
  });
});
