import type { RetentionCursor } from './eligibility';
import type { RunReport } from './run';

/**
 * The RetentionCleanup object's control state in its SQLite storage: one state row and a
 * bounded run history. Postgres holds the data; this holds only what decides whether and
 * where the next batch runs. Every method is synchronous (SQLite-backed storage), so an
 * admission check and the batch it admits happen in one uninterrupted turn.
 */
export const HISTORY_LIMIT = 48;

export interface CleanupState {
  enabled: boolean;
  stopGeneration: number;
  enabledAt: number | null;
  stopAcknowledgedAt: number | null;
  cursor: RetentionCursor | null;
  lastScheduledTime: number | null;
  budgetDay: string;
  dbBatchesUsed: number;
  workerOpsUsed: number;
  dbBatchBudget: number;
  workerOpBudget: number;
}

export interface RunRecord extends RunReport {
  scheduledTime: number;
  startedAt: number;
  durationMs: number;
  stopGeneration: number;
}

type Row = Record<string, SqlStorageValue>;

const SCHEMA = `
create table if not exists cleanup_state (
  id integer primary key check (id = 1),
  enabled integer not null default 0,
  stop_generation integer not null default 0,
  enabled_at integer,
  stop_acknowledged_at integer,
  cursor text,
  last_scheduled_time integer,
  budget_day text not null default '',
  db_batches_used integer not null default 0,
  worker_ops_used integer not null default 0,
  db_batch_budget integer,
  worker_op_budget integer
);
insert or ignore into cleanup_state (id) values (1);
create table if not exists run_history (
  id integer primary key autoincrement,
  record text not null
);`;

export function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

export class CleanupStore {
  constructor(
    private readonly sql: SqlStorage,
    private readonly defaults: { dbBatchBudget: number; workerOpBudget: number },
  ) {
    sql.exec(SCHEMA);
  }

  read(): CleanupState {
    const r = this.sql.exec<Row>('select * from cleanup_state where id = 1').one();
    return {
      enabled: r.enabled === 1,
      stopGeneration: Number(r.stop_generation),
      enabledAt: r.enabled_at === null ? null : Number(r.enabled_at),
      stopAcknowledgedAt: r.stop_acknowledged_at === null ? null : Number(r.stop_acknowledged_at),
      cursor: r.cursor === null ? null : (JSON.parse(String(r.cursor)) as RetentionCursor),
      lastScheduledTime: r.last_scheduled_time === null ? null : Number(r.last_scheduled_time),
      budgetDay: String(r.budget_day),
      dbBatchesUsed: Number(r.db_batches_used),
      workerOpsUsed: Number(r.worker_ops_used),
      dbBatchBudget: r.db_batch_budget === null ? this.defaults.dbBatchBudget : Number(r.db_batch_budget),
      workerOpBudget: r.worker_op_budget === null ? this.defaults.workerOpBudget : Number(r.worker_op_budget),
    };
  }

  /**
   * Turns execution on only if no stop was acknowledged since the enable began (the stop
   * generation is still `generation`): a stop acknowledged at any point wins. Returns
   * whether it did.
   */
  enableIf(
    generation: number,
    at: number,
    budgets: { dbBatchBudget?: number; workerOpBudget?: number },
  ): boolean {
    const cursor = this.sql.exec(
      `update cleanup_state set enabled = 1, enabled_at = ?,
         db_batch_budget = coalesce(?, db_batch_budget), worker_op_budget = coalesce(?, worker_op_budget)
       where id = 1 and stop_generation = ?`,
      at,
      budgets.dbBatchBudget ?? null,
      budgets.workerOpBudget ?? null,
      generation,
    );
    return cursor.rowsWritten > 0;
  }

  /** After the database fence: the stored generation is never behind the database's. */
  raiseStopGeneration(generation: number): void {
    this.sql.exec(
      'update cleanup_state set stop_generation = max(stop_generation, ?) where id = 1',
      generation,
    );
  }

  /** Step one of a stop: the new generation, persisted before anything is disabled. */
  bumpStopGeneration(at: number): number {
    return Number(
      this.sql
        .exec<Row>(
          `update cleanup_state set stop_generation = stop_generation + 1, stop_acknowledged_at = ?
           where id = 1 returning stop_generation`,
          at,
        )
        .one().stop_generation,
    );
  }

  disable(): void {
    this.sql.exec('update cleanup_state set enabled = 0 where id = 1');
  }

  setCursor(cursor: RetentionCursor | null): void {
    this.sql.exec('update cleanup_state set cursor = ? where id = 1', cursor ? JSON.stringify(cursor) : null);
  }

  markScheduled(scheduledTime: number): void {
    this.sql.exec('update cleanup_state set last_scheduled_time = ? where id = 1', scheduledTime);
  }

  /** Spends one unit of a daily budget if any is left; the day rolls over at 00:00 UTC. */
  spend(kind: 'db' | 'worker', now: number): boolean {
    const day = utcDay(now);
    this.sql.exec(
      `update cleanup_state set budget_day = ?, db_batches_used = 0, worker_ops_used = 0
       where id = 1 and budget_day <> ?`,
      day,
      day,
    );
    const s = this.read();
    const [used, budget, column] =
      kind === 'db'
        ? [s.dbBatchesUsed, s.dbBatchBudget, 'db_batches_used']
        : [s.workerOpsUsed, s.workerOpBudget, 'worker_ops_used'];
    if (used >= budget) return false;
    this.sql.exec(`update cleanup_state set ${column} = ${column} + 1 where id = 1`);
    return true;
  }

  record(run: RunRecord): void {
    this.sql.exec('insert into run_history (record) values (?)', JSON.stringify(run));
    this.sql.exec('delete from run_history where id <= (select max(id) from run_history) - ?', HISTORY_LIMIT);
  }

  history(limit = HISTORY_LIMIT): RunRecord[] {
    return this.sql
      .exec<Row>('select record from run_history order by id desc limit ?', limit)
      .toArray()
      .map((r) => JSON.parse(String(r.record)) as RunRecord);
  }
}
