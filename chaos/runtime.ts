import { execFile } from 'node:child_process';
import { mkdtemp, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
// Node's URL, not the Workers runtime's global type (tsconfig loads both).
import { fileURLToPath, URL } from 'node:url';
import { promisify } from 'node:util';
import { convertV4MiniflareOptions, Miniflare } from 'miniflare';

/**
 * The service as it deploys: both Workers' deploy bundles (`wrangler deploy --dry-run`, as
 * `npm run build:check` builds them) in one Miniflare, the main Worker first with the
 * RETENTION service binding reaching the cleanup Worker. A runtime is disposable: a schedule
 * disposes it and starts another between any two steps, and can run two at once on one
 * database (two replicas). Durable Object storage persists in `persistDir` across restarts
 * of the same replica; memory (in-flight work, caches) does not.
 */
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const RETENTION_NAME = 'reaction-ledger-retention';
const PROBE_NAME = 'reaction-ledger-chaos-probe';

export interface Bundles {
  main: string;
  retention: string;
  /** chaos/probe-worker.ts: runs a typing-maintenance pass on request. */
  probe: string;
  /** The configs the bundles were built from (this tree's, or a previous release's). */
  mainConfig: string;
  retentionConfig: string;
}

/** `wrangler deploy --dry-run` of one config, in the source tree at `root`. */
async function bundle(args: string[], root = ROOT): Promise<string> {
  const outdir = await mkdtemp(join(tmpdir(), 'reaction-ledger-chaos-bundle-'));
  await promisify(execFile)(
    join(ROOT, 'node_modules/.bin/wrangler'),
    ['deploy', '--dry-run', '--env=', '--outdir', outdir, ...args],
    {
      cwd: root,
      env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CLOUDFLARE_CF_FETCH_ENABLED: 'false' },
    },
  );
  const script = (await readdir(outdir)).find((name) => name.endsWith('.js'));
  if (!script) throw new Error(`wrangler wrote no module for ${args.join(' ')}`);
  return join(outdir, script);
}

/**
 * The three bundles, built once per chaos run (about 2 s each); from another source tree
 * (`root`: a previous release's, scripts/lib/previous-release.ts) with that tree's configs.
 */
export async function buildBundles(root = ROOT): Promise<Bundles> {
  const mainConfig = join(root, 'wrangler.toml');
  const retentionConfig = join(root, 'retention.wrangler.toml');
  const [main, retention, probe] = await Promise.all([
    bundle(['-c', mainConfig], root),
    bundle(['-c', retentionConfig], root),
    bundle(['-c', join(root, 'chaos/probe.wrangler.toml')], root),
  ]);
  return { main, retention, probe, mainConfig, retentionConfig };
}

/**
 * A config's Miniflare worker options as wrangler derives them. Each Worker is one bundled
 * module: the configs' module rules have nothing to apply to (and Miniflare 5's converter
 * refuses them). Without their `tail_consumers` too (the alerts Tail Worker, not part of these
 * runs): Miniflare refuses a tail naming a Worker it does not run.
 */
export async function workerOptions(
  config: string,
): Promise<Record<string, unknown> & { bindings?: unknown }> {
  const wrangler = await import('wrangler');
  const {
    modulesRules: _rules,
    tails: _tails,
    ...rest
  } = wrangler.unstable_getMiniflareWorkerOptions(config).workerOptions as ReturnType<
    typeof wrangler.unstable_getMiniflareWorkerOptions
  >['workerOptions'] & { tails?: unknown };
  return rest as Record<string, unknown> & { bindings?: unknown };
}

export interface RuntimeOptions {
  bundles: Bundles;
  /** Secrets and vars of the main Worker (DATABASE_URL, NEON_WS_PROXY, LARK_API_BASE, ...). */
  vars: Record<string, string>;
  /** The retention Worker's (DATABASE_URL, NEON_WS_PROXY). */
  retentionVars: Record<string, string>;
  /** Durable Object storage directory of this replica. */
  persistDir: string;
  /** The service's port (0: any free one). */
  port?: number;
  /** Called with every console line of the runtime (the Workers log JSON lines). */
  onLog?: (line: string) => void;
}

export interface Runtime {
  url: string;
  fetch(path: string, init?: RequestInit): Promise<Response>;
  /** Runs the main Worker's minute cron to its end. */
  minuteCron(): Promise<void>;
  /** Runs the retention Worker's hourly cron to its end. */
  hourlyCron(): Promise<void>;
  /** Runs a typing-maintenance pass now (chaos/probe-worker.ts). */
  maintenancePass(): Promise<void>;
  dispose(): Promise<void>;
}

export async function startRuntime(opts: RuntimeOptions): Promise<Runtime> {
  const main = await workerOptions(opts.bundles.mainConfig);
  const retention = await workerOptions(opts.bundles.retentionConfig);
  const mainBindings = main.bindings as Record<string, unknown>;
  const retentionBindings = retention.bindings as Record<string, unknown>;
  // Miniflare 5 takes its own option shape; wrangler still hands out v4 worker options, which
  // Miniflare's own converter maps (it refuses any option it cannot map without a change).
  const mf = new Miniflare(
    convertV4MiniflareOptions({
      host: '127.0.0.1',
      port: opts.port ?? 0,
      durableObjectsPersist: opts.persistDir,
      unsafeTriggerHandlers: true,
      workers: [
        {
          ...main,
          modules: true,
          modulesRoot: dirname(opts.bundles.main),
          scriptPath: opts.bundles.main,
          bindings: { ...mainBindings, ...opts.vars },
        },
        {
          ...retention,
          name: RETENTION_NAME,
          modules: true,
          modulesRoot: dirname(opts.bundles.retention),
          scriptPath: opts.bundles.retention,
          bindings: { ...retentionBindings, ...opts.retentionVars },
        },
        {
          name: PROBE_NAME,
          modules: true,
          modulesRoot: dirname(opts.bundles.probe),
          scriptPath: opts.bundles.probe,
          compatibilityDate: main.compatibilityDate,
          bindings: { ...mainBindings, ...opts.vars },
        },
      ] as never,
      handleRuntimeStdio: (stdout: Readable, stderr: Readable) => {
        for (const stream of [stdout, stderr]) {
          let rest = '';
          stream.on('data', (chunk: Buffer) => {
            const lines = (rest + chunk.toString('utf8')).split('\n');
            rest = lines.pop() ?? '';
            for (const line of lines) if (line.trim()) opts.onLog?.(line);
          });
        }
      },
    } as never),
  );
  const url = (await mf.ready).toString().replace(/\/$/, '');
  const mainWorker = await mf.getWorker();
  const retentionWorker = await mf.getWorker(RETENTION_NAME);
  const probe = await mf.getWorker(PROBE_NAME);
  return {
    url,
    fetch: (path, init) => fetch(`${url}${path}`, init),
    minuteCron: async () => {
      await mainWorker.scheduled({ cron: '* * * * *', scheduledTime: new Date() });
    },
    hourlyCron: async () => {
      await retentionWorker.scheduled({ cron: '0 * * * *', scheduledTime: new Date() });
    },
    maintenancePass: async () => {
      const res = await probe.fetch('http://probe/maintenance');
      const text = await res.text();
      if (!res.ok) throw new Error(`maintenance pass: ${res.status} ${text.slice(0, 200)}`);
    },
    dispose: () => mf.dispose(),
  };
}
