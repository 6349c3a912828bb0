import type { Context } from 'hono';
import { Hono } from 'hono';
import { z } from 'zod';
import type { AppEnv } from '../context';
import { AppError } from '../errors';
import { adminBearerToken } from '../lib/bearer';
import { constantTimeEqual } from '../lib/constant-time';
import { readJsonBody } from '../lib/json-body';
import type { Actor } from './control';
import { retentionOwner } from './owner';
import type { StopResult } from './types';

type Credential = Actor['credential'];

/**
 * The credential a request carries (docs/retention.md "Activation and rollback"): the
 * cleanup's own RETENTION_ADMIN_TOKEN, or the general ADMIN_TOKEN, each compared in constant
 * time. `allowed` lists which one the action accepts: enable and rollback only the cleanup's
 * own; stop (which only ever makes things safer) and status either.
 */
function authorize(c: Context<AppEnv>, allowed: readonly Credential[]): Credential {
  // The one admin form, exactly (lib/bearer.ts): the bare token is refused like any other.
  const given = adminBearerToken(c.req.header('authorization')) ?? '';
  const scoped = c.var.config.RETENTION_ADMIN_TOKEN;
  const held: Credential | null =
    scoped && constantTimeEqual(given, scoped)
      ? 'retention_admin'
      : constantTimeEqual(given, c.var.config.ADMIN_TOKEN)
        ? 'admin'
        : null;
  if (held === null) throw new AppError('unauthorized', 'Admin token required');
  if (allowed.includes(held)) return held;
  if (!scoped)
    throw new AppError(
      'service_unavailable',
      'RETENTION_ADMIN_TOKEN is not configured: the cleanup cannot be activated',
    );
  throw new AppError(
    'forbidden',
    'This action needs the retention cleanup credential (RETENTION_ADMIN_TOKEN)',
  );
}

// The operator asking, recorded with the action (an email or handle; no control characters).
const Operator = z
  .string()
  .trim()
  .min(1)
  .max(200)
  .regex(/^[^\p{Cc}]+$/u, 'printable characters only');

export const EnableBody = z
  .object({
    operator: Operator,
    // The stop generation the operator read (GET status: control.generation): compare-and-set.
    generation: z.number().int().min(0),
    // Optional lower daily budgets; the configured ones are the ceiling.
    dbBatchBudget: z.number().int().min(0).max(100_000).optional(),
    workerOpBudget: z.number().int().min(0).max(10_000).optional(),
  })
  .strict();

export const StopBody = z.object({ operator: Operator }).strict();

function actor(c: Context<AppEnv>, operator: string, credential: Credential): Actor {
  return { operator, credential, requestId: c.var.requestId };
}

/** A stop whose database fence did not commit: acknowledged, but not yet safe to call done. */
function unconfirmed(result: Extract<StopResult, { confirmed: false }>): AppError {
  return new AppError(
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
}

/** Admin routes of the retention cleanup (docs/retention.md). */
export const retentionAdmin = new Hono<AppEnv>()
  .post('/enable', async (c) => {
    const credential = authorize(c, ['retention_admin']);
    const { operator, ...request } = await readJsonBody(c, EnableBody);
    const result = await retentionOwner(c.env).enable({ ...request, actor: actor(c, operator, credential) });
    if (result.refused === 'prerequisites')
      throw new AppError('precondition_failed', result.reason, { prerequisites: result.prerequisites });
    if (result.refused === 'generation_changed')
      throw new AppError('conflict', result.reason, {
        reason: 'generation_changed',
        generation: result.generation,
      });
    return c.json(result);
  })
  .post('/stop', async (c) => {
    const credential = authorize(c, ['retention_admin', 'admin']);
    const { operator } = await readJsonBody(c, StopBody);
    const result = await retentionOwner(c.env).stop({ actor: actor(c, operator, credential) });
    if (!result.confirmed) throw unconfirmed(result);
    return c.json(result);
  })
  .post('/rollback', async (c) => {
    const credential = authorize(c, ['retention_admin']);
    const { operator } = await readJsonBody(c, StopBody);
    const result = await retentionOwner(c.env).rollback({ actor: actor(c, operator, credential) });
    if (!result.stop.confirmed) throw unconfirmed(result.stop);
    return c.json(result);
  })
  .get('/status', async (c) => {
    authorize(c, ['retention_admin', 'admin']);
    return c.json(await retentionOwner(c.env).status());
  });
