import { DurableObject } from 'cloudflare:workers';
import type { Env } from '../workers/env';
import { log } from '../workers/log';
import { type MaintenanceReport, runTypingMaintenance } from '../workers/typing-ledger/maintenance';
import { Alarm } from './alarm';

export const MAINTENANCE_PERIOD_MS = 30_000;
/** Two triggers closer than this share one pass (a cron re-arm racing an alarm). */
const SAME_WINDOW_MS = MAINTENANCE_PERIOD_MS - 1_000;

export interface MaintenanceControl {
  /** On by default: the retention guarantees depend on these passes running. */
  enabled: boolean;
  stopGeneration: number;
  changedAt: number | null;
}

export interface MaintenanceStatus extends MaintenanceControl {
  lastRunAt: number | null;
  alarmAt: number | null;
  running: boolean;
  lastReport: (MaintenanceReport & { at: number; stopGeneration: number }) | null;
}

/**
 * Singleton that runs the typing-ledger maintenance every 30 seconds. Crons fire at most
 * once a minute, so the minute cron only keeps this object's alarm armed. The next run time
 * is always derived from the stored `lastRunAt`: an evicted object, a lost alarm or a
 * duplicate trigger all converge on one pass per window.
 *
 * Operators hold two controls (admin API): the enabled flag, and a stop generation. A run
 * is admitted against the generation it started with; `stop()` persists a new generation
 * (durable before it answers) and disables, so the running pass ends at its next step or
 * row, and no new pass starts until `enable()`.
 */
export class TypingMaintenance extends DurableObject<Env> {
  private running: Promise<unknown> | null = null;
  private live: MaintenanceControl = { enabled: true, stopGeneration: 0, changedAt: null };
  private readonly alarmClock = new Alarm(this.ctx.storage, this.env);

  async ensureArmed(): Promise<{ alarmAt: number; rearmed: boolean }> {
    const current = await this.alarmClock.get();
    if (current !== null) return { alarmAt: current, rearmed: false };
    const at = await this.nextRunAt();
    await this.alarmClock.set(at);
    return { alarmAt: at, rearmed: true };
  }

  private async save(c: MaintenanceControl): Promise<void> {
    this.live = c;
    await this.ctx.storage.put('control', c);
  }

  private async control(): Promise<MaintenanceControl> {
    return (
      (await this.ctx.storage.get<MaintenanceControl>('control')) ?? {
        enabled: true,
        stopGeneration: 0,
        changedAt: null,
      }
    );
  }

  async status(): Promise<MaintenanceStatus> {
    return {
      ...(await this.control()),
      lastRunAt: (await this.ctx.storage.get<number>('lastRunAt')) ?? null,
      alarmAt: await this.alarmClock.get(),
      running: this.running !== null,
      lastReport: (await this.ctx.storage.get<MaintenanceStatus['lastReport']>('lastReport')) ?? null,
    };
  }

  async enable(): Promise<MaintenanceStatus> {
    const c = await this.control();
    await this.save({ ...c, enabled: true, changedAt: Date.now() });
    log.info('typing_maintenance_enabled', { stopGeneration: c.stopGeneration });
    await this.ensureArmed();
    return this.status();
  }

  /** Disables future passes; a pass already running finishes its current step and row. */
  async disable(): Promise<MaintenanceStatus> {
    const c = await this.control();
    await this.save({ ...c, enabled: false, changedAt: Date.now() });
    log.warn('typing_maintenance_disabled', { stopGeneration: c.stopGeneration });
    return this.status();
  }

  /** New stop generation (durable first), disabled, then waits for the running pass to end. */
  async stop(): Promise<MaintenanceStatus & { drained: boolean }> {
    const c = await this.control();
    const next = { enabled: false, stopGeneration: c.stopGeneration + 1, changedAt: Date.now() };
    await this.save(next);
    await this.ctx.storage.sync();
    log.warn('typing_maintenance_stopped', { stopGeneration: next.stopGeneration });
    const wasRunning = this.running;
    // By design: the pass's own failure is logged by alarm() (typing_maintenance_failed).
    if (wasRunning) await wasRunning.catch(() => undefined);
    return { ...(await this.status()), drained: true };
  }

  private async nextRunAt(): Promise<number> {
    const last = await this.ctx.storage.get<number>('lastRunAt');
    return last === undefined ? Date.now() : Math.max(Date.now(), last + MAINTENANCE_PERIOD_MS);
  }

  override async alarm(): Promise<void> {
    const now = Date.now();
    const last = await this.ctx.storage.get<number>('lastRunAt');
    if (last !== undefined && now - last < SAME_WINDOW_MS) {
      await this.alarmClock.set(last + MAINTENANCE_PERIOD_MS);
      return;
    }
    await this.ctx.storage.put('lastRunAt', now);
    // Re-arm first: a pass that throws or outlives its isolate must not stop the cadence.
    await this.alarmClock.set(now + MAINTENANCE_PERIOD_MS);
    const control = await this.control();
    if (!control.enabled || this.running) return;
    // stop()/disable() run in this same object between the pass's awaits and update this
    // in-memory copy synchronously, so the running pass sees them at its next step or row.
    this.live = control;
    const generation = control.stopGeneration;
    const admit = () => this.live.enabled && this.live.stopGeneration === generation;
    const run = runTypingMaintenance(this.env, { admit });
    this.running = run;
    try {
      const report = await run;
      await this.ctx.storage.put('lastReport', { ...report, at: now, stopGeneration: generation });
      log.info('typing_maintenance_run', { ...summary(report) });
    } catch (err) {
      log.error('typing_maintenance_failed', { error: err });
    } finally {
      this.running = null;
    }
  }
}

/** The counters of one run for the log line (no row ids, no contents). */
function summary(r: MaintenanceReport) {
  return {
    durationMs: r.durationMs,
    stopped: r.stopped,
    expire: r.expire,
    prune: r.prune,
    receipts: r.receipts,
    retry: r.retry,
  };
}
