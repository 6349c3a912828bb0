import type { Config } from '../env';

/** Retention periods and bounds of the minute housekeeping steps (HOUSEKEEPING_* variables). */
export interface HousekeepingSettings {
  /** A ticket is deleted this long after its expiry (an unissued ticket is refused). */
  ticketGraceMs: number;
  /** Terminal turns and their inputs are deleted this long after the turn settled / arrived. */
  channelHistoryMs: number;
  /** An empty conversation is deleted after this long without an input. */
  conversationIdleMs: number;
  /** Rows per step per run. */
  batchRows: number;
  /** Budget of each step's transaction (statement_timeout and lock_timeout). */
  stepBudgetMs: number;
}

const DAY_MS = 86_400_000;

export function housekeepingSettingsFrom(config: Config): HousekeepingSettings {
  return {
    ticketGraceMs: config.HOUSEKEEPING_TICKET_GRACE_DAYS * DAY_MS,
    channelHistoryMs: config.HOUSEKEEPING_CHANNEL_HISTORY_DAYS * DAY_MS,
    conversationIdleMs: config.HOUSEKEEPING_CONVERSATION_IDLE_DAYS * DAY_MS,
    batchRows: config.HOUSEKEEPING_BATCH_ROWS,
    stepBudgetMs: config.HOUSEKEEPING_STEP_BUDGET_MS,
  };
}
