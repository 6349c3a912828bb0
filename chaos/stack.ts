import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { migrate } from '../scripts/lib/migrator';
import { adminQuery, usePostgres, withDatabase } from '../scripts/lib/postgres';
import { releaseTree } from '../scripts/lib/previous-release';
import { dropRunDatabases, MIGRATIONS_DIR } from '../test/setup/stack';
import { type Bundles, buildBundles } from './runtime';

const TEST_CLOCK_SQL = fileURLToPath(new URL('../test/setup/test-clock.sql', import.meta.url));
const AUDIT_SQL = fileURLToPath(new URL('./audit.sql', import.meta.url));

/**
 * What every schedule of one chaos run shares: the Postgres server (DATABASE_URL's, else an
 * embedded one in a temporary directory), a template database (every migration, then the test
 * clock and the chaos audit, as the test harness installs its clock), both Workers' bundles.
 * Each schedule runs on its own copy of the template and drops it afterwards.
 */
export interface ChaosStack {
  adminUrl: string;
  bundles: Bundles;
  /** The previous release's bundles (scripts/previous-release.json): the "mixed versions" fault. */
  previous: Bundles;
  tempDir: string;
  createDatabase(name: string): Promise<string>;
  dropDatabase(name: string): Promise<void>;
  stop(): Promise<void>;
}

export async function startChaosStack(): Promise<ChaosStack> {
  // Bundles first: a build that fails then leaves no Postgres server behind.
  const tree = await releaseTree();
  const [bundles, previous] = await Promise.all([buildBundles(), buildBundles(tree.root)]);
  const tempDir = await mkdtemp(join(tmpdir(), 'reaction-ledger-chaos-'));
  await chmod(tempDir, 0o755);
  const server = await usePostgres({
    databaseUrl: process.env.DATABASE_URL,
    dataDir: join(tempDir, 'pg'),
    persistent: false,
  });
  const prefix = `rl_chaos_${process.pid}`;
  const template = `${prefix}_tpl`;
  try {
    await adminQuery(server.adminUrl, `drop database if exists ${template}`);
    await adminQuery(server.adminUrl, `create database ${template}`);
    const url = withDatabase(server.adminUrl, template);
    await migrate(url, { dir: MIGRATIONS_DIR });
    await adminQuery(url, await readFile(TEST_CLOCK_SQL, 'utf8'));
    await adminQuery(url, await readFile(AUDIT_SQL, 'utf8'));
  } catch (err) {
    await server.stop();
    throw err;
  }
  return {
    adminUrl: server.adminUrl,
    bundles,
    previous,
    tempDir,
    async createDatabase(name) {
      const database = `${prefix}_${name}`;
      await adminQuery(server.adminUrl, `create database ${database} template ${template}`);
      return withDatabase(server.adminUrl, database);
    },
    async dropDatabase(name) {
      await adminQuery(server.adminUrl, `drop database if exists ${prefix}_${name} with (force)`);
    },
    async stop() {
      await dropRunDatabases(server.adminUrl, prefix);
      await server.stop();
      await rm(tempDir, { recursive: true, force: true });
      for (const b of [bundles, previous])
        for (const file of [b.main, b.retention, b.probe])
          await rm(join(file, '..'), { recursive: true, force: true });
      await tree.remove();
    },
  };
}
