import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { mkdtemp, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { promisify } from 'node:util';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const RETENTION_CONFIG = join(ROOT, 'retention.wrangler.toml');
/** The cleanup Worker's name in retention.wrangler.toml: the main Worker's RETENTION binding names it. */
export const RETENTION_WORKER_NAME = 'reaction-ledger-retention';

let bundle: Promise<string> | undefined;

/**
 * The retention cleanup Worker's deploy bundle, built once per test run with the same
 * `wrangler deploy --dry-run` as `npm run build:check` (vitest does not transform an
 * auxiliary Worker's TypeScript): the main Worker's tests run against the real artifact.
 */
function buildBundle(): Promise<string> {
  bundle ??= (async () => {
    const outdir = await mkdtemp(join(tmpdir(), 'reaction-ledger-retention-worker-'));
    // The run's own copy: gone when the test process ends.
    process.once('exit', () => rmSync(outdir, { recursive: true, force: true }));
    await promisify(execFile)(
      join(ROOT, 'node_modules/.bin/wrangler'),
      ['deploy', '--dry-run', '--env=', '--outdir', outdir, '-c', RETENTION_CONFIG],
      {
        cwd: ROOT,
        env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CLOUDFLARE_CF_FETCH_ENABLED: 'false' },
      },
    );
    const script = (await readdir(outdir)).find((name) => name.endsWith('.js'));
    if (!script) throw new Error(`wrangler wrote no module for ${RETENTION_CONFIG}`);
    return join(outdir, script);
  })();
  return bundle;
}

/**
 * Miniflare options of the retention Worker as an auxiliary Worker of a test project: its
 * bindings come from retention.wrangler.toml (vars, the RetentionCleanup Durable Object),
 * the secrets from `secrets`.
 */
export async function retentionAuxiliaryWorker(secrets: Record<string, string>) {
  const wrangler = await import('wrangler');
  // The bundle is one module: the config's module rules (which Miniflare 5's v4-options shim
  // refuses to convert) have nothing to apply to.
  const { modulesRules: _rules, ...workerOptions } =
    wrangler.unstable_getMiniflareWorkerOptions(RETENTION_CONFIG).workerOptions;
  const script = await buildBundle();
  // Its `tail_consumers` (the alerts Tail Worker) are not part of these projects: Miniflare
  // refuses to start a Worker whose tail names a Worker it does not run. The alerts path is
  // tested through the real Workers in test/node/alerts/delivery.test.ts.
  const { tails: _tails, ...options } = workerOptions as typeof workerOptions & { tails?: unknown };
  return {
    ...options,
    name: RETENTION_WORKER_NAME,
    modules: true,
    // The bundle lives in a temporary directory: module paths are resolved from there.
    modulesRoot: dirname(script),
    scriptPath: script,
    bindings: { ...(workerOptions.bindings as Record<string, string>), ...secrets },
  };
}
