import { env } from 'cloudflare:workers';
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SealedValueError, unseal } from '../../workers/crypto/sealed';
import { boundTo, loadInstallation } from '../../workers/installations/store';
import { testPool, uid } from '../helpers/db';
import { admin, buildEvent, errorCode, installApp, submit } from './helpers';

const pool = testPool(2);
afterAll(() => pool.end());
const keys = () => JSON.parse(env.SECRET_KEYS!) as Record<string, string>;

let logged: string[] = [];
beforeEach(() => {
  logged = [];
  for (const m of ['log', 'warn', 'error', 'info', 'debug'] as const)
    vi.spyOn(console, m).mockImplementation((...args: unknown[]) => {
      logged.push(args.map(String).join(' '));
    });
});
afterEach(() => vi.restoreAllMocks());

const SECRETS = {
  app_secret: 'S3cret-app-secret-value',
  verification_token: 'V3rify-token-value',
  encrypt_key: 'Encrypt-key-value',
};

describe('admin API for Lark installations', () => {
  it('requires the admin token', async () => {
    const res = await admin('', { body: { workspace_id: 'w' }, token: 'wrong-token' });
    expect(res.status).toBe(401);
    expect(await errorCode(res)).toBe('unauthorized');
  });

  it('registers, reads, rotates and deletes; secrets absent from every response and log line', async () => {
    const appId = `cli_${uid('x').replace(/[^A-Za-z0-9]/g, '')}`;
    const bodies: string[] = [];
    // At debug level, so the routes' info lines are written and checked too.
    const debug = { logLevel: 'debug' } as const;
    const reg = await admin('', { body: { workspace_id: uid('ws'), app_id: appId, ...SECRETS }, ...debug });
    expect(reg.status).toBe(201);
    const regText = await reg.text();
    bodies.push(regText);
    const { installation } = JSON.parse(regText);
    expect(installation).toMatchObject({
      app_id: appId,
      has_encrypt_key: true,
      credential_version: 1,
      api_base: env.LARK_API_BASE,
    });
    expect(installation.webhook_path).toBe(`/lark/events/${installation.id}`);

    const get = await admin(`/${installation.id}`, debug);
    bodies.push(await get.text());
    const rotated = await admin(`/${installation.id}/rotate`, {
      body: { app_secret: 'N3w-app-secret-value', encrypt_key: null, api_base: 'feishu' },
      ...debug,
    });
    const rotText = await rotated.text();
    bodies.push(rotText);
    expect(JSON.parse(rotText).installation).toMatchObject({
      has_encrypt_key: false,
      credential_version: 2,
      api_base: 'https://open.feishu.cn',
    });
    const opened = await loadInstallation(pool, keys(), installation.id);
    expect(opened).toMatchObject({
      appSecret: 'N3w-app-secret-value',
      verificationToken: SECRETS.verification_token,
      encryptKey: null,
    });

    const bad = await admin(`/${installation.id}/rotate`, {
      body: { app_secret: 42, verification_token: 'Leaky-value-in-error' },
      ...debug,
    });
    expect(bad.status).toBe(400);
    expect(await errorCode(bad)).toBe('validation_failed');
    bodies.push(await bad.text());
    const del = await admin(`/${installation.id}`, { method: 'DELETE', ...debug });
    expect(del.status).toBe(200);
    const gone = await admin(`/${installation.id}`);
    expect(gone.status).toBe(404);
    expect(await errorCode(gone)).toBe('not_found');

    // Positive control: the capture holds this installation's own log lines, so the
    // "no secret in any log line" check below reads real lines, not an empty capture.
    const events = logged
      .filter((l) => l.includes(installation.id))
      .map((l) => (JSON.parse(l) as { event: string }).event);
    expect(events).toEqual([
      'lark_installation_registered',
      'lark_installation_rotated',
      'lark_installation_deleted',
    ]);
    const everything = [...bodies, ...logged].join('\n');
    for (const secret of [...Object.values(SECRETS), 'N3w-app-secret-value', 'Leaky-value-in-error'])
      expect(everything).not.toContain(secret);
    expect(everything).not.toMatch(/(^|[^A-Za-z0-9])(v|sk1\.)\d+\.[A-Za-z0-9+/=]{8,}\./); // no sealed values either
  });

  it('stores secrets sealed and bound to their row and field', async () => {
    const app = await installApp();
    const other = await installApp();
    const { rows } = await pool.query<{ app_secret_sealed: string }>(
      'select app_secret_sealed from lark_installations where id = $1',
      [app.installationId],
    );
    const sealed = rows[0]!.app_secret_sealed;
    expect(sealed).not.toContain(app.appSecret);
    // Positive control: on its own row and field it opens.
    expect(await unseal(keys(), sealed, boundTo(app.installationId, 'app_secret'))).toBe(app.appSecret);
    // Copied onto another field or another row, it does not: the AES-GCM associated data differs.
    for (const elsewhere of [
      boundTo(app.installationId, 'verification_token'),
      boundTo(other.installationId, 'app_secret'),
    ]) {
      const err = await unseal(keys(), sealed, elsewhere).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(SealedValueError);
      expect((err as Error).message).toBe('sealed value does not open for this row');
    }
  });

  it('rejects a duplicate app in the same workspace with 409 conflict', async () => {
    const ws = uid('ws');
    const body = { workspace_id: ws, app_id: 'cli_dup1', ...SECRETS };
    expect((await admin('', { body })).status).toBe(201);
    const dup = await admin('', { body });
    expect(dup.status).toBe(409);
    expect(await errorCode(dup)).toBe('conflict');
  });

  it('webhook rejections never log the verification token or encrypt key', async () => {
    const app = await installApp();
    const built = await buildEvent(app, { token: 'wrong' });
    expect((await submit(app.installationId, built.request)).status).toBe(401);
    const all = logged.join('\n');
    expect(all).toContain('lark_event_rejected');
    expect(all).not.toContain(app.verificationToken);
    expect(all).not.toContain(app.encryptKey!);
    expect(all).not.toContain(app.appSecret);
  });
});
