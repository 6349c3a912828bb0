import type { Pool } from '@neondatabase/serverless';
import { isPgStorable } from '../lib/pg-text';

/**
 * The webhook's event_id receipts (`lark_event_receipts`), which dedupe Lark's redeliveries.
 * channel/accept.ts inserts them inside its one accept statement; the typing maintenance
 * passes prune them through this module.
 */

/** Lark retries for about 7.1 h; receipts are kept 24 h, well past that. */
export const RECEIPT_RETENTION_MS = 24 * 3600_000;

/**
 * The receipt key of an event id. Lark's ids are plain hex; one Postgres cannot store (U+0000,
 * a lone surrogate) is kept in its JSON-escaped form, so even that delivery can be recorded
 * and its redeliveries deduped.
 */
export function receiptKey(eventId: string): string {
  return isPgStorable(eventId) ? eventId : JSON.stringify(eventId);
}

/**
 * The first step of a statement that processes a verified event: its receipt, `receipt`, one
 * row when this delivery is the event's first ($1 installation, $2 receipt key), none for a
 * redelivery, so every later step that selects from it does nothing twice. `eventType` is a
 * fixed literal of the caller's (never a value from the request).
 */
export function receiptCte(eventType: 'im.message.receive_v1' | 'im.message.recalled_v1'): string {
  return `receipt as (
  insert into lark_event_receipts (installation_id, event_id, event_type)
  values ($1, $2, '${eventType}')
  on conflict do nothing
  returning 1
)`;
}

/**
 * Records a verified event that will not be processed (status `rejected`); false when its
 * event id already has a receipt (a redelivery). Accepted receipts are written by accept.ts.
 */
export async function recordRejectedEvent(
  q: Pick<Pool, 'query'>,
  installationId: string,
  eventId: string,
  eventType: string,
): Promise<boolean> {
  const { rowCount } = await q.query(
    `insert into lark_event_receipts (installation_id, event_id, event_type, status)
     values ($1, $2, $3, 'rejected')
     on conflict do nothing`,
    [installationId, receiptKey(eventId), receiptKey(eventType)],
  );
  return (rowCount ?? 0) > 0;
}

/** Deletes receipts older than the retention, at most `limit` per call (oldest first). */
export async function pruneEventReceipts(q: Pick<Pool, 'query'>, limit = 1000): Promise<number> {
  const { rowCount } = await q.query(
    `delete from lark_event_receipts r
     using (select installation_id, event_id from lark_event_receipts
            where received_at < app_now() - $1 * interval '1 millisecond'
            order by received_at limit $2) old
     where r.installation_id = old.installation_id and r.event_id = old.event_id`,
    [RECEIPT_RETENTION_MS, limit],
  );
  return rowCount ?? 0;
}
