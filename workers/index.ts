import { app } from './app';
import { dispatchCron } from './cron';
import type { Env } from './env';

export { ActorHost } from '../durable-objects/actor-host';
export { RetentionCleanup } from '../durable-objects/retention-cleanup';
export { TypingMaintenance } from '../durable-objects/typing-maintenance';
export { WorkspaceQuota } from '../durable-objects/workspace-quota';

export default {
  fetch: app.fetch,
  scheduled: (controller, env, ctx) => dispatchCron(controller, env, ctx),
} satisfies ExportedHandler<Env>;
