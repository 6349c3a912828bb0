import { env } from 'cloudflare:workers';
import { neonConfig } from '@neondatabase/serverless';
import { afterAll, describe, expect, it } from 'vitest';
import { openPool } from '../../workers/db/pool';
import { withTx } from '../../workers/db/tx';
import { sendSafeWebSocket } from '../../workers/db/websocket';
import { directDatabaseUrl, testPool } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';

/**
 * The Neon driver queues its writes in a setTimeout(0) and pg closes the socket right after
 * queuing its last message; the queued send then ran on a closed socket and threw from the
 * timer, an uncaught exception workerd reports (db/websocket.ts). And pg-pool takes its own
 * 'error' listener off a client while it is checked out, so a connection lost then emitted
 * 'error' with no listener: a throw inside the driver's socket handler, uncaught as well.
 */
const pool = testPool(1);
afterAll(() => pool.end());

/** A pool as a Worker opens one (openPool), on this file's database. */
const workerPool = () =>
  openPool({
    DATABASE_URL: directDatabaseUrl(),
    NEON_WS_PROXY: env.NEON_WS_PROXY,
    DB_STATEMENT_TIMEOUT_MS: 5000,
  });

/** A socket through the bridge to this file's database, open. */
async function openSocket(Ctor: typeof WebSocket): Promise<WebSocket> {
  const db = new URL(directDatabaseUrl());
  const ws = new Ctor(`ws://${env.NEON_WS_PROXY}?address=${db.hostname}:${db.port || 5432}`);
  await new Promise<void>((resolve, reject) => {
    ws.addEventListener('open', () => resolve());
    ws.addEventListener('error', () => reject(new Error('socket did not open')));
  });
  return ws;
}

describe('the driver socket', () => {
  it('db.send_after_close_dropped: a send on a closed socket is dropped, where the runtime socket throws', async () => {
    const plain = await openSocket(WebSocket);
    plain.close();
    // The defect, as workerd has it: the driver's timer would throw this, uncaught.
    expect(() => plain.send(new Uint8Array([0]))).toThrow(/send\(\) after close/);

    const safe = await openSocket(sendSafeWebSocket(WebSocket));
    safe.close();
    expect(() => safe.send(new Uint8Array([0]))).not.toThrow();
  });

  it('db.driver_uses_send_safe_socket: every pool of a Worker opens its connections with it, and they work', async () => {
    const p = workerPool();
    try {
      expect(neonConfig.webSocketConstructor?.name).toBe('SendSafeWebSocket');
      const { rows } = await p.query<{ one: number }>('select 1 as one');
      expect(rows).toEqual([{ one: 1 }]);
    } finally {
      await p.end();
    }
  });

  it('db.checked_out_connection_lost: a checked-out client whose backend is terminated sees its end, logs the loss once, and its next query fails', async () => {
    const logs = captureLogLines({ quiet: true });
    const p = workerPool();
    try {
      const client = await p.connect();
      const { rows } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
      // The connection's end, as the client sees it (after the server's error message). Without
      // a listener the 'error' before it threw inside the driver and the end never came.
      const ended = new Promise((resolve) => client.once('end', resolve));
      await pool.query('select pg_terminate_backend($1)', [rows[0]!.pid]);
      await ended;
      await expect(client.query('select 1')).rejects.toThrow();
      client.release(true);
      const lost = logs.events('db_connection_lost');
      expect(lost).toHaveLength(1);
      expect(lost[0]!.level).toBe('warn');
      expect(lost[0]!.error?.message).toMatch(/terminating connection due to administrator command/);
      // One loss, one line: not also the pool's error once the client is back.
      await p.end();
      expect(logs.events('db_pool_error')).toEqual([]);
    } finally {
      logs.restore();
      await p.end();
    }
  });

  it('db.connection_lost_in_tx_logged_once: a backend terminated under a running transaction fails it, with at most one log line', async () => {
    const logs = captureLogLines({ quiet: true });
    const p = workerPool();
    try {
      const tag = `lost_${crypto.randomUUID().slice(0, 8)}`;
      const tx = withTx(p, { budgetMs: 5000 }, (c) => c.query(`select pg_sleep(4) as ${tag}`));
      const outcome = tx.then(
        () => 'applied',
        (e: Error) => e.message,
      );
      // The transaction's backend, once it is running the statement.
      let pid: number | undefined;
      while (pid === undefined) {
        const { rows } = await pool.query<{ pid: number }>(
          "select pid from pg_stat_activity where state = 'active' and query like $1 and pid <> pg_backend_pid()",
          [`%as ${tag}%`],
        );
        pid = rows[0]?.pid;
      }
      await pool.query('select pg_terminate_backend($1)', [pid]);
      expect(await outcome).toMatch(/terminating connection due to administrator command/);
      await p.end();
      // At most one line for one loss (none when the pool ended the client before its socket
      // reported the end: the caller's failure is then the only report, and it has it).
      const lines = [...logs.events('db_connection_lost'), ...logs.events('db_pool_error')];
      expect(lines.length).toBeLessThanOrEqual(1);
    } finally {
      logs.restore();
      await p.end();
    }
  });
});
