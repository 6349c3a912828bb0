import { sqlState, withStatement } from '../db/tx';
import { AppError } from '../errors';
import { busyError } from './budget';
import { CONTRACT_ANSWERS, CONTRACT_ERROR } from './contract-answers';
import { operationStampMs } from './operation-id';
import { groupReactions } from './reactions';
import { expiredAnswer } from './tickets';
import {
  type Caller,
  type Intent,
  type MessageReactions,
  type Queryable,
  type Receipt,
  type ReceiptRow,
  type RetireResult,
  toReceipt,
  type WriteResult,
} from './types';

/**
 * One ticketed write or retirement as one statement: private.reaction_ticket_call
 * (migrations/functions/reaction_tickets.sql) runs the whole contract as its own
 * transaction, and this module maps its answers and errors back to the API's shapes.
 *
 * Why one statement: the write is round-trip bound, and on a hot message every round trip
 * made while the message row is locked serializes all writers of that message. As
 * begin + 7 statements + commit it ran at 0.11–0.13× a bare upsert with 32 actors
 * (bench/suites/30-tickets.ts); as one autocommit statement the locks are released by the
 * server when the statement ends.
 */

/** The caller's budgets, enforced inside the function (see the migration's header). */
export interface TicketCallBudget {
  budgetMs: number;
  lockTimeoutMs: number;
}

const SQL = 'select private.reaction_ticket_call($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) as r';

/** private.reaction_state: the message's version and rows, as one JSON value. */
interface StateJson {
  message_id: string;
  reaction_version: number | string;
  rows: { emoji: string; actor_id: string }[];
}

function message(state: StateJson | null | undefined): MessageReactions | null {
  return state ? groupReactions(state.message_id, Number(state.reaction_version), state.rows) : null;
}

const iso = (t: string | number | Date) => new Date(t).toISOString();

interface Details {
  operationId?: string;
  expiredAt?: string;
  serverTime?: string;
  receipt?: ReceiptRow | null;
  message?: StateJson | null;
}

function toAppError(key: string, raw: Details | null): AppError {
  const answer = CONTRACT_ANSWERS[key];
  // A key this module does not know is a mismatch between the migration and the code: a 500.
  if (!answer) return new AppError('internal_error', 'Unexpected reaction contract answer');
  const [code, text] = answer;
  if (!raw) return new AppError(code, text);
  const operationId = raw.operationId!;
  const current = message(raw.message);
  if (code === 'operation_expired')
    return expiredAnswer({
      operationId,
      stampMs: operationStampMs(operationId),
      expiredAt: raw.expiredAt!,
      serverTime: raw.serverTime!,
      receipt: raw.receipt ? toReceipt(raw.receipt) : null,
      message: current,
    });
  return new AppError(code, text, { operationId, message: current });
}

export interface TicketCallResult {
  status?: 'retired' | 'applied';
  replayed?: boolean;
  receipt?: Receipt;
  retiredAt?: string;
  message: MessageReactions | null;
}

export async function ticketCall(
  db: Queryable,
  budget: TicketCallBudget,
  call: { caller: Caller; operationId: string; ticketId: string; intent: Intent | null },
): Promise<TicketCallResult> {
  const { caller, operationId, ticketId, intent } = call;
  let r: {
    status?: 'retired' | 'applied';
    replayed?: boolean;
    receipt?: ReceiptRow;
    retired_at?: string;
    message: StateJson | null;
  };
  try {
    // Deadlocks and restarts are retried as withTx would (the statement rolled back whole).
    const { rows } = await withStatement(budget, () =>
      db.query<{ r: typeof r }>(SQL, [
        intent === null,
        caller.actorId,
        caller.issuedAt ?? null,
        operationId,
        ticketId,
        intent?.messageId ?? null,
        intent?.emoji ?? null,
        intent?.desired ?? null,
        Math.max(1, Math.floor(budget.budgetMs)),
        Math.max(1, Math.floor(budget.lockTimeoutMs)),
      ]),
    );
    r = rows[0]!.r;
  } catch (err) {
    if (sqlState(err) === CONTRACT_ERROR) {
      const e = err as { message: string; detail?: string };
      throw toAppError(e.message, JSON.parse(e.detail ?? 'null') as Details | null);
    }
    throw busyError(err) ?? err;
  }
  return {
    status: r.status,
    replayed: r.replayed,
    receipt: r.receipt && toReceipt(r.receipt),
    retiredAt: r.retired_at && iso(r.retired_at),
    message: message(r.message),
  };
}

/** The ticketed write: applies the intent bound to the ticket (a replay returns its receipt). */
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
