import type { LegacyContractStatus } from '../reaction-tickets/contract';
import type { Activation, Actor, Control } from './control';
import type { Prerequisites } from './prerequisites';
import type { RunRecord } from './state';

/** The RetentionCleanup object's RPC answers (plain data: they cross the RPC boundary). */
export interface ScheduledResult {
  ran: boolean;
  /** Why nothing ran (disabled, duplicate, already_running, budget) or the run's outcome. */
  reason: string;
  run?: RunRecord;
}

export type EnableResult =
  | { enabled: false; refused: 'prerequisites'; reason: string; prerequisites: Prerequisites }
  | {
      enabled: false;
      /** A stop moved the generation after the operator read it (or during this enable). */
      refused: 'generation_changed';
      reason: string;
      /** The database's generation now: enabling needs a new request that carries it. */
      generation: number;
    }
  | { enabled: true; refused: null; reason: null; prerequisites: Prerequisites; status: RetentionStatus };

/** What an enable carries: who, the generation the operator read (compare-and-set), lower budgets. */
export interface EnableRequest {
  actor: Actor;
  generation: number;
  dbBatchBudget?: number;
  workerOpBudget?: number;
}

/** What a stop or a rollback carries: who asked. */
export interface StopRequest {
  actor: Actor;
}

export type StopResult = StopConfirmed | StopUnconfirmed;

/**
 * A rollback: a stop first (recorded as `rollback`), then the cursor cleared. It never touches
 * the legacy write contract; `legacyContract` is read afterwards to show it is still closed
 * (null when that read failed).
 */
export interface RollbackResult {
  stop: StopResult;
  legacyContract: LegacyContractStatus | null;
}

/** Stopped: the database generation moved and no batch can commit after `completedAt`. */
export interface StopConfirmed {
  confirmed: true;
  /** The stop generation, equal to the database's (`control.generation`). */
  stopGeneration: number;
  acknowledgedAt: number;
  enabled: false;
  completedAt: number;
  drained: {
    /** A batch had been admitted before the stop; the stop returned only after it ended. */
    batchInFlight: boolean;
    batch: { settled: 'completed' | 'failed'; selected: number; deleted: number } | null;
    run: { outcome: string; batches: number } | null;
  };
  /** The control row after the fence (migrations/0060_baseline_retention.sql). */
  control: Control;
}

/**
 * Acknowledged and disabled in the object, but the database fence did not commit (lock wait
 * or database down): a batch admitted before could still commit. Stop again.
 */
export interface StopUnconfirmed {
  confirmed: false;
  stopGeneration: number;
  acknowledgedAt: number;
  enabled: false;
  error: string;
}

export interface RetentionStatus {
  enabled: boolean;
  stopGeneration: number;
  /**
   * The control row in Postgres; an enable carries its `generation`. Null when the database
   * did not answer within the status budget.
   */
  control: Control | null;
  /** The latest enables, stops and rollbacks (newest first); empty when the database did not answer. */
  activations: Activation[];
  enabledAt: number | null;
  stopAcknowledgedAt: number | null;
  running: boolean;
  batchInFlight: boolean;
  cursor: { table: string; createdAt: string } | null;
  lastScheduledTime: number | null;
  /** The last hourly tick that reached the object, enabled or not (is the cron arriving?). */
  lastCronAt: number | null;
  alarmAt: number | null;
  budgets: {
    day: string;
    dbBatches: { used: number; limit: number };
    workerOps: { used: number; limit: number };
  };
  history: RunRecord[];
}
