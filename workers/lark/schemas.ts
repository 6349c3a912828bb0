import { z } from 'zod';

/**
 * zod schemas for everything Lark sends us: Open API responses and event payloads.
 * Objects are loose (`z.looseObject`) because Lark adds fields without notice; only the
 * fields we read are required.
 */

/** Every Open API answer: `code` 0 is success, anything else a business error. */
export const ApiEnvelope = z.looseObject({ code: z.number().int(), msg: z.string().optional() });

export const TenantTokenResponse = z.looseObject({
  code: z.literal(0),
  tenant_access_token: z.string().min(1),
  expire: z.number().int().nonnegative(),
});

export const Reaction = z.looseObject({
  reaction_id: z.string().min(1),
  operator: z.looseObject({
    operator_id: z.string(),
    operator_type: z.enum(['app', 'user']),
  }),
  action_time: z.string(),
  reaction_type: z.looseObject({ emoji_type: z.string() }),
});
export type Reaction = z.infer<typeof Reaction>;

export const ReactionResponse = z.looseObject({ code: z.literal(0), data: Reaction });

export const ReactionPage = z.looseObject({
  items: z.array(Reaction).default([]),
  has_more: z.boolean(),
  page_token: z.string().optional(),
});
export type ReactionPage = z.infer<typeof ReactionPage>;
export const ReactionListResponse = z.looseObject({ code: z.literal(0), data: ReactionPage });

export const SentMessage = z.looseObject({
  message_id: z.string().min(1),
  chat_id: z.string().optional(),
  root_id: z.string().optional(),
  parent_id: z.string().optional(),
  msg_type: z.string().optional(),
  create_time: z.string().optional(),
});
export type SentMessage = z.infer<typeof SentMessage>;
export const ReplyResponse = z.looseObject({ code: z.literal(0), data: SentMessage });

/** A message delete's answer (`DELETE /open-apis/im/v1/messages/:id`): success is code 0, no data read. */
export const DeleteMessageResponse = z.looseObject({ code: z.literal(0) });

/** CardKit's create answer (reference §6): the card entity's id, 1–20 characters there. */
export const CreateCardResponse = z.looseObject({
  code: z.literal(0),
  data: z.looseObject({ card_id: z.string().min(1).max(64) }),
});
/** Any CardKit update's answer: success is the envelope's code 0. */
export const CardUpdateResponse = z.looseObject({ code: z.literal(0) });

/**
 * `GET /open-apis/bot/v3/info` (reference §6): the bot itself, at the top level (no `data`).
 * Only its open_id is read: a message @-mentioning the bot names it in `mentions[].id.open_id`.
 */
export const BotInfoResponse = z.looseObject({
  code: z.literal(0),
  bot: z.looseObject({ open_id: z.string().min(1).max(128) }),
});

// ---- events -------------------------------------------------------------------------

/** `{"encrypt": "..."}`: the whole payload when an Encrypt Key is configured. */
export const EncryptedBody = z.object({ encrypt: z.string().min(1) });

export const UrlVerification = z.looseObject({
  type: z.literal('url_verification'),
  challenge: z.string().min(1).max(512),
  token: z.string(),
});

export const EventHeader = z.looseObject({
  event_id: z.string().min(1).max(128),
  event_type: z.string().min(1),
  create_time: z.string(),
  token: z.string(),
  app_id: z.string(),
  tenant_key: z.string().optional(),
});

/** Schema 2.0 envelope; `event` is checked per event type. */
export const EventEnvelope = z.looseObject({
  schema: z.literal('2.0'),
  header: EventHeader,
  event: z.unknown(),
});
export type EventEnvelope = z.infer<typeof EventEnvelope>;

/** Schema 1.0 callbacks: token checked, then acknowledged and ignored. */
export const LegacyEventEnvelope = z.looseObject({
  type: z.literal('event_callback'),
  token: z.string(),
  uuid: z.string().optional(),
});

const UserIds = z.looseObject({
  union_id: z.string().optional(),
  user_id: z.string().optional(),
  open_id: z.string().optional(),
});

export const MessageReceiveEvent = z.looseObject({
  sender: z.looseObject({
    sender_id: UserIds.optional(),
    sender_type: z.string(),
    tenant_key: z.string().optional(),
  }),
  message: z.looseObject({
    message_id: z.string().min(1).max(128),
    root_id: z.string().optional(),
    parent_id: z.string().optional(),
    create_time: z.string(),
    update_time: z.string().optional(),
    chat_id: z.string().min(1).max(128),
    thread_id: z.string().optional(),
    chat_type: z.string(),
    message_type: z.string(),
    content: z.string(),
    mentions: z
      .array(
        z.looseObject({
          key: z.string(),
          id: UserIds.optional(),
          name: z.string().optional(),
          tenant_key: z.string().optional(),
        }),
      )
      .optional(),
  }),
});
export type MessageReceiveEvent = z.infer<typeof MessageReceiveEvent>;

/**
 * `im.message.recalled_v1` (reference §3): `{message_id, chat_id, recall_time, recall_type}`.
 * The reference is silent on two points, so both plausible shapes are accepted: the ids at the
 * top level or under `message` (as receive_v1 puts them), and `recall_time` as a string or a
 * number of milliseconds. `normalizeRecall` gives the one shape the service reads.
 */
const RecallIds = z.looseObject({
  message_id: z.string().min(1).max(128),
  chat_id: z.string().min(1).max(128).optional(),
});
export const MessageRecalledEvent = z.union([
  RecallIds.extend({
    recall_time: z.union([z.string(), z.number()]).optional(),
    recall_type: z.string().max(64).optional(),
  }),
  z.looseObject({
    message: RecallIds,
    recall_time: z.union([z.string(), z.number()]).optional(),
    recall_type: z.string().max(64).optional(),
  }),
]);
export type MessageRecalledEvent = z.infer<typeof MessageRecalledEvent>;

export interface Recall {
  messageId: string;
  chatId: string | null;
  recallType: string | null;
  /** Epoch ms, null when absent or not a whole number. */
  recallTimeMs: number | null;
}

export function normalizeRecall(e: MessageRecalledEvent): Recall {
  const ids: z.infer<typeof RecallIds> =
    'message' in e && e.message ? (e.message as z.infer<typeof RecallIds>) : (e as z.infer<typeof RecallIds>);
  const t = e.recall_time === undefined ? Number.NaN : Number(e.recall_time);
  return {
    messageId: ids.message_id,
    chatId: ids.chat_id ?? null,
    recallType: e.recall_type ?? null,
    recallTimeMs: Number.isSafeInteger(t) && t >= 0 ? t : null,
  };
}
