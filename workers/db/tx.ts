import type { Pool, PoolClient } from '@neondatabase/serverless';
import { type Clock, Deadline, systemClock } from '../clock';
import { log } from '../log';
import { type Prelude, type QueryConfig, queryWithPrelude } from './driver-internals';

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

/**
 * One attempt that ended in a retryable SQLSTATE, and which attempt it was. `abandoned`: not
 * retried, because the budget or the attempts ran out (the caller sees the error, and the
 * request answers the retryable 503, db/refusal.ts).
 */
export interface TxRetry {
  sqlstate: string;
  attempt: number;
  abandoned?: true;
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

/**
 * After an attempt failed with `err`: true when it is retried (logged `db_tx_retry`). A
 * retryable failure that is not retried (no budget or attempts left) is logged once as
 * `db_tx_retry_abandoned`, so a deadlock stays visible to the 40P01 alert whether or not there
 * was time to retry it; the caller then throws it.
 */
function retrying(err: unknown, attempt: number, maxAttempts: number, deadline: Deadline): boolean {
  const state = sqlState(err);
  if (!state || !RETRYABLE_SQLSTATES.has(state)) return false;
  if (attempt >= maxAttempts || deadline.expired()) {
    log.warn('db_tx_retry_abandoned', { sqlstate: state, attempt, budgetLeftMs: deadline.remaining() });
    for (const listener of retryListeners) listener({ sqlstate: state, attempt, abandoned: true });
    return false;
  }
  // A retry is correct behaviour, but a deadlock means two paths took locks in different
  // orders: operators watch `db_tx_retry` with sqlstate 40P01.
  log.warn('db_tx_retry', { sqlstate: state, attempt });
  for (const listener of retryListeners) listener({ sqlstate: state, attempt });
  return true;
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
 * the round trip of `fn`'s first statement when it has parameters (no session state: see
 * db/pool.ts), so such a transaction of n statements costs n + 1 round trips (its commit). Retries only listed SQLSTATEs, and only while budget remains.
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
    const tx = beginWithFirstStatement(client, () => {
      const left = ms(deadline.remaining());
      const lockMs = ms(Math.min(opts.lockTimeoutMs ?? left, left));
      return { isolation: opts.isolation ?? 'read committed', left, lockMs };
    });
    try {
      const result = await fn(tx.client);
      // Nothing sent, nothing to commit (fn ran no statement).
      if (tx.begun()) await client.query('commit');
      return result;
    } catch (err) {
      await client.query('rollback').catch(() => {
        broken = true;
      });
      if (!retrying(err, attempt, maxAttempts, deadline)) throw err;
    } finally {
      client.release(broken);
    }
  }
}

/** What `begin` needs, read when the first statement goes out. */
interface TxStart {
  isolation: NonNullable<TxOptions['isolation']>;
  /** statement_timeout (ms): what is left of the transaction's budget. */
  left: number;
  lockMs: number;
}

/**
 * `client` for `fn`, with `begin` and the transaction's local timeouts sent in the round trip
 * of its first statement instead of one of their own (db/driver-internals.ts
 * `queryWithPrelude`): Parse/Bind/Execute of `begin isolation level ...` and of the
 * `set_config(..., true)` settings, then the statement, one Sync. The `begin` opens an explicit
 * transaction, so it stays open after that Sync, exactly as after a `begin` of its own; an
 * error anywhere in that exchange leaves it aborted, and `withTx` rolls it back as before.
 * Transaction-local only: through Neon's pooled endpoint (PgBouncer, transaction mode) the
 * server connection serves other clients once this transaction ends. The idle timeout ends a
 * transaction whose Worker died between statements. Only a first statement with parameters
 * (so one statement) carries them; one without gets the separate `begin` round trip. It must
 * be text with optional values (a submittable or a callback there throws: nothing calls it so).
 */
function beginWithFirstStatement(
  client: PoolClient,
  start: () => TxStart,
): { client: PoolClient; begun(): boolean } {
  let begun = false;
  const query = ((...args: unknown[]) => {
    if (begun) return (client.query as (...a: unknown[]) => unknown)(...args);
    begun = true;
    const [config, values, callback] = args;
    const s = start();
    const textual =
      typeof config === 'string' ||
      (typeof config === 'object' &&
        config !== null &&
        typeof (config as { submit?: unknown }).submit !== 'function');
    if (!textual || callback !== undefined || typeof values === 'function')
      // Nothing here calls the first statement another way; were one added, it fails loudly
      // rather than running outside the transaction.
      throw new Error(
        'withTx: the first statement must be text (with optional values), not a submittable or callback',
      );
    const params = (values as unknown[] | undefined) ?? (config as Partial<QueryConfig>).values;
    // Parameters mean one statement (the extended protocol's rule), which the prelude needs.
    // Text without them may hold several (`set local a = 1; set local b = 2`), which only the
    // simple protocol runs: it gets its `begin` round trip of its own, as before.
    if (params && params.length > 0)
      return queryWithPrelude(client, beginPreludes(s), config as string | QueryConfig, params);
    return client.query(beginSql(s)).then(() => client.query(config as string | QueryConfig));
  }) as PoolClient['query'];
  const wrapped = new Proxy(client, {
    get(target, prop) {
      if (prop === 'query') return query;
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  return { client: wrapped, begun: () => begun };
}

function beginSql(s: TxStart): string {
  return (
    `begin isolation level ${s.isolation}; set local statement_timeout = ${s.left}; ` +
    `set local lock_timeout = ${s.lockMs}; set local idle_in_transaction_session_timeout = ${ms(s.left * 2)}`
  );
}

function beginPreludes(s: TxStart): Prelude[] {
  return [
    { text: `begin isolation level ${s.isolation}`, values: [] },
    {
      text:
        "select set_config('statement_timeout', $1, true), set_config('lock_timeout', $2, true), " +
        "set_config('idle_in_transaction_session_timeout', $3, true)",
      values: [String(s.left), String(s.lockMs), String(ms(s.left * 2))],
    },
  ];
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
      if (!retrying(err, attempt, opts.maxAttempts ?? 3, deadline)) throw err;
    }
  }
}
