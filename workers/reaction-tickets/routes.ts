import { createRoute, OpenAPIHono, type z } from '@hono/zod-openapi';
import type { Pool, PoolClient } from '@neondatabase/serverless';
import { type ActorEnv, requireActor } from '../auth/actor-jwt';
import { AppError } from '../errors';
import { limitBody } from '../lib/body-limit';
import { assertStorable } from '../lib/json-body';
import { enforceRateLimit } from '../rate-limit';
import { reactionBudget, runReactionTx } from './budget';
import { admitToMessage } from './directory';
import { applyLegacy, retireLegacy } from './legacy';
import { lockMessage } from './locks';
import { chargeIssuance } from './quota';
import { readReactions, toggleReaction } from './reactions';
import * as S from './schemas';
import { applyWithTicket, retireWithTicket } from './ticket-call';
import { signTicket, ticketKeyVersion, verifyTicket } from './ticket-token';
import { findTicketByOperation, issueTicket } from './tickets';

/**
 * The /v1 mobile reaction API. Every route authenticates the actor (JWT) and re-checks
 * conversation admission inside its own transaction; every body is validated by the zod
 * schemas that also produce /v1/openapi.json. Failures use the one error shape.
 */
export const reactionApi = new OpenAPIHono<ActorEnv>({
  defaultHook: (result) => {
    if (!result.success)
      throw new AppError('validation_failed', 'Request validation failed', result.error.issues);
    // The one storable-text check every route's input passes (lib/pg-text.ts), whatever the
    // schema of the field says.
    assertStorable(result.data);
  },
});

const MAX_BODY_BYTES = 4096;
reactionApi.openAPIRegistry.registerComponent('securitySchemes', 'actorBearer', {
  type: 'http',
  scheme: 'bearer',
  bearerFormat: 'JWT',
});
for (const path of ['/reaction-tickets', '/reaction-operations/*', '/messages/*']) {
  reactionApi.use(path, requireActor());
  // Per actor, after authentication (an unauthenticated request costs no database work).
  reactionApi.use(path, async (c, next) => {
    await enforceRateLimit(c.env.V1_ACTOR_RATE_LIMIT, 'actor', c.var.actor.actorId);
    await next();
  });
  reactionApi.use(path, limitBody(MAX_BODY_BYTES));
}

const security = [{ actorBearer: [] }];
const json = <T>(schema: T, description: string) => ({
  description,
  content: { 'application/json': { schema } },
});

/** Resolves the bearer ticket to its ID; a forged or malformed ticket never reaches SQL. */
async function ticketIdOf(keys: Record<string, string>, token: string): Promise<string> {
  const id = await verifyTicket(keys, token);
  if (!id) throw new AppError('ticket_invalid', 'The ticket is not valid for this actor and operation');
  return id;
}

/** PUT and retire: an operation ID in the path, a JSON body, the ticketed call's answers. */
function operationRoute<
  M extends 'put' | 'post',
  P extends string,
  B extends z.ZodType,
  R extends { description: string; content: { 'application/json': { schema: z.ZodType } } },
>(route: { method: M; path: P; summary: string; body: B; result: R }) {
  return createRoute({
    method: route.method,
    path: route.path,
    summary: route.summary,
    security,
    request: {
      params: S.OperationParams,
      body: { required: true, content: { 'application/json': { schema: route.body } } },
    },
    responses: {
      200: route.result,
      ...S.errors(...S.COMMON_ERRORS, ...S.BODY_ERRORS, ...S.TICKETED_CALL_ERRORS),
    },
  });
}

type OperationConfig = Parameters<typeof runReactionTx>[1] & { SECRET_KEYS: Record<string, string> };

/**
 * The one fork of PUT and retire: without a ticket, the legacy contract's path in a reaction
 * transaction; with one, the ticketed call, one statement in its own transaction
 * (ticket-call.ts), so no runReactionTx around it.
 */
async function byTicketOrLegacy<L, T>(
  db: () => Pool,
  config: OperationConfig,
  ticket: string | undefined,
  legacy: (client: PoolClient) => Promise<L>,
  ticketed: (pool: Pool, budget: ReturnType<typeof reactionBudget>, ticketId: string) => Promise<T>,
): Promise<L | T> {
  if (ticket === undefined) return runReactionTx(db(), config, legacy);
  // Verified before the request's pool is asked for: a forged ticket costs no database work.
  const ticketId = await ticketIdOf(config.SECRET_KEYS, ticket);
  return ticketed(db(), reactionBudget(config), ticketId);
}

reactionApi.openapi(
  createRoute({
    method: 'post',
    path: '/reaction-tickets',
    summary: 'Issue an operation ticket bound to the actor, operation ID, intent and an absolute expiry',
    security,
    request: { body: { required: true, content: { 'application/json': { schema: S.TicketRequest } } } },
    responses: {
      200: json(S.Ticket, 'The same ticket again (a retried issuance)'),
      201: json(S.Ticket, 'A new ticket'),
      ...S.errors(
        ...S.COMMON_ERRORS,
        ...S.BODY_ERRORS,
        'not_found',
        'intent_mismatch',
        'conflict',
        'operation_expired',
        'operation_clock_skew',
        'quota_exceeded',
      ),
    },
  }),
  async (c) => {
    const body = c.req.valid('json');
    const { actorId, issuedAt } = c.var.actor;
    const config = c.var.config;
    const pool = c.var.db();
    const intent = { messageId: body.messageId, emoji: body.emoji, desired: body.desired };
    const admission = await admitToMessage(pool, actorId, issuedAt, body.messageId);
    // A retried issuance (lost response) is not charged again. Two first tries racing may both
    // be charged: the rate only errs on the strict side. The outstanding bound is issueTicket's.
    if (!(await findTicketByOperation(pool, actorId, body.operationId)))
      await chargeIssuance(c.env, config, admission.workspaceId, actorId);
    const keyVersion = ticketKeyVersion(config.SECRET_KEYS);
    const { ticket, replayed } = await runReactionTx(pool, config, (client) =>
      issueTicket(client, {
        actorId,
        operationId: body.operationId,
        intent,
        admission,
        ttlSeconds: config.REACTION_TICKET_TTL_SECONDS,
        keyVersion,
        maxOutstanding: config.REACTION_TICKET_MAX_OUTSTANDING,
      }),
    );
    const out = {
      ticket: await signTicket(config.SECRET_KEYS, ticket.key_version, ticket.id),
      operationId: ticket.operation_id,
      intent: { messageId: ticket.message_id, emoji: ticket.emoji, desired: ticket.desired },
      issuedAt: new Date(ticket.created_at).toISOString(),
      expiresAt: new Date(ticket.expires_at).toISOString(),
      replayed,
    };
    return replayed ? c.json(out, 200) : c.json(out, 201);
  },
);

reactionApi.openapi(
  operationRoute({
    method: 'put',
    path: '/reaction-operations/{operationId}',
    summary: 'Apply the desired state of a ticketed operation (replays return the same receipt)',
    body: S.WriteRequest,
    result: json(S.WriteResult, 'Applied, or the receipt of an earlier application'),
  }),
  async (c) => {
    const { operationId } = c.req.valid('param');
    const body = c.req.valid('json');
    const caller = c.var.actor;
    const config = c.var.config;
    const intent = { messageId: body.messageId, emoji: body.emoji, desired: body.desired };
    const result = await byTicketOrLegacy(
      c.var.db,
      config,
      body.ticket,
      (client) => applyLegacy(client, caller, operationId, intent, config.REACTION_TICKET_TTL_SECONDS),
      (pool, budget, ticketId) => applyWithTicket(pool, budget, caller, operationId, ticketId, intent),
    );
    return c.json(result, 200);
  },
);

reactionApi.openapi(
  operationRoute({
    method: 'post',
    path: '/reaction-operations/{operationId}/retire',
    summary: 'Retire an unapplied operation: a fence so a delayed write of it can never apply',
    body: S.RetireRequest,
    result: json(S.RetireResult, 'Retired, or the receipt if it had already applied'),
  }),
  async (c) => {
    const { operationId } = c.req.valid('param');
    const body = c.req.valid('json');
    const caller = c.var.actor;
    const config = c.var.config;
    const result = await byTicketOrLegacy(
      c.var.db,
      config,
      body.ticket,
      (client) => retireLegacy(client, caller, operationId),
      (pool, budget, ticketId) => retireWithTicket(pool, budget, caller, operationId, ticketId),
    );
    return c.json(result, 200);
  },
);

reactionApi.openapi(
  createRoute({
    method: 'get',
    path: '/messages/{messageId}/reactions',
    summary: 'The exact current reactions of a message',
    security,
    request: { params: S.MessageParams },
    responses: {
      200: json(S.MessageReactions, 'Current reactions'),
      ...S.errors(...S.COMMON_ERRORS, 'not_found'),
    },
  }),
  async (c) => {
    const { messageId } = c.req.valid('param');
    const pool = c.var.db();
    await admitToMessage(pool, c.var.actor.actorId, c.var.actor.issuedAt, messageId);
    const current = await readReactions(pool, messageId);
    if (!current) throw new AppError('not_found', 'Message not found');
    return c.json(current, 200);
  },
);

reactionApi.openapi(
  createRoute({
    method: 'post',
    path: '/messages/{messageId}/reactions/toggle',
    summary: 'Web compatibility toggle: flips one reaction; no ticket, no receipt',
    security,
    request: {
      params: S.MessageParams,
      body: { required: true, content: { 'application/json': { schema: S.ToggleRequest } } },
    },
    responses: {
      200: json(S.ToggleResult, 'Toggled'),
      ...S.errors(...S.COMMON_ERRORS, ...S.BODY_ERRORS, 'not_found'),
    },
  }),
  async (c) => {
    const { messageId } = c.req.valid('param');
    const { emoji } = c.req.valid('json');
    const { actorId, issuedAt } = c.var.actor;
    const result = await runReactionTx(c.var.db(), c.var.config, async (client) => {
      await admitToMessage(client, actorId, issuedAt, messageId);
      const locked = await lockMessage(client, messageId);
      if (!locked) throw new AppError('not_found', 'Message not found');
      const { outcome } = await toggleReaction(client, messageId, actorId, emoji, locked.version);
      return { outcome, message: (await readReactions(client, messageId))! };
    });
    return c.json(result, 200);
  },
);

/**
 * GET /v1/openapi.json. app.ts mounts this API at /v1 and the paths above are relative to
 * it, so the document adds the base: it names the full paths a client calls.
 */
const MOUNTED_AT = '/v1';
reactionApi.get('/openapi.json', (c) => {
  const doc = reactionApi.getOpenAPI31Document({
    openapi: '3.1.0',
    info: {
      title: 'reaction-ledger mobile reaction API',
      version: '1.0.0',
      description:
        'Operation tickets, receipts and retirement fences. Errors: {error:{code,message,requestId,details?}}.',
    },
  });
  const paths = Object.entries(doc.paths ?? {}).map(([path, item]) => [MOUNTED_AT + path, item]);
  return c.json({ ...doc, paths: Object.fromEntries(paths) });
});
