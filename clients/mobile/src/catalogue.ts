import type { JournalEntry, Outcome, Terminal } from './entry';

/**
 * User-facing recovery for every terminal state, in English and Vietnamese. A team extends
 * it with `extendCatalogue` (new locales or reworded entries); a missing locale or key
 * falls back to English. Wording rule (spec): never say an earlier choice did not apply;
 * describe the current truth (`{state}`) and offer a new explicit choice. Each text must be
 * true for every server answer that ends in its kind (replay.ts: outcomeOf): `rejected` only
 * when no earlier write of the choice left without an answer, `expired` only without a
 * receipt, `quota` only when no write of the choice ever left (either issuance refusal).
 */
export type RecoveryKind = Exclude<Outcome, 'applied'> | 'session_expired';
export type RecoveryAction = 'react_again' | 'dismiss' | 'retry' | 'sign_in';
export type StateKey = 'state_present' | 'state_absent' | 'state_unknown';

export interface RecoveryText {
  title: string;
  body: string;
  actionLabel: string;
}

export type LocaleMessages = Record<RecoveryKind, RecoveryText> & Record<StateKey, string>;
export type Catalogue = Record<string, Partial<LocaleMessages>>;

export const RECOVERY_ACTION: Record<RecoveryKind, RecoveryAction> = {
  expired: 'react_again',
  unknown: 'react_again',
  retired: 'react_again',
  rejected: 'react_again',
  permission_lost: 'dismiss',
  quota: 'retry',
  superseded: 'dismiss',
  session_expired: 'sign_in',
};

const en: LocaleMessages = {
  expired: {
    title: 'Reaction not confirmed',
    body: 'We could not confirm your {emoji} reaction in time. {state}',
    actionLabel: 'React again',
  },
  unknown: {
    title: 'Reaction status unknown',
    body: 'We can no longer confirm whether your {emoji} reaction was saved. {state}',
    actionLabel: 'React again',
  },
  retired: {
    title: 'Reaction withdrawn',
    body: 'Your {emoji} reaction was withdrawn from another device and will not be sent again. {state}',
    actionLabel: 'React again',
  },
  rejected: {
    title: 'Reaction not accepted',
    body: 'The server did not accept your {emoji} reaction. {state}',
    actionLabel: 'React again',
  },
  permission_lost: {
    title: 'You can no longer react here',
    body: 'You no longer have access to this message, so your {emoji} reaction could not be confirmed.',
    actionLabel: 'OK',
  },
  quota: {
    title: 'Too many reactions at once',
    body: 'Your {emoji} reaction has not been sent because you have reached the limit for reactions right now. Try again in a moment.',
    actionLabel: 'Try again',
  },
  superseded: {
    title: 'Replaced by your newer choice',
    body: 'Your newer choice for {emoji} replaces this one.',
    actionLabel: 'OK',
  },
  session_expired: {
    title: 'Sign in to finish',
    body: 'Your reactions are saved on this device and will be sent after you sign in again.',
    actionLabel: 'Sign in',
  },
  state_present: 'The message currently shows your {emoji} reaction.',
  state_absent: 'The message currently does not show your {emoji} reaction.',
  state_unknown: 'Open the message to see its current reactions.',
};

const vi: LocaleMessages = {
  expired: {
    title: 'Chưa xác nhận được cảm xúc',
    body: 'Không thể xác nhận kịp cảm xúc {emoji} của bạn. {state}',
    actionLabel: 'Thả lại cảm xúc',
  },
  unknown: {
    title: 'Không rõ trạng thái cảm xúc',
    body: 'Chúng tôi không còn xác nhận được cảm xúc {emoji} của bạn đã được lưu hay chưa. {state}',
    actionLabel: 'Thả lại cảm xúc',
  },
  retired: {
    title: 'Cảm xúc đã được rút lại',
    body: 'Cảm xúc {emoji} của bạn đã được rút lại từ một thiết bị khác và sẽ không được gửi lại. {state}',
    actionLabel: 'Thả lại cảm xúc',
  },
  rejected: {
    title: 'Cảm xúc không được chấp nhận',
    body: 'Máy chủ không chấp nhận cảm xúc {emoji} của bạn. {state}',
    actionLabel: 'Thả lại cảm xúc',
  },
  permission_lost: {
    title: 'Bạn không thể thả cảm xúc ở đây nữa',
    body: 'Bạn không còn quyền truy cập tin nhắn này nên không thể xác nhận cảm xúc {emoji} của bạn.',
    actionLabel: 'Đã hiểu',
  },
  quota: {
    title: 'Quá nhiều cảm xúc cùng lúc',
    body: 'Cảm xúc {emoji} của bạn chưa được gửi vì bạn đã đạt giới hạn thả cảm xúc lúc này. Vui lòng thử lại sau giây lát.',
    actionLabel: 'Thử lại',
  },
  superseded: {
    title: 'Đã thay bằng lựa chọn mới hơn',
    body: 'Lựa chọn mới hơn của bạn cho {emoji} thay thế lựa chọn này.',
    actionLabel: 'Đã hiểu',
  },
  session_expired: {
    title: 'Đăng nhập để hoàn tất',
    body: 'Các cảm xúc của bạn được lưu trên thiết bị này và sẽ được gửi sau khi bạn đăng nhập lại.',
    actionLabel: 'Đăng nhập',
  },
  state_present: 'Tin nhắn hiện đang hiển thị cảm xúc {emoji} của bạn.',
  state_absent: 'Tin nhắn hiện không hiển thị cảm xúc {emoji} của bạn.',
  state_unknown: 'Hãy mở tin nhắn để xem các cảm xúc hiện tại.',
};

export const DEFAULT_CATALOGUE: Catalogue = { en, vi };
export const FALLBACK_LOCALE = 'en';

/** A new catalogue with `additions` merged per locale over `base`. */
export function extendCatalogue(base: Catalogue, additions: Catalogue): Catalogue {
  const out: Catalogue = { ...base };
  for (const [locale, messages] of Object.entries(additions)) out[locale] = { ...base[locale], ...messages };
  return out;
}

export interface Recovery extends RecoveryText {
  kind: RecoveryKind;
  action: RecoveryAction;
  locale: string;
}

function pick<K extends keyof LocaleMessages>(cat: Catalogue, locale: string, key: K): LocaleMessages[K] {
  const base = locale.split('-')[0]!;
  return (cat[locale]?.[key] ??
    cat[base]?.[key] ??
    cat[FALLBACK_LOCALE]?.[key] ??
    en[key]) as LocaleMessages[K];
}

const fill = (text: string, vars: Record<string, string>) =>
  text.replace(/\{(\w+)\}/g, (m, name: string) => vars[name] ?? m);

/** The message and action for a recovery kind; `reflected` picks the current-state sentence. */
export function recoveryText(
  kind: RecoveryKind,
  opts: { locale: string; emoji?: string; reflected?: Terminal['reflected']; catalogue?: Catalogue },
): Recovery {
  const cat = opts.catalogue ?? DEFAULT_CATALOGUE;
  const emoji = opts.emoji ?? '';
  const state = fill(pick(cat, opts.locale, `state_${opts.reflected ?? 'unknown'}`), { emoji });
  const text = pick(cat, opts.locale, kind);
  const vars = { emoji, state };
  return {
    kind,
    action: RECOVERY_ACTION[kind],
    locale: opts.locale,
    title: fill(text.title, vars),
    body: fill(text.body, vars).trim(),
    actionLabel: fill(text.actionLabel, vars),
  };
}

/** Recovery for a terminal journal entry; null while unfinished or when it simply applied. */
export function recoveryFor(entry: JournalEntry, locale: string, catalogue?: Catalogue): Recovery | null {
  const t = entry.terminal;
  if (!t || t.outcome === 'applied') return null;
  return recoveryText(t.outcome, { locale, emoji: entry.intent.emoji, reflected: t.reflected, catalogue });
}
