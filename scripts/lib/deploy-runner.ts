/**
 * Carries out `npm run deploy`'s plan (scripts/lib/deploy-plan.ts) through an injected DeployIo,
 * so the same code runs a release, a dry run (offline steps only: the environment and config
 * checks and the real builds; every remote step printed and skipped) and the tests' fake
 * Cloudflare (test/node/deploy/). Every command and request carries a timeout; a failure after
 * the new version joined the deployment rolls back to the previous version at 100%.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { deployConfigPath, deployProblems, readWorkerConfig } from './deploy-checks';
import {
  checkEnvironment,
  DEPLOY_ENV,
  DEPLOY_ORDER,
  type DeployOptions,
  describeStep,
  MAIN_CONFIG,
  type MigrationEntry,
  type Plan,
  planDeploy,
  type RemoteFacts,
  type Step,
  secretProblems,
  splitSpecs,
  type WorkerConfigFile,
} from './deploy-plan';
import {
  healthzRequest,
  judgeChallenge,
  judgeHealthz,
  type LarkSmoke,
  larkChallengeRequest,
  overrideHeader,
  type SmokeRequest,
  type Verdict,
} from './deploy-smoke';

/** Reads (secret list, deployment status): small answers from the API. */
export const WRANGLER_READ_TIMEOUT_MS = 60_000;
/** Uploads and deployments: a bundle of a few MiB and the API's own waits. */
export const WRANGLER_WRITE_TIMEOUT_MS = 300_000;
export const BUILD_TIMEOUT_MS = 180_000;
/** Migrations build indexes concurrently on large tables; the runner repairs an interrupted one. */
export const MIGRATE_TIMEOUT_MS = 30 * 60_000;
export const API_TIMEOUT_MS = 15_000;
export const SMOKE_REQUEST_TIMEOUT_MS = 10_000;
/** Per smoke check, retries included: covers the override's "couple of seconds" to propagate. */
export const SMOKE_DEADLINE_MS = 90_000;
export const SMOKE_RETRY_MS = 3000;

export interface Command {
  file: string;
  args: string[];
  /** Added to the deploy environment (process env and --env-file); never logged. */
  env?: Record<string, string>;
  timeoutMs: number;
  /** Collect wrangler's ND-JSON output entries (WRANGLER_OUTPUT_FILE_PATH) into `outputs`. */
  wranglerOutput?: boolean;
}

export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  outputs: Record<string, unknown>[];
}

export interface HttpAnswer {
  status: number;
  headers: { get(name: string): string | null };
  body: string;
}

export interface DeployIo {
  run(command: Command): Promise<CommandResult>;
  /** Throws on a network failure or when `timeoutMs` passes. */
  http(request: SmokeRequest, timeoutMs: number): Promise<HttpAnswer>;
  sleep(ms: number): Promise<void>;
  now(): number;
  log(line: string): void;
  /** False when there is no terminal to ask on. */
  confirm(question: string): Promise<boolean>;
}

export interface DeployInput {
  options: DeployOptions;
  /** The deploy environment: process env with --env-file's values (scripts/deploy.ts). */
  env: Readonly<Record<string, string | undefined>>;
  root: string;
  /** Names the release in version messages and tags (the git commit). */
  release: string;
  io: DeployIo;
}

export interface DeployResult {
  ok: boolean;
  message: string;
  plan: Plan | null;
}

class StepFailed extends Error {}

const envArgs = (env: string | undefined) => (env ? ['--env', env] : ['--env=']);

export async function runDeploy(input: DeployInput): Promise<DeployResult> {
  const { options, io, env } = input;
  const dry = options.dryRun;
  const target = options.env ?? 'production';
  const wrangler = join(input.root, 'node_modules/.bin/wrangler');
  const configPath = (config: WorkerConfigFile) => deployConfigPath(input.root, config, env);
  const fail = (message: string, plan: Plan | null = null): DeployResult => {
    io.log(`deploy: FAILED: ${message}`);
    return { ok: false, message, plan };
  };
  const wranglerRun = (args: string[], timeoutMs: number, extra: Partial<Command> = {}) =>
    io.run({ file: wrangler, args, timeoutMs, env: { WRANGLER_SEND_METRICS: 'false' }, ...extra });
  const failure = (what: string, r: CommandResult) =>
    `${what} ${r.timedOut ? 'timed out' : `exited ${r.code}`}${r.stderr.trim() ? `: ${lastLines(r.stderr)}` : ''}`;

  io.log(
    `deploy: ${target}, release ${input.release}${dry ? ' (dry run: offline steps only, nothing is uploaded)' : ''}`,
  );

  // 1. The environment.
  const check = checkEnvironment(env, options);
  for (const line of check.wouldRequire) io.log(`deploy: would require: ${line} (a placeholder stands in)`);
  if (check.problems.length > 0)
    return fail(`the environment is not ready:\n  ${check.problems.join('\n  ')}`);
  const mainName = readWorkerConfig(join(input.root, MAIN_CONFIG), options.env).name;
  if (!mainName) return fail(`${MAIN_CONFIG} names no Worker`);

  // 2. Secrets, on each Worker as Cloudflare holds them (names only; values never leave it).
  if (dry) {
    io.log('deploy: would check the secrets of each Worker with `wrangler secret list`');
  } else {
    const problems: string[] = [];
    for (const config of DEPLOY_ORDER) {
      const r = await wranglerRun(
        ['secret', 'list', '--format', 'json', '-c', configPath(config), ...envArgs(options.env)],
        WRANGLER_READ_TIMEOUT_MS,
      );
      if (r.code !== 0) {
        problems.push(failure(`wrangler secret list -c ${config}`, r));
        continue;
      }
      const names = parseJson<{ name: string }[]>(r.stdout)?.map((s) => s.name);
      if (!names) problems.push(`wrangler secret list -c ${config}: unreadable answer`);
      else problems.push(...secretProblems(config, names));
    }
    if (problems.length > 0)
      return fail(
        `secrets are missing (set them with \`wrangler secret put\`, README "Deploy"):\n  ${problems.join('\n  ')}`,
      );
  }

  // 3. What is deployed now, then the plan.
  const migrations = readWorkerConfig(join(input.root, MAIN_CONFIG), options.env)
    .migrations as MigrationEntry[];
  let facts: RemoteFacts;
  if (dry) {
    const tag =
      options.assumeDeployedTag !== undefined ? options.assumeDeployedTag : (migrations.at(-1)?.tag ?? null);
    facts = {
      deployment: [{ versionId: '<current version>', percentage: 100 }],
      deployedMigrationTag: tag,
      assumed: true,
    };
    io.log(
      `deploy: the deployed state is not read in a dry run: assumed one version at 100% with migration tag ${tag ?? 'none'}${options.assumeDeployedTag === undefined ? " (the config's last)" : ''}`,
    );
  } else {
    try {
      facts = await readFacts(input, mainName, wranglerRun, configPath);
    } catch (err) {
      return fail((err as Error).message);
    }
  }
  const plan = planDeploy(options, migrations, facts);
  io.log(`deploy: ${plan.mode} deploy of ${mainName}: ${plan.reason}`);
  if (plan.refusal) return fail(plan.refusal, plan);
  if (plan.previousVersion)
    io.log(`deploy: the version serving now (the rollback target): ${plan.previousVersion}`);

  // 4. The operator's agreement (a Durable Object migration cannot be undone).
  const question = [plan.confirm, `Deploy ${input.release} to ${target} (${plan.mode})?`]
    .filter(Boolean)
    .join('\n');
  if (dry) {
    if (plan.confirm) io.log(`deploy: would ask:\n${plan.confirm}`);
  } else if (!options.yes && !(await io.confirm(question))) {
    return fail('not confirmed (pass --yes to deploy without a prompt)', plan);
  }

  // 5. The steps.
  const ctx: { newVersion: string | null } = { newVersion: null };
  const rollbackArgs = (previous: string) => [
    'versions',
    'deploy',
    `${previous}@100%`,
    '-y',
    '-c',
    configPath(MAIN_CONFIG),
    ...envArgs(options.env),
    '--message',
    `npm run deploy: rollback from ${ctx.newVersion ?? 'a failed version'} (${input.release})`,
  ];
  for (const [i, step] of plan.steps.entries()) {
    io.log(`deploy: [${i + 1}/${plan.steps.length}] ${describeStep(step, options.env)}`);
    if (dry && step.remote) {
      io.log('deploy:   (dry run: not run)');
      if (step.kind === 'upload-version') ctx.newVersion = '<new version>';
      continue;
    }
    try {
      await runStep(step);
    } catch (err) {
      if (!(err instanceof StepFailed)) throw err;
      const reason = `${describeStep(step, options.env)}: ${err.message}`;
      if (step.onFailure === 'rollback' && plan.previousVersion) {
        io.log(`deploy: rolling back to ${plan.previousVersion} at 100%`);
        const r = await wranglerRun(rollbackArgs(plan.previousVersion), WRANGLER_WRITE_TIMEOUT_MS);
        if (r.code !== 0)
          return fail(
            `${reason}\nROLLBACK FAILED (${failure('wrangler versions deploy', r)}); run it by hand:\n  npx wrangler ${rollbackArgs(plan.previousVersion).join(' ')}`,
            plan,
          );
        return fail(`${reason}\nrolled back: ${plan.previousVersion} serves 100% again`, plan);
      }
      if (step.onFailure === 'fix-forward')
        return fail(
          `${reason}\nNo rollback: the deploy applied a Durable Object migration, and Cloudflare refuses a rollback to any version before it. Fix forward (docs/operations.md "Deploy").`,
          plan,
        );
      return fail(reason, plan);
    }
  }
  const message = dry
    ? `dry run passed: environment and configs checked, bundles built; ${plan.steps.filter((s) => s.remote).length} remote steps not run`
    : `${mainName} ${ctx.newVersion ?? ''} serves 100% of ${target}`.replace('  ', ' ');
  io.log(`deploy: ${message}`);
  return { ok: true, message, plan };

  async function runStep(step: Step): Promise<void> {
    const cfg = (config: WorkerConfigFile) => ['-c', configPath(config), ...envArgs(options.env)];
    switch (step.kind) {
      case 'config-check': {
        const problems = deployProblems(readWorkerConfig(configPath(step.config), options.env));
        if (problems.length > 0) throw new StepFailed(problems.join('; '));
        return;
      }
      case 'build': {
        const outdir = mkdtempSync(join(tmpdir(), 'reaction-ledger-deploy-'));
        try {
          const r = await wranglerRun(
            ['deploy', '--dry-run', '--outdir', outdir, ...cfg(step.config)],
            BUILD_TIMEOUT_MS,
          );
          if (r.code !== 0) throw new StepFailed(failure('wrangler deploy --dry-run', r));
        } finally {
          rmSync(outdir, { recursive: true, force: true });
        }
        return;
      }
      case 'migrate-database': {
        const r = await io.run({
          file: join(input.root, 'node_modules/.bin/tsx'),
          args: [join(input.root, 'scripts/migrate.ts')],
          env: { DATABASE_URL: env[DEPLOY_ENV.direct]! },
          timeoutMs: MIGRATE_TIMEOUT_MS,
        });
        if (r.code !== 0) throw new StepFailed(failure('npm run migrate', r));
        return;
      }
      case 'deploy': {
        const r = await wranglerRun(['deploy', ...cfg(step.config)], WRANGLER_WRITE_TIMEOUT_MS, {
          wranglerOutput: true,
        });
        if (r.code !== 0) throw new StepFailed(failure(`wrangler deploy -c ${step.config}`, r));
        if (step.config === MAIN_CONFIG) ctx.newVersion = outputVersion(r, 'deploy');
        return;
      }
      case 'upload-version': {
        const r = await wranglerRun(
          [
            'versions',
            'upload',
            ...cfg(MAIN_CONFIG),
            '--message',
            `npm run deploy ${input.release}`,
            '--tag',
            input.release.slice(0, 25),
          ],
          WRANGLER_WRITE_TIMEOUT_MS,
          { wranglerOutput: true },
        );
        if (r.code !== 0) {
          // The platform found a migration the tag read did not: nothing moved, so stop.
          if (/pending Durable Object migration|10211/.test(r.stderr + r.stdout))
            throw new StepFailed(
              'Cloudflare reports a pending Durable Object migration the tag check did not see; nothing was deployed. Rerun: the tag is read again',
            );
          throw new StepFailed(failure('wrangler versions upload', r));
        }
        ctx.newVersion = outputVersion(r, 'version-upload');
        if (!ctx.newVersion) throw new StepFailed('wrangler printed no version id');
        io.log(
          `deploy:   new version ${ctx.newVersion}; to roll back by hand: npx wrangler ${rollbackArgs(plan.previousVersion!).join(' ')}`,
        );
        return;
      }
      case 'split': {
        const specs = splitSpecs(ctx.newVersion!, plan.previousVersion!, step.percent);
        const r = await wranglerRun(
          [
            'versions',
            'deploy',
            ...specs,
            '-y',
            ...cfg(MAIN_CONFIG),
            '--message',
            `npm run deploy ${input.release}: ${step.percent}%`,
          ],
          WRANGLER_WRITE_TIMEOUT_MS,
        );
        if (r.code !== 0) throw new StepFailed(failure('wrangler versions deploy', r));
        return;
      }
      case 'soak':
        await io.sleep(step.seconds * 1000);
        return;
      case 'smoke':
        await smoke(
          step.via === 'override' ? overrideHeader(mainName!, ctx.newVersion!) : {},
          ctx.newVersion,
        );
        return;
    }
  }

  /** Each check retried until its deadline while the answer may still change (see deploy-smoke.ts). */
  async function smoke(override: Record<string, string>, expectedVersion: string | null): Promise<void> {
    const origin = env[DEPLOY_ENV.origin]!;
    await until('GET /healthz', async () => {
      const a = await io.http(healthzRequest(origin, override), SMOKE_REQUEST_TIMEOUT_MS);
      return judgeHealthz(a.status, a.headers, a.body, expectedVersion);
    });
    if (!options.larkSmoke) {
      io.log('deploy:   Lark challenge skipped (--no-lark-smoke)');
      return;
    }
    const lark: LarkSmoke = {
      installationId: env[DEPLOY_ENV.larkInstallation]!,
      verificationToken: env[DEPLOY_ENV.larkToken]!,
      encryptKey: env[DEPLOY_ENV.larkEncryptKey] || null,
    };
    await until('signed Lark challenge', async () => {
      const { request, challenge } = larkChallengeRequest(origin, lark, override, io.now());
      const a = await io.http(request, SMOKE_REQUEST_TIMEOUT_MS);
      return judgeChallenge(a.status, a.body, challenge);
    });
  }

  async function until(name: string, attempt: () => Promise<Verdict>): Promise<void> {
    const deadline = io.now() + SMOKE_DEADLINE_MS;
    for (;;) {
      let verdict: Verdict;
      try {
        verdict = await attempt();
      } catch (err) {
        // A timeout or a dropped connection says nothing final about the version: retried.
        verdict = { ok: false, retry: true, reason: (err as Error).message };
      }
      if (verdict.ok) {
        io.log(`deploy:   ${name}: ok`);
        return;
      }
      if (!verdict.retry || io.now() + SMOKE_RETRY_MS > deadline)
        throw new StepFailed(`${name}: ${verdict.reason}`);
      io.log(`deploy:   ${name}: ${verdict.reason}; retrying`);
      await io.sleep(SMOKE_RETRY_MS);
    }
  }
}

/**
 * The main Worker's current deployment (`wrangler deployments status --json`) and its Durable
 * Object migration tag (the service's `default_environment.script.migration_tag`, the field
 * wrangler itself compares with the config: see pendingMigrations in deploy-plan.ts).
 */
async function readFacts(
  input: DeployInput,
  mainName: string,
  wranglerRun: (args: string[], timeoutMs: number) => Promise<CommandResult>,
  configPath: (config: WorkerConfigFile) => string,
): Promise<RemoteFacts> {
  const { env, io, options } = input;
  const status = await wranglerRun(
    ['deployments', 'status', '--json', '-c', configPath(MAIN_CONFIG), ...envArgs(options.env)],
    WRANGLER_READ_TIMEOUT_MS,
  );
  let deployment: RemoteFacts['deployment'];
  if (status.code === 0) {
    const parsed = parseJson<{ versions?: { version_id: string; percentage: number }[] }>(status.stdout);
    if (!parsed?.versions) throw new Error('wrangler deployments status --json: unreadable answer');
    deployment = parsed.versions.map((v) => ({ versionId: v.version_id, percentage: v.percentage }));
  } else if (/has no deployments|not found|does not exist|10007/i.test(status.stderr + status.stdout)) {
    deployment = null;
  } else {
    throw new Error(
      `wrangler deployments status ${status.timedOut ? 'timed out' : `exited ${status.code}`}: ${lastLines(status.stderr)}`,
    );
  }
  const url = `https://api.cloudflare.com/client/v4/accounts/${encodeURIComponent(env[DEPLOY_ENV.account]!)}/workers/services/${encodeURIComponent(mainName)}`;
  const answer = await io.http(
    {
      name: 'Cloudflare API: service',
      url,
      method: 'GET',
      headers: { authorization: `Bearer ${env[DEPLOY_ENV.token]}` },
    },
    API_TIMEOUT_MS,
  );
  let tag: string | null;
  if (answer.status === 404) tag = null;
  else if (answer.status === 200) {
    const parsed = parseJson<{ result?: { default_environment?: { script?: { migration_tag?: string } } } }>(
      answer.body,
    );
    if (!parsed?.result) throw new Error('Cloudflare API: unreadable service answer');
    tag = parsed.result.default_environment?.script?.migration_tag ?? null;
  } else
    throw new Error(
      `Cloudflare API: reading ${mainName}'s migration tag answered ${answer.status}: ${answer.body.slice(0, 200)}`,
    );
  return { deployment, deployedMigrationTag: tag, assumed: false };
}

function outputVersion(r: CommandResult, type: string): string | null {
  const entry = r.outputs.find((o) => o.type === type);
  return typeof entry?.version_id === 'string' ? entry.version_id : null;
}

/** JSON from a command's stdout, which may carry a line of banner before it. */
function parseJson<T>(text: string): T | null {
  const start = text.search(/[[{]/);
  if (start < 0) return null;
  try {
    return JSON.parse(text.slice(start)) as T;
  } catch {
    // Not JSON: the caller reports an unreadable answer.
    return null;
  }
}

const lastLines = (text: string) => text.trim().split('\n').slice(-5).join('\n    ');
