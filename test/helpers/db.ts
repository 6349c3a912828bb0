import { env } from 'cloudflare:workers';
import type { Pool, PoolClient } from '@neondatabase/serverless';
import { afterEach } from 'vitest';
import { openPool } from '../../workers/db/pool';

/**
 * The test file's database, directly: on a PGBOUNCER=1 run the Worker's DATABASE_URL goes
 * through PgBouncer, but a test's own connection must be a session (it holds locks across
 * statements and names its backend pid), which transaction pooling does not give.
 */
export function directDatabaseUrl(): string {
  return (env as { TEST_DIRECT_DATABASE_URL?: string }).TEST_DIRECT_DATABASE_URL ?? env.DATABASE_URL!;
}

/** A pool on the test database for one test file (tests share one I/O context per file). */
export function testPool(max = 8): Pool {
  return openPool(
    { DATABASE_URL: directDatabaseUrl(), NEON_WS_PROXY: env.NEON_WS_PROXY, DB_STATEMENT_TIMEOUT_MS: 15_000 },
    max,
  );
}

export async function backendPid(client: PoolClient): Promise<number> {
  const { rows } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
  return rows[0]!.pid;
}

/**
 * The holders of a file's forced races: `hold(sql, params)` opens a transaction on a
 * connection of its own and runs `sql` (a lock the production code takes, imported from it)
 * once per params row; the test commits it to release the lock. After each test every holder
 * is rolled back and released, so a failed test never leaves a lock behind.
 */
export function lockHolders(pool: Pool) {
  const holders: PoolClient[] = [];
  afterEach(async () => {
    for (const h of holders.splice(0)) {
      // Handled by design: a holder the test committed has nothing left to roll back, and a
      // broken connection is released all the same.
      await h.query('rollback').catch(() => undefined);
      h.release();
    }
  });
  return async function hold(sql: string, params: unknown[][]): Promise<PoolClient & { pid: number }> {
    const client = await pool.connect();
    holders.push(client);
    await client.query('begin');
    for (const p of params) await client.query(sql, p);
    return Object.assign(client, { pid: await backendPid(client) });
  };
}

/**
 * Polls `read` every 10 ms until it returns a value (not undefined); past `timeoutMs` throws
 * `failure()`. The one poller of the lock-wait helpers below: never a sleep of a fixed time.
 */
async function pollUntil<T>(
  read: () => Promise<T | undefined>,
  timeoutMs: number,
  failure: () => string,
): Promise<T> {
  const started = Date.now();
  for (;;) {
    const found = await read();
    if (found !== undefined) return found;
    if (Date.now() - started > timeoutMs) throw new Error(failure());
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Waits until backend `pid` is blocked by a lock (pg_blocking_pids), so a race can be
 * released at exactly the point under test.
 */
export async function waitUntilBlocked(pool: Pool, pid: number, timeoutMs = 10_000): Promise<void> {
  await pollUntil(
    async () => {
      const { rows } = await pool.query<{ n: number }>('select cardinality(pg_blocking_pids($1::int)) as n', [
        pid,
      ]);
      return (rows[0]?.n ?? 0) > 0 ? true : undefined;
    },
    timeoutMs,
    () => `backend ${pid} never blocked`,
  );
}

/**
 * The backends, other than the holders themselves, waiting on a lock one of `holderPids`
 * holds, once there are at least `count` of them. Several holders: a lock queue, where the
 * one behind the first waiter may be blocked by the holder or by that waiter.
 */
export async function blockedBehindAll(
  pool: Pool,
  holderPids: number | number[],
  count: number,
  timeoutMs = 10_000,
): Promise<number[]> {
  const holders = Array.isArray(holderPids) ? holderPids : [holderPids];
  let seen = 0;
  return pollUntil(
    async () => {
      const { rows } = await pool.query<{ pid: number }>(
        'select pid from pg_stat_activity where pid <> all($1::int[]) and pg_blocking_pids(pid) && $1::int[]',
        [holders],
      );
      seen = rows.length;
      return rows.length >= count ? rows.map((r) => r.pid) : undefined;
    },
    timeoutMs,
    () => `${seen} of ${count} backends blocked behind ${holders.join(' or ')}`,
  );
}

/**
 * The backend waiting on a lock `holderPids` hold (the other side of `waitUntilBlocked`: here
 * the blocked backend is not known in advance).
 */
export async function blockedBehind(
  pool: Pool,
  holderPids: number | number[],
  timeoutMs = 10_000,
): Promise<number> {
  const [pid] = await blockedBehindAll(pool, holderPids, 1, timeoutMs);
  return pid!;
}

// The offset this file's helpers last set, so code that stamps times on the client side
// (operation IDs) can follow app_now(). Files of one vitest worker share this module
// (vitest.config.ts, `isolate: false`): the file's end puts it back with its new database.
let clockOffsetMs = 0;

/** Back to the clock of a new database (test/setup/file-database.ts, when a file ends). */
export function forgetDbClockOffset(): void {
  clockOffsetMs = 0;
}

/** Moves app_now() for every connection to the test database (its test clock: test/setup/test-clock.sql). */
export async function setDbClockOffset(pool: Pool, offsetMs: number): Promise<void> {
  await pool.query('update app_test_clock set offset_ms = $1', [offsetMs]);
  clockOffsetMs = offsetMs;
}

export async function advanceDbClock(pool: Pool, ms: number): Promise<void> {
  const { rows } = await pool.query<{ offset_ms: string }>(
    'update app_test_clock set offset_ms = offset_ms + $1 returning offset_ms',
    [ms],
  );
  clockOffsetMs = Number(rows[0]!.offset_ms);
}

/** How far this file's test clock runs ahead of the machine clock (what the helpers above set). */
export function dbClockOffsetMs(): number {
  return clockOffsetMs;
}

/** app_now() of the test database, in Unix ms. */
export async function dbNowMs(pool: Pool): Promise<number> {
  const { rows } = await pool.query<{ ms: string }>(
    'select (extract(epoch from app_now()) * 1000)::bigint as ms',
  );
  return Number(rows[0]!.ms);
}

export function uid(prefix = 't'): string {
  return `${prefix}_${crypto.randomUUID().replaceAll('-', '').slice(0, 16)}`;
}

/**
 * A login role the server refuses at connect (53300 "too many connections for role": the
 * refusal of a server at max_connections), forced for one test file whatever the load. `url`
 * is DATABASE_URL (same server, same database) signed in as that role; `create` it before the
 * file's tests and `drop` it after.
 */
export function refusedRole(pool: Pool, name: string) {
  const role = uid(name)
    .replace(/[^a-z0-9_]/gi, '_')
    .toLowerCase()
    .slice(0, 60);
  const password = `pw${crypto.randomUUID().replaceAll('-', '')}`;
  const url = new URL(env.DATABASE_URL);
  url.username = role;
  url.password = password;
  return {
    url: url.toString(),
    create: () => pool.query(`create role ${role} login password '${password}' connection limit 0`),
    drop: () => pool.query(`drop role if exists ${role}`),
  };
}
