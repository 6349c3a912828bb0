import type { Pool, PoolClient } from '@neondatabase/serverless';
import { type Clock, Deadline, systemClock } from '../clock';
import { log } from '../log';

/**
 * Serialization failures, deadlocks and a server restart mid-transaction are safe to
 * retry from the top; everything else (including lock_timeout, 55P03, and
 * statement_timeout, 57014) is a real answer for the caller.
 */
export const RETRYABLE_SQLSTATES = new Set(['40001', '40P01', '57P03']);

export interface TxOptions {
  /** Whole-transaction budget: bounds statement_timeout and the retry loop. */
  budgetMs: number;
  /** Defaults to the budget; a shorter value fails fast on contention. */
  lockTimeoutMs?: number;
  isolation?: 'read committed' | 'repeatable read' | 'serializable';
  maxAttempts?: number;
  clock?: Clock;
}

/** One retried attempt: the SQLSTATE that ended it and which attempt it was. */
export interface TxRetry {
  sqlstate: string;
  attempt: number;
}

const retryListeners = new Set<(retry: TxRetry) => void>();

/**
 * Sees every retry `withTx` makes. The test harness subscribes so that a deadlock (40P01)
 * a test did not expect fails that test instead of being quietly retried; returns the
 * unsubscribe function.
 */
export function onTxRetry(listener: (retry: TxRetry) => void): () => void {
  retryListeners.add(listener);
  return () => retryListeners.delete(listener);
}

export function sqlState(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err ? String(err.code) : undefined;
}

/** A statement-level budget must never be zero: Postgres reads 0 as "no limit". */
function ms(n: number): number {
  return Math.max(1, Math.floor(n));
}

/**
 * Runs `fn` in one transaction on one connection. `begin` and the local timeouts travel in
 * a single round trip (no session state: see db/pool.ts). Retries only listed SQLSTATEs, and only while budget remains.
 */
export async function withTx<T>(
  pool: Pool,
  opts: TxOptions,
  fn: (client: PoolClient) => Promise<T>,
): Promise<T> {
  const deadline = new Deadline(opts.budgetMs, opts.clock ?? systemClock);
  const maxAttempts = opts.maxAttempts ?? 3;
  for (let attempt = 1; ; attempt++) {
    const client = await pool.connect();
    let broken = false;
    try {
      const left = ms(deadline.remaining());
      const lockMs = ms(Math.min(opts.lockTimeoutMs ?? left, left));
      // Transaction-local only: through Neon's pooled endpoint (PgBouncer, transaction mode)
      // the server connection serves other clients once this transaction ends. The idle
      // timeout ends a transaction whose Worker died between statements.
      await client.query(
        `begin isolation level ${opts.isolation ?? 'read committed'}; ` +
          `set local statement_timeout = ${left}; set local lock_timeout = ${lockMs}; ` +
          `set local idle_in_transaction_session_timeout = ${ms(left * 2)}`,
      );
      const result = await fn(client);
      await client.query('commit');
      return result;
    } catch (err) {
      await client.query('rollback').catch(() => {
        broken = true;
      });
      const state = sqlState(err);
      if (!state || !RETRYABLE_SQLSTATES.has(state) || attempt >= maxAttempts || deadline.expired())
        throw err;
      // A retry is correct behaviour, but a deadlock means two paths took locks in different
      // orders: operators watch `db_tx_retry` with sqlstate 40P01.
      log.warn('db_tx_retry', { sqlstate: state, attempt });
      for (const listener of retryListeners) listener({ sqlstate: state, attempt });
    } finally {
      client.release(broken);
    }
  }
}

/** Database wall time, shifted by the test clock when a test database enables it. */
export async function dbNow(q: Pick<PoolClient, 'query'>): Promise<Date> {
  const { rows } = await q.query<{ now: Date }>('select app_now() as now');
  return rows[0]!.now;
}

/**
 * One statement that is its own transaction (a SQL function call in autocommit): the same
 * retry rule as `withTx` (listed SQLSTATEs only, while budget remains, seen by `onTxRetry`),
 * without `begin`/`commit` round trips. The statement must enforce its own budget (it cannot
 * set its own statement_timeout; see migrations/functions/reaction_tickets.sql and migrations/functions/effects_write_back.sql).
 */
export async function withStatement<T>(
  opts: Pick<TxOptions, 'budgetMs' | 'maxAttempts' | 'clock'>,
  run: () => Promise<T>,
): Promise<T> {
  const deadline = new Deadline(opts.budgetMs, opts.clock ?? systemClock);
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (err) {
      const state = sqlState(err);
      if (
        !state ||
        !RETRYABLE_SQLSTATES.has(state) ||
        attempt >= (opts.maxAttempts ?? 3) ||
        deadline.expired()
      )
        throw err;
      log.warn('db_tx_retry', { sqlstate: state, attempt });
      for (const listener of retryListeners) listener({ sqlstate: state, attempt });
    }
  }
}
