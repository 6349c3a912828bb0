import type { PoolClient } from '@neondatabase/serverless';
import type { Config, Env } from '../env';
import type { Installation } from '../installations/store';
import type { MessageReceiveEvent } from '../lark/schemas';

/** One accepted `im.message.receive_v1` from a user, already verified and de-duplicated. */
export interface InboundMessage {
  installation: Installation;
  eventId: string;
  event: MessageReceiveEvent;
  /** Worker clock when the request arrived. */
  receivedAtMs: number;
}

/**
 * THE HOOK the conversation engine replaces. Called by the webhook inside the same
 * transaction that inserted the event's dedup receipt, so the input is recorded exactly
 * once per event_id or not at all (the receipt rolls back with it). It must only write
 * through `tx` and must not call remote services (no lock is held across a remote call).
 *
 * For now it keeps the message in lark_inbound_messages. The engine will record the input
 * on the conversation actor here and register the typing ledger row.
 */
export async function recordInboundMessage(tx: PoolClient, input: InboundMessage): Promise<void> {
  const { message, sender } = input.event;
  await tx.query(
    `insert into lark_inbound_messages
       (installation_id, event_id, message_id, chat_id, thread_id, root_id, chat_type,
        sender_open_id, message_type, content, received_at_ms)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
     on conflict (installation_id, message_id) do nothing`,
    [
      input.installation.id,
      input.eventId,
      message.message_id,
      message.chat_id,
      message.thread_id ?? null,
      message.root_id ?? null,
      message.chat_type,
      sender.sender_id?.open_id ?? null,
      message.message_type,
      message.content,
      input.receivedAtMs,
    ],
  );
}

/**
 * Runs after the 200 is sent, through `executionCtx.waitUntil`, only for a newly recorded
 * input. Empty for now: the Typing Add goes here. It must open its own pool (the request's
 * pool is ending) and never throw.
 */
export async function afterInboundAnswered(
  _env: Env,
  _config: Config,
  _input: InboundMessage,
): Promise<void> {}
