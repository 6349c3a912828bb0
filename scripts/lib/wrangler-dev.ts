import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

export interface WranglerDev {
  process: ChildProcess;
  stop(): void;
}

/**
 * `wrangler dev --local --test-scheduled` of one Wrangler config on 127.0.0.1:`port`, with
 * `vars` (secrets among them) in a 0600 env file that stop() removes: on the command line
 * (`--var`) every `ps` showed them. `--env-file` also makes wrangler skip a hand-written
 * `.dev.vars`.
 *
 * Two Workers bound by a service binding run as two of these sharing `registryPath`, wrangler's
 * dev registry through which one finds the other. One `wrangler dev -c a -c b` session can run
 * both too, but there (wrangler 4.86) the configs after the first get neither `--env-file` nor
 * `--test-scheduled`: their secrets would have to sit in a `.dev.vars` and their crons could
 * not be driven. A registry path of the checkout's own keeps two checkouts' Workers of the same
 * names apart.
 */
export function startWranglerDev(opts: {
  root: string;
  port: number;
  /** The Wrangler config (default wrangler.toml). */
  config?: string;
  /** The inspector's port (default: wrangler's, the first free one from 9229). */
  inspectorPort?: number;
  /** Wrangler's dev registry directory (WRANGLER_REGISTRY_PATH); default: wrangler's global one. */
  registryPath?: string;
  vars: Record<string, string>;
  envFile: string;
  /** Durable Object and cache state directory (wrangler's default is .wrangler/state). */
  persistTo?: string;
  /** Drop wrangler's stdout (the bench keeps only errors). */
  quiet?: boolean;
}): WranglerDev {
  // The mode applies only to a new file: never reuse one a crash left behind.
  rmSync(opts.envFile, { force: true });
  // A fresh clone has no .local/ yet (npm run dev makes it; a test or bench may come first).
  mkdirSync(dirname(opts.envFile), { recursive: true });
  writeFileSync(opts.envFile, envFileText(opts.vars), { mode: 0o600 });
  const child = spawn(
    `${opts.root}node_modules/.bin/wrangler`,
    [
      'dev',
      '-c',
      opts.config ?? 'wrangler.toml',
      // The top-level environment ([env.staging] is for deploys only).
      '--env=',
      '--local',
      '--test-scheduled',
      '--ip',
      '127.0.0.1',
      '--port',
      String(opts.port),
      '--env-file',
      opts.envFile,
      ...(opts.persistTo ? ['--persist-to', opts.persistTo] : []),
      ...(opts.inspectorPort ? ['--inspector-port', String(opts.inspectorPort)] : []),
    ],
    {
      cwd: opts.root,
      env: {
        ...process.env,
        WRANGLER_SEND_METRICS: 'false',
        CLOUDFLARE_CF_FETCH_ENABLED: 'false',
        CI: 'true',
        ...(opts.registryPath ? { WRANGLER_REGISTRY_PATH: opts.registryPath } : {}),
      },
      stdio: ['ignore', opts.quiet ? 'ignore' : 'inherit', 'inherit'],
      // Its own process group, so stop() ends wrangler and the workerd it started.
      detached: true,
    },
  );
  return {
    process: child,
    stop: () => {
      if (child.pid && child.exitCode === null) process.kill(-child.pid, 'SIGTERM');
      rmSync(opts.envFile, { force: true });
    },
  };
}

/**
 * dotenv lines wrangler reads back verbatim: single quotes keep `#`, spaces and JSON as they
 * are, and `\$` stops dotenv-expand from reading `$NAME` as a reference.
 */
export function envFileText(vars: Record<string, string>): string {
  return Object.entries(vars)
    .map(([name, value]) => {
      if (/['\r\n]/.test(value))
        throw new Error(`${name} cannot hold a quote or a line break in the dev env file`);
      return `${name}='${value.replaceAll('$', '\\$')}'\n`;
    })
    .join('');
}
