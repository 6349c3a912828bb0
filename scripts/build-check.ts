/**
 * `npm run build:check`: builds the real deploy bundle of each Worker (wrangler.toml, the main
 * one; retention.wrangler.toml, the retention cleanup; alerts.wrangler.toml, their Tail Worker)
 * offline with `wrangler deploy --dry-run` (no login, nothing uploaded), prints its size and
 * gzip size, and fails when a build fails or a bundle is over the Workers size limit.
 *
 * The limit: since 2026-09-04 Cloudflare checks one uncompressed limit of 64 MiB on every plan;
 * the former compressed limits (3 MiB Free, 10 MiB Paid, after gzip) were removed.
 * https://developers.cloudflare.com/workers/platform/limits/#worker-size and
 * https://developers.cloudflare.com/changelog/post/2026-09-04-increased-worker-size-limit/
 * The gzip size is still printed: it is what wrangler reports and what older docs quote.
 *
 * It also fails when a config may not be deployed (scripts/lib/deploy-checks.ts: observability
 * declared, source maps uploaded, no workers.dev) or its build wrote no source map.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { deployProblems, readWorkerConfig, WORKER_CONFIGS } from './lib/deploy-checks';

const MIB = 1024 * 1024;
const WORKER_SIZE_LIMIT_BYTES = 64 * MIB;

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

const kib = (n: number) => `${(n / 1024).toFixed(1)} KiB`;

/** Builds one config's bundle; true when it built and fits. */
function check(config: string): boolean {
  const problems = deployProblems(readWorkerConfig(join(root, config)));
  for (const problem of problems) console.error(`build:check: ${config}: ${problem}`);
  const outdir = mkdtempSync(join(tmpdir(), 'reaction-ledger-build-'));
  try {
    try {
      execFileSync(
        join(root, 'node_modules/.bin/wrangler'),
        ['deploy', '--dry-run', '--env=', '--outdir', outdir, '-c', config],
        {
          cwd: root,
          stdio: ['ignore', 'ignore', 'inherit'],
          env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CLOUDFLARE_CF_FETCH_ENABLED: 'false' },
        },
      );
    } catch {
      // wrangler printed the build error on stderr; the status is the answer.
      console.error(`build:check: wrangler deploy --dry-run -c ${config} failed`);
      return false;
    }
    // Code modules: everything wrangler wrote except source maps (uploaded beside them, not
    // counted in the size limit) and the README it drops into --outdir. Measured as wrangler does:
    // the modules concatenated, gzip at the default level.
    const modules = readdirSync(outdir)
      .filter((name) => !name.endsWith('.map') && name !== 'README.md')
      .sort();
    if (modules.length === 0) {
      console.error(`build:check: wrangler wrote no module for ${config}`);
      return false;
    }
    const maps = readdirSync(outdir).filter((name) => name.endsWith('.map'));
    if (maps.length === 0) {
      console.error(`build:check: ${config}: the build wrote no source map`);
      return false;
    }
    const contents = modules.map((name) => readFileSync(join(outdir, name)));
    const size = contents.reduce((sum, c) => sum + c.byteLength, 0);
    const gzip = gzipSync(Buffer.concat(contents)).byteLength;
    const share = ((size / WORKER_SIZE_LIMIT_BYTES) * 100).toFixed(1);
    console.log(`${config}: bundle ${modules.join(', ')}, source maps ${maps.join(', ')}`);
    console.log(
      `${config}: size ${kib(size)} (${share}% of the ${WORKER_SIZE_LIMIT_BYTES / MIB} MiB limit), gzip ${kib(gzip)}`,
    );
    if (size > WORKER_SIZE_LIMIT_BYTES) {
      console.error(
        `build:check: ${config} bundle is over the ${WORKER_SIZE_LIMIT_BYTES / MIB} MiB Worker size limit`,
      );
      return false;
    }
    return problems.length === 0;
  } finally {
    rmSync(outdir, { recursive: true, force: true });
  }
}

let ok = true;
for (const config of WORKER_CONFIGS) ok = check(config) && ok;
process.exitCode = ok ? 0 : 1;
