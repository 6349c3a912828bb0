import type { Pool } from '@neondatabase/serverless';
import { type Clock, systemClock } from '../clock';
import type { KeyRing } from '../crypto/sealed';
import { withTx } from '../db/tx';
import { log } from '../log';
import { type ExpireReport, runExpiration } from './passes/expire';
import { type PassScope, RECEIPTS_BUDGET_MS, RECEIPTS_LIMIT } from './passes/limits';
import { type PruneReport, runPruning } from './passes/prune';
import { type RetryReport, runRemoteRetry } from './passes/retry';

/** What one 30-second maintenance run did (no row contents, never a snapshot). */
export interface MaintenanceReport {
  startedAt: number;
  durationMs: number;
  /** Set when the stop generation moved or maintenance was disabled mid-run. */
  stopped: boolean;
  expire: ExpireReport | { error: string } | null;
  prune: PruneReport | { error: string } | null;
  receipts: { pruned: number; durationMs: number } | { error: string } | null;
  retry: RetryReport | { error: string } | null;
}

export interface MaintenanceOptions {
  keys: KeyRing;
  clock?: Clock;
  scope?: PassScope;
  fetch?: typeof fetch;
  /** False when the run must stop (new stop generation, disabled); checked between steps and rows. */
  admit?: () => boolean;
  /**
   * The webhook's receipt pruning (`pruneEventReceipts`, lark/event-receipts.ts), passed in
   * by the Durable Object's entry (maintenance.ts); runs without it leave receipts alone.
   */
  pruneReceipts?: (q: Pick<Pool, 'query'>, limit: number) => Promise<number>;
  /** Overrides for tests and the capacity run; production uses the spec's limits. */
  retry?: { passBudgetMs?: number; opBudgetMs?: number; concurrency?: number };
}

/**
 * One run: expiration, pruning, the receipts step, then the remote retries. Each step has its
 * own budget and runs whatever happened before it, so a remote-retry backlog (or a failing
 * step) can never starve expiry and pruning: they go first and never wait on Lark.
 */
export async function runMaintenancePasses(pool: Pool, opts: MaintenanceOptions): Promise<MaintenanceReport> {
  const clock = opts.clock ?? systemClock;
  const admit = opts.admit ?? (() => true);
  const startedAt = clock.now();
  const report: MaintenanceReport = {
    startedAt,
    durationMs: 0,
    stopped: false,
    expire: null,
    prune: null,
    receipts: null,
    retry: null,
  };
  // Each step: admitted first, failure logged as an error, the next step runs regardless.
  const step = async <T>(name: string, fn: () => Promise<T>): Promise<T | { error: string } | null> => {
    if (!admit()) {
      report.stopped = true;
      return null;
    }
    try {
      return await fn();
    } catch (err) {
      log.error('typing_maintenance_step_failed', { step: name, error: err });
      return { error: err instanceof Error ? err.message.slice(0, 200) : 'unknown' };
    }
  };
  report.expire = await step('expire', () => runExpiration(pool, { scope: opts.scope, clock }));
  report.prune = await step('prune', () => runPruning(pool, { scope: opts.scope, clock }));
  // A scoped (test/capacity) run leaves the shared receipts table alone.
  const prune = opts.pruneReceipts;
  if (!opts.scope && prune) report.receipts = await step('receipts', () => pruneReceipts(pool, clock, prune));
  report.retry = await step('retry', () =>
    runRemoteRetry(pool, {
      keys: opts.keys,
      scope: opts.scope,
      clock,
      fetch: opts.fetch,
      admit,
      ...opts.retry,
    }),
  );
  if (!admit()) report.stopped = true;
  report.durationMs = clock.now() - startedAt;
  return report;
}

/** The Lark webhook's dedup receipts: own small budget and row cap. */
async function pruneReceipts(
  pool: Pool,
  clock: Clock,
  prune: NonNullable<MaintenanceOptions['pruneReceipts']>,
) {
  const started = clock.now();
  const pruned = await withTx(pool, { budgetMs: RECEIPTS_BUDGET_MS, maxAttempts: 1, clock }, (tx) =>
    prune(tx, RECEIPTS_LIMIT),
  );
  return { pruned, durationMs: clock.now() - started };
}
