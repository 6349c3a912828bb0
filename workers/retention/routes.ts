import { Hono } from 'hono';
import { z } from 'zod';
import type { AppEnv } from '../context';
import type { Env } from '../env';
import { AppError } from '../errors';
import { readJsonBody } from '../lib/json-body';
import { requireAdmin } from '../middleware';

/**
 * The retention cleanup Worker (retention.wrangler.toml) through the RETENTION service
 * binding: its RPC methods hand over to its one RetentionCleanup object.
 */
export function retentionOwner(env: Env) {
  return env.RETENTION;
}

const EnableBody = z
  .object({
    // The stop generation the operator read (GET status: control.generation): compare-and-set.
    generation: z.number().int().min(0),
    // Optional lower daily budgets; the configured ones are the ceiling.
    dbBatchBudget: z.number().int().min(0).max(100_000).optional(),
    workerOpBudget: z.number().int().min(0).max(10_000).optional(),
  })
  .strict();

/** Admin routes of the retention cleanup owner (docs/retention.md). */
export const retentionAdmin = new Hono<AppEnv>()
  .post('/enable', requireAdmin(), async (c) => {
    const result = await retentionOwner(c.env).enable(await readJsonBody(c, EnableBody));
    if (result.refused === 'prerequisites')
      throw new AppError('precondition_failed', result.reason, { prerequisites: result.prerequisites });
    if (result.refused === 'generation_changed')
      throw new AppError('conflict', result.reason, {
        reason: 'generation_changed',
        generation: result.generation,
      });
    return c.json(result);
  })
  .post('/stop', requireAdmin(), async (c) => {
    const result = await retentionOwner(c.env).stop();
    if (!result.confirmed)
      throw new AppError(
        'service_unavailable',
        'Stop acknowledged and execution disabled, but the database fence did not commit: stop again',
        {
          reason: 'stop_unconfirmed',
          stopGeneration: result.stopGeneration,
          acknowledgedAt: result.acknowledgedAt,
          error: result.error,
        },
        { 'retry-after': '5' },
      );
    return c.json(result);
  })
  .get('/status', requireAdmin(), async (c) => c.json(await retentionOwner(c.env).status()));
