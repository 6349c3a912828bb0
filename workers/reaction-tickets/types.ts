import type { Selectable } from 'kysely';
import type {
  PrivateChatReactionOperations,
  PrivateChatRetiredReactionOperations,
  PrivateReactionTickets,
} from '../db/schema.generated';

/**
 * Row and value types of the mobile reaction API; SQL lives in the modules that own each table.
 * Table rows derive from the generated schema types (`npm run db:types`).
 */
export type Desired = 'present' | 'absent';
export type Outcome = 'added' | 'removed' | 'unchanged';
export type WriteContract = 'ticket' | 'legacy';

/** The canonical intent a ticket binds: message, normalized emoji and desired state. */
export interface Intent {
  messageId: string;
  emoji: string;
  desired: Desired;
}

/**
 * A generated row (workers/db/schema.generated.ts, from the migrations) with text columns
 * narrowed to the values their CHECK constraints allow. Each narrowed column must exist in the
 * row and its type must fit the generated one, so a renamed or retyped column fails typecheck.
 */
type Checked<Row, Narrow extends { [K in keyof Narrow]: K extends keyof Row ? Row[K] : never }> = Omit<
  Row,
  keyof Narrow
> &
  Narrow;

/** private.reaction_tickets, as `select *` returns it. */
export type TicketRow = Checked<Selectable<PrivateReactionTickets>, { desired: Desired }>;

/** private.chat_reaction_operations (operation receipts), as `select *` returns it. */
export type ReceiptRow = Checked<
  Selectable<PrivateChatReactionOperations>,
  { desired: Desired; outcome: Outcome; contract: WriteContract }
>;

/** private.chat_retired_reaction_operations (retirement fences), as `select *` returns it. */
export type FenceRow = Checked<Selectable<PrivateChatRetiredReactionOperations>, { contract: WriteContract }>;

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

/** The authenticated caller of a write or retirement. */
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

export type RetireResult =
  | { status: 'retired'; operationId: string; retiredAt: string; message: MessageReactions | null }
  | { status: 'applied'; operationId: string; receipt: Receipt; message: MessageReactions | null };
