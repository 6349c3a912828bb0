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
  /** The schedule's replies: turns delivered, and how many of them as a streamed card; cards created and sent at Lark. */
  replies: { delivered: number; asCard: number; cardsCreated: number; cardsSent: number };
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
  let replies: ScheduleResult['replies'] = { delivered: 0, asCard: 0, cardsCreated: 0, cardsSent: 0 };
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
    replies = await countReplies(world);
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
    replies,
    trace: world.trace.format(),
    durationMs: Date.now() - started,
    harnessError,
  };
}

/** What the schedule's replies were, for the report: how much of it streamed. */
async function countReplies(world: World): Promise<ScheduleResult['replies']> {
  const { rows } = await world.db.query<{ delivered: number; as_card: number }>(
    `select count(*)::int as delivered,
            count(*) filter (where exists (
              select 1 from chaos.reply_cards c
               where c.session_id = t.session_id and c.turn_no = t.turn_no
                 and c.sent_message_id = t.reply_message_id))::int as as_card
       from chaos.turns t where t.outcome = 'delivered'`,
  );
  const cards = [...world.lark.state.cards.cards.values()];
  return {
    delivered: rows[0]!.delivered,
    asCard: rows[0]!.as_card,
    cardsCreated: cards.length,
    cardsSent: cards.filter((c) => c.sent).length,
  };
}
