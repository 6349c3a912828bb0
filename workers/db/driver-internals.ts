/**
 * Every place this service relies on a part of `@neondatabase/serverless` (node-postgres and
 * pg-pool inside it) that is not its documented API. Nothing else in the tree reaches past the
 * driver's public surface, so a driver upgrade that moves one of these fails here and in
 * test/foundation/driver-internals.test.ts, which checks each internal named below and what
 * each patch is for, against the real database.
 *
 * The internals, and who needs them:
 * - `pool.Client`, the class pg-pool builds each connection from. NeonPool sets it as a class
 *   field after pg-pool's constructor, so the `Client` pool option is ignored; it is assigned
 *   on the pool instead (`admitConnections`, for the isolate's connection gate, db/gate.ts).
 * - pg-pool's `client.connect(callback)`: the pool connects its clients with a callback, not
 *   the promise form (`admitConnections` keeps both).
 * - pg-pool's idle 'error' listener, taken off a client while it is checked out
 *   (`watchCheckedOutClients`).
 * - `Client.Query`, node-postgres' own Query class (not exported by name), with `submit`,
 *   `prepare`, `handleDataRow` and `handleCommandComplete`; the protocol Connection's `parse`,
 *   `bind`, `execute`, and `_send`, which each of them writes through (`queryWithPrelude`, for
 *   a one-shot's budget, db/one-shot.ts).
 *
 * Not here, because they use the documented API only: `neonConfig` (db/pool.ts), the pool's
 * `query` and `end` replaced on the instance (db/pool.ts: `connect`/`release(err)`/`end`), and
 * the runtime WebSocket wrapper handed to the driver (db/websocket.ts).
 */
import { Client, type Pool, type PoolClient, type QueryResult } from '@neondatabase/serverless';
import { log } from '../log';

/** What `pool.query` accepts as its first argument. */
export type QueryConfig = { text: string; values?: unknown[] };

// --- connection admission -------------------------------------------------------------------

/**
 * Runs before each connection of the pool opens. It resolves once the connection may open,
 * with what undoes its admission should the open fail (it must be safe to call twice); its
 * rejection fails the pool's connect.
 */
export type Admission = (client: Client) => Promise<() => void>;

/**
 * Makes every connection `pool` opens from now on wait for `admit` first. The wait happens
 * inside the pool's connect, so the pool's connect timeout covers both.
 */
export function admitConnections(pool: Pool, admit: Admission): void {
  class AdmittedClient extends Client {
    constructor(config: ConstructorParameters<typeof Client>[0]) {
      super(config);
      const open = this.connect.bind(this) as () => Promise<void>;
      this.connect = ((callback?: (err: Error | null) => void) => {
        const opened = admit(this).then(async (undo) => {
          try {
            await open();
          } catch (err) {
            undo();
            throw err;
          }
        });
        if (!callback) return opened;
        // pg-pool's callback (the only caller that passes one) settles its own promise, which
        // its caller awaits; should the callback itself throw, that is logged here rather than
        // left an unhandled rejection of this chain (issue 35 hole 11: nothing from the driver
        // uncaught).
        opened
          .then(
            () => callback(null),
            (err: Error) => callback(err),
          )
          .catch((err: unknown) => log.error('db_connect_callback_failed', { error: err }));
        return undefined;
      }) as typeof this.connect;
    }
  }
  (pool as unknown as { Client: typeof Client }).Client = AdmittedClient as typeof Client;
}

// --- checked-out clients --------------------------------------------------------------------

/**
 * Calls `onError` for an error a client emits while it is checked out of `pool`.
 *
 * pg-pool takes its own 'error' listener off a client while the client is checked out, so a
 * connection lost then (a backend terminated or restarted, a server at its ceiling, a cut
 * socket) emitted 'error' with no listener: a throw inside the driver's socket handler, an
 * uncaught exception in workerd that also kept pg from failing the client's next query. Every
 * client keeps this listener from its connect on; the caller still gets the failure from its
 * next query. An idle client's error is the pool's own 'error' event.
 */
export function watchCheckedOutClients(pool: Pool, onError: (err: Error, client: PoolClient) => void): void {
  const checkedOut = new WeakSet<PoolClient>();
  pool.on('acquire', (client: PoolClient) => checkedOut.add(client));
  pool.on('release', (_err: Error | undefined, client: PoolClient) => checkedOut.delete(client));
  pool.on('connect', (client: PoolClient) =>
    client.on('error', (err: Error) => {
      if (checkedOut.has(client)) onError(err, client);
    }),
  );
}

// --- a statement with a prelude -------------------------------------------------------------

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

/** A statement run ahead of the caller's in the same exchange; its result is not the caller's. */
export interface Prelude {
  text: string;
  /** Text parameters ($1, $2, ...). */
  values: string[];
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

/** Runs `write` with every message it sends held, then sends them as one write. */
function oneWrite(connection: ProtocolConnection, write: () => void): void {
  const send = connection._send;
  const chunks: Uint8Array[] = [];
  connection._send = (bytes) => {
    chunks.push(bytes);
    return true;
  };
  try {
    write();
  } finally {
    connection._send = send;
  }
  send.call(connection, concat(chunks));
}

class PreludedQuery extends DriverQuery {
  /** Prelude statements whose CommandComplete has not come yet: their rows are not the caller's. */
  #preludesPending: number;

  constructor(
    readonly preludes: readonly Prelude[],
    config: string | QueryConfig,
    values: unknown[] | undefined,
    callback: (err: Error | null, result: QueryResult) => void,
  ) {
    super(config, values, callback);
    this.#preludesPending = preludes.length;
  }

  submit(connection: ProtocolConnection): Error | null {
    if (typeof this.text !== 'string') return new Error('a one-shot statement needs text');
    // One write for all the messages: unbatched, each went out as its own WebSocket frame, and
    // the one-shot cost 0.19 ms instead of 0.07 ms per `select 1` (Node, coalesceWrites off;
    // measured for bench/suites/51-pooler.ts).
    oneWrite(connection, () => {
      for (const prelude of this.preludes) {
        connection.parse({ text: prelude.text, name: '', types: [] });
        connection.bind({ portal: '', statement: '', values: prelude.values });
        connection.execute({ portal: '', rows: 0 });
      }
      // Always the extended protocol (a simple Query message would end the exchange with its
      // own ReadyForQuery); `prepare` adds Parse/Bind/Describe/Execute and the one Sync.
      this.prepare(connection);
    });
    return null;
  }

  override handleDataRow(msg: unknown): void {
    if (this.#preludesPending === 0) super.handleDataRow(msg);
  }

  override handleCommandComplete(msg: unknown, connection: unknown): void {
    if (this.#preludesPending > 0) this.#preludesPending--;
    else super.handleCommandComplete(msg, connection);
  }
}

/** The prelude texts of a statement sent by `queryWithPrelude` (for a test's round-trip count), else none. */
export function preludeTexts(query: unknown): string[] {
  return query instanceof PreludedQuery ? query.preludes.map((p) => p.text) : [];
}

/**
 * Runs `prelude` (one statement, or several in order), then the statement, in ONE
 * extended-protocol exchange ending in ONE Sync and one write: Parse/Bind/Execute of each
 * prelude, Parse/Bind/Describe/Execute of the statement, Sync. Without a `begin` among the
 * preludes that is one implicit transaction; a `begin` prelude opens an explicit one that
 * stays open after the Sync (`withTx`). The result is the statement's alone; an error in any
 * rejects.
 */
export function queryWithPrelude<R extends QueryResult>(
  client: Pick<PoolClient, 'query'>,
  prelude: Prelude | readonly Prelude[],
  config: string | QueryConfig,
  values?: unknown[],
): Promise<R> {
  const preludes: readonly Prelude[] = 'text' in prelude ? [prelude] : prelude;
  return new Promise<R>((resolve, reject) => {
    const query = new PreludedQuery(preludes, config, values, (err, result) =>
      err ? reject(err) : resolve(result as R),
    );
    // A submittable: the driver calls its callback, not a returned promise.
    (client.query as unknown as (q: unknown) => unknown)(query);
  });
}
