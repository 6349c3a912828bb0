// npm run fuzz [-- --runs N]: the fuzz suite (test/fuzz) with N cases per route group
// (default 10,000; `npm test` runs harness.ts's DEFAULT_RUNS), then one table: the one README
// keeps. The seed is printed; TEST_SEED=<seed> npm run fuzz -- --runs N replays the run.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import type { GroupStats } from '../test/fuzz/harness';

const root = fileURLToPath(new URL('../', import.meta.url));
const at = process.argv.indexOf('--runs');
const runs = at >= 0 ? Number(process.argv[at + 1]) : 10_000;
if (!Number.isSafeInteger(runs) || runs < 1) throw new Error(`--runs must be a positive whole number`);
// Written by the json reporter vitest.config.ts configures.
const report = `${root}test-results/vitest.json`;
mkdirSync(`${root}test-results`, { recursive: true });
rmSync(report, { force: true });

const started = Date.now();
const loadBefore = loadavg();
const vitest = spawnSync(
  `${root}node_modules/.bin/vitest`,
  [
    'run',
    '--project',
    'workers',
    'test/fuzz',
    '--reporter=default',
    '--reporter=json',
    `--outputFile.json=${report}`,
  ],
  { cwd: root, stdio: 'inherit', env: { ...process.env, FUZZ_RUNS: String(runs) } },
);

interface JsonReport {
  testResults: { assertionResults: { meta?: { fuzz?: GroupStats } }[] }[];
}
const groups = (JSON.parse(readFileSync(report, 'utf8')) as JsonReport).testResults
  .flatMap((f) => f.assertionResults)
  .map((a) => a.meta?.fuzz)
  .filter((g): g is GroupStats => g !== undefined)
  .sort((a, b) => a.group.localeCompare(b.group));

const rows = groups.map((g) => [
  g.group,
  g.cases,
  g.s2xx,
  g.s4xx,
  g.s5xx,
  g.writesFromRejected,
  g.secretsLeaked,
  Object.keys(g.routes).length,
  Math.round(g.timing.totalMs / 1000),
  `${g.timing.p50} / ${g.timing.p95} / ${g.timing.max}`,
]);
const total = [
  'total',
  ...[1, 2, 3, 4, 5, 6, 7, 8].map((col) => rows.reduce((sum, r) => sum + Number(r[col]), 0)),
  '',
];
const header = [
  'route group',
  'cases',
  '2xx',
  '4xx',
  '5xx',
  'writes from rejected',
  'secrets leaked',
  'routes',
  'time (s)',
  'ms a case p50 / p95 / max',
];
const line = (cells: unknown[]) => `| ${cells.join(' | ')} |`;
console.log(
  [
    '',
    `fuzz: ${runs} cases per group, ${Math.round((Date.now() - started) / 1000)} s in all, ` +
      `${new Date().toISOString().slice(0, 16)}Z, ${cpus().length} cores, load average ` +
      `${loadBefore.map((l) => l.toFixed(2)).join(' ')} at the start, ` +
      `${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')} at the end`,
    '',
    line(header),
    line(header.map((_, i) => (i === 0 ? '---' : '---:'))),
    ...rows.map(line),
    line(total),
  ].join('\n'),
);
process.exit(vitest.status ?? 1);
