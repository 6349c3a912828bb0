import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';

/**
 * A small forward-only migration runner. node-pg-migrate was considered: it has no
 * checksums of applied files and no repair of an INVALID index left by an interrupted
 * `create index concurrently`, which the typing ledger needs, so the runner is ours.
 *
 * - `NNNN_name.sql` files run in order; each is recorded with a sha256 checksum in the
 *   same transaction as its statements, so a concurrent runner is detected.
 * - A session advisory lock makes runs one at a time (polled; see acquireMigrationLock).
 * - A file whose first line is `-- migrate:no-transaction` runs statement by statement
 *   (needed for `create index concurrently`). Each concurrent build must say
 *   `if not exists`; before it runs, an INVALID index of that name (an interrupted build) is
 *   dropped and rebuilt, and a valid one is left as it is (same OID). This holds for every
 *   concurrent build of every such file (`concurrentIndexOf`); one the runner cannot read
 *   refuses its whole file before any of it runs.
 * - The checksum leaves out whole lines that are squawk directives (`-- squawk-ignore…`): the
 *   migration linter's per-file exemptions (scripts/lint-migrations.ts) are comments added to
 *   files production has already applied, and change nothing that runs. A file without such
 *   lines has the checksum it always had.
 * - SQL functions have a repeatable home: `<dir>/functions/*.sql`, one file per function family,
 *   each nothing but `create or replace` of functions (and their comments). After the versioned
 *   files, each function file whose checksum differs from the one recorded in
 *   `schema_functions` is applied in one transaction with its new record, so a function has one
 *   readable definition instead of a copy per change. Rules (docs/operations.md "Migrations"):
 *   a versioned file never calls a repeatable function (on a fresh database they do not exist
 *   yet when it runs); a signature change is a new function name (the previous release keeps
 *   calling the old one until the release after); removing a file drops nothing (a versioned
 *   `drop function` does, one release later).
 */
export const MIGRATION_LOCK_KEY = 727_001;
export const NO_TX = /^--\s*migrate:no-transaction/;
const LINT_DIRECTIVE = /^--[ \t]*squawk-ignore(?:-file)?\b.*(?:\r?\n|$)/gm;

/** sha256 of a migration's text without its squawk directive lines (see above). */
export function migrationChecksum(sql: string): string {
  return createHash('sha256').update(sql.replace(LINT_DIRECTIVE, '')).digest('hex');
}
const CONCURRENT_INDEX =
  /create\s+(?:unique\s+)?index\s+concurrently\s+(if\s+not\s+exists\s+)?("?[\w$]+"?)\s+on\s+(?:only\s+)?("?[\w$]+"?(?:\."?[\w$]+"?)?)/i;

export interface MigrationFile {
  version: number;
  name: string;
  sql: string;
  checksum: string;
  noTransaction: boolean;
}

export interface MigrateOptions {
  dir: string;
  /** Per-statement ceiling; tests shorten it to interrupt a concurrent build for real. */
  statementTimeoutMs?: number;
  lockTimeoutMs?: number;
  log?: (line: string) => void;
}

export async function readMigrations(dir: string): Promise<MigrationFile[]> {
  const names = (await readdir(dir)).filter((n) => /^\d{4}_[\w-]+\.sql$/.test(n)).sort();
  const files: MigrationFile[] = [];
  for (const name of names) {
    const sql = await readFile(join(dir, name), 'utf8');
    files.push({
      version: Number(name.slice(0, 4)),
      name,
      sql,
      checksum: migrationChecksum(sql),
      noTransaction: NO_TX.test(sql),
    });
  }
  const versions = new Set(files.map((f) => f.version));
  if (versions.size !== files.length) throw new Error('two migration files share a version number');
  return files;
}

/** The repeatable function files of a migrations directory (none when it has no `functions/`). */
export function functionsDir(dir: string): string {
  return join(dir, 'functions');
}

export interface FunctionFile {
  name: string;
  sql: string;
  checksum: string;
}

export async function readFunctionFiles(dir: string): Promise<FunctionFile[]> {
  let names: string[];
  try {
    names = (await readdir(functionsDir(dir))).filter((n) => /^[\w-]+\.sql$/.test(n)).sort();
  } catch (err) {
    // A migrations directory without functions/ (older histories the upgrade tests rebuild).
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const files: FunctionFile[] = [];
  for (const name of names) {
    const sql = await readFile(join(functionsDir(dir), name), 'utf8');
    if (NO_TX.test(sql)) throw new Error(`functions/${name}: a function file always runs in one transaction`);
    files.push({ name, sql, checksum: migrationChecksum(sql) });
  }
  return files;
}

/** Splits a no-transaction file into statements: each ends with `;` at the end of a line. */
export function splitStatements(sql: string): string[] {
  return sql
    .split(/;\s*$/m)
    .map((s) => s.replace(/^\s*--.*$/gm, '').trim())
    .filter((s) => s.length > 0);
}

export interface ConcurrentIndex {
  /** The schema of the table, where Postgres puts the index too ('public' when unqualified). */
  schema: string;
  index: string;
  table: string;
}

/** Any statement that builds an index concurrently, however it is written: it must then parse (below). */
const BUILDS_CONCURRENTLY = /\bcreate\s+(?:unique\s+)?index\s+concurrently\b/i;

/** An identifier as Postgres stores it: quoted keeps its case, unquoted folds to lower case. */
const identifier = (raw: string) => (raw.startsWith('"') ? raw.slice(1, -1) : raw.toLowerCase());

/**
 * The index a `create index concurrently` statement builds, named as the catalog names it;
 * null for any other statement. Throws for a concurrent build the runner could not repair
 * (no `if not exists`, or a name or table it cannot read): such a build would run, and an
 * interrupted run would leave its INVALID index in place for good, since the rerun's
 * `if not exists` skips it.
 */
export function concurrentIndexOf(statement: string): ConcurrentIndex | null {
  if (!BUILDS_CONCURRENTLY.test(statement)) return null;
  const m = CONCURRENT_INDEX.exec(statement);
  if (!m)
    throw new Error(
      `cannot repair this concurrent index build if interrupted (name or table not understood): ${statement.slice(0, 120)}`,
    );
  if (!m[1]) throw new Error(`concurrent index build must use "if not exists": ${statement.slice(0, 80)}`);
  const parts = m[3]!.split('.');
  return {
    schema: parts.length === 2 ? identifier(parts[0]!) : 'public',
    index: identifier(m[2]!),
    table: identifier(parts[parts.length - 1]!),
  };
}

/**
 * Before a concurrent build: an INVALID index of its name is what an interrupted build left
 * (cancelled, timed out, connection lost): dropped, so the statement builds it anew. A valid
 * one is left as it is (same OID) and the statement's `if not exists` skips it.
 */
async function repairInterruptedIndex(client: pg.Client, ix: ConcurrentIndex, log: (l: string) => void) {
  const { schema, index } = ix;
  const { rows } = await client.query<{ valid: boolean }>(
    `select i.indisvalid as valid from pg_index i join pg_class c on c.oid = i.indexrelid
       join pg_namespace n on n.oid = c.relnamespace where n.nspname = $1 and c.relname = $2`,
    [schema, index],
  );
  if (rows[0] && !rows[0].valid) {
    log(`dropping invalid index ${schema}.${index} left by an interrupted build`);
    await client.query(`drop index concurrently if exists "${schema}"."${index}"`);
  }
}

async function applyFile(client: pg.Client, file: MigrationFile, log: (l: string) => void) {
  const record = `insert into schema_migrations (version, name, checksum) values ($1, $2, $3)`;
  const args = [file.version, file.name, file.checksum];
  if (!file.noTransaction) {
    await client.query('begin');
    try {
      await client.query(file.sql);
      await client.query(record, args);
      await client.query('commit');
    } catch (err) {
      await client.query('rollback');
      throw err;
    }
    return;
  }
  // Every statement is read before the first one runs: a build the runner could not repair
  // is refused with nothing of its file applied.
  const plan = splitStatements(file.sql).map((statement) => ({
    statement,
    index: concurrentIndexOf(statement),
  }));
  for (const { statement, index } of plan) {
    if (index) await repairInterruptedIndex(client, index, log);
    await client.query(statement);
  }
  await client.query(record, args);
}

/** Applies each function file whose text changed since it was recorded, in one transaction each. */
async function applyFunctionFiles(
  client: pg.Client,
  dir: string,
  log: (l: string) => void,
): Promise<string[]> {
  await client.query(`create table if not exists schema_functions (
    name text primary key, checksum text not null, applied_at timestamptz not null default now())`);
  const { rows } = await client.query<{ name: string; checksum: string }>(
    'select name, checksum from schema_functions',
  );
  const recorded = new Map(rows.map((r) => [r.name, r.checksum]));
  const applied: string[] = [];
  for (const file of await readFunctionFiles(dir)) {
    if (recorded.get(file.name) === file.checksum) continue;
    log(`applying functions/${file.name}`);
    await client.query('begin');
    try {
      await client.query(file.sql);
      await client.query(
        `insert into schema_functions (name, checksum) values ($1, $2)
         on conflict (name) do update set checksum = excluded.checksum, applied_at = now()`,
        [file.name, file.checksum],
      );
      await client.query('commit');
    } catch (err) {
      await client.query('rollback');
      throw err;
    }
    applied.push(`functions/${file.name}`);
  }
  return applied;
}

/**
 * A database that recorded a migration this directory no longer has was migrated by another
 * history: before the baseline of the first release (issue 32 item 4, scripts/migration-baseline.json,
 * which squashed 0001–0201), or from another branch. Applying the files over it would mix two
 * schemas, so it is refused, naming what to do.
 */
function refuseForeignHistory(recorded: { version: number; name: string }[], files: MigrationFile[]) {
  const names = new Set(files.map((f) => f.name));
  const foreign = recorded.filter((r) => !names.has(r.name)).map((r) => r.name);
  if (foreign.length === 0) return;
  throw new Error(
    `this database recorded migrations that migrations/ does not have (${foreign.slice(0, 3).join(', ')}` +
      `${foreign.length > 3 ? `, and ${foreign.length - 3} more` : ''}): it was migrated before the ` +
      `migration baseline or by another branch. Recreate it (npm run dev's: delete .local/pg) ` +
      `rather than migrating it (docs/operations.md "Migrations")`,
  );
}

/**
 * Polls pg_try_advisory_lock instead of waiting in pg_advisory_lock: a session blocked in
 * that call keeps a transaction open, and the runner holding the lock would then wait for it
 * in `create index concurrently` (which waits out every older transaction): a deadlock.
 */
async function acquireMigrationLock(client: pg.Client, timeoutMs: number): Promise<void> {
  const started = Date.now();
  for (;;) {
    const { rows } = await client.query<{ ok: boolean }>('select pg_try_advisory_lock($1) as ok', [
      MIGRATION_LOCK_KEY,
    ]);
    if (rows[0]?.ok) return;
    if (Date.now() - started > timeoutMs) throw new Error('another migration run holds the migration lock');
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function migrate(databaseUrl: string, opts: MigrateOptions): Promise<string[]> {
  const log = opts.log ?? (() => undefined);
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const applied: string[] = [];
  try {
    await client.query(`set statement_timeout = ${Math.floor(opts.statementTimeoutMs ?? 0)}`);
    await client.query(`set lock_timeout = ${Math.floor(opts.lockTimeoutMs ?? 60_000)}`);
    await acquireMigrationLock(client, opts.lockTimeoutMs ?? 60_000);
    await client.query(`create table if not exists schema_migrations (
      version integer primary key, name text not null, checksum text not null,
      applied_at timestamptz not null default now())`);
    const { rows } = await client.query<{ version: number; name: string; checksum: string }>(
      'select version, name, checksum from schema_migrations order by version',
    );
    const done = new Map(rows.map((r) => [r.version, r]));
    const files = await readMigrations(opts.dir);
    refuseForeignHistory(rows, files);
    for (const file of files) {
      const prior = done.get(file.version);
      if (prior) {
        if (prior.checksum !== file.checksum) {
          throw new Error(
            `migration ${file.name} was edited after it was applied; add a new migration instead`,
          );
        }
        continue;
      }
      log(`applying ${file.name}`);
      await applyFile(client, file, log);
      applied.push(file.name);
    }
    applied.push(...(await applyFunctionFiles(client, opts.dir, log)));
    return applied;
  } finally {
    await client.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]).catch(() => undefined);
    await client.end();
  }
}
