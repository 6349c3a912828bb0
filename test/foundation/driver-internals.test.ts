import { Client, Pool, type PoolClient, type QueryResult } from '@neondatabase/serverless';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  admitConnections,
  queryWithPrelude,
  watchCheckedOutClients,
} from '../../workers/db/driver-internals';
import { backendPid, directDatabaseUrl, testPool } from '../helpers/db';

/**
 * What workers/db/driver-internals.ts relies on in `@neondatabase/serverless` beyond its
 * documented API, and what each of its patches is for, against this file's database. A driver
 * upgrade that moves an internal fails a `driver.internal_*` case here first; one that breaks a
 * patch fails its `driver.patch_*` case. Raw pools (not openPool) so that nothing but the
 * module under test stands between the case and the driver; the file's pool configures the
 * driver's WebSocket bridge, as every Worker pool does.
 */
const control = testPool(2);
const raw: Pool[] = [];
/** A pool of the driver itself, on this file's database (or `url`), ended after the file. */
function rawPool(url = directDatabaseUrl(), options: Record<string, unknown> = {}): Pool {
  const pool = new Pool({ connectionString: url, max: 2, connectionTimeoutMillis: 5000, ...options });
  // By design: the driver never sends a WebSocket close, so an idle connection of a pool being
  // ended reports "Network connection lost." (openPool drops it the same way).
  pool.on('error', () => undefined);
  raw.push(pool);
  return pool;
}

/** Counts the protocol writes `client` makes while `run` runs. */
async function writesDuring<T>(
  client: PoolClient,
  run: () => Promise<T>,
): Promise<{ writes: number; result: T }> {
  const connection = (client as unknown as { connection: { _send(b: Uint8Array): boolean } }).connection;
  const send = connection._send;
  let writes = 0;
  connection._send = (bytes) => {
    writes += 1;
    return send.call(connection, bytes);
  };
  try {
    return { result: await run(), writes };
  } finally {
    connection._send = send;
  }
}

const SET_NAME = "select set_config('application_name', $1, true) as prelude_row";

beforeAll(async () => {
  await control.query('create table driver_internals_rows (id int primary key)');
});
afterAll(async () => {
  for (const pool of raw) await pool.end().catch(() => undefined);
  await control.end();
});

describe('the internals the module relies on', () => {
  it("driver.internal_query_class: Client.Query is node-postgres' Query, with submit, prepare and the two handlers a subclass overrides", () => {
    const Query = (Client as unknown as { Query?: new (...a: unknown[]) => object }).Query;
    expect(typeof Query).toBe('function');
    for (const method of ['submit', 'prepare', 'handleDataRow', 'handleCommandComplete'])
      expect(typeof (Query!.prototype as Record<string, unknown>)[method], method).toBe('function');
    expect(new Query!('select 1', undefined, () => undefined)).toHaveProperty('text', 'select 1');
  });

  it('driver.internal_connection_send: the protocol connection has parse, bind, execute and _send, and each message goes out through _send', async () => {
    const client = await control.connect();
    try {
      const connection = (client as unknown as { connection: Record<string, unknown> }).connection;
      for (const method of ['parse', 'bind', 'execute', '_send'])
        expect(typeof connection[method], method).toBe('function');
      // A parameterized statement: Parse, Bind, Describe, Execute, Sync (and a Flush), each
      // its own write. Were they not written through _send, one write could not hold them.
      const { writes } = await writesDuring(client, () => client.query('select $1::int as n', [1]));
      expect(writes).toBeGreaterThanOrEqual(5);
    } finally {
      client.release();
    }
  });

  it('driver.internal_pool_client_field: a pool builds its connections from its own `Client` field, which the NeonPool sets over the `Client` option', async () => {
    class Marked extends Client {}
    const pool = rawPool(directDatabaseUrl(), { Client: Marked });
    const field = (pool as unknown as { Client?: unknown }).Client;
    // The option is ignored: the reason admitConnections assigns the field on the instance.
    expect(field).toBe(Client);
    (pool as unknown as { Client: typeof Client }).Client = Marked;
    const client = await pool.connect();
    try {
      expect(client).toBeInstanceOf(Marked);
    } finally {
      client.release();
    }
  });

  it('driver.internal_pool_connects_with_callback: the pool calls its client’s connect with a callback', async () => {
    const forms: string[] = [];
    class Recording extends Client {
      override connect(...args: unknown[]): never {
        forms.push(typeof args[0]);
        return (super.connect as (...a: unknown[]) => never)(...args);
      }
    }
    const pool = rawPool();
    (pool as unknown as { Client: typeof Client }).Client = Recording as typeof Client;
    const client = await pool.connect();
    client.release();
    expect(forms).toEqual(['function']);
  });

  it("driver.internal_checked_out_has_no_listener: the pool takes its 'error' listener off a client while it is checked out", async () => {
    const pool = rawPool();
    const client = await pool.connect();
    expect(client.listenerCount('error')).toBe(0);
    client.release();
    expect(client.listenerCount('error')).toBe(1);
  });
});

describe('what each patch is for', () => {
  it("driver.patch_prelude: the prelude and the statement go out in one write; the result is the statement's alone, under the prelude's settings, which end with it", async () => {
    const client = await control.connect();
    try {
      const { writes, result } = await writesDuring(client, () =>
        queryWithPrelude<QueryResult<{ name: string; n: number }>>(
          client,
          { text: SET_NAME, values: ['driver_prelude'] },
          "select current_setting('application_name') as name, $1::int as n",
          [7],
        ),
      );
      expect(writes).toBe(1);
      expect(result.rows).toEqual([{ name: 'driver_prelude', n: 7 }]);
      expect(result.fields.map((f) => f.name)).toEqual(['name', 'n']);
      // The statement's own CommandComplete, not the prelude's SELECT 1.
      const insert = await queryWithPrelude(
        client,
        { text: SET_NAME, values: ['driver_prelude'] },
        'insert into driver_internals_rows values (1), (2)',
      );
      expect({ command: insert.command, rowCount: insert.rowCount, rows: insert.rows }).toEqual({
        command: 'INSERT',
        rowCount: 2,
        rows: [],
      });
      const after = await client.query<{ name: string }>(
        "select current_setting('application_name') as name",
      );
      expect(after.rows[0]!.name).not.toBe('driver_prelude');
    } finally {
      client.release();
    }
  });

  it("driver.patch_prelude_begin: a `begin` among several preludes opens a transaction that outlives the exchange's Sync; the statement's rows are its own; an error there leaves it aborted for the caller's rollback", async () => {
    const client = await control.connect();
    const begin = (name: string) => [
      { text: 'begin isolation level repeatable read', values: [] },
      { text: SET_NAME, values: [name] },
    ];
    try {
      const { writes, result } = await writesDuring(client, () =>
        queryWithPrelude<QueryResult<{ iso: string; n: number }>>(
          client,
          begin('driver_begin'),
          'insert into driver_internals_rows values (10) returning 10 as n, current_setting($1) as iso',
          ['transaction_isolation'],
        ),
      );
      expect(writes).toBe(1);
      expect(result.rows).toEqual([{ n: 10, iso: 'repeatable read' }]);
      // Still inside it: the prelude's local setting holds, and a rollback undoes the insert.
      const inside = await client.query<{ name: string }>(
        "select current_setting('application_name') as name",
      );
      expect(inside.rows[0]!.name).toBe('driver_begin');
      await client.query('rollback');
      expect((await client.query('select 1 from driver_internals_rows where id = 10')).rows).toEqual([]);
      // An error in the statement: the transaction is aborted (25P02) until rolled back.
      await expect(
        queryWithPrelude(client, begin('x'), 'insert into driver_internals_rows values (11), (11)'),
      ).rejects.toMatchObject({ code: '23505' });
      await expect(client.query('select 1')).rejects.toMatchObject({ code: '25P02' });
      await client.query('rollback');
      expect((await client.query<{ n: number }>('select 1 as n')).rows).toEqual([{ n: 1 }]);
    } finally {
      client.release();
    }
  });

  it('driver.patch_prelude_errors: a failing prelude or statement rejects, rolls both back, and leaves the connection usable', async () => {
    const client = await control.connect();
    try {
      await expect(
        queryWithPrelude(
          client,
          { text: 'select 1 / $1::int', values: ['0'] },
          'insert into driver_internals_rows values (3)',
        ),
      ).rejects.toMatchObject({ code: '22012' });
      await expect(
        queryWithPrelude(
          client,
          { text: SET_NAME, values: ['x'] },
          'insert into driver_internals_rows values (4), (4)',
        ),
      ).rejects.toMatchObject({ code: '23505' });
      const { rows } = await client.query<{ id: number }>(
        'select id from driver_internals_rows where id in (3, 4)',
      );
      expect(rows).toEqual([]);
    } finally {
      client.release();
    }
  });

  it('driver.patch_admission: every new connection waits for the admission before it opens; a refused admission fails the connect; a failed open undoes its admission', async () => {
    const admitted: number[] = [];
    const pool = rawPool();
    let opened = 0;
    pool.on('connect', () => (opened += 1));
    admitConnections(pool, async () => {
      // Nothing is open yet when the admission runs.
      admitted.push(opened);
      return () => undefined;
    });
    const a = await pool.connect();
    const b = await pool.connect();
    b.release();
    const again = await pool.connect();
    expect(again).toBe(b);
    a.release();
    again.release();
    expect(admitted).toEqual([0, 1]);

    const refusing = rawPool();
    admitConnections(refusing, async () => {
      throw new Error('no place');
    });
    await expect(refusing.connect()).rejects.toThrow('no place');
    expect(refusing.totalCount).toBe(0);

    const url = new URL(directDatabaseUrl());
    url.pathname = '/driver_internals_no_such_database';
    const failing = rawPool(url.toString());
    let undone = 0;
    admitConnections(failing, async () => () => (undone += 1));
    await expect(failing.connect()).rejects.toMatchObject({ code: '3D000' });
    expect(undone).toBe(1);
  });

  it("driver.patch_checked_out_errors: an error of a checked-out client reaches the watcher (a terminated backend), an idle client's does not", async () => {
    const pool = rawPool();
    const seen: string[] = [];
    const poolErrors: string[] = [];
    pool.on('error', (err: Error) => poolErrors.push(err.message));
    watchCheckedOutClients(pool, (err) => seen.push(err.message));
    const client = await pool.connect();
    expect(client.listenerCount('error')).toBe(1);
    const ended = new Promise((resolve) => client.once('end', resolve));
    await control.query('select pg_terminate_backend($1)', [await backendPid(client)]);
    await ended;
    expect(seen[0]).toMatch(/terminating connection due to administrator command/);
    await expect(client.query('select 1')).rejects.toThrow();
    client.release(true);

    const idle = await pool.connect();
    idle.release();
    const before = seen.length;
    idle.emit('error', new Error('idle loss'));
    expect(seen.length).toBe(before);
    expect(poolErrors).toContain('idle loss');
  });
});
