import type { Config } from '../env';
import { AppError } from '../errors';
import { echoAgent, failingOnDemand, typingEchoAgent } from './echo';
import { httpAgent } from './http';
import type { Agent } from './types';

export { echoAgent, failingOnDemand, typingEchoAgent } from './echo';
export { httpAgent } from './http';
export * from './types';

let override: Agent | null = null;

/** The URL a service-bound agent is asked at: a service binding ignores the host. */
export const AGENT_BINDING_URL = 'https://agent.internal/';

/**
 * The agent for a turn: an in-account Worker through the `AGENT` service binding when the
 * Worker has one, else the HTTP agent when AGENT_URL is set, else the echo agent (typing its
 * answer out word by word to a card reply when ECHO_AGENT_WORD_MS is set, failing the turns
 * that carry ECHO_AGENT_FAIL_MARKER when that is set: dev only). Both remote
 * forms speak the same protocol, signed the same way (a bound Worker can be reached by other
 * Workers of the account too). `setAgentOverride` replaces it inside one isolate (tests, and
 * embedding in another Worker).
 */
export function agentFor(
  config: Pick<
    Config,
    | 'AGENT_URL'
    | 'AGENT_TIMEOUT_MS'
    | 'AGENT_SIGNING_SECRET'
    | 'ECHO_AGENT_WORD_MS'
    | 'ECHO_AGENT_FAIL_MARKER'
  >,
  binding?: Pick<Fetcher, 'fetch'>,
): Agent {
  if (override) return override;
  if (binding) {
    if (!config.AGENT_SIGNING_SECRET)
      throw new AppError('bad_environment', 'the AGENT service binding needs AGENT_SIGNING_SECRET');
    return httpAgent({
      url: AGENT_BINDING_URL,
      timeoutMs: config.AGENT_TIMEOUT_MS,
      signingSecret: config.AGENT_SIGNING_SECRET,
      fetch: (input, init) => binding.fetch(input, init),
    });
  }
  if (config.AGENT_URL)
    // The config refuses AGENT_URL without AGENT_SIGNING_SECRET (env.ts); never unsigned.
    return httpAgent({
      url: config.AGENT_URL,
      timeoutMs: config.AGENT_TIMEOUT_MS,
      signingSecret: config.AGENT_SIGNING_SECRET!,
    });
  const echo = config.ECHO_AGENT_WORD_MS ? typingEchoAgent(config.ECHO_AGENT_WORD_MS) : echoAgent;
  return config.ECHO_AGENT_FAIL_MARKER ? failingOnDemand(echo, config.ECHO_AGENT_FAIL_MARKER) : echo;
}

export function setAgentOverride(agent: Agent | null): void {
  override = agent;
}
