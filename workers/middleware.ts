import type { Pool } from '@neondatabase/serverless';
import type { Context, MiddlewareHandler } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { ZodError } from 'zod';
import { systemClock } from './clock';
import type { AppEnv } from './context';
import { openPool } from './db/pool';
import { dbUnavailable, isDatabaseUnavailable } from './db/refusal';
import { loadConfig } from './env';
import { AppError, type ErrorBody } from './errors';
import { adminBearerToken } from './lib/bearer';
import { constantTimeEqual } from './lib/constant-time';
import { log, setLogLevel } from './log';
import { metric, since } from './metrics';

/** Builds the per-request services. A bad environment fails here, before any route. */
/**
 * One `http_answer_ms` point per answer (workers/metrics.ts): its stable code (or status when
 * it succeeded) and its route with ids taken out, so ticket outcomes, webhook answers and admin
 * calls graph by route and code. Outermost but one, so every answer is counted.
 */
export function measureAnswers(): MiddlewareHandler<AppEnv> {
  return async function measureAnswers(c, next) {
    const started = Date.now();
    try {
      await next();
    } finally {
      metric('http_answer_ms', since(started), c.get('errorCode') ?? String(c.res.status), routeOf(c.req));
    }
  };
}

/** `PUT /v1/reaction-operations/:id`: a bounded label (ids, tokens and query never in it). */
export function routeOf(req: { method: string; path: string }): string {
  const parts = req.path
    .split('/')
    .filter(Boolean)
    .slice(0, 4)
    .map((p) => (/^(?:[a-z][a-z-]{0,31}|v[0-9]{1,2})$/.test(p) ? p : ':id'));
  return `${req.method} /${parts.join('/')}`;
}

export function init(): MiddlewareHandler<AppEnv> {
  return async function init(c, next) {
    c.set('requestId', c.req.header('cf-ray') ?? crypto.randomUUID());
    const config = loadConfig(c.env);
    setLogLevel(config.LOG_LEVEL);
    c.set('config', config);
    c.set('clock', systemClock);
    let pool: Pool | undefined;
    c.set('db', () => {
      // Someone waits on this request: an answer in the isolate's connection budget (db/gate.ts).
      pool ??= openPool(config, { priority: 'answer' });
      return pool;
    });
    try {
      await next();
    } finally {
      if (pool) {
        const ending = pool.end();
        try {
          c.executionCtx.waitUntil(ending);
        } catch {
          // By design: no execution context (a direct app.request in a test), so end it now.
          await ending;
        }
      }
    }
  };
}

/**
 * Requires `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant time. Only that form,
 * exactly: the bare token, another scheme, `bearer`, a tab or two spaces are 401 (lib/bearer.ts).
 */
export function requireAdmin(): MiddlewareHandler<AppEnv> {
  return async function requireAdmin(c, next) {
    const given = adminBearerToken(c.req.header('authorization')) ?? '';
    if (!constantTimeEqual(given, c.var.config.ADMIN_TOKEN))
      throw new AppError('unauthorized', 'Admin token required');
    await next();
  };
}

/** Renders every failure as the one error shape; unknown errors never leak detail. */
export function renderError(err: Error, c: Context<AppEnv>): Response {
  const requestId = c.get('requestId') ?? 'unknown';
  let appErr: AppError;
  if (err instanceof AppError) appErr = err;
  else if (err instanceof ZodError)
    appErr = new AppError('validation_failed', 'Request validation failed', err.issues);
  else if (err instanceof HTTPException && err.status < 500) {
    // The zod-openapi validator's refusals: 415 for a body not sent as the route's JSON (issue
    // 29 hole 13: it was 400 bad_request with the message "Unsupported Media Type"), 400 for
    // bytes that do not parse.
    const code =
      err.status === 404 ? 'not_found' : err.status === 415 ? 'unsupported_media_type' : 'bad_request';
    appErr = new AppError(code, err.message || 'Bad request');
  } else if (isDatabaseUnavailable(err)) {
    // Overload, a restarting server, a connection lost mid-statement, a statement/lock budget
    // spent, or a deadlock its retry loop had no budget left for (db_tx_retry_abandoned, logged
    // where it was given up): not a bug, a retryable 503 (Lark redelivers), never a 500. Logged once per request
    // as a warning; the alert is on its rate, not on each one.
    log.warn('db_unavailable', { requestId, path: c.req.path, error: err });
    appErr = dbUnavailable();
  } else {
    log.error('unhandled_error', { requestId, path: c.req.path, error: err });
    appErr = new AppError('internal_error', 'Internal error');
  }
  c.set('errorCode', appErr.code);
  const body: ErrorBody = { error: { code: appErr.code, message: appErr.message, requestId } };
  if (appErr.details !== undefined) body.error.details = appErr.details;
  return c.json(body, appErr.status, appErr.headers);
}
