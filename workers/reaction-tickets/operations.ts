import { AppError } from '../errors';
import { admitActor, admitToMessage } from './directory';
import { guardedApply } from './guarded-apply';
import { lockMessage, lockOperation, lockRetirement } from './locks';
import { readReactions } from './reactions';
import { insertFence } from './receipts';
import { sameIntent, throwExpired } from './tickets';
import {
  type Intent,
  type MessageReactions,
  type Queryable,
  type Receipt,
  type ReceiptRow,
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

function isExpired(now: Date, ticket: TicketRow): boolean {
  return new Date(now).getTime() >= new Date(ticket.expires_at).getTime();
}

// Read in the statement after the operation lock: the ticket, its receipt and fresh time.
const TICKET_SQL = `
  select t.*, app_now() as now,
    (select row_to_json(o) from private.chat_reaction_operations o
      where o.actor_id = t.actor_id and o.operation_id = t.operation_id) as receipt
  from private.reaction_tickets t where t.id = $1`;

// Read in the statement after the retirement lock: the fence and fresh time.
const FENCE_SQL = `
  select exists (select 1 from private.chat_retired_reaction_operations
                 where actor_id = $1 and operation_id = $2) as fenced, app_now() as now`;

/**
 * Operation lock, then the ticket's binding (actor, operation) and admission. `messageId` is
 * the message the request names (the write's intent; none for a retirement), used only to
 * show the current state when the ticket is gone.
 */
async function lockTicket(
  client: Queryable,
  caller: Caller,
  operationId: string,
  ticketId: string,
  messageId: string | null,
) {
  await lockOperation(client, caller.actorId, operationId);
  const { rows } = await client.query<TicketRow & { now: Date; receipt: ReceiptRow | null }>(TICKET_SQL, [
    ticketId,
  ]);
  const row = rows[0];
  if (!row) throw await forgottenError(client, caller, operationId, messageId);
  // Forged IDs fail the MAC before this; foreign or re-targeted tickets fail here.
  if (row.actor_id !== caller.actorId || row.operation_id !== operationId)
    throw new AppError('ticket_invalid', 'The ticket is not valid for this actor and operation');
  await admitToMessage(client, caller.actorId, caller.issuedAt, row.message_id);
  const { now, receipt, ...ticket } = row;
  return { ticket: ticket as TicketRow, prior: receipt, now };
}

/**
 * A ticket whose MAC verifies was issued by this server; if its row is gone, housekeeping
 * deleted it (long after its expiry) or its message went away. Its operation can never apply
 * again (any write needs the row), but whether it applied before is no longer known here: a
 * terminal answer that says exactly that, with the current state to read. Never 403, which
 * would claim the operation was never accepted (issue 15 item 5).
 */
async function forgottenError(
  client: Queryable,
  caller: Caller,
  operationId: string,
  messageId: string | null,
): Promise<AppError> {
  if (messageId) await admitToMessage(client, caller.actorId, caller.issuedAt, messageId);
  else await admitActor(client, caller.actorId, caller.issuedAt);
  return new AppError(
    'operation_outcome_unknown',
    'This operation is no longer known to the server; stop replaying it. Whether it applied is ' +
      'reflected in the current reactions. A new reaction needs a new operation ID.',
    { operationId, message: messageId ? await readReactions(client, messageId) : null },
  );
}

/** Retirement lock, then fresh time and whether the operation is fenced. */
async function lockFence(client: Queryable, caller: Caller, operationId: string) {
  await lockRetirement(client, caller.actorId, operationId);
  const { rows } = await client.query<{ fenced: boolean; now: Date }>(FENCE_SQL, [
    caller.actorId,
    operationId,
  ]);
  return rows[0]!;
}

export async function applyWithTicket(
  client: Queryable,
  caller: Caller,
  operationId: string,
  ticketId: string,
  intent: Intent,
): Promise<WriteResult> {
  const { ticket, prior, now } = await lockTicket(client, caller, operationId, ticketId, intent.messageId);
  if (!sameIntent(ticket, intent))
    throw new AppError('intent_mismatch', 'The request does not match the intent bound to this ticket');
  if (isExpired(now, ticket)) await throwExpired(client, ticket, prior && toReceipt(prior));
  if (prior) {
    const message = (await readReactions(client, ticket.message_id))!;
    return { receipt: toReceipt(prior), replayed: true, message };
  }

  const fence = await lockFence(client, caller, operationId);
  if (isExpired(fence.now, ticket)) await throwExpired(client, ticket, null);
  if (fence.fenced) throw await retiredError(client, operationId, ticket.message_id);

  const locked = await lockMessage(client, ticket.message_id);
  if (!locked) throw new AppError('not_found', 'Message not found');
  // Fresh time after the message lock: the last expiry check is inside the mutating statement itself (guardedApply).
  const applied = await guardedApply(client, ticket, locked.version);
  if (!applied) return throwExpired(client, ticket, null);
  return { receipt: toReceipt(applied.receipt), replayed: false, message: applied.message };
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
): Promise<RetireResult> {
  const { ticket, prior, now } = await lockTicket(client, caller, operationId, ticketId, null);
  if (isExpired(now, ticket)) await throwExpired(client, ticket, prior && toReceipt(prior));
  const message = await readReactions(client, ticket.message_id);
  if (prior) return { status: 'applied', operationId, receipt: toReceipt(prior), message };

  const fenceState = await lockFence(client, caller, operationId);
  if (isExpired(fenceState.now, ticket)) await throwExpired(client, ticket, null);
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
  };
}
