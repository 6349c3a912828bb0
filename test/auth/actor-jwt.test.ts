import { createExecutionContext, waitOnExecutionContext } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { verifyActorToken } from '../../workers/auth/actor-jwt';
import { signActorToken } from '../../workers/auth/sign';
import { type Env, loadConfig } from '../../workers/env';
import type { AppError } from '../../workers/errors';
import worker from '../../workers/index';
import { type JwksMode, startJwksServer } from '../helpers/jwks';
import { captureLogLines } from '../helpers/logs';
import { call, issue, opId, put, reactions, retire, seedWorld, tokenFor } from '../reaction-tickets/helpers';

const SECRET = 'a-test-secret-that-is-long-enough-0123456789';
afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'ok';
  } catch (err) {
    return (err as { code?: string }).code ?? 'thrown';
  }
}

/** An actor token for the key set's issuer and audience, signed by a key that is not in the set (`kid`). */
async function foreignToken(bindings: { ACTOR_JWT_ISSUER: string; ACTOR_JWT_AUDIENCE: string }, kid: string) {
  const other = await generateKeyPair('ES256');
  return new SignJWT({})
    .setProtectedHeader({ alg: 'ES256', kid })
    .setSubject('actor_jwks')
    .setIssuer(bindings.ACTOR_JWT_ISSUER)
    .setAudience(bindings.ACTOR_JWT_AUDIENCE)
    .setIssuedAt()
    .setExpirationTime('5m')
    .sign(other.privateKey);
}

describe('actor JWT verification', () => {
  it('HS256: accepts a valid token with issuer/audience, refuses wrong secret, issuer, audience or alg none', async () => {
    const config = { ACTOR_JWT_SECRET: SECRET, ACTOR_JWT_ISSUER: 'chat', ACTOR_JWT_AUDIENCE: 'reactions' };
    const good = await signActorToken(SECRET, 'actor_1', { issuer: 'chat', audience: 'reactions' });
    expect(await verifyActorToken(config, good)).toMatchObject({ actorId: 'actor_1' });
    const wrongSecret = await signActorToken(`${SECRET}x`, 'actor_1', {
      issuer: 'chat',
      audience: 'reactions',
    });
    const wrongIssuer = await signActorToken(SECRET, 'actor_1', { issuer: 'other', audience: 'reactions' });
    const wrongAudience = await signActorToken(SECRET, 'actor_1', { issuer: 'chat', audience: 'other' });
    const [h, p] = good.split('.');
    const none = `${btoa(JSON.stringify({ alg: 'none' })).replace(/=+$/, '')}.${p}.`;
    for (const token of [wrongSecret, wrongIssuer, wrongAudience, none, `${h}.${p}`, 'garbage'])
      expect(await code(verifyActorToken(config, token))).toBe('unauthorized');
  });

  it('JWKS: verifies asymmetric tokens against the configured key set, refuses unknown keys', async () => {
    const { publicKey, privateKey } = await generateKeyPair('ES256');
    const other = await generateKeyPair('ES256');
    const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' };
    const url = `https://id.example.test/${crypto.randomUUID()}/jwks.json`;
    const fetchSpy = vi.spyOn(globalThis, 'fetch').mockImplementation(async (input) => {
      expect(String(input instanceof Request ? input.url : input)).toBe(url);
      return new Response(JSON.stringify({ keys: [jwk] }), {
        headers: { 'content-type': 'application/json' },
      });
    });
    const sign = (key: CryptoKey, kid: string) =>
      new SignJWT({})
        .setProtectedHeader({ alg: 'ES256', kid })
        .setSubject('actor_jwks')
        .setIssuer('chat')
        .setAudience('reactions')
        .setIssuedAt()
        .setExpirationTime('5m')
        .sign(key);
    const config = { ACTOR_JWKS_URL: url, ACTOR_JWT_ISSUER: 'chat', ACTOR_JWT_AUDIENCE: 'reactions' };
    expect(await verifyActorToken(config, await sign(privateKey, 'k1'))).toMatchObject({
      actorId: 'actor_jwks',
    });
    expect(fetchSpy).toHaveBeenCalled();
    expect(await code(verifyActorToken(config, await sign(other.privateKey, 'k1')))).toBe('unauthorized');
    // An HS256 token is not accepted by a JWKS configuration.
    expect(await code(verifyActorToken(config, await signActorToken(SECRET, 'actor_jwks')))).toBe(
      'unauthorized',
    );
  });

  it('with neither a secret nor a JWKS configured, authentication is unavailable (503), not open', async () => {
    expect(await code(verifyActorToken({}, await signActorToken(SECRET, 'a')))).toBe('service_unavailable');
  });
});

describe('actor JWT edges', () => {
  const now = () => Math.floor(Date.now() / 1000);

  it('a token issued in the future beyond the clock skew is refused with 401 unauthorized (HS256 and JWKS)', async () => {
    const config = { ACTOR_JWT_SECRET: SECRET };
    const ahead = await signActorToken(SECRET, 'actor_future', { issuedAt: now() + 600 });
    expect(await code(verifyActorToken(config, ahead))).toBe('unauthorized');
    // Within the allowed skew (the issuer's clock a little ahead) it is accepted.
    const slightly = await signActorToken(SECRET, 'actor_future', { issuedAt: now() + 3 });
    expect(await code(verifyActorToken(config, slightly))).toBe('ok');

    const keys = await startJwksServer();
    const future = await keys.sign('actor_future', { issuedAt: now() + 600 });
    expect(await code(verifyActorToken(keys.bindings, future))).toBe('unauthorized');
    expect(await code(verifyActorToken(keys.bindings, await keys.sign('actor_future')))).toBe('ok');

    // Through the Worker: the one 401 shape, nothing about which check failed.
    const w = await seedWorld();
    const res = await call('GET', `/v1/messages/${w.messages[0]}/reactions`, {
      token: await tokenFor(w.actors[0]!, { issuedAt: now() + 600 }),
    });
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('unauthorized');
    expect(res.headers.get('www-authenticate')).toBe('Bearer');
  });

  it('with ACTOR_JWKS_URL, issuer and audience are required: the configuration is refused as bad_environment', async () => {
    const jwksOnly = {
      ...env,
      ACTOR_JWT_SECRET: undefined,
      ACTOR_JWKS_URL: 'https://id.example.test/jwks.json',
    };
    const refusal = (e: Record<string, unknown>) => {
      try {
        loadConfig(e as unknown as Env);
        return 'accepted';
      } catch (err) {
        return `${(err as AppError).code}: ${(err as AppError).message}`;
      }
    };
    expect(refusal(jwksOnly)).toMatch(/^bad_environment: .*ACTOR_JWT_ISSUER/);
    expect(refusal({ ...jwksOnly, ACTOR_JWT_ISSUER: 'chat' })).toMatch(
      /^bad_environment: .*ACTOR_JWT_AUDIENCE/,
    );
    expect(refusal({ ...jwksOnly, ACTOR_JWT_AUDIENCE: 'reactions' })).toMatch(/ACTOR_JWT_ISSUER/);
    // Also when a secret is set too: the key set must never be the weaker configuration.
    expect(refusal({ ...jwksOnly, ACTOR_JWT_SECRET: SECRET })).toMatch(/ACTOR_JWT_ISSUER/);
    expect(refusal({ ...jwksOnly, ACTOR_JWT_ISSUER: 'chat', ACTOR_JWT_AUDIENCE: 'reactions' })).toBe(
      'accepted',
    );

    // The Worker refuses every request with that environment (as for any bad variable).
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request('http://test/healthz'), jwksOnly as unknown as Env, ctx);
    await waitOnExecutionContext(ctx);
    expect(res.status).toBe(500);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('bad_environment');
    // And the verifier alone refuses such a configuration rather than skip the claim checks.
    const keys = await startJwksServer();
    expect(await code(verifyActorToken({ ACTOR_JWKS_URL: keys.url }, await keys.sign('actor_jwks')))).toBe(
      'bad_environment',
    );
  });

  describe('a key-set fetch failure is 503 service_unavailable with Retry-After, never a 401', () => {
    const failures: [string, JwksMode | 'refused'][] = [
      ['the endpoint answers 503', 'http-503'],
      ['the endpoint answers something that is not a key set', 'garbage'],
      ['the fetch times out', 'timeout'],
      // A real refused connection: nothing listens on port 9 of this host.
      ['the connection is refused', 'refused'],
    ];
    for (const [name, failure] of failures) {
      it(`${name}: 503 + Retry-After, logged once; held for the Retry-After without a fetch; the same token is accepted when the key set is back`, async () => {
        // Only Date is faked: the hold after a failed fetch is measured on it.
        vi.useFakeTimers({ toFake: ['Date'] });
        const w = await seedWorld();
        const keys = await startJwksServer();
        const bindings =
          failure === 'refused'
            ? { ...keys.bindings, ACTOR_JWKS_URL: 'http://127.0.0.1:9/jwks.json' }
            : keys.bindings;
        if (failure !== 'refused') keys.state.mode = failure;
        const token = await keys.sign(w.actors[0]!);
        const read = () => call('GET', `/v1/messages/${w.messages[0]}/reactions`, { token, env: bindings });
        const logs = captureLogLines();
        const res = await read();
        expect(res.status).toBe(503);
        expect(res.body.error.code).toBe('service_unavailable');
        const retryAfterS = Number(res.headers.get('retry-after'));
        expect(retryAfterS).toBeGreaterThan(0);
        expect(res.headers.get('www-authenticate')).toBeNull();
        expect(logs.events('actor_jwks_unavailable')).toHaveLength(1);

        // auth.jwks_failure_held: until the Retry-After has passed, this isolate answers the
        // same 503 at once: no fetch of a provider that is down, no caller held for the fetch
        // timeout, no second log line. Then it fetches again.
        if (failure !== 'refused') keys.state.mode = 'up';
        const fetched = keys.state.fetches;
        vi.setSystemTime(Date.now() + retryAfterS * 1000 - 1);
        const held = await read();
        logs.restore();
        expect(held.status).toBe(503);
        expect(Number(held.headers.get('retry-after'))).toBe(retryAfterS);
        expect(keys.state.fetches).toBe(fetched);
        expect(logs.events('actor_jwks_unavailable')).toHaveLength(1);
        vi.setSystemTime(Date.now() + 1);
        if (failure !== 'refused') {
          expect((await read()).status).toBe(200);
          expect(keys.state.fetches).toBe(fetched + 1);
        }

        keys.state.mode = 'up';
        const back = await call('GET', `/v1/messages/${w.messages[0]}/reactions`, {
          token,
          env: keys.bindings,
        });
        expect(back.status).toBe(200);
      });
    }

    it('auth.jwks_hold_spares_cached_keys: a failed refetch for an unknown kid does not turn away tokens whose key is cached', async () => {
      vi.useFakeTimers({ toFake: ['Date'] });
      const keys = await startJwksServer();
      const good = await keys.sign('actor_jwks');
      expect(await code(verifyActorToken(keys.bindings, good))).toBe('ok');
      // Past jose's refetch cooldown (30 s) the provider goes down, and a token naming a key
      // the cached set lacks makes jose refetch: that fetch fails (503, the hold starts).
      vi.setSystemTime(Date.now() + 31_000);
      keys.state.mode = 'http-503';
      const unknownKid = await foreignToken(keys.bindings, 'rotated-in');
      const fetched = keys.state.fetches;
      expect(await code(verifyActorToken(keys.bindings, unknownKid))).toBe('service_unavailable');
      expect(keys.state.fetches).toBe(fetched + 1);
      // Inside the hold, the token whose key is in the fresh cached set is still verified.
      expect(await code(verifyActorToken(keys.bindings, good))).toBe('ok');
    });

    it('a token whose key is not in a reachable key set is still 401', async () => {
      const keys = await startJwksServer();
      const token = await foreignToken(keys.bindings, 'not-in-the-set');
      expect(await code(verifyActorToken(keys.bindings, token))).toBe('unauthorized');
    });
  });
});

/**
 * Issue 29 hole 2: RFC 7519 lets `iat` be any NumericDate, a fraction included; it reached a
 * `bigint` parameter as is (22P02, 500 on every ticketed write, retried forever by the app).
 * The decision (docs/mobile-api.md "Authentication"): a fractional `iat` is floored to its
 * second (never later than it was, so a sign-out can only refuse it more), and an `iat` that
 * is negative or not a safe integer after flooring is refused as 401 like any bad token.
 */
describe('a NumericDate iat that is not a whole second', () => {
  /** An HS256 token with exactly these claims (jose's setters would validate them). */
  const rawToken = (claims: Record<string, unknown>) =>
    new SignJWT(claims)
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .sign(new TextEncoder().encode(env.ACTOR_JWT_SECRET as string));

  it('auth.iat_fraction_floored: issue, write, read and retire answer normally with iat = now - 30.5 s', async () => {
    const world = await seedWorld(1, 1);
    const actorId = world.actors[0]!;
    const nowS = Date.now() / 1000;
    const token = await rawToken({ sub: actorId, iat: nowS - 30.5, exp: nowS + 3600 });
    const intent = { messageId: world.messages[0]!, emoji: '👍', desired: 'present' as const };
    const operationId = opId();
    const issued = await issue(token, operationId, intent);
    expect(issued.status).toBe(201);
    const written = await put(token, operationId, issued.body.ticket, intent);
    expect({ status: written.status, code: written.body?.error?.code }).toEqual({
      status: 200,
      code: undefined,
    });
    expect((await reactions(token, intent.messageId)).status).toBe(200);
    const second = opId();
    const ticket2 = (await issue(token, second, { ...intent, desired: 'absent' })).body.ticket;
    const retired = await retire(token, second, ticket2);
    expect({ status: retired.status, code: retired.body?.error?.code }).toEqual({
      status: 200,
      code: undefined,
    });
    expect(await verifyActorToken({ ACTOR_JWT_SECRET: env.ACTOR_JWT_SECRET }, token)).toEqual({
      actorId,
      issuedAt: Math.floor(nowS - 30.5),
    });
  });

  it('auth.iat_out_of_range: a negative or huge iat is 401 unauthorized, never a 500', async () => {
    const world = await seedWorld(1, 1);
    const actorId = world.actors[0]!;
    const exp = Date.now() / 1000 + 3600;
    for (const iat of [-1, -1e20, -0.5, 2 ** 63, Number.MAX_VALUE]) {
      const token = await rawToken({ sub: actorId, iat, exp });
      const res = await issue(token, opId(), {
        messageId: world.messages[0]!,
        emoji: '👍',
        desired: 'present',
      });
      expect({ iat, status: res.status, code: res.body?.error?.code }).toEqual({
        iat,
        status: 401,
        code: 'unauthorized',
      });
    }
  });
});
