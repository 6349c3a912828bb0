import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { vi } from 'vitest';

/**
 * A local JWKS endpoint for actor-token tests: the identity provider's key set served at a
 * unique https URL through a spy on `fetch` in this isolate (the Worker under test runs here
 * too, so its jose key-set fetch meets it). Every other URL goes to the real `fetch`.
 * `mode` decides how the endpoint answers the next fetches:
 *  - `up`: 200 with the key set;
 *  - `http-503`: the endpoint is down behind a proxy (503, HTML body);
 *  - `garbage`: 200 with a body that is not a key set;
 *  - `timeout`: the fetch fails as jose's AbortSignal.timeout makes it fail (TimeoutError),
 *    at once instead of after the 3 s deadline, so no test waits on real time.
 * (A refused connection needs no fake: tests point at an unused local port instead.)
 */
export type JwksMode = 'up' | 'http-503' | 'garbage' | 'timeout';

export const JWKS_ISSUER = 'https://id.example.test';
export const JWKS_AUDIENCE = 'reaction-ledger';

export async function startJwksServer() {
  const { publicKey, privateKey } = await generateKeyPair('ES256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' };
  const url = `${JWKS_ISSUER}/${crypto.randomUUID()}/jwks.json`;
  const state = { mode: 'up' as JwksMode, fetches: 0 };
  const realFetch = globalThis.fetch;
  const spy = vi.spyOn(globalThis, 'fetch').mockImplementation(async (input, init) => {
    const target = input instanceof Request ? input.url : String(input);
    if (target !== url) return realFetch(input, init);
    state.fetches += 1;
    switch (state.mode) {
      case 'up':
        return Response.json({ keys: [jwk] });
      case 'http-503':
        return new Response('<html>503 Service Unavailable</html>', { status: 503 });
      case 'garbage':
        return new Response('<html>maintenance</html>', { headers: { 'content-type': 'text/html' } });
      case 'timeout':
        throw new DOMException('The operation was aborted due to timeout', 'TimeoutError');
    }
  });
  return {
    url,
    state,
    /** The bindings of a Worker that verifies actor tokens against this key set only. */
    bindings: {
      ACTOR_JWT_SECRET: undefined,
      ACTOR_JWKS_URL: url,
      ACTOR_JWT_ISSUER: JWKS_ISSUER,
      ACTOR_JWT_AUDIENCE: JWKS_AUDIENCE,
    },
    /** An actor token signed with the served key (`iat` now unless given, 1 h life). */
    sign(actorId: string, opts: { issuedAt?: number; issuer?: string; audience?: string } = {}) {
      const iat = opts.issuedAt ?? Math.floor(Date.now() / 1000);
      return new SignJWT({})
        .setProtectedHeader({ alg: 'ES256', kid: 'k1' })
        .setSubject(actorId)
        .setIssuer(opts.issuer ?? JWKS_ISSUER)
        .setAudience(opts.audience ?? JWKS_AUDIENCE)
        .setIssuedAt(iat)
        .setExpirationTime(iat + 3600)
        .sign(privateKey);
    },
    stop: () => spy.mockRestore(),
  };
}
