import type { PoolClient } from '@neondatabase/serverless';
import type { InboundMessage } from './inbound';
import { createTimeMs, sessionIdOf } from './session';

export interface RecordedRow {
  sessionId: string;
  position: number;
  contextRevision: number;
  /** The conversation row was created by this statement (so its actor instance is new too). */
  created: boolean;
  /** False when this Lark message was already recorded (delivered under another event_id). */
  inserted: boolean;
  messageCreatedAtMs: number | null;
}

// One round trip: number the input on its conversation (the upsert holds the conversation
// row lock until commit, so positions follow commit order per session) and record it.
const RECORD_INPUT = `
with conv as (
  insert into channel_conversations as c
         (id, installation_id, workspace_id, app_id, chat_id, thread_id, last_position)
  values ($1, $2, $3, $4, $5, $6, 1)
  on conflict (id) do update set last_position = c.last_position + 1, updated_at = app_now()
  returning c.last_position as position, c.context_revision, (c.xmax = 0) as created
), ins as (
  insert into lark_inbound_messages
         (installation_id, event_id, message_id, chat_id, thread_id, root_id, chat_type,
          sender_open_id, message_type, content, received_at_ms,
          session_id, position, context_revision, message_created_at_ms)
  select $2, $7, $8, $5, $6, $9, $10, $11, $12, $13, $14, $1, conv.position, conv.context_revision, $15
    from conv
  on conflict (installation_id, message_id) do nothing
  returning 1
)
select conv.position, conv.context_revision, conv.created, exists (select 1 from ins) as inserted
  from conv`;

/** Records one accepted message on its conversation, inside the webhook's transaction. */
export async function recordInput(tx: PoolClient, input: InboundMessage): Promise<RecordedRow> {
  const { message, sender } = input.event;
  const key = {
    installationId: input.installation.id,
    chatId: message.chat_id,
    threadId: message.thread_id ?? null,
  };
  const sessionId = sessionIdOf(key);
  const messageCreatedAtMs = createTimeMs(message.create_time);
  const { rows } = await tx.query<{
    position: string;
    context_revision: string;
    created: boolean;
    inserted: boolean;
  }>(RECORD_INPUT, [
    sessionId,
    input.installation.id,
    input.installation.workspaceId,
    input.installation.appId,
    message.chat_id,
    key.threadId,
    input.eventId,
    message.message_id,
    message.root_id ?? null,
    message.chat_type,
    sender.sender_id?.open_id ?? null,
    message.message_type,
    message.content,
    input.receivedAtMs,
    messageCreatedAtMs,
  ]);
  const row = rows[0]!;
  return {
    sessionId,
    position: Number(row.position),
    contextRevision: Number(row.context_revision),
    created: row.created,
    inserted: row.inserted,
    messageCreatedAtMs,
  };
}
