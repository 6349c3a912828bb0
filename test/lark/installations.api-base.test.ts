import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, describe, expect, it } from 'vitest';
import { Deadline } from '../../workers/clock';
import worker from '../../workers/index';
import { LarkClient } from '../../workers/lark/client';
import { LarkApiError } from '../../workers/lark/errors';
import { testPool, uid } from '../helpers/db';
import { admin, errorCode } from './helpers';

/**
 * The app secret is sent to an installation's api_base (tenant token requests), so the host
 * must be reached over TLS: https only, except loopback (the local emulator of dev and tests).
 */
const pool = testPool(2);
afterAll(() => pool.end());

const secrets = () => ({ app_secret: `s-${crypto.randomUUID()}`, verification_token: 'vtok-value-0123' });

function register(apiBase: string, appId = `cli_${uid('b').replace(/[^A-Za-z0-9]/g, '')}`) {
  return admin('', { body: { workspace_id: uid('ws'), app_id: appId, api_base: apiBase, ...secrets() } });
}

async function rowsFor(appId: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    'select count(*)::int as n from lark_installations where app_id = $1',
    [appId],
  );
  return rows[0]!.n;
}

describe('installation api_base', () => {
  it('plain http to a remote host is 400 validation_failed naming api_base, and nothing is written', async () => {
    for (const url of [
      'http://example.com',
      'http://open.larksuite.com',
      'http://10.0.0.1:8080',
      'ftp://example.com',
    ]) {
      const appId = `cli_${uid('h').replace(/[^A-Za-z0-9]/g, '')}`;
      const res = await register(url, appId);
      expect(res.status, url).toBe(400);
      expect(await errorCode(res)).toBe('validation_failed');
      expect(JSON.stringify(await res.json())).toContain('api_base');
      expect(await rowsFor(appId)).toBe(0);
    }
  });

  it('rotating to plain http is refused the same way and leaves the installation as it was', async () => {
    const created = await register('https://open.larksuite.com');
    expect(created.status).toBe(201);
    const { installation } = (await created.json()) as {
      installation: { id: string; credential_version: number };
    };
    const res = await admin(`/${installation.id}/rotate`, {
      body: { api_base: 'http://example.com', ...secrets() },
    });
    expect(res.status).toBe(400);
    expect(await errorCode(res)).toBe('validation_failed');
    const { rows } = await pool.query(
      'select api_base, credential_version from lark_installations where id = $1',
      [installation.id],
    );
    expect(rows[0]).toEqual({ api_base: 'https://open.larksuite.com', credential_version: 1 });
  });

  it('https and loopback http (127.0.0.1, localhost, [::1]) are accepted', async () => {
    for (const url of [
      'https://open.feishu.cn',
      'https://lark.example.com:8443',
      'http://127.0.0.1:8787',
      'http://localhost:9000',
      'http://[::1]:9000',
    ]) {
      const res = await register(url);
      expect(res.status, url).toBe(201);
    }
  });

  it('the LARK_API_BASE default follows the same rule: plain http to a remote host is a bad environment', async () => {
    const ctx = createExecutionContext();
    const res = await worker.fetch(
      new Request('http://test/healthz'),
      { ...env, LARK_API_BASE: 'http://open.larksuite.com' },
      ctx,
    );
    await waitOnExecutionContext(ctx);
    expect(res.status).toBe(500);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('bad_environment');
    expect(body.error.message).toContain('LARK_API_BASE');
  });

  it('the client never sends the app secret to a plain-http remote host (a row stored before the rule)', async () => {
    const sent: string[] = [];
    const spy: typeof fetch = async (input) => {
      sent.push(String(input instanceof Request ? input.url : input));
      return new Response('{}', { status: 500 });
    };
    const lark = new LarkClient(
      { baseUrl: 'http://example.com', appId: 'cli_legacyrow', appSecret: 'secret-never-sent' },
      { fetch: spy },
    );
    const err = await lark.tenantToken({ deadline: new Deadline(2000) }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(LarkApiError);
    expect((err as LarkApiError).kind).toBe('permanent');
    expect(sent).toEqual([]);
  });
});
