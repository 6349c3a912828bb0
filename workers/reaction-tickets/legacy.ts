import { AppError } from '../errors';
import { admitLegacyWrite } from './contract';
import { admitActor, admitToMessage } from './directory';
import { lockMessage, lockOperation, lockRetirement } from './locks';
import { operationStampMs } from './operation-id';
import { applyDesired, readReactions } from './reactions';
import { findFence, findReceipt, insertFence, insertReceipt } from './receipts';
import { expiredError, findTicketByOperation, sameIntent } from './tickets';
import {
  type Caller,
  type Intent,
  type Queryable,
  type RetireResult,
  toReceipt,
  type WriteResult,
} from './types';

/**
 * The legacy unbounded contract for old clients: desired-state writes and retirements keyed
 * by a client operation ID with no ticket and no expiry. Admitted only while the contract is
 * open (`admitLegacyWrite`, which also fences the drain); an operation that has a ticket must
 * use it, so the legacy path can never bypass a ticket's expiry.
 */
async function refuseTicketed(client: Queryable, actorId: string, operationId: string): Promise<void> {
  if (await findTicketByOperation(client, actorId, operationId))
    throw new AppError('ticket_required', 'This operation has a ticket; send it');
}

async function retiredError(client: Queryable, operationId: string, messageId: string | null) {
  return new AppError('operation_retired', 'This operation was retired and can never apply', {
    operationId,
    message: messageId ? await readReactions(client, messageId) : null,
  });
}

/**
 * An ID stamped as a ticket-contract operation (UUIDv7) older than the admission window is
 * refused here too: once housekeeping has deleted its ticket, refuseTicketed no longer sees
 * it, and the ticketless path must not become a way back for a forgotten operation. Legacy
 * clients' own IDs (no stamp) keep the legacy contract's behaviour.
 */
async function refuseStampedPastWindow(
  client: Queryable,
  operationId: string,
  windowSeconds: number,
  messageId: string,
): Promise<void> {
  const stampMs = operationStampMs(operationId);
  if (stampMs === null) return;
  const { rows } = await client.query<{ now: Date }>('select app_now() as now');
  const nowMs = rows[0]!.now.valueOf();
  const expiredAt = stampMs + windowSeconds * 1000;
  if (expiredAt <= nowMs)
    throw await expiredError(client, { operationId, stampMs, expiredAt, nowMs, receipt: null, messageId });
}

/**
 * The start of every legacy write and retirement: the legacy contract still admits writes,
 * then the operation lock (so it serializes with the ticketed path), then the operation is
 * not a ticketed one.
 */
async function legacyOperation(client: Queryable, caller: Caller, operationId: string): Promise<void> {
  await admitLegacyWrite(client);
  await lockOperation(client, caller.actorId, operationId);
  await refuseTicketed(client, caller.actorId, operationId);
}

export async function applyLegacy(
  client: Queryable,
  caller: Caller,
  operationId: string,
  intent: Intent,
  windowSeconds: number,
): Promise<WriteResult> {
  await legacyOperation(client, caller, operationId);
  const admission = await admitToMessage(client, caller.actorId, caller.issuedAt, intent.messageId);
  const prior = await findReceipt(client, caller.actorId, operationId);
  if (prior) {
    if (!sameIntent(prior, intent))
      throw new AppError('intent_mismatch', 'This operation applied another intent');
    return {
      receipt: toReceipt(prior),
      replayed: true,
      message: (await readReactions(client, prior.message_id))!,
    };
  }
  // A replay of a receipt above mutates nothing; a new application must be inside the window.
  await refuseStampedPastWindow(client, operationId, windowSeconds, intent.messageId);
  await lockRetirement(client, caller.actorId, operationId);
  if (await findFence(client, caller.actorId, operationId))
    throw await retiredError(client, operationId, intent.messageId);
  const locked = await lockMessage(client, intent.messageId);
  if (!locked) throw new AppError('not_found', 'Message not found');
  const { outcome, version } = await applyDesired(
    client,
    intent.messageId,
    caller.actorId,
    intent.emoji,
    intent.desired,
    locked.version,
  );
  const row = await insertReceipt(client, {
    actorId: caller.actorId,
    operationId,
    workspaceId: admission.workspaceId,
    conversationId: admission.conversationId,
    messageId: intent.messageId,
    emoji: intent.emoji,
    desired: intent.desired,
    outcome,
    reactionVersion: version,
    contract: 'legacy',
    ticketId: null,
    ticketExpiresAt: null,
  });
  return {
    receipt: toReceipt(row),
    replayed: false,
    message: (await readReactions(client, intent.messageId))!,
  };
}

/** Retires an arbitrary operation ID (old clients' sign-out journals). */
export async function retireLegacy(
  client: Queryable,
  caller: Caller,
  operationId: string,
): Promise<RetireResult> {
  await legacyOperation(client, caller, operationId);
  await admitActor(client, caller.actorId, caller.issuedAt);
  const prior = await findReceipt(client, caller.actorId, operationId);
  if (prior) return { status: 'applied', operationId, receipt: toReceipt(prior), message: null };
  await lockRetirement(client, caller.actorId, operationId);
  const fence = await insertFence(client, {
    actorId: caller.actorId,
    operationId,
    workspaceId: null,
    messageId: null,
    contract: 'legacy',
    ticketId: null,
    ticketExpiresAt: null,
  });
  return {
    status: 'retired',
    operationId,
    retiredAt: new Date(fence.created_at).toISOString(),
    message: null,
  };
}
