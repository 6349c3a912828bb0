import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { migrate } from '../../../scripts/lib/migrator';
import { adminQuery, withDatabase } from '../../../scripts/lib/postgres';
import { MIGRATIONS_DIR } from '../../setup/stack';

/**
 * A migrated database is a production database: nothing a session can set moves its clock or
 * reopens the legacy write contract. The test clock exists only where the test harness
 * installs it (test/setup/test-clock.sql, into the template after migrating).
 */
const adminUrl = inject('adminUrl');
const name = `rl_clk_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
let client: pg.Client;

beforeAll(async () => {
  await adminQuery(adminUrl, `create database ${name}`);
  const url = withDatabase(adminUrl, name);
  await migrate(url, { dir: MIGRATIONS_DIR });
  client = new pg.Client({ connectionString: url });
  await client.connect();
});

afterAll(async () => {
  await client?.end();
  await adminQuery(adminUrl, `drop database if exists ${name} with (force)`);
});

const DAY_MS = 86_400_000;

async function skewMs(): Promise<number> {
  const { rows } = await client.query<{ ms: string }>(
    'select extract(epoch from (app_now() - clock_timestamp())) * 1000 as ms',
  );
  return Math.abs(Number(rows[0]!.ms));
}

describe('a migrated database has no test clock', () => {
  it('app_now() ignores the session settings and has no offset table', async () => {
    await client.query('begin');
    try {
      await client.query(`set local app.clock_offset_ms = '${DAY_MS}'`);
      await client.query(`set local app.test_clock = 'on'`);
      // The table a test database keeps its offset in, if a migration still created one.
      const { rows } = await client.query<{ t: string | null }>(
        "select to_regclass('app_test_clock')::text as t",
      );
      if (rows[0]!.t) await client.query('update app_test_clock set offset_ms = $1', [DAY_MS]);
      expect(await skewMs()).toBeLessThan(1000);
      expect(rows[0]!.t).toBeNull();
    } finally {
      await client.query('rollback');
    }
  });

  it('the legacy write contract, once closed, cannot be reopened even with app.test_clock on', async () => {
    await client.query(
      "update private.write_contract_state set closed_at = now(), drained_at = now(), closed_by = 'test'",
    );
    await client.query('begin');
    try {
      await client.query(`set local app.test_clock = 'on'`);
      await expect(
        client.query('update private.write_contract_state set closed_at = null, drained_at = null'),
      ).rejects.toMatchObject({ code: '55000' });
    } finally {
      await client.query('rollback');
    }
    const { rows } = await client.query<{ closed: boolean }>(
      'select closed_at is not null as closed from private.write_contract_state',
    );
    expect(rows[0]!.closed).toBe(true);
  });
});
