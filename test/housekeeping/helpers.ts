import type { Pool } from '@neondatabase/serverless';
import { type HousekeepingReport, runHousekeeping, type StepName } from '../../workers/housekeeping/run';
import type { HousekeepingSettings } from '../../workers/housekeeping/settings';

export const DAY_MS = 86_400_000;

export const SETTINGS: HousekeepingSettings = {
  ticketGraceMs: DAY_MS,
  channelHistoryMs: 7 * DAY_MS,
  conversationIdleMs: 30 * DAY_MS,
  batchRows: 1000,
  stepBudgetMs: 5000,
};

/** One housekeeping run of the given steps with test settings. */
export function runSteps(
  pool: Pool,
  only: StepName[],
  overrides: Partial<HousekeepingSettings> = {},
): Promise<HousekeepingReport> {
  return runHousekeeping(pool, { ...SETTINGS, ...overrides }, only);
}
