import type { Pool } from '@neondatabase/serverless';
import { log } from '../log';
import type { MaintenanceReport } from './maintenance-passes';
import { EXPIRE_BUDGET_MS, PRUNE_BUDGET_MS, RECEIPTS_BUDGET_MS, RETRY_PASS_BUDGET_MS } from './passes/limits';

/** A run's whole budget: its steps' budgets end to end (each step is bounded by its own). */
export const RUN_BUDGET_MS = EXPIRE_BUDGET_MS + PRUNE_BUDGET_MS + RECEIPTS_BUDGET_MS + RETRY_PASS_BUDGET_MS;

const count = <T extends object>(step: T | { error: string } | null, pick: (s: T) => number): number =>
  step && !('error' in step) ? pick(step as T) : 0;

/**
 * One typing_maintenance_runs row per run (migration 0090, shown by the console): counters
 * only. Its own statement after the run; a failure is logged, never fails the run (the
 * passes already committed their work). Pruned by housekeeping (docs/retention-rules.md).
 */
export async function recordMaintenanceRun(pool: Pool, r: MaintenanceReport): Promise<void> {
  const steps = [r.expire, r.prune, r.receipts, r.retry];
  await pool
    .query(
      `insert into typing_maintenance_runs
         (duration_ms, budget_ms, stopped, expired, pruned, claimed, cleaned, deferred, failed_steps)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
      [
        Math.round(r.durationMs),
        RUN_BUDGET_MS,
        r.stopped,
        count(r.expire, (s) => s.expired + s.tasklessExpired),
        count(r.prune, (s) => s.pruned),
        count(r.retry, (s) => s.claimed),
        count(r.retry, (s) => s.cleaned),
        count(r.retry, (s) => s.deferred),
        steps.filter((s) => s !== null && 'error' in s).length,
      ],
    )
    .catch((err: unknown) => log.warn('typing_maintenance_history_failed', { error: err }));
}
