import type { ChargeResult } from '../../durable-objects/workspace-quota';
import type { Config, Env } from '../env';
import { AppError } from '../errors';
import { withTimeout } from '../lib/timeout';

/**
 * The issuance RATE, charged at the WorkspaceQuota DO before the issuing transaction. The
 * outstanding bound is the database's (issueTicket counts under a per-actor lock). Both answer
 * 429 `quota_exceeded` (details.reason 'rate' or 'outstanding'); `rate_limited` is only the
 * request limiter every authenticated /v1 route passes (rate-limit.ts), so a client can tell
 * "issue fewer tickets" from "this request, whatever it was, came too fast" (issue 29 hole 1).
 */
const DO_TIMEOUT_MS = 2000;

export async function chargeIssuance(
  env: Env,
  config: Pick<Config, 'REACTION_TICKET_RATE_PER_MINUTE'>,
  workspaceId: string,
  actorId: string,
): Promise<void> {
  const quota = env.WORKSPACE_QUOTA.get(env.WORKSPACE_QUOTA.idFromName(workspaceId));
  const result = await withTimeout<ChargeResult>(
    quota.chargeIssuance({ actorId, ratePerMinute: config.REACTION_TICKET_RATE_PER_MINUTE }),
    DO_TIMEOUT_MS,
    () => new AppError('service_unavailable', 'quota timed out'),
  );
  if (!result.ok)
    throw new AppError(
      'quota_exceeded',
      'Too many tickets requested; slow down',
      { reason: 'rate', retryAfterSeconds: result.retryAfterSeconds },
      { 'retry-after': String(result.retryAfterSeconds) },
    );
}
