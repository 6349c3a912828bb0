import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { verifyActorToken } from '../../workers/auth/actor-jwt';
import { signActorToken } from '../../workers/auth/sign';

const SECRET = 'a-test-secret-that-is-long-enough-0123456789';
afterEach(() => vi.restoreAllMocks());

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'ok';
  } catch (err) {
    return (err as { code?: string }).code ?? 'thrown';
  }
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
        .setIssuedAt()
        .setExpirationTime('5m')
        .sign(key);
    const config = { ACTOR_JWKS_URL: url };
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
