/**
 * What every deployable Worker config must declare, checked offline by `npm run build:check`
 * and by test/node/foundation/deploy.config.test.ts. Each rule exists because the platform's
 * default is the unsafe one:
 *  - observability: `wrangler deploy` turns Workers Logs off for a config that does not declare
 *    them (cloudflare/workers-sdk#6776), and the alerts read those logs;
 *  - source maps: without them stack traces in logs, traces and Issues point into the bundle;
 *  - routing: a workers.dev hostname or preview URL bypasses the zone's WAF, rate limiting and
 *    Access rules;
 *  - dev switches: `ECHO_AGENT_FAIL_MARKER` makes the echo agent fail users' turns on demand
 *    (npm run dev's, for the console's re-run), never a deployed Worker's.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { unstable_readConfig } from 'wrangler';

/** Every Worker this repository deploys: the main one, the retention cleanup, the alerts Tail Worker. */
export const WORKER_CONFIGS = ['wrangler.toml', 'retention.wrangler.toml', 'alerts.wrangler.toml'] as const;

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
  if (o?.logs?.invocation_logs === undefined)
    problems.push('observability.logs.invocation_logs must be chosen (with its reason)');
  if (o?.logs?.head_sampling_rate === undefined)
    problems.push('observability.logs.head_sampling_rate must be chosen (with its reason)');
  if (!o?.traces?.enabled) problems.push('observability.traces.enabled must be true');
  if (o?.traces?.head_sampling_rate === undefined)
    problems.push('observability.traces.head_sampling_rate must be chosen (with its reason)');
  if (!o?.issues?.enabled) problems.push('observability.issues.enabled must be true (error grouping)');
  if (config.upload_source_maps !== true) problems.push('upload_source_maps must be true');
  if (config.workers_dev !== false) problems.push('workers_dev must be false');
  if (config.preview_urls !== false) problems.push('preview_urls must be false');
  if (config.vars && 'ECHO_AGENT_FAIL_MARKER' in config.vars)
    problems.push('ECHO_AGENT_FAIL_MARKER is npm run dev only (the echo agent fails turns on demand)');
  return problems;
}

/**
 * The config's text with OpenTelemetry export destinations filled in from the environment
 * (`OTEL_LOGS_DESTINATIONS`, `OTEL_TRACES_DESTINATIONS`: comma-separated names of destinations
 * created at the account level), so the repository's configs stay export-free and one deploy
 * can add them. A name is an account object's name, never a secret (its headers live there).
 */
export function withTelemetryDestinations(text: string, env: Record<string, string | undefined>): string {
  const names = (value: string | undefined) =>
    (value ?? '')
      .split(',')
      .map((n) => n.trim())
      .filter(Boolean);
  let out = text;
  for (const [section, variable] of [
    ['logs', 'OTEL_LOGS_DESTINATIONS'],
    ['traces', 'OTEL_TRACES_DESTINATIONS'],
  ] as const) {
    const list = names(env[variable]);
    for (const name of list)
      if (!/^[A-Za-z0-9_.-]{1,128}$/.test(name))
        throw new Error(`${variable}: not a destination name: ${name}`);
    if (list.length === 0) continue;
    const header = `[observability.${section}]`;
    const start = out.indexOf(header);
    if (start < 0) throw new Error(`${variable} set but the config has no ${header}`);
    const end = out.indexOf('\n[', start + header.length);
    const block = out.slice(start, end < 0 ? undefined : end);
    if (!block.includes('destinations = []'))
      throw new Error(`${header} must say \`destinations = []\` for ${variable} to fill it`);
    const filled = block.replace('destinations = []', `destinations = ${JSON.stringify(list)}`);
    out = out.slice(0, start) + filled + (end < 0 ? '' : out.slice(end));
  }
  return out;
}

/**
 * The config to deploy `config` (a path relative to `root`) with: the committed file itself when
 * no OpenTelemetry destination is named in `env`, else a copy with them filled in, written to
 * `root`/.local/deploy/ (scripts/deploy-config.ts, `npm run deploy`).
 */
export function deployConfigPath(
  root: string,
  config: string,
  env: Record<string, string | undefined>,
): string {
  const text = readFileSync(join(root, config), 'utf8');
  const out = withTelemetryDestinations(text, env);
  if (out === text) return join(root, config);
  const dir = join(root, '.local/deploy');
  mkdirSync(dir, { recursive: true });
  const path = join(dir, basename(config));
  // Paths in a wrangler config are relative to the file: main moves with it.
  const main = /^main = "([^"]+)"$/m.exec(out)?.[1];
  const moved = main ? out.replace(`main = "${main}"`, `main = "${relative(dir, join(root, main))}"`) : out;
  writeFileSync(path, moved);
  return path;
}
