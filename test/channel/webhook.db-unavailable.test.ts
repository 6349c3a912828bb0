import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import worker from '../../workers/index';
import { refusedRole, testPool } from '../helpers/db';
import { changedTables, tableSums } from '../helpers/tables';
import { buildEvent, installApp } from '../lark/helpers';

const pool = testPool(2);
// A role the server refuses at connect (53300), for this file only, whatever the load.
const refusedDb = refusedRole(pool, 'refused');

beforeAll(() => refusedDb.create());
afterAll(async () => {
  await refusedDb.drop();
  await pool.end();
});

/**
 * The webhook, awaited to the end of its post-answer work; `refused`: with DATABASE_URL
 * naming the refused role (same server, same database).
 */
async function post(
  installationId: string,
  request: { headers: Record<string, string>; body: string },
  refused: boolean,
) {
  const ctx = createExecutionContext();
  const res = await worker.fetch(
    new Request(`http://test/lark/events/${installationId}`, { method: 'POST', ...request }),
    (refused ? { ...env, DATABASE_URL: refusedDb.url } : env) as typeof env,
    ctx,
  );
  await waitOnExecutionContext(ctx);
  return res;
}

describe('webhook when the database refuses connections', () => {
  it('answers a retryable 503 service_unavailable (db_unavailable) with Retry-After, writes nothing, and the redelivery then succeeds', async () => {
    const app = await installApp();
    const built = await buildEvent(app);
    const before = await tableSums(pool);
    const res = await post(app.installationId, built.request, true);
    expect(res.status).toBe(503);
    const body = (await res.json()) as { error: { code: string; details: { reason: string } } };
    expect(body.error.code).toBe('service_unavailable');
    expect(body.error.details.reason).toBe('db_unavailable');
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(changedTables(before, await tableSums(pool))).toEqual([]);
    // Lark redelivers the same event once the server takes connections again: recorded once.
    const again = await post(app.installationId, built.request, false);
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual({ ok: true });
  });
});
