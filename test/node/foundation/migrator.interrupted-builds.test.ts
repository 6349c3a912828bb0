import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { concurrentIndexOf, migrate, readMigrations, splitStatements } from '../../../scripts/lib/migrator';
import { adminQuery, withDatabase } from '../../../scripts/lib/postgres';
import { MIGRATIONS_DIR } from '../../setup/stack';

/**
 * Interrupted `create index concurrently` recovery for EVERY concurrently built index of the
 * project's migrations (the typing ledger's 0041-0048 and 0080 among them), not one sample:
 * the list is derived from the migration files, so a new index is covered without editing
 * this file. Each build is interrupted for real (a writer holds the table, the build waits
 * for it, we cancel the build: what a statement_timeout or a dropped deploy connection does),
 * which leaves an INVALID index and the file unrecorded; the rerun must drop and rebuild it
 * and keep every valid index (same OID).
 */
const adminUrl = inject('adminUrl');
const created: string[] = [];

async function scratch(prefix: string): Promise<string> {
  const name = `${prefix}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
  await adminQuery(adminUrl, `create database ${name}`);
  created.push(name);
  return withDatabase(adminUrl, name);
}

async function connect(url: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  return c;
}

interface Build {
  file: string;
  version: number;
  schema: string;
  index: string;
  table: string;
}

/** Every concurrent index build in the migration files, read with the runner's own parser. */
async function concurrentBuilds(): Promise<Build[]> {
  const out: Build[] = [];
  for (const f of await readMigrations(MIGRATIONS_DIR)) {
    if (!f.noTransaction) continue;
    for (const s of splitStatements(f.sql)) {
      const ix = concurrentIndexOf(s);
      if (ix) out.push({ file: f.name, version: f.version, ...ix });
    }
  }
  return out;
}

interface IndexState {
  oid: number;
  valid: boolean;
  def: string;
}

async function indexStates(c: pg.Client, builds: Build[]): Promise<Map<string, IndexState>> {
  const { rows } = await c.query<{ name: string; oid: number; valid: boolean; def: string }>(
    `select n.nspname || '.' || x.relname as name, x.oid::int as oid, i.indisvalid as valid,
            pg_get_indexdef(x.oid) as def
       from pg_index i join pg_class x on x.oid = i.indexrelid join pg_namespace n on n.oid = x.relnamespace
      where n.nspname || '.' || x.relname = any($1)`,
    [builds.map(key)],
  );
  return new Map(rows.map((r) => [r.name, { oid: r.oid, valid: r.valid, def: r.def }]));
}

const key = (b: Pick<Build, 'schema' | 'index'>) => `${b.schema}.${b.index}`;
const quoted = (schema: string, name: string) => `"${schema}"."${name}"`;

/**
 * The backend waiting behind `holderPid`'s lock, while `run` (the migration that must block)
 * is still running. Polls pg_blocking_pids; never a fixed sleep, and no wall-clock cap of its
 * own: on a loaded machine the run may take many seconds to reach the build, so the only
 * bounds are the run settling without ever blocking (a failure) and the test's timeout.
 */
async function blockedBehind(
  c: pg.Client,
  holderPid: number,
  run: Promise<unknown>,
): Promise<{ pid: number; query: string }> {
  let ended = false;
  void run.finally(() => {
    ended = true;
  });
  for (;;) {
    const { rows } = await c.query<{ pid: number; query: string }>(
      // Only a backend whose entry already shows a concurrent build: `query` comes from the
      // statement's snapshot of the backend entries, but wait_event_type and pg_blocking_pids
      // are read live, so a backend caught blocked can still show the statement it ran
      // before (the migrator's schema_migrations read; seen once in a parallel foundation
      // run). The next poll, a new statement, reads a new snapshot.
      `select pid, query from pg_stat_activity
        where $1 = any(pg_blocking_pids(pid)) and wait_event_type = 'Lock'
          and query ~* 'index\\s+concurrently' limit 1`,
      [holderPid],
    );
    if (rows[0]) return rows[0];
    if (ended)
      throw new Error(`the migration run ended without blocking behind ${holderPid}: ${String(await run)}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Interrupts the build of `b` for real: its file is unrecorded and its index gone (the state
 * before the interrupted run), a writer holds ROW EXCLUSIVE on the table, the rerun's build of
 * `b` creates its catalog entry and waits for the writer; once it is provably blocked, it is
 * cancelled. Leaves the index INVALID and the file unrecorded.
 */
/** The promise's rejection, handled from the start (a fulfilment is returned as is). */
function settled<T>(p: Promise<T>): Promise<T | Error> {
  return p.catch((err: Error) => err);
}

async function interruptBuild(url: string, c: pg.Client, b: Build): Promise<void> {
  await c.query('delete from schema_migrations where version = $1', [b.version]);
  await c.query(`drop index concurrently if exists ${quoted(b.schema, b.index)}`);
  const writer = await connect(url);
  try {
    await writer.query('begin');
    await writer.query(`lock table ${quoted(b.schema, b.table)} in row exclusive mode`);
    const writerPid = (await writer.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
    // Its rejection is taken at once: the cancel below can reject it before the assertion
    // attaches, and a rejection left unhandled for a tick fails the whole run.
    const run = settled(migrate(url, { dir: MIGRATIONS_DIR }));
    const builder = await blockedBehind(c, writerPid, run);
    expect(builder.query).toMatch(
      new RegExp(`index\\s+concurrently\\s+if\\s+not\\s+exists\\s+${b.index}\\s`, 'i'),
    );
    await c.query('select pg_cancel_backend($1)', [builder.pid]);
    expect(await run).toMatchObject({ message: expect.stringMatching(/canceling statement/) });
  } finally {
    await writer.query('rollback').catch(() => undefined);
    await writer.end();
  }
}

afterAll(async () => {
  for (const n of created) await adminQuery(adminUrl, `drop database if exists ${n} with (force)`);
});

describe('the list of concurrent builds comes from the migration files', () => {
  it('the runner recognises every `create index concurrently` in the migrations, the ledger indexes included', async () => {
    let written = 0;
    for (const f of await readMigrations(MIGRATIONS_DIR)) {
      const code = f.sql.replace(/--.*$/gm, '');
      written += (code.match(/\bcreate\s+(?:unique\s+)?index\s+concurrently\b/gi) ?? []).length;
      // A concurrent build can only run outside a transaction: the file must say so.
      if (/\bindex\s+concurrently\b/i.test(code)) expect(f.noTransaction, f.name).toBe(true);
    }
    expect(builds).toHaveLength(written);
    expect(new Set(builds.map(key)).size).toBe(builds.length);
    // Every concurrently built index of the typing ledger (0041-0048, 0080) is in the list.
    const ledger = builds.filter((b) => /^channel_typing_(reaction|settlement)$/.test(b.table));
    expect(ledger.map((b) => b.index).sort()).toEqual(
      [
        'channel_typing_reaction_abandoned',
        'channel_typing_reaction_expiry',
        'channel_typing_reaction_live_session',
        'channel_typing_reaction_message',
        'channel_typing_reaction_quota',
        'channel_typing_reaction_retry',
        'channel_typing_reaction_session',
        'channel_typing_reaction_taskless',
        'channel_typing_reaction_terminal',
        'channel_typing_settlement_created',
      ].sort(),
    );
  });
});

const builds = await concurrentBuilds();

/**
 * The builds whose index the schema still has: an index a later migration drops (0140's
 * `effects_processing_origin` and 0150's `effects_origin`, replaced by 0160) is gone from a
 * migrated database, and its build can only be interrupted before that later file runs,
 * which the runner's order already covers for it as for any other file.
 */
async function liveBuilds(all: Build[]): Promise<Build[]> {
  const dropped = new Map<string, number>();
  for (const f of await readMigrations(MIGRATIONS_DIR))
    for (const s of splitStatements(f.sql)) {
      const m = /^\s*drop\s+index\s+(?:concurrently\s+)?(?:if\s+exists\s+)?(?:"?(\w+)"?\.)?"?(\w+)"?/i.exec(
        s.replace(/--.*$/gm, ''),
      );
      if (m) dropped.set(`${m[1] ?? 'public'}.${m[2]}`, f.version);
    }
  return all.filter((b) => !((dropped.get(key(b)) ?? 0) > b.version));
}
const live = await liveBuilds(builds);

describe('interrupted-build recovery, for every concurrently built index', () => {
  let url = '';
  let c: pg.Client;
  beforeAll(async () => {
    url = await scratch('rl_ixr');
    await migrate(url, { dir: MIGRATIONS_DIR });
    c = await connect(url);
    // Rows in the ledger tables, so each rebuild scans data, not an empty heap.
    await c.query(`insert into channel_typing_reaction
        (id, workspace_id, installation_id, app_id, session_id, source_message_id, input_position,
         context_revision, credential_snapshot, quota_slot, expires_at)
      select 'r_' || g, 'ws', 'i', 'cli', 's', 'm_' || g, g, 0, 'v1.sealed', g, now() + interval '7 days'
      from generate_series(1, 500) g`);
  });
  afterAll(() => c?.end());

  it.each(live.map((b) => [`${b.file}: ${b.index}`, b] as const))(
    '%s: an INVALID index left by an interrupted build is dropped and rebuilt; every valid index keeps its OID',
    async (_, b) => {
      const before = await indexStates(c, live);
      expect([...before.values()].every((s) => s.valid)).toBe(true);
      expect(before.size).toBe(live.length);

      await interruptBuild(url, c, b);
      const broken = (await indexStates(c, [b])).get(key(b));
      expect(broken?.valid).toBe(false);
      const { rows: recorded } = await c.query('select 1 from schema_migrations where version = $1', [
        b.version,
      ]);
      expect(recorded).toEqual([]);

      expect(await migrate(url, { dir: MIGRATIONS_DIR })).toEqual([b.file]);
      const after = await indexStates(c, live);
      const rebuilt = after.get(key(b))!;
      expect(rebuilt.valid).toBe(true);
      expect(rebuilt.oid).not.toBe(broken!.oid); // dropped, then built anew
      expect(rebuilt.def).toBe(before.get(key(b))!.def);
      // Every other index (this file's siblings before and after it included) is untouched.
      for (const other of builds)
        if (key(other) !== key(b)) expect(after.get(key(other)), key(other)).toEqual(before.get(key(other)));
    },
  );

  it('a rerun over valid indexes whose files were never recorded keeps every one of them (same OIDs)', async () => {
    const before = await indexStates(c, live);
    const versions = [...new Set(builds.map((b) => b.version))];
    // A run that built every index and lost its connection before recording the file.
    await c.query('delete from schema_migrations where version = any($1)', [versions]);
    const applied = await migrate(url, { dir: MIGRATIONS_DIR });
    expect(applied.sort()).toEqual([...new Set(builds.map((b) => b.file))].sort());
    expect(await indexStates(c, live)).toEqual(before);
    expect(await migrate(url, { dir: MIGRATIONS_DIR })).toEqual([]);
    expect(await indexStates(c, live)).toEqual(before);
  });
});

describe('the runner reads any concurrent build it is given', () => {
  async function fixture(files: Record<string, string>): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'rl-ixr-'));
    for (const [name, sql] of Object.entries(files)) await writeFile(join(dir, name), sql);
    return dir;
  }

  it('an unquoted mixed-case index name is repaired under the name Postgres gives it (folded to lower case)', async () => {
    const url = await scratch('rl_ixm');
    const base = { '0001_t.sql': 'create table t (v int); insert into t select generate_series(1, 100);' };
    await migrate(url, { dir: await fixture(base) });
    const b: Build = { file: '0002_ix.sql', version: 2, schema: 'public', index: 'mixed_idx', table: 't' };
    const dir = await fixture({
      ...base,
      '0002_ix.sql':
        '-- migrate:no-transaction\ncreate index concurrently if not exists Mixed_Idx on T (v);\n',
    });
    const c = await connect(url);
    try {
      const writer = await connect(url);
      await writer.query('begin');
      await writer.query('lock table t in row exclusive mode');
      const writerPid = (await writer.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
      const run = settled(migrate(url, { dir }));
      const builder = await blockedBehind(c, writerPid, run);
      await c.query('select pg_cancel_backend($1)', [builder.pid]);
      expect(await run).toMatchObject({ message: expect.stringMatching(/canceling statement/) });
      await writer.query('rollback');
      await writer.end();
      expect((await indexStates(c, [b])).get('public.mixed_idx')?.valid).toBe(false);

      expect(await migrate(url, { dir })).toEqual(['0002_ix.sql']);
      expect((await indexStates(c, [b])).get('public.mixed_idx')?.valid).toBe(true);
    } finally {
      await c.end();
    }
  });

  it('a concurrent build the runner cannot parse is refused before any statement of its file runs', async () => {
    const url = await scratch('rl_ixp');
    const dir = await fixture({
      '0001_t.sql': 'create table t (v int);',
      '0002_ix.sql':
        '-- migrate:no-transaction\ncreate table u (v int);\ncreate index concurrently if not exists "t-v" on t (v);\n',
    });
    await expect(migrate(url, { dir })).rejects.toThrow(/cannot repair/);
    const c = await connect(url);
    const { rows } = await c.query(
      `select to_regclass('u') as u, array(select version from schema_migrations order by 1) as v`,
    );
    await c.end();
    expect(rows[0]).toEqual({ u: null, v: [1] });
  });

  it('reads the index, schema and table of each shape a migration may use', () => {
    expect(concurrentIndexOf('create table x (v int)')).toBeNull();
    expect(
      concurrentIndexOf('CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS Foo_Bar ON Private.Some_T (v)'),
    ).toEqual({ schema: 'private', index: 'foo_bar', table: 'some_t' });
    expect(concurrentIndexOf('create index concurrently if not exists "Q" on only "S"."T" (v)')).toEqual({
      schema: 'S',
      index: 'Q',
      table: 'T',
    });
    expect(() => concurrentIndexOf('create index concurrently foo on t (v)')).toThrow(/if not exists/);
  });
});
