import { Hono } from 'hono';
import { deadLettersAdmin } from './admin/dead-letters';
import { adminOpenApi } from './admin/openapi';
import { adminStatus } from './admin/status';
import { webhook as larkWebhook } from './channel/webhook';
import { consoleApp } from './console/routes';
import type { AppEnv } from './context';
import { AppError } from './errors';
import { health } from './health/routes';
import { installations as larkInstallations } from './installations/routes';
import { limitBody } from './lib/body-limit';
import { releaseUnreadBody } from './lib/unread-body';
import { init, measureAnswers, renderError } from './middleware';
import { directoryAdmin, legacyContractAdmin } from './reaction-tickets/admin-routes';
import { reactionApi } from './reaction-tickets/routes';
import { retentionAdmin } from './retention/routes';
import { typingAdmin } from './typing-ledger/admin-routes';

/**
 * Admin bodies: the largest is a message upsert (20,000 UTF-16 units, up to 120 KB as JSON
 * escapes) or a member list (1,000 ids of 128 bytes); the webhook's 256 KiB covers both.
 */
export const ADMIN_MAX_BODY_BYTES = 256 * 1024;
export const CONSOLE_MAX_BODY_BYTES = 16 * 1024;

/** The HTTP surface. Feature folders own their routes; this file only mounts them. */
export function createApp() {
  const app = new Hono<AppEnv>();
  // Outermost, so every answer (a bad environment's 500 included) releases an unread body.
  app.use('*', releaseUnreadBody());
  app.use('*', measureAnswers());
  app.use('*', init());
  app.use('/admin/*', limitBody(ADMIN_MAX_BODY_BYTES));
  // Console forms are a few short fields.
  app.use('/console/*', limitBody(CONSOLE_MAX_BODY_BYTES));
  app.route('/healthz', health);
  app.route('/lark/events', larkWebhook);
  app.route('/v1', reactionApi);
  app.route('/admin/status', adminStatus);
  app.route('/admin/effects/dead-letters', deadLettersAdmin);
  app.route('/admin/openapi.json', adminOpenApi);
  app.route('/admin/lark/installations', larkInstallations);
  app.route('/admin/typing-reactions', typingAdmin);
  app.route('/admin/retention', retentionAdmin);
  app.route('/admin/reaction-contract', legacyContractAdmin);
  app.route('/admin', directoryAdmin);
  app.route('/console', consoleApp);
  app.notFound((c) =>
    renderError(new AppError('not_found', `No route for ${c.req.method} ${c.req.path}`), c),
  );
  app.onError(renderError);
  return app;
}

export const app = createApp();
