import type { PoolClient } from '@neondatabase/serverless';
import { getLegacyContractStatus, type LegacyContractStatus } from '../reaction-tickets/contract';
import { eligible, NOW, type RetentionLimits } from './eligibility';

export interface Probe {
  contract: LegacyContractStatus;
  /** Age of the longest-running other transaction in this database (0 when none). */
  oldestTransactionMs: number;
  /**
   * Other sessions in this database whose `xact_start` this role may not read (Postgres shows
   * it only with the privileges of the session's role or of pg_read_all_stats). Any of them
   * fails the drain check: an unseen transaction may be the old one.
   */
  unseenSessions: number;
  /** No transaction in this database is older than the drain grace, and none is unseen. */
  drainVerified: boolean;
  /** Age of the oldest eligible row over both tables; null when nothing is eligible. */
  oldestEligibleAgeMs: number | null;
}

/**
 * The drain verification: a request that admitted a ticket did so before the ticket's
 * expiry. When every live transaction started less than `grace` ago and the ticket expired
 * more than `grace` ago, none of them can have admitted it. pg_stat_activity needs the
 * pg_read_all_stats role (or the same role as the API) to see other sessions' xact_start; to
 * any other role it is null, as for a session in no transaction. So the check counts the
 * sessions it cannot see and fails closed on any (issue 29 hole 10): the cleanup's own role
 * (migrations/0060_baseline_retention.sql) is granted pg_read_all_stats for exactly this.
 * Parameters: $1 the receipts' retention, $2 the drain grace, $3 the fences' retention (ms).
 */
export const PROBE_SQL = `with ${NOW} select
    (select coalesce(max(extract(epoch from clock_timestamp() - xact_start) * 1000), 0)::bigint
       from pg_stat_activity
      where datname = current_database() and xact_start is not null and pid <> pg_backend_pid())
      as oldest_xact_ms,
    (select count(*) from pg_stat_activity
      where datname = current_database() and pid <> pg_backend_pid()
        and not pg_has_role('pg_read_all_stats', 'usage') and not pg_has_role(usesysid, 'usage'))::int
      as unseen_sessions,
    extract(epoch from (select t from now) - least(
      (select created_at from private.chat_reaction_operations where ${eligible({ retentionMs: '$1', drainGraceMs: '$2' })}
        order by created_at, actor_id, operation_id limit 1),
      (select created_at from private.chat_retired_reaction_operations where ${eligible({ retentionMs: '$3', drainGraceMs: '$2' })}
        order by created_at, actor_id, operation_id limit 1))) * 1000 as oldest_eligible_ms`;

/** One read-only look before a run: prerequisites, drain verification, anything to do. */
export async function probe(client: Pick<PoolClient, 'query'>, limits: RetentionLimits): Promise<Probe> {
  const contract = await getLegacyContractStatus(client);
  const { rows } = await client.query<{
    oldest_xact_ms: string;
    unseen_sessions: number;
    oldest_eligible_ms: number | null;
  }>(PROBE_SQL, [limits.receiptRetentionMs, limits.drainGraceMs, limits.fenceRetentionMs]);
  const oldestTransactionMs = Number(rows[0]!.oldest_xact_ms);
  const unseenSessions = rows[0]!.unseen_sessions;
  const age = rows[0]!.oldest_eligible_ms;
  return {
    contract,
    oldestTransactionMs,
    unseenSessions,
    drainVerified: unseenSessions === 0 && oldestTransactionMs < limits.drainGraceMs,
    oldestEligibleAgeMs: age === null ? null : Math.round(Number(age)),
  };
}
