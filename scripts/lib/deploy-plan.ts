/**
 * `npm run deploy`'s decisions, as pure functions of their inputs (tested offline in
 * test/node/deploy/): the command line, the deploy environment's checks, whether a Durable
 * Object migration is pending, and the ordered steps of a release. scripts/lib/deploy-runner.ts
 * carries the steps out; nothing here runs a command or reads the network.
 */

/** The deploy environment: what the operator's shell (or `--env-file`) must provide. */
export const DEPLOY_ENV = {
  /** Every wrangler command and the migration-tag read (an API token, never a login). */
  token: 'CLOUDFLARE_API_TOKEN',
  /** wrangler needs it without a prompt when the token sees several accounts; the tag read too. */
  account: 'CLOUDFLARE_ACCOUNT_ID',
  /** The pooled endpoint (`-pooler` host) the Workers' DATABASE_URL secret holds. */
  pooled: 'DATABASE_URL',
  /** The direct endpoint: migrations take a session advisory lock and session timeouts. */
  direct: 'DIRECT_DATABASE_URL',
  /** The main Worker's public origin (its custom domain): the smoke tests' target. */
  origin: 'WORKER_URL',
  /** A registered installation the signed url_verification smoke test is sent to. */
  larkInstallation: 'LARK_SMOKE_INSTALLATION_ID',
  /** That installation's Verification Token (Lark developer console, Events and callbacks). */
  larkToken: 'LARK_SMOKE_VERIFICATION_TOKEN',
  /** Its Encrypt Key; unset for an app without one (the challenge then goes plain, unsigned). */
  larkEncryptKey: 'LARK_SMOKE_ENCRYPT_KEY',
} as const;

/** The three Workers in deploy order: the Tail Worker both others name, the cleanup the main one binds. */
export const DEPLOY_ORDER = ['alerts.wrangler.toml', 'retention.wrangler.toml', 'wrangler.toml'] as const;
export type WorkerConfigFile = (typeof DEPLOY_ORDER)[number];
export const MAIN_CONFIG: WorkerConfigFile = 'wrangler.toml';

export interface DeployOptions {
  dryRun: boolean;
  /** The wrangler environment (`staging`), or undefined for the top level (production). */
  env: string | undefined;
  /** Traffic on the new version after each step, ascending, ending at 100. */
  percentages: number[];
  /** Wait after each traffic step before its smoke test (errors surface in that time). */
  soakSeconds: number;
  /** No prompt: the operator agreed beforehand (required without a terminal). */
  yes: boolean;
  /** Off only before any installation exists (a first deploy): the challenge needs one. */
  larkSmoke: boolean;
  envFile: string | undefined;
  /** Dry run only: plan as if the deployed main Worker's migration tag were this (`none`: null). */
  assumeDeployedTag: string | null | undefined;
}

export class UsageError extends Error {}

export const DEFAULT_PERCENTAGES = [10, 50, 100];
export const DEFAULT_SOAK_SECONDS = 60;

export const USAGE = `usage: npm run deploy -- [--dry-run] [--env staging] [--percentages 10,50,100]
       [--soak-seconds 60] [--yes] [--env-file <file>] [--no-lark-smoke]
       [--assume-deployed-tag <tag>|none]   (dry run only)`;

/** Traffic steps: integers 1–100, strictly ascending, the last 100 (a rollout that ends). */
export function parsePercentages(text: string): number[] {
  const parts = text.split(',').map((p) => p.trim().replace(/%$/, ''));
  const values = parts.map((p) => (/^\d+$/.test(p) ? Number(p) : Number.NaN));
  if (values.some((v) => !Number.isInteger(v) || v < 1 || v > 100))
    throw new UsageError(`--percentages: each step is an integer from 1 to 100, got "${text}"`);
  for (let i = 1; i < values.length; i++)
    if (values[i]! <= values[i - 1]!) throw new UsageError(`--percentages: steps must ascend, got "${text}"`);
  if (values.at(-1) !== 100) throw new UsageError(`--percentages: the last step must be 100, got "${text}"`);
  return values;
}

export function parseDeployArgs(argv: readonly string[]): DeployOptions {
  const options: DeployOptions = {
    dryRun: false,
    env: undefined,
    percentages: DEFAULT_PERCENTAGES,
    soakSeconds: DEFAULT_SOAK_SECONDS,
    yes: false,
    larkSmoke: true,
    envFile: undefined,
    assumeDeployedTag: undefined,
  };
  const args = [...argv];
  const value = (flag: string) => {
    const v = args.shift();
    if (v === undefined || v.startsWith('--')) throw new UsageError(`${flag} needs a value`);
    return v;
  };
  while (args.length > 0) {
    const raw = args.shift()!;
    const [flag, inline] = raw.includes('=')
      ? [raw.slice(0, raw.indexOf('=')), raw.slice(raw.indexOf('=') + 1)]
      : [raw];
    if (inline !== undefined) args.unshift(inline);
    switch (flag) {
      case '--dry-run':
        options.dryRun = true;
        break;
      case '--yes':
      case '-y':
        options.yes = true;
        break;
      case '--no-lark-smoke':
        options.larkSmoke = false;
        break;
      case '--env': {
        const env = value(flag);
        // The only environment the configs declare; a typo must not deploy the top level.
        if (env !== 'staging') throw new UsageError(`--env: only "staging" is declared, got "${env}"`);
        options.env = env;
        break;
      }
      case '--percentages':
        options.percentages = parsePercentages(value(flag));
        break;
      case '--soak-seconds': {
        const v = value(flag);
        if (!/^\d+$/.test(v) || Number(v) > 3600)
          throw new UsageError(`--soak-seconds: 0 to 3600, got "${v}"`);
        options.soakSeconds = Number(v);
        break;
      }
      case '--env-file':
        options.envFile = value(flag);
        break;
      case '--assume-deployed-tag': {
        const v = value(flag);
        options.assumeDeployedTag = v === 'none' ? null : v;
        break;
      }
      default:
        throw new UsageError(`unknown argument "${raw}"\n${USAGE}`);
    }
  }
  if (options.assumeDeployedTag !== undefined && !options.dryRun)
    throw new UsageError('--assume-deployed-tag is for --dry-run only: a deploy reads the deployed tag');
  return options;
}

// ---------------------------------------------------------------------------------------------
// The environment

export interface EnvironmentCheck {
  /** Each one refuses the deploy. */
  problems: string[];
  /** Dry run: what a deploy would require and was not given here. */
  wouldRequire: string[];
}

function parseUrl(text: string): URL | null {
  try {
    return new URL(text);
  } catch {
    return null;
  }
}

/** Neon names a compute endpoint `ep-…`; its pooled host is the same with `-pooler`. */
const NEON_POOLER = /-pooler(?=\.)/;

/**
 * The database URLs: migrations on the direct endpoint (the runner holds a session advisory lock
 * and sets session timeouts, which PgBouncer in transaction mode does not keep), the Workers on
 * the pooled one (README "Deploy", docs/operations.md), both the same database, so the schema
 * migrated is the one the Workers read. Only DATABASE_URL as given here is compared: the secret
 * itself cannot be read back from Cloudflare.
 */
export function databaseUrlProblems(pooled: string, direct: string): string[] {
  const problems: string[] = [];
  const d = parseUrl(direct);
  const p = parseUrl(pooled);
  if (!d || !/^postgres(ql)?:$/.test(d.protocol))
    problems.push(`${DEPLOY_ENV.direct} is not a postgres:// URL`);
  if (!p || !/^postgres(ql)?:$/.test(p.protocol))
    problems.push(`${DEPLOY_ENV.pooled} is not a postgres:// URL`);
  if (!d || !p || problems.length > 0) return problems;
  if (NEON_POOLER.test(d.hostname) || d.searchParams.get('pgbouncer') === 'true')
    problems.push(
      `${DEPLOY_ENV.direct} is a pooled endpoint (${d.hostname}): migrations need the direct one (the host without -pooler)`,
    );
  const neon = (host: string) => host.endsWith('.neon.tech');
  if (neon(p.hostname) && !NEON_POOLER.test(p.hostname))
    problems.push(
      `${DEPLOY_ENV.pooled} is Neon's direct endpoint (${p.hostname}): the Workers need the pooled one (-pooler)`,
    );
  if (
    neon(p.hostname) &&
    neon(d.hostname) &&
    p.hostname.replace(NEON_POOLER, '') !== d.hostname.replace(NEON_POOLER, '')
  )
    problems.push(`${DEPLOY_ENV.pooled} and ${DEPLOY_ENV.direct} name different Neon endpoints`);
  if (decodeURIComponent(p.pathname) !== decodeURIComponent(d.pathname))
    problems.push(`${DEPLOY_ENV.pooled} and ${DEPLOY_ENV.direct} name different databases`);
  return problems;
}

/**
 * The names and shapes a deploy needs. A real deploy refuses on any gap; a dry run (CI, with no
 * Cloudflare account) reports each missing name as "would require" and still refuses a value
 * that is present and wrong.
 */
export function checkEnvironment(
  env: Readonly<Record<string, string | undefined>>,
  options: Pick<DeployOptions, 'dryRun' | 'larkSmoke'>,
): EnvironmentCheck {
  const problems: string[] = [];
  const wouldRequire: string[] = [];
  const required: string[] = [
    DEPLOY_ENV.token,
    DEPLOY_ENV.account,
    DEPLOY_ENV.pooled,
    DEPLOY_ENV.direct,
    DEPLOY_ENV.origin,
  ];
  if (options.larkSmoke) required.push(DEPLOY_ENV.larkInstallation, DEPLOY_ENV.larkToken);
  for (const name of required)
    if (!env[name]?.trim()) (options.dryRun ? wouldRequire : problems).push(`${name} is not set`);
  const pooled = env[DEPLOY_ENV.pooled];
  const direct = env[DEPLOY_ENV.direct];
  if (pooled && direct) problems.push(...databaseUrlProblems(pooled, direct));
  const origin = env[DEPLOY_ENV.origin];
  if (origin) {
    const u = parseUrl(origin);
    if (u?.protocol !== 'https:' || (u.pathname !== '/' && u.pathname !== '') || u.search)
      problems.push(`${DEPLOY_ENV.origin} must be the Worker's https:// origin (no path), got "${origin}"`);
  }
  const installation = env[DEPLOY_ENV.larkInstallation];
  if (options.larkSmoke && installation && !/^[A-Za-z0-9_-]{1,64}$/.test(installation))
    problems.push(`${DEPLOY_ENV.larkInstallation} is not an installation id`);
  return { problems, wouldRequire };
}

/** Secrets each Worker reads (workers/env.ts, workers/retention/config.ts, workers/alerts/). */
export function secretProblems(config: WorkerConfigFile, listed: readonly string[]): string[] {
  const has = (name: string) => listed.includes(name);
  const missing = (names: string[]) => names.filter((n) => !has(n));
  if (config === 'alerts.wrangler.toml')
    return missing(['ALERT_WEBHOOK_URL']).map((n) => `${config}: secret ${n} is not set`);
  if (config === 'retention.wrangler.toml')
    return missing(['DATABASE_URL']).map((n) => `${config}: secret ${n} is not set`);
  const problems = missing(['DATABASE_URL', 'ADMIN_TOKEN', 'SECRET_KEYS']).map(
    (n) => `${config}: secret ${n} is not set`,
  );
  // Vars set outside the config are deleted by every deploy (no --keep-vars): the JWKS
  // settings must be secrets as well.
  const jwks = ['ACTOR_JWKS_URL', 'ACTOR_JWT_ISSUER', 'ACTOR_JWT_AUDIENCE'];
  if (!has('ACTOR_JWT_SECRET') && missing(jwks).length > 0)
    problems.push(`${config}: secret ACTOR_JWT_SECRET is not set (nor ${jwks.join(', ')})`);
  return problems;
}

// ---------------------------------------------------------------------------------------------
// Durable Object migrations

export interface MigrationEntry {
  tag: string;
  new_classes?: string[];
  new_sqlite_classes?: string[];
  deleted_classes?: string[];
  renamed_classes?: { from: string; to: string }[];
  transferred_classes?: { from: string; from_script: string; to: string }[];
}

/**
 * The config's `[[migrations]]` a deploy would apply, given the migration tag the deployed
 * Worker carries (null: never deployed, or deployed without migrations).
 *
 * The same rule wrangler applies when it builds an upload (getMigrationsToUpload in wrangler
 * 4.164's deploy helpers): no deployed tag, every migration; a deployed tag the config no longer
 * has, every migration (wrangler warns and sends them all); otherwise those after it. The tag
 * is read from where wrangler reads it, the service's `default_environment.script.migration_tag`
 * (scripts/lib/deploy-runner.ts), so this decision and the platform's refusal of
 * `wrangler versions upload` ("pending Durable Object migration", error 10211) agree. Other
 * sources were weighed: `deployments status --json` and `versions view --json` carry no tag; a
 * tag recorded by this script would miss a deploy made by hand.
 */
export function pendingMigrations(
  config: readonly MigrationEntry[],
  deployedTag: string | null,
): MigrationEntry[] {
  if (config.length === 0) return [];
  if (deployedTag === null) return [...config];
  const at = config.findIndex((m) => m.tag === deployedTag);
  return at < 0 ? [...config] : config.slice(at + 1);
}

/** One line per class change, for the operator's confirmation. */
export function describeMigration(m: MigrationEntry): string {
  const parts: string[] = [];
  const created = [...(m.new_classes ?? []), ...(m.new_sqlite_classes ?? [])];
  if (created.length) parts.push(`creates ${created.join(', ')}`);
  if (m.deleted_classes?.length) parts.push(`DELETES ${m.deleted_classes.join(', ')} and its stored state`);
  for (const r of m.renamed_classes ?? []) parts.push(`renames ${r.from} to ${r.to}`);
  for (const t of m.transferred_classes ?? [])
    parts.push(`transfers ${t.from} from ${t.from_script} as ${t.to}`);
  return `${m.tag}: ${parts.join('; ') || 'no class change'}`;
}

// ---------------------------------------------------------------------------------------------
// The plan

/** What was read from Cloudflare before planning (a dry run reads nothing: assumed). */
export interface RemoteFacts {
  /** The main Worker's current deployment: its versions and their traffic. Null: never deployed. */
  deployment: { versionId: string; percentage: number }[] | null;
  deployedMigrationTag: string | null;
  /** True when nothing was read (dry run): the plan says what it assumed. */
  assumed: boolean;
}

/** What to do when a step fails. */
export type OnFailure =
  /** Nothing moved traffic yet: stop, exit non-zero. */
  | 'stop'
  /** The new version has (or may have) traffic: deploy the previous version at 100%, exit non-zero. */
  | 'rollback'
  /** A Durable Object migration went out: the platform refuses a rollback past it; fix forward. */
  | 'fix-forward';

export type Step =
  | { kind: 'config-check'; config: WorkerConfigFile; remote: false; onFailure: 'stop' }
  | { kind: 'build'; config: WorkerConfigFile; remote: false; onFailure: 'stop' }
  | { kind: 'migrate-database'; remote: true; onFailure: 'stop' }
  /** Plain `wrangler deploy`: 100% at once, migrations applied. */
  | { kind: 'deploy'; config: WorkerConfigFile; remote: true; onFailure: OnFailure }
  | { kind: 'upload-version'; remote: true; onFailure: 'stop' }
  /** `wrangler versions deploy new@p previous@(100-p)`; p = 0 puts it in the deployment for the override. */
  | { kind: 'split'; percent: number; remote: true; onFailure: 'rollback' }
  | { kind: 'soak'; seconds: number; remote: true; onFailure: 'rollback' }
  /** `override`: with the version-override header, the new version only; `live`: as users reach it. */
  | { kind: 'smoke'; via: 'override' | 'live'; remote: true; onFailure: OnFailure };

export interface Plan {
  mode: 'gradual' | 'plain';
  /** Why this mode, for the log. */
  reason: string;
  /** Set when the deploy must not go ahead at all. */
  refusal: string | null;
  /** A plain deploy that applies Durable Object migrations needs the operator's agreement. */
  confirm: string | null;
  /** The version that serves 100% now (the rollback target), or null on a first deploy. */
  previousVersion: string | null;
  steps: Step[];
}

/**
 * The ordered steps of one release. Every path starts offline (config rules, builds), then
 * migrates Postgres (expand-only migrations, docs/operations.md "Two versions at once", so the
 * old code keeps working on the new schema while it still serves), then deploys the Tail Worker
 * and the retention Worker plainly (no public traffic; the main Worker names both), then the
 * main Worker:
 *  - gradual: upload a version, add it to the deployment at 0% (the override header applies only
 *    to versions in the deployment), smoke-test it through the override, then each percentage
 *    with a soak and a smoke test. Versions are always listed new first, then previous, so an
 *    object moved to the new version is never moved back by a later step (the platform's
 *    guarantee for a growing share listed in the same order). Any failure after the upload rolls
 *    back to the previous version at 100%.
 *  - plain, when a Durable Object migration is pending (the platform refuses it in a version:
 *    lifecycle changes are atomic and nothing before them can be rolled back to) or on a first
 *    deploy: refused while a gradual deployment is in progress (the migration would land on top
 *    of two versions' objects at once), confirmed by the operator with the class changes listed,
 *    then `wrangler deploy` and a live smoke test whose failure is fixed forward.
 */
export function planDeploy(
  options: Pick<DeployOptions, 'percentages' | 'soakSeconds'>,
  configMigrations: readonly MigrationEntry[],
  facts: RemoteFacts,
): Plan {
  const offline: Step[] = [
    ...DEPLOY_ORDER.map(
      (config) => ({ kind: 'config-check', config, remote: false, onFailure: 'stop' }) as const,
    ),
    ...DEPLOY_ORDER.map((config) => ({ kind: 'build', config, remote: false, onFailure: 'stop' }) as const),
  ];
  const before: Step[] = [
    ...offline,
    { kind: 'migrate-database', remote: true, onFailure: 'stop' },
    { kind: 'deploy', config: 'alerts.wrangler.toml', remote: true, onFailure: 'stop' },
    { kind: 'deploy', config: 'retention.wrangler.toml', remote: true, onFailure: 'stop' },
  ];
  const deployment = facts.deployment;
  const previous = deployment?.find((v) => v.percentage === 100)?.versionId ?? null;
  const pending = pendingMigrations(configMigrations, facts.deployedMigrationTag);
  const inProgress =
    deployment && deployment.length > 1
      ? `a gradual deployment is in progress (${deployment.map((v) => `${v.versionId}@${v.percentage}%`).join(', ')}): finish it (\`wrangler versions deploy <id>@100\`) or roll it back first`
      : null;

  if (deployment === null || pending.length > 0) {
    const reason =
      deployment === null
        ? 'first deploy of the main Worker: there is no version to test beside or roll back to'
        : `Durable Object migration pending (${pending.map((m) => m.tag).join(', ')}; deployed tag ${facts.deployedMigrationTag ?? 'none'}): a version upload cannot carry it`;
    return {
      mode: 'plain',
      reason,
      refusal: inProgress,
      confirm:
        pending.length > 0 && deployment !== null
          ? [
              'This deploy applies Durable Object migrations to every object at once, and Cloudflare',
              'refuses any rollback to a version before them:',
              ...pending.map((m) => `  ${describeMigration(m)}`),
              'Ship such a migration alone, with code that works either way; a class it deletes',
              'must be unused by the version now serving (docs/operations.md "Deploy").',
            ].join('\n')
          : null,
      previousVersion: previous,
      steps: [
        ...before,
        { kind: 'deploy', config: MAIN_CONFIG, remote: true, onFailure: 'stop' },
        // Nothing before a first deploy to return to; past a migration the platform refuses.
        { kind: 'smoke', via: 'live', remote: true, onFailure: deployment === null ? 'stop' : 'fix-forward' },
      ],
    };
  }

  const steps: Step[] = [
    ...before,
    { kind: 'upload-version', remote: true, onFailure: 'stop' },
    { kind: 'split', percent: 0, remote: true, onFailure: 'rollback' },
    { kind: 'smoke', via: 'override', remote: true, onFailure: 'rollback' },
  ];
  for (const percent of options.percentages) {
    steps.push({ kind: 'split', percent, remote: true, onFailure: 'rollback' });
    if (options.soakSeconds > 0)
      steps.push({ kind: 'soak', seconds: options.soakSeconds, remote: true, onFailure: 'rollback' });
    steps.push({ kind: 'smoke', via: 'override', remote: true, onFailure: 'rollback' });
  }
  return {
    mode: 'gradual',
    reason: `no Durable Object migration pending (deployed tag ${facts.deployedMigrationTag ?? 'none'} is the config's last)`,
    refusal: inProgress ?? (previous === null ? 'the current deployment has no version at 100%' : null),
    confirm: null,
    previousVersion: previous,
    steps,
  };
}

/** The `<id>@<pct>%` specs of a split: new first, then the previous version (see planDeploy). */
export function splitSpecs(newVersion: string, previousVersion: string, percent: number): string[] {
  if (percent === 100) return [`${newVersion}@100%`];
  return [`${newVersion}@${percent}%`, `${previousVersion}@${100 - percent}%`];
}

/** One line per step, as the log and a dry run print it. */
export function describeStep(step: Step, env: string | undefined): string {
  const e = env ? ` --env ${env}` : '';
  switch (step.kind) {
    case 'config-check':
      return `check ${step.config}${e}: observability, source maps, no workers.dev`;
    case 'build':
      return `build ${step.config}${e}: wrangler deploy --dry-run --outdir <temp>`;
    case 'migrate-database':
      return `migrate Postgres on ${DEPLOY_ENV.direct} (tsx scripts/migrate.ts)`;
    case 'deploy':
      return `wrangler deploy -c ${step.config}${e}`;
    case 'upload-version':
      return `wrangler versions upload -c ${MAIN_CONFIG}${e}`;
    case 'split':
      return `wrangler versions deploy <new>@${step.percent}%${step.percent < 100 ? ` <previous>@${100 - step.percent}%` : ''} -y${e}`;
    case 'soak':
      return `wait ${step.seconds} s`;
    case 'smoke':
      return step.via === 'override'
        ? 'smoke test the new version through Cloudflare-Workers-Version-Overrides: GET /healthz, a signed Lark challenge'
        : 'smoke test the live Worker: GET /healthz (expecting the deployed version), a signed Lark challenge';
  }
}
