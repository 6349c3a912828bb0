/** Latency statistics and the one table format every benchmark prints. */
export interface BenchRow {
  suite: string;
  case: string;
  /** Free-form figures: "p50 ms", "p99 ms", "ops/s", "ratio"... */
  [metric: string]: string | number;
}

export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx]!;
}

export function round(n: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

/** Times `fn` `n` times sequentially and returns p50/p99 in milliseconds. */
export async function timeSequential(n: number, fn: (i: number) => Promise<unknown>) {
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn(i);
    samples.push(performance.now() - t);
  }
  return { p50: round(percentile(samples, 50), 3), p99: round(percentile(samples, 99), 3), samples };
}

export function printTable(rows: BenchRow[]): string {
  const cols = [
    'suite',
    'case',
    ...new Set(rows.flatMap((r) => Object.keys(r).filter((k) => k !== 'suite' && k !== 'case'))),
  ];
  const cell = (v: unknown) => (v === undefined ? '' : String(v));
  const widths = cols.map((c) => Math.max(c.length, ...rows.map((r) => cell(r[c]).length)));
  const line = (vals: string[]) => `| ${vals.map((v, i) => v.padEnd(widths[i]!)).join(' | ')} |`;
  const out = [
    line(cols),
    `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`,
    ...rows.map((r) => line(cols.map((c) => cell(r[c])))),
  ];
  return out.join('\n');
}
