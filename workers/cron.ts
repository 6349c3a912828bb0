import { effectsEveryMinute } from './effects/cron';
import type { Env } from './env';
import { housekeepingEveryMinute } from './housekeeping/cron';
import { log } from './log';

type CronHandler = (env: Env, scheduledTime: number) => Promise<unknown>;

/** Keeps the 30-second maintenance alarm armed; the cron itself fires at most once a minute. */
async function everyMinute(env: Env): Promise<unknown> {
  const maintenance = env.TYPING_MAINTENANCE.get(env.TYPING_MAINTENANCE.idFromName('singleton'));
  const typingMaintenance = await maintenance.ensureArmed();
  // Effect recovery and mailbox polling; its failure must not stop the maintenance arm.
  const effects = await effectsEveryMinute(env).catch((err) => {
    log.error('effect_recovery_pass_failed', { error: err });
    return null;
  });
  // Retention for tables without another owner (docs/retention-rules.md); same isolation.
  const housekeeping = await housekeepingEveryMinute(env).catch((err) => {
    log.error('housekeeping_failed', { error: err });
    return null;
  });
  return { typingMaintenance, effects, housekeeping };
}

/** Asks the retention owner for its hourly run; it decides whether it is enabled. */
async function hourly(env: Env, scheduledTime: number): Promise<unknown> {
  const cleanup = env.RETENTION_CLEANUP.get(env.RETENTION_CLEANUP.idFromName('singleton'));
  return { retention: await cleanup.scheduledRun(scheduledTime) };
}

export const CRON_HANDLERS: Record<string, CronHandler> = {
  '* * * * *': everyMinute,
  '0 * * * *': hourly,
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
    log.error('cron_failed', { cron: controller.cron, error: err });
    throw err;
  }
}
