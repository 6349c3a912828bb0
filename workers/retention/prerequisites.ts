import type { PoolClient } from '@neondatabase/serverless';
import type { Config } from '../env';
import { getLegacyContractStatus, type LegacyContractStatus } from '../reaction-tickets/contract';

/**
 * The gate before deletion may be enabled (spec: "Only enable deletion after the legacy
 * unbounded desired-state write contract is closed, its admitted transactions have
 * drained"). The contract state is issue 7's record in Postgres; this only reads it.
 * The drain grace must also outlive any transaction a reaction request can hold open:
 * its transaction budget, and the idle-in-transaction ceiling every pool sets.
 */
export interface Prerequisites {
  satisfied: boolean;
  reason: string | null;
  contract: LegacyContractStatus;
  drainGraceMs: number;
  /** The longest a reaction transaction can stay open under the current settings. */
  longestTransactionMs: number;
}

export function longestTransactionMs(
  config: Pick<Config, 'REACTION_TX_BUDGET_MS' | 'DB_STATEMENT_TIMEOUT_MS'>,
): number {
  return Math.max(config.REACTION_TX_BUDGET_MS, config.DB_STATEMENT_TIMEOUT_MS * 2);
}

export async function checkPrerequisites(
  client: Pick<PoolClient, 'query'>,
  config: Pick<Config, 'RETENTION_DRAIN_GRACE_MS' | 'REACTION_TX_BUDGET_MS' | 'DB_STATEMENT_TIMEOUT_MS'>,
): Promise<Prerequisites> {
  const contract = await getLegacyContractStatus(client);
  const longest = longestTransactionMs(config);
  const base = { contract, drainGraceMs: config.RETENTION_DRAIN_GRACE_MS, longestTransactionMs: longest };
  let reason: string | null = null;
  if (contract.open)
    reason =
      'The legacy unbounded write contract is still open: close it first (POST /admin/reaction-contract/legacy/close)';
  else if (contract.drainedAt === null)
    reason = 'The legacy write contract is closed but its admitted transactions have not drained';
  else if (contract.admittedAfterClose > 0)
    reason = 'Legacy writes were admitted after the contract closed: the drain is not verified';
  else if (config.RETENTION_DRAIN_GRACE_MS <= longest)
    reason = `RETENTION_DRAIN_GRACE_MS must exceed the longest reaction transaction (${longest} ms)`;
  return { satisfied: reason === null, reason, ...base };
}
