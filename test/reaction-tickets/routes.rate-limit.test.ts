import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { call, opId, type Reply, seedWorld, ticketFor } from './helpers';

/** The /v1 actor limiter swapped for one that allows 3 a minute (`call` with overridden bindings). */
const tight = { V1_ACTOR_RATE_LIMIT: (env as unknown as Record<string, unknown>).TEST_RATE_LIMIT_3 };

describe('/v1 rate limit, keyed by actor', () => {
  it('the Worker has the /v1 limiter binding from wrangler.toml', () => {
    expect(typeof env.V1_ACTOR_RATE_LIMIT?.limit).toBe('function');
  });

  it('reads over the limit are 429 rate_limited with Retry-After; another actor is unaffected', async () => {
    const w = await seedWorld();
    const read = (token: string) =>
      call('GET', `/v1/messages/${w.messages[0]}/reactions`, { token, env: tight });
    // At most two fixed windows are crossed while this runs: 2 x 3 + 1 requests must meet the limit.
    let limited: Reply | undefined;
    for (let i = 0; i < 7 && !limited; i++) {
      const res = await read(w.tokens[0]!);
      if (res.status === 429) limited = res;
      else expect(res.status).toBe(200);
    }
    expect(limited, 'no 429 within 7 requests').toBeDefined();
    expect(limited!.body.error.code).toBe('rate_limited');
    expect(limited!.body.error.details.scope).toBe('actor');
    expect(Number(limited!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect((await read(w.tokens[1]!)).status).toBe(200);
  });

  it('a write over the request limiter is 429 rate_limited (details.scope "actor"), never quota_exceeded: the client tells them apart (issue 29 hole 1)', async () => {
    const w = await seedWorld();
    const intent = { messageId: w.messages[0]!, emoji: '👍', desired: 'present' as const };
    const operationId = opId();
    const ticket = await ticketFor(w.tokens[0]!, operationId, intent);
    let limited: Reply | undefined;
    for (let i = 0; i < 7 && !limited; i++) {
      const res = await call('PUT', `/v1/reaction-operations/${operationId}`, {
        token: w.tokens[0]!,
        env: tight,
        body: { ...intent, ticket },
      });
      if (res.status === 429) limited = res;
      else expect(res.status).toBe(200);
    }
    expect(limited, 'no 429 within 7 requests').toBeDefined();
    expect(limited!.body.error).toMatchObject({ code: 'rate_limited', details: { scope: 'actor' } });
    expect(Number(limited!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  });

  it('an unauthenticated request is 401 and is not counted against any actor', async () => {
    const w = await seedWorld();
    for (let i = 0; i < 7; i++) {
      const res = await call('GET', `/v1/messages/${w.messages[0]}/reactions`, { env: tight });
      expect(res.status).toBe(401);
    }
    expect(
      (await call('GET', `/v1/messages/${w.messages[0]}/reactions`, { token: w.tokens[0]!, env: tight }))
        .status,
    ).toBe(200);
  });
});
