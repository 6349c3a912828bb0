import { actorHostStub } from '../../durable-objects/actor-host';
import { withDb } from '../db/pool';
import { type Env, loadConfig } from '../env';
import { log } from '../log';
import { effectConfigFrom } from './host-config';
import { instancesWithWork, pruneMailbox } from './mailbox';
import { pruneProcesses } from './processes';
import { pruneEffects, pruneRecoveryBindings, type RecoveryPassReport, runRecoveryPass } from './recovery';

/** The minute cron's recovery pass must finish well inside the minute. */
export const RECOVERY_PASS_BUDGET_MS = 20_000;
const POLL_WAKE_LIMIT = 50;
const PRUNE_BATCH = 1000;

/**
 * Recovery pass, mailbox polling (wakes hosts whose mailbox or timer has work, so a lost
 * wake-up is delivered within a minute), then one bounded retention batch per table.
 */
export async function effectsEveryMinute(env: Env) {
  const config = loadConfig(env);
  const runtime = effectConfigFrom(config);
  const wake = (instanceId: string) => actorHostStub(env, instanceId).wake(instanceId);
  return withDb(config, async (pool) => {
    const report: RecoveryPassReport = await runRecoveryPass(pool, runtime, {
      budgetMs: RECOVERY_PASS_BUDGET_MS,
      wake,
    });
    const ids = await instancesWithWork(pool, POLL_WAKE_LIMIT);
    await Promise.allSettled(ids.map((id) => wake(id)));
    const pruned = { mailbox: 0, effects: 0, bindings: 0, processes: 0 };
    try {
      pruned.mailbox = await pruneMailbox(pool, runtime.mailboxRetentionMs, PRUNE_BATCH);
      pruned.effects = await pruneEffects(pool, runtime.effectRetentionMs, PRUNE_BATCH);
      pruned.bindings = await pruneRecoveryBindings(pool, PRUNE_BATCH);
      pruned.processes = await pruneProcesses(pool, runtime.processPruneAfterMs, PRUNE_BATCH);
    } catch (err) {
      log.error('effect_retention_failed', { error: err });
    }
    return { ...report, polled: ids.length, pruned };
  });
}
