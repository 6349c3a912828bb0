import { describe, expect, it } from 'vitest';
import { admit, emptyGate, MAX_KEYS } from '../../../workers/alerts/gate';

const config = { windowMs: 600_000, ratePerMinute: 3 };

describe('the alert gate (dedupe per key and window, rate limit over all keys)', () => {
  it('sends the first line of a burst, counts the rest, and reports them with the next window', () => {
    const s = emptyGate();
    expect(admit(s, ['a', 'a', 'a'], 0, config)).toEqual([{ dedupeKey: 'a', repeatsBefore: 0, heldBack: 0 }]);
    expect(admit(s, ['a', 'a'], 599_999, config)).toEqual([]);
    expect(admit(s, ['a'], 600_000, config)).toEqual([{ dedupeKey: 'a', repeatsBefore: 4, heldBack: 0 }]);
  });

  it('keeps keys apart', () => {
    const s = emptyGate();
    expect(admit(s, ['a', 'b', 'a', 'b'], 0, config).map((x) => x.dedupeKey)).toEqual(['a', 'b']);
  });

  it('holds back what is over the rate, opens no window for it, and says how many with the next one', () => {
    const s = emptyGate();
    expect(admit(s, ['a', 'b', 'c', 'd', 'e'], 0, config).map((x) => x.dedupeKey)).toEqual(['a', 'b', 'c']);
    // A minute later d is tried again (no window was opened for it) and carries the count.
    expect(admit(s, ['d'], 60_000, config)).toEqual([{ dedupeKey: 'd', repeatsBefore: 0, heldBack: 2 }]);
    expect(admit(s, ['e'], 60_001, config)).toEqual([{ dedupeKey: 'e', repeatsBefore: 0, heldBack: 0 }]);
  });

  it('stays bounded: old windows and the overflow past MAX_KEYS are forgotten', () => {
    const s = emptyGate();
    const many = { windowMs: 1000, ratePerMinute: 100_000 };
    admit(
      s,
      Array.from({ length: MAX_KEYS + 50 }, (_, i) => `k${i}`),
      0,
      many,
    );
    expect(Object.keys(s.keys).length).toBe(MAX_KEYS);
    admit(s, ['late'], 5000, many);
    expect(Object.keys(s.keys)).toEqual(['late']);
  });
});
