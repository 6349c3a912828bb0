import { chmod, mkdir } from 'node:fs/promises';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { Pool as NeonPool, neonConfig } from '@neondatabase/serverless';
import pg from 'pg';
import ws from 'ws';
import { startBridge } from '../../scripts/lib/bridge';
import { migrate } from '../../scripts/lib/migrator';
import { adminQuery, usePostgres, withDatabase } from '../../scripts/lib/postgres';

const MIGRATIONS = fileURLToPath(new URL('../../migrations', import.meta.url));
const DATA_DIR = fileURLToPath(new URL('../../.local/bench-pg', import.meta.url));

export interface BenchStack {
  databaseUrl: string;
  wsProxy: string;
  /** Direct TCP pool (node-postgres). */
  pg(max?: number): pg.Pool;
  /** Neon driver pool through the WebSocket bridge, configured as the Worker does. */
  neon(max?: number): NeonPool;
  stop(): Promise<void>;
}

/**
 * A fresh database for one benchmark run on DATABASE_URL's server, or on an embedded
 * server kept under .local/bench-pg. Every migration applied; dropped on stop.
 */
export async function startBenchStack(): Promise<BenchStack> {
  await mkdir(DATA_DIR, { recursive: true });
  await chmod(DATA_DIR, 0o755).catch(() => undefined);
  const server = await usePostgres({
    databaseUrl: process.env.DATABASE_URL,
    dataDir: `${DATA_DIR}/data`,
    persistent: true,
  });
  // BENCH_DB_PREFIX: on a shared server, name the database after your checkout (e.g. ticketfx_bench).
  const database = `${process.env.BENCH_DB_PREFIX ?? 'rl_bench'}_${Date.now().toString(36)}`;
  await adminQuery(server.adminUrl, `create database ${database}`);
  const databaseUrl = withDatabase(server.adminUrl, database);
  await migrate(databaseUrl, { dir: MIGRATIONS });
  const bridge = await startBridge();
  const wsProxy = `127.0.0.1:${bridge.port}/v2`;
  neonConfig.webSocketConstructor = ws;
  neonConfig.wsProxy = (host, port) => `${wsProxy}?address=${host}:${port}`;
  neonConfig.useSecureWebSocket = false;
  neonConfig.pipelineTLS = false;
  neonConfig.pipelineConnect = false;
  // Node has no coalescing benefit here: a setTimeout(0) per write costs about 1 ms.
  neonConfig.coalesceWrites = false;
  const pools: { end(): Promise<void> }[] = [];
  return {
    databaseUrl,
    wsProxy,
    pg(max = 10) {
      const p = new pg.Pool({ connectionString: databaseUrl, max });
      // An idle client's error (the server ending it at stop) is expected here, not a result.
      p.on('error', () => undefined);
      pools.push(p);
      return p;
    },
    neon(max = 10) {
      const p = new NeonPool({ connectionString: databaseUrl, max });
      p.on('error', () => undefined);
      pools.push(p);
      return p;
    },
    async stop() {
      await Promise.all(pools.map((p) => p.end().catch(() => undefined)));
      await bridge.close();
      await adminQuery(server.adminUrl, `drop database if exists ${database} with (force)`).catch(
        () => undefined,
      );
      await server.stop();
    },
  };
}
