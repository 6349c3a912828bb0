import { execFile } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../..', import.meta.url));

/** `scripts/lint-migrations.ts` as CI runs it: its exit code and what it printed. */
async function lint(dir?: string): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(
      join(root, 'node_modules/.bin/tsx'),
      ['scripts/lint-migrations.ts', ...(dir ? [dir] : [])],
      { cwd: root },
    );
    return { code: 0, out: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, out: `${e.stdout}${e.stderr}` };
  }
}

async function fixture(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'rl-lint-migrations-'));
  for (const [name, sql] of Object.entries(files)) await writeFile(join(dir, name), sql);
  return dir;
}

/** A table an earlier migration made: by the time the next file runs it may hold millions of rows. */
const BIG_TABLE = `set local lock_timeout = '5s';
set local statement_timeout = '5s';
create table if not exists events (id bigint generated always as identity primary key, v text not null);
`;

describe('the migration linter (squawk over migrations/)', () => {
  it("passes the project's migrations (their exemptions carry reasons)", async () => {
    const { code, out } = await lint();
    expect(out).toMatch(/checked \d+ migration/);
    expect(code, out).toBe(0);
  });

  it('rejects an index built without CONCURRENTLY on an existing table: it blocks writes for the whole build', async () => {
    const dir = await fixture({
      '0001_events.sql': BIG_TABLE,
      '0002_events_v.sql': `set local lock_timeout = '5s';
set local statement_timeout = '5s';
create index if not exists events_v on events (v);
`,
    });
    const { code, out } = await lint(dir);
    expect(code).not.toBe(0);
    expect(out).toContain('0002_events_v.sql');
    expect(out).toContain('require-concurrent-index-creation');
    expect(out).not.toContain('0001_events.sql');
  });

  it('accepts the same index built concurrently in a no-transaction file', async () => {
    const dir = await fixture({
      '0001_events.sql': BIG_TABLE,
      '0002_events_v.sql': `-- migrate:no-transaction
set lock_timeout = '5s';
-- A concurrent build is not cut short: the runner repairs an interrupted one.
set statement_timeout = 0;
create index concurrently if not exists events_v on events (v);
`,
    });
    const { code, out } = await lint(dir);
    expect(out).toMatch(/checked 2 migration/);
    expect(code, out).toBe(0);
  });

  it('rejects a per-file exemption without a reason', async () => {
    const dir = await fixture({
      '0001_events.sql': `-- squawk-ignore-file prefer-bigint-over-int\n${BIG_TABLE}`,
    });
    const { code, out } = await lint(dir);
    expect(code).not.toBe(0);
    expect(out).toContain('0001_events.sql:1');
    expect(out).toMatch(/exemption without a reason/);
  });
});
