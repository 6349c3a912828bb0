import type { Pool } from '@neondatabase/serverless';
import { withDb } from '../db/pool';
import { withTx } from '../db/tx';
import { type Env, loadConfig } from '../env';
import { withTimeout } from '../lib/timeout';
import { log } from '../log';
import { actorHostStub } from './actor-host-stub';
import { effectConfigFrom } from './host-config';
import { pruneIdleInstances } from './instance-retention';
import { instancesWithWork, pruneMailbox, unrunnableInstancesWithWork } from './mailbox';
import { pruneProcesses, registerProcess, releaseProcess } from './processes';
import {
  pruneEffects,
  pruneExpiredBindings,
  pruneRecoveryChecks,
  type RecoveryPassReport,
  runRecoveryPass,
  WAKE_BUDGET_MS,
  type WakeFn,
} from './recovery';
import { type EffectRegistry, effectRegistry } from './registry';
import type { EffectRuntimeConfig } from './types';

/** The minute cron's recovery pass must finish well inside the minute. */
export const RECOVERY_PASS_BUDGET_MS = 20_000;
const POLL_WAKE_LIMIT = 50;
/** Rows per table per minute; a backlog drains over several minutes, never in one long delete. */
export const PRUNE_BATCH = 1000;
/** Each table's batch runs in its own transaction with this budget (statement_timeout). */
export const PRUNE_BUDGET_MS = 5_000;

export interface EffectPruneReport {
  mailbox: number;
  effects: number;
  checks: number;
  bindings: number;
  processes: number;
  /** Idle instances deleted (their effects and bindings with them, in ID order). */
  instances: number;
  /** Tables whose batch failed this pass (each logged); the others still ran. */
  failed: string[];
}

/**
 * One bounded retention batch per runtime table, each in its own transaction and budget,
 * so a slow or failing table never stops the others:
 * - actor_mailbox: delivered and dead messages past `mailboxRetentionMs`;
 * - effects: completed/dead effects past `effectRetentionMs` (bindings stay);
 * - effect_recovery_checks: resolved checks past `checkRetentionMs`;
 * - effect_recoveries: bindings past their `expires_at_ms`;
 * - effect_processes: silent or stopped past `processPruneAfterMs`, never an owner;
 * - actor_instances: idle instances of the actor types that declare a retention
 *   (`ActorType.retention`, instance-retention.ts), last, after their rows' own batches.
 */
export async function pruneEffectRows(
  pool: Pool,
  runtime: EffectRuntimeConfig,
  opts: { batch?: number; budgetMs?: number; registry?: EffectRegistry } = {},
): Promise<EffectPruneReport> {
  const rules = (opts.registry ?? effectRegistry).retentionRules();
  const batch = opts.batch ?? PRUNE_BATCH;
  const budgetMs = opts.budgetMs ?? PRUNE_BUDGET_MS;
  const report: EffectPruneReport = {
    mailbox: 0,
    effects: 0,
    checks: 0,
    bindings: 0,
    processes: 0,
    instances: 0,
    failed: [],
  };
  const steps: [
    keyof Omit<EffectPruneReport, 'failed'>,
    (tx: Parameters<typeof pruneMailbox>[0]) => Promise<number>,
  ][] = [
    ['mailbox', (tx) => pruneMailbox(tx, runtime.mailboxRetentionMs, batch)],
    ['effects', (tx) => pruneEffects(tx, runtime.effectRetentionMs, batch)],
    ['checks', (tx) => pruneRecoveryChecks(tx, batch, runtime.checkRetentionMs)],
    ['bindings', (tx) => pruneExpiredBindings(tx, batch)],
    ['processes', (tx) => pruneProcesses(tx, runtime.processPruneAfterMs, batch)],
    ['instances', async (tx) => (await pruneIdleInstances(tx, rules, batch)).instances],
  ];
  // The pass is a registered process of this protocol version while it runs, so the emit
  // guard of a later version sees it (commit.ts): a retention pass of an older rule (one that
  // deleted bindings a live effect keeps) then blocks recovery-enabled emits like an older
  // claimer does. It owns no effect, so its row is deleted after the pass.
  const processId = await registerProcess(pool, 'effect-retention').catch((err: unknown) => {
    // Handled by design: the pass itself is correct without it; only the guard of a later
    // version would miss this pass. Logged once; the steps still run.
    log.error('effect_retention_failed', { table: 'effect_processes', step: 'register', error: err });
    return null;
  });
  try {
    for (const [table, prune] of steps) {
      try {
        report[table] = await withTx(pool, { budgetMs }, prune);
      } catch (err) {
        report.failed.push(table);
        log.error('effect_retention_failed', { table, error: err });
      }
    }
  } finally {
    if (processId)
      await releaseProcess(pool, processId).catch((err: unknown) =>
        // Handled by design: a row left behind is silent, owns nothing, and is pruned in a day.
        log.error('effect_retention_failed', { table: 'effect_processes', step: 'release', error: err }),
      );
  }
  return report;
}

/**
 * Mailbox polling: wakes hosts whose mailbox, timer or pending effects (delayed, or a retry
 * past its backoff) are due, so a lost wake-up or a lost alarm costs at most a minute. Only
 * instances of registered actor types are woken; the rest are counted and logged once.
 */
export async function pollInstancesWithWork(
  pool: Pool,
  wake: WakeFn,
  registry: EffectRegistry = effectRegistry,
  limit = POLL_WAKE_LIMIT,
): Promise<{ polled: number; unregistered: number }> {
  const actorTypes = registry.actorTypes();
  const ids = await instancesWithWork(pool, limit, { actorTypes });
  const skipped = await unrunnableInstancesWithWork(pool, actorTypes);
  const unregistered = skipped.reduce((n, s) => n + s.instances, 0);
  if (unregistered > 0)
    log.error('effect_poll_unregistered_actor_types', {
      instances: unregistered,
      actorTypes: skipped.slice(0, 20).map((s) => `${s.actorType} (${s.instances})`),
    });
  // One failed wake-up never stops the others; each is logged, and the next minute's poll
  // tries that host again (its work is still due in the database). Each is bounded: a host
  // that does not answer cannot hold the retention behind this.
  await Promise.all(
    ids.map((id) =>
      withTimeout(
        Promise.resolve().then(() => wake(id)),
        WAKE_BUDGET_MS,
        () => new Error(`wake-up did not answer within ${WAKE_BUDGET_MS} ms`),
      ).catch((err: unknown) => log.warn('effect_wake_failed', { instanceId: id, via: 'poll', error: err })),
    ),
  );
  return { polled: ids.length, unregistered };
}

/**
 * Recovery pass, mailbox polling, then one bounded retention batch per table. Each part's
 * failure is logged under its own event and never stops the parts after it. Its wakes only
 * schedule the host's pump (`ActorHost.schedule`: the host's own alarm, now), never wait for
 * it: one host whose executor is slow cannot hold the pass, the poll or the retention.
 */
export async function effectsEveryMinute(env: Env, opts: { recoveryBudgetMs?: number } = {}) {
  const config = loadConfig(env);
  const runtime = effectConfigFrom(config);
  const wake = (instanceId: string) => actorHostStub(env, instanceId).schedule(instanceId);
  return withDb(config, async (pool) => {
    const recovery: RecoveryPassReport | null = await runRecoveryPass(pool, runtime, {
      budgetMs: opts.recoveryBudgetMs ?? RECOVERY_PASS_BUDGET_MS,
      wake,
    }).catch((err: unknown) => {
      log.error('effect_recovery_pass_failed', { error: err });
      return null;
    });
    const poll = await pollInstancesWithWork(pool, wake).catch((err: unknown) => {
      log.error('effect_poll_failed', { error: err });
      return null;
    });
    const pruned = await pruneEffectRows(pool, runtime);
    return { recovery, poll, pruned };
  });
}
