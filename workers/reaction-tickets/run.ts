import type { Pool, PoolClient } from '@neondatabase/serverless';
import { sqlState, withTx } from '../db/tx';
import type { Config } from '../env';
import { AppError } from '../errors';

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
    const state = sqlState(err);
    if (state === '55P03' || state === '57014')
      throw new AppError('service_unavailable', 'The message is busy; retry the same operation', undefined, {
        'retry-after': '1',
      });
    throw err;
  }
}
