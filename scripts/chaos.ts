// npm run chaos -- --schedules N [--seed S] [--parts M] [--path P | --replay FILE] [--shrink-seconds T]
//   Seeded chaos schedules against the real service (docs/testing.md "Chaos").
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { parseArgs } from 'node:util';
import fc from 'fast-check';
import { formatReport, RunStats } from '../chaos/report';
import { runSchedule, type ScheduleResult } from '../chaos/run';
import { describeStep, type Schedule, scheduleArb } from '../chaos/schedule';
import { startChaosStack } from '../chaos/stack';

const { values } = parseArgs({
  options: {
    schedules: { type: 'string', default: '20' },
    seed: { type: 'string' },
    parts: { type: 'string', default: '8' },
    path: { type: 'string' },
    replay: { type: 'string' },
    'shrink-seconds': { type: 'string', default: '300' },
    quiet: { type: 'boolean', default: false },
    verbose: { type: 'boolean', default: false },
    // Start no schedule after this many minutes (0: no limit); the running one finishes, and
    // the report says how many ran.
    minutes: { type: 'string', default: '0' },
  },
});
const numRuns = Number(values.schedules);
const seed = values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(values.seed);
const maxParts = Number(values.parts);
const shrinkMs = Number(values['shrink-seconds']) * 1000;
const minutes = Number(values.minutes);
for (const [name, v] of [
  ['--schedules', numRuns],
  ['--seed', seed],
  ['--parts', maxParts],
  ['--shrink-seconds', shrinkMs],
] as const)
  if (!Number.isSafeInteger(v) || v < 0) {
    console.error(`[chaos] ${name} must be a whole number`);
    process.exit(2);
  }

const OUT_DIR = fileURLToPath(new URL('../.local/chaos/', import.meta.url));
const say = (line: string) => console.log(`[chaos] ${line}`);

const started = Date.now();
const stack = await startChaosStack();
const stats = new RunStats();
let index = 0;
let exit = 0;
try {
  if (values.replay) {
    const schedule = JSON.parse(readFileSync(values.replay, 'utf8')) as Schedule;
    say(`replaying ${values.replay} (${schedule.steps.length} steps)`);
    const result = await runSchedule(stack, schedule, index++);
    stats.add(result);
    if (values.verbose) console.log(result.trace);
    if (result.violated.length > 0 || result.harnessError) {
      printFailure(result, schedule);
      exit = 1;
    }
  } else {
    say(
      `seed ${seed}, ${numRuns} schedule(s) of up to ${maxParts} parts (episodes or single steps)${values.path ? `, path ${values.path}` : ''}`,
    );
    // After the first failure only that invariant counts, so the shrinker keeps the finding.
    let target: string | null = null;
    let firstFailureAt: number | null = null;
    const results = new Map<string, ScheduleResult>();
    // `--minutes`: no schedule starts after this instant, and the one running then finishes
    // (fast-check's own time limit would abandon it mid-flight, its database dropped under it
    // by the stack's stop and counted as a harness error). Shrinking a failure is not cut.
    const startBy = minutes > 0 ? started + minutes * 60_000 : Number.POSITIVE_INFINITY;
    let notStarted = 0;
    const property = fc.asyncProperty(scheduleArb(maxParts), async (schedule) => {
      // Past the shrink budget: every candidate passes, so the shrinker stops where it is.
      if (firstFailureAt !== null && Date.now() - firstFailureAt > shrinkMs) return true;
      if (firstFailureAt === null && Date.now() >= startBy) {
        notStarted++;
        return true;
      }
      const result = await runSchedule(stack, schedule, index++);
      if (firstFailureAt === null) stats.add(result);
      const line = `schedule ${result.index}: ${result.steps} steps, ${result.durationMs} ms, ${
        result.harnessError
          ? 'HARNESS ERROR'
          : result.violated.length
            ? `VIOLATED ${result.violated.map((c) => c.name).join(', ')}`
            : 'ok'
      }`;
      if (!values.quiet || result.violated.length) say(firstFailureAt === null ? line : `shrinking: ${line}`);
      if (values.verbose) console.log(result.trace);
      if (result.harnessError) {
        say(result.harnessError.split('\n').slice(0, 3).join(' | '));
        // A harness error fails the run; while shrinking it is a candidate that did not reproduce.
        return target !== null;
      }
      const hit = result.violated.filter((c) => target === null || c.name === target);
      if (hit.length === 0) return true;
      target ??= hit[0]!.name;
      firstFailureAt ??= Date.now();
      results.set(JSON.stringify(schedule), result);
      return false;
    });
    const out = await fc.check(property, {
      seed,
      numRuns,
      path: values.path,
      endOnFailure: false,
    });
    if (notStarted > 0)
      say(
        `time limit of ${minutes} min reached after ${stats.schedules} schedule(s); ${notStarted} not started`,
      );
    if (out.failed && out.counterexample) {
      const [schedule] = out.counterexample;
      const result = results.get(JSON.stringify(schedule));
      mkdirSync(OUT_DIR, { recursive: true });
      const file = `${OUT_DIR}failure-${seed}.json`;
      writeFileSync(file, JSON.stringify(schedule, null, 2));
      say(`FAILED: seed ${seed}, path ${out.counterexamplePath}, ${out.numShrinks} shrink(s)`);
      say(
        `replay: npm run chaos -- --seed ${seed} --path ${out.counterexamplePath} --parts ${maxParts}   (or --replay ${file})`,
      );
      if (result) printFailure(result, schedule);
      exit = 1;
    } else if (out.failed) {
      say('FAILED: too many skips');
      exit = 1;
    }
  }
} finally {
  await stack.stop();
}
console.log(formatReport(stats, Date.now() - started));
process.exit(exit);

function printFailure(result: ScheduleResult, schedule: Schedule) {
  say('shrunk schedule:');
  for (const [i, s] of schedule.steps.entries()) console.log(`  #${i} ${describeStep(s)}`);
  if (result.harnessError) say(`harness error: ${result.harnessError}`);
  for (const c of result.violated) {
    say(`invariant ${c.name} violated:`);
    for (const v of c.violations.slice(0, 10)) console.log(`  - ${v}`);
  }
  say('event trace:');
  console.log(result.trace);
}
