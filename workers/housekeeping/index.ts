export { housekeepingEveryMinute } from './cron';
export { type HousekeepingReport, runHousekeeping, type StepName } from './run';
export { type HousekeepingSettings, housekeepingSettingsFrom } from './settings';
