import { copyFile, mkdtemp, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { migrate } from '../../../scripts/lib/migrator';
import { adminQuery, withDatabase } from '../../../scripts/lib/postgres';
import { MIGRATIONS_DIR } from '../../setup/stack';

/**
 * Upgrade validation of migrations 0045-0049 against the COMPLETE schema history: a database
 * at every migration before 0045 with retained ledger rows (including pending rows beyond the
 * 1,000-slot quota that predate it), then the upgrade, with an interrupted concurrent build,
 * repeated `up`, and checks that active work outside the ledger is untouched.
 */
const adminUrl = inject('adminUrl');
const created: string[] = [];

async function scratch(): Promise<string> {
  const name = `rl_tmu_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
  await adminQuery(adminUrl, `create database ${name}`);
  created.push(name);
  return withDatabase(adminUrl, name);
}

async function historyBefore(version: number): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'rl-tm-history-'));
  for (const f of await readdir(MIGRATIONS_DIR))
    if (/^\d{4}_/.test(f) && Number(f.slice(0, 4)) < version)
      await copyFile(join(MIGRATIONS_DIR, f), join(dir, f));
  return dir;
}

async function connect(url: string) {
  const c = new pg.Client({ connectionString: url });
  // Handled by design: a client the test did not end is cut when afterAll drops the scratch
  // database (`with (force)`); the test has passed or failed by then, and an error event with
  // no listener would be an uncaught exception of the whole run.
  c.on('error', () => undefined);
  await c.connect();
  return c;
}

const INDEXES = [
  'channel_typing_reaction_expiry',
  'channel_typing_reaction_taskless',
  'channel_typing_reaction_terminal',
  'channel_typing_reaction_abandoned',
  'channel_typing_settlement_created',
];

afterAll(async () => {
  for (const n of created) await adminQuery(adminUrl, `drop database if exists ${n} with (force)`);
});

describe('typing maintenance upgrade (0045-0049)', () => {
  it('upgrades a retained ledger: over-quota pending rows abandoned and redacted, kept rows slotted, interrupted build repaired, repeated up is a no-op', async () => {
    const url = await scratch();
    await migrate(url, { dir: await historyBefore(45) });
    const c = await connect(url);
    // Retained rows from before the quota existed: 1,200 pending without a slot in ws_big
    // (oldest first), 5 slotted pending in ws_small, 3 terminal tombstones. Plus active work
    // elsewhere (a conversation input) that the migration must not touch.
    await c.query(`insert into channel_typing_reaction
        (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
         context_revision, credential_snapshot, expires_at, created_at)
      select 'big_' || g, 'ws_big', 'i', 'cli', 's', 'm_big_' || g, g, 0, 'v1.sealed',
             now() + interval '7 days', now() - (1300 - g) * interval '1 second'
      from generate_series(1, 1200) g`);
    await c.query(`insert into channel_typing_reaction
        (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
         context_revision, credential_snapshot, quota_slot, expires_at)
      select 'small_' || g, 'ws_small', 'i', 'cli', 's2', 'm_small_' || g, g, 0, 'v1.sealed', g, now() + interval '7 days'
      from generate_series(1, 5) g`);
    await c.query(`insert into channel_typing_reaction
        (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
         context_revision, cleaned_at, expires_at)
      select 'done_' || g, 'ws_big', 'i', 'cli', 's3', 'm_done_' || g, g, 0, now(), now() + interval '7 days'
      from generate_series(1, 3) g`);
    const before = await c.query(`select count(*)::int as n from schema_migrations`);
    // 0045 is transactional (catalog-only add column); apply it on its own so the writer lock
    // below holds up the first CONCURRENT build rather than the alter table.
    expect(await migrate(url, { dir: await historyBefore(46) })).toEqual([
      '0045_channel_typing_reaction_retention.sql',
    ]);

    // Interrupt the first concurrent build (0046): a writer holds the table, the build waits,
    // we cancel it, exactly as a statement_timeout or a dropped deploy connection would.
    const writer = await connect(url);
    await writer.query('begin');
    await writer.query('lock table channel_typing_reaction in row exclusive mode');
    const writerPid = (await writer.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
    const run = migrate(url, { dir: MIGRATIONS_DIR });
    // Its rejection is taken at once (a rejection left unhandled for a tick fails the run).
    const ran = run.then(
      () => 'applied',
      (err: Error) => err,
    );
    let ended = false;
    void ran.then(() => {
      ended = true;
    });
    // Until the build is provably blocked behind the writer, however long the migrations
    // before 0046 take on a loaded machine (a count of polls once ran out before it, and the
    // cancel below then hit nothing). `wait_event_type` comes from the same snapshot as
    // `query`; pg_blocking_pids is live.
    let pid = 0;
    while (!pid) {
      const { rows } = await c.query<{ pid: number }>(
        `select pid from pg_stat_activity
          where query ilike 'create index concurrently if not exists channel_typing_reaction_expiry%'
            and wait_event_type = 'Lock' and $1 = any(pg_blocking_pids(pid))`,
        [writerPid],
      );
      if (rows[0]) pid = rows[0].pid;
      else if (ended)
        throw new Error(`the upgrade ended without blocking behind the writer: ${String(await ran)}`);
      else await new Promise((r) => setTimeout(r, 10));
    }
    await c.query('select pg_cancel_backend($1)', [pid]);
    expect(await ran).toMatchObject({ message: expect.stringMatching(/canceling statement/) });
    await writer.query('rollback');
    await writer.end();
    const { rows: invalid } = await c.query(
      `select i.indisvalid as valid from pg_index i join pg_class x on x.oid = i.indexrelid where x.relname = 'channel_typing_reaction_expiry'`,
    );
    expect(invalid[0]).toEqual({ valid: false });
    // 0045 (transactional) is recorded; 0046 is not.
    const { rows: mid } = await c.query<{ version: number }>(
      'select version from schema_migrations where version between 45 and 49',
    );
    expect(mid.map((r) => r.version)).toEqual([45]);

    // The rerun drops the invalid index, rebuilds it, and finishes the upgrade.
    const applied = await migrate(url, { dir: MIGRATIONS_DIR });
    expect(applied).toContain('0046_channel_typing_reaction_expiry.sql');
    expect(applied).toContain('0049_channel_typing_reaction_quota_redaction.sql');
    const { rows: idx } = await c.query(
      `select x.relname as name, i.indisvalid as valid from pg_index i join pg_class x on x.oid = i.indexrelid
       where x.relname = any($1) order by 1`,
      [INDEXES],
    );
    expect(idx).toEqual([...INDEXES].sort().map((name) => ({ name, valid: true })));
    const oids = await c.query(`select relname, oid::int from pg_class where relname = any($1) order by 1`, [
      INDEXES,
    ]);

    // Over-quota: the 200 oldest pending rows of ws_big abandoned and redacted, cleaned_at null.
    const { rows: big } = await c.query(`select
        count(*) filter (where abandoned_at is not null)::int as abandoned,
        count(*) filter (where abandoned_at is not null and (credential_snapshot is not null or quota_slot is not null or cleaned_at is not null or retention_outcome <> 'over_quota'))::int as unredacted,
        count(*) filter (where cleaned_at is null and abandoned_at is null)::int as pending,
        count(distinct quota_slot) filter (where cleaned_at is null and abandoned_at is null)::int as slots,
        max(input_position) filter (where abandoned_at is not null)::int as newest_abandoned,
        min(input_position) filter (where cleaned_at is null and abandoned_at is null)::int as oldest_kept,
        count(*) filter (where cleaned_at is not null)::int as tombstones
      from channel_typing_reaction where workspace_id = 'ws_big'`);
    expect(big[0]).toEqual({
      abandoned: 200,
      unredacted: 0,
      pending: 1000,
      slots: 1000,
      newest_abandoned: 200,
      oldest_kept: 201,
      tombstones: 3,
    });
    const { rows: small } = await c.query(
      `select id, quota_slot, abandoned_at from channel_typing_reaction where workspace_id = 'ws_small' order by id`,
    );
    expect(small.map((r) => [r.quota_slot, r.abandoned_at])).toEqual([1, 2, 3, 4, 5].map((s) => [s, null]));

    // Repeated up: nothing applied, indexes untouched (same OIDs), rows unchanged.
    expect(await migrate(url, { dir: MIGRATIONS_DIR })).toEqual([]);
    expect(
      (await c.query(`select relname, oid::int from pg_class where relname = any($1) order by 1`, [INDEXES]))
        .rows,
    ).toEqual(oids.rows);
    const after = await c.query(`select count(*)::int as n from schema_migrations`);
    expect(after.rows[0].n).toBeGreaterThan(before.rows[0].n);
    // No new foreign keys or cascades on the ledger.
    const { rows: fks } = await c.query(
      `select count(*)::int as n from pg_constraint where contype = 'f'
         and (conrelid = 'channel_typing_reaction'::regclass or confrelid = 'channel_typing_reaction'::regclass)`,
    );
    expect(fks[0].n).toBe(0);
    await c.end();
  }, 60_000);

  it('the over-quota migration is idempotent when re-run by hand', async () => {
    const url = await scratch();
    await migrate(url, { dir: MIGRATIONS_DIR });
    const c = await connect(url);
    await c.query(`insert into channel_typing_reaction
        (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
         context_revision, credential_snapshot, expires_at)
      select 'x_' || g, 'ws_x', 'i', 'cli', 's', 'm_' || g, g, 0, 'v1.sealed', now() + interval '7 days'
      from generate_series(1, 1010) g`);
    const { readFile } = await import('node:fs/promises');
    const sql = await readFile(
      join(MIGRATIONS_DIR, '0049_channel_typing_reaction_quota_redaction.sql'),
      'utf8',
    );
    await c.query(sql);
    const once = await c.query(
      `select id, quota_slot, abandoned_at from channel_typing_reaction where workspace_id = 'ws_x' order by id`,
    );
    await c.query(sql);
    const twice = await c.query(
      `select id, quota_slot, abandoned_at from channel_typing_reaction where workspace_id = 'ws_x' order by id`,
    );
    expect(twice.rows).toEqual(once.rows);
    expect(once.rows.filter((r) => r.abandoned_at).length).toBe(10);
    await c.end();
  }, 60_000);
});
