import { Hono } from 'hono';
import { adminStatus } from './admin/status';
import { webhook as larkWebhook } from './channel/webhook';
import type { AppEnv } from './context';
import { AppError } from './errors';
import { health } from './health/routes';
import { installations as larkInstallations } from './installations/routes';
import { init, renderError } from './middleware';
import { directoryAdmin, legacyContractAdmin } from './reaction-tickets/admin-routes';
import { reactionApi } from './reaction-tickets/routes';
import { retentionAdmin } from './retention/routes';
import { typingAdmin } from './typing-ledger/admin-routes';

/** The HTTP surface. Feature folders own their routes; this file only mounts them. */
export function createApp() {
  const app = new Hono<AppEnv>();
  app.use('*', init());
  app.route('/healthz', health);
  app.route('/lark/events', larkWebhook);
  app.route('/v1', reactionApi);
  app.route('/admin/status', adminStatus);
  app.route('/admin/lark/installations', larkInstallations);
  app.route('/admin/typing-reactions', typingAdmin);
  app.route('/admin/retention', retentionAdmin);
  app.route('/admin/reaction-contract', legacyContractAdmin);
  app.route('/admin', directoryAdmin);
  app.notFound((c) =>
    renderError(new AppError('not_found', `No route for ${c.req.method} ${c.req.path}`), c),
  );
  app.onError(renderError);
  return app;
}

export const app = createApp();
