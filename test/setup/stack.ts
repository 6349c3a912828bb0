import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import pg from 'pg';
import { type LarkEmulator, startLarkEmulator } from '../../emulator/server';
import { startBridge } from '../../scripts/lib/bridge';
import { migrate } from '../../scripts/lib/migrator';
import { type PgBouncer, startPgBouncer } from '../../scripts/lib/pgbouncer';
import { adminQuery, usePostgres, withDatabase } from '../../scripts/lib/postgres';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations', import.meta.url));
const TEST_CLOCK_SQL = fileURLToPath(new URL('./test-clock.sql', import.meta.url));

/**
 * The outside services a test run needs: a Postgres server (DATABASE_URL's, else an embedded
 * one in a temporary directory), a template database with every migration applied, and the
 * WebSocket bridge for the Neon driver. Each test file gets its own copy of the template
 * (`createFileDatabase`), so no file sees another's rows, clock or locks.
 *
 * With PGBOUNCER=1 the code under test reaches Postgres through PgBouncer in transaction mode
 * (scripts/lib/pgbouncer.ts; PGBOUNCER_POOL_SIZE server connections per file database,
 * default 4), the local stand-in for Neon's pooled endpoint.
 */
export async function startTestStack() {
  const tempDir = await mkdtemp(join(tmpdir(), 'reaction-ledger-test-'));
  // Postgres runs as the `postgres` OS user when we are root: it must reach its data dir.
  await chmod(tempDir, 0o755);
  const server = await usePostgres({
    databaseUrl: process.env.DATABASE_URL,
    dataDir: join(tempDir, 'pg'),
    persistent: false,
  });
  // Every database of this run starts with this prefix, so teardown can find leftovers.
  const prefix = `rl_test_${process.pid}_${Date.now().toString(36)}`;
  const template = `${prefix}_tpl`;
  await adminQuery(server.adminUrl, `create database ${template}`);
  await migrate(withDatabase(server.adminUrl, template), { dir: MIGRATIONS_DIR });
  // After the migrations, into the template only: the test clock is the harness's, not a
  // migration's, so no migrated (production) database has one.
  await adminQuery(withDatabase(server.adminUrl, template), await readFile(TEST_CLOCK_SQL, 'utf8'));
  const bridge = await startBridge();
  let pgbouncer: PgBouncer | undefined;
  const pgbouncerPoolSize = Number(process.env.PGBOUNCER_POOL_SIZE ?? 4);
  if (process.env.PGBOUNCER === '1')
    pgbouncer = await startPgBouncer(server.adminUrl, { poolSize: pgbouncerPoolSize });
  return {
    adminUrl: server.adminUrl,
    template,
    prefix,
    wsProxy: `127.0.0.1:${bridge.port}/v2`,
    pgbouncerPort: pgbouncer?.port ?? 0,
    pgbouncerPoolSize: pgbouncer ? pgbouncerPoolSize : 0,
    async stop() {
      await bridge.close();
      await pgbouncer?.stop();
      await dropRunDatabases(server.adminUrl, prefix).catch((err: unknown) => {
        // Teardown goes on (the embedded server and its directory go anyway); say what stayed.
        console.error(`test teardown: could not drop databases ${prefix}_*:`, err);
      });
      await server.stop();
      await rm(tempDir, { recursive: true, force: true });
    },
  };
}

let fileCount = 0;

/**
 * A fresh database for one test file, copied from the migrated template (test clock
 * included). The file drops it when it ends (test/setup/file-database.ts).
 */
export async function createFileDatabase(
  adminUrl: string,
  template: string,
  prefix: string,
): Promise<string> {
  fileCount += 1;
  const database = `${prefix}_f${fileCount}`;
  // FILE_COPY, as the file's own re-creation does (test/setup/file-database.ts).
  await adminQuery(adminUrl, `create database ${database} template ${template} strategy file_copy`);
  return withDatabase(adminUrl, database);
}

/**
 * The URL the code under test uses for a file database: through PgBouncer when the run has
 * one (`pgbouncerPort` > 0), else the direct one. Tests' own control connections (locks they
 * hold, pids they wait on) stay direct: they need a session, which PgBouncer does not give.
 */
export function appDatabaseUrl(directUrl: string, pgbouncerPort: number): string {
  if (!pgbouncerPort) return directUrl;
  const url = new URL(directUrl);
  url.hostname = '127.0.0.1';
  url.port = String(pgbouncerPort);
  return url.toString();
}

/**
 * Drops the template and the file databases: each workerd worker's last one (a file re-creates
 * its database for the next file when it ends, test/setup/file-database.ts), and any a crashed
 * run or the chaos run left behind.
 */
export async function dropRunDatabases(adminUrl: string, prefix: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ datname: string }>(
      `select datname from pg_database where datname like $1 || '\\_%'`,
      [prefix],
    );
    for (const { datname } of rows) await client.query(`drop database if exists ${datname} with (force)`);
  } finally {
    await client.end();
  }
}

/**
 * Emulators started for test files, closed by the global teardown (the config that starts them
 * and the global setup run in the same Node process).
 */
const FILE_EMULATORS = Symbol.for('reaction-ledger.test.fileEmulators');
type Registry = { [FILE_EMULATORS]?: Set<LarkEmulator> };

/** A Lark emulator of one test file's own: no fault, token or call log is seen by another. */
export async function startFileEmulator(): Promise<string> {
  const lark = await startLarkEmulator();
  const g = globalThis as Registry;
  g[FILE_EMULATORS] ??= new Set();
  g[FILE_EMULATORS].add(lark);
  return lark.url;
}

export async function closeFileEmulators(): Promise<void> {
  const all = (globalThis as Registry)[FILE_EMULATORS];
  if (!all) return;
  await Promise.all([...all].map((e) => e.close()));
  all.clear();
}
