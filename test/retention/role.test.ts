import { env } from 'cloudflare:workers';
import type { Pool, PoolClient } from '@neondatabase/serverless';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPool } from '../../workers/db/pool';
import { deleteBatch } from '../../workers/retention/batch';
import {
  enableAtGeneration,
  fenceStop,
  readActivations,
  readControl,
  recordActivation,
} from '../../workers/retention/control';
import { probe } from '../../workers/retention/probe';
import { directDatabaseUrl, testPool, uid } from '../helpers/db';
import { ACTOR, DAY_MS } from './helpers';

const pool = testPool();
const LIMITS = { receiptRetentionMs: 30 * DAY_MS, fenceRetentionMs: 90 * DAY_MS, drainGraceMs: 3_600_000 };

/**
 * The cleanup's own database role (issue 29 hole 10, migrations/0060_baseline_retention.sql): a login user that is a
 * member of reaction_retention_cleanup can do everything the cleanup Worker does (probe,
 * batches, control row, activation record) and nothing else of the schema.
 */
let role: string;
let cleanup: Pool;
beforeAll(async () => {
  role = uid('cleanup')
    .replace(/[^a-z0-9_]/gi, '_')
    .toLowerCase()
    .slice(0, 60);
  const password = `pw${crypto.randomUUID().replaceAll('-', '')}`;
  await pool.query(`create role ${role} login password '${password}' in role reaction_retention_cleanup`);
  const url = new URL(directDatabaseUrl());
  url.username = role;
  url.password = password;
  cleanup = openPool(
    {
      DATABASE_URL: url.toString(),
      NEON_WS_PROXY: (env as { NEON_WS_PROXY?: string }).NEON_WS_PROXY,
      DB_STATEMENT_TIMEOUT_MS: 15_000,
    },
    1,
  );
});
afterAll(async () => {
  await cleanup.end();
  await pool.query(`drop role if exists ${role}`);
  await pool.end();
});

async function asCleanup<R>(fn: (c: PoolClient) => Promise<R>): Promise<R> {
  const c = await cleanup.connect();
  try {
    await c.query('begin');
    return await fn(c);
  } finally {
    // Nothing this test does as the cleanup is kept: the control row stays as other files expect.
    await c.query('rollback');
    c.release();
  }
}

describe('the cleanup role (0060_baseline_retention)', () => {
  it('can run every statement of the cleanup', async () => {
    await asCleanup(async (c) => {
      const look = await probe(c, LIMITS);
      expect(look.unseenSessions).toBe(0); // pg_read_all_stats: the drain check can see
      const control = await readControl(c);
      await enableAtGeneration(c, control.generation);
      const fenced = await fenceStop(c, control.generation + 1);
      await recordActivation(c, 'stop', ACTOR, fenced.generation);
      expect((await readActivations(c, 1))[0]).toMatchObject({ action: 'stop' });
      expect((await deleteBatch(c, 'receipts', LIMITS, null)).selected).toBeGreaterThanOrEqual(0);
    });
  });

  it('cannot read or change anything else', async () => {
    for (const sql of [
      'select 1 from private.reaction_tickets limit 1',
      'select 1 from private.messages limit 1',
      'delete from private.message_reactions',
      "update private.write_contract_state set closed_by = 'x'",
      'insert into private.chat_reaction_operations default values',
    ]) {
      const err = await asCleanup((c) => c.query(sql)).catch((e: { code?: string }) => e);
      expect((err as { code?: string }).code, sql).toBe('42501');
    }
  });
});
