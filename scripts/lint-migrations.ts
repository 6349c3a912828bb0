/**
 * `npm run lint:migrations [dir]`: squawk (the `squawk-cli` package, its binary shipped inside
 * the npm package: no download) over migrations/, as the runner (scripts/lib/migrator.ts) will
 * run each file:
 *  - a transactional file (the default) is linted with `--assume-in-transaction`: the runner
 *    wraps it in one transaction, so a failure part way through leaves nothing behind;
 *  - a `-- migrate:no-transaction` file is linted as it runs, statement by statement.
 * Every rule is on. A rule that does not fit one file is exempted in that file, on its own line,
 * with its reason after a second `--`:
 *     -- squawk-ignore-file prefer-bigint-over-int -- counters and Lark codes, not ids
 * (or `-- squawk-ignore <rule> -- <reason>` just before one statement). An exemption without a
 * reason fails the lint. Such lines are left out of the runner's checksum, so they can be added
 * to a migration that production has already applied.
 * Exit status 1 when squawk reports anything, or an exemption has no reason.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { isAbsolute, join, relative } from 'node:path';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { readFunctionFiles, readMigrations } from './lib/migrator';

const root = fileURLToPath(new URL('..', import.meta.url));
/** The server version the rules assume (production and the embedded test server: 18). */
const PG_VERSION = '18';
const SQUAWK = join(root, 'node_modules/.bin/squawk');
const DIRECTIVE = /^--[ \t]*squawk-ignore(?:-file)?\b(.*)$/;
const HAS_REASON = /\s--\s*\S/;

const arg = process.argv[2];
const dir = arg ? (isAbsolute(arg) ? arg : join(process.cwd(), arg)) : join(root, 'migrations');
const shown = (file: string) => relative(process.cwd(), join(dir, file)) || file;

if (!existsSync(SQUAWK)) {
  console.error('lint:migrations: node_modules/.bin/squawk is missing: run `npm ci` (squawk-cli)');
  process.exit(1);
}

// The repeatable function files too: each runs in one transaction (scripts/lib/migrator.ts).
const files = [
  ...(await readMigrations(dir)),
  ...(await readFunctionFiles(dir)).map((f) => ({ ...f, name: `functions/${f.name}`, noTransaction: false })),
];
let ok = true;

for (const file of files) {
  file.sql.split('\n').forEach((line, i) => {
    const m = DIRECTIVE.exec(line);
    if (m && !HAS_REASON.test(m[1]!)) {
      console.error(
        `${shown(file.name)}:${i + 1}: exemption without a reason: write it after a second \`--\` on the same line`,
      );
      ok = false;
    }
  });
}

for (const inTransaction of [true, false]) {
  const group = files.filter((f) => f.noTransaction !== inTransaction).map((f) => shown(f.name));
  if (group.length === 0) continue;
  const run = spawnSync(
    SQUAWK,
    [
      '--pg-version',
      PG_VERSION,
      '--reporter',
      'gcc',
      ...(inTransaction ? ['--assume-in-transaction'] : []),
      ...group,
    ],
    { cwd: process.cwd(), encoding: 'utf8', timeout: 60_000 },
  );
  if (run.error) {
    console.error(`lint:migrations: squawk did not run: ${run.error.message}`);
    ok = false;
    continue;
  }
  if (run.stdout) process.stdout.write(run.stdout);
  if (run.stderr) process.stderr.write(run.stderr);
  if (run.status !== 0) ok = false;
}

if (!ok)
  console.error(
    'lint:migrations: fix the migration (rules: https://squawkhq.com/docs/rules), or exempt the rule in that file with its reason (docs/operations.md "Migration linter")',
  );
console.log(`lint:migrations: checked ${files.length} migration(s) in ${relative(root, dir) || dir}`);
process.exitCode = ok ? 0 : 1;
