import { Hono } from 'hono';
import { deadLettersAdmin } from './admin/dead-letters';
import { adminOpenApi } from './admin/openapi';
import { adminStatus } from './admin/status';
import type { ActorEnv } from './auth/actor-jwt';
import { conversationsAdmin } from './channel/inspect-routes';
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

/**
 * Each feature's routes and where they are mounted, in mount order: a more specific prefix
 * before `/admin`, whose directory routes would otherwise answer first.
 */
/** A feature's sub-app: on the request's environment, or one its own middleware extends. */
type Routes = Hono<AppEnv> | Hono<ActorEnv>;

const MOUNTS: ReadonlyArray<readonly [path: string, routes: Routes]> = [
  ['/healthz', health],
  ['/lark/events', larkWebhook],
  ['/v1', reactionApi],
  ['/admin/status', adminStatus],
  ['/admin/effects/dead-letters', deadLettersAdmin],
  ['/admin/openapi.json', adminOpenApi],
  ['/admin/lark/installations', larkInstallations],
  ['/admin/lark/conversations', conversationsAdmin],
  ['/admin/typing-reactions', typingAdmin],
  ['/admin/retention', retentionAdmin],
  ['/admin/reaction-contract', legacyContractAdmin],
  ['/admin', directoryAdmin],
  ['/console', consoleApp],
];

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
  // The cast only widens the sub-app's environment for the parent's route typing (unused: no
  // client is generated from this app); each sub-app's own middleware sets what it declares.
  for (const [path, routes] of MOUNTS) app.route(path, routes as Hono<AppEnv>);
  app.notFound((c) =>
    renderError(new AppError('not_found', `No route for ${c.req.method} ${c.req.path}`), c),
  );
  app.onError(renderError);
  return app;
}

export const app = createApp();
