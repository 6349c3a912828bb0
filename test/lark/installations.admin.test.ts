import { env } from 'cloudflare:workers';
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { loadInstallation } from '../../workers/installations/store';
import { testPool, uid } from '../helpers/db';
import { admin, buildEvent, installApp, submit } from './helpers';

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
  });

  it('registers, reads, rotates and deletes; secrets absent from every response and log line', async () => {
    const appId = `cli_${uid('x').replace(/[^A-Za-z0-9]/g, '')}`;
    const bodies: string[] = [];
    const reg = await admin('', { body: { workspace_id: uid('ws'), app_id: appId, ...SECRETS } });
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

    const get = await admin(`/${installation.id}`);
    bodies.push(await get.text());
    const rotated = await admin(`/${installation.id}/rotate`, {
      body: { app_secret: 'N3w-app-secret-value', encrypt_key: null, api_base: 'feishu' },
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
    });
    expect(bad.status).toBe(400);
    bodies.push(await bad.text());
    const del = await admin(`/${installation.id}`, { method: 'DELETE' });
    expect(del.status).toBe(200);
    expect((await admin(`/${installation.id}`)).status).toBe(404);

    const everything = [...bodies, ...logged].join('\n');
    for (const secret of [...Object.values(SECRETS), 'N3w-app-secret-value', 'Leaky-value-in-error'])
      expect(everything).not.toContain(secret);
    expect(everything).not.toMatch(/v\d+\.[A-Za-z0-9+/=]{8,}\./); // no sealed values either
  });

  it('stores secrets sealed and bound to their row and field', async () => {
    const app = await installApp();
    const { rows } = await pool.query('select * from lark_installations where id = $1', [app.installationId]);
    const row = rows[0];
    expect(row.app_secret_sealed).not.toContain(app.appSecret);
    // A sealed value copied onto another field (or row) does not open.
    await expect(
      loadInstallation(pool, keys(), app.installationId).then(() =>
        pool.query('select 1').then(async () => {
          const { unseal } = await import('../../workers/crypto/sealed');
          return unseal(
            keys(),
            row.app_secret_sealed,
            `lark_installation:${app.installationId}:verification_token`,
          );
        }),
      ),
    ).rejects.toThrow();
  });

  it('rejects a duplicate app in the same workspace with 409 conflict', async () => {
    const ws = uid('ws');
    const body = { workspace_id: ws, app_id: 'cli_dup1', ...SECRETS };
    expect((await admin('', { body })).status).toBe(201);
    expect((await admin('', { body })).status).toBe(409);
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
