import pg from 'pg';
import { type Bridge, startBridge } from '../scripts/lib/bridge';

/**
 * Database faults of a schedule. The Neon driver reaches Postgres only through this bridge,
 * so a cut here is what a dropped connection is to the Worker: mid-statement (`request`: the
 * statement never reaches Postgres) or after it ran (`reply`: Postgres ran it, the answer is
 * lost; in a transaction Postgres then rolls it back). Locks held from a side connection make
 * the Worker's statements wait into their lock and statement timeouts.
 */
export interface ArmedCut {
  marker: string;
  phase: 'request' | 'reply';
}

export interface DbFaults {
  wsProxy: string;
  /** Cuts every open connection now; returns how many. */
  cutAll(): number;
  /** Cuts the connection that next carries a statement containing `marker`. */
  armCut(cut: ArmedCut): void;
  /** Statements that hit an armed cut so far. */
  fired: number;
  /** Side connections holding (or taking) a lock now. */
  readonly locksHeld: number;
  /** Holds an exclusive lock on `table` for `ms` (in the background). */
  holdLock(table: string, ms: number): void;
  /** Drops the armed cuts and releases held locks. */
  clear(): Promise<void>;
  close(): Promise<void>;
}

export async function startDbFaults(databaseUrl: string, port = 0): Promise<DbFaults> {
  const armed: ArmedCut[] = [];
  const locks = new Set<{ client: pg.Client; release: () => void; done: Promise<void> }>();
  const state = { fired: 0 };
  const bridge: Bridge = await startBridge(port, '127.0.0.1', {
    onConnection: (conn) => {
      let cutOnReply = false;
      return {
        client(data) {
          if (armed.length === 0) return;
          const text = data.toString('latin1').toLowerCase();
          const i = armed.findIndex((a) => text.includes(a.marker));
          if (i < 0) return;
          const [cut] = armed.splice(i, 1);
          state.fired++;
          if (cut!.phase === 'request') conn.cut();
          else cutOnReply = true;
        },
        server() {
          if (cutOnReply) conn.cut();
        },
      };
    },
  });
  const faults: DbFaults = {
    wsProxy: `127.0.0.1:${bridge.port}/v2`,
    cutAll: () => bridge.cutAll(),
    armCut: (cut) => armed.push({ ...cut, marker: cut.marker.toLowerCase() }),
    get fired() {
      return state.fired;
    },
    get locksHeld() {
      return locks.size;
    },
    holdLock(table, ms) {
      const client = new pg.Client({ connectionString: databaseUrl });
      let release: () => void = () => undefined;
      const released = new Promise<void>((r) => {
        release = r;
      });
      const entry: { client: pg.Client; release: () => void; done: Promise<void> } = {
        client,
        release,
        done: Promise.resolve(),
      };
      entry.done = (async () => {
        try {
          await client.connect();
          await client.query('begin');
          // A lock this connection cannot get at once is not worth waiting for: skip the fault.
          await client.query(`set local lock_timeout = '2s'`);
          await client.query(`lock table ${table} in access exclusive mode`);
          await Promise.race([released, new Promise((r) => setTimeout(r, ms))]);
          await client.query('rollback');
        } catch {
          // By design: a lock fault that could not be taken is a fault not injected.
        } finally {
          await client.end().catch(() => undefined);
          locks.delete(entry);
        }
      })();
      locks.add(entry);
    },
    async clear() {
      armed.length = 0;
      for (const l of [...locks]) l.release();
      await Promise.all([...locks].map((l) => l.done));
    },
    async close() {
      await faults.clear();
      await bridge.close();
    },
  };
  return faults;
}
