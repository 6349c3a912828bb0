/**
 * `npm run types`: regenerates the `Env` types the code uses, one file per Worker:
 *  - worker-configuration.d.ts: the main Worker (`Cloudflare.Env`) from wrangler.toml and
 *    .dev.vars.example; retention.wrangler.toml is passed too, so the RETENTION service
 *    binding is typed with the cleanup Worker's RPC methods;
 *  - retention-worker-configuration.d.ts: the retention cleanup Worker (`RetentionEnv`, in
 *    namespace `RetentionWorkerTypes`) from retention.wrangler.toml and
 *    retention.dev.vars.example. Wrangler writes every Worker's bindings into the one global
 *    `Cloudflare` namespace, where two Workers would merge into one Env; this file's namespace
 *    is renamed (and its GlobalProps, which names the main module, dropped).
 * `npm run types:check`: regenerates into scratch files next to them and fails when a checked-in
 * file differs, so a binding added to a wrangler config or a secret added to an example file
 * without rerunning `npm run types` is caught in CI.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

interface Target {
  file: string;
  /** Same directory as the target so the generated relative imports are identical. */
  scratch: string;
  args: string[];
  post?: (text: string) => string;
}

// Secrets are not in the wrangler configs; the example files name every one of them. Passing one
// with --env-file also stops wrangler from reading a developer's own .dev.vars or .env. Runtime
// types come from @cloudflare/workers-types (tsconfig), and vars stay `string`: their values are
// checked by zod (workers/env.ts), and tests and environments override them.
const COMMON = ['--include-runtime=false', '--strict-vars=false'];

const TARGETS: Target[] = [
  {
    file: 'worker-configuration.d.ts',
    scratch: 'worker-configuration.check.d.ts',
    args: [
      '-c',
      'wrangler.toml',
      '-c',
      'retention.wrangler.toml',
      '--env-file',
      '.dev.vars.example',
      ...COMMON,
    ],
  },
  {
    file: 'retention-worker-configuration.d.ts',
    scratch: 'retention-worker-configuration.check.d.ts',
    args: [
      '-c',
      'retention.wrangler.toml',
      '--env-interface',
      'RetentionEnv',
      '--env-file',
      'retention.dev.vars.example',
      ...COMMON,
    ],
    post: (text) => {
      const renamed = text
        .replace('declare namespace Cloudflare {', 'declare namespace RetentionWorkerTypes {')
        .replace('extends Cloudflare.Env {}', 'extends RetentionWorkerTypes.Env {}')
        .replace(/\tinterface GlobalProps \{\n[^}]*\}\n/, '');
      if (renamed.includes('Cloudflare') || renamed.includes('GlobalProps'))
        throw new Error(
          'types: unexpected wrangler output for the retention Worker; update scripts/types.ts',
        );
      return renamed.replace(
        '\n',
        '\n// Namespace renamed and GlobalProps dropped by scripts/types.ts (one Env per Worker).\n',
      );
    },
  },
];

function generate(target: Target, out: string): void {
  execFileSync(join(root, 'node_modules/.bin/wrangler'), ['types', ...target.args, out], {
    cwd: root,
    stdio: ['ignore', 'ignore', 'inherit'],
    env: {
      ...process.env,
      WRANGLER_SEND_METRICS: 'false',
      // Never let the shell's own environment leak into the generated Env.
      CLOUDFLARE_INCLUDE_PROCESS_ENV: 'false',
      CLOUDFLARE_LOAD_DEV_VARS_FROM_DOT_ENV: 'true',
    },
  });
  if (target.post) writeFileSync(join(root, out), target.post(readFileSync(join(root, out), 'utf8')));
}

function check(target: Target): boolean {
  try {
    generate(target, target.scratch);
    // The header records the command line; the output path is the only intended difference.
    const expected = readFileSync(join(root, target.scratch), 'utf8').replace(
      ` ${target.scratch}\``,
      ` ${target.file}\``,
    );
    let actual = '';
    try {
      actual = readFileSync(join(root, target.file), 'utf8');
    } catch {
      // Missing file: reported below as a difference of every line.
    }
    if (expected === actual) {
      console.log(`${target.file} matches its wrangler config and example secrets`);
      return true;
    }
    const have = new Set(actual.split('\n'));
    const want = new Set(expected.split('\n'));
    for (const line of want) if (!have.has(line)) console.error(`+ ${line}`);
    for (const line of have) if (!want.has(line)) console.error(`- ${line}`);
    console.error(`${target.file} is out of date: run npm run types and commit it`);
    return false;
  } finally {
    rmSync(join(root, target.scratch), { force: true });
  }
}

if (process.argv.includes('--check')) {
  let ok = true;
  for (const target of TARGETS) ok = check(target) && ok;
  process.exitCode = ok ? 0 : 1;
} else {
  for (const target of TARGETS) {
    generate(target, target.file);
    console.log(`wrote ${target.file}`);
  }
}
