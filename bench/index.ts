// npm run bench [-- <suite filter>]: runs every bench/suites/*.ts against a fresh database and
// prints one table. Suites export `run(stack): Promise<BenchRow[]>`.
import { readdir } from 'node:fs/promises';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { startBenchStack } from './lib/stack';
import { type BenchRow, printTable } from './lib/stats';

const filter = process.argv[2];
const dir = fileURLToPath(new URL('./suites', import.meta.url));
const files = (await readdir(dir)).filter((f) => f.endsWith('.ts') && (!filter || f.includes(filter))).sort();
const stack = await startBenchStack();
const rows: BenchRow[] = [];
try {
  for (const file of files) {
    const started = performance.now();
    const mod = (await import(`./suites/${file}`)) as { run(s: typeof stack): Promise<BenchRow[]> };
    try {
      rows.push(...(await mod.run(stack)));
    } catch (err) {
      rows.push({ suite: file, case: 'FAILED', error: (err as Error).message });
    }
    console.error(`${file} done in ${Math.round(performance.now() - started)} ms`);
  }
} finally {
  await stack.stop();
}
console.log(printTable(rows));
process.exit(0);
