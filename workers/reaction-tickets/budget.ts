import type { Pool, PoolClient } from '@neondatabase/serverless';
import { sqlState, withTx } from '../db/tx';
import type { Config } from '../env';
import { AppError } from '../errors';

/*
 * The reaction calls' budgets (REACTION_TX_BUDGET_MS, REACTION_LOCK_TIMEOUT_MS): for a
 * transaction (`runReactionTx`), for the one-statement ticketed call (`reactionBudget`), and
 * the one answer when either runs out (`busyError`).
 */

/**
 * A lock_timeout (55P03) or statement budget (57014) on a reaction call: the message is busy.
 * 503, nothing written (the transaction rolled back), safe to replay the same operation.
 */
export function busyError(err: unknown): AppError | null {
  const state = sqlState(err);
  if (state !== '55P03' && state !== '57014') return null;
  return new AppError('service_unavailable', 'The message is busy; retry the same operation', undefined, {
    'retry-after': '1',
  });
}

/**
 * One budgeted transaction for a reaction call: statement_timeout = the whole budget,
 * lock_timeout shorter, so a request queued behind a hot message fails fast (503, nothing
 * written, safe to replay the same operation) instead of holding a connection.
 */
export async function runReactionTx<T>(
  pool: Pool,
  config: Pick<Config, 'REACTION_TX_BUDGET_MS' | 'REACTION_LOCK_TIMEOUT_MS'>,
  fn: (client: PoolClient) => Promise<T>,
): Promise<T> {
  try {
    return await withTx(
      pool,
      { budgetMs: config.REACTION_TX_BUDGET_MS, lockTimeoutMs: config.REACTION_LOCK_TIMEOUT_MS },
      fn,
    );
  } catch (err) {
    throw busyError(err) ?? err;
  }
}

/** The same budgets for the one-statement ticketed calls (ticket-call.ts). */
export function reactionBudget(config: Pick<Config, 'REACTION_TX_BUDGET_MS' | 'REACTION_LOCK_TIMEOUT_MS'>) {
  return { budgetMs: config.REACTION_TX_BUDGET_MS, lockTimeoutMs: config.REACTION_LOCK_TIMEOUT_MS };
}
