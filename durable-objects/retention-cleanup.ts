import { DurableObject } from 'cloudflare:workers';
import { type Clock, Deadline, systemClock } from '../workers/clock';
import { openPool } from '../workers/db/pool';
import { sqlState, withTx } from '../workers/db/tx';
import { log } from '../workers/log';
import { getLegacyContractStatus, type LegacyContractStatus } from '../workers/reaction-tickets/contract';
import { loadRetentionConfig, type RetentionConfig, type RetentionEnv } from '../workers/retention/config';
import {
  type Action,
  type Activation,
  type Actor,
  type Control,
  enableAtGeneration,
  fenceStop,
  readActivations,
  readControl,
  recordActivation,
} from '../workers/retention/control';
import { limitsFrom } from '../workers/retention/eligibility';
import { checkPrerequisites, type Prerequisites } from '../workers/retention/prerequisites';
import { type RunOutcome, runTicketRetention, stopFenceBudgetMs } from '../workers/retention/run';
import { CleanupStore, type RunRecord } from '../workers/retention/state';
import type {
  EnableRequest,
  EnableResult,
  RetentionStatus,
  RollbackResult,
  ScheduledResult,
  StopConfirmed,
  StopRequest,
  StopResult,
} from '../workers/retention/types';

/** How long a status read waits for the control row. */
const STATUS_DB_BUDGET_MS = 2000;
/** Activation records a status shows. */
const STATUS_ACTIVATIONS = 20;

/**
 * Singleton owner of the hourly receipt and fence cleanup (docs/retention.md), hosted by the
 * cleanup's own Worker (workers/retention/worker.ts, retention.wrangler.toml). Starts
 * disabled. That Worker's `0 * * * *` cron calls `scheduledRun`; there is no alarm and no
 * continuation: a run that does not finish leaves its cursor for the next cron tick, so
 * nothing can schedule itself after a stop.
 *
 * Stop protocol: persist a new stop generation (the acknowledgement), then disable, then the
 * database fence (the control row, migrations/0060_baseline_retention.sql), which waits for any batch still in
 * Postgres whoever admitted it, then wait for the run. Every batch is admitted synchronously
 * against the stored generation and enabled flag, in the same turn that starts it, and
 * re-checked against the control row inside its own transaction. Enable is a compare-and-set
 * on the control row's generation. Enables, stops and rollbacks are recorded in
 * private.retention_activations with who asked (docs/retention.md).
 */
export class RetentionCleanup extends DurableObject<RetentionEnv> {
  /** Tests replace it to move the run deadline and the budget day without sleeping. */
  clock: Clock = systemClock;
  private running: Promise<RunRecord> | null = null;
  private inFlight: Promise<unknown> | null = null;
  private storeCache: CleanupStore | null = null;

  private config(): RetentionConfig {
    return loadRetentionConfig(this.env);
  }

  private store(): CleanupStore {
    const config = this.config();
    this.storeCache ??= new CleanupStore(this.ctx.storage.sql, {
      dbBatchBudget: config.RETENTION_DAILY_DB_BATCHES,
      workerOpBudget: config.RETENTION_DAILY_WORKER_OPS,
    });
    return this.storeCache;
  }

  async scheduledRun(scheduledTime: number): Promise<ScheduledResult> {
    const store = this.store();
    await this.ctx.storage.put('lastCronAt', scheduledTime);
    const state = store.read();
    if (!state.enabled) return { ran: false, reason: 'disabled' };
    // A redelivered tick is not a second run: the cron is the only retry there is.
    if (state.lastScheduledTime !== null && scheduledTime <= state.lastScheduledTime)
      return { ran: false, reason: 'duplicate' };
    if (this.running) return { ran: false, reason: 'already_running' };
    store.markScheduled(scheduledTime);
    if (!store.spend('worker', this.clock.now())) {
      const record = this.emptyRecord(scheduledTime, 'budget', state.stopGeneration);
      store.record(record);
      return { ran: false, reason: 'budget', run: record };
    }
    this.running = this.run(scheduledTime, state.stopGeneration);
    try {
      const run = await this.running;
      return { ran: true, reason: run.outcome, run };
    } finally {
      this.running = null;
    }
  }

  private emptyRecord(scheduledTime: number, outcome: RunOutcome, stopGeneration: number): RunRecord {
    const now = this.clock.now();
    return {
      scheduledTime,
      startedAt: now,
      durationMs: 0,
      stopGeneration,
      outcome,
      rowsSelected: 0,
      rowsDeleted: 0,
      batches: 0,
      oldestEligibleAgeMs: null,
      error: null,
    };
  }

  private async run(scheduledTime: number, generation: number): Promise<RunRecord> {
    const config = this.config();
    const store = this.store();
    const startedAt = this.clock.now();
    const pool = openPool(config, 1);
    try {
      const report = await runTicketRetention({
        pool,
        limits: limitsFrom(config),
        cursor: store.read().cursor,
        deadline: new Deadline(config.RETENTION_RUN_DEADLINE_MS, this.clock),
        batchTimeoutMs: config.RETENTION_BATCH_TIMEOUT_MS,
        hooks: {
          admit: () => {
            const s = store.read();
            if (!s.enabled || s.stopGeneration !== generation) return 'stopped';
            return store.spend('db', this.clock.now()) ? 'ok' : 'budget';
          },
          track: (work) => {
            this.inFlight = work;
            const clear = () => {
              if (this.inFlight === work) this.inFlight = null;
            };
            work.then(clear, clear);
          },
          saveCursor: (cursor) => store.setCursor(cursor),
        },
      });
      const record: RunRecord = {
        ...report,
        scheduledTime,
        startedAt,
        durationMs: this.clock.now() - startedAt,
        stopGeneration: generation,
      };
      store.record(record);
      log.info('retention_run', { ...record });
      return record;
    } finally {
      // The in-flight statement (if the request bound gave up on it) still owns the pool.
      const pending = this.inFlight;
      // By design: the run already reported that statement as its outcome; wait only to end the pool.
      void (pending ? pending.catch(() => undefined) : Promise.resolve()).then(() => pool.end());
    }
  }

  /**
   * Enable as a compare-and-set on the generation the operator read (status `control.generation`):
   * the prerequisites and the database's generation are checked in one transaction, then the
   * object turns execution on only if no stop was acknowledged here meanwhile. A stop at any
   * point wins; enabling after it needs a new request carrying the new generation.
   */
  async enable(request: EnableRequest): Promise<EnableResult> {
    const config = this.config();
    const store = this.store();
    const ackAtStart = store.read().stopGeneration;
    // A stop acknowledged here whose database fence has not committed (still waiting, or it
    // failed: `confirmed: false`) has a generation above the database's. An enable at the
    // database's generation would pass the compare-and-set before the fence moves the row, and
    // then be answered `enabled: true` while the stop is confirmed: refused, nothing written.
    // Only a confirmed stop (a new one, if this one failed) brings the two generations level.
    if (request.generation < ackAtStart) return this.refusedUnfenced(request.generation, ackAtStart);
    const pool = openPool(config, 1);
    let checked: { prerequisites: Prerequisites; control: Control | null; current: number };
    try {
      checked = await withTx(
        pool,
        { budgetMs: config.RETENTION_BATCH_TIMEOUT_MS, maxAttempts: 1 },
        async (c) => {
          const prerequisites = await checkPrerequisites(c, config);
          if (!prerequisites.satisfied) return { prerequisites, control: null, current: -1 };
          const control = await enableAtGeneration(c, request.generation);
          if (!control) return { prerequisites, control, current: (await readControl(c)).generation };
          // In the transaction that turned the row on: recorded exactly when it committed.
          await recordActivation(c, 'enable', request.actor, control.generation);
          return { prerequisites, control, current: control.generation };
        },
      );
    } finally {
      await pool.end();
    }
    const { prerequisites, control } = checked;
    if (!prerequisites.satisfied)
      return { enabled: false, refused: 'prerequisites', reason: prerequisites.reason!, prerequisites };
    const changed = (generation: number): EnableResult => ({
      enabled: false,
      refused: 'generation_changed',
      reason: `The stop generation is ${generation}, not ${request.generation}: a stop came first. Read the status and enable again.`,
      generation,
    });
    if (!control) return changed(checked.current);
    // Budgets can only be lowered, to any value down to 0 (0: no batch, no run): an absent one
    // leaves the stored budget as it is; a present 0 is a budget of 0, never "absent".
    const capped = {
      dbBatchBudget:
        request.dbBatchBudget === undefined
          ? undefined
          : Math.min(request.dbBatchBudget, config.RETENTION_DAILY_DB_BATCHES),
      workerOpBudget:
        request.workerOpBudget === undefined
          ? undefined
          : Math.min(request.workerOpBudget, config.RETENTION_DAILY_WORKER_OPS),
    };
    // A stop acknowledged while the transaction ran bumped the stored generation; its own
    // database fence (queued behind or after ours) turns the row off again.
    if (!store.enableIf(ackAtStart, this.clock.now(), capped)) return changed(store.read().stopGeneration);
    store.raiseStopGeneration(control.generation);
    log.info('retention_enabled', {
      stopGeneration: control.generation,
      operator: request.actor.operator,
      credential: request.actor.credential,
    });
    return { enabled: true, refused: null, reason: null, prerequisites, status: await this.status() };
  }

  private refusedUnfenced(requested: number, acknowledged: number): EnableResult {
    return {
      enabled: false,
      refused: 'generation_changed',
      reason:
        `A stop (generation ${acknowledged}) was acknowledged and its database fence has not committed ` +
        `(still in progress, or it failed): wait for the stop's answer, or stop again, then enable with ` +
        `the generation the status shows (not ${requested}).`,
      generation: acknowledged,
    };
  }

  /**
   * Stop: (1) persist a new stop generation and disable here (the acknowledgement: no batch is
   * admitted by this object after it); (2) the database fence, which waits for any batch
   * transaction still holding the control row and moves the database's generation, so no
   * batch admitted before, by this object or an earlier incarnation of it, can commit after
   * the answer; (3) wait for the run to see the stop.
   */
  async stop(request: StopRequest): Promise<StopResult> {
    return this.stopAs('stop', request.actor);
  }

  /**
   * Rollback of an activation: a stop first (the same acknowledgement and database fence,
   * recorded as `rollback`), then the cursor cleared, so a later enable starts a fresh sweep.
   * It never writes the legacy write contract (closing it is one-way: a trigger, migrations/0020_baseline_reaction_tickets.sql); the
   * answer reads it to show it is still closed.
   */
  async rollback(request: StopRequest): Promise<RollbackResult> {
    const stop = await this.stopAs('rollback', request.actor);
    if (stop.confirmed) this.store().setCursor(null);
    let legacyContract: LegacyContractStatus | null = null;
    const pool = openPool(this.config(), 1);
    try {
      legacyContract = await withTx(
        pool,
        { budgetMs: STATUS_DB_BUDGET_MS, maxAttempts: 1 },
        getLegacyContractStatus,
      );
    } catch (err) {
      log.warn('retention_rollback_contract_unread', { error: err });
    } finally {
      await pool.end();
    }
    return { stop, legacyContract };
  }

  private async stopAs(action: Exclude<Action, 'enable'>, actor: Actor): Promise<StopResult> {
    const config = this.config();
    const store = this.store();
    const acknowledgedAt = this.clock.now();
    const acknowledged = store.bumpStopGeneration(acknowledgedAt);
    // The generation is durable before execution is disabled (and before we answer).
    await this.ctx.storage.sync();
    log.info('retention_stop_acknowledged', {
      stopGeneration: acknowledged,
      action,
      operator: actor.operator,
      credential: actor.credential,
    });
    store.disable();
    // What was in flight when the stop got here; the fence below waits for it in Postgres.
    const admitted = this.inFlight;
    const running = this.running;
    let control: Control;
    const pool = openPool(config, 1);
    try {
      const budgetMs = stopFenceBudgetMs(config.RETENTION_BATCH_TIMEOUT_MS);
      control = await withTx(pool, { budgetMs, maxAttempts: 1 }, async (c) => {
        const fenced = await fenceStop(c, acknowledged);
        await recordActivation(c, action, actor, fenced.generation);
        return fenced;
      });
    } catch (err) {
      log.error('retention_stop_unconfirmed', { stopGeneration: acknowledged, error: err });
      return {
        confirmed: false,
        stopGeneration: acknowledged,
        acknowledgedAt,
        enabled: false,
        error: sqlState(err) ?? 'error',
      };
    } finally {
      await pool.end();
    }
    store.raiseStopGeneration(control.generation);
    let batch: StopConfirmed['drained']['batch'] = null;
    if (admitted) {
      batch = await admitted.then(
        (r) => {
          const b = r as { selected?: number; deleted?: number };
          return { settled: 'completed' as const, selected: b.selected ?? 0, deleted: b.deleted ?? 0 };
        },
        () => ({ settled: 'failed' as const, selected: 0, deleted: 0 }),
      );
    }
    // The run itself sees the new generation before its next batch and ends.
    // By design: a run that throws is logged by its own caller (cron_failed); stop only waits.
    const run = running ? await running.catch(() => null) : null;
    await this.ctx.storage.sync();
    return {
      confirmed: true,
      stopGeneration: control.generation,
      acknowledgedAt,
      enabled: false,
      completedAt: this.clock.now(),
      drained: {
        batchInFlight: admitted !== null,
        batch,
        run: run && { outcome: run.outcome, batches: run.batches },
      },
      control,
    };
  }

  /** The control row and the latest activations, or nulls when the database does not answer in time. */
  private async readDatabaseState(): Promise<{ control: Control | null; activations: Activation[] }> {
    const pool = openPool(this.config(), 1);
    try {
      return await withTx(pool, { budgetMs: STATUS_DB_BUDGET_MS, maxAttempts: 1 }, async (c) => ({
        control: await readControl(c),
        activations: await readActivations(c, STATUS_ACTIVATIONS),
      }));
    } catch (err) {
      log.warn('retention_status_control_unavailable', { error: err });
      return { control: null, activations: [] };
    } finally {
      await pool.end();
    }
  }

  async status(): Promise<RetentionStatus> {
    const s = this.store().read();
    const { control, activations } = await this.readDatabaseState();
    return {
      enabled: s.enabled,
      stopGeneration: s.stopGeneration,
      control,
      activations,
      enabledAt: s.enabledAt,
      stopAcknowledgedAt: s.stopAcknowledgedAt,
      running: this.running !== null,
      batchInFlight: this.inFlight !== null,
      // Position only: the table and timestamp, never the actor or operation of the key.
      cursor: s.cursor && { table: s.cursor.table, createdAt: s.cursor.createdAt },
      lastScheduledTime: s.lastScheduledTime,
      lastCronAt: await this.lastCronAt(),
      alarmAt: await this.ctx.storage.getAlarm(),
      budgets: {
        day: s.budgetDay,
        dbBatches: { used: s.dbBatchesUsed, limit: s.dbBatchBudget },
        workerOps: { used: s.workerOpsUsed, limit: s.workerOpBudget },
      },
      history: this.store().history(),
    };
  }

  async lastCronAt(): Promise<number | null> {
    return (await this.ctx.storage.get<number>('lastCronAt')) ?? null;
  }
}
