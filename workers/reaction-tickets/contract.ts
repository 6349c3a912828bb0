import { AppError } from '../errors';
import type { Queryable } from './types';

/**
 * The legacy unbounded desired-state write contract (writes and retirements without a
 * ticket or expiry). Its state lives in private.write_contract_state, not in an env var, so
 * every Worker and the retention cleanup see one truth.
 *
 * Drain: every legacy transaction holds the state row FOR SHARE from admission to commit
 * (`admitLegacyWrite`), so the closing UPDATE acquires the row only after each admitted
 * legacy transaction has ended; once it commits, any later legacy request reads `closed`
 * and fails closed. `drained_at` records that instant.
 */
export const LEGACY_CONTRACT = 'legacy_desired_state';

export interface LegacyContractStatus {
  open: boolean;
  closedAt: Date | null;
  drainedAt: Date | null;
  /** Legacy receipts or fences created after the close: must be 0 (a drain violation otherwise). */
  admittedAfterClose: number;
  /** True only when closed, drained, and nothing legacy was admitted after the close. */
  closedAndDrained: boolean;
}

/**
 * For the retention cleanup: deletion may only be enabled while `closedAndDrained` is true.
 * Plain reads; safe on any connection (pool or transaction client).
 */
export async function getLegacyContractStatus(client: Queryable): Promise<LegacyContractStatus> {
  const { rows } = await client.query<{ closed_at: Date | null; drained_at: Date | null; after: string }>(
    `select s.closed_at, s.drained_at,
       case when s.closed_at is null then 0 else
         (select count(*) from private.chat_reaction_operations o
           where o.contract = 'legacy' and o.created_at > s.closed_at)
       + (select count(*) from private.chat_retired_reaction_operations f
           where f.contract = 'legacy' and f.created_at > s.closed_at) end as after
     from private.write_contract_state s where s.contract = $1`,
    [LEGACY_CONTRACT],
  );
  const row = rows[0];
  if (!row) throw new Error('write_contract_state row is missing (migration 0020 not applied?)');
  const admittedAfterClose = Number(row.after);
  return {
    open: row.closed_at === null,
    closedAt: row.closed_at,
    drainedAt: row.drained_at,
    admittedAfterClose,
    closedAndDrained: row.closed_at !== null && row.drained_at !== null && admittedAfterClose === 0,
  };
}

/**
 * Inside a legacy write transaction, before its operation lock: shares the state row until
 * commit (the drain fence) and fails closed once the contract is closed.
 */
export async function admitLegacyWrite(client: Queryable): Promise<void> {
  const { rows } = await client.query<{ closed_at: Date | null }>(
    'select closed_at from private.write_contract_state where contract = $1 for share',
    [LEGACY_CONTRACT],
  );
  if (!rows[0] || rows[0].closed_at !== null)
    throw new AppError(
      'legacy_contract_closed',
      'The unbounded write contract is closed: request an operation ticket (POST /v1/reaction-tickets)',
    );
}

/**
 * Closes the legacy contract for good (one-way; the table's trigger refuses a reopen outside
 * test databases). Waits, within the caller's lock_timeout, for admitted legacy transactions.
 */
export async function closeLegacyContract(
  client: Queryable,
  closedBy: string,
): Promise<LegacyContractStatus> {
  // First wait for the drain: the row lock is granted only after every FOR SHARE holder ends.
  // Time is read in the next statement, after the wait (a SET list is computed before it).
  await client.query('select 1 from private.write_contract_state where contract = $1 for update', [
    LEGACY_CONTRACT,
  ]);
  await client.query(
    `with t as (select app_now() as now)
     update private.write_contract_state
     set closed_at = coalesce(closed_at, t.now), drained_at = coalesce(drained_at, t.now),
         closed_by = coalesce(closed_by, $2)
     from t where contract = $1`,
    [LEGACY_CONTRACT, closedBy],
  );
  return getLegacyContractStatus(client);
}
