import { env } from 'cloudflare:workers';
import type { EffectRegistry } from '../effects/registry';
import { type Env, loadConfig } from '../env';
import { droppedExecutor } from './backlog';
import { conversationActor } from './conversation';
import { failureNoticeExecutor } from './failure-notice';
import { replyExecutor, settledExecutor } from './reply';
import { replyDeleteExecutor } from './reply-deletion';

/**
 * Registers the conversation actor and its effects in `registry`. The Worker's entry
 * (workers/index.ts) calls it once for the registry its webhook, crons and ActorHosts share.
 * Settings are read from the Worker's bindings when an event is handled, never cached across
 * environments.
 */
const bindings = () => env as unknown as Env;
const config = () => loadConfig(bindings());

export function registerConversationEngine(registry: EffectRegistry): EffectRegistry {
  return registry
    .registerActor(
      conversationActor(() => {
        const debounceMs = config().CHANNEL_DEBOUNCE_MS;
        return { debounceMs, maxDebounceMs: Math.max(debounceMs * 4, debounceMs + 1000) };
      }),
    )
    .registerEffect(
      replyExecutor({
        config,
        // Optional, so not in the generated Env: declared by a deployment that binds its agent
        // Worker (README "Configuration"), absent everywhere else.
        agentBinding: () => (bindings() as { AGENT?: Fetcher }).AGENT,
      }),
    )
    .registerEffect(settledExecutor({ config }))
    .registerEffect(failureNoticeExecutor({ config }))
    .registerEffect(droppedExecutor({ config }))
    .registerEffect(replyDeleteExecutor({ config }));
}
