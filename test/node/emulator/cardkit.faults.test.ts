/**
 * Faults on the CardKit routes work as on the reaction and reply routes (emulator/faults.ts):
 * a 5xx and a 429 apply nothing, a lost response applies and answers nothing, a hold keeps
 * the call unanswered and unapplied until it is released (or dropped by a clear).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { listCards, readCard } from '../../helpers/lark-cards';
import { type Answer, cardBody, Harness, streamingCard } from './helpers';

let h: Harness;
beforeAll(async () => {
  h = await Harness.start();
});
afterAll(() => h.emu.close());
beforeEach(() => h.reset());

/** Each CardKit route's call (sequence 2 on a card that took 1) and whether it was applied. */
const ROUTES: Record<
  string,
  { call: (cardId: string) => Promise<Answer>; applied: (cardId: string) => Promise<boolean> }
> = {
  'cardkit.create': {
    call: () => h.api('POST', '/open-apis/cardkit/v1/cards', cardBody(streamingCard('new'))),
    applied: async () => (await listCards(h.base)).length === 2,
  },
  'cardkit.content': {
    call: (id) => h.content(id, 2, 'one two'),
    applied: async (id) => (await readCard(h.base, id)).elements.answer!.text === 'one two',
  },
  'cardkit.settings': {
    call: (id) => h.settings(id, 2, { streaming_mode: false }),
    applied: async (id) => (await readCard(h.base, id)).finished,
  },
  'cardkit.update': {
    call: (id) => h.fullUpdate(id, 2, streamingCard('replaced')),
    applied: async (id) => (await readCard(h.base, id)).elements.answer!.text === 'replaced',
  },
  'cardkit.batch_update': {
    call: (id) => h.batchUpdate(id, 2, [{ action: 'delete_elements', params: { element_ids: ['answer'] } }]),
    applied: async (id) => (await readCard(h.base, id)).elements.answer === undefined,
  },
};

async function streamingCardAt1(): Promise<string> {
  const cardId = await h.createCard();
  expect((await h.content(cardId, 1, 'one')).status).toBe(200);
  return cardId;
}

describe.each(Object.keys(ROUTES))('faults on %s', (route) => {
  const { call, applied } = ROUTES[route]!;

  it('5xx: the status and a plain body, nothing applied', async () => {
    const cardId = await streamingCardAt1();
    await h.control('faults', { route, kind: '5xx', status: 503 });
    const a = await call(cardId);
    expect([a.status, a.body]).toEqual([503, 'upstream error']);
    expect(await applied(cardId)).toBe(false);
    expect((await call(cardId)).status).toBe(200);
    expect(await applied(cardId)).toBe(true);
  });

  it('429: the reset header, nothing applied, the same call goes through after', async () => {
    const cardId = await streamingCardAt1();
    await h.control('faults', { route, kind: '429', resetSeconds: 7 });
    const a = await call(cardId);
    expect([a.status, a.body.code, a.headers.get('x-ogw-ratelimit-reset')]).toEqual([429, 99991400, '7']);
    expect(await applied(cardId)).toBe(false);
    expect((await call(cardId)).status).toBe(200);
  });

  it('lost response: applied, unanswered, logged as dropped with its card', async () => {
    const cardId = await streamingCardAt1();
    await h.control('faults', { route, kind: 'lost_response' });
    await expect(call(cardId)).rejects.toThrow();
    expect(await applied(cardId)).toBe(true);
    const { calls } = await h.control(`calls?route=${route}`);
    const dropped = calls.at(-1);
    expect(dropped.status).toBe('dropped');
    // A lost create still names the card it made: the orphan is findable.
    if (route === 'cardkit.create') expect(dropped.cardId).toBe((await listCards(h.base)).at(-1)!.card_id);
    else expect(dropped.cardId).toBe(cardId);
  });

  it('hold: in flight and unapplied until released, then answered and applied', async () => {
    const cardId = await streamingCardAt1();
    await h.control('faults', { route, kind: 'hold' });
    const pending = call(cardId);
    await h.control('faults/held', { route, count: 1 });
    expect(await applied(cardId)).toBe(false);
    expect(await h.control('faults/release', {})).toEqual({ released: 1 });
    expect((await pending).status).toBe(200);
    expect(await applied(cardId)).toBe(true);
  });
});

describe('faults on CardKit as a group and on the reply that sends a card', () => {
  it('cardkit.* reaches every CardKit route; a cleared hold drops the call with nothing applied', async () => {
    const cardId = await streamingCardAt1();
    await h.control('faults', { route: 'cardkit.*', kind: 'hold', times: 2 });
    // Settled together: a drop of one while the test awaits the other is not an unhandled rejection.
    const both = Promise.allSettled([
      h.content(cardId, 2, 'held'),
      h.settings(cardId, 3, { streaming_mode: false }),
    ]);
    const held = await h.control('faults/held', { route: 'cardkit.*', count: 2 });
    expect(held.held.map((c: { route: string }) => c.route).sort()).toEqual([
      'cardkit.content',
      'cardkit.settings',
    ]);
    await h.control('faults', undefined, 'DELETE');
    expect((await both).map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect(await readCard(h.base, cardId)).toMatchObject({ last_sequence: 1, streaming: true });
  });

  it('a lost reply still sent the card; its retry with the same uuid answers that message, no second reply', async () => {
    const question = await h.userMessage();
    const cardId = await h.createCard();
    await h.control('faults', { route: 'reply', kind: 'lost_response' });
    await expect(h.sendCard(question, cardId, 'turn-9')).rejects.toThrow();
    const sent = (await readCard(h.base, cardId)).sent!;
    expect(sent.reply_to).toBe(question);
    const retry = await h.sendCard(question, cardId, 'turn-9');
    expect(retry.body.data.message_id).toBe(sent.message_id);
    expect((await h.control(`messages/${question}/replies`)).items).toHaveLength(1);
    const { calls } = await h.control(`calls?card_id=${cardId}&route=reply`);
    expect(calls.map((c: { status: unknown }) => c.status)).toEqual(['dropped', 200]);
  });
});
