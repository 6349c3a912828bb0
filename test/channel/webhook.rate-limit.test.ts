import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { afterAll, describe, expect, it } from 'vitest';
import worker from '../../workers/index';
import { testPool } from '../helpers/db';
import { buildEvent, installApp } from '../lark/helpers';

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

/** Posts `request` until a 429 (at most `tries`); the other answers must all be `otherwise`. */
async function floodUntilLimited(
  installationId: string,
  request: () => Promise<{ headers: Record<string, string>; body: string }>,
  otherwise: number,
  tries = 7,
): Promise<Response> {
  for (let i = 0; i < tries; i++) {
    const res = await post(installationId, await request());
    if (res.status === 429) return res;
    expect(res.status).toBe(otherwise);
  }
  throw new Error(`no 429 within ${tries} requests`);
}

async function scopeOf(res: Response): Promise<string> {
  const body = (await res.json()) as { error: { code: string; details: { scope: string } } };
  expect(body.error.code).toBe('rate_limited');
  expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  return body.error.details.scope;
}

describe("webhook rate limits: one budget for an installation's verified deliveries, one for refusals", () => {
  it('the Worker has the webhook limiter binding from wrangler.toml', () => {
    expect(typeof env.WEBHOOK_RATE_LIMIT?.limit).toBe('function');
  });

  // At most two fixed windows are crossed while a flood runs: 2 x 3 + 1 requests meet the limit.

  it('a flood of forged requests meets its own limit (429, scope unverified) and a correctly signed event is still accepted', async () => {
    const flooded = await installApp();
    const forged = (await buildEvent(flooded, { signWithKey: 'not-the-key' })).request;
    const limited = await floodUntilLimited(flooded.installationId, async () => forged, 401);
    expect(await scopeOf(limited)).toBe('unverified');
    expect(await written(flooded.installationId)).toBe(0);
    // The attacker knew the URL, not the keys: Lark's delivery is not delayed.
    const res = await post(flooded.installationId, (await buildEvent(flooded)).request);
    expect(res.status).toBe(200);
    expect(await written(flooded.installationId)).toBe(1);
  });

  it('verified deliveries over their limit are 429 (scope installation) and write nothing; refusals and another installation are unaffected', async () => {
    const busy = await installApp();
    const other = await installApp();
    const limited = await floodUntilLimited(
      busy.installationId,
      async () => (await buildEvent(busy)).request,
      200,
    );
    expect(await scopeOf(limited)).toBe('installation');
    const accepted = await written(busy.installationId);
    expect((await post(busy.installationId, (await buildEvent(busy)).request)).status).toBe(429);
    expect(await written(busy.installationId)).toBe(accepted);
    // A forged request still gets its own answer, from its own budget.
    const forged = (await buildEvent(busy, { signWithKey: 'not-the-key' })).request;
    expect((await post(busy.installationId, forged)).status).toBe(401);
    // Another installation's own key is untouched.
    expect((await post(other.installationId, (await buildEvent(other)).request)).status).toBe(200);
    expect(await written(other.installationId)).toBe(1);
  });
});
