/**
 * Short texts the service itself shows in a chat, in the three languages it speaks. The
 * language is the turn's own: read from its inputs' script (`localeOf`), since an installation
 * has no language setting and a Lark event carries none for the sender.
 */
export type NoticeLocale = 'en' | 'vi' | 'zh';

const NOTICES = {
  interrupted: {
    en: 'This answer was interrupted. Please ask again.',
    vi: 'Câu trả lời này bị gián đoạn. Vui lòng hỏi lại.',
    zh: '回答被中断了，请重新提问。',
  },
  /** A failed turn's reply, with the installation's `failure_notice: reply` (failure-notice.ts). */
  failed: {
    en: 'I could not answer this, please try again.',
    vi: 'Tôi không thể trả lời tin nhắn này, vui lòng thử lại.',
    zh: '我无法回答这条消息，请重试。',
  },
} as const satisfies Record<string, Record<NoticeLocale, string>>;

export function notice(which: keyof typeof NOTICES, locale: NoticeLocale): string {
  return NOTICES[which][locale];
}

/** Han characters → zh; Vietnamese's own letters (ơ, ư, đ, tone marks on vowels) → vi; else en. */
export function localeOf(texts: readonly string[]): NoticeLocale {
  const all = texts.join(' ');
  if (/\p{Script=Han}/u.test(all)) return 'zh';
  if (/[ăâđêôơưạảấầẩẫậắằẳẵặẹẻẽếềểễệỉịọỏốồổỗộớờởỡợụủứừửữựỳỵỷỹ]/iu.test(all)) return 'vi';
  return 'en';
}
