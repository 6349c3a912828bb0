import type { Pool } from '@neondatabase/serverless';
import { type Clock, Deadline, systemClock } from '../../clock';
import type { KeyRing } from '../../crypto/sealed';
import { CREDENTIAL_CODES } from '../../lark/errors';
import { log } from '../../log';
import { errorName, type WithdrawResult, withdrawRow } from '../withdraw';
import { type ClaimedRow, claimDue, noteFailures, type RetryNote } from './claim';
import {
  type PassScope,
  RETRY_CLAIM_LIMIT,
  RETRY_CONCURRENCY,
  RETRY_OP_BUDGET_MS,
  RETRY_PASS_BUDGET_MS,
} from './limits';

export interface RetryOptions {
  keys: KeyRing;
  scope?: PassScope;
  clock?: Clock;
  fetch?: typeof fetch;
  passBudgetMs?: number;
  opBudgetMs?: number;
  concurrency?: number;
  limit?: number;
  /** Checked before each remote operation: false (stop generation moved, disabled) defers the rest. */
  admit?: () => boolean;
}

export interface RetryReport {
  claimed: number;
  cleaned: number;
  adopted: number;
  unconfirmed: number;
  /** Rows whose seven-day deadline passed between claim and call: abandoned, nothing sent. */
  expired: number;
  retryable: number;
  permanent: number;
  /** Rows whose withdrawal failed with something other than a Lark answer (logged as errors). */
  errors: number;
  deferred: number;
  durationMs: number;
}

/**
 * The remote-retry pass. Claim (one statement, counters and backoff advanced first), then the
 * withdrawals with bounded concurrency, each with its own two-second budget cut to what the
 * ten-second pass has left. A row whose operation would not fit the remaining pass budget is
 * deferred: its claim (and backoff) stands, no remote call is made. Lark's 429 reset pushes
 * the row's next attempt out, and the rest of that app's rows in this pass are deferred.
 */
export async function runRemoteRetry(pool: Pool, opts: RetryOptions): Promise<RetryReport> {
  const clock = opts.clock ?? systemClock;
  const started = clock.now();
  const pass = new Deadline(opts.passBudgetMs ?? RETRY_PASS_BUDGET_MS, clock);
  const rows = await claimDue(pool, { limit: opts.limit ?? RETRY_CLAIM_LIMIT, scope: opts.scope });
  const run: RetryRun = {
    pool,
    opts,
    clock,
    pass,
    opBudget: opts.opBudgetMs ?? RETRY_OP_BUDGET_MS,
    report: {
      claimed: rows.length,
      cleaned: 0,
      adopted: 0,
      unconfirmed: 0,
      expired: 0,
      retryable: 0,
      permanent: 0,
      errors: 0,
      deferred: 0,
      durationMs: 0,
    },
    notes: [],
    rateLimitedApps: new Map(),
  };
  const queue = [...rows];
  const worker = async () => {
    for (let row = queue.shift(); row; row = queue.shift()) await retryRow(run, row);
  };
  const width = Math.max(1, Math.min(opts.concurrency ?? RETRY_CONCURRENCY, rows.length));
  await Promise.all(Array.from({ length: rows.length ? width : 0 }, worker));
  await noteFailures(pool, run.notes);
  run.report.durationMs = clock.now() - started;
  return run.report;
}

/** What the pass's withdrawals share: budgets, the report, the notes, the apps held by a 429. */
interface RetryRun {
  pool: Pool;
  opts: RetryOptions;
  clock: Clock;
  pass: Deadline;
  opBudget: number;
  report: RetryReport;
  notes: RetryNote[];
  /** App ID → the 429's reset in ms: the app's other rows of this pass are deferred. */
  rateLimitedApps: Map<string, number>;
}

/** One claimed row: deferred, or withdrawn within its own budget and its outcome recorded. */
async function retryRow(run: RetryRun, row: ClaimedRow): Promise<void> {
  const limitedUntil = run.rateLimitedApps.get(row.app_id);
  if (
    run.pass.remaining() < run.opBudget ||
    (run.opts.admit && !run.opts.admit()) ||
    limitedUntil !== undefined
  ) {
    run.report.deferred++;
    if (limitedUntil !== undefined)
      run.notes.push({
        id: row.id,
        attempts: row.attempts,
        error: 'deferred:429',
        notBeforeMs: limitedUntil,
      });
    return;
  }
  const deadline = new Deadline(run.pass.slice(run.opBudget), run.clock);
  let r: WithdrawResult;
  try {
    r = await withdrawRow(run.pool, run.opts.keys, row, { deadline, fetch: run.opts.fetch });
  } catch (err) {
    // Not a Lark answer (our database, a bug): never counted as a Lark failure. The claim
    // already moved the row's next attempt, so it is retried on its backoff.
    run.report.errors++;
    run.notes.push({
      id: row.id,
      attempts: row.attempts,
      error: `retry:error:${errorName(err)}`,
      notBeforeMs: 0,
    });
    log.error('typing_withdraw_error', { rowId: row.id, stage: 'retry', attempts: row.attempts, error: err });
    return;
  }
  recordOutcome(run, row, r);
}

/** Counts the withdrawal's outcome; a Lark failure is noted (backoff, a 429's reset) and warned. */
function recordOutcome(run: RetryRun, row: ClaimedRow, r: WithdrawResult): void {
  const { report } = run;
  if (r.outcome === 'cleaned' || r.outcome === 'already_gone') report.cleaned++;
  else if (r.outcome === 'adopted') report.adopted++;
  else if (r.outcome === 'unconfirmed') report.unconfirmed++;
  else if (r.outcome === 'expired') report.expired++;
  else if (r.outcome === 'retryable' || r.outcome === 'permanent') {
    report[r.outcome]++;
    const wait = r.outcome === 'retryable' && r.retryAfterSeconds ? r.retryAfterSeconds * 1000 : 0;
    if (wait > 0) run.rateLimitedApps.set(row.app_id, wait);
    run.notes.push({
      id: row.id,
      attempts: row.attempts,
      error: `retry:${r.outcome}:${r.code}`,
      notBeforeMs: wait,
      credentialsRefused: CREDENTIAL_CODES.has(r.code),
    });
    // Spec: failed remote withdrawals warn, without credentials (ids and codes only).
    log.warn('typing_withdraw_failed', {
      rowId: row.id,
      workspaceId: row.workspace_id,
      outcome: r.outcome,
      code: r.code,
      attempts: row.attempts,
    });
  }
}
