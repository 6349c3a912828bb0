/**
 * The Open API routes the service uses, with Lark's shapes and error codes
 * (shared/reference/lark-open-api.md §1, §2, §4b; the bot's info §6; CardKit §6 in cardkit-api.ts).
 */
import { type ApiAnswer, larkError, ok } from './answers';
import { cardIdOf, cardkitRoute, checkCardSend } from './cardkit-api';
import type { RouteName } from './faults';
import { EMOJI_TYPES, type EmulatorState, REPLY_UUID_TTL_MS, type ReactionRecord } from './state';

export interface ApiCall {
  route: RouteName;
  /** App behind the bearer token (undefined for the token route). */
  appId?: string;
  params: Record<string, string>;
  query: URLSearchParams;
  body: unknown;
}

export function tokenRoute(state: EmulatorState, body: unknown): ApiAnswer {
  const b = (body ?? {}) as { app_id?: unknown; app_secret?: unknown };
  const app = typeof b.app_id === 'string' ? state.apps.get(b.app_id) : undefined;
  // A fake app_id answers HTTP 200 code 10003 (third-party probe, reference §1).
  if (!app) return { status: 200, body: { code: 10003, data: {}, msg: 'invalid param' } };
  if (b.app_secret !== app.app_secret)
    return { status: 200, body: { code: 10015, msg: 'app secret invalid' } };
  const { token, expire } = state.issueToken(app.app_id);
  return { status: 200, body: { code: 0, msg: 'ok', tenant_access_token: token, expire } };
}

function view(r: ReactionRecord, idType = 'open_id') {
  const operator =
    r.user && idType !== 'open_id'
      ? { ...r.operator, operator_id: idType === 'union_id' ? r.user.union_id : r.user.user_id }
      : r.operator;
  return { reaction_id: r.reaction_id, operator, action_time: r.action_time, reaction_type: r.reaction_type };
}

function liveMessage(state: EmulatorState, messageId: string) {
  const msg = state.messages.get(messageId ?? '');
  return msg && !msg.recalled ? msg : undefined;
}

export function apiRoute(state: EmulatorState, call: ApiCall): ApiAnswer {
  const appId = call.appId!;
  const messageId = call.params.message_id ?? '';
  switch (call.route) {
    case 'reactions.create': {
      const emoji = (call.body as { reaction_type?: { emoji_type?: unknown } })?.reaction_type?.emoji_type;
      if (typeof emoji !== 'string' || !EMOJI_TYPES.has(emoji))
        return larkError(400, 231001, 'reaction type is invalid.');
      if (!liveMessage(state, messageId))
        return larkError(400, 231003, 'The message is not found, maybe not exist or deleted.');
      return ok(view(state.addReaction(messageId, emoji, { operator_id: appId, operator_type: 'app' })));
    }
    case 'reactions.delete': {
      if (!liveMessage(state, messageId))
        return larkError(400, 231003, 'The message is not found, maybe not exist or deleted.');
      const reactionId = call.params.reaction_id ?? '';
      const found = (state.reactions.get(messageId) ?? []).find((r) => r.reaction_id === reactionId);
      if (!found) {
        const home = state.reactionHome.get(reactionId);
        // A reaction that lives on another message: 231010. Unknown or already deleted: 231011
        // (UNCONFIRMED which one Lark sends after a delete; the client treats both as gone).
        if (
          home &&
          home !== messageId &&
          (state.reactions.get(home) ?? []).some((r) => r.reaction_id === reactionId)
        )
          return larkError(400, 231010, 'the reaction does not belong to this message.');
        return larkError(400, 231011, 'invalid reaction_id, cannot find the reaction.');
      }
      if (found.operator.operator_type !== 'app' || found.operator.operator_id !== appId)
        return larkError(400, 231007, 'The reaction is not added by the operator.');
      state.removeReaction(messageId, reactionId);
      return ok(view(found));
    }
    case 'reactions.list': {
      if (!liveMessage(state, messageId))
        return larkError(400, 231003, 'The message is not found, maybe not exist or deleted.');
      const idType = call.query.get('user_id_type') ?? 'open_id';
      if (!['open_id', 'union_id', 'user_id'].includes(idType))
        return larkError(400, 231014, 'invalid user_id_type.');
      const size = Number(call.query.get('page_size') ?? 20);
      if (!Number.isInteger(size) || size < 1 || size > 50)
        return larkError(400, 99992402, 'field validation failed: page_size');
      const type = call.query.get('reaction_type');
      const all = (state.reactions.get(messageId) ?? []).filter(
        (r) => !type || r.reaction_type.emoji_type === type,
      );
      const tokenText = call.query.get('page_token');
      let offset = 0;
      if (tokenText) {
        const decoded = /^p(\d+)$/.exec(Buffer.from(tokenText, 'base64url').toString('utf8'));
        if (!decoded) return larkError(400, 231012, 'invalid page_token.');
        offset = Number(decoded[1]);
      }
      const items = all.slice(offset, offset + size).map((r) => view(r, idType));
      const hasMore = offset + size < all.length;
      const data: Record<string, unknown> = { items, has_more: hasMore };
      if (hasMore) data.page_token = Buffer.from(`p${offset + size}`).toString('base64url');
      return ok(data);
    }
    case 'reply': {
      const b = (call.body ?? {}) as {
        content?: unknown;
        msg_type?: unknown;
        reply_in_thread?: unknown;
        uuid?: unknown;
      };
      if (typeof b.content !== 'string' || typeof b.msg_type !== 'string')
        return larkError(400, 230001, 'invalid param: content and msg_type are required');
      if (b.uuid !== undefined && (typeof b.uuid !== 'string' || b.uuid.length > 50))
        return larkError(400, 230001, 'invalid param: uuid');
      const parent = state.messages.get(messageId);
      if (!parent) return larkError(400, 230002, 'The message is not found.');
      if (parent.recalled) return larkError(400, 230011, 'The message was withdrawn.');
      const now = state.now();
      const key = b.uuid ? `${appId}|${b.uuid}` : undefined;
      const prior = key ? state.replyByUuid.get(key) : undefined;
      if (prior && now - prior.at < REPLY_UUID_TTL_MS) return ok(message(prior.message));
      const cardId = cardIdOf(b.msg_type, b.content);
      if (cardId) {
        const check = checkCardSend(state, appId, cardId, b.uuid as string | undefined);
        if (check && 'refuse' in check) return check.refuse;
        const first = check && state.messages.get(check.firstMessageId);
        if (first) return ok(message(first));
      }
      const msg = state.createMessage({
        chat_id: parent.chat_id,
        chat_type: parent.chat_type,
        parent_id: parent.message_id,
        root_id: parent.root_id ?? parent.message_id,
        thread_id:
          b.reply_in_thread === true
            ? (parent.thread_id ?? `omt_${parent.message_id.slice(3)}`)
            : parent.thread_id,
        msg_type: b.msg_type,
        content: b.content,
        sender: { id: appId, id_type: 'app_id', sender_type: 'app' },
        reply_uuid: b.uuid as string | undefined,
      });
      if (key) state.replyByUuid.set(key, { message: msg, at: now });
      const card = cardId ? state.cards.cards.get(cardId) : undefined;
      if (card)
        card.sent = { message_id: msg.message_id, reply_to: messageId, uuid: msg.reply_uuid, at: now };
      return ok(message(msg));
    }
    case 'messages.delete': {
      // Recalls a message the app sent (reference: "Recall a message", DELETE im/v1/messages/:id).
      // The codes are UNCONFIRMED: 230002 for an unknown message, 230011 for one already
      // withdrawn (as the reply route answers), 230027 for another sender's message; the
      // service treats the first two as already gone.
      const msg = state.messages.get(messageId);
      if (!msg) return larkError(400, 230002, 'The message is not found.');
      if (msg.recalled) return larkError(400, 230011, 'The message was withdrawn.');
      if (msg.sender.sender_type !== 'app' || msg.sender.id !== appId)
        return larkError(400, 230027, 'Lack of necessary permissions.');
      msg.recalled = true;
      msg.deleted_by = appId;
      return ok({});
    }
    case 'bot.info': {
      // Reference §6 "Mentions": the bot itself at the top level, not under `data`.
      const app = state.apps.get(appId)!;
      return {
        status: 200,
        body: {
          code: 0,
          msg: 'ok',
          bot: {
            activate_status: 2,
            app_name: app.app_name ?? app.app_id,
            avatar_url: '',
            ip_white_list: [],
            open_id: app.bot_open_id,
          },
        },
      };
    }
    case 'cardkit.create':
    case 'cardkit.content':
    case 'cardkit.settings':
    case 'cardkit.update':
    case 'cardkit.batch_update':
      return cardkitRoute(state, call.route, appId, call.params, call.body);
    default:
      return larkError(400, 99992402, 'unsupported');
  }
}

function message(m: ReturnType<EmulatorState['createMessage']>) {
  return {
    message_id: m.message_id,
    root_id: m.root_id,
    parent_id: m.parent_id,
    thread_id: m.thread_id,
    msg_type: m.msg_type,
    create_time: m.create_time,
    update_time: m.create_time,
    deleted: false,
    updated: false,
    chat_id: m.chat_id,
    sender: m.sender,
    body: { content: m.content },
  };
}
