import type { Pool } from '@neondatabase/serverless';
import type { KeyRing } from '../crypto/sealed';
import { RETRYABLE_SQLSTATES, sqlState } from '../db/tx';
import { enqueueCtes } from '../effects/mailbox';
import { isPgStorable } from '../lib/pg-text';
import {
  MAX_LIFETIME_MS,
  prepareRegistration,
  REGISTER_RESULT_COLUMNS,
  type RegisterResultRow,
  registerCtes,
  registrationOutcome,
} from '../typing-ledger';
import type { InputMessage } from './conversation';
import type { InboundMessage, RecordedInput } from './inbound';
import { CONVERSATION_ACTOR, conversationKey, createTimeMs, inputText, sessionIdOf } from './session';
import type { TypingInput } from './typing-hooks';

/**
 * Everything the webhook writes for one event, as ONE autocommit statement (a chain of
 * data-modifying CTEs): the event_id receipt gates all the rest (a duplicate writes nothing);
 * the conversation upsert numbers the input (its row lock orders positions per session until
 * the statement commits); the input row (a Lark message id seen under another event id
 * records nothing further); the actor instance and the `in:<position>` mailbox message
 * (effects/mailbox.ts `enqueueCtes`: the SQL of `ensureInstance` and `enqueueMessage`);
 * and the typing-ledger registration (typing-ledger
 * `registerCtes`: settlement check, random free quota slot, `on conflict do nothing` on the
 * unique partial index, sealed snapshot bound to the client-generated row id). All of it
 * commits or none of it does, before the answer, so register-before-Add holds: the Add is
 * sent only for a row this committed statement inserted.
 *
 * Why a CTE chain and not a plpgsql function: both are one round trip (measured with the
 * bench's counting bridge: 8 before → 2 per event, the other being the installation load),
 * but the CTE needs no migration, so each table's SQL still changes with the TypeScript
 * that owns it, and it is planned like any other statement (no plan cache surprises in a
 * function). It costs one statement per event; the transaction's `begin`/`commit` (2 trips)
 * and the five separate statements are gone.
 */
const ACCEPT = `
with paused as (
  -- A paused installation records and acknowledges its inputs, but badges none (pause.ts).
  select exists (select 1 from lark_installation_settings
                  where installation_id = $1 and paused = 'on') as held
), receipt as (
  insert into lark_event_receipts (installation_id, event_id, event_type)
  values ($1, $2, 'im.message.receive_v1')
  on conflict do nothing
  returning 1
), conv as (
  insert into channel_conversations as c
         (id, installation_id, workspace_id, app_id, chat_id, thread_id, last_position)
  select $3, $1, $4, $5, $6, $7, 1 from receipt
  on conflict (id) do update set last_position = c.last_position + 1, updated_at = app_now()
  returning c.last_position as position, c.context_revision
), input as (
  insert into lark_inbound_messages
         (installation_id, event_id, message_id, chat_id, thread_id, root_id, chat_type,
          sender_open_id, message_type, content, received_at_ms,
          session_id, position, context_revision, message_created_at_ms)
  select $1, $2, $8, $6, $7, $9, $10, $11, $12, $13, $14, $3, conv.position, conv.context_revision, $15
    from conv
  on conflict (installation_id, message_id) do nothing
  returning position, context_revision
), ${enqueueCtes({
  instanceId: '$3',
  actorType: '$16',
  actorKey: '$17',
  state: `'{}'::jsonb`,
  key: `'in:' || input.position`,
  payload: `$18::jsonb || jsonb_build_object('position', input.position, 'contextRevision', input.context_revision)`,
  from: 'input',
})}, ${registerCtes({
  id: '$19',
  workspaceId: '$4',
  installationId: '$1',
  appId: '$5',
  sessionId: '$3',
  messageId: '$8',
  position: 'input.position',
  revision: 'input.context_revision',
  chatId: '$6',
  createdAtMs: '$15',
  sealed: '$20',
  lifetimeMs: '$21',
  from: 'input',
  gate: '($22::boolean and not (select held from paused))',
})}
select exists (select 1 from receipt) as accepted,
       (select position from input) as position,
       (select context_revision from input) as context_revision,
       (select held from paused) as paused,
       ${REGISTER_RESULT_COLUMNS}`;

interface AcceptRow extends RegisterResultRow {
  accepted: boolean;
  position: string | null;
  context_revision: string | null;
  paused: boolean;
}

/**
 * The first field of a verified event whose text Postgres cannot store (U+0000 or a lone
 * surrogate, lib/pg-text.ts), or null: every string the accept statement writes, the text
 * taken out of `content` included (JSON escapes can put either in it). The webhook checks
 * this before accepting, and records the event as rejected instead.
 */
export function unstorableField(inbound: InboundMessage): string | null {
  const { message, sender } = inbound.event;
  const stored: Record<string, string | undefined> = {
    event_id: inbound.eventId,
    message_id: message.message_id,
    chat_id: message.chat_id,
    thread_id: message.thread_id,
    root_id: message.root_id,
    chat_type: message.chat_type,
    sender_open_id: sender.sender_id?.open_id,
    message_type: message.message_type,
    content: message.content,
    text: inputText(message.message_type, message.content),
  };
  for (const [field, value] of Object.entries(stored))
    if (value !== undefined && !isPgStorable(value)) return field;
  return null;
}

/** Deadlocks and serialization failures are safe to retry: a failed statement committed nothing. */
const MAX_ATTEMPTS = 2;

/**
 * Records one verified `im.message.receive_v1` in one round trip (autocommit). Returns null
 * for a duplicate event_id or a Lark message already recorded under another event_id.
 * Throws on any database error: nothing was written, no Add may be sent, and the 5xx makes
 * Lark retry.
 */
export async function acceptInboundMessage(
  pool: Pick<Pool, 'query'>,
  inbound: InboundMessage,
  keys: KeyRing,
): Promise<RecordedInput | null> {
  const { installation, event, eventId } = inbound;
  const { message, sender } = event;
  const threadId = message.thread_id ?? null;
  const key = { installationId: installation.id, chatId: message.chat_id, threadId };
  const sessionId = sessionIdOf(key);
  const messageCreatedAtMs = createTimeMs(message.create_time);
  const prep = await prepareRegistration(keys, {
    installation,
    messageCreatedAtMs,
    receivedAtMs: inbound.receivedAtMs,
  });
  const payload: Omit<InputMessage, 'position' | 'contextRevision'> = {
    session: {
      installationId: installation.id,
      workspaceId: installation.workspaceId,
      appId: installation.appId,
      chatId: message.chat_id,
      threadId,
    },
    messageId: message.message_id,
    senderOpenId: sender.sender_id?.open_id ?? null,
    text: inputText(message.message_type, message.content),
    createdAtMs: messageCreatedAtMs,
  };
  const params = [
    installation.id,
    eventId,
    sessionId,
    installation.workspaceId,
    installation.appId,
    message.chat_id,
    threadId,
    message.message_id,
    message.root_id ?? null,
    message.chat_type,
    sender.sender_id?.open_id ?? null,
    message.message_type,
    message.content,
    inbound.receivedAtMs,
    messageCreatedAtMs,
    CONVERSATION_ACTOR,
    conversationKey(key),
    JSON.stringify(payload),
    prep.stale ? null : prep.id,
    prep.stale ? null : prep.sealed,
    MAX_LIFETIME_MS,
    !prep.stale,
  ];
  let row: AcceptRow;
  for (let attempt = 1; ; attempt++) {
    try {
      row = (await pool.query<AcceptRow>(ACCEPT, params)).rows[0]!;
      break;
    } catch (err) {
      const state = sqlState(err);
      if (attempt >= MAX_ATTEMPTS || !state || !RETRYABLE_SQLSTATES.has(state)) throw err;
    }
  }
  if (!row.accepted || row.position === null || row.context_revision === null) return null;
  const registration = prep.stale
    ? { kind: 'skipped' as const, reason: 'stale_message' as const }
    : row.paused
      ? { kind: 'skipped' as const, reason: 'paused' as const }
      : registrationOutcome(row, prep.id, message.message_id, installation);
  const typing: TypingInput = {
    sessionId,
    installationId: installation.id,
    workspaceId: installation.workspaceId,
    appId: installation.appId,
    chatId: message.chat_id,
    threadId,
    messageId: message.message_id,
    messageCreatedAtMs,
    position: Number(row.position),
    contextRevision: Number(row.context_revision),
    receivedAtMs: inbound.receivedAtMs,
    installation,
  };
  return {
    typing,
    registration:
      registration.kind === 'registered'
        ? { sendAdd: true, ledgerId: registration.id }
        : { sendAdd: false, ledgerId: null },
  };
}
