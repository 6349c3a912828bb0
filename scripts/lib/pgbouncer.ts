import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createConnection } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { freePort } from './ports';

/**
 * PgBouncer (the Debian package, /usr/sbin/pgbouncer) in transaction mode in front of a
 * Postgres server: the local stand-in for Neon's pooled endpoint. `.ci/run` installs it with
 * apt-get; `npm run bench` and `PGBOUNCER=1` test runs start one here.
 *
 * - `pool_mode = transaction`: a server connection belongs to a client for one transaction.
 * - `ignore_startup_parameters` left empty, so a startup parameter PgBouncer does not track
 *   (statement_timeout, lock_timeout, options, ...) is refused exactly as Neon's pooler does.
 * - One `* =` entry routes every database name to the server, so the per-file test databases
 *   (copied from the template while the run goes) need no reconfiguration.
 * - `auth_type = any`: loopback only; PgBouncer logs in to Postgres with the URL's user and
 *   password.
 */
export const PGBOUNCER_BIN = '/usr/sbin/pgbouncer';

export interface PgBouncer {
  port: number;
  /** Its process id (benches read its CPU time from /proc). */
  pid: number | undefined;
  /** `url` with its host and port replaced by PgBouncer's. */
  rewrite(url: string): string;
  /** PgBouncer's own log so far (refusals show up here). */
  log(): Promise<string>;
  stop(): Promise<void>;
}

export interface PgBouncerOptions {
  /** Server connections per database/user pair (default 5: far fewer than the concurrency). */
  poolSize?: number;
  /** Client connections PgBouncer accepts in total (default 2000). */
  maxClientConn?: number;
}

export function pgbouncerInstalled(): boolean {
  return existsSync(PGBOUNCER_BIN);
}

/** Starts PgBouncer in front of the server `serverUrl` names (any database on it). */
export async function startPgBouncer(serverUrl: string, opts: PgBouncerOptions = {}): Promise<PgBouncer> {
  if (!pgbouncerInstalled())
    throw new Error(`${PGBOUNCER_BIN} not found: apt-get install -y pgbouncer (.ci/run does this)`);
  const server = new URL(serverUrl);
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'reaction-ledger-pgbouncer-'));
  const logFile = join(dir, 'pgbouncer.log');
  const target = [
    `host=${server.hostname}`,
    `port=${server.port || 5432}`,
    `user=${decodeURIComponent(server.username)}`,
    server.password ? `password=${decodeURIComponent(server.password)}` : '',
  ].join(' ');
  const ini = `[databases]
* = ${target}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = ${opts.poolSize ?? 5}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = ${opts.maxClientConn ?? 2000}
max_db_connections = 0
ignore_startup_parameters =
server_login_retry = 1
query_wait_timeout = 60
logfile = ${logFile}
pidfile = ${join(dir, 'pgbouncer.pid')}
log_connections = 0
log_disconnections = 0
`;
  const iniFile = join(dir, 'pgbouncer.ini');
  await writeFile(iniFile, ini);
  // PgBouncer refuses to run as root: as root it runs as the `postgres` OS user, which must
  // read the config and write its log and pid file.
  const isRoot = userInfo().uid === 0;
  const ids = isRoot ? postgresUserIds() : undefined;
  if (ids) {
    await chmod(dir, 0o777);
    await chmod(iniFile, 0o644);
  }
  const child = spawn(PGBOUNCER_BIN, [iniFile], {
    stdio: ['ignore', 'ignore', 'pipe'],
    ...(ids ? { uid: ids.uid, gid: ids.gid } : {}),
  });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const readLog = () => readFile(logFile, 'utf8').catch(() => '');
  try {
    await waitForPort(port, child, 10_000);
  } catch (err) {
    child.kill('SIGTERM');
    const detail = `${stderr}${await readLog()}`.trim();
    await rm(dir, { recursive: true, force: true });
    throw new Error(`pgbouncer did not start: ${(err as Error).message}${detail ? `\n${detail}` : ''}`);
  }
  return {
    port,
    pid: child.pid,
    rewrite(url) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    log: readLog,
    async stop() {
      await stopChild(child);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

function postgresUserIds(): { uid: number; gid: number } {
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

async function waitForPort(port: number, child: ChildProcess, timeoutMs: number): Promise<void> {
  const started = Date.now();
  for (;;) {
    if (child.exitCode !== null) throw new Error(`exited with code ${child.exitCode}`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = createConnection(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    if (Date.now() - started > timeoutMs) throw new Error(`port ${port} not open after ${timeoutMs} ms`);
    // Polling a process we just started; it has no readiness signal of its own.
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // SIGINT: PgBouncer's "safe shutdown" waits for clients; SIGTERM closes at once.
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}
