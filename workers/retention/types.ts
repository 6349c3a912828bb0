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
  | { enabled: false; reason: string; prerequisites: Prerequisites }
  | { enabled: true; reason: null; prerequisites: Prerequisites; status: RetentionStatus };

export interface StopResult {
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
}

export interface RetentionStatus {
  enabled: boolean;
  stopGeneration: number;
  enabledAt: number | null;
  stopAcknowledgedAt: number | null;
  running: boolean;
  batchInFlight: boolean;
  cursor: { table: string; createdAt: string } | null;
  lastScheduledTime: number | null;
  alarmAt: number | null;
  budgets: {
    day: string;
    dbBatches: { used: number; limit: number };
    workerOps: { used: number; limit: number };
  };
  history: RunRecord[];
}
