import type { FenceRow, Queryable, Receipt, ReceiptRow, WriteContract } from './types';

export type { FenceRow } from './types';

/** Operation receipts (private.chat_reaction_operations) and retirement fences. */
export async function findReceipt(
  client: Queryable,
  actorId: string,
  operationId: string,
): Promise<ReceiptRow | null> {
  const { rows } = await client.query<ReceiptRow>(
    'select * from private.chat_reaction_operations where actor_id = $1 and operation_id = $2',
    [actorId, operationId],
  );
  return rows[0] ?? null;
}

/** A receipt to record: what clients will see of it (less its time), and who and where. */
export interface NewReceipt extends Omit<Receipt, 'appliedAt'> {
  actorId: string;
  workspaceId: string;
  conversationId: string;
  ticketId: string | null;
  ticketExpiresAt: Date | null;
}

export async function insertReceipt(client: Queryable, r: NewReceipt): Promise<ReceiptRow> {
  const { rows } = await client.query<ReceiptRow>(
    `insert into private.chat_reaction_operations
       (actor_id, operation_id, workspace_id, conversation_id, message_id, emoji, desired, outcome,
        reaction_version, contract, ticket_id, ticket_expires_at)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
     returning *`,
    [
      r.actorId,
      r.operationId,
      r.workspaceId,
      r.conversationId,
      r.messageId,
      r.emoji,
      r.desired,
      r.outcome,
      r.reactionVersion,
      r.contract,
      r.ticketId,
      r.ticketExpiresAt,
    ],
  );
  return rows[0]!;
}

export async function findFence(
  client: Queryable,
  actorId: string,
  operationId: string,
): Promise<FenceRow | null> {
  const { rows } = await client.query<FenceRow>(
    'select * from private.chat_retired_reaction_operations where actor_id = $1 and operation_id = $2',
    [actorId, operationId],
  );
  return rows[0] ?? null;
}

/** Idempotent: retiring twice keeps the first fence. Returns the fence row. */
export async function insertFence(
  client: Queryable,
  f: {
    actorId: string;
    operationId: string;
    workspaceId: string | null;
    messageId: string | null;
    contract: WriteContract;
    ticketId: string | null;
    ticketExpiresAt: Date | null;
  },
): Promise<FenceRow> {
  await client.query(
    `insert into private.chat_retired_reaction_operations
       (actor_id, operation_id, workspace_id, message_id, contract, ticket_id, ticket_expires_at)
     values ($1, $2, $3, $4, $5, $6, $7)
     on conflict (actor_id, operation_id) do nothing`,
    [f.actorId, f.operationId, f.workspaceId, f.messageId, f.contract, f.ticketId, f.ticketExpiresAt],
  );
  return (await findFence(client, f.actorId, f.operationId))!;
}
