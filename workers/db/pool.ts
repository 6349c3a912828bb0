import { Client, neonConfig, Pool, type PoolClient } from '@neondatabase/serverless';
import { log } from '../log';
import { type ConnectionPriority, isolateGate, type Permit } from './gate';
import { queryWithBudget } from './one-shot';
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

/** Pools opened so far in this isolate; tests use it to prove pools are not reused. */
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

/** What a pool hands each of its clients (through the pool's options) to pass the gate. */
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

/**
 * A client that takes a place in the isolate's budget before it opens its connection, and
 * gives it back when the connection ends. The wait happens inside the pool's connect, so its
 * connect timeout covers both; a wait that runs out fails the connect like a refusal.
 */
class GatedClient extends Client {
  constructor(config: ConstructorParameters<typeof Client>[0] & { gate: GateTicket }) {
    super(config);
    const { gate } = config;
    const open = this.connect.bind(this) as () => Promise<void>;
    this.connect = ((callback?: (err: Error | null) => void) => {
      let permit: Permit | undefined;
      const opened = isolateGate.acquire(gate.priority, gate.waitMs).then(async (p) => {
        permit = p;
        gate.held.add(p);
        this.once('end', () => giveBack(gate, p));
        await open();
      });
      const settled = opened.catch((err: unknown) => {
        if (permit) giveBack(gate, permit);
        throw err;
      });
      if (!callback) return settled;
      // pg-pool's callback (the only caller that passes one) settles its own promise, which its
      // caller awaits; should the callback itself throw, that is logged here rather than left an
      // unhandled rejection of this chain (issue 35 hole 11: nothing from the driver uncaught).
      settled
        .then(
          () => callback(null),
          (err: Error) => callback(err),
        )
        .catch((err: unknown) => log.error('db_connect_callback_failed', { error: err }));
      return undefined;
    }) as typeof this.connect;
  }
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
    connectTimeoutMs = Math.max(2000, settings.DB_STATEMENT_TIMEOUT_MS),
    priority = 'background',
    gateWaitMs = connectTimeoutMs,
    idleTimeoutMs,
  } = typeof options === 'number' ? { max: options } : options;
  configureDriver(settings.NEON_WS_PROXY);
  const gated = settings.DB_ISOLATE_MAX_CONNECTIONS !== undefined;
  if (gated) isolateGate.configure(settings.DB_ISOLATE_MAX_CONNECTIONS!);
  // The gate's wait ends before the pool's own connect timer would cut the connection.
  const gate: GateTicket = {
    priority,
    waitMs: Math.max(0, Math.min(gateWaitMs, connectTimeoutMs - GATE_MARGIN_MS)),
    held: new Set(),
  };
  const pool = new Pool({
    connectionString: settings.DATABASE_URL,
    max,
    connectionTimeoutMillis: connectTimeoutMs,
    ...(idleTimeoutMs === undefined ? {} : { idleTimeoutMillis: idleTimeoutMs }),
    // Read by GatedClient (the pool hands its options to every client it creates).
    ...(gated ? { gate } : {}),
    // No statement_timeout / lock_timeout / options in the startup packet: Neon's pooled
    // endpoint (PgBouncer, transaction mode) refuses unknown startup parameters, and a server
    // connection there serves many clients, so nothing may rest on session state. Budgets go
    // with each statement instead: `query` below, and `begin; set local ...` in withTx.
  });
  if (gated) (pool as unknown as { Client: typeof Client }).Client = GatedClient as typeof Client;
  poolStats.opened += 1;
  let ending = false;
  // The driver never sends a WebSocket close, so ending a pool in workerd can surface
  // "Network connection lost." after we are done with it; only earlier errors matter.
  // Clients whose loss was logged while checked out (below): the pool's own report of the same
  // loss, once the client is back in it, is not a second incident.
  const lost = new WeakSet<PoolClient>();
  pool.on('error', (err: Error, client: PoolClient) => {
    if (!ending && !lost.has(client)) log.error('db_pool_error', { error: err });
  });
  // pg-pool takes its own 'error' listener off a client while the client is checked out, so a
  // connection lost then (a backend terminated or restarted, a server at its ceiling, a cut
  // socket) emitted 'error' with no listener: a throw inside the driver's socket handler, an
  // uncaught exception in workerd that also kept pg from failing the client's next query.
  // Every client keeps this listener from its connect on. It logs a loss while checked out
  // once (pg reports one loss twice: the server's message, then "Connection terminated
  // unexpectedly" at the socket's end; an idle client's loss is the pool's 'error' above), and
  // the caller still gets the failure from its next query.
  const checkedOut = new WeakSet<PoolClient>();
  pool.on('acquire', (client: PoolClient) => checkedOut.add(client));
  pool.on('release', (_err: Error | undefined, client: PoolClient) => checkedOut.delete(client));
  pool.on('connect', (client: PoolClient) =>
    client.on('error', (err: Error) => {
      if (ending || !checkedOut.has(client) || lost.has(client)) return;
      lost.add(client);
      log.warn('db_connection_lost', { error: err });
    }),
  );
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
    // A connection whose socket never reported its end still gives its place back here.
    for (const permit of gate.held) giveBack(gate, permit);
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
