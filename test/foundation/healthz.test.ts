import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { poolStats } from '../../workers/db/pool';
import worker from '../../workers/index';
import { captureLogLines } from '../helpers/logs';

describe('GET /healthz', () => {
  it('reports db ok through the Neon driver from inside workerd', async () => {
    const res = await exports.default.fetch('http://test/healthz');
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'ok', db: 'ok' });
  });

  it('answers 503 with db down when the database is unreachable', async () => {
    const ctx = createExecutionContext();
    const broken = { ...env, DATABASE_URL: 'postgres://postgres:postgres@127.0.0.1:1/nowhere' };
    const logs = captureLogLines();
    const res = await worker.fetch(new Request('http://test/healthz'), broken, ctx);
    await waitOnExecutionContext(ctx);
    logs.restore();
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ db: 'down' });
    // The cause is logged once with its class, never swallowed.
    expect(logs.events('health_db_down')).toEqual([
      expect.objectContaining({
        level: 'warn',
        error: expect.objectContaining({ name: expect.any(String) }),
      }),
    ]);
  });

  it('opens a new pool for every request and ends it', async () => {
    const before = { ...poolStats };
    for (let i = 0; i < 3; i++) {
      // Ending is handed to waitUntil: waitOnExecutionContext awaits it.
      const ctx = createExecutionContext();
      const res = await worker.fetch(new Request('http://test/healthz'), env, ctx);
      await waitOnExecutionContext(ctx);
      expect(res.status).toBe(200);
    }
    expect(poolStats.opened - before.opened).toBe(3);
    expect(poolStats.ended - before.ended).toBe(3);
  });
});

describe('configuration', () => {
  it('answers 500 bad_environment naming the variable, never its value', async () => {
    const ctx = createExecutionContext();
    const broken = { ...env, ADMIN_TOKEN: 'short-secret-value' };
    const res = await worker.fetch(new Request('http://test/healthz'), broken, ctx);
    expect(res.status).toBe(500);
    const body = await res.text();
    expect(JSON.parse(body).error.code).toBe('bad_environment');
    expect(body).toContain('ADMIN_TOKEN');
    expect(body).not.toContain('short-secret-value');
  });

  it('renders unknown routes in the one error shape', async () => {
    const res = await exports.default.fetch('http://test/no/such/route');
    expect(res.status).toBe(404);
    const body = (await res.json()) as { error: { code: string; requestId: string } };
    expect(body.error.code).toBe('not_found');
    expect(body.error.requestId).toBeTruthy();
  });
});
