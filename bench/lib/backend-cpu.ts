import { readFile } from 'node:fs/promises';

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
