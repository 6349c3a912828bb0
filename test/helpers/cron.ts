import { createExecutionContext, createScheduledController, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import worker from '../../workers/index';

/** Runs the Worker's scheduled handler for `cron` and waits for all it left in waitUntil. */
export async function runCron(cron = '* * * * *', scheduledTime = Date.now()): Promise<void> {
  const ctx = createExecutionContext();
  await worker.scheduled(createScheduledController({ cron, scheduledTime }), env, ctx);
  await waitOnExecutionContext(ctx);
}

/**
 * The retention cleanup Worker's `0 * * * *` tick: its `scheduled` handler with the cron and
 * time a Cron Trigger passes, called through the main Worker's RETENTION service binding (the
 * retention Worker runs as an auxiliary Worker of the workers project). The binding targets a
 * WorkerEntrypoint, so this is an RPC call of that method; a failing handler rejects it.
 */
export async function fireRetentionCron(scheduledTime: number, cron = '0 * * * *'): Promise<void> {
  const target = env.RETENTION as unknown as {
    scheduled(controller: { cron: string; scheduledTime: number }): Promise<void>;
  };
  await target.scheduled({ cron, scheduledTime });
}
