/**
 * `npm run deploy` carried out against a fake Cloudflare (./fake-cloudflare.ts): the real plan,
 * the real config checks, the real smoke requests (the Lark challenge opened by the webhook's own
 * verifier); only the wrangler commands and the Worker's answers are stood in for. Builds are
 * answered by the fake: `.ci/run`'s `npm run deploy -- --dry-run` runs them for real.
 */
import { fileURLToPath, URL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { type DeployOptions, parseDeployArgs } from '../../../scripts/lib/deploy-plan';
import { runDeploy } from '../../../scripts/lib/deploy-runner';
import { FakeCloudflare, GOOD_ENV, NEW, PLAIN, PREVIOUS } from './fake-cloudflare';

const root = fileURLToPath(new URL('../../..', import.meta.url));

function deploy(
  cf: FakeCloudflare,
  args: string[] = ['--yes'],
  env: Record<string, string | undefined> = GOOD_ENV,
) {
  const options: DeployOptions = parseDeployArgs(args);
  return runDeploy({ options, env, root, release: 'abc123def456', io: cf });
}

/** Commands that change something on Cloudflare or in the database. */
const writes = (cf: FakeCloudflare) =>
  cf.commands.filter(
    (c) =>
      c.file.endsWith('tsx') ||
      (c.args[0] === 'deploy' && !c.args.includes('--dry-run')) ||
      c.args[0] === 'versions',
  );

describe('a gradual release', () => {
  it('uploads a version, smoke-tests it at 0% through the override, then rolls it out step by step', async () => {
    const cf = new FakeCloudflare();
    const result = await deploy(cf);
    expect(result).toMatchObject({ ok: true, message: `reaction-ledger ${NEW} serves 100% of production` });
    expect(cf.deployment).toEqual([{ versionId: NEW, percentage: 100 }]);
    expect(cf.wrangler().filter((c) => !c.startsWith('secret') && !c.includes('--dry-run'))).toEqual([
      'deployments status --json -c wrangler.toml --env=',
      'deploy -c alerts.wrangler.toml --env=',
      'deploy -c retention.wrangler.toml --env=',
      'versions upload -c wrangler.toml --env=',
      `versions deploy ${NEW}@0% ${PREVIOUS}@100% -y -c wrangler.toml --env=`,
      `versions deploy ${NEW}@10% ${PREVIOUS}@90% -y -c wrangler.toml --env=`,
      `versions deploy ${NEW}@50% ${PREVIOUS}@50% -y -c wrangler.toml --env=`,
      `versions deploy ${NEW}@100% -y -c wrangler.toml --env=`,
    ]);
    // The database is migrated on the direct endpoint before any Worker changes.
    const migrate = cf.commands.findIndex((c) => c.file.endsWith('tsx'));
    expect(cf.commands[migrate]!.env).toEqual({ DATABASE_URL: GOOD_ENV.DIRECT_DATABASE_URL });
    expect(migrate).toBeLessThan(
      cf.commands.findIndex((c) => c.args[0] === 'deploy' && !c.args.includes('--dry-run')),
    );
    // Each smoke test reached the new version through the override, and the Lark webhook's own
    // verifier accepted the signed, encrypted challenge (a refusal would have failed the step).
    const smoke = cf.requests.filter((r) => r.answeredBy !== null);
    expect(smoke).toHaveLength(8);
    for (const r of smoke) {
      expect(r.answeredBy).toBe(NEW);
      expect(r.request.headers['Cloudflare-Workers-Version-Overrides']).toBe(`reaction-ledger="${NEW}"`);
    }
    expect(
      smoke.filter((r) => r.request.url.endsWith('/lark/events/inst_smoke_1'))[0]!.request.headers,
    ).toHaveProperty('x-lark-signature');
    // Soaks: 60 s after each of the three traffic steps.
    expect(cf.lines.filter((l) => l.includes('wait 60 s'))).toHaveLength(3);
  });

  it('every command and request carries a timeout', async () => {
    const cf = new FakeCloudflare();
    await deploy(cf);
    for (const c of cf.commands) expect(c.timeoutMs, c.args.join(' ')).toBeGreaterThan(0);
    for (const r of cf.requests) expect(r.timeoutMs, r.request.url).toBeGreaterThan(0);
  });

  it('an override the platform has not applied yet is retried, never taken for a pass', async () => {
    const cf = new FakeCloudflare();
    cf.overrideDelay = 2;
    const result = await deploy(cf);
    expect(result.ok).toBe(true);
    expect(cf.lines).toContainEqual(
      expect.stringMatching(new RegExp(`answered by version ${PREVIOUS}, not ${NEW}; retrying`)),
    );
  });
});

describe('a failed smoke test rolls back', () => {
  it('before any traffic: the new version at 0% fails /healthz, the previous one serves 100% again', async () => {
    const cf = new FakeCloudflare();
    cf.broken.add(NEW);
    const result = await deploy(cf);
    expect(result.ok).toBe(false);
    expect(result.message).toMatch(/GET \/healthz: status 503/);
    expect(result.message).toMatch(new RegExp(`rolled back: ${PREVIOUS} serves 100% again`));
    expect(cf.deployment).toEqual([{ versionId: PREVIOUS, percentage: 100 }]);
    expect(cf.wrangler().slice(-2)).toEqual([
      `versions deploy ${NEW}@0% ${PREVIOUS}@100% -y -c wrangler.toml --env=`,
      `versions deploy ${PREVIOUS}@100% -y -c wrangler.toml --env=`,
    ]);
  });

  it('mid-rollout: a failed traffic step is rolled back too', async () => {
    const cf = new FakeCloudflare();
    cf.failCommand = (c) => c.args.includes(`${NEW}@50%`);
    const result = await deploy(cf);
    expect(result.ok).toBe(false);
    expect(result.message).toMatch(/wrangler versions deploy exited 1: simulated failure/);
    expect(cf.deployment).toEqual([{ versionId: PREVIOUS, percentage: 100 }]);
  });

  it('a rollback that fails itself says so and prints the command to run by hand', async () => {
    const cf = new FakeCloudflare();
    cf.broken.add(NEW);
    // The rollback is the only command that names the previous version first.
    cf.failCommand = (c) => c.args[2] === `${PREVIOUS}@100%`;
    const result = await deploy(cf);
    expect(result.ok).toBe(false);
    expect(result.message).toMatch(/ROLLBACK FAILED/);
    expect(result.message).toMatch(new RegExp(`npx wrangler versions deploy ${PREVIOUS}@100% -y`));
  });
});

describe('a pending Durable Object migration', () => {
  it('is shipped as a plain deploy, after the operator agrees, and smoke-tested live', async () => {
    const cf = new FakeCloudflare();
    cf.migrationTag = 'v1';
    const result = await deploy(cf);
    expect(result).toMatchObject({ ok: true, plan: { mode: 'plain' } });
    const deploys = cf.wrangler().filter((c) => c.startsWith('deploy ') && !c.includes('--dry-run'));
    expect(deploys).toEqual([
      'deploy -c alerts.wrangler.toml --env=',
      'deploy -c retention.wrangler.toml --env=',
      'deploy -c wrangler.toml --env=',
    ]);
    expect(cf.wrangler().some((c) => c.startsWith('versions'))).toBe(false);
    // The live answer must come from the version the deploy printed.
    expect(cf.requests.filter((r) => r.answeredBy !== null).map((r) => r.answeredBy)).toEqual([PLAIN, PLAIN]);
  });

  it('without --yes and without agreement nothing is written', async () => {
    const cf = new FakeCloudflare();
    cf.migrationTag = 'v1';
    const result = await deploy(cf, []);
    expect(result).toMatchObject({
      ok: false,
      message: 'not confirmed (pass --yes to deploy without a prompt)',
    });
    expect(cf.asked[0]).toMatch(/v2: DELETES RetentionCleanup/);
    expect(writes(cf)).toEqual([]);
  });

  it('a failed live smoke test is not rolled back (the platform refuses it): fix forward', async () => {
    const cf = new FakeCloudflare();
    cf.migrationTag = 'v1';
    cf.broken.add(PLAIN);
    const result = await deploy(cf);
    expect(result.ok).toBe(false);
    expect(result.message).toMatch(/No rollback: the deploy applied a Durable Object migration/);
    expect(cf.wrangler().some((c) => c.startsWith('versions deploy'))).toBe(false);
  });

  it('the platform refusing the upload (a migration the tag check missed) stops before traffic moves', async () => {
    const cf = new FakeCloudflare();
    const run = cf.run.bind(cf);
    cf.run = async (c) =>
      c.args[0] === 'versions' && c.args[1] === 'upload'
        ? {
            code: 1,
            stdout: '',
            stderr: 'This Worker has a pending Durable Object migration, which cannot be applied',
            timedOut: false,
            outputs: [],
          }
        : run(c);
    const result = await deploy(cf);
    expect(result.message).toMatch(/Cloudflare reports a pending Durable Object migration/);
    expect(cf.deployment).toEqual([{ versionId: PREVIOUS, percentage: 100 }]);
    expect(cf.wrangler().some((c) => c.startsWith('versions deploy'))).toBe(false);
  });
});

describe('the environment is checked before anything is written', () => {
  it('a missing secret on the main Worker: refused, naming it', async () => {
    const cf = new FakeCloudflare();
    cf.secrets['wrangler.toml'] = ['DATABASE_URL', 'SECRET_KEYS', 'ACTOR_JWT_SECRET'];
    const result = await deploy(cf);
    expect(result.ok).toBe(false);
    expect(result.message).toMatch(/wrangler\.toml: secret ADMIN_TOKEN is not set/);
    expect(writes(cf)).toEqual([]);
  });

  it('no Cloudflare token: refused without running a command', async () => {
    const cf = new FakeCloudflare();
    const result = await deploy(cf, ['--yes'], { ...GOOD_ENV, CLOUDFLARE_API_TOKEN: undefined });
    expect(result.message).toMatch(/CLOUDFLARE_API_TOKEN is not set/);
    expect(cf.commands).toEqual([]);
  });

  it('a migration URL on the pooled endpoint: refused without running a command', async () => {
    const cf = new FakeCloudflare();
    const result = await deploy(cf, ['--yes'], { ...GOOD_ENV, DIRECT_DATABASE_URL: GOOD_ENV.DATABASE_URL });
    expect(result.message).toMatch(/DIRECT_DATABASE_URL is a pooled endpoint/);
    expect(cf.commands).toEqual([]);
  });
});

describe('staging', () => {
  it('every command names --env staging and the smoke tests override the staging Worker', async () => {
    const cf = new FakeCloudflare();
    const result = await deploy(cf, [
      '--yes',
      '--env',
      'staging',
      '--percentages',
      '50,100',
      '--soak-seconds',
      '0',
    ]);
    expect(result).toMatchObject({
      ok: true,
      message: `reaction-ledger-staging ${NEW} serves 100% of staging`,
    });
    for (const c of cf.commands.filter((c) => c.file.endsWith('wrangler')))
      expect(c.args.slice(c.args.indexOf('--env'), c.args.indexOf('--env') + 2)).toEqual([
        '--env',
        'staging',
      ]);
    expect(cf.requests[0]!.request.url).toMatch(/\/workers\/services\/reaction-ledger-staging$/);
    expect(
      cf.requests.find((r) => r.answeredBy)!.request.headers['Cloudflare-Workers-Version-Overrides'],
    ).toBe(`reaction-ledger-staging="${NEW}"`);
  });
});

describe('--dry-run', () => {
  it('with no environment at all: placeholders, offline steps only, no remote command', async () => {
    const cf = new FakeCloudflare();
    const result = await deploy(cf, ['--dry-run'], {});
    expect(result.ok).toBe(true);
    expect(cf.lines).toContainEqual(
      'deploy: would require: CLOUDFLARE_API_TOKEN is not set (a placeholder stands in)',
    );
    // Only the three builds ran; no secret list, no status, no request.
    expect(cf.wrangler()).toEqual([
      'deploy --dry-run -c alerts.wrangler.toml --env=',
      'deploy --dry-run -c retention.wrangler.toml --env=',
      'deploy --dry-run -c wrangler.toml --env=',
    ]);
    expect(cf.requests).toEqual([]);
  });

  it('an assumed older tag prints the plain-deploy plan', async () => {
    const cf = new FakeCloudflare();
    const result = await deploy(cf, ['--dry-run', '--assume-deployed-tag', 'v1'], {});
    expect(result).toMatchObject({ ok: true, plan: { mode: 'plain' } });
    expect(cf.lines).toContainEqual(
      expect.stringMatching(/^deploy: would ask:\n.*Durable Object migrations/),
    );
  });
});
