import { DurableObject } from 'cloudflare:workers';
import type { Pool } from '@neondatabase/serverless';
import { openPool } from '../workers/db/pool';
import { effectConfigFrom, heartbeatEveryMs } from '../workers/effects/host-config';
import { loadInstance } from '../workers/effects/mailbox';
import { heartbeat, registerProcess, releaseProcess } from '../workers/effects/processes';
import { processRecoveryChecks } from '../workers/effects/recovery';
import { effectRegistry } from '../workers/effects/registry';
import { drainInstance, runClaimedEffects } from '../workers/effects/runner';
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
  /** Next alarm (epoch ms) or null: a due timer, or the next heartbeat while holding claims. */
  alarmAt: number | null;
}

const EFFECT_BATCH = 20;
/**
 * After a failed pump (a handler threw, the database was unreachable) the host retries from
 * its alarm, whether the pump ran from an RPC wake or from the alarm: a failing message
 * counts one delivery attempt per retry and is dead after `mailboxMaxAttempts`.
 */
export const PUMP_RETRY_MS = 5000;

/**
 * One per actor instance. `wake()` after every commit that gives the instance work: it
 * drains the mailbox into the actor's handler (one fenced commit per message), answers
 * open recovery checks, then claims and runs the instance's effects as a registered
 * process. While effects are in flight the alarm heartbeats that process; otherwise the
 * alarm is the actor's timer. Every fact lives in Postgres: an evicted host loses nothing,
 * and the minute cron's pass recovers what a dead host held.
 */
export class ActorHost extends DurableObject<Env> {
  private pumping: Promise<PumpReport> | null = null;
  private again = false;
  private readonly alarmClock = new Alarm(this.ctx.storage, this.env);

  /** RPC: the instance has (or may have) work. Concurrent wakes coalesce into one more pump. */
  async wake(instanceId: string): Promise<PumpReport> {
    await this.ctx.storage.put('instanceId', instanceId);
    if (this.pumping) {
      this.again = true;
      return this.pumping;
    }
    this.pumping = (async () => {
      try {
        const total: PumpReport = {
          handled: 0,
          checks: 0,
          claimed: 0,
          completed: 0,
          failed: 0,
          alarmAt: null,
        };
        do {
          this.again = false;
          const r = await this.pump(instanceId);
          total.handled += r.handled;
          total.checks += r.checks;
          total.claimed += r.claimed;
          total.completed += r.completed;
          total.failed += r.failed;
          total.alarmAt = r.alarmAt;
        } while (this.again);
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
      // process the pump still holds: one it already released needs no heartbeat.
      const processId = await this.ctx.storage.get<string>('processId');
      if (processId)
        await this.withPool((pool) => heartbeat(pool, processId)).catch((err) =>
          log.error('actor_host_heartbeat_failed', { instanceId, error: err }),
        );
      await this.alarmClock.set(Date.now() + heartbeatEveryMs(this.config()));
      this.again = true;
      return;
    }
    try {
      await this.wake(instanceId);
    } catch (err) {
      log.error('actor_host_pump_failed', { instanceId, error: err });
      await this.alarmClock.set(Date.now() + PUMP_RETRY_MS);
    }
  }

  private config(): EffectRuntimeConfig {
    return effectConfigFrom(loadConfig(this.env) as Config);
  }

  private async withPool<T>(fn: (pool: Pool) => Promise<T>): Promise<T> {
    const pool = openPool(loadConfig(this.env), 4);
    try {
      return await fn(pool);
    } finally {
      await pool.end();
    }
  }

  /** Heartbeats the host's process, registering a new one if it was stopped or pruned. */
  private async beat(pool: Pool): Promise<string> {
    const known = await this.ctx.storage.get<string>('processId');
    if (known && (await heartbeat(pool, known))) return known;
    const id = await registerProcess(pool, 'actor-host');
    await this.ctx.storage.put('processId', id);
    return id;
  }

  private async pump(instanceId: string): Promise<PumpReport> {
    const config = this.config();
    return this.withPool(async (pool) => {
      const inst = await loadInstance(pool, instanceId);
      if (inst && !effectRegistry.actor(inst.actor_type)) {
        // No code here can run this instance: a retry alarm would fail every few seconds
        // forever. Log, go quiet; the minute poll skips such instances too (one log a pass).
        log.error('actor_host_unregistered_type', { instanceId, actorType: inst.actor_type });
        await this.alarmClock.delete();
        return { handled: 0, checks: 0, claimed: 0, completed: 0, failed: 0, alarmAt: null };
      }
      const handled = await drainInstance(pool, effectRegistry, instanceId, config);
      const checks = (await processRecoveryChecks(pool, instanceId, config)).size;
      const processId = await this.beat(pool);
      const report = { handled, checks, claimed: 0, completed: 0, failed: 0, alarmAt: null as number | null };
      for (;;) {
        // Heartbeat cadence while claims may be held; nextAlarm() re-derives it afterwards.
        await this.alarmClock.setNoLaterThan(Date.now() + heartbeatEveryMs(config));
        const r = await runClaimedEffects(pool, effectRegistry, processId, {
          limit: EFFECT_BATCH,
          instanceId,
        });
        report.claimed += r.claimed;
        report.completed += r.completed;
        report.failed += r.failed;
        if (r.claimed < EFFECT_BATCH) break;
      }
      // Done with its claims: the process row goes (or, if a write-back failed and it still
      // owns an effect, stops with its heartbeat evidence kept). Rows then track work in
      // flight, not every conversation this service ever hosted; the next pump registers anew.
      await releaseProcess(pool, processId);
      await this.ctx.storage.delete('processId');
      // Completions may have sent callbacks (failed/completed) to this very mailbox.
      report.handled += await drainInstance(pool, effectRegistry, instanceId, config);
      report.alarmAt = await this.nextAlarm(pool, instanceId);
      return report;
    });
  }

  /** The actor's timer, a delayed message, or a pending effect's (retry) run time: the earliest. */
  private async nextAlarm(pool: Pool, instanceId: string): Promise<number | null> {
    const inst = await loadInstance(pool, instanceId);
    const { rows } = await pool.query<{ now: string; next: string | null }>(
      `select app_now_ms() as now,
              least((select min(available_at_ms) from actor_mailbox
                      where instance_id = $1 and state = 'pending'),
                    (select min(run_at_ms) from effects
                      where origin_instance_id = $1 and status = 'pending')) as next`,
      [instanceId],
    );
    const dbNow = Number(rows[0]!.now);
    const candidates = [inst?.wake_at_ms, rows[0]!.next]
      .filter((v): v is string => typeof v === 'string')
      .map(Number);
    if (candidates.length === 0) {
      await this.alarmClock.delete();
      return null;
    }
    // Database time decides due-ness; translate to this isolate's clock for the alarm.
    const at = Date.now() + Math.max(0, Math.min(...candidates) - dbNow);
    await this.alarmClock.set(at);
    return at;
  }
}
