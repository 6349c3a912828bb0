import { env } from 'cloudflare:workers';
import { afterAll, describe, expect, it } from 'vitest';
import { Deadline } from '../../workers/clock';
import { loadConfig } from '../../workers/env';
import { loadInstallation } from '../../workers/installations/store';
import { LarkClient } from '../../workers/lark/client';
import { log, registerSecret } from '../../workers/log';
import { testPool } from '../helpers/db';
import { captureLogLines } from '../helpers/logs';
import { installApp, larkBase } from '../lark/helpers';

/**
 * Redaction by field name misses a secret logged under an innocent key or inside an error
 * message. Every secret value the Worker knows is scrubbed from every line, whatever the key.
 */
const pool = testPool(2);
afterAll(() => pool.end());

function logged(fields: Record<string, unknown>): string {
  const logs = captureLogLines();
  try {
    log.warn('test_secret_value', fields);
  } finally {
    logs.restore();
  }
  return JSON.stringify(logs.events('test_secret_value'));
}

describe('known secret values are never logged, under any key', () => {
  it("an installation's opened secrets, under innocent keys and inside an error message", async () => {
    const app = await installApp();
    const opened = await loadInstallation(pool, loadConfig(env).SECRET_KEYS, app.installationId);
    expect(opened?.appSecret).toBe(app.appSecret);
    const line = logged({
      note: app.appSecret,
      list: [app.verificationToken],
      nested: { deeper: `prefix ${app.encryptKey} suffix` },
      error: new Error(`Lark refused app secret ${app.appSecret}`),
    });
    for (const secret of [app.appSecret, app.verificationToken, app.encryptKey!])
      expect(line).not.toContain(secret);
    expect(line).toContain('[redacted]');
    expect(line).toContain('prefix [redacted] suffix');
  });

  it('the configured secrets: ADMIN_TOKEN, every SECRET_KEYS version, ACTOR_JWT_SECRET, the database password', async () => {
    const config = loadConfig(env);
    const password = decodeURIComponent(
      new URL(config.DATABASE_URL.replace(/^postgres(ql)?:/, 'http:')).password,
    );
    const values = [config.ADMIN_TOKEN, ...Object.values(config.SECRET_KEYS), config.ACTOR_JWT_SECRET!];
    if (password.length >= 8) values.push(password);
    const line = logged({ a: values, b: `dsn=${config.DATABASE_URL}` });
    for (const v of values) expect(line).not.toContain(v);
    expect(line).not.toContain(config.DATABASE_URL);
  });

  it('a tenant access token the client fetched', async () => {
    const app = await installApp();
    const lark = new LarkClient({ baseUrl: larkBase(), appId: app.appId, appSecret: app.appSecret });
    const token = await lark.tenantToken({ deadline: new Deadline(5000) });
    const line = logged({ header: `Bearer ${token}` });
    expect(line).not.toContain(token);
  });

  it('a secret with quotes, backslashes or control characters is redacted in its JSON-escaped form', () => {
    const odd = `s3cr"et\\with\ncontrol-${crypto.randomUUID()}`;
    registerSecret(odd);
    const line = logged({ odd, message: `got ${odd}` });
    expect(JSON.parse(line)[0]).toMatchObject({ odd: '[redacted]', message: 'got [redacted]' });
    expect(line).not.toContain(JSON.stringify(odd).slice(1, -1));
  });
});
