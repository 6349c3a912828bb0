import type { Env } from '../env';

/** What one 30-second maintenance pass did; filled in by the ledger's passes. */
export type MaintenanceReport = Record<string, number | string | boolean | null>;

/**
 * One maintenance pass over the typing ledger. The passes themselves (expiration,
 * pruning, remote retry) arrive with the ledger; until then a pass does nothing.
 */
export async function runTypingMaintenance(_env: Env): Promise<MaintenanceReport> {
  return {};
}
