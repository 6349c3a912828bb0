import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startBridge } from '../../scripts/lib/bridge';
import { migrate } from '../../scripts/lib/migrator';
import { adminQuery, usePostgres, withDatabase } from '../../scripts/lib/postgres';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations', import.meta.url));

/**
 * The outside services a test run needs: a Postgres server (DATABASE_URL's, else an embedded
 * one in a temporary directory), a fresh database with every migration applied and the
 * test clock enabled, and the WebSocket bridge for the Neon driver.
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
  const database = `rl_test_${process.pid}_${Date.now().toString(36)}`;
  await adminQuery(server.adminUrl, `create database ${database}`);
  const databaseUrl = withDatabase(server.adminUrl, database);
  await migrate(databaseUrl, { dir: MIGRATIONS_DIR });
  await adminQuery(databaseUrl, `alter database ${database} set app.test_clock = 'on'`);
  const bridge = await startBridge();
  return {
    adminUrl: server.adminUrl,
    databaseUrl,
    wsProxy: `127.0.0.1:${bridge.port}/v2`,
    async stop() {
      await bridge.close();
      await adminQuery(server.adminUrl, `drop database if exists ${database} with (force)`).catch(
        () => undefined,
      );
      await server.stop();
      await rm(tempDir, { recursive: true, force: true });
    },
  };
}
