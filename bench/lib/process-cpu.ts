import { readdir, readFile } from 'node:fs/promises';
import { CLK_TCK } from './backend-cpu';

/**
 * CPU time (user + system, in clock ticks) used so far by every live process of one process
 * group, by command name (`workerd`, `node` for wrangler's own proxy): the local Worker's cost,
 * read from /proc. Sample before and after a phase; a process that ended between the two reads
 * counts nothing (its time is lost, by design).
 */
export async function groupCpuTicks(pgid: number): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => '');
    const close = stat.lastIndexOf(')');
    if (close < 0) continue;
    const f = stat.slice(close + 2).split(' ');
    if (Number(f[2]) !== pgid) continue;
    const comm = stat.slice(stat.indexOf('(') + 1, close);
    out.set(comm, (out.get(comm) ?? 0) + Number(f[11] ?? 0) + Number(f[12] ?? 0));
  }
  return out;
}

/** CPU time (user + system, clock ticks) one process has used so far; 0 once it is gone. */
export async function processCpuTicks(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return stat ? Number(f[11] ?? 0) + Number(f[12] ?? 0) : 0;
}

/** Milliseconds of CPU per item between two samples, one figure per command name. */
export function cpuMsPer(before: Map<string, number>, after: Map<string, number>, items: number) {
  const per: Record<string, number> = {};
  for (const [comm, ticks] of after) {
    const ms = ((ticks - (before.get(comm) ?? 0)) * 1000) / CLK_TCK / Math.max(1, items);
    if (ms > 0) per[comm] = Math.round(ms * 100) / 100;
  }
  return per;
}
