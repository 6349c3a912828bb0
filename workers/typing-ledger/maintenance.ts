import { openPool } from '../db/pool';
import { type Env, loadConfig } from '../env';
import { pruneEventReceipts } from '../lark/event-receipts';
import { recordMaintenanceRun } from './maintenance-history';
import { type MaintenanceOptions, type MaintenanceReport, runMaintenancePasses } from './maintenance-passes';

export { type MaintenanceOptions, type MaintenanceReport, runMaintenancePasses } from './maintenance-passes';

/**
 * The Durable Object's entry: one pool for the run, ended afterwards. The passes live in
 * maintenance-passes.ts (Node-safe); this adds the Worker-side webhook receipts step and
 * records the run's counters for the console (maintenance-history.ts).
 */
export async function runTypingMaintenance(
  env: Env,
  opts: Omit<MaintenanceOptions, 'keys'> = {},
): Promise<MaintenanceReport> {
  const config = loadConfig(env);
  const pool = openPool(config, 8);
  try {
    const report = await runMaintenancePasses(pool, {
      pruneReceipts: pruneEventReceipts,
      ...opts,
      keys: config.SECRET_KEYS,
    });
    // The console's pass history (typing_maintenance_runs); never fails the run.
    await recordMaintenanceRun(pool, report);
    return report;
  } finally {
    await pool.end();
  }
}

/** The one TypingMaintenance object the minute cron, the admin routes and the console talk to. */
export function typingMaintenance(env: Env) {
  return env.TYPING_MAINTENANCE.get(env.TYPING_MAINTENANCE.idFromName('singleton'));
}
