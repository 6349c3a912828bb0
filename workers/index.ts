import { app } from './app';
import { dispatchCron } from './cron';
import type { Env } from './env';

export { ActorHost } from '../durable-objects/actor-host';
export { TypingMaintenance } from '../durable-objects/typing-maintenance';
export { WorkspaceQuota } from '../durable-objects/workspace-quota';

export default {
  fetch: app.fetch,
  // Every cron step is awaited, so the ExecutionContext (waitUntil) is not needed.
  scheduled: (controller, env, _ctx) => dispatchCron(controller, env),
} satisfies ExportedHandler<Env>;
