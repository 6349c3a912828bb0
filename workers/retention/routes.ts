import { Hono } from 'hono';
import { z } from 'zod';
import type { AppEnv } from '../context';
import type { Env } from '../env';
import { AppError } from '../errors';
import { readJsonBody } from '../lib/json-body';
import { requireAdmin } from '../middleware';

/** The one RetentionCleanup object every route and the hourly cron talk to. */
export function retentionOwner(env: Env) {
  return env.RETENTION_CLEANUP.get(env.RETENTION_CLEANUP.idFromName('singleton'));
}

const EnableBody = z
  .object({
    // Optional lower daily budgets; the configured ones are the ceiling.
    dbBatchBudget: z.number().int().min(0).max(100_000).optional(),
    workerOpBudget: z.number().int().min(0).max(10_000).optional(),
  })
  .strict();

/** Admin routes of the retention cleanup owner (docs/retention.md). */
export const retentionAdmin = new Hono<AppEnv>()
  .post('/enable', requireAdmin(), async (c) => {
    const result = await retentionOwner(c.env).enable(await readJsonBody(c, EnableBody, { optional: true }));
    if (!result.enabled)
      throw new AppError('precondition_failed', result.reason, { prerequisites: result.prerequisites });
    return c.json(result);
  })
  .post('/stop', requireAdmin(), async (c) => c.json(await retentionOwner(c.env).stop()))
  .get('/status', requireAdmin(), async (c) => c.json(await retentionOwner(c.env).status()));
