/** Row and value types of the mobile reaction API; SQL lives in the modules that own each table. */
export type Desired = 'present' | 'absent';
export type Outcome = 'added' | 'removed' | 'unchanged';
export type WriteContract = 'ticket' | 'legacy';

/** The canonical intent a ticket binds: message, normalized emoji and desired state. */
export interface Intent {
  messageId: string;
  emoji: string;
  desired: Desired;
}

export interface TicketRow {
  id: string;
  actor_id: string;
  operation_id: string;
  workspace_id: string;
  conversation_id: string;
  message_id: string;
  emoji: string;
  desired: Desired;
  key_version: string;
  created_at: Date;
  expires_at: Date;
}

export interface ReceiptRow {
  actor_id: string;
  operation_id: string;
  workspace_id: string;
  conversation_id: string;
  message_id: string;
  emoji: string;
  desired: Desired;
  outcome: Outcome;
  reaction_version: string;
  contract: WriteContract;
  ticket_id: string | null;
  ticket_expires_at: Date | null;
  created_at: Date;
}

/** The receipt as clients see it; a replay returns exactly the same object. */
export interface Receipt {
  operationId: string;
  messageId: string;
  emoji: string;
  desired: Desired;
  outcome: Outcome;
  reactionVersion: number;
  contract: WriteContract;
  appliedAt: string;
}

export function toReceipt(row: ReceiptRow): Receipt {
  return {
    operationId: row.operation_id,
    messageId: row.message_id,
    emoji: row.emoji,
    desired: row.desired,
    outcome: row.outcome,
    reactionVersion: Number(row.reaction_version),
    contract: row.contract,
    appliedAt: new Date(row.created_at).toISOString(),
  };
}

/** The exact current reactions of one message. */
export interface MessageReactions {
  messageId: string;
  reactionVersion: number;
  reactions: { emoji: string; count: number; actorIds: string[] }[];
}

/** The minimal query surface of a Neon PoolClient / Pool, so Node scripts can pass either. */
export interface Queryable {
  query<R extends object = Record<string, unknown>>(
    sql: string,
    params?: unknown[],
  ): Promise<{ rows: R[]; rowCount: number | null }>;
}

/** Emoji are compared after NFC and without variation selectors, so 👍 and 👍️ are one reaction. */
export function normalizeEmoji(raw: string): string {
  return raw
    .normalize('NFC')
    .replace(/[\uFE0E\uFE0F]/g, '')
    .trim();
}
