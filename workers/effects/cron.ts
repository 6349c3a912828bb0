import { actorHostStub } from '../../durable-objects/actor-host';
import { withDb } from '../db/pool';
import { type Env, loadConfig } from '../env';
import { effectConfigFrom } from './host-config';
import { instancesWithWork } from './mailbox';
import { type RecoveryPassReport, runRecoveryPass } from './recovery';

/** The minute cron's recovery pass must finish well inside the minute. */
export const RECOVERY_PASS_BUDGET_MS = 20_000;
const POLL_WAKE_LIMIT = 50;

/**
 * Recovery pass plus mailbox polling: retires stale effects (waking their hosts), then
 * wakes hosts whose mailbox or timer has work, so a lost wake-up is delivered within a minute.
 */
export async function effectsEveryMinute(env: Env): Promise<RecoveryPassReport & { polled: number }> {
  const config = loadConfig(env);
  const wake = (instanceId: string) => actorHostStub(env, instanceId).wake(instanceId);
  return withDb(config, async (pool) => {
    const report = await runRecoveryPass(pool, effectConfigFrom(config), {
      budgetMs: RECOVERY_PASS_BUDGET_MS,
      wake,
    });
    const ids = await instancesWithWork(pool, POLL_WAKE_LIMIT);
    await Promise.allSettled(ids.map((id) => wake(id)));
    return { ...report, polled: ids.length };
  });
}
