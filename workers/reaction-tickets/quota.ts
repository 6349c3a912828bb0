import type { ReserveResult } from '../../durable-objects/workspace-quota';
import type { Config, Env } from '../env';
import { AppError } from '../errors';
import { withTimeout } from '../lib/timeout';
import { log } from '../log';
import { outstandingOperations } from './tickets';
import type { Queryable } from './types';

/** The Worker side of the WorkspaceQuota protocol: every call has a timeout. */
const DO_TIMEOUT_MS = 2000;

function bounded<T>(p: Promise<T>, what: string): Promise<T> {
  return withTimeout(p, DO_TIMEOUT_MS, () => new AppError('service_unavailable', `${what} timed out`));
}

function stub(env: Env, workspaceId: string) {
  return env.WORKSPACE_QUOTA.get(env.WORKSPACE_QUOTA.idFromName(workspaceId));
}

/**
 * Reserves an issuance slot for (actor, operation). At the outstanding bound it reconciles
 * the DO's leases with the database once (a lost release must not wedge the actor), then
 * answers 429 with Retry-After if still over.
 */
export async function reserveIssuance(
  env: Env,
  config: Config,
  db: Queryable,
  workspaceId: string,
  actorId: string,
  operationId: string,
): Promise<void> {
  const quota = stub(env, workspaceId);
  const input = {
    actorId,
    operationId,
    ttlMs: config.REACTION_TICKET_TTL_SECONDS * 1000,
    maxOutstanding: config.REACTION_TICKET_MAX_OUTSTANDING,
    ratePerMinute: config.REACTION_TICKET_RATE_PER_MINUTE,
  };
  let result: ReserveResult = await bounded<ReserveResult>(quota.reserveTicket(input), 'quota');
  if (!result.ok && result.reason === 'outstanding') {
    const live = await outstandingOperations(db, actorId);
    const dropped = await bounded<number>(quota.reconcileOutstanding(actorId, live), 'quota');
    if (dropped > 0) result = await bounded<ReserveResult>(quota.reserveTicket(input), 'quota');
  }
  if (!result.ok) {
    const code = result.reason === 'rate' ? 'rate_limited' : 'quota_exceeded';
    throw new AppError(
      code,
      result.reason === 'rate'
        ? 'Too many tickets requested; slow down'
        : 'Too many outstanding tickets; apply or retire some first',
      { reason: result.reason, retryAfterSeconds: result.retryAfterSeconds },
      { 'retry-after': String(result.retryAfterSeconds) },
    );
  }
}

/** Frees the slot of an operation that applied, retired or was refused. Best effort. */
export async function releaseIssuance(env: Env, workspaceId: string, actorId: string, operationId: string) {
  try {
    await bounded(stub(env, workspaceId).releaseTicket(actorId, operationId), 'quota release');
  } catch (err) {
    log.warn('quota_release_failed', { workspaceId, error: err });
  }
}
