import { ctidBatchDelete, deleteBatch, type Q } from './batch';

/**
 * Expired operation tickets, `grace` after their expiry (reaction_tickets_expires_idx).
 *
 * Why deletion is safe: every write or retirement with a ticket first looks the ticket up by
 * its ID (private.reaction_ticket_call, workers/reaction-tickets/ticket-call.ts); a deleted
 * ticket is not found and the request gets the terminal 410 operation_outcome_unknown, so a
 * delayed write still never applies. Long before this, the ticket was already refused as expired (410). Receipts
 * keep their own `ticket_expires_at` (their FK is `on delete set null`), so receipt and fence
 * retention do not depend on the ticket row. Issuance for the same operation ID stays refused
 * (410) without any row: the ID carries its creation stamp, older than the admission window
 * by then (workers/reaction-tickets/operation-id.ts, docs/retention-rules.md).
 * SKIP LOCKED: a ticket held by a request in flight (receipt FK lock) waits for the next run.
 *
 * Bounded at any table size (issue 15, docs/retention.md "Statement plans"): app_now() is read
 * once, so the cutoff is the expiry index's `Index Cond` and a run with nothing due reads a
 * few pages (compared per row, volatile, it walked the whole index). The batch is deleted by
 * ctid (batch.ts; ticket rows are never updated): by id it was 1,000 descents of the
 * random-UUID primary key. Each delete sets its receipt's ticket_id to null through the
 * foreign key, by 0088's index.
 */
export const PRUNE_TICKETS = ctidBatchDelete({
  table: 'private.reaction_tickets',
  where: `expires_at < (select t from now) - $1 * interval '1 millisecond'`,
  orderBy: 'expires_at',
  limit: '$2',
});

export async function pruneExpiredTickets(q: Q, graceMs: number, batch: number): Promise<number> {
  return deleteBatch(q, PRUNE_TICKETS, [graceMs, batch]);
}
