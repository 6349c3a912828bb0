import { env, exports } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';

const auth = { authorization: `Bearer ${env.ADMIN_TOKEN}` };

describe('GET /admin/status', () => {
  it('requires the admin token', async () => {
    const res = await exports.default.fetch('http://test/admin/status');
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unauthorized');
  });

  it('reports the database, bounded backlogs and both singleton owners, without secrets', async () => {
    const res = await exports.default.fetch('http://test/admin/status', { headers: auth });
    expect(res.status).toBe(200);
    const text = await res.text();
    const body = JSON.parse(text);
    expect(body).toMatchObject({ status: 'ok', db: 'ok', countCap: 10_000 });
    for (const key of [
      'effects_pending',
      'effects_processing',
      'mailbox_pending',
      'live_processes',
      'typing_pending',
    ]) {
      expect(typeof body.backlog[key]).toBe('number');
    }
    expect(body.legacyContract).toHaveProperty('closedAndDrained');
    expect(body.typingMaintenance).toHaveProperty('enabled');
    expect(body.retentionCleanup).not.toBeNull();
    expect(text).not.toContain(env.ADMIN_TOKEN!);
    expect(text).not.toContain(String(env.SECRET_KEYS));
  });
});
