/**
 * The Lark emulator's world: apps, tenant tokens, messages, reactions, replies and CardKit
 * cards (cards.ts), kept in memory and driven by an injectable clock. Behaviour follows
 * shared/reference/lark-open-api.md; where Lark is UNCONFIRMED the choice is noted.
 */
import { randomBytes } from 'node:crypto';
import { CardStore } from './cards';

export interface EmulatorClock {
  now(): number;
}

export interface AppRecord {
  app_id: string;
  app_secret: string;
  verification_token: string;
  encrypt_key?: string;
  /** The app's bot as users see it (`GET /open-apis/bot/v3/info` → bot.open_id); made up at registration. */
  bot_open_id: string;
  app_name?: string;
}

/** One @-mention in a message, as Lark puts it in `message.mentions` (reference §3, §6). */
export interface MentionRecord {
  /** The placeholder in the text: `@_user_1`, `@_user_2`, … */
  key: string;
  id: { open_id: string; union_id?: string; user_id?: string };
  name: string;
  tenant_key: string;
}

export interface Operator {
  operator_id: string;
  operator_type: 'app' | 'user';
}

export interface ReactionRecord {
  reaction_id: string;
  message_id: string;
  operator: Operator;
  /** For user operators: the ids `user_id_type` chooses between. */
  user?: { open_id: string; union_id: string; user_id: string };
  action_time: string;
  reaction_type: { emoji_type: string };
}

export interface MessageRecord {
  message_id: string;
  chat_id: string;
  chat_type: 'p2p' | 'group';
  root_id?: string;
  parent_id?: string;
  thread_id?: string;
  msg_type: string;
  content: string;
  create_time: string;
  sender: { id: string; id_type: 'open_id' | 'app_id'; sender_type: 'user' | 'app' };
  recalled: boolean;
  /** Set when an app deleted it through the Open API (`DELETE /open-apis/im/v1/messages/:id`); `recalled` too. */
  deleted_by?: string;
  reply_uuid?: string;
  /** Who the message @-mentions (group messages); absent when nobody. */
  mentions?: MentionRecord[];
}

/** Emoji types the emulator accepts (case-sensitive, like Lark). `PROCESSING` is not one. */
export const EMOJI_TYPES = new Set([
  'Typing',
  'OnIt',
  'OneSecond',
  'Get',
  'THINKING',
  'OK',
  'DONE',
  'CrossMark',
  'SMILE',
  'THUMBSUP',
  'LAUGH',
  'HEART',
  'JIAYI',
  'MUSCLE',
  'APPLAUSE',
  'FINGERHEART',
  'Fire',
]);

export const TOKEN_LIFETIME_MS = 2 * 3600_000;
export const TOKEN_RENEW_WINDOW_MS = 30 * 60_000;
export const REPLY_UUID_TTL_MS = 3600_000;

export function id(prefix: string, bytes = 12): string {
  return `${prefix}${randomBytes(bytes).toString('hex')}`;
}

interface TokenRecord {
  token: string;
  app_id: string;
  expiresAt: number;
  revoked: boolean;
}

export class EmulatorState {
  readonly apps = new Map<string, AppRecord>();
  readonly messages = new Map<string, MessageRecord>();
  /** Reactions by message, in creation order. */
  readonly reactions = new Map<string, ReactionRecord[]>();
  /** Every reaction id ever issued, to tell 231010 (other message) from 231011 (unknown). */
  readonly reactionHome = new Map<string, string>();
  readonly replyByUuid = new Map<string, { message: MessageRecord; at: number }>();
  /** Card entities and the CardKit switches; a reset starts both anew. */
  readonly cards = new CardStore();
  private readonly tokens = new Map<string, TokenRecord>();
  private readonly latestToken = new Map<string, TokenRecord>();
  offsetMs = 0;

  constructor(private readonly clock: EmulatorClock) {}

  now(): number {
    return this.clock.now() + this.offsetMs;
  }

  /** Registers (or replaces) an app; its bot gets an open_id unless the caller names one. */
  registerApp(app: Omit<AppRecord, 'bot_open_id'> & { bot_open_id?: string }): AppRecord {
    const rec: AppRecord = { ...app, bot_open_id: app.bot_open_id ?? id('ou_') };
    this.apps.set(app.app_id, rec);
    return { ...rec };
  }

  /** Same token with a smaller `expire` while ≥30 min are left; a new one in the last 30. */
  issueToken(appId: string): { token: string; expire: number } {
    const now = this.now();
    const latest = this.latestToken.get(appId);
    if (latest && !latest.revoked && latest.expiresAt - now >= TOKEN_RENEW_WINDOW_MS)
      return { token: latest.token, expire: Math.floor((latest.expiresAt - now) / 1000) };
    const rec: TokenRecord = {
      token: id('t-'),
      app_id: appId,
      expiresAt: now + TOKEN_LIFETIME_MS,
      revoked: false,
    };
    this.tokens.set(rec.token, rec);
    this.latestToken.set(appId, rec);
    return { token: rec.token, expire: TOKEN_LIFETIME_MS / 1000 };
  }

  /** The app a token belongs to, or undefined when it is unknown, revoked or expired. */
  tokenApp(token: string): string | undefined {
    const rec = this.tokens.get(token);
    if (!rec || rec.revoked || rec.expiresAt <= this.now()) return undefined;
    return rec.app_id;
  }

  /**
   * A new App Secret, as an admin rotating it in the developer console. Whether Lark then
   * revokes the tenant tokens issued under the old secret is UNCONFIRMED (reference §1), so
   * the caller chooses: `revokeTokens` revokes them, otherwise they stay valid to their expiry.
   * Returns how many tokens were revoked; undefined for an unknown app.
   */
  rotateSecret(appId: string, appSecret: string, revokeTokens: boolean): number | undefined {
    const app = this.apps.get(appId);
    if (!app) return undefined;
    app.app_secret = appSecret;
    return revokeTokens ? this.revokeAppTokens(appId) : 0;
  }

  revokeToken(token: string): void {
    const rec = this.tokens.get(token);
    if (rec) rec.revoked = true;
  }

  revokeAppTokens(appId: string): number {
    let n = 0;
    for (const rec of this.tokens.values())
      if (rec.app_id === appId && !rec.revoked) {
        rec.revoked = true;
        n++;
      }
    return n;
  }

  createMessage(input: Partial<MessageRecord> & { text?: string }): MessageRecord {
    const msg: MessageRecord = {
      message_id: input.message_id ?? id('om_'),
      chat_id: input.chat_id ?? id('oc_'),
      chat_type: input.chat_type ?? 'p2p',
      root_id: input.root_id,
      parent_id: input.parent_id,
      thread_id: input.thread_id,
      msg_type: input.msg_type ?? 'text',
      content: input.content ?? JSON.stringify({ text: input.text ?? 'hello' }),
      create_time: String(this.now()),
      sender: input.sender ?? { id: id('ou_'), id_type: 'open_id', sender_type: 'user' },
      recalled: false,
      reply_uuid: input.reply_uuid,
      ...(input.mentions?.length ? { mentions: input.mentions } : {}),
    };
    this.messages.set(msg.message_id, msg);
    return msg;
  }

  addReaction(messageId: string, emoji: string, operator: Operator): ReactionRecord {
    const list = this.reactions.get(messageId) ?? [];
    // UNCONFIRMED in Lark: a duplicate create. The emulator answers with the existing
    // reaction of the same operator and emoji (same reaction_id), like a toggle already on.
    const same = list.find(
      (r) => r.operator.operator_id === operator.operator_id && r.reaction_type.emoji_type === emoji,
    );
    if (same) return same;
    const rec: ReactionRecord = {
      reaction_id: id('', 24),
      message_id: messageId,
      operator,
      action_time: String(this.now()),
      reaction_type: { emoji_type: emoji },
    };
    if (operator.operator_type === 'user') {
      const bare = operator.operator_id.replace(/^ou_/, '');
      rec.user = { open_id: operator.operator_id, union_id: `on_${bare}`, user_id: bare.slice(0, 8) };
    }
    list.push(rec);
    this.reactions.set(messageId, list);
    this.reactionHome.set(rec.reaction_id, messageId);
    return rec;
  }

  removeReaction(messageId: string, reactionId: string): void {
    const list = this.reactions.get(messageId) ?? [];
    this.reactions.set(
      messageId,
      list.filter((r) => r.reaction_id !== reactionId),
    );
  }

  repliesTo(messageId: string): MessageRecord[] {
    return [...this.messages.values()].filter((m) => m.parent_id === messageId);
  }
}
