import type { PoolClient, QueryResult } from '@neondatabase/serverless';
import { type QueryConfig, queryWithPrelude } from './driver-internals';

/**
 * A one-shot statement (`pool.query`) with its own statement_timeout and lock_timeout, set in
 * the same round trip as the statement and gone when it ends.
 *
 * Why not the startup packet: Neon's pooled endpoint (PgBouncer in transaction mode) refuses
 * startup parameters it does not know ("unsupported startup parameter: statement_timeout"),
 * and a session-level SET would leak to whoever gets the server connection next. So the
 * budget travels with the statement, in ONE extended-protocol exchange ending in ONE Sync:
 *
 *   Parse/Bind/Execute  select set_config('statement_timeout', $1, true), set_config('lock_timeout', $2, true)
 *   Parse/Bind/Describe/Execute  <the statement>
 *   Sync
 *
 * Everything before a Sync is one implicit transaction, so the `is_local` settings hold for the
 * statement and end with it (commit or rollback at the Sync), and PgBouncer keeps both on one
 * server connection. The server arms statement_timeout at the start of each Execute, so the
 * statement runs under the new value (PostgreSQL ≥ 14 disarms it between Executes; older
 * versions never armed it for the first, budget-only Execute when no default is set).
 *
 * The one limit: a statement that refuses to run in a transaction block (VACUUM, CREATE
 * INDEX CONCURRENTLY, CREATE/DROP DATABASE) fails here with 25001. The Worker runs none;
 * admin code that needs one uses a bare client.
 */
const BUDGET_SQL = "select set_config('statement_timeout', $1, true), set_config('lock_timeout', $2, true)";

/** A budget must never be zero: Postgres reads 0 as "no limit". */
function ms(n: number): string {
  return String(Math.max(1, Math.floor(n)));
}

export interface OneShotBudget {
  statementMs: number;
  lockMs: number;
}

/** Runs one statement on `client` under `budget` (see above); one round trip, one write. */
export function queryWithBudget<R extends QueryResult>(
  client: Pick<PoolClient, 'query'>,
  budget: OneShotBudget,
  config: string | QueryConfig,
  values?: unknown[],
): Promise<R> {
  const prelude = { text: BUDGET_SQL, values: [ms(budget.statementMs), ms(budget.lockMs)] };
  return queryWithPrelude<R>(client, prelude, config, values);
}
