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
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const MIB = 1024 * 1024;
const WORKER_SIZE_LIMIT_BYTES = 64 * MIB;

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
// The main Worker, the retention cleanup Worker and the alerts Tail Worker both of them name.
const CONFIGS = ['wrangler.toml', 'retention.wrangler.toml', 'alerts.wrangler.toml'];

const kib = (n: number) => `${(n / 1024).toFixed(1)} KiB`;

/** Builds one config's bundle; true when it built and fits. */
function check(config: string): boolean {
  const outdir = mkdtempSync(join(tmpdir(), 'reaction-ledger-build-'));
  try {
    try {
      execFileSync(
        join(root, 'node_modules/.bin/wrangler'),
        ['deploy', '--dry-run', '--outdir', outdir, '-c', config],
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
    // Uploaded modules: everything wrangler wrote except source maps (not uploaded unless
    // upload_source_maps is set) and the README it drops into --outdir. Measured as wrangler does:
    // the modules concatenated, gzip at the default level.
    const modules = readdirSync(outdir)
      .filter((name) => !name.endsWith('.map') && name !== 'README.md')
      .sort();
    if (modules.length === 0) {
      console.error(`build:check: wrangler wrote no module for ${config}`);
      return false;
    }
    const contents = modules.map((name) => readFileSync(join(outdir, name)));
    const size = contents.reduce((sum, c) => sum + c.byteLength, 0);
    const gzip = gzipSync(Buffer.concat(contents)).byteLength;
    const share = ((size / WORKER_SIZE_LIMIT_BYTES) * 100).toFixed(1);
    console.log(`${config}: bundle ${modules.join(', ')}`);
    console.log(
      `${config}: size ${kib(size)} (${share}% of the ${WORKER_SIZE_LIMIT_BYTES / MIB} MiB limit), gzip ${kib(gzip)}`,
    );
    if (size > WORKER_SIZE_LIMIT_BYTES) {
      console.error(
        `build:check: ${config} bundle is over the ${WORKER_SIZE_LIMIT_BYTES / MIB} MiB Worker size limit`,
      );
      return false;
    }
    return true;
  } finally {
    rmSync(outdir, { recursive: true, force: true });
  }
}

let ok = true;
for (const config of CONFIGS) ok = check(config) && ok;
process.exitCode = ok ? 0 : 1;
