import { DurableObject } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import { openPool } from '../workers/db/pool';
import { isDatabaseUnavailable } from '../workers/db/refusal';
import { effectConfigFrom, heartbeatEveryMs } from '../workers/effects/host-config';
import { loadInstance } from '../workers/effects/mailbox';
import { heartbeat, registerProcess, releaseProcess, supersedeProcess } from '../workers/effects/processes';
import { processRecoveryChecks, RECOVERY_DUE_SQL, runRecoveryPass } from '../workers/effects/recovery';
import { effectRegistry } from '../workers/effects/registry';
import { drainInstance, runEffectsUntilShort } from '../workers/effects/runner';
import type { EffectRuntimeConfig } from '../workers/effects/types';
import { type Config, type Env, loadConfig } from '../workers/env';
import { log } from '../workers/log';
import { Alarm } from './alarm';

export interface PumpReport {
  handled: number;
  checks: number;
  claimed: number;
  completed: number;
  failed: number;
  /** Stale claims of this instance recovered (retired, requeued or dead) by its own pass. */
  recovered: number;
  /** When this pump ran the instance's own recovery pass (isolate ms), else null. */
  recoveredAt: number | null;
  /** Next alarm (epoch ms) or null: a due timer, or the next heartbeat while holding claims. */
  alarmAt: number | null;
}

/** What the `wake` RPC answers: the pump's report, or `deferred` when the database could not serve it. */
export interface WakeReport extends PumpReport {
  /** The pump found no connection (refused, budget spent, lost): retried from the alarm, logged. */
  deferred: boolean;
}

const emptyReport = (): PumpReport => ({
  handled: 0,
  checks: 0,
  claimed: 0,
  completed: 0,
  failed: 0,
  recovered: 0,
  recoveredAt: null,
  alarmAt: null,
});

const EFFECT_BATCH = 20;

/**
 * Storage key of the process this host registered and has not released yet. Written before
 * a claim, deleted after the release: a new incarnation that finds one knows its predecessor
 * restarted holding claims (an older version kept `processId`, and re-heartbeated it).
 */
const OWN_PROCESS_KEY = 'process:own';
/**
 * After a failed pump (a handler threw, the database was unreachable) the host retries from
 * its alarm, whether the pump ran from an RPC wake or from the alarm: a failing message
 * counts one delivery attempt per retry and is dead after `mailboxMaxAttempts`.
 */
export const PUMP_RETRY_MS = 5000;
/**
 * Pumps one wake may run on its one connection when the last left work due at once (a
 * callback's follow-up effect, a concurrent wake): more goes to the alarm, so a host whose
 * work keeps coming due cannot hold its connection forever.
 */
const MAX_PUMPS_PER_WAKE = 4;
/**
 * Past the moment a claim turns stale, by database time: the candidate test is strict
 * (`heartbeat < now - timeout`), and the isolate's clock only approximates the database's.
 */
const RECOVERY_MARGIN_MS = 250;
/**
 * Storage key, present while a claim of this instance is held by another (or a dead)
 * process: when its recovery is due (isolate epoch ms, for the alarm).
 */
const RECOVERY_AT_KEY = 'recoveryAt';

/**
 * One per actor instance. `wake()` after every commit that gives the instance work: it
 * drains the mailbox into the actor's handler (one fenced commit per message), answers
 * open recovery checks, then claims and runs the instance's effects as a registered
 * process. While effects are in flight the alarm heartbeats that process; otherwise the
 * alarm is the actor's timer, or the moment a claim of this instance held by a process that
 * stopped heartbeating turns stale: the host then recovers it itself (the same per-candidate
 * decision as the minute cron's pass, under the same locks), so a reply whose runtime died
 * mid-turn is recovered at the staleness floor rather than at the next cron. Every fact lives
 * in Postgres: an evicted host loses nothing, and the minute cron's pass still recovers what a
 * dead host held if its alarm is lost.
 *
 * Connections: one per wake. Everything a wake does (drain, checks, claims, the executors'
 * own statements, follow-up pumps) runs on one pool of one connection, opened in the wake's
 * I/O context and ended with it; an idle host holds none.
 */
export class ActorHost extends DurableObject<Env> {
  private pumping: Promise<PumpReport> | null = null;
  private again = false;
  /**
   * The process this incarnation's pump registered and still holds, in memory only: after a
   * restart the earlier incarnation's process is never heartbeated again, so its claims turn
   * stale and are recovered (this host's recovery alarm); refreshing it would hide the death.
   */
  private ownProcessId: string | null = null;
  /** Mirror of RECOVERY_AT_KEY; undefined until read once in this incarnation. */
  private recoveryAt: number | null | undefined = undefined;
  private knownInstanceId: string | null = null;
  /** The running wake's pool (its one held connection), for the alarm's heartbeats. */
  private pumpPool: Pool | null = null;
  private readonly alarmClock = new Alarm(this.ctx.storage, this.env);

  /**
   * RPC: the instance may have work; pump it soon, from this host's own alarm (now). Returns
   * once that is scheduled, never after the pump: the minute cron and recovery passes wake
   * hosts this way, so a host whose executor is slow holds up nobody but itself. The alarm
   * pumps (or, while a pump runs, heartbeats and asks it for one more round).
   */
  async schedule(instanceId: string): Promise<void> {
    await this.rememberInstance(instanceId);
    await this.alarmClock.setNoLaterThan(Date.now());
  }

  private async rememberInstance(instanceId: string): Promise<void> {
    if (this.knownInstanceId !== instanceId) {
      await this.ctx.storage.put('instanceId', instanceId);
      this.knownInstanceId = instanceId;
    }
  }

  /**
   * RPC: the instance has (or may have) work. Concurrent wakes coalesce into one more pump.
   *
   * A pump the database could not serve (the isolate's connection budget spent, the server
   * refusing or dropping the connection: db/refusal.ts) resolves as `deferred`, never rejects:
   * workerd reports every RPC method that rejects as an uncaught exception in the object
   * ("Uncaught (in promise) ConnectionBudgetSpent", issue 35 hole 11: 28 of them in one bench
   * level), even though the caller catches it. The retry alarm is armed either way and the
   * deferral is logged here once (`actor_host_pump_deferred`). Any other failure (a bug, bad
   * data) still rejects: the caller logs it, and the runtime's report of it is wanted.
   */
  async wake(instanceId: string): Promise<WakeReport> {
    try {
      return { ...(await this.pumpNow(instanceId)), deferred: false };
    } catch (err) {
      if (!isDatabaseUnavailable(err)) throw err;
      this.reportPumpFailure(instanceId, err);
      return { ...emptyReport(), deferred: true };
    }
  }

  /**
   * Logs a pump's failure once, however many coalesced wakes (and the alarm) await it: a
   * database that refused or dropped the connection (the overload this host is expected to
   * ride out) is a warning operators count, anything else an error.
   */
  private reportPumpFailure(instanceId: string, err: unknown): void {
    if (typeof err === 'object' && err !== null) {
      if (this.reported.has(err)) return;
      this.reported.add(err);
    }
    if (isDatabaseUnavailable(err)) log.warn('actor_host_pump_deferred', { instanceId, error: err });
    else log.error('actor_host_pump_failed', { instanceId, error: err });
  }

  /** Failures already logged (reportPumpFailure). */
  private readonly reported = new WeakSet<object>();

  /** One pump, or the running one's next round; rejects with the pump's failure (retry armed). */
  private async pumpNow(instanceId: string): Promise<PumpReport> {
    await this.rememberInstance(instanceId);
    if (this.pumping) {
      this.again = true;
      return this.pumping;
    }
    this.pumping = (async () => {
      try {
        const total = emptyReport();
        await this.withPool(async (pool) => {
          let pumps = 0;
          do {
            this.again = false;
            const r = await this.pump(pool, instanceId);
            pumps++;
            total.handled += r.handled;
            total.checks += r.checks;
            total.claimed += r.claimed;
            total.completed += r.completed;
            total.failed += r.failed;
            total.recovered += r.recovered;
            total.alarmAt = r.alarmAt;
            // Work already due (a completion's callback emitted a follow-up effect): run it on
            // this connection now rather than through an alarm and a new one.
            if (r.alarmAt !== null && r.alarmAt <= Date.now()) this.again = true;
          } while (this.again && pumps < MAX_PUMPS_PER_WAKE);
          // A wake that came during the last allowed pump (or work that pump left due at
          // once) goes to the alarm, now: never dropped until the minute poll finds it.
          if (this.again) await this.alarmClock.setNoLaterThan(Date.now());
        });
        return total;
      } catch (err) {
        await this.alarmClock
          .setNoLaterThan(Date.now() + PUMP_RETRY_MS)
          .catch((armErr: unknown) =>
            log.error('actor_host_retry_arm_failed', { instanceId, error: armErr }),
          );
        throw err;
      } finally {
        this.pumping = null;
      }
    })();
    return this.pumping;
  }

  override async alarm(): Promise<void> {
    const instanceId = await this.ctx.storage.get<string>('instanceId');
    if (!instanceId) return;
    if (this.pumping) {
      // Effects may be in flight: heartbeat and come back, without waiting for the pump
      // (alarms do not overlap, so awaiting it would stop the heartbeat cadence). Only a
      // process this incarnation's pump still holds: one it already released needs no
      // heartbeat, and an earlier incarnation's must go stale.
      // The beat rides on the wake's own connection, never a new one: a liveness signal must
      // not wait for a place in the isolate's budget behind the very work it reports on (with
      // the background places all held by pumps, a beat on a new connection starved and the
      // running claim looked stale). One statement, queued behind the executors' own, if any.
      const processId = this.ownProcessId;
      const pool = this.pumpPool;
      if (processId && pool)
        await heartbeat(pool, processId).catch((err: unknown) =>
          log.error('actor_host_heartbeat_failed', { instanceId, error: err }),
        );
      // Never later than an alarm the pump chose meanwhile (a due timer, work left for now).
      await this.alarmClock.setNoLaterThan(Date.now() + heartbeatEveryMs(this.config()));
      this.again = true;
      return;
    }
    try {
      await this.pumpNow(instanceId);
    } catch (err) {
      // The retry alarm below is the handling either way; the failure is logged once, as a
      // warning when the database was unavailable (reportPumpFailure).
      this.reportPumpFailure(instanceId, err);
      await this.alarmClock.set(Date.now() + PUMP_RETRY_MS);
    }
  }

  private config(): EffectRuntimeConfig {
    return effectConfigFrom(loadConfig(this.env) as Config);
  }

  /**
   * The wake's one connection, held (never closed while idle) until the wake ends: the pump's
   * statements, the executors' and the alarm's heartbeats all use it.
   */
  private async withPool<T>(fn: (pool: Pool) => Promise<T>): Promise<T> {
    const pool = openPool(loadConfig(this.env), { max: 1, idleTimeoutMs: 0 });
    this.pumpPool = pool;
    try {
      return await fn(pool);
    } finally {
      this.pumpPool = null;
      await pool.end();
    }
  }

  /**
   * Heartbeats this incarnation's process, or registers a new one (stopped, pruned, or none
   * yet). A new one is written to storage before anything is claimed under it: a later
   * incarnation that finds it there knows it is its predecessor's (supersedePrevious).
   */
  private async beat(pool: Pool): Promise<string> {
    const known = this.ownProcessId;
    if (known && (await heartbeat(pool, known))) return known;
    const id = await registerProcess(pool, 'actor-host');
    await this.ctx.storage.put(OWN_PROCESS_KEY, id);
    this.ownProcessId = id;
    return id;
  }

  /**
   * The process an earlier incarnation of this host registered and never released (a restart
   * came while it held claims: a deploy, an eviction, a crash). It is marked superseded, so its
   * claims of kinds idempotent by key are recovered in this pump, not at the staleness floor;
   * its other claims keep the floor (the platform does not promise that the old incarnation
   * has stopped: docs/effects.md "Restarts and deploys"). True when there was one.
   */
  private async supersedePrevious(pool: Pool, instanceId: string): Promise<boolean> {
    // Set only while this incarnation's own pump holds a process; pumps never overlap.
    if (this.ownProcessId) return false;
    const previous = await this.ctx.storage.get<string>(OWN_PROCESS_KEY);
    if (!previous) return false;
    if (await supersedeProcess(pool, previous))
      log.info('actor_host_previous_incarnation', { instanceId, processId: previous });
    await this.ctx.storage.delete(OWN_PROCESS_KEY);
    return true;
  }

  private async storedRecoveryAt(): Promise<number | null> {
    if (this.recoveryAt === undefined)
      this.recoveryAt = (await this.ctx.storage.get<number>(RECOVERY_AT_KEY)) ?? null;
    return this.recoveryAt;
  }

  private async storeRecoveryAt(at: number | null): Promise<void> {
    if ((await this.storedRecoveryAt()) === at) return;
    if (at === null) await this.ctx.storage.delete(RECOVERY_AT_KEY);
    else await this.ctx.storage.put(RECOVERY_AT_KEY, at);
    this.recoveryAt = at;
  }

  /**
   * This instance's own recovery pass, while the last pump saw a claim of this instance held
   * by another (or a dead) process. Due-ness is the database's: the pass takes only
   * candidates whose owner is missing or silent past the effective timeout by database time,
   * and re-decides each under the spec's locks with the locked heartbeat (an owner that
   * came back is deferred, never taken), so running it early is safe and merely finds none.
   */
  private async recoverOwn(
    pool: Pool,
    instanceId: string,
    config: EffectRuntimeConfig,
    restarted: boolean,
  ): Promise<number | null> {
    if (!restarted && (await this.storedRecoveryAt()) === null) return null;
    const r = await runRecoveryPass(pool, config, { instanceId, budgetMs: 10_000 });
    return r.retired + r.requeued;
  }

  private async pump(pool: Pool, instanceId: string): Promise<PumpReport> {
    const config = this.config();
    const inst = await loadInstance(pool, instanceId);
    if (inst && !effectRegistry.actor(inst.actor_type)) {
      // No code here can run this instance: a retry alarm would fail every few seconds
      // forever. Log, go quiet; the minute poll skips such instances too (one log a pass).
      log.error('actor_host_unregistered_type', { instanceId, actorType: inst.actor_type });
      await this.alarmClock.delete();
      return emptyReport();
    }
    const report = emptyReport();
    // Before the drain: a retirement's recovery message is then delivered in this same pump.
    const restarted = await this.supersedePrevious(pool, instanceId);
    const recovered = await this.recoverOwn(pool, instanceId, config, restarted);
    report.recovered = recovered ?? 0;
    report.recoveredAt = recovered === null ? null : Date.now();
    report.handled = await drainInstance(pool, effectRegistry, instanceId, config);
    // Most pumps (an input that only moves the debounce timer) have no open recovery check and
    // no effect to run: one indexed read for both instead of one each (and instead of
    // registering, claiming and releasing a process for nothing). After answering checks the
    // due effects are read again: an answer may have requeued one. A wake that comes after
    // this read is another round of this pump (`again`); a run time reached after it, the alarm.
    const work = await this.pendingWork(pool, instanceId);
    if (work.checks) report.checks = (await processRecoveryChecks(pool, instanceId, config)).size;
    if (work.checks ? await this.hasDueEffect(pool, instanceId) : work.due)
      await this.runEffects(pool, instanceId, config, report);
    report.alarmAt = await this.nextAlarm(pool, instanceId, config, report.recoveredAt);
    return report;
  }

  /** Whether the instance has an open recovery check, and a due effect, in one read. */
  private async pendingWork(pool: Pool, instanceId: string): Promise<{ checks: boolean; due: boolean }> {
    const { rows } = await pool.query<{ checks: boolean; due: boolean }>(
      `select exists (select 1 from effect_recovery_checks where origin_instance_id = $1 and outcome is null) as checks,
              exists (select 1 from effects where origin_instance_id = $1 and status = 'pending'
                         and run_at_ms <= (select app_now_ms())) as due`,
      [instanceId],
    );
    return rows[0]!;
  }

  private async hasDueEffect(pool: Pool, instanceId: string): Promise<boolean> {
    const { rows } = await pool.query<{ due: boolean }>(
      `select exists (select 1 from effects where origin_instance_id = $1 and status = 'pending'
                         and run_at_ms <= (select app_now_ms())) as due`,
      [instanceId],
    );
    return rows[0]!.due;
  }

  /** Claims and runs the instance's due effects as this incarnation's process, then releases it. */
  private async runEffects(pool: Pool, instanceId: string, config: EffectRuntimeConfig, report: PumpReport) {
    const processId = await this.beat(pool);
    try {
      // Batch after batch while they come back full, each completion claiming the next.
      const r = await runEffectsUntilShort(pool, effectRegistry, processId, {
        limit: EFFECT_BATCH,
        instanceId,
        // Heartbeat cadence while claims may be held; nextAlarm() re-derives it afterwards.
        beforeClaim: () => this.alarmClock.setNoLaterThan(Date.now() + heartbeatEveryMs(config)),
      });
      report.claimed += r.claimed;
      report.completed += r.completed;
      report.failed += r.failed;
    } finally {
      // Done with its claims (or failed mid-way): the process row goes, or, when a write-back
      // was lost and it still owns an effect, stops with its heartbeat evidence kept (the
      // recovery rules settle those claims). Rows then track work in flight, not every
      // conversation this service ever hosted; the next pump registers anew.
      await releaseProcess(pool, processId);
      await this.ctx.storage.delete(OWN_PROCESS_KEY);
      this.ownProcessId = null;
    }
    // Completions may have sent callbacks (failed/completed) to this very mailbox.
    report.handled += await drainInstance(pool, effectRegistry, instanceId, config);
  }

  /**
   * The earliest of: the actor's timer, a delayed message, a pending effect's (retry) run
   * time, now for an open explicit check, and the moment a claim of this instance held by another (or an earlier, dead)
   * process turns stale, which also records that this host's own recovery pass is due then.
   */
  private async nextAlarm(
    pool: Pool,
    instanceId: string,
    config: EffectRuntimeConfig,
    recoveredAt: number | null,
  ): Promise<number | null> {
    const { rows } = await pool.query<{
      now: string;
      wake: string | null;
      next: string | null;
      due: string | null;
    }>(
      `select app_now_ms() as now,
              (select wake_at_ms from actor_instances where id = $1) as wake,
              least((select min(available_at_ms) from actor_mailbox
                      where instance_id = $1 and state = 'pending'),
                    (select min(run_at_ms) from effects
                      where origin_instance_id = $1 and status = 'pending'),
                    -- An open explicit check (a callback in the post-effect drain staged it):
                    -- due now, so this wake answers it instead of the next minute's pass.
                    (select app_now_ms() from effect_recovery_checks
                      where origin_instance_id = $1 and outcome is null limit 1)) as next,
              (${RECOVERY_DUE_SQL}) as due`,
      [instanceId, config.staleAfterMs, config.takeoverKinds ?? []],
    );
    const row = rows[0]!;
    const dbNow = Number(row.now);
    // Database time decides due-ness; translate to this isolate's clock for the alarm.
    const local = (dbMs: number) => Date.now() + Math.max(0, dbMs - dbNow);
    // A pass that just ran and left a claim still due (a decision failed, or the owner's
    // row is locked) is retried after PUMP_RETRY_MS, never in a tight loop.
    const recoverAt =
      row.due === null
        ? null
        : Math.max(
            local(Number(row.due)) + RECOVERY_MARGIN_MS,
            recoveredAt === null ? 0 : recoveredAt + PUMP_RETRY_MS,
          );
    await this.storeRecoveryAt(recoverAt);
    const candidates = [row.wake, row.next]
      .filter((v): v is string => typeof v === 'string')
      .map((v) => local(Number(v)));
    if (recoverAt !== null) candidates.push(recoverAt);
    if (candidates.length === 0) {
      await this.alarmClock.delete();
      return null;
    }
    const at = Math.min(...candidates);
    await this.alarmClock.set(at);
    return at;
  }
}
