/**
 * The emulator's CardKit card through its life: created, sent once as a reply, streamed,
 * finished; the refusals of create and send; and the control API's read of a card (the
 * typed helper the workerd tests use, test/helpers/lark-cards.ts).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { listCards, readCard, setCardKit } from '../../helpers/lark-cards';
import { APP, cardBody, Harness, streamingCard } from './helpers';

let h: Harness;
beforeAll(async () => {
  h = await Harness.start();
});
afterAll(() => h.emu.close());
beforeEach(() => h.reset());

describe('CardKit lifecycle', () => {
  it('create → reply with the card → stream → finish: one reply, text grown, sequences kept, finished', async () => {
    const question = await h.userMessage();
    const cardId = await h.createCard();
    expect(cardId).toMatch(/^\d{1,20}$/);
    expect((await readCard(h.base, cardId)).sent).toBeNull();

    const sent = await h.sendCard(question, cardId, 'turn-1');
    expect(sent.body.code).toBe(0);
    expect(sent.body.data.msg_type).toBe('interactive');
    const t0 = h.now;
    expect((await h.content(cardId, 1, 'Hel')).body.code).toBe(0);
    h.advance(150);
    expect((await h.content(cardId, 2, 'Hello')).body.code).toBe(0);
    h.advance(150);
    expect((await h.content(cardId, 3, 'Goodbye')).body.code).toBe(0);
    const streaming = await readCard(h.base, cardId);
    expect(streaming).toMatchObject({ streaming: true, finished: false, finished_at: null });
    h.advance(150);
    expect((await h.settings(cardId, 4, { streaming_mode: false })).body.code).toBe(0);

    const card = await readCard(h.base, cardId);
    expect(card).toMatchObject({
      card_id: cardId,
      app_id: APP.app_id,
      streaming: false,
      finished: true,
      finished_at: t0 + 450,
      sent: { message_id: sent.body.data.message_id, reply_to: question, uuid: 'turn-1', at: t0 },
      elements: { answer: { tag: 'markdown', text: 'Goodbye' } },
      last_sequence: 4,
      refused: [],
      ignored: [],
    });
    expect(card.sequences).toEqual([
      { sequence: 1, route: 'cardkit.content', at: t0, content: 'append' },
      { sequence: 2, route: 'cardkit.content', at: t0 + 150, content: 'append' },
      { sequence: 3, route: 'cardkit.content', at: t0 + 300, content: 'replace' },
      { sequence: 4, route: 'cardkit.settings', at: t0 + 450 },
    ]);
    const replies = await h.control(`messages/${question}/replies`);
    expect(replies.items).toHaveLength(1);
    // The call log names the card on every call about it, the create's answer included.
    const calls = await h.control(`calls?card_id=${cardId}`);
    expect(calls.calls.map((c: { route: string }) => c.route)).toEqual([
      'cardkit.create',
      'reply',
      'cardkit.content',
      'cardkit.content',
      'cardkit.content',
      'cardkit.settings',
    ]);
  });

  it('full update and batch update apply, share the sequence, and can finish the card', async () => {
    const cardId = await h.createCard(streamingCard('draft'));
    expect((await h.fullUpdate(cardId, 10, streamingCard('rewritten'))).body.code).toBe(0);
    const batch = await h.batchUpdate(cardId, 11, [
      {
        action: 'add_elements',
        params: { type: 'append', elements: [{ tag: 'markdown', element_id: 'foot', content: 'sources' }] },
      },
      {
        action: 'partial_update_element',
        params: { element_id: 'answer', partial_element: { content: 'final' } },
      },
      { action: 'partial_update_setting', params: { settings: { config: { streaming_mode: false } } } },
    ]);
    expect(batch.body.code).toBe(0);
    const card = await readCard(h.base, cardId);
    expect(card.elements).toEqual({
      answer: { tag: 'markdown', text: 'final' },
      foot: { tag: 'markdown', text: 'sources' },
    });
    expect(card).toMatchObject({ finished: true, last_sequence: 11 });
    // A batch with one bad action applies none of them.
    const bad = await h.batchUpdate(cardId, 12, [
      { action: 'delete_elements', params: { element_ids: ['foot'] } },
      { action: 'update_element', params: { element_id: 'missing', element: { tag: 'markdown' } } },
    ]);
    expect(bad.body.code).toBe(300313);
    expect((await readCard(h.base, cardId)).elements.foot).toEqual({ tag: 'markdown', text: 'sources' });
    // A full update with streaming on opens the card again: finished is "now", not "ever".
    expect((await h.fullUpdate(cardId, 13, streamingCard('again'))).body.code).toBe(0);
    expect(await readCard(h.base, cardId)).toMatchObject({
      streaming: true,
      finished: false,
      finished_at: null,
    });
  });

  it('create refuses a card that is not JSON 2.0, has update_multi false or a duplicate element id', async () => {
    const create = (body: unknown) => h.api('POST', '/open-apis/cardkit/v1/cards', body);
    const v1 = { ...streamingCard(), schema: '1.0' };
    const dup = streamingCard();
    dup.body.elements.push({ tag: 'markdown', element_id: 'answer', content: '' });
    const answers = await Promise.all([
      create(cardBody(v1)),
      create(cardBody(streamingCard('', { update_multi: false }))),
      create(cardBody(dup)),
      create({ type: 'template', data: '{}' }),
      create({ type: 'card_json', data: '{not json' }),
    ]);
    expect(answers.map((a) => [a.status, a.body.code])).toEqual([
      [400, 300300],
      [400, 300300],
      [400, 300301],
      [400, 99992402],
      [400, 300300],
    ]);
    expect(await listCards(h.base)).toEqual([]);
  });

  it('a card entity is sent once: the same uuid answers the first message, another uuid is refused', async () => {
    const question = await h.userMessage();
    const cardId = await h.createCard();
    const first = await h.sendCard(question, cardId, 'u-1');
    const again = await h.sendCard(question, cardId, 'u-1');
    expect(again.body.data.message_id).toBe(first.body.data.message_id);
    const other = await h.sendCard(question, cardId, 'u-2');
    expect([other.status, other.body.code]).toEqual([400, 230099]);
    const noUuid = await h.sendCard(await h.userMessage(), cardId);
    expect(noUuid.body.code).toBe(230099);
    const card = await readCard(h.base, cardId);
    expect(card.refused.map((r) => [r.route, r.uuid, r.code])).toEqual([
      ['reply', 'u-2', 230099],
      ['reply', undefined, 230099],
    ]);
    expect((await h.control(`messages/${question}/replies`)).items).toHaveLength(1);
  });

  it('with resend "dedupe" a second send answers the first message and sends nothing', async () => {
    await setCardKit(h.base, { resend: 'dedupe' });
    const question = await h.userMessage();
    const cardId = await h.createCard();
    const first = await h.sendCard(question, cardId, 'u-1');
    const other = await h.sendCard(question, cardId, 'u-2');
    expect(other.body).toMatchObject({ code: 0, data: { message_id: first.body.data.message_id } });
    expect((await h.control(`messages/${question}/replies`)).items).toHaveLength(1);
    expect((await readCard(h.base, cardId)).ignored).toMatchObject([
      { route: 'reply', uuid: 'u-2', reason: 'resend' },
    ]);
  });

  it("an unknown card, another app's card and an expired card cannot be sent or updated", async () => {
    const question = await h.userMessage();
    const theirs = await h.createCard(streamingCard(), h.otherToken);
    expect((await h.sendCard(question, theirs, 'x')).body.code).toBe(230099);
    expect((await h.sendCard(question, '7000', 'y')).body.code).toBe(230099);
    expect((await h.content(theirs, 1, 'hijack')).body.code).toBe(300304);
    const mine = await h.createCard();
    h.advance(14 * 24 * 3600_000 - 1);
    await h.renewTokens();
    expect((await h.content(mine, 1, 'last moment')).body.code).toBe(0);
    h.advance(1);
    expect((await h.content(mine, 2, 'late')).body.code).toBe(300305);
    expect((await h.sendCard(question, mine, 'z')).body.code).toBe(230099);
    expect((await readCard(h.base, theirs)).elements.answer!.text).toBe('');
  });

  it('the control API lists cards by app and message, 404s an unknown card, and a reset clears cards and settings', async () => {
    const question = await h.userMessage();
    const a = await h.createCard();
    const b = await h.createCard();
    await h.createCard(streamingCard(), h.otherToken);
    const sent = await h.sendCard(question, a, 'u');
    expect((await listCards(h.base, { app_id: APP.app_id })).map((c) => c.card_id).sort()).toEqual(
      [a, b].sort(),
    );
    expect((await listCards(h.base, { message_id: question })).map((c) => c.card_id)).toEqual([a]);
    expect(
      (await listCards(h.base, { message_id: sent.body.data.message_id })).map((c) => c.card_id),
    ).toEqual([a]);
    const missing = await fetch(`${h.base}/__emulator/cards/7123`);
    expect(missing.status).toBe(404);
    const refused = await fetch(`${h.base}/__emulator/cardkit`, {
      method: 'POST',
      body: JSON.stringify({ equalSequence: 'maybe' }),
    });
    expect(refused.status).toBe(400);
    expect(await setCardKit(h.base, { staleSequenceCode: 1 })).toMatchObject({ staleSequenceCode: 1 });

    await h.reset();
    expect(await listCards(h.base)).toEqual([]);
    expect((await h.control('cardkit')).staleSequenceCode).toBe(300317);
  });
});
