import { app } from './app';
import { registerConversationEngine } from './channel/engine';
import { dispatchCron } from './cron';
import { effectRegistry } from './effects/registry';
import type { Env } from './env';

export { ActorHost } from '../durable-objects/actor-host';
export { TypingMaintenance } from '../durable-objects/typing-maintenance';
export { WorkspaceQuota } from '../durable-objects/workspace-quota';

// The Worker's one registry gets its actor types and effects here, before any request, alarm or
// cron: the webhook, the minute cron and every ActorHost of this isolate read it.
registerConversationEngine(effectRegistry);

export default {
  fetch: app.fetch,
  // Every cron step is awaited, so the ExecutionContext (waitUntil) is not needed.
  scheduled: (controller, env, _ctx) => dispatchCron(controller, env),
} satisfies ExportedHandler<Env>;
