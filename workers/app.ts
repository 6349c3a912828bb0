import { Hono } from 'hono';
import { adminStatus } from './admin/status';
import { webhook as larkWebhook } from './channel/webhook';
import type { AppEnv } from './context';
import { AppError } from './errors';
import { health } from './health/routes';
import { installations as larkInstallations } from './installations/routes';
import { init, renderError } from './middleware';
import { reactionAdmin } from './reaction-tickets/admin-routes';
import { reactionApi } from './reaction-tickets/routes';
import { retentionAdmin } from './retention/routes';
import { typingAdmin } from './typing-ledger/admin-routes';

/** The HTTP surface. Feature folders own their routes; this file only mounts them. */
export function createApp() {
  const app = new Hono<AppEnv>();
  app.use('*', init());
  app.route('/', health);
  app.route('/', larkWebhook);
  app.route('/admin/lark/installations', larkInstallations);
  app.route('/', reactionApi);
  app.route('/', reactionAdmin);
  app.route('/', retentionAdmin);
  app.route('/', typingAdmin);
  app.route('/', adminStatus);
  app.notFound((c) =>
    renderError(new AppError('not_found', `No route for ${c.req.method} ${c.req.path}`), c),
  );
  app.onError(renderError);
  return app;
}

export const app = createApp();
