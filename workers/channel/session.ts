import { instanceIdOf } from '../effects/ids';
import { truncateText } from '../lib/pg-text';

/** The conversation actor type; one instance per (installation, chat, thread). */
export const CONVERSATION_ACTOR = 'lark-conversation';

export interface ConversationKey {
  installationId: string;
  chatId: string;
  threadId: string | null;
}

/** `<installation>:<chat>:<thread or ->`: a topic thread is its own conversation. */
export function conversationKey(k: ConversationKey): string {
  return `${k.installationId}:${k.chatId}:${k.threadId ?? '-'}`;
}

/** The session id = the actor instance id = the ActorHost's name. */
export function sessionIdOf(k: ConversationKey): string {
  return instanceIdOf(CONVERSATION_ACTOR, conversationKey(k));
}

/** Longest text kept per input; a turn carries at most MAX_TURN_INPUTS of them. */
export const MAX_INPUT_TEXT = 4000;

/** The text a user sent: `content` is a JSON string; non-text messages get a placeholder. */
export function inputText(messageType: string, content: string): string {
  if (messageType === 'text') {
    try {
      const parsed = JSON.parse(content) as { text?: unknown };
      if (typeof parsed.text === 'string') return truncateText(parsed.text, MAX_INPUT_TEXT);
    } catch {
      // fall through: unparsable content is still an input
    }
  }
  return `[${truncateText(messageType, 40)}]`;
}

/** Lark's `create_time` is opaque text (13-digit ms in practice); null if it is not a time. */
export function createTimeMs(raw: string): number | null {
  if (!/^\d{10,16}$/.test(raw)) return null;
  const n = Number(raw);
  if (raw.length <= 10) return n * 1000;
  if (raw.length >= 16) return Math.floor(n / 1000);
  return n;
}
