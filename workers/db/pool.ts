import { neonConfig, Pool, type PoolClient } from '@neondatabase/serverless';
import { log } from '../log';
import { queryWithBudget } from './one-shot';
import { sqlState } from './tx';

export type { PoolClient };

/** What a pool needs; a subset of Config so Node scripts can open one too. */
export interface DbSettings {
  DATABASE_URL: string;
  NEON_WS_PROXY?: string;
  DB_STATEMENT_TIMEOUT_MS: number;
}

/** Pools opened so far in this isolate; tests use it to prove pools are not reused. */
export const poolStats = { opened: 0, ended: 0 };

/**
 * Local Postgres has no Neon proxy in front of it, so the driver talks to our small
 * WebSocket-to-TCP bridge instead (scripts/lib/bridge.ts). With Neon in production the
 * setting is absent and the driver's defaults apply.
 */
function configureDriver(wsProxy: string | undefined): void {
  if (!wsProxy) return;
  neonConfig.wsProxy = (host, port) => `${wsProxy}?address=${host}:${port}`;
  neonConfig.useSecureWebSocket = false;
  neonConfig.pipelineTLS = false;
  // With pipelining on, trust/password auth fails with 08P01 against plain Postgres.
  neonConfig.pipelineConnect = false;
}

/** Per-pool overrides; every field defaults from `DbSettings`. */
export interface PoolOptions {
  /** Connections in the pool (default 4). */
  max?: number;
  /**
   * statement_timeout and lock_timeout of every one-shot `pool.query`, set in the statement's
   * own round trip (one-shot.ts; default DB_STATEMENT_TIMEOUT_MS). Transactions set their own
   * budget (`withTx`).
   */
  statementTimeoutMs?: number;
  /**
   * How long to wait for a connection. Defaults from the service-wide DB_STATEMENT_TIMEOUT_MS,
   * not from `statementTimeoutMs`: connecting is not the statement, and a pool with a tight
   * statement budget still needs the usual time to connect on a loaded machine.
   */
  connectTimeoutMs?: number;
}

/**
 * Opens a pool for exactly one request, alarm or script run. Workers forbid I/O objects
 * that outlive their request, so callers must `end()` it (see `withDb`). A number as the
 * second argument is shorthand for `{ max }`.
 */
export function openPool(settings: DbSettings, options: PoolOptions | number = {}): Pool {
  const {
    max = 4,
    statementTimeoutMs = settings.DB_STATEMENT_TIMEOUT_MS,
    connectTimeoutMs,
  } = typeof options === 'number' ? { max: options } : options;
  configureDriver(settings.NEON_WS_PROXY);
  const pool = new Pool({
    connectionString: settings.DATABASE_URL,
    max,
    connectionTimeoutMillis: connectTimeoutMs ?? Math.max(2000, settings.DB_STATEMENT_TIMEOUT_MS),
    // No statement_timeout / lock_timeout / options in the startup packet: Neon's pooled
    // endpoint (PgBouncer, transaction mode) refuses unknown startup parameters, and a server
    // connection there serves many clients, so nothing may rest on session state. Budgets go
    // with each statement instead: `query` below, and `begin; set local ...` in withTx.
  });
  poolStats.opened += 1;
  let ending = false;
  // The driver never sends a WebSocket close, so ending a pool in workerd can surface
  // "Network connection lost." after we are done with it; only earlier errors matter.
  pool.on('error', (err: Error) => {
    if (!ending) log.error('db_pool_error', { error: err });
  });
  // Every one-shot carries its budget (one-shot.ts). Errors from Postgres leave the connection
  // usable, so only a transport failure discards it.
  pool.query = (async (config: string | { text: string; values?: unknown[] }, values?: unknown[]) => {
    const client = await pool.connect();
    let broken: Error | undefined;
    try {
      return await queryWithBudget(
        client,
        { statementMs: statementTimeoutMs, lockMs: statementTimeoutMs },
        config,
        values,
      );
    } catch (err) {
      if (!sqlState(err)) broken = err as Error;
      throw err;
    } finally {
      client.release(broken);
    }
  }) as typeof pool.query;
  const end = pool.end.bind(pool);
  pool.end = (async () => {
    if (ending) return;
    ending = true;
    poolStats.ended += 1;
    // By design: see the 'error' handler above; a pool that fails to end has nothing left to lose.
    await end().catch(() => undefined);
  }) as typeof pool.end;
  return pool;
}

/** Runs `fn` with a fresh pool and always ends it. */
export async function withDb<T>(settings: DbSettings, fn: (pool: Pool) => Promise<T>): Promise<T> {
  const pool = openPool(settings);
  try {
    return await fn(pool);
  } finally {
    await pool.end();
  }
}

/**
 * Runs `fn` on `pool` when the caller already holds one in this I/O context (a request's
 * post-answer work, an actor host's pump), else on a fresh pool of its own (`withDb`). One
 * connection serving a request's sequential work is one backend instead of several.
 */
export function onPool<T>(
  settings: DbSettings,
  pool: Pool | undefined,
  fn: (pool: Pool) => Promise<T>,
): Promise<T> {
  return pool ? fn(pool) : withDb(settings, fn);
}
