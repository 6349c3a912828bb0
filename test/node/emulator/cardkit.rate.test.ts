/**
 * The emulator's CardKit rates, on its manual clock (nothing sleeps): 10 update operations per
 * card in any 1000 ms, and Lark's 50/s per app, shared by the CardKit routes or per route.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { readCard, setCardKit } from '../../helpers/lark-cards';
import { Harness } from './helpers';

let h: Harness;
beforeAll(async () => {
  h = await Harness.start();
});
afterAll(() => h.emu.close());
beforeEach(() => h.reset());

describe('CardKit rates', () => {
  it('the 11th update of a card within 1000 ms is a 429 with a reset; the window slides, other cards are not affected', async () => {
    const cardId = await h.createCard();
    const other = await h.createCard();
    // Half a second into a calendar second: a fixed-second window would open again at the next one.
    h.advance(500);
    for (let seq = 1; seq <= 9; seq++)
      expect((await h.content(cardId, seq, 'x'.repeat(seq))).status).toBe(200);
    expect((await h.settings(cardId, 10, { streaming_mode: true })).status).toBe(200);
    const over = await h.content(cardId, 11, 'eleven');
    expect([over.status, over.body.code]).toEqual([429, 99991400]);
    expect(over.headers.get('x-ogw-ratelimit-reset')).toBe('1');
    expect(over.headers.get('x-ogw-ratelimit-limit')).toBe('10');
    expect((await h.content(other, 1, 'unaffected')).status).toBe(200);

    h.advance(600); // the next calendar second, but still within 1000 ms of the ten
    expect(
      (await h.batchUpdate(cardId, 11, [{ action: 'delete_elements', params: { element_ids: [] } }])).status,
    ).toBe(429);
    h.advance(399);
    expect((await h.content(cardId, 11, 'eleven')).status).toBe(429);
    h.advance(1);
    expect((await h.content(cardId, 11, 'eleven')).status).toBe(200);

    const card = await readCard(h.base, cardId);
    // The refused ones used no sequence: 11 was accepted when the window had room.
    expect(card.sequences.map((op) => op.sequence)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    expect(card.refused.map((r) => [r.route, r.code])).toEqual([
      ['cardkit.content', 99991400],
      ['cardkit.batch_update', 99991400],
      ['cardkit.content', 99991400],
    ]);
  });

  it('the per-card limit is configurable, 0 turning it off', async () => {
    await setCardKit(h.base, { perCardPerSecond: 3 });
    const cardId = await h.createCard();
    for (let seq = 1; seq <= 3; seq++) await h.content(cardId, seq, 'x');
    expect((await h.content(cardId, 4, 'x')).status).toBe(429);
    await setCardKit(h.base, { perCardPerSecond: 0 });
    for (let seq = 4; seq <= 20; seq++) expect((await h.content(cardId, seq, 'x')).status).toBe(200);
  });

  it('50 CardKit calls a second per app, one budget for all CardKit routes by default', async () => {
    await setCardKit(h.base, { perCardPerSecond: 0 });
    const cardId = await h.createCard();
    for (let seq = 1; seq <= 49; seq++) expect((await h.content(cardId, seq, 'x')).status).toBe(200);
    const over = await h.settings(cardId, 50, { streaming_mode: false });
    expect([over.status, over.headers.get('x-ogw-ratelimit-limit')]).toEqual([429, '50']);
    expect((await h.api('POST', '/open-apis/cardkit/v1/cards', {})).status).toBe(429);
    // The app's budget is not the card's: nothing is recorded on the card.
    expect((await readCard(h.base, cardId)).refused).toEqual([]);
    h.advance(1000);
    expect((await h.settings(cardId, 50, { streaming_mode: false })).status).toBe(200);
  });

  it('with appLimitScope "route" each CardKit route has its own 50 a second', async () => {
    await setCardKit(h.base, { perCardPerSecond: 0, appLimitScope: 'route' });
    const cardId = await h.createCard();
    for (let seq = 1; seq <= 50; seq++) expect((await h.content(cardId, seq, 'x')).status).toBe(200);
    expect((await h.content(cardId, 51, 'x')).status).toBe(429);
    expect((await h.settings(cardId, 51, { streaming_mode: false })).status).toBe(200);
  });
});
