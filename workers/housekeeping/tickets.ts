import type { PoolClient } from '@neondatabase/serverless';

type Q = Pick<PoolClient, 'query'>;

/**
 * Expired operation tickets, `grace` after their expiry (reaction_tickets_expires_idx).
 *
 * Why deletion is safe: every write or retirement with a ticket first looks the ticket up by
 * its ID (workers/reaction-tickets/operations.ts, lockTicket); a deleted ticket is not found
 * and the request gets the terminal 410 operation_outcome_unknown, so a delayed write still
 * never applies. Long before this, the ticket was already refused as expired (410). Receipts
 * keep their own `ticket_expires_at` (their FK is `on delete set null`), so receipt and fence
 * retention do not depend on the ticket row. Issuance for the same operation ID stays refused
 * (410) without any row: the ID carries its creation stamp, older than the admission window
 * by then (workers/reaction-tickets/operation-id.ts, docs/retention-rules.md).
 * SKIP LOCKED: a ticket held by a request in flight (receipt FK lock) waits for the next run.
 */
const PRUNE_TICKETS = `
with old as (
  select id as old_id from private.reaction_tickets
   where expires_at < app_now() - $1 * interval '1 millisecond'
   order by expires_at
   limit $2
   for update skip locked
)
delete from private.reaction_tickets using old where id = old_id`;

export async function pruneExpiredTickets(q: Q, graceMs: number, batch: number): Promise<number> {
  const { rowCount } = await q.query(PRUNE_TICKETS, [graceMs, batch]);
  return rowCount ?? 0;
}
