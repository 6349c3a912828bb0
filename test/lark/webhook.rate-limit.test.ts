import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, describe, expect, it } from 'vitest';
import worker from '../../workers/index';
import { testPool } from '../helpers/db';
import { buildEvent, installApp } from './helpers';

const pool = testPool(2);
afterAll(() => pool.end());

/** The webhook with its installation limiter swapped for one that allows 3 a minute. */
async function post(installationId: string, request: { headers: Record<string, string>; body: string }) {
  const tight = { ...env, WEBHOOK_RATE_LIMIT: (env as unknown as Record<string, unknown>).TEST_RATE_LIMIT_3 };
  const ctx = createExecutionContext();
  const res = await worker.fetch(
    new Request(`http://test/lark/events/${installationId}`, { method: 'POST', ...request }),
    tight as typeof env,
    ctx,
  );
  await waitOnExecutionContext(ctx);
  return res;
}

async function written(installationId: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    'select count(*)::int as n from lark_event_receipts where installation_id = $1',
    [installationId],
  );
  return rows[0]!.n;
}

describe('webhook rate limit, keyed by installation', () => {
  it('the Worker has the webhook limiter binding from wrangler.toml', () => {
    expect(typeof env.WEBHOOK_RATE_LIMIT?.limit).toBe('function');
  });

  it('over the limit is 429 rate_limited with Retry-After and writes nothing; another installation is unaffected', async () => {
    const flooded = await installApp();
    const other = await installApp();
    const forged = (await buildEvent(flooded, { signWithKey: 'not-the-key' })).request;
    // At most two fixed windows are crossed while this runs: 2 x 3 + 1 requests must meet the limit.
    let limited: Response | undefined;
    for (let i = 0; i < 7 && !limited; i++) {
      const res = await post(flooded.installationId, forged);
      if (res.status === 429) limited = res;
      else expect(res.status).toBe(401);
    }
    expect(limited, 'no 429 within 7 requests').toBeDefined();
    const body = (await limited!.json()) as { error: { code: string; details: { scope: string } } };
    expect(body.error.code).toBe('rate_limited');
    expect(body.error.details.scope).toBe('installation');
    expect(Number(limited!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // A correctly signed event for the flooded installation is refused too, and nothing is written.
    const valid = (await buildEvent(flooded)).request;
    expect((await post(flooded.installationId, valid)).status).toBe(429);
    expect(await written(flooded.installationId)).toBe(0);
    // Another installation's own key is untouched.
    const res = await post(other.installationId, (await buildEvent(other)).request);
    expect(res.status).toBe(200);
    expect(await written(other.installationId)).toBe(1);
  });
});
