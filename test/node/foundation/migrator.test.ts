import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { migrate } from '../../../scripts/lib/migrator';
import { adminQuery, withDatabase } from '../../../scripts/lib/postgres';
import { MIGRATIONS_DIR } from '../../setup/stack';

const adminUrl = inject('adminUrl');
const created: string[] = [];

async function scratchDatabase(): Promise<string> {
  const name = `rl_mig_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
  await adminQuery(adminUrl, `create database ${name}`);
  created.push(name);
  return withDatabase(adminUrl, name);
}

async function fixture(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'rl-migrations-'));
  for (const [name, sql] of Object.entries(files)) await writeFile(join(dir, name), sql);
  return dir;
}

async function client(url: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  return c;
}

async function indexState(c: pg.Client, name: string) {
  const { rows } = await c.query<{ oid: number; valid: boolean }>(
    `select c.oid::int as oid, i.indisvalid as valid from pg_class c join pg_index i on i.indexrelid = c.oid
      where c.relname = $1`,
    [name],
  );
  return rows[0];
}

/** Waits until `pid` is blocked on a lock: the concurrent build has started and is waiting. */
async function waitBlocked(c: pg.Client, pid: number) {
  for (let i = 0; i < 1000; i++) {
    const { rows } = await c.query<{ n: number }>('select cardinality(pg_blocking_pids($1)) as n', [pid]);
    if (rows[0]!.n > 0) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('never blocked');
}

async function findBuilder(c: pg.Client): Promise<number> {
  for (let i = 0; i < 1000; i++) {
    const { rows } = await c.query<{ pid: number }>(
      `select pid from pg_stat_activity where query ilike 'create index concurrently if not exists b_v%'`,
    );
    if (rows[0]) return rows[0].pid;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('the index build never started');
}

afterAll(async () => {
  for (const name of created) await adminQuery(adminUrl, `drop database if exists ${name} with (force)`);
});

describe('migration runner', () => {
  it('applies the project migrations, and a second run is a no-op', async () => {
    const url = await scratchDatabase();
    const first = await migrate(url, { dir: MIGRATIONS_DIR });
    expect(first.length).toBeGreaterThan(0);
    expect(await migrate(url, { dir: MIGRATIONS_DIR })).toEqual([]);
  });

  it('two concurrent runs apply each file exactly once', async () => {
    const url = await scratchDatabase();
    const [a, b] = await Promise.all([
      migrate(url, { dir: MIGRATIONS_DIR }),
      migrate(url, { dir: MIGRATIONS_DIR }),
    ]);
    expect([...a, ...b].sort()).toEqual([...(a.length ? a : b)].sort());
    expect(a.length === 0 || b.length === 0).toBe(true);
  });

  it('refuses an applied migration that was edited', async () => {
    const url = await scratchDatabase();
    const dir = await fixture({ '0001_t.sql': 'create table t (id int);' });
    await migrate(url, { dir });
    await writeFile(join(dir, '0001_t.sql'), 'create table t (id bigint);');
    await expect(migrate(url, { dir })).rejects.toThrow(/edited after it was applied/);
  });

  it('refuses a database migrated by another history (before the baseline), naming what to do', async () => {
    const url = await scratchDatabase();
    await migrate(url, { dir: await fixture({ '0001_clock.sql': 'create table t (id int);' }) });
    const baselined = await fixture({ '0001_baseline_clock.sql': 'create table t (id int);' });
    await expect(migrate(url, { dir: baselined })).rejects.toThrow(
      /recorded migrations that migrations\/ does not have \(0001_clock\.sql\).*Recreate it/,
    );
  });

  it('accepts a linter exemption added to an applied migration, and still refuses an edit of its SQL', async () => {
    // The migration linter's per-file exemptions (scripts/lint-migrations.ts) are comments
    // added to migrations that production has already applied: they change nothing that runs.
    const url = await scratchDatabase();
    const sql = 'create table t (id int);\n';
    const dir = await fixture({ '0001_t.sql': sql });
    await migrate(url, { dir });
    await writeFile(
      join(dir, '0001_t.sql'),
      `-- squawk-ignore-file prefer-bigint-over-int -- a counter, not an id\n${sql}-- squawk-ignore ban-drop-table -- why\n`,
    );
    expect(await migrate(url, { dir })).toEqual([]);
    await writeFile(
      join(dir, '0001_t.sql'),
      `-- squawk-ignore-file prefer-bigint-over-int\n${sql}select 1;\n`,
    );
    await expect(migrate(url, { dir })).rejects.toThrow(/edited after it was applied/);
    // Only whole lines that are squawk directives: the same words inside a statement are SQL.
    await writeFile(join(dir, '0001_t.sql'), `${sql}select '-- squawk-ignore-file x';\n`);
    await expect(migrate(url, { dir })).rejects.toThrow(/edited after it was applied/);
  });

  describe('repeatable function files (<dir>/functions/*.sql)', () => {
    const fn = (answer: number) =>
      `create or replace function answer() returns int language sql as $$ select ${answer} $$;\n`;

    async function withFunctions(functions: Record<string, string>): Promise<string> {
      const dir = await fixture({ '0001_t.sql': 'create table t (id int);' });
      await mkdir(join(dir, 'functions'));
      for (const [name, sql] of Object.entries(functions)) await writeFile(join(dir, 'functions', name), sql);
      return dir;
    }

    async function answerAndRecords(url: string) {
      const c = await client(url);
      try {
        const { rows } = await c.query<{ answer: number | null; n: number }>(
          `select (select answer()) as answer, (select count(*)::int from schema_functions) as n`,
        );
        return rows[0];
      } finally {
        await c.end();
      }
    }

    it('applies each after the versioned files, then again only when its text changes', async () => {
      const url = await scratchDatabase();
      const dir = await withFunctions({ 'answer.sql': fn(1) });
      expect(await migrate(url, { dir })).toEqual(['0001_t.sql', 'functions/answer.sql']);
      expect(await answerAndRecords(url)).toEqual({ answer: 1, n: 1 });
      expect(await migrate(url, { dir })).toEqual([]);
      // An edited function file is the point: re-applied (not refused, as a versioned file is).
      await writeFile(join(dir, 'functions', 'answer.sql'), fn(2));
      expect(await migrate(url, { dir })).toEqual(['functions/answer.sql']);
      expect(await answerAndRecords(url)).toEqual({ answer: 2, n: 1 });
    });

    it('rolls back a failing function file with its record: the previous definition stays', async () => {
      const url = await scratchDatabase();
      const dir = await withFunctions({ 'answer.sql': fn(1) });
      await migrate(url, { dir });
      await writeFile(join(dir, 'functions', 'answer.sql'), `${fn(3)}select no_such_function();\n`);
      await expect(migrate(url, { dir })).rejects.toThrow(/no_such_function/);
      expect(await answerAndRecords(url)).toEqual({ answer: 1, n: 1 });
      // Fixed, it applies on the next run.
      await writeFile(join(dir, 'functions', 'answer.sql'), fn(3));
      expect(await migrate(url, { dir })).toEqual(['functions/answer.sql']);
      expect(await answerAndRecords(url)).toEqual({ answer: 3, n: 1 });
    });

    it('refuses a function file marked no-transaction', async () => {
      const url = await scratchDatabase();
      const dir = await withFunctions({ 'answer.sql': `-- migrate:no-transaction\n${fn(1)}` });
      await expect(migrate(url, { dir })).rejects.toThrow(/always runs in one transaction/);
    });
  });

  it('rolls back a failed transactional file and records nothing', async () => {
    const url = await scratchDatabase();
    const dir = await fixture({ '0001_bad.sql': 'create table t (id int);\nselect no_such_function();' });
    await expect(migrate(url, { dir })).rejects.toThrow();
    const c = await client(url);
    const { rows } = await c.query(
      `select to_regclass('t') as t, (select count(*)::int from schema_migrations) as n`,
    );
    await c.end();
    expect(rows[0]).toEqual({ t: null, n: 0 });
  });

  it('repairs an interrupted concurrent index build and keeps a valid index untouched', async () => {
    const url = await scratchDatabase();
    const base = {
      '0001_tables.sql': `create table a (v int); create table b (v int);
        insert into a select g from generate_series(1, 1000) g; insert into b select g from generate_series(1, 1000) g;`,
    };
    await migrate(url, { dir: await fixture(base) });
    const dir = await fixture({
      ...base,
      '0002_indexes.sql': `-- migrate:no-transaction
create index concurrently if not exists a_v on a (v);
create index concurrently if not exists b_v on b (v);
`,
    });

    // A writer holds ROW EXCLUSIVE on b: the build of b_v creates its catalog entry, then waits
    // for that writer. Once it is provably blocked (pg_blocking_pids) we cancel it, which is
    // exactly what a statement_timeout or a dropped connection does to a real deploy.
    const writer = await client(url);
    await writer.query('begin');
    await writer.query('lock table b in row exclusive mode');
    const watcher = await client(url);
    const run = migrate(url, { dir });
    const builder = await findBuilder(watcher);
    await waitBlocked(watcher, builder);
    await watcher.query('select pg_cancel_backend($1)', [builder]);
    await expect(run).rejects.toThrow(/canceling statement/);
    await writer.query('rollback');
    await writer.end();

    const validA = await indexState(watcher, 'a_v');
    expect(validA?.valid).toBe(true);
    expect((await indexState(watcher, 'b_v'))?.valid).toBe(false);
    const { rows: before } = await watcher.query('select version from schema_migrations order by version');
    expect(before.map((r) => r.version)).toEqual([1]);

    await migrate(url, { dir });
    expect(await indexState(watcher, 'a_v')).toEqual(validA); // same OID: kept, not rebuilt
    expect((await indexState(watcher, 'b_v'))?.valid).toBe(true);
    const { rows: after } = await watcher.query('select version from schema_migrations order by version');
    expect(after.map((r) => r.version)).toEqual([1, 2]);
    await watcher.end();
  });
});
