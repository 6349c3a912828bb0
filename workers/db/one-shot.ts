import { Client, type PoolClient, type QueryResult } from '@neondatabase/serverless';

/** What `pool.query` accepts as its first argument. */
export type QueryConfig = { text: string; values?: unknown[] };

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

/** The driver's own Query class (node-postgres'), which the package does not export by name. */
interface DriverQuery {
  text: string;
  handleDataRow(msg: unknown): void;
  handleCommandComplete(msg: unknown, connection: unknown): void;
  prepare(connection: unknown): void;
}
type DriverQueryClass = new (
  config: string | QueryConfig,
  values: unknown[] | undefined,
  callback: (err: Error | null, result: QueryResult) => void,
) => DriverQuery;
interface ProtocolConnection {
  parse(msg: { text: string; name: string; types: number[] }): void;
  bind(msg: { portal: string; statement: string; values: string[] }): void;
  execute(msg: { portal: string; rows: number }): void;
  /** Where every message above ends up (node-postgres' Connection writes each at once). */
  _send(bytes: Uint8Array): boolean;
}

const DriverQuery = (Client as unknown as { Query: DriverQueryClass }).Query;

/** A budget must never be zero: Postgres reads 0 as "no limit". */
function ms(n: number): string {
  return String(Math.max(1, Math.floor(n)));
}

function concat(chunks: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

class BudgetedQuery extends DriverQuery {
  /** True until the budget statement's CommandComplete: its row is not the caller's. */
  #budgetPending = true;

  constructor(
    private readonly budget: { statementMs: number; lockMs: number },
    config: string | QueryConfig,
    values: unknown[] | undefined,
    callback: (err: Error | null, result: QueryResult) => void,
  ) {
    super(config, values, callback);
  }

  submit(connection: ProtocolConnection): Error | null {
    if (typeof this.text !== 'string') return new Error('a one-shot statement needs text');
    // One write for all the messages: unbatched, each went out as its own WebSocket frame, and
    // the one-shot cost 0.19 ms instead of 0.07 ms per `select 1` (Node, coalesceWrites off;
    // measured for bench/suites/51-pooler.ts).
    const send = connection._send;
    const chunks: Uint8Array[] = [];
    connection._send = (bytes) => {
      chunks.push(bytes);
      return true;
    };
    try {
      connection.parse({ text: BUDGET_SQL, name: '', types: [] });
      connection.bind({
        portal: '',
        statement: '',
        values: [ms(this.budget.statementMs), ms(this.budget.lockMs)],
      });
      connection.execute({ portal: '', rows: 0 });
      // Always the extended protocol (a simple Query message would end the exchange with its
      // own ReadyForQuery); `prepare` adds Parse/Bind/Describe/Execute and the one Sync.
      this.prepare(connection);
    } finally {
      connection._send = send;
    }
    send.call(connection, concat(chunks));
    return null;
  }

  override handleDataRow(msg: unknown): void {
    if (!this.#budgetPending) super.handleDataRow(msg);
  }

  override handleCommandComplete(msg: unknown, connection: unknown): void {
    if (this.#budgetPending) this.#budgetPending = false;
    else super.handleCommandComplete(msg, connection);
  }
}

export interface OneShotBudget {
  statementMs: number;
  lockMs: number;
}

/** Runs one statement on `client` under `budget` (see above); one round trip. */
export function queryWithBudget<R extends QueryResult>(
  client: Pick<PoolClient, 'query'>,
  budget: OneShotBudget,
  config: string | QueryConfig,
  values?: unknown[],
): Promise<R> {
  return new Promise<R>((resolve, reject) => {
    const query = new BudgetedQuery(budget, config, values, (err, result) =>
      err ? reject(err) : resolve(result as R),
    );
    // A submittable: the driver calls its callback, not a returned promise.
    (client.query as unknown as (q: unknown) => unknown)(query);
  });
}
