import { DurableObject } from 'cloudflare:workers';
import type { Env } from '../workers/env';

/**
 * Singleton owner of the hourly receipt and fence cleanup. Starts disabled; the hourly cron
 * asks it to run and it decides from its own stored state.
 */
export class RetentionCleanup extends DurableObject<Env> {
  async scheduledRun(scheduledTime: number): Promise<{ ran: boolean; reason: string }> {
    await this.ctx.storage.put('lastCronAt', scheduledTime);
    return { ran: false, reason: 'disabled' };
  }

  async lastCronAt(): Promise<number | null> {
    return (await this.ctx.storage.get<number>('lastCronAt')) ?? null;
  }
}
