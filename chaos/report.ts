import { loadavg } from 'node:os';
import { INVARIANTS } from './invariants';
import type { ScheduleResult } from './run';

/** Totals of a chaos run: the README's table. */
export class RunStats {
  schedules = 0;
  steps = 0;
  answers = 0;
  harnessErrors = 0;
  checks = 0;
  readonly replies = { delivered: 0, asCard: 0, cardsCreated: 0, cardsSent: 0 };
  readonly faults = new Map<string, number>();
  readonly violations = new Map<string, number>();
  readonly exempt = new Map<string, number>();
  readonly durations: number[] = [];
  readonly loads: number[] = [];

  add(r: ScheduleResult): void {
    this.schedules++;
    this.steps += r.steps;
    this.answers += r.answers;
    for (const k of Object.keys(this.replies) as (keyof typeof this.replies)[])
      this.replies[k] += r.replies[k];
    this.durations.push(r.durationMs);
    this.loads.push(loadavg()[0]!);
    if (r.harnessError) this.harnessErrors++;
    for (const [k, n] of r.faultCounts) this.faults.set(k, (this.faults.get(k) ?? 0) + n);
    for (const c of r.checks) {
      this.checks++;
      if (c.violations.length) this.violations.set(c.name, (this.violations.get(c.name) ?? 0) + 1);
      if (c.exempt) this.exempt.set(c.name, (this.exempt.get(c.name) ?? 0) + c.exempt);
    }
  }
}

export function formatReport(s: RunStats, totalMs: number): string {
  const sorted = [...s.durations].sort((a, b) => a - b);
  const p = (q: number) =>
    sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! : 0;
  const avgLoad = s.loads.length ? s.loads.reduce((a, b) => a + b, 0) / s.loads.length : loadavg()[0]!;
  const lines = [
    '',
    '| chaos run | |',
    '|---|---|',
    `| schedules | ${s.schedules} (${s.steps} steps, ${s.answers} service answers) |`,
    `| harness errors | ${s.harnessErrors} |`,
    `| replies | ${s.replies.delivered} turns delivered, ${s.replies.asCard} of them as a streamed card; ${s.replies.cardsCreated} cards created, ${s.replies.cardsSent} sent |`,
    `| invariant checks | ${s.checks} (${Object.keys(INVARIANTS).length} invariants per schedule) |`,
    `| violations | ${s.violations.size === 0 ? '0' : [...s.violations].map(([k, n]) => `${k}: ${n}`).join(', ')} |`,
    `| exempt (by design) | ${s.exempt.size === 0 ? '0' : [...s.exempt].map(([k, n]) => `${k}: ${n}`).join(', ')} |`,
    `| time | ${(totalMs / 1000).toFixed(0)} s total; per schedule p50 ${(p(0.5) / 1000).toFixed(1)} s, p90 ${(p(0.9) / 1000).toFixed(1)} s |`,
    `| load (1-min average during the run) | ${avgLoad.toFixed(2)} |`,
    '',
    '| fault kind | injected |',
    '|---|---|',
    ...[...s.faults].sort((a, b) => b[1] - a[1]).map(([k, n]) => `| ${k} | ${n} |`),
  ];
  return lines.join('\n');
}
