import type { Pool } from '@neondatabase/serverless';

/**
 * The webhook's event_id receipts (`lark_event_receipts`), which dedupe Lark's redeliveries.
 * channel/accept.ts inserts them inside its one accept statement; the typing maintenance
 * passes prune them through this module.
 */

/** Lark retries for about 7.1 h; receipts are kept 24 h, well past that. */
export const RECEIPT_RETENTION_MS = 24 * 3600_000;

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
