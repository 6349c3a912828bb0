import { DurableObject } from 'cloudflare:workers';
import type { Env } from '../workers/env';
import { log } from '../workers/log';
import { type MaintenanceReport, runTypingMaintenance } from '../workers/typing-ledger/maintenance';

export const MAINTENANCE_PERIOD_MS = 30_000;
/** Two triggers closer than this share one pass (a cron re-arm racing an alarm). */
const SAME_WINDOW_MS = MAINTENANCE_PERIOD_MS - 1_000;

/**
 * Singleton that runs the typing-ledger maintenance every 30 seconds. Crons fire at most
 * once a minute, so the minute cron only keeps this object's alarm armed. The next run time
 * is always derived from the stored `lastRunAt`: an evicted object, a lost alarm or a
 * duplicate trigger all converge on one pass per window.
 */
export class TypingMaintenance extends DurableObject<Env> {
  async ensureArmed(): Promise<{ alarmAt: number; rearmed: boolean }> {
    const current = await this.ctx.storage.getAlarm();
    if (current !== null) return { alarmAt: current, rearmed: false };
    const at = await this.nextRunAt();
    await this.ctx.storage.setAlarm(at);
    return { alarmAt: at, rearmed: true };
  }

  async status(): Promise<{
    lastRunAt: number | null;
    alarmAt: number | null;
    lastReport: MaintenanceReport | null;
  }> {
    return {
      lastRunAt: (await this.ctx.storage.get<number>('lastRunAt')) ?? null,
      alarmAt: await this.ctx.storage.getAlarm(),
      lastReport: (await this.ctx.storage.get<MaintenanceReport>('lastReport')) ?? null,
    };
  }

  private async nextRunAt(): Promise<number> {
    const last = await this.ctx.storage.get<number>('lastRunAt');
    return last === undefined ? Date.now() : Math.max(Date.now(), last + MAINTENANCE_PERIOD_MS);
  }

  override async alarm(): Promise<void> {
    const now = Date.now();
    const last = await this.ctx.storage.get<number>('lastRunAt');
    if (last !== undefined && now - last < SAME_WINDOW_MS) {
      await this.ctx.storage.setAlarm(last + MAINTENANCE_PERIOD_MS);
      return;
    }
    await this.ctx.storage.put('lastRunAt', now);
    // Re-arm first: a pass that throws or outlives its isolate must not stop the cadence.
    await this.ctx.storage.setAlarm(now + MAINTENANCE_PERIOD_MS);
    try {
      const report = await runTypingMaintenance(this.env);
      await this.ctx.storage.put('lastReport', { ...report, at: now });
    } catch (err) {
      log.error('typing_maintenance_failed', { error: err });
    }
  }
}
