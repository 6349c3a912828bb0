import type { Config } from '../env';
import { echoAgent } from './echo';
import { httpAgent } from './http';
import type { Agent } from './types';

export { echoAgent } from './echo';
export { httpAgent } from './http';
export * from './types';

let override: Agent | null = null;

/**
 * The agent for a turn: the HTTP agent when AGENT_URL is set, else the echo agent.
 * `setAgentOverride` replaces it inside one isolate (tests, and embedding in another Worker).
 */
export function agentFor(
  config: Pick<Config, 'AGENT_URL' | 'AGENT_TIMEOUT_MS' | 'AGENT_SIGNING_SECRET'>,
): Agent {
  if (override) return override;
  if (config.AGENT_URL)
    // The config refuses AGENT_URL without AGENT_SIGNING_SECRET (env.ts); never unsigned.
    return httpAgent({
      url: config.AGENT_URL,
      timeoutMs: config.AGENT_TIMEOUT_MS,
      signingSecret: config.AGENT_SIGNING_SECRET!,
    });
  return echoAgent;
}

export function setAgentOverride(agent: Agent | null): void {
  override = agent;
}
