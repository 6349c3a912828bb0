import { sweepUnfinishedCards } from './channel/card-sweep';
import { sweepRecalls } from './channel/recall-sweep';
import { effectsEveryMinute } from './effects/cron';
import type { Env } from './env';
import { housekeepingEveryMinute } from './housekeeping/cron';
import { log } from './log';
import { typingMaintenance } from './typing-ledger/maintenance';

type CronHandler = (env: Env, scheduledTime: number) => Promise<unknown>;

/**
 * One minute-cron step. Its failure is logged once under the step's own event name (with
 * the error class) and reported as null; it never stops the steps after it.
 */
async function step<T>(failureEvent: string, run: () => Promise<T>): Promise<T | null> {
  try {
    return await run();
  } catch (err) {
    log.error(failureEvent, { error: err });
    return null;
  }
}

/**
 * Keeps the 30-second maintenance alarm armed (the cron itself fires at most once a minute),
 * then effect recovery and mailbox polling, then retention for tables without another owner
 * (docs/retention-rules.md). Each step is isolated: see `step`.
 */
async function everyMinute(env: Env): Promise<unknown> {
  const typingArmed = await step('typing_maintenance_arm_failed', () => typingMaintenance(env).ensureArmed());
  const effects = await step('effect_minute_failed', () => effectsEveryMinute(env));
  const housekeeping = await step('housekeeping_failed', () => housekeepingEveryMinute(env));
  const cards = await step('channel_card_sweep_failed', () => sweepUnfinishedCards(env));
  const recalls = await step('channel_recall_sweep_failed', () => sweepRecalls(env));
  return { typingMaintenance: typingArmed, effects, housekeeping, cards, recalls };
}

export const CRON_HANDLERS: Record<string, CronHandler> = {
  '* * * * *': everyMinute,
};

export async function dispatchCron(controller: ScheduledController, env: Env) {
  const handler = CRON_HANDLERS[controller.cron];
  if (!handler) {
    log.error('cron_unknown_expression', { cron: controller.cron });
    return;
  }
  const started = Date.now();
  try {
    const result = await handler(env, controller.scheduledTime);
    log.info('cron_done', { cron: controller.cron, durationMs: Date.now() - started, result });
  } catch (err) {
    // The minute steps are isolated, so only a handler added without that can get here.
    // Rethrown so the runtime records the invocation as failed.
    log.error('cron_failed', { cron: controller.cron, error: err });
    throw err;
  }
}
