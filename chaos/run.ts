import { FaultRunner } from './faults';
import { type CheckResult, checkAll } from './invariants';
import { quiesce } from './quiesce';
import { describeStep, FAULT_OPS, type Schedule } from './schedule';
import type { ChaosStack } from './stack';
import { newModel, operatorRetries, runWorkload, setup } from './workload';
import { World } from './world';

export interface ScheduleResult {
  index: number;
  steps: number;
  checks: CheckResult[];
  violated: CheckResult[];
  faultCounts: Map<string, number>;
  answers: number;
  trace: string;
  durationMs: number;
  /** The harness itself failed (setup, a runtime that would not start): not a finding. */
  harnessError?: string;
}

/** Runs one schedule on a fresh database and world, quiesces, checks every invariant. */
export async function runSchedule(
  stack: ChaosStack,
  schedule: Schedule,
  index: number,
): Promise<ScheduleResult> {
  const started = Date.now();
  const world = new World(stack, `s${index}`);
  const faults = new FaultRunner(world);
  const model = newModel();
  let checks: CheckResult[] = [];
  let harnessError: string | undefined;
  try {
    await world.start();
    await setup(world, model);
    for (const [i, step] of schedule.steps.entries()) {
      world.trace.step = i;
      world.trace.add(describeStep(step));
      if (FAULT_OPS.has(step.op)) await faults.run(step);
      else await runWorkload(world, model, step);
    }
    await quiesce(world, faults, () => operatorRetries(world, model));
    checks = await checkAll(world, model);
  } catch (err) {
    harnessError = (err as Error).stack ?? String(err);
    world.trace.add(`harness error: ${(err as Error).message}`);
  } finally {
    await world.stop();
  }
  return {
    index,
    steps: schedule.steps.length,
    checks,
    violated: checks.filter((c) => c.violations.length > 0),
    faultCounts: world.faultCounts,
    answers: world.answers.length,
    trace: world.trace.format(),
    durationMs: Date.now() - started,
    harnessError,
  };
}
