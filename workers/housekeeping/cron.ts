import { withDb } from '../db/pool';
import { type Env, loadConfig } from '../env';
import { type HousekeepingReport, runHousekeeping } from './run';
import { housekeepingSettingsFrom } from './settings';

/** The minute cron's housekeeping: one bounded batch per table without another owner. */
export async function housekeepingEveryMinute(env: Env): Promise<HousekeepingReport> {
  const config = loadConfig(env);
  return withDb(config, (pool) => runHousekeeping(pool, housekeepingSettingsFrom(config)));
}
