/**
 * What every deployable Worker config must declare, checked offline by `npm run build:check`
 * and by test/node/foundation/deploy.config.test.ts. Each rule exists because the platform's
 * default is the unsafe one:
 *  - observability: `wrangler deploy` turns Workers Logs off for a config that does not declare
 *    them (cloudflare/workers-sdk#6776), and the alerts read those logs;
 *  - source maps: without them stack traces in logs, traces and Issues point into the bundle;
 *  - routing: a workers.dev hostname or preview URL bypasses the zone's WAF, rate limiting and
 *    Access rules.
 */
import { unstable_readConfig } from 'wrangler';

/** Every Worker this repository deploys (the alerts Tail Worker is added with its config). */
export const WORKER_CONFIGS = ['wrangler.toml', 'retention.wrangler.toml'] as const;

type Config = ReturnType<typeof unstable_readConfig>;

/** Reads a config as wrangler does, for one environment (undefined: the top level). */
export function readWorkerConfig(path: string, env?: string): Config {
  return unstable_readConfig({ config: path, env });
}

/** The config's problems, one line each; empty when it may be deployed. */
export function deployProblems(config: Config): string[] {
  const problems: string[] = [];
  const o = config.observability;
  if (!o?.enabled) problems.push('observability.enabled must be true');
  if (!o?.logs?.enabled) problems.push('observability.logs.enabled must be true');
  if (o?.logs?.invocation_logs === false)
    problems.push('observability.logs.invocation_logs must not be false');
  if (o?.logs?.head_sampling_rate === undefined)
    problems.push('observability.logs.head_sampling_rate must be chosen (with its reason)');
  if (!o?.traces?.enabled) problems.push('observability.traces.enabled must be true');
  if (o?.traces?.head_sampling_rate === undefined)
    problems.push('observability.traces.head_sampling_rate must be chosen (with its reason)');
  if (!o?.issues?.enabled) problems.push('observability.issues.enabled must be true (error grouping)');
  if (config.upload_source_maps !== true) problems.push('upload_source_maps must be true');
  if (config.workers_dev !== false) problems.push('workers_dev must be false');
  if (config.preview_urls !== false) problems.push('preview_urls must be false');
  return problems;
}
