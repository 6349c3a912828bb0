import { env } from 'cloudflare:workers';
import { afterAll, describe, expect, it } from 'vitest';
import { openPool } from '../../workers/db/pool';
import { probe } from '../../workers/retention/probe';
import { directDatabaseUrl, testPool, uid } from '../helpers/db';
import { DAY_MS } from './helpers';

const pool = testPool();
afterAll(() => pool.end());

/**
 * The drain check (issue 29 hole 10) reads other sessions' `xact_start` in pg_stat_activity,
 * which Postgres shows only to a role with the privileges of the session's role or of
 * pg_read_all_stats; to any other role it is null, as for a session in no transaction. A role
 * that cannot see must fail the check, never pass it because it saw nothing.
 */
const LIMITS = { receiptRetentionMs: 30 * DAY_MS, fenceRetentionMs: 90 * DAY_MS, drainGraceMs: 1 };

async function restrictedRole() {
  const role = uid('blind')
    .replace(/[^a-z0-9_]/gi, '_')
    .toLowerCase()
    .slice(0, 60);
  const password = `pw${crypto.randomUUID().replaceAll('-', '')}`;
  await pool.query(`create role ${role} login password '${password}'`);
  await pool.query(`grant usage on schema private to ${role}`);
  await pool.query(`grant select on all tables in schema private, public to ${role}`);
  const url = new URL(directDatabaseUrl());
  url.username = role;
  url.password = password;
  const blind = openPool(
    {
      DATABASE_URL: url.toString(),
      NEON_WS_PROXY: (env as { NEON_WS_PROXY?: string }).NEON_WS_PROXY,
      DB_STATEMENT_TIMEOUT_MS: 15_000,
    },
    1,
  );
  return {
    blind,
    drop: async () => {
      await blind.end();
      await pool.query(`drop owned by ${role}`);
      await pool.query(`drop role ${role}`);
    },
  };
}

describe('the drain check fails closed when it cannot see other sessions', () => {
  it('a transaction open longer than the grace fails the check for a role that sees it and for one that cannot', async () => {
    const { blind, drop } = await restrictedRole();
    const holder = await pool.connect();
    try {
      await holder.query('begin');
      await holder.query('select 1');
      await holder.query('select pg_sleep(0.01)'); // older than the 1 ms grace, by its own clock
      const seeing = await pool.connect();
      try {
        const look = await probe(seeing, LIMITS);
        expect(look.drainVerified).toBe(false);
        expect(look.unseenSessions).toBe(0);
      } finally {
        seeing.release();
      }
      const client = await blind.connect();
      try {
        const look = await probe(client, LIMITS);
        expect(look.unseenSessions).toBeGreaterThan(0);
        expect(look.drainVerified).toBe(false);
      } finally {
        client.release();
      }
    } finally {
      await holder.query('rollback');
      holder.release();
      await drop();
    }
  });
});
