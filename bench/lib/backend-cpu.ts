import { readdir, readFile } from 'node:fs/promises';

/** Clock ticks per second of /proc/<pid>/stat's CPU times (Linux's USER_HZ). */
export const CLK_TCK = 100;

/**
 * CPU time (user + system, in clock ticks) the current database's other backends have used so
 * far, read from /proc: the probes run on the database's host. Sample before and after a phase.
 * `onPids` sees the backends read (for `perf record -p`).
 */
export async function backendCpuTicks(
  admin: { query<R>(sql: string): Promise<{ rows: R[] }> },
  onPids?: (pids: number[]) => void,
): Promise<number> {
  const { rows } = await admin.query<{ pid: number }>(
    'select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()',
  );
  onPids?.(rows.map((r) => r.pid));
  let ticks = 0;
  for (const { pid } of rows) {
    // A backend that ended between the two reads counts nothing (by design: its time is lost).
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    ticks += Number(f[11] ?? 0) + Number(f[12] ?? 0);
  }
  return ticks;
}

/**
 * CPU time (clock ticks) of the whole PostgreSQL server so far: the postmaster, every live
 * child (backends of every database, checkpointer, WAL writer, autovacuum) and every child it
 * has already reaped (its cutime/cstime), so backends that connected and ended between two
 * samples count too, which `backendCpuTicks` cannot see. Every database on the server counts:
 * meaningful on the bench's own embedded server (bench/lib/stack.ts), not on a shared one.
 */
export async function serverCpuTicks(admin: {
  query<R>(sql: string): Promise<{ rows: R[] }>;
}): Promise<number> {
  const { rows } = await admin.query<{ pid: number }>('select pg_backend_pid() as pid');
  const fields = async (pid: number | string) => {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    return stat ? stat.slice(stat.lastIndexOf(')') + 2).split(' ') : [];
  };
  const postmaster = Number((await fields(rows[0]!.pid))[1]);
  const pm = await fields(postmaster);
  // utime, stime, cutime, cstime of the postmaster (fields 14-17 of stat).
  let ticks = [11, 12, 13, 14].reduce((a, i) => a + Number(pm[i] ?? 0), 0);
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const f = await fields(name);
    if (Number(f[1]) === postmaster) ticks += Number(f[11] ?? 0) + Number(f[12] ?? 0);
  }
  return ticks;
}
