import type { PoolClient } from '@neondatabase/serverless';
import { actorHostStub } from '../../durable-objects/actor-host';
import { enqueueMessage, ensureInstance } from '../effects/mailbox';
import type { Config, Env } from '../env';
import type { Installation } from '../installations/store';
import type { MessageReceiveEvent } from '../lark/schemas';
import { log } from '../log';
import type { InputMessage } from './conversation';
import './engine';
import { recordInput } from './inputs';
import { CONVERSATION_ACTOR, conversationKey, inputText } from './session';
import {
  afterInputAnswered,
  registerTypingInputs,
  type TypingInput,
  type TypingRegistration,
} from './typing-hooks';

/** One accepted `im.message.receive_v1` from a user, already verified and de-duplicated. */
export interface InboundMessage {
  installation: Installation;
  eventId: string;
  event: MessageReceiveEvent;
  /** Worker clock when the request arrived. */
  receivedAtMs: number;
}

/** What the transaction recorded, for the work after the answer. */
export interface RecordedInput {
  typing: Omit<TypingInput, 'keys'>;
  registration: TypingRegistration;
}

/**
 * Called by the webhook inside the transaction that inserted the event's dedup receipt, so
 * the input is recorded exactly once per event_id or not at all. Writes only through `tx`,
 * no remote call: numbers the input on its conversation and stores it (1 round trip),
 * creates the actor instance the first time (1), puts `in:<position>` in its mailbox (1),
 * and registers the typing ledger row. Returns null when this Lark message was already
 * recorded under another event_id.
 */
export async function recordInboundMessage(
  tx: PoolClient,
  input: InboundMessage,
  keys: Config['SECRET_KEYS'],
): Promise<RecordedInput | null> {
  const { message, sender } = input.event;
  const row = await recordInput(tx, input);
  if (!row.inserted) return null;
  const threadId = message.thread_id ?? null;
  const { installation } = input;
  if (row.created)
    await ensureInstance(
      tx,
      CONVERSATION_ACTOR,
      conversationKey({ installationId: installation.id, chatId: message.chat_id, threadId }),
    );
  const payload: InputMessage = {
    session: {
      installationId: installation.id,
      workspaceId: installation.workspaceId,
      appId: installation.appId,
      chatId: message.chat_id,
      threadId,
    },
    position: row.position,
    contextRevision: row.contextRevision,
    messageId: message.message_id,
    senderOpenId: sender.sender_id?.open_id ?? null,
    text: inputText(message.message_type, message.content),
    createdAtMs: row.messageCreatedAtMs,
  };
  await enqueueMessage(tx, row.sessionId, `in:${row.position}`, payload);
  const typing: TypingInput = {
    sessionId: row.sessionId,
    installationId: installation.id,
    workspaceId: installation.workspaceId,
    appId: installation.appId,
    chatId: message.chat_id,
    threadId,
    messageId: message.message_id,
    messageCreatedAtMs: row.messageCreatedAtMs,
    position: row.position,
    contextRevision: row.contextRevision,
    receivedAtMs: input.receivedAtMs,
    installation,
    keys,
  };
  const registration = await registerTypingInputs(tx, typing);
  const { keys: _keys, ...answered } = typing;
  return { typing: answered, registration };
}

/**
 * Runs after the 200, through `executionCtx.waitUntil`, only for a newly recorded input:
 * wakes the conversation's ActorHost (the commit is done, so it sees the input) and lets
 * the ledger send the Typing Add. A lost wake-up is recovered by the minute cron's mailbox
 * polling. Never throws.
 */
export async function afterInboundAnswered(env: Env, config: Config, recorded: RecordedInput): Promise<void> {
  const { sessionId } = recorded.typing;
  await Promise.all([
    actorHostStub(env, sessionId)
      .wake(sessionId)
      .catch((err: unknown) => log.warn('channel_wake_failed', { sessionId, error: err })),
    afterInputAnswered(env, config, { input: recorded.typing, registration: recorded.registration }).catch(
      (err: unknown) => log.error('channel_typing_after_answer_failed', { sessionId, error: err }),
    ),
  ]);
}
