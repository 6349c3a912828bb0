import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import { afterEach, describe, expect, it, vi } from 'vitest';
import worker from '../../workers/index';

const auth = { authorization: `Bearer ${env.ADMIN_TOKEN}` };

/** Every secret value the Worker holds, one by one: a single leaked key must fail the test. */
function secretValues(): [string, string][] {
  const keys = JSON.parse(env.SECRET_KEYS!) as Record<string, string>;
  const db = new URL(env.DATABASE_URL!);
  return [
    ['ADMIN_TOKEN', env.ADMIN_TOKEN!],
    ['ACTOR_JWT_SECRET', env.ACTOR_JWT_SECRET!],
    ...Object.entries(keys).map(([version, key]): [string, string] => [`SECRET_KEYS[${version}]`, key]),
    ['DATABASE_URL', env.DATABASE_URL!],
    // A server with trust auth has no password to leak.
    ...(db.password ? [['database password', decodeURIComponent(db.password)] as [string, string]] : []),
  ];
}

afterEach(() => {
  vi.restoreAllMocks();
});

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
      'stale_processes',
      'typing_pending',
    ]) {
      expect(typeof body.backlog[key]).toBe('number');
    }
    expect(body.legacyContract).toHaveProperty('closedAndDrained');
    expect(body.typingMaintenance).toHaveProperty('enabled');
    expect(body.retentionCleanup).not.toBeNull();
    const secrets = secretValues();
    expect(secrets.length).toBeGreaterThanOrEqual(5);
    for (const [name, value] of secrets) {
      expect(value.length, name).toBeGreaterThan(0);
      expect(text.includes(value), `${name} appears in /admin/status`).toBe(false);
    }
  });

  it('answers 503 and logs the failed database read once when the database is unreachable', async () => {
    const errors = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    const broken = { ...env, DATABASE_URL: 'postgres://postgres:postgres@127.0.0.1:1/nowhere' };
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request('http://test/admin/status', { headers: auth }), broken, ctx);
    await waitOnExecutionContext(ctx);
    expect(res.status).toBe(503);
    const body = (await res.json()) as { db: string; typingMaintenance: unknown };
    expect(body.db).toBe('down');
    // The owners live in their Durable Objects, which still answer.
    expect(body.typingMaintenance).not.toBeNull();
    const lines = errors.mock.calls
      .map(([line]) => String(line))
      .filter((line) => line.includes('"admin_status_read_failed"'));
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({ part: 'database', error: { name: expect.any(String) } });
  });
});
