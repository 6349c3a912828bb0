/**
 * `npm run types`: regenerates worker-configuration.d.ts (the `Env` the code uses) from
 * wrangler.toml and .dev.vars.example. `npm run types:check`: regenerates into a scratch file
 * next to it and fails when the checked-in file differs, so a binding added to wrangler.toml or
 * a secret added to .dev.vars.example without rerunning `npm run types` is caught in CI.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const target = 'worker-configuration.d.ts';
// Same directory as the target so the generated relative imports (./workers/index) are identical.
const scratch = 'worker-configuration.check.d.ts';

// Secrets are not in wrangler.toml; .dev.vars.example names every one of them. Passing it with
// --env-file also stops wrangler from reading a developer's own .dev.vars or .env. Runtime types
// come from @cloudflare/workers-types (tsconfig), and vars stay `string`: their values are checked
// by zod in workers/env.ts, and tests and environments override them.
const args = ['types', '--env-file', '.dev.vars.example', '--include-runtime=false', '--strict-vars=false'];

function generate(extra: string[]): void {
  execFileSync(join(root, 'node_modules/.bin/wrangler'), [...args, ...extra], {
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
}

function check(): boolean {
  try {
    generate([scratch]);
    // The header records the command line; the scratch path is the only intended difference.
    const expected = readFileSync(join(root, scratch), 'utf8').replace(` ${scratch}\``, '`');
    let actual = '';
    try {
      actual = readFileSync(join(root, target), 'utf8');
    } catch {
      // Missing file: reported below as a difference of every line.
    }
    if (expected === actual) {
      console.log(`${target} matches wrangler.toml and .dev.vars.example`);
      return true;
    }
    const have = new Set(actual.split('\n'));
    const want = new Set(expected.split('\n'));
    for (const line of want) if (!have.has(line)) console.error(`+ ${line}`);
    for (const line of have) if (!want.has(line)) console.error(`- ${line}`);
    console.error(`${target} is out of date: run npm run types and commit it`);
    return false;
  } finally {
    rmSync(join(root, scratch), { force: true });
  }
}

if (process.argv.includes('--check')) {
  process.exitCode = check() ? 0 : 1;
} else {
  generate([]);
  console.log(`wrote ${target}`);
}
