/**
 * The emulator's sequence and uuid gates on CardKit updates: a sequence must be in 1…2³¹−1 and
 * above every one the card accepted, across all four update routes; the choices where Lark is
 * unconfirmed (equal sequence, repeated uuid, stale code, content after finish) are switches.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { readCard, setCardKit } from '../../helpers/lark-cards';
import { Harness, streamingCard } from './helpers';

let h: Harness;
beforeAll(async () => {
  h = await Harness.start();
});
afterAll(() => h.emu.close());
beforeEach(() => h.reset());

describe('CardKit sequences', () => {
  it('a stale sequence is refused on every update route, recorded, and changes nothing', async () => {
    const cardId = await h.createCard(streamingCard('start'));
    expect((await h.content(cardId, 5, 'start and more')).body.code).toBe(0);
    const stale = [
      await h.content(cardId, 4, 'older writer'),
      await h.content(cardId, 5, 'same sequence'),
      await h.settings(cardId, 3, { streaming_mode: false }),
      await h.fullUpdate(cardId, 2, streamingCard('replaced')),
      await h.batchUpdate(cardId, 1, [{ action: 'delete_elements', params: { element_ids: ['answer'] } }]),
    ];
    expect(stale.map((a) => [a.status, a.body.code])).toEqual(Array(5).fill([400, 300317]));
    const card = await readCard(h.base, cardId);
    expect(card).toMatchObject({
      streaming: true,
      last_sequence: 5,
      elements: { answer: { text: 'start and more' } },
    });
    expect(card.sequences.map((op) => op.sequence)).toEqual([5]);
    expect(card.refused.map((r) => [r.route, r.sequence, r.code])).toEqual([
      ['cardkit.content', 4, 300317],
      ['cardkit.content', 5, 300317],
      ['cardkit.settings', 3, 300317],
      ['cardkit.update', 2, 300317],
      ['cardkit.batch_update', 1, 300317],
    ]);
    // The next writer above every used sequence goes through, whichever route it takes.
    expect((await h.settings(cardId, 6, { streaming_mode: false })).body.code).toBe(0);
  });

  it('a sequence outside 1…2³¹−1 or not an integer is refused', async () => {
    const cardId = await h.createCard();
    const answers = [];
    for (const seq of [0, -1, 2 ** 31, 1.5, '3', null])
      answers.push((await h.content(cardId, seq, 'x')).body.code);
    // 0 and below are "not above the last" (third parties report 300317 for 0); the rest fail validation.
    expect(answers).toEqual([300317, 300317, 99992402, 99992402, 99992402, 99992402]);
    expect((await readCard(h.base, cardId)).sequences).toEqual([]);
    expect((await h.content(cardId, 2 ** 31 - 1, 'top')).body.code).toBe(0);
    expect((await h.content(cardId, 2 ** 31 - 1, 'no room left')).body.code).toBe(300317);
  });

  it('the stale code is configurable, and an equal sequence can be ignored instead of refused', async () => {
    await setCardKit(h.base, { staleSequenceCode: 230020, equalSequence: 'ignore' });
    const cardId = await h.createCard();
    await h.content(cardId, 7, 'seven');
    const equal = await h.content(cardId, 7, 'seven, again');
    expect([equal.status, equal.body.code]).toEqual([200, 0]);
    expect((await h.content(cardId, 6, 'six')).body.code).toBe(230020);
    const card = await readCard(h.base, cardId);
    expect(card.elements.answer!.text).toBe('seven');
    expect(card.ignored).toMatchObject([{ route: 'cardkit.content', sequence: 7, reason: 'equal_sequence' }]);
    expect(card.refused).toMatchObject([{ sequence: 6, code: 230020 }]);
  });

  it('an update repeating an accepted uuid is answered, not applied; with updateUuid "ignore" it meets the sequence gate', async () => {
    const cardId = await h.createCard();
    await h.content(cardId, 1, 'one', 'op-1');
    const retry = await h.content(cardId, 1, 'one', 'op-1');
    expect(retry.body.code).toBe(0);
    // A uuid counts only once it was accepted: a refused op's uuid may come back.
    expect((await h.content(cardId, 1, 'two', 'op-2')).body.code).toBe(300317);
    expect((await h.content(cardId, 2, 'two', 'op-2')).body.code).toBe(0);
    expect((await readCard(h.base, cardId)).ignored).toMatchObject([{ uuid: 'op-1', reason: 'uuid' }]);
    expect((await h.content(cardId, 3, 'long', 'u'.repeat(65))).body.code).toBe(99992402);

    await setCardKit(h.base, { updateUuid: 'ignore' });
    expect((await h.content(cardId, 2, 'two', 'op-2')).body.code).toBe(300317);
    expect(
      (
        await h.batchUpdate(
          cardId,
          3,
          [{ action: 'partial_update_setting', params: { settings: { config: { streaming_mode: false } } } }],
          'op-1',
        )
      ).body.code,
    ).toBe(0);
  });

  it('content after the card is finished is refused 300309 (switchable to applied)', async () => {
    const cardId = await h.createCard(streamingCard('done'));
    await h.settings(cardId, 1, { streaming_mode: false });
    const late = await h.content(cardId, 2, 'done, and a late token');
    expect([late.status, late.body.code]).toEqual([400, 300309]);
    expect((await readCard(h.base, cardId)).elements.answer!.text).toBe('done');
    const unknown = await h.content(cardId, 2, 'x', undefined, 'nowhere');
    expect(unknown.body.code).toBe(300309);

    await setCardKit(h.base, { contentWhenClosed: 'accept' });
    expect((await h.content(cardId, 2, 'x', undefined, 'nowhere')).body.code).toBe(300313);
    expect((await h.content(cardId, 3, 'done, and a late token')).body.code).toBe(0);
    expect(await readCard(h.base, cardId)).toMatchObject({ finished: true, last_sequence: 3 });
  });
});
