import type { Queryable } from './types';

/**
 * The fixed lock order of every reaction write: operation, then retirement, then message.
 * The first two are transaction-scoped advisory locks on (actor, operation ID), so they exist
 * before any ticket, receipt or fence row does; the message lock is the message row itself,
 * which serializes every reaction change of one message (its reaction_version bumps).
 * Tests hold these from another connection with the same SQL.
 */
export const OPERATION_LOCK_SQL = "select pg_advisory_xact_lock(720101, hashtext($1 || '/' || $2))";
export const RETIREMENT_LOCK_SQL = "select pg_advisory_xact_lock(720102, hashtext($1 || '/' || $2))";
// Time must not ride along in this statement: its target list is computed before the row
// lock is granted, so a request that waited here would carry a stale clock (see freshNow).
export const MESSAGE_LOCK_SQL = 'select reaction_version from private.messages where id = $1 for update';
// Issuance only, taken after the operation lock: serializes one actor's new tickets so the
// outstanding count read under it is exact (see tickets.ts). Nothing else takes it.
export const ISSUANCE_LOCK_SQL = 'select pg_advisory_xact_lock(720103, hashtext($1))';

export async function lockOperation(client: Queryable, actorId: string, operationId: string): Promise<void> {
  await client.query(OPERATION_LOCK_SQL, [actorId, operationId]);
}

export async function lockRetirement(client: Queryable, actorId: string, operationId: string): Promise<void> {
  await client.query(RETIREMENT_LOCK_SQL, [actorId, operationId]);
}

export async function lockIssuance(client: Queryable, actorId: string): Promise<void> {
  await client.query(ISSUANCE_LOCK_SQL, [actorId]);
}

/** Locks the message row; returns its reaction version under the lock, or null. */
export async function lockMessage(client: Queryable, messageId: string): Promise<{ version: number } | null> {
  const { rows } = await client.query<{ reaction_version: string }>(MESSAGE_LOCK_SQL, [messageId]);
  const row = rows[0];
  return row ? { version: Number(row.reaction_version) } : null;
}

/**
 * Fresh database time: every expiry decision reads it in its own statement, issued after the
 * locks it depends on are granted.
 */
export async function freshNow(client: Queryable): Promise<Date> {
  const { rows } = await client.query<{ now: Date }>('select app_now() as now');
  return rows[0]!.now;
}
