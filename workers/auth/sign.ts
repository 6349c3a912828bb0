import { SignJWT } from 'jose';

/**
 * Mints an HS256 actor token. For local development (the seeded demo actor) and tests;
 * production tokens come from the chat platform's identity service.
 */
export async function signActorToken(
  secret: string,
  actorId: string,
  opts: { ttlSeconds?: number; issuedAt?: number; issuer?: string; audience?: string } = {},
): Promise<string> {
  const iat = opts.issuedAt ?? Math.floor(Date.now() / 1000);
  let jwt = new SignJWT({})
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(actorId)
    .setIssuedAt(iat)
    .setExpirationTime(iat + (opts.ttlSeconds ?? 3600));
  if (opts.issuer) jwt = jwt.setIssuer(opts.issuer);
  if (opts.audience) jwt = jwt.setAudience(opts.audience);
  return jwt.sign(new TextEncoder().encode(secret));
}
