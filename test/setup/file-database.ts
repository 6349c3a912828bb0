import { env } from 'cloudflare:workers';
import { afterAll, inject } from 'vitest';
import { openPool } from '../../workers/db/pool';

/**
 * Every workerd test file runs on its own database (vitest.config.ts copies it from the
 * migrated template when the file's runtime starts); the file drops it when it ends. `force`
 * ends connections a Durable Object or an unfinished pool of the file still holds.
 */
afterAll(async () => {
  const database = new URL(env.DATABASE_URL!).pathname.slice(1);
  const admin = openPool(
    { DATABASE_URL: inject('adminUrl'), NEON_WS_PROXY: env.NEON_WS_PROXY, DB_STATEMENT_TIMEOUT_MS: 30_000 },
    1,
  );
  try {
    // A bare client statement: pool.query runs each statement with its budget in one
    // implicit transaction (workers/db/one-shot.ts), where DROP DATABASE is refused.
    const client = await admin.connect();
    try {
      await client.query(`drop database if exists ${database} with (force)`);
    } finally {
      client.release();
    }
  } finally {
    await admin.end();
  }
});
