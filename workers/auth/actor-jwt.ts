import type { MiddlewareHandler } from 'hono';
import { createRemoteJWKSet, type JWTVerifyGetKey, errors as joseErrors, jwtVerify } from 'jose';
import type { AppEnv } from '../context';
import type { Config } from '../env';
import { AppError } from '../errors';
import { bearerToken } from '../lib/bearer';
import { log } from '../log';

/**
 * Actor authentication: `Authorization: Bearer <JWT>` verified in the Worker, either HS256
 * with ACTOR_JWT_SECRET or asymmetric keys from ACTOR_JWKS_URL (secret wins when both are
 * set; a key set always comes with a required issuer and audience, see env.ts). `sub` is the
 * actor ID; `iat` is kept (floored to its second) so sign-out can refuse older tokens, which
 * is why a token issued in the future is refused: it would outlive any sign-out. Every
 * failure of the token is the same 401, so a probe learns nothing about which check failed.
 * A failure to get the key set is not the token's: 503 with Retry-After, so the app retries
 * instead of signing out.
 */
export interface ActorIdentity {
  actorId: string;
  issuedAt?: number;
}

export type ActorEnv = AppEnv & { Variables: AppEnv['Variables'] & { actor: ActorIdentity } };

const JWKS_TIMEOUT_MS = 3000;
/** Allowed difference between the issuer's clock and ours, for `exp`, `nbf` and `iat`. */
export const CLOCK_SKEW_SECONDS = 5;
/** What a 503 for an unreachable key set tells the app to wait; the isolate's own hold after a failed fetch (below). */
const JWKS_RETRY_AFTER_SECONDS = 5;
const ASYMMETRIC = ['RS256', 'PS256', 'ES256', 'EdDSA'];
// Key sets hold only fetched public keys; jose refetches on an unknown `kid` after a cooldown.
const jwksCache = new Map<string, JWTVerifyGetKey>();
/**
 * After a failed key-set fetch, for as long as the Retry-After it answered, requests of this
 * isolate answer the same 503 at once instead of fetching again: jose keeps nothing of a
 * failure, so without this every request to a provider that is down waits out its own fetch
 * (up to JWKS_TIMEOUT_MS) and sends the provider one more. A client that waits as told meets
 * a fresh fetch. Per key-set URL, isolate memory only (a new isolate fetches at once).
 */
const JWKS_FAILURE_HOLD_MS = JWKS_RETRY_AFTER_SECONDS * 1000;
const jwksFailedAt = new Map<string, number>();
const secretCache = new Map<string, Uint8Array>();

type AuthConfig = Pick<
  Config,
  'ACTOR_JWT_SECRET' | 'ACTOR_JWKS_URL' | 'ACTOR_JWT_ISSUER' | 'ACTOR_JWT_AUDIENCE'
>;

export async function verifyActorToken(config: AuthConfig, token: string): Promise<ActorIdentity> {
  const options = {
    issuer: config.ACTOR_JWT_ISSUER,
    audience: config.ACTOR_JWT_AUDIENCE,
    requiredClaims: ['sub', 'exp'],
    clockTolerance: CLOCK_SKEW_SECONDS,
  };
  try {
    let payload: { sub?: string; iat?: number };
    if (config.ACTOR_JWT_SECRET) {
      let key = secretCache.get(config.ACTOR_JWT_SECRET);
      if (!key) {
        key = new TextEncoder().encode(config.ACTOR_JWT_SECRET);
        secretCache.set(config.ACTOR_JWT_SECRET, key);
      }
      ({ payload } = await jwtVerify(token, key, { ...options, algorithms: ['HS256'] }));
    } else if (config.ACTOR_JWKS_URL) {
      // env.ts refuses this configuration already; a caller with a hand-built config must not
      // get a key set verified without its claim checks.
      if (!config.ACTOR_JWT_ISSUER || !config.ACTOR_JWT_AUDIENCE)
        throw new AppError('bad_environment', 'ACTOR_JWKS_URL needs ACTOR_JWT_ISSUER and ACTOR_JWT_AUDIENCE');
      ({ payload } = await jwtVerify(token, keySet(config.ACTOR_JWKS_URL), {
        ...options,
        algorithms: ASYMMETRIC,
      }));
    } else {
      throw new AppError('service_unavailable', 'Actor authentication is not configured');
    }
    if (!payload.sub || !/^[A-Za-z0-9_.:-]{1,128}$/.test(payload.sub)) throw new Error('bad sub');
    // jose checks `iat` only against a maximum age; a token from the future would outlive
    // every sign-out (directory.ts compares `iat` with the sign-out time).
    if (typeof payload.iat === 'number' && payload.iat > Date.now() / 1000 + CLOCK_SKEW_SECONDS)
      throw new Error('iat in the future');
    return { actorId: payload.sub, issuedAt: issuedAtSecond(payload.iat) };
  } catch (err) {
    // By design: every other verification failure (jose's errors, a bad subject, a future
    // `iat`) is the one 401, and the reason is not told to the caller.
    if (err instanceof AppError) throw err;
    if (err instanceof KeySetUnavailable) {
      // Once per failed fetch: the requests answered from the hold add nothing to it.
      if (!err.held) log.warn('actor_jwks_unavailable', { error: err.cause });
      throw new AppError('service_unavailable', 'The actor key set is unavailable; retry later', undefined, {
        'retry-after': String(JWKS_RETRY_AFTER_SECONDS),
      });
    }
    throw new AppError('unauthorized', 'A valid actor bearer token is required', undefined, {
      'www-authenticate': 'Bearer',
    });
  }
}

/**
 * `iat` as the whole second SQL compares with the sign-out second (a `bigint` parameter).
 * RFC 7519 allows a fraction: it is floored, never rounded up, so a token can only look older
 * than it is and a sign-out can only refuse it more (issue 29 hole 2). Negative, or not a safe
 * integer once floored: refused as a bad token (the caller's 401). jose has checked it is a
 * finite number.
 */
function issuedAtSecond(iat: number | undefined): number | undefined {
  if (iat === undefined) return undefined;
  const second = Math.floor(iat);
  if (!Number.isSafeInteger(second) || second < 0) throw new Error('iat out of range');
  return second;
}

/**
 * The key set could not be fetched or read: the provider's failure, not the token's. `held`:
 * no fetch was made, a recent one failed (JWKS_FAILURE_HOLD_MS).
 */
class KeySetUnavailable extends Error {
  constructor(
    readonly held: boolean,
    options: { cause: unknown },
  ) {
    super(held ? 'key set unavailable (a fetch failed moments ago)' : 'key set unavailable', options);
  }
}

/**
 * The remote key set of `url`, with its failures sorted: a key set that was read but has no
 * single key for the token's `kid`/`alg` is the token's failure (401); anything else on the
 * way to a key (network error, timeout, non-200, a body that is not a key set) is
 * KeySetUnavailable (503). jose refetches on an unknown `kid` after its 30 s cooldown, so a
 * provider that is down then answers 503 for that token too: it cannot be told apart.
 */
function keySet(url: string): JWTVerifyGetKey {
  let jwks = jwksCache.get(url);
  if (!jwks) {
    const remote = createRemoteJWKSet(new URL(url), { timeoutDuration: JWKS_TIMEOUT_MS });
    jwks = async (header, token) => {
      // Only a call that would fetch is held: with a fresh key set cached, a token whose key is
      // in it is verified as usual (a failed refetch for some other token's unknown `kid` must
      // not turn every valid token away; jose's cooldown already bounds those refetches).
      const failedAt = jwksFailedAt.get(url);
      if (!remote.fresh && failedAt !== undefined && Date.now() - failedAt < JWKS_FAILURE_HOLD_MS)
        throw new KeySetUnavailable(true, { cause: null });
      try {
        const key = await remote(header, token);
        jwksFailedAt.delete(url);
        return key;
      } catch (err) {
        if (
          err instanceof joseErrors.JWKSNoMatchingKey ||
          err instanceof joseErrors.JWKSMultipleMatchingKeys ||
          err instanceof joseErrors.JOSENotSupported
        )
          throw err;
        jwksFailedAt.set(url, Date.now());
        throw new KeySetUnavailable(false, { cause: err });
      }
    };
    jwksCache.set(url, jwks);
  }
  return jwks;
}

/** Middleware: sets `c.var.actor` or answers 401 in the one error shape. */
export function requireActor(): MiddlewareHandler<ActorEnv> {
  return async function requireActor(c, next) {
    const token = bearerToken(c.req.header('authorization'));
    if (!token)
      throw new AppError('unauthorized', 'A valid actor bearer token is required', undefined, {
        'www-authenticate': 'Bearer',
      });
    c.set('actor', await verifyActorToken(c.var.config, token));
    await next();
  };
}
