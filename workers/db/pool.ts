import { neonConfig, Pool, type PoolClient } from '@neondatabase/serverless';
import { log } from '../log';
import { admitConnections, type QueryConfig, watchCheckedOutClients } from './driver-internals';
import { type ConnectionPriority, isolateGate, type Permit } from './gate';
import { type OneShotBudget, queryWithBudget } from './one-shot';
import { sqlState } from './tx';
import { sendSafeWebSocket } from './websocket';

export type { PoolClient };

/** What a pool needs; a subset of Config so Node scripts can open one too. */
export interface DbSettings {
  DATABASE_URL: string;
  NEON_WS_PROXY?: string;
  DB_STATEMENT_TIMEOUT_MS: number;
  /**
   * The isolate's connection budget (db/gate.ts); every Worker's configuration carries it.
   * Absent (Node scripts, benches, migrations): the pool is not gated.
   */
  DB_ISOLATE_MAX_CONNECTIONS?: number;
}

/** How much sooner than the pool's connect timeout a wait for the gate gives up. */
const GATE_MARGIN_MS = 100;

/**
 * Pools opened and ended so far in this isolate: `/healthz` logs the difference (pools still
 * open) when it finds the connection budget full, and tests use it to prove pools are not reused.
 */
export const poolStats = { opened: 0, ended: 0 };

/**
 * Local Postgres has no Neon proxy in front of it, so the driver talks to our small
 * WebSocket-to-TCP bridge instead (scripts/lib/bridge.ts). With Neon in production the
 * setting is absent and the driver's defaults apply.
 */
function configureDriver(wsProxy: string | undefined): void {
  // In workerd (a global WebSocket, and no constructor chosen by a Node script): sends after
  // close are dropped instead of thrown from the driver's write timer (db/websocket.ts).
  if (typeof WebSocket === 'function' && neonConfig.webSocketConstructor === undefined)
    neonConfig.webSocketConstructor = sendSafeWebSocket(WebSocket);
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
  /**
   * Its place in the isolate's connection budget (db/gate.ts): `answer` for a request someone
   * waits on, `background` (the default) for everything else.
   */
  priority?: ConnectionPriority;
  /**
   * How long a connection may wait for a place in that budget (default: its connect timeout,
   * which it is part of). The webhook waits no longer than it retries a refused connection.
   */
  gateWaitMs?: number;
  /**
   * How long an idle connection stays open (the driver's default: 10 s). 0 keeps it until the
   * pool ends: a holder that must keep its place in the budget for its whole life (an actor
   * host's wake, whose heartbeats ride on that connection) never gives it back while idle.
   */
  idleTimeoutMs?: number;
}

/** The options of one pool, every field filled in. */
type ResolvedOptions = Required<Omit<PoolOptions, 'idleTimeoutMs'>> & Pick<PoolOptions, 'idleTimeoutMs'>;

function resolveOptions(settings: DbSettings, options: PoolOptions | number): ResolvedOptions {
  const {
    max = 4,
    statementTimeoutMs = settings.DB_STATEMENT_TIMEOUT_MS,
    connectTimeoutMs = Math.max(2000, settings.DB_STATEMENT_TIMEOUT_MS),
    priority = 'background',
    gateWaitMs = connectTimeoutMs,
    idleTimeoutMs,
  } = typeof options === 'number' ? { max: options } : options;
  return { max, statementTimeoutMs, connectTimeoutMs, priority, gateWaitMs, idleTimeoutMs };
}

/** A pool's place in the isolate's connection budget (db/gate.ts). */
interface GateTicket {
  priority: ConnectionPriority;
  waitMs: number;
  /** Places its clients hold, so ending the pool gives back any a client did not. */
  held: Set<Permit>;
}

/** A place back to the isolate's budget, and off the pool's list (idempotent). */
function giveBack(gate: GateTicket, permit: Permit): void {
  gate.held.delete(permit);
  permit.release();
}

/** The pool's ticket for the isolate's gate; none where the settings name no budget. */
function gateTicket(settings: DbSettings, o: ResolvedOptions): GateTicket | undefined {
  if (settings.DB_ISOLATE_MAX_CONNECTIONS === undefined) return undefined;
  isolateGate.configure(settings.DB_ISOLATE_MAX_CONNECTIONS);
  return {
    priority: o.priority,
    // The gate's wait ends before the pool's own connect timer would cut the connection.
    waitMs: Math.max(0, Math.min(o.gateWaitMs, o.connectTimeoutMs - GATE_MARGIN_MS)),
    held: new Set(),
  };
}

function newPool(settings: DbSettings, o: ResolvedOptions): Pool {
  return new Pool({
    connectionString: settings.DATABASE_URL,
    max: o.max,
    connectionTimeoutMillis: o.connectTimeoutMs,
    ...(o.idleTimeoutMs === undefined ? {} : { idleTimeoutMillis: o.idleTimeoutMs }),
    // No statement_timeout / lock_timeout / options in the startup packet: Neon's pooled
    // endpoint (PgBouncer, transaction mode) refuses unknown startup parameters, and a server
    // connection there serves many clients, so nothing may rest on session state. Budgets go
    // with each statement instead: `budgetOneShots` below, and `begin; set local ...` in withTx.
  });
}

/**
 * Each connection takes a place in the isolate's budget before it opens and gives it back
 * when it ends; a wait that runs out fails the connect like a refusal.
 */
function gateConnections(pool: Pool, gate: GateTicket): void {
  admitConnections(pool, async (client) => {
    const permit = await isolateGate.acquire(gate.priority, gate.waitMs);
    gate.held.add(permit);
    client.once('end', () => giveBack(gate, permit));
    return () => giveBack(gate, permit);
  });
}

/** Whether the pool's own `end` has been called: a loss after it is not an incident. */
interface PoolLife {
  ending: boolean;
}

/**
 * Logs a lost connection once. The driver never sends a WebSocket close, so ending a pool in
 * workerd can surface "Network connection lost." after we are done with it; only earlier
 * errors matter. pg reports one loss of a checked-out client twice (the server's message, then
 * "Connection terminated unexpectedly" at the socket's end), and the pool reports it again once
 * the client is back in it: one line for all three.
 */
function logConnectionLoss(pool: Pool, life: PoolLife): void {
  const lost = new WeakSet<PoolClient>();
  pool.on('error', (err: Error, client: PoolClient) => {
    if (!life.ending && !lost.has(client)) log.error('db_pool_error', { error: err });
  });
  watchCheckedOutClients(pool, (err, client) => {
    if (life.ending || lost.has(client)) return;
    lost.add(client);
    log.warn('db_connection_lost', { error: err });
  });
}

/**
 * Every one-shot `pool.query` carries its budget (one-shot.ts). Errors from Postgres leave the
 * connection usable, so only a transport failure discards it.
 */
function budgetOneShots(pool: Pool, statementTimeoutMs: number): void {
  pool.query = oneShots(pool, { statementMs: statementTimeoutMs, lockMs: statementTimeoutMs }).query;
}

/**
 * A `query` whose every call is one one-shot statement on `pool` under `budget` (one-shot.ts:
 * its statement_timeout and lock_timeout in the statement's own round trip), read at each call
 * when a function (a deadline's remaining time). For a single statement that needs a budget
 * other than the pool's: one round trip where `withTx` takes three (begin, statement, commit).
 * Each call is its own transaction: never for statements that must commit together.
 */
export function oneShots(
  pool: Pool,
  budget: OneShotBudget | (() => OneShotBudget),
): { query: Pool['query'] } {
  const query = async (config: string | QueryConfig, values?: unknown[]) => {
    const client = await pool.connect();
    let broken: Error | undefined;
    try {
      return await queryWithBudget(client, typeof budget === 'function' ? budget() : budget, config, values);
    } catch (err) {
      if (!sqlState(err)) broken = err as Error;
      throw err;
    } finally {
      client.release(broken);
    }
  };
  return { query: query as Pool['query'] };
}

/**
 * `end` may be called more than once (the driver's throws), never fails (a pool that fails to
 * end has nothing left to lose; its loss is not logged, see `logConnectionLoss`), and gives
 * back any place a connection whose socket never reported its end still holds.
 */
function endOnce(pool: Pool, life: PoolLife, gate: GateTicket | undefined): void {
  const end = pool.end.bind(pool);
  pool.end = (async () => {
    if (life.ending) return;
    life.ending = true;
    poolStats.ended += 1;
    await end().catch(() => undefined);
    if (gate) for (const permit of gate.held) giveBack(gate, permit);
  }) as typeof pool.end;
}

/**
 * Opens a pool for exactly one request, alarm or script run. Workers forbid I/O objects
 * that outlive their request, so callers must `end()` it (see `withDb`). A number as the
 * second argument is shorthand for `{ max }`.
 */
export function openPool(settings: DbSettings, options: PoolOptions | number = {}): Pool {
  const o = resolveOptions(settings, options);
  configureDriver(settings.NEON_WS_PROXY);
  const gate = gateTicket(settings, o);
  const pool = newPool(settings, o);
  if (gate) gateConnections(pool, gate);
  poolStats.opened += 1;
  const life: PoolLife = { ending: false };
  logConnectionLoss(pool, life);
  budgetOneShots(pool, o.statementTimeoutMs);
  endOnce(pool, life, gate);
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
