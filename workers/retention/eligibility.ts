import type { Config } from '../env';

/**
 * Which receipts and fences the cleanup may delete, as SQL over the stable key
 * (created_at, actor_id, operation_id) indexed by migration 0060.
 *
 * A row is eligible only when all of these hold, each decided from database time (app_now(),
 * read once per statement: NOW):
 *  - it is older than its table's retention (30 days receipts, 90 days fences by default);
 *  - its ticket expired more than the drain grace ago, or, for a legacy-contract row (no
 *    ticket), the legacy contract drained more than the drain grace ago. A request admitted
 *    before expiry may still be inside its transaction for a while; the grace outlives it,
 *    and every run verifies that no transaction in this database is older than the grace
 *    (see probe.ts), so nothing that could still read or write the row is alive.
 * Every receipt is terminal (its outcome is written with it), so age is the only state test.
 */
export type RetentionTable = 'receipts' | 'fences';

export const TABLE_NAME: Record<RetentionTable, string> = {
  receipts: 'private.chat_reaction_operations',
  fences: 'private.chat_retired_reaction_operations',
};

/** The order the sweep visits tables; a sweep ends after the last one. */
export const TABLE_ORDER: readonly RetentionTable[] = ['receipts', 'fences'];

export interface RetentionLimits {
  receiptRetentionMs: number;
  fenceRetentionMs: number;
  drainGraceMs: number;
}

const DAY_MS = 86_400_000;

export function limitsFrom(
  config: Pick<Config, 'RETENTION_RECEIPT_DAYS' | 'RETENTION_FENCE_DAYS' | 'RETENTION_DRAIN_GRACE_MS'>,
): RetentionLimits {
  return {
    receiptRetentionMs: config.RETENTION_RECEIPT_DAYS * DAY_MS,
    fenceRetentionMs: config.RETENTION_FENCE_DAYS * DAY_MS,
    drainGraceMs: config.RETENTION_DRAIN_GRACE_MS,
  };
}

export function retentionMs(limits: RetentionLimits, table: RetentionTable): number {
  return table === 'receipts' ? limits.receiptRetentionMs : limits.fenceRetentionMs;
}

/**
 * Database time, read once per statement: every statement using `eligible` starts with
 * `with ${NOW}`. app_now() is volatile, so compared per row it is a filter that no index can
 * bound: a scan with nothing eligible walked the whole index (issue 15). As an InitPlan
 * parameter the cutoff is the scan's `Index Cond`, and the scan stops at the first row that
 * is too young. Reading the time at the statement's start is the conservative side: every
 * condition is "older than", so a row eligible then is eligible after any lock wait.
 */
export const NOW = 'now as materialized (select app_now() as t)';

/**
 * The eligibility predicate over the statement's own parameters: `retentionMs` names the
 * retention in ms (for example `$1`), `drainGraceMs` the drain grace in ms. The first line is
 * the index range bound; the legacy sub-select is uncorrelated (runs once).
 */
export function eligible(params: { retentionMs: string; drainGraceMs: string }): string {
  const { retentionMs, drainGraceMs } = params;
  return `created_at < (select t from now) - ${retentionMs}::bigint * interval '1 millisecond'
  and (ticket_expires_at < (select t from now) - ${drainGraceMs}::bigint * interval '1 millisecond'
    or (contract = 'legacy' and exists (
      select 1 from private.write_contract_state s
      where s.contract = 'legacy_desired_state'
        and s.drained_at < (select t from now) - ${drainGraceMs}::bigint * interval '1 millisecond')))`;
}

/** The position of a sweep: a table and the last stable key done in it (null: its start). */
export interface RetentionCursor {
  table: RetentionTable;
  /** created_at as Postgres text, so microseconds survive the round trip. */
  createdAt: string;
  actorId: string;
  operationId: string;
}

/** Before every real key: actor and operation IDs are never empty (0020's checks). */
export const START_KEY = { createdAt: '-infinity', actorId: '', operationId: '' } as const;
