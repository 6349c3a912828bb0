import { AppError } from '../errors';
import { admitToMessage } from './directory';
import { freshNow, lockMessage, lockOperation, lockRetirement } from './locks';
import { applyDesired, readReactions } from './reactions';
import { findReceipt, insertFence, insertReceipt } from './receipts';
import { findTicketById, sameIntent, throwExpired } from './tickets';
import {
  type Intent,
  type MessageReactions,
  type Queryable,
  type Receipt,
  type TicketRow,
  toReceipt,
} from './types';

/**
 * The ticketed write contract. Each function runs inside one budgeted transaction (the
 * caller's withTx) and takes locks in the fixed order: operation, retirement, message.
 * Expiry is decided from fresh database time read after each lock is acquired and before
 * any mutation, so a request that waited on a lock past its expiry changes nothing.
 */
export interface Caller {
  actorId: string;
  /** JWT `iat` in seconds, checked against the actor's last sign-out. */
  issuedAt?: number;
}

export interface WriteResult {
  receipt: Receipt;
  replayed: boolean;
  message: MessageReactions;
}

async function expiredAt(client: Queryable, ticket: TicketRow): Promise<boolean> {
  const now = await freshNow(client);
  return now.getTime() >= new Date(ticket.expires_at).getTime();
}

/** Operation lock, then the ticket's binding: actor, operation and admission. */
async function lockTicket(
  client: Queryable,
  caller: Caller,
  operationId: string,
  ticketId: string,
): Promise<TicketRow> {
  await lockOperation(client, caller.actorId, operationId);
  const ticket = await findTicketById(client, ticketId);
  // Forged IDs fail the MAC before this; foreign or re-targeted tickets fail here.
  if (!ticket || ticket.actor_id !== caller.actorId || ticket.operation_id !== operationId)
    throw new AppError('ticket_invalid', 'The ticket is not valid for this actor and operation');
  await admitToMessage(client, caller.actorId, caller.issuedAt, ticket.message_id);
  return ticket;
}

export async function applyWithTicket(
  client: Queryable,
  caller: Caller,
  operationId: string,
  ticketId: string,
  intent: Intent,
): Promise<WriteResult & { workspaceId: string }> {
  const ticket = await lockTicket(client, caller, operationId, ticketId);
  if (!sameIntent(ticket, intent))
    throw new AppError('intent_mismatch', 'The request does not match the intent bound to this ticket');
  const prior = await findReceipt(client, caller.actorId, operationId);
  if (await expiredAt(client, ticket)) await throwExpired(client, ticket, prior && toReceipt(prior));
  if (prior)
    return {
      receipt: toReceipt(prior),
      replayed: true,
      message: (await readReactions(client, ticket.message_id))!,
      workspaceId: ticket.workspace_id,
    };

  await lockRetirement(client, caller.actorId, operationId);
  if (await expiredAt(client, ticket)) await throwExpired(client, ticket, null);
  const { rows: fenced } = await client.query(
    'select 1 from private.chat_retired_reaction_operations where actor_id = $1 and operation_id = $2',
    [caller.actorId, operationId],
  );
  if (fenced.length > 0) throw await retiredError(client, operationId, ticket.message_id);

  const locked = await lockMessage(client, ticket.message_id);
  if (!locked) throw new AppError('not_found', 'Message not found');
  if (await expiredAt(client, ticket)) await throwExpired(client, ticket, null);

  const { outcome, version } = await applyDesired(
    client,
    ticket.message_id,
    caller.actorId,
    ticket.emoji,
    ticket.desired,
    locked.version,
  );
  const row = await insertReceipt(client, {
    actorId: caller.actorId,
    operationId,
    workspaceId: ticket.workspace_id,
    conversationId: ticket.conversation_id,
    messageId: ticket.message_id,
    emoji: ticket.emoji,
    desired: ticket.desired,
    outcome,
    reactionVersion: version,
    contract: 'ticket',
    ticketId: ticket.id,
    ticketExpiresAt: ticket.expires_at,
  });
  return {
    receipt: toReceipt(row),
    replayed: false,
    message: (await readReactions(client, ticket.message_id))!,
    workspaceId: ticket.workspace_id,
  };
}

export async function retiredError(client: Queryable, operationId: string, messageId: string | null) {
  return new AppError('operation_retired', 'This operation was retired and can never apply', {
    operationId,
    message: messageId ? await readReactions(client, messageId) : null,
  });
}

export type RetireResult =
  | { status: 'retired'; operationId: string; retiredAt: string; message: MessageReactions | null }
  | { status: 'applied'; operationId: string; receipt: Receipt; message: MessageReactions | null };

/**
 * Retires an unapplied operation: a fence that makes every later write of it fail. An
 * operation that already applied cannot be retired; the answer is its receipt.
 */
export async function retireWithTicket(
  client: Queryable,
  caller: Caller,
  operationId: string,
  ticketId: string,
): Promise<RetireResult & { workspaceId: string }> {
  const ticket = await lockTicket(client, caller, operationId, ticketId);
  const prior = await findReceipt(client, caller.actorId, operationId);
  if (await expiredAt(client, ticket)) await throwExpired(client, ticket, prior && toReceipt(prior));
  const message = await readReactions(client, ticket.message_id);
  const workspaceId = ticket.workspace_id;
  if (prior) return { status: 'applied', operationId, receipt: toReceipt(prior), message, workspaceId };

  await lockRetirement(client, caller.actorId, operationId);
  if (await expiredAt(client, ticket)) await throwExpired(client, ticket, null);
  const fence = await insertFence(client, {
    actorId: caller.actorId,
    operationId,
    workspaceId: ticket.workspace_id,
    messageId: ticket.message_id,
    contract: 'ticket',
    ticketId: ticket.id,
    ticketExpiresAt: ticket.expires_at,
  });
  return {
    status: 'retired',
    operationId,
    retiredAt: new Date(fence.created_at).toISOString(),
    message,
    workspaceId,
  };
}
