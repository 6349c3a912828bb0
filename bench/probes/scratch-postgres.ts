// npx tsx bench/probes/scratch-postgres.ts <bin dir> <port> <defaults|embedded>
//
// A throwaway PostgreSQL cluster for the effects probe, so that two server versions are compared
// under the same settings (issue 35): the embedded PG 18 runs with the dev stack's settings
// (fsync, synchronous_commit and full_page_writes off: scripts/lib/postgres.ts), the machine's
// PG 15 with the CI's (fsync on, autovacuum off: /etc/postgresql/15/main/conf.d/90-ci.conf), so
// a ratio measured on each mixes the version with the settings. `defaults` keeps initdb's
// settings (durable WAL, autovacuum on: what a managed server runs); `embedded` applies the
// embedded server's. Runs in the foreground until SIGINT/SIGTERM, then stops the cluster and
// removes its directory. Trust auth on loopback only.
import { execFileSync, spawn } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { userInfo } from 'node:os';
import { LOCAL_SERVER_SETTINGS, NO_DURABILITY_SETTINGS, postgresIds } from '../../scripts/lib/postgres';

const [binDir, port, mode] = process.argv.slice(2);
if (!binDir || !port || (mode !== 'defaults' && mode !== 'embedded')) {
  console.error('usage: scratch-postgres.ts <bin dir> <port> <defaults|embedded>');
  process.exit(2);
}
const dir = mkdtempSync('/tmp/scratch-pg-');
// As root, Postgres (which refuses to run as root) runs as the `postgres` OS user, spawned with
// its uid directly: a `runuser` in between did not pass SIGINT on, so the cluster outlived us.
const owner: { uid?: number; gid?: number } =
  userInfo().uid === 0 ? await postgresIds().then(([uid, gid]) => ({ uid, gid })) : {};
if (owner.uid !== undefined && owner.gid !== undefined) chownSync(dir, owner.uid, owner.gid);
execFileSync(
  `${binDir}/initdb`,
  ['-D', dir, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--no-sync'],
  {
    stdio: 'ignore',
    ...owner,
  },
);
const settings = [
  `port=${port}`,
  ...LOCAL_SERVER_SETTINGS,
  ...(mode === 'embedded' ? NO_DURABILITY_SETTINGS : []),
  // SCRATCH_PG_SETTINGS="a=1 b=2": more settings, e.g. shared_preload_libraries=pg_stat_statements.
  ...(process.env.SCRATCH_PG_SETTINGS?.split(' ').filter(Boolean) ?? []),
].flatMap((s) => ['-c', s]);
const server = spawn(`${binDir}/postgres`, ['-D', dir, ...settings], {
  stdio: ['ignore', 'ignore', 'inherit'],
  ...owner,
});
console.log(`postgres://postgres@127.0.0.1:${port}/postgres (${mode}, ${dir})`);
const stop = () => server.kill('SIGINT');
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
server.on('exit', (code) => {
  rmSync(dir, { recursive: true, force: true });
  process.exit(code ?? 0);
});
