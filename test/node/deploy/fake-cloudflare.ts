/**
 * A stand-in for Cloudflare and the deployed Worker behind `npm run deploy`'s DeployIo: it keeps
 * a deployment (versions and their traffic) that `wrangler versions deploy` and `wrangler
 * deploy` change, answers `/healthz` as the version the request reaches would (the override
 * header applied only to a version in the deployment, as the platform does), and opens the Lark
 * challenge with the webhook's own verifier (workers/lark/verify.ts), so a request the real
 * webhook would refuse fails here too. Time moves only through sleep().
 */

import type { Command, CommandResult, DeployIo, HttpAnswer } from '../../../scripts/lib/deploy-runner';
import type { SmokeRequest } from '../../../scripts/lib/deploy-smoke';
import { openDelivery } from '../../../workers/lark/verify';

export const PREVIOUS = '11111111-1111-4111-8111-111111111111';
export const NEW = '22222222-2222-4222-8222-222222222222';
export const PLAIN = '33333333-3333-4333-8333-333333333333';

export const LARK = {
  installationId: 'inst_smoke_1',
  verificationToken: 'verification-token-0123456789',
  encryptKey: 'encrypt-key-0123456789abcdef',
  appId: 'cli_smoke',
};

export const GOOD_ENV: Record<string, string> = {
  CLOUDFLARE_API_TOKEN: 'cf-token',
  CLOUDFLARE_ACCOUNT_ID: 'acct0123',
  DATABASE_URL: 'postgres://app:pw@ep-quiet-sun-123456-pooler.us-east-2.aws.neon.tech/ledger?sslmode=require',
  DIRECT_DATABASE_URL:
    'postgres://owner:pw@ep-quiet-sun-123456.us-east-2.aws.neon.tech/ledger?sslmode=require',
  WORKER_URL: 'https://reactions.example.com',
  LARK_SMOKE_INSTALLATION_ID: LARK.installationId,
  LARK_SMOKE_VERIFICATION_TOKEN: LARK.verificationToken,
  LARK_SMOKE_ENCRYPT_KEY: LARK.encryptKey,
};

const MAIN_SECRETS = ['DATABASE_URL', 'ADMIN_TOKEN', 'SECRET_KEYS', 'ACTOR_JWT_SECRET'];

export class FakeCloudflare implements DeployIo {
  /** Every command run, in order (args as given). */
  commands: Command[] = [];
  requests: { request: SmokeRequest; timeoutMs: number; answeredBy: string | null }[] = [];
  lines: string[] = [];
  clock = Date.parse('2026-12-01T00:00:00Z');
  /** The main Worker's deployment; null: never deployed. */
  deployment: { versionId: string; percentage: number }[] | null = [{ versionId: PREVIOUS, percentage: 100 }];
  migrationTag: string | null = 'v2';
  secrets: Record<string, string[]> = {
    'alerts.wrangler.toml': ['ALERT_WEBHOOK_URL'],
    'retention.wrangler.toml': ['DATABASE_URL'],
    'wrangler.toml': MAIN_SECRETS,
  };
  /** Versions whose /healthz answers 503 (a release that cannot reach its database). */
  broken = new Set<string>();
  /** Requests with an override that are still routed by percentage (propagation not done). */
  overrideDelay = 0;
  confirmAnswer = false;
  asked: string[] = [];
  failCommand: ((c: Command) => boolean) | null = null;

  async run(command: Command): Promise<CommandResult> {
    this.commands.push(command);
    const ok = (stdout = '', outputs: Record<string, unknown>[] = []): CommandResult => ({
      code: 0,
      stdout,
      stderr: '',
      timedOut: false,
      outputs,
    });
    if (this.failCommand?.(command))
      return { code: 1, stdout: '', stderr: 'simulated failure', timedOut: false, outputs: [] };
    const a = command.args;
    const config = a[a.indexOf('-c') + 1]?.split('/').pop() ?? '';
    if (command.file.endsWith('tsx')) return ok('database is up to date');
    if (a[0] === 'secret' && a[1] === 'list')
      return ok(JSON.stringify((this.secrets[config] ?? []).map((name) => ({ name, type: 'secret_text' }))));
    if (a[0] === 'deployments' && a[1] === 'status') {
      if (!this.deployment)
        return {
          code: 1,
          stdout: '',
          stderr: 'The Worker reaction-ledger has no deployments.',
          timedOut: false,
          outputs: [],
        };
      return ok(
        JSON.stringify({
          id: 'dep',
          versions: this.deployment.map((v) => ({ version_id: v.versionId, percentage: v.percentage })),
        }),
      );
    }
    if (a[0] === 'deploy' && a.includes('--dry-run')) return ok();
    if (a[0] === 'deploy') {
      if (config === 'wrangler.toml') {
        this.deployment = [{ versionId: PLAIN, percentage: 100 }];
        this.migrationTag = 'v2';
      }
      return ok('', [{ type: 'deploy', version_id: config === 'wrangler.toml' ? PLAIN : 'aux-version' }]);
    }
    if (a[0] === 'versions' && a[1] === 'upload')
      return ok('', [{ type: 'version-upload', version_id: NEW }]);
    if (a[0] === 'versions' && a[1] === 'deploy') {
      const specs = a.slice(2).filter((s) => /@\d+%?$/.test(s));
      this.deployment = specs.map((s) => {
        const [versionId, pct] = s.split('@');
        return { versionId: versionId!, percentage: Number(pct!.replace('%', '')) };
      });
      return ok();
    }
    throw new Error(`fake Cloudflare: unexpected command ${a.join(' ')}`);
  }

  async http(request: SmokeRequest, timeoutMs: number): Promise<HttpAnswer> {
    const url = new URL(request.url);
    const headers = new Headers(request.headers);
    if (url.hostname === 'api.cloudflare.com') {
      this.requests.push({ request, timeoutMs, answeredBy: null });
      if (!this.deployment) return answer(404, '{"success":false}');
      return answer(
        200,
        JSON.stringify({ result: { default_environment: { script: { migration_tag: this.migrationTag } } } }),
      );
    }
    const version = this.route(headers.get('cloudflare-workers-version-overrides'));
    this.requests.push({ request, timeoutMs, answeredBy: version });
    const versionHeader = { 'x-worker-version': version };
    if (url.pathname === '/healthz') {
      if (this.broken.has(version)) return answer(503, '{"status":"degraded","db":"down"}', versionHeader);
      return answer(200, '{"status":"ok","db":"ok"}', versionHeader);
    }
    if (url.pathname === `/lark/events/${LARK.installationId}`) {
      try {
        const delivery = await openDelivery(
          new TextEncoder().encode(request.body),
          headers,
          LARK,
          this.clock,
        );
        if (delivery.kind !== 'challenge') return answer(400, '{"error":"not a challenge"}');
        return answer(200, JSON.stringify({ challenge: delivery.challenge }));
      } catch (err) {
        return answer(401, JSON.stringify({ error: (err as { code?: string }).code }));
      }
    }
    return answer(404, '{}');
  }

  /** The version a request reaches: the override's if that version is deployed, else the largest share. */
  private route(override: string | null): string {
    const deployed = this.deployment ?? [];
    const wanted = /="([^"]+)"/.exec(override ?? '')?.[1];
    if (wanted && deployed.some((v) => v.versionId === wanted)) {
      if (this.overrideDelay > 0) this.overrideDelay--;
      else return wanted;
    }
    return [...deployed].sort((x, y) => y.percentage - x.percentage)[0]!.versionId;
  }

  async sleep(ms: number): Promise<void> {
    this.clock += ms;
  }
  now(): number {
    return this.clock;
  }
  log(line: string): void {
    this.lines.push(line);
  }
  async confirm(question: string): Promise<boolean> {
    this.asked.push(question);
    return this.confirmAnswer;
  }

  /** wrangler invocations, as `wrangler <args>` without the config path and message. */
  wrangler(): string[] {
    return this.commands
      .filter((c) => c.file.endsWith('wrangler'))
      .map((c) => {
        const a = [...c.args];
        for (const flag of ['--message', '--tag', '--outdir']) {
          const i = a.indexOf(flag);
          if (i >= 0) a.splice(i, 2);
        }
        const i = a.indexOf('-c');
        if (i >= 0) a.splice(i, 2, `-c ${a[i + 1]!.split('/').pop()}`);
        return a.join(' ');
      });
  }
}

function answer(status: number, body: string, headers: Record<string, string> = {}): HttpAnswer {
  return { status, body, headers: new Headers(headers) };
}
