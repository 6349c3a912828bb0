/**
 * `npm run deploy`'s decisions (scripts/lib/deploy-plan.ts, docs/operations.md "Deploy"): the
 * command line, the environment's refusals, the Durable Object migration check and the plan of
 * each kind of release. Pure functions: nothing here reaches Cloudflare or a database.
 */
import { describe, expect, it } from 'vitest';
import {
  checkEnvironment,
  databaseUrlProblems,
  type MigrationEntry,
  parseDeployArgs,
  parsePercentages,
  pendingMigrations,
  planDeploy,
  type RemoteFacts,
  secretProblems,
  splitSpecs,
  UsageError,
} from '../../../scripts/lib/deploy-plan';
import { GOOD_ENV } from './fake-cloudflare';

const MIGRATIONS: MigrationEntry[] = [
  { tag: 'v1', new_sqlite_classes: ['TypingMaintenance', 'RetentionCleanup', 'WorkspaceQuota', 'ActorHost'] },
  { tag: 'v2', deleted_classes: ['RetentionCleanup'] },
];
const OPTIONS = { percentages: [10, 50, 100], soakSeconds: 60 };
const serving = (tag: string | null): RemoteFacts => ({
  deployment: [{ versionId: 'prev', percentage: 100 }],
  deployedMigrationTag: tag,
  assumed: false,
});

describe('the command line', () => {
  it('reads every flag; the defaults are a 10/50/100 rollout with a minute of soak', () => {
    expect(parseDeployArgs([])).toMatchObject({
      dryRun: false,
      env: undefined,
      percentages: [10, 50, 100],
      soakSeconds: 60,
      yes: false,
      larkSmoke: true,
    });
    expect(
      parseDeployArgs([
        '--dry-run',
        '--env',
        'staging',
        '--percentages=5,25,100',
        '--soak-seconds',
        '0',
        '-y',
        '--no-lark-smoke',
        '--env-file',
        'x.env',
      ]),
    ).toMatchObject({
      dryRun: true,
      env: 'staging',
      percentages: [5, 25, 100],
      soakSeconds: 0,
      yes: true,
      larkSmoke: false,
      envFile: 'x.env',
    });
  });

  it('refuses percentages that do not climb to 100, an unknown env and an assumed tag outside a dry run', () => {
    expect(parsePercentages('10%,100%')).toEqual([10, 100]);
    for (const bad of ['50,10,100', '10,50', '0,100', '10,10,100', 'ten,100', '150'])
      expect(() => parsePercentages(bad), bad).toThrow(UsageError);
    expect(() => parseDeployArgs(['--env', 'prod'])).toThrow(/only "staging"/);
    expect(() => parseDeployArgs(['--assume-deployed-tag', 'v1'])).toThrow(/--dry-run only/);
    expect(parseDeployArgs(['--dry-run', '--assume-deployed-tag', 'none']).assumeDeployedTag).toBeNull();
    expect(() => parseDeployArgs(['--percentage', '10'])).toThrow(/unknown argument/);
  });
});

describe('the environment check refuses a deploy that could not finish', () => {
  const deploy = { dryRun: false, larkSmoke: true };

  it('a complete environment passes', () => {
    expect(checkEnvironment(GOOD_ENV, deploy)).toEqual({ problems: [], wouldRequire: [] });
  });

  it('no Cloudflare token: refused', () => {
    const { CLOUDFLARE_API_TOKEN: _, ...env } = GOOD_ENV;
    expect(checkEnvironment(env, deploy).problems).toEqual(['CLOUDFLARE_API_TOKEN is not set']);
  });

  it('a migration URL on the pooled endpoint: refused (the runner needs a session)', () => {
    const env = { ...GOOD_ENV, DIRECT_DATABASE_URL: GOOD_ENV.DATABASE_URL! };
    expect(checkEnvironment(env, deploy).problems).toEqual([
      expect.stringMatching(/^DIRECT_DATABASE_URL is a pooled endpoint \(ep-quiet-sun-123456-pooler\./),
    ]);
    // Another host behind PgBouncer, marked as such in its URL.
    expect(
      databaseUrlProblems(GOOD_ENV.DATABASE_URL!, 'postgres://u@db.internal:6432/ledger?pgbouncer=true'),
    ).toEqual([expect.stringMatching(/^DIRECT_DATABASE_URL is a pooled endpoint \(db\.internal\)/)]);
  });

  it("the Workers' URL on Neon's direct endpoint, or the two URLs on different databases: refused", () => {
    expect(databaseUrlProblems(GOOD_ENV.DIRECT_DATABASE_URL!, GOOD_ENV.DIRECT_DATABASE_URL!)).toEqual([
      expect.stringMatching(/^DATABASE_URL is Neon's direct endpoint/),
    ]);
    expect(
      databaseUrlProblems(
        GOOD_ENV.DATABASE_URL!,
        GOOD_ENV.DIRECT_DATABASE_URL!.replace('ep-quiet-sun', 'ep-other-moon'),
      ),
    ).toEqual(['DATABASE_URL and DIRECT_DATABASE_URL name different Neon endpoints']);
    expect(
      databaseUrlProblems(GOOD_ENV.DATABASE_URL!, GOOD_ENV.DIRECT_DATABASE_URL!.replace('/ledger', '/other')),
    ).toEqual(['DATABASE_URL and DIRECT_DATABASE_URL name different databases']);
  });

  it('a Worker URL with a path, or plain http: refused', () => {
    for (const origin of ['http://reactions.example.com', 'https://reactions.example.com/healthz'])
      expect(checkEnvironment({ ...GOOD_ENV, WORKER_URL: origin }, deploy).problems).toEqual([
        expect.stringMatching(/^WORKER_URL must be the Worker's https:\/\/ origin/),
      ]);
  });

  it('a dry run with nothing set reports what it would require and passes; a wrong value still fails it', () => {
    const dry = checkEnvironment({}, { dryRun: true, larkSmoke: true });
    expect(dry.problems).toEqual([]);
    expect(dry.wouldRequire).toContain('CLOUDFLARE_API_TOKEN is not set');
    expect(dry.wouldRequire).toContain('DIRECT_DATABASE_URL is not set');
    expect(dry.wouldRequire).toContain('LARK_SMOKE_INSTALLATION_ID is not set');
    expect(
      checkEnvironment(
        { DATABASE_URL: GOOD_ENV.DATABASE_URL, DIRECT_DATABASE_URL: GOOD_ENV.DATABASE_URL },
        { dryRun: true, larkSmoke: true },
      ).problems,
    ).toHaveLength(1);
    expect(checkEnvironment({}, { dryRun: true, larkSmoke: false }).wouldRequire).not.toContain(
      'LARK_SMOKE_INSTALLATION_ID is not set',
    );
  });

  it('a missing secret on any Worker is named; the actor key may be a JWKS instead', () => {
    expect(secretProblems('wrangler.toml', ['DATABASE_URL', 'SECRET_KEYS', 'ACTOR_JWT_SECRET'])).toEqual([
      'wrangler.toml: secret ADMIN_TOKEN is not set',
    ]);
    expect(secretProblems('wrangler.toml', ['DATABASE_URL', 'ADMIN_TOKEN', 'SECRET_KEYS'])).toEqual([
      'wrangler.toml: secret ACTOR_JWT_SECRET is not set (nor ACTOR_JWKS_URL, ACTOR_JWT_ISSUER, ACTOR_JWT_AUDIENCE)',
    ]);
    expect(
      secretProblems('wrangler.toml', [
        'DATABASE_URL',
        'ADMIN_TOKEN',
        'SECRET_KEYS',
        'ACTOR_JWKS_URL',
        'ACTOR_JWT_ISSUER',
        'ACTOR_JWT_AUDIENCE',
      ]),
    ).toEqual([]);
    expect(secretProblems('retention.wrangler.toml', [])).toEqual([
      'retention.wrangler.toml: secret DATABASE_URL is not set',
    ]);
    expect(secretProblems('alerts.wrangler.toml', [])).toEqual([
      'alerts.wrangler.toml: secret ALERT_WEBHOOK_URL is not set',
    ]);
  });
});

describe('a pending Durable Object migration is detected as wrangler decides it', () => {
  it('the deployed tag is the last: none pending', () => {
    expect(pendingMigrations(MIGRATIONS, 'v2')).toEqual([]);
  });
  it('an older deployed tag: the migrations after it', () => {
    expect(pendingMigrations(MIGRATIONS, 'v1').map((m) => m.tag)).toEqual(['v2']);
  });
  it('no deployed tag, or one the config no longer has: every migration', () => {
    expect(pendingMigrations(MIGRATIONS, null).map((m) => m.tag)).toEqual(['v1', 'v2']);
    expect(pendingMigrations(MIGRATIONS, 'v0-gone').map((m) => m.tag)).toEqual(['v1', 'v2']);
  });
  it('a config without migrations has none pending', () => {
    expect(pendingMigrations([], null)).toEqual([]);
  });
});

describe('the plan', () => {
  it('no migration pending: offline checks, the database, the two side Workers, then a gradual rollout', () => {
    const plan = planDeploy(OPTIONS, MIGRATIONS, serving('v2'));
    expect(plan.mode).toBe('gradual');
    expect(plan.refusal).toBeNull();
    expect(plan.previousVersion).toBe('prev');
    expect(
      plan.steps.map((s) => [
        s.kind,
        'config' in s ? s.config : 'percent' in s ? s.percent : 'via' in s ? s.via : '',
        s.onFailure,
      ]),
    ).toEqual([
      ['config-check', 'alerts.wrangler.toml', 'stop'],
      ['config-check', 'retention.wrangler.toml', 'stop'],
      ['config-check', 'wrangler.toml', 'stop'],
      ['build', 'alerts.wrangler.toml', 'stop'],
      ['build', 'retention.wrangler.toml', 'stop'],
      ['build', 'wrangler.toml', 'stop'],
      ['migrate-database', '', 'stop'],
      ['deploy', 'alerts.wrangler.toml', 'stop'],
      ['deploy', 'retention.wrangler.toml', 'stop'],
      ['upload-version', '', 'stop'],
      // In the deployment at 0% first: the override header reaches only a deployed version.
      ['split', 0, 'rollback'],
      ['smoke', 'override', 'rollback'],
      ['split', 10, 'rollback'],
      ['soak', '', 'rollback'],
      ['smoke', 'override', 'rollback'],
      ['split', 50, 'rollback'],
      ['soak', '', 'rollback'],
      ['smoke', 'override', 'rollback'],
      ['split', 100, 'rollback'],
      ['soak', '', 'rollback'],
      ['smoke', 'override', 'rollback'],
    ]);
    expect(plan.steps.filter((s) => !s.remote).map((s) => s.kind)).toEqual(
      Array(6).fill('config-check').fill('build', 3),
    );
  });

  it('splits list the new version first, then the previous one, as the order keeps objects where they moved', () => {
    expect(splitSpecs('new', 'prev', 0)).toEqual(['new@0%', 'prev@100%']);
    expect(splitSpecs('new', 'prev', 10)).toEqual(['new@10%', 'prev@90%']);
    expect(splitSpecs('new', 'prev', 100)).toEqual(['new@100%']);
  });

  it('a Durable Object migration pending: a plain deploy, confirmed, smoke-tested live, fixed forward', () => {
    const plan = planDeploy(OPTIONS, MIGRATIONS, serving('v1'));
    expect(plan.mode).toBe('plain');
    expect(plan.reason).toMatch(/Durable Object migration pending \(v2; deployed tag v1\)/);
    expect(plan.confirm).toMatch(/v2: DELETES RetentionCleanup and its stored state/);
    expect(plan.steps.map((s) => s.kind)).not.toContain('upload-version');
    expect(plan.steps.map((s) => s.kind)).not.toContain('split');
    expect(plan.steps.slice(-2)).toEqual([
      { kind: 'deploy', config: 'wrangler.toml', remote: true, onFailure: 'stop' },
      { kind: 'smoke', via: 'live', remote: true, onFailure: 'fix-forward' },
    ]);
  });

  it('a migration while a gradual deployment is in progress is refused', () => {
    const plan = planDeploy(OPTIONS, MIGRATIONS, {
      deployment: [
        { versionId: 'a', percentage: 40 },
        { versionId: 'b', percentage: 60 },
      ],
      deployedMigrationTag: 'v1',
      assumed: false,
    });
    expect(plan.refusal).toMatch(/a gradual deployment is in progress \(a@40%, b@60%\)/);
  });

  it('a gradual release on top of an unfinished one is refused too', () => {
    const plan = planDeploy(OPTIONS, MIGRATIONS, {
      deployment: [
        { versionId: 'a', percentage: 90 },
        { versionId: 'b', percentage: 10 },
      ],
      deployedMigrationTag: 'v2',
      assumed: false,
    });
    expect(plan.mode).toBe('gradual');
    expect(plan.refusal).toMatch(/in progress/);
  });

  it('a first deploy is plain with nothing to roll back to and nothing to confirm', () => {
    const plan = planDeploy(OPTIONS, MIGRATIONS, {
      deployment: null,
      deployedMigrationTag: null,
      assumed: false,
    });
    expect(plan.mode).toBe('plain');
    expect(plan.previousVersion).toBeNull();
    expect(plan.confirm).toBeNull();
    expect(plan.steps.at(-1)).toEqual({ kind: 'smoke', via: 'live', remote: true, onFailure: 'stop' });
  });

  it('no soak: each step is followed by its smoke test at once', () => {
    const plan = planDeploy({ percentages: [100], soakSeconds: 0 }, MIGRATIONS, serving('v2'));
    expect(plan.steps.slice(-4).map((s) => s.kind)).toEqual(['split', 'smoke', 'split', 'smoke']);
  });
});
