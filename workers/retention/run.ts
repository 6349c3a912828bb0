import type { Pool, PoolClient } from '@neondatabase/serverless';
import type { Deadline } from '../clock';
import { sqlState, withTx } from '../db/tx';
import { withTimeout } from '../lib/timeout';
import { log } from '../log';
import { type BatchResult, deleteBatch } from './batch';
import { holdForBatch, readControl } from './control';
import { type RetentionCursor, type RetentionLimits, START_KEY, TABLE_ORDER } from './eligibility';
import { probe } from './probe';

/** At most this many delete batches per run, fixed by the spec. */
export const MAX_BATCHES = 10;
/** A batch is not started with less than this left before the run's deadline. */
export const MIN_BATCH_MS = 200;
/** The Worker-side bound on one statement: its statement_timeout plus this much transport. */
export const REQUEST_SLACK_MS = 1000;

/**
 * How long a stop's database fence may wait for the control row: a batch holds it FOR SHARE
 * for at most its statement budget, and at most that long again idle in its transaction
 * (the batch sets idle_in_transaction_session_timeout to its budget) when the Worker that ran
 * it is gone; plus transport.
 */
export function stopFenceBudgetMs(batchTimeoutMs: number): number {
  return 2 * batchTimeoutMs + REQUEST_SLACK_MS;
}

export type RunOutcome =
  | 'empty' // nothing eligible: finished after one read
  | 'complete' // the sweep reached the end of both tables
  | 'batch_limit' // ten batches done; the cursor resumes at the next run
  | 'deadline' // the execution deadline came first
  | 'budget' // a daily budget is spent
  | 'stopped' // a stop generation or disable was seen before a batch
  | 'prerequisites' // the legacy contract is not closed and drained
  | 'drain_unverified' // a transaction older than the drain grace is alive
  | 'failed'; // a statement failed; no retry, the next run resumes

export type Admission = 'ok' | 'stopped' | 'budget';

/** What the owner supplies: admission (stop generation and budgets) and durable progress. */
export interface RunHooks {
  /** Called synchronously right before each database round (probe or batch). */
  admit(kind: 'probe' | 'batch'): Admission;
  /** The statement now in flight, so a stop can wait for it to drain. */
  track(work: Promise<unknown>): void;
  saveCursor(cursor: RetentionCursor | null): void;
}

export interface RunOptions {
  pool: Pool;
  limits: RetentionLimits;
  cursor: RetentionCursor | null;
  deadline: Deadline;
  batchTimeoutMs: number;
  hooks: RunHooks;
  maxBatches?: number;
}

/** A run's record: counts and ages only, never a key, actor, message, emoji or operation. */
export interface RunReport {
  outcome: RunOutcome;
  rowsSelected: number;
  rowsDeleted: number;
  batches: number;
  oldestEligibleAgeMs: number | null;
  error: string | null;
}

class RequestDeadline extends Error {
  code = 'request_deadline';
}

/** The start of the next table, or null when the sweep is complete. */
function nextTable(done: BatchResult): RetentionCursor | null {
  const next = TABLE_ORDER[TABLE_ORDER.indexOf(done.table) + 1];
  return next ? { table: next, ...START_KEY } : null;
}

export async function runTicketRetention(opts: RunOptions): Promise<RunReport> {
  const { pool, limits, deadline, hooks } = opts;
  const report: RunReport = {
    outcome: 'empty',
    rowsSelected: 0,
    rowsDeleted: 0,
    batches: 0,
    oldestEligibleAgeMs: null,
    error: null,
  };
  const statement = <T>(fn: (client: PoolClient, budgetMs: number) => Promise<T>): Promise<T> => {
    const budgetMs = Math.min(opts.batchTimeoutMs, deadline.remaining());
    // maxAttempts 1: no automatic retry; a failed statement ends the run. A lock wait gives
    // up (55P03, 'failed') before the statement's own ceiling (57014, 'deadline').
    const lockTimeoutMs = Math.max(1, Math.floor(budgetMs * 0.8));
    const work = withTx(pool, { budgetMs, lockTimeoutMs, maxAttempts: 1 }, (c) => fn(c, budgetMs));
    hooks.track(work);
    // Stops waiting after the budget; the statement itself ends by its own statement_timeout.
    return withTimeout(work, budgetMs + REQUEST_SLACK_MS, () => new RequestDeadline());
  };
  try {
    const first = hooks.admit('probe');
    if (first !== 'ok') return { ...report, outcome: first };
    const { control, look } = await statement(async (c) => ({
      control: await readControl(c),
      look: await probe(c, limits),
    }));
    report.oldestEligibleAgeMs = look.oldestEligibleAgeMs;
    // The database's half of the stop: a stop that reached only the database (its object was
    // reset before answering) still stops the run.
    if (!control.enabled) return { ...report, outcome: 'stopped' };
    if (!look.contract.closedAndDrained) return { ...report, outcome: 'prerequisites' };
    if (!look.drainVerified) return { ...report, outcome: 'drain_unverified' };
    if (look.oldestEligibleAgeMs === null) {
      hooks.saveCursor(null);
      return report;
    }
    let cursor = opts.cursor;
    for (;;) {
      if (report.batches >= (opts.maxBatches ?? MAX_BATCHES)) return { ...report, outcome: 'batch_limit' };
      if (deadline.remaining() < MIN_BATCH_MS) return { ...report, outcome: 'deadline' };
      const admission = hooks.admit('batch');
      if (admission !== 'ok') return { ...report, outcome: admission };
      const table = cursor?.table ?? TABLE_ORDER[0]!;
      const done = await statement(async (c, budgetMs) =>
        (await holdForBatch(c, control.generation, budgetMs)) ? deleteBatch(c, table, limits, cursor) : null,
      );
      // The control row moved since the probe: a stop committed in the database.
      if (done === null) return { ...report, outcome: 'stopped' };
      report.batches += 1;
      report.rowsSelected += done.selected;
      report.rowsDeleted += done.deleted;
      cursor = done.exhausted ? nextTable(done) : done.last;
      hooks.saveCursor(cursor);
      if (done.exhausted && cursor === null) return { ...report, outcome: 'complete' };
    }
  } catch (err) {
    const code = err instanceof RequestDeadline ? 'request_deadline' : (sqlState(err) ?? 'error');
    const outcome = code === 'request_deadline' || code === '57014' ? 'deadline' : 'failed';
    // A deadline is an outcome (reported in the run record); a failure is logged as itself.
    if (outcome === 'failed') log.error('retention_run_failed', { code, error: err });
    return { ...report, outcome, error: code };
  }
}
