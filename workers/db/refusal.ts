import type { Pool } from '@neondatabase/serverless';
import type { Deadline } from '../clock';
import { AppError } from '../errors';
import { ConnectionBudgetSpent } from './gate';
import { RETRYABLE_SQLSTATES, sqlState } from './tx';

/**
 * SQLSTATEs that mean "no connection now", not "this request is wrong": the server's
 * backend limit (53300 too_many_connections, also per role and per database), a server
 * starting or shutting down (57P03), and the connection-exception class (08xxx).
 */
const REFUSED_SQLSTATES = new Set(['53300', '53400', '57P03', '08000', '08001', '08003', '08004', '08006']);

/**
 * Driver errors with no SQLSTATE that mean the same: the pool's connect timeout
 * (`connectionTimeoutMillis`), and a WebSocket that closed or failed before Postgres answered.
 * The isolate's own budget running out (db/gate.ts, ConnectionBudgetSpent) is a refusal too.
 */
const REFUSED_MESSAGES = [
  /timeout exceeded when trying to connect/i,
  /connection terminated (unexpectedly|due to connection timeout)/i,
  /WebSocket (connection|error)/i,
];

/** Seconds a client should wait before retrying a refused connection. */
export const DB_UNAVAILABLE_RETRY_AFTER_S = 5;

/** True when `err` says the database would not take a connection, not that a statement failed. */
export function isConnectionRefusal(err: unknown): boolean {
  if (err instanceof ConnectionBudgetSpent) return true;
  const state = sqlState(err);
  if (state) return REFUSED_SQLSTATES.has(state);
  const message = err instanceof Error ? err.message : '';
  return REFUSED_MESSAGES.some((re) => re.test(message));
}

/**
 * Wider than a refusal: whether the database could not answer this request at all (refused,
 * a connection lost mid-statement, the server ending it, a statement or lock budget spent),
 * as opposed to a bug or bad data. Such a request answers the 503 below, never a 500: the
 * chaos run (chaos/) found a connection dropped mid-statement rendered as a 500 on the
 * webhook and on /v1 writes. Not retried in place (a lost statement may have committed).
 * A deadlock or serialization failure (RETRYABLE_SQLSTATES) reaches here only once `withTx` /
 * `withStatement` gave up retrying it for want of budget or attempts (`db_tx_retry_abandoned`):
 * the statement rolled back, nothing was written, and the client's retry is the next attempt.
 * It answered a 500 `internal_error` before (a deadlock detected after the webhook's 1.5 s
 * budget had gone by, test webhook.atomic).
 */
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '55P03', '57014', ...RETRYABLE_SQLSTATES]);
const UNAVAILABLE_MESSAGES = [/Network connection lost/i];

export function isDatabaseUnavailable(err: unknown): boolean {
  if (isConnectionRefusal(err)) return true;
  const state = sqlState(err);
  if (state) return UNAVAILABLE_SQLSTATES.has(state) || state.startsWith('08');
  const message = err instanceof Error ? err.message : '';
  return UNAVAILABLE_MESSAGES.some((re) => re.test(message));
}

/**
 * The retryable 503 when the database is unavailable: Lark (and any client) retries it later. A
 * refusal at connect comes before any statement, so nothing was written; a connection lost
 * while a statement ran may have committed it, and the retry is then answered as a duplicate.
 */
export function dbUnavailable(): AppError {
  return new AppError(
    'service_unavailable',
    'The database is not accepting connections right now; retry later',
    { reason: 'db_unavailable', retryAfterSeconds: DB_UNAVAILABLE_RETRY_AFTER_S },
    { 'retry-after': String(DB_UNAVAILABLE_RETRY_AFTER_S) },
  );
}

/**
 * Takes the pool's first connection, retrying a refusal (the server at its backend limit)
 * with a short backoff while `deadline` allows: under a burst, connections free up within
 * milliseconds as other requests end, so a refusal is usually a wait, not a failure. Any
 * other error, or a refusal with no time left, is thrown (and renders as the 503 above).
 * The connection goes back to the pool idle, where the request's first statement finds it.
 */
export async function connectWithin(pool: Pool, deadline: Deadline): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      (await pool.connect()).release();
      return;
    } catch (err) {
      // Full jitter: a burst of refused requests must not come back in step.
      const backoff = Math.random() * Math.min(400, 25 * 2 ** attempt);
      if (!isConnectionRefusal(err) || deadline.remaining() <= backoff) throw err;
      await new Promise((resolve) => setTimeout(resolve, backoff));
    }
  }
}
