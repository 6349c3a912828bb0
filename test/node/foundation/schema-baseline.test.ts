import { spawnSync } from 'node:child_process';
import { cp, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { functionsDir, migrate } from '../../../scripts/lib/migrator';
import { adminQuery, withDatabase } from '../../../scripts/lib/postgres';
import { MIGRATIONS_DIR } from '../../setup/stack';
import { diffSnapshots, schemaSnapshot } from './schema-snapshot';

/**
 * The migration baseline (issue 32 item 4): 0001–0201, written as fix-up after fix-up of an
 * unreleased series, were squashed into one baseline per feature. The squash must change
 * nothing: the history as it was (git, at the commit recorded in scripts/migration-baseline.json),
 * followed by every versioned file added since and today's repeatable functions, must build
 * exactly the schema today's migrations/ builds (schema-snapshot.ts: columns in order,
 * constraints, indexes and their validity, storage options, functions, triggers, grants,
 * comments and seeded rows).
 */
const root = fileURLToPath(new URL('../../../', import.meta.url));
const baseline = JSON.parse(await readFile(join(root, 'scripts/migration-baseline.json'), 'utf8')) as {
  historyCommit: string;
  lastSquashedVersion: number;
};
const adminUrl = inject('adminUrl');
const created: string[] = [];
const temps: string[] = [];

async function scratchDatabase(tag: string): Promise<string> {
  const name = `rl_base_${tag}_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
  await adminQuery(adminUrl, `create database ${name}`);
  created.push(name);
  return withDatabase(adminUrl, name);
}

/** migrations/ as it was at the recorded commit, plus today's later files and functions. */
async function historyDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'rl-history-'));
  temps.push(dir);
  const archive = spawnSync(
    'git',
    ['-C', root, 'archive', '--format=tar', baseline.historyCommit, 'migrations'],
    {
      maxBuffer: 64 * 1024 * 1024,
    },
  );
  if (archive.status !== 0)
    throw new Error(
      `git archive ${baseline.historyCommit} failed (a clone without that commit?): ${archive.stderr.toString()}`,
    );
  const untar = spawnSync('tar', ['-x', '-C', dir], { input: archive.stdout });
  if (untar.status !== 0) throw new Error(`tar failed: ${untar.stderr.toString()}`);
  const history = join(dir, 'migrations');
  for (const name of await readdir(MIGRATIONS_DIR))
    if (/^\d{4}_[\w-]+\.sql$/.test(name) && Number(name.slice(0, 4)) > baseline.lastSquashedVersion)
      await cp(join(MIGRATIONS_DIR, name), join(history, name));
  await rm(functionsDir(history), { recursive: true, force: true });
  await cp(functionsDir(MIGRATIONS_DIR), functionsDir(history), { recursive: true });
  return history;
}

afterAll(async () => {
  for (const name of created) await adminQuery(adminUrl, `drop database if exists ${name} with (force)`);
  for (const dir of temps) await rm(dir, { recursive: true, force: true });
});

describe('the migration baseline builds the schema the history built', () => {
  it('today’s migrations/ and the squashed history give identical schemas', async () => {
    const [before, after] = await Promise.all([scratchDatabase('history'), scratchDatabase('baseline')]);
    const dir = await historyDir();
    await migrate(before, { dir });
    await migrate(after, { dir: MIGRATIONS_DIR });
    const diff = diffSnapshots(await schemaSnapshot(before), await schemaSnapshot(after));
    expect(diff, diff.join('\n')).toEqual([]);
  });

  it('the comparison sees a difference (a column, a default, an index option)', async () => {
    const url = await scratchDatabase('changed');
    await migrate(url, { dir: MIGRATIONS_DIR });
    const expected = await schemaSnapshot(url);
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    await c.query(`alter table private.retention_control alter column enabled set default true`);
    await c.query('alter index private.reaction_tickets_pkey set (fillfactor = 70)');
    await c.end();
    const diff = diffSnapshots(expected, await schemaSnapshot(url));
    expect(diff.map((l) => l.split('\n')[0])).toEqual([
      '~ columns private.retention_control',
      '~ index reaction_tickets_pkey',
    ]);
  });
});
