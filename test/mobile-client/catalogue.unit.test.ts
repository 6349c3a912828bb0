import { describe, expect, it } from 'vitest';
import {
  DEFAULT_CATALOGUE,
  DISPOSITION,
  dispositionOf,
  extendCatalogue,
  type RecoveryKind,
  recoveryText,
} from '../../clients/mobile/src';
import { ERROR_STATUS } from '../../workers/errors';

const KINDS: RecoveryKind[] = [
  'expired',
  'unknown',
  'retired',
  'rejected',
  'permission_lost',
  'quota',
  'superseded',
  'session_expired',
];

/** The recovery kind a code ends in on the device (quota and session included). */
function kindOf(code: string, status: number): RecoveryKind | null {
  const d = dispositionOf(code, status);
  if (d === 'retry') return null;
  if (d === 'session') return 'session_expired';
  // A stamp refusal re-stamps the choice; if that is not possible it ends as rejected.
  if (d === 'restamp') return 'rejected';
  return d;
}

describe('localized recovery', () => {
  it('every server error code is classified, and every terminal one has a message in English and Vietnamese', () => {
    expect(Object.keys(DISPOSITION).sort()).toEqual(Object.keys(ERROR_STATUS).sort());
    for (const [code, status] of Object.entries(ERROR_STATUS)) {
      const kind = kindOf(code, status);
      if (!kind) {
        expect(status === 429 || status >= 500, code).toBe(true);
        continue;
      }
      for (const reflected of ['present', 'absent', 'unknown'] as const) {
        const en = recoveryText(kind, { locale: 'en', emoji: '👍', reflected });
        const vi = recoveryText(kind, { locale: 'vi', emoji: '👍', reflected });
        for (const t of [en, vi]) {
          for (const s of [t.title, t.body, t.actionLabel]) {
            expect(s.length, `${code} ${t.locale}`).toBeGreaterThan(0);
            expect(s, `${code} ${t.locale}: unfilled placeholder`).not.toMatch(/\{\w+\}/);
          }
        }
        expect(vi.title, code).not.toBe(en.title);
        expect(vi.body, code).not.toBe(en.body);
        expect(vi.action).toBe(en.action);
      }
    }
  });

  it('covers expiry, retirement, permission loss and quota with an action', () => {
    expect(kindOf('operation_expired', 410)).toBe('expired');
    expect(kindOf('operation_retired', 409)).toBe('retired');
    expect(kindOf('not_found', 404)).toBe('permission_lost');
    expect(kindOf('quota_exceeded', 429)).toBe('quota');
    // The request limiter's 429 is a "later", never a terminal quota; so is a newer server's 429.
    expect(kindOf('rate_limited', 429)).toBeNull();
    expect(kindOf('some_newer_limit', 429)).toBeNull();
    expect(kindOf('unauthorized', 401)).toBe('session_expired');
    for (const kind of KINDS)
      for (const locale of ['en', 'vi']) expect(DEFAULT_CATALOGUE[locale]?.[kind]?.title).toBeTruthy();
  });

  it('expiry never claims the earlier choice did not apply: it states the current truth', () => {
    for (const locale of ['en', 'vi']) {
      const present = recoveryText('expired', { locale, emoji: '👍', reflected: 'present' }).body;
      const absent = recoveryText('expired', { locale, emoji: '👍', reflected: 'absent' }).body;
      expect(present).not.toBe(absent);
      expect(`${present} ${absent}`).not.toMatch(/did not apply|was not applied|không được áp dụng/i);
    }
  });

  it('quota is terminal and covers both issuance refusals (rate and outstanding): it never says the reaction is waiting or pending', () => {
    for (const locale of ['en', 'vi']) {
      const t = recoveryText('quota', { locale, emoji: '👍', reflected: 'unknown' });
      expect(`${t.title} ${t.body}`).not.toMatch(/waiting|pending|still|đang chờ|chưa gửi xong/i);
      expect(t.body).toMatch(/not been sent|chưa được gửi/);
      expect(t.action).toBe('retry');
    }
  });

  it('a team can extend the catalogue; missing keys fall back to English', () => {
    const cat = extendCatalogue(DEFAULT_CATALOGUE, {
      fr: { expired: { title: 'Réaction non confirmée', body: '{emoji} : {state}', actionLabel: 'Réagir' } },
      vi: { quota: { title: 'Chậm lại một chút', body: 'Thử lại sau.', actionLabel: 'Thử lại' } },
    });
    const fr = recoveryText('expired', {
      locale: 'fr-FR',
      emoji: '👍',
      reflected: 'unknown',
      catalogue: cat,
    });
    expect(fr.title).toBe('Réaction non confirmée');
    expect(fr.body).toBe('👍 : Open the message to see its current reactions.');
    expect(recoveryText('retired', { locale: 'fr', catalogue: cat }).title).toBe('Reaction withdrawn');
    expect(recoveryText('quota', { locale: 'vi', catalogue: cat }).title).toBe('Chậm lại một chút');
    expect(recoveryText('expired', { locale: 'vi', catalogue: cat }).title).toBe(
      'Chưa xác nhận được cảm xúc',
    );
  });
});
