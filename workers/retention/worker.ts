import { WorkerEntrypoint } from 'cloudflare:workers';
import { log } from '../log';
import { loadRetentionConfig, type RetentionEnv } from './config';
import type {
  EnableRequest,
  EnableResult,
  RetentionStatus,
  RollbackResult,
  StopRequest,
  StopResult,
} from './types';

export { RetentionCleanup } from '../../durable-objects/retention-cleanup';

/** The hourly cron of retention.wrangler.toml, its only schedule (a main module exports handlers only). */
const HOURLY_CRON = '0 * * * *';

/**
 * The retention cleanup Worker (retention.wrangler.toml, docs/retention.md): its own hourly
 * Cron Trigger, its own RetentionCleanup Durable Object and budgets. It has no public route:
 * the main Worker's admin routes reach it through the RETENTION service binding and call the
 * RPC methods below, which hand over to the one `singleton` object. The caller has checked
 * the credential (the cleanup's own for enable and rollback) and names the actor; this Worker
 * is reachable by nothing else.
 */
export default class RetentionWorker extends WorkerEntrypoint<RetentionEnv> {
  private owner() {
    return this.env.RETENTION_CLEANUP.get(this.env.RETENTION_CLEANUP.idFromName('singleton'));
  }

  /** No HTTP surface (workers_dev = false, no routes); only the service binding's RPC. */
  override async fetch(): Promise<Response> {
    return new Response('Not found', { status: 404 });
  }

  override async scheduled(controller: ScheduledController): Promise<void> {
    loadRetentionConfig(this.env);
    if (controller.cron !== HOURLY_CRON) {
      log.error('cron_unknown_expression', { cron: controller.cron });
      return;
    }
    const started = Date.now();
    try {
      const result = await this.owner().scheduledRun(controller.scheduledTime);
      log.info('cron_done', { cron: controller.cron, durationMs: Date.now() - started, result });
    } catch (err) {
      // Rethrown so the runtime records the invocation as failed; the next tick resumes.
      log.error('cron_failed', { cron: controller.cron, error: err });
      throw err;
    }
  }

  async enable(request: EnableRequest): Promise<EnableResult> {
    return this.owner().enable(request);
  }

  async stop(request: StopRequest): Promise<StopResult> {
    return this.owner().stop(request);
  }

  async rollback(request: StopRequest): Promise<RollbackResult> {
    return this.owner().rollback(request);
  }

  async status(): Promise<RetentionStatus> {
    return this.owner().status();
  }
}
