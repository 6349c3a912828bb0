import type { MiddlewareHandler } from 'hono';
import { createRemoteJWKSet, type JWTVerifyGetKey, errors as joseErrors, jwtVerify } from 'jose';
import type { AppEnv } from '../context';
import type { Config } from '../env';
import { AppError } from '../errors';
import { bearerToken } from '../lib/bearer';

/**
 * Actor authentication: `Authorization: Bearer <JWT>` verified in the Worker, either HS256
 * with ACTOR_JWT_SECRET or asymmetric keys from ACTOR_JWKS_URL (secret wins when both are
 * set). `sub` is the actor ID; `iat` is kept so sign-out can refuse older tokens. Every
 * failure is the same 401, so a probe learns nothing about which check failed.
 */
export interface ActorIdentity {
  actorId: string;
  issuedAt?: number;
}

export type ActorEnv = AppEnv & { Variables: AppEnv['Variables'] & { actor: ActorIdentity } };

const JWKS_TIMEOUT_MS = 3000;
const ASYMMETRIC = ['RS256', 'PS256', 'ES256', 'EdDSA'];
// Key sets hold only fetched public keys; jose refetches on an unknown `kid` after a cooldown.
const jwksCache = new Map<string, JWTVerifyGetKey>();
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
    clockTolerance: 5,
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
      let jwks = jwksCache.get(config.ACTOR_JWKS_URL);
      if (!jwks) {
        jwks = createRemoteJWKSet(new URL(config.ACTOR_JWKS_URL), { timeoutDuration: JWKS_TIMEOUT_MS });
        jwksCache.set(config.ACTOR_JWKS_URL, jwks);
      }
      ({ payload } = await jwtVerify(token, jwks, { ...options, algorithms: ASYMMETRIC }));
    } else {
      throw new AppError('service_unavailable', 'Actor authentication is not configured');
    }
    if (!payload.sub || !/^[A-Za-z0-9_.:-]{1,128}$/.test(payload.sub)) throw new Error('bad sub');
    return { actorId: payload.sub, issuedAt: typeof payload.iat === 'number' ? payload.iat : undefined };
  } catch (err) {
    // By design: every other verification failure (jose's errors, a bad subject) is the one
    // 401, and the reason is not told to the caller.
    if (err instanceof AppError) throw err;
    if (err instanceof joseErrors.JWKSTimeout)
      throw new AppError('service_unavailable', 'Key set unavailable', undefined, { 'retry-after': '5' });
    throw new AppError('unauthorized', 'A valid actor bearer token is required', undefined, {
      'www-authenticate': 'Bearer',
    });
  }
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
