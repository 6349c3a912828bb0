import { AppError } from '../errors';
import { readReactions } from './reactions';
import { type TicketCallBudget, ticketCall } from './ticket-call';
import type { Intent, MessageReactions, Queryable, Receipt } from './types';

/**
 * The ticketed write contract. Each call is one statement, one round trip: the SQL function
 * private.reaction_ticket_call (migrations/functions/reaction_tickets.sql) takes the locks in the fixed order,
 * operation, retirement, message, reads fresh database time after each lock is granted and
 * before any mutation (so a request that waited on a lock past its expiry changes nothing),
 * and runs as its own transaction. ticket-call.ts maps its errors back to the typed answers.
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

export async function applyWithTicket(
  db: Queryable,
  budget: TicketCallBudget,
  caller: Caller,
  operationId: string,
  ticketId: string,
  intent: Intent,
): Promise<WriteResult> {
  const out = await ticketCall(db, budget, { caller, operationId, ticketId, intent });
  return { receipt: out.receipt!, replayed: out.replayed!, message: out.message! };
}

/** Used by the legacy contract (legacy.ts), which keeps its multi-statement transaction. */
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
  db: Queryable,
  budget: TicketCallBudget,
  caller: Caller,
  operationId: string,
  ticketId: string,
): Promise<RetireResult> {
  const out = await ticketCall(db, budget, { caller, operationId, ticketId, intent: null });
  if (out.status === 'applied')
    return { status: 'applied', operationId, receipt: out.receipt!, message: out.message };
  return { status: 'retired', operationId, retiredAt: out.retiredAt!, message: out.message };
}
