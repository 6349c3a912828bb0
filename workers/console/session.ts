import { SUBKEY, subkey } from '../crypto/subkeys';
import type { Config } from '../env';
import { fromBase64Url, toBase64Url } from '../lib/base64';
import { constantTimeEqual } from '../lib/constant-time';
import { isNewerShape } from '../lib/shape-version';

/**
 * Console sessions: `<payload>.<mac>` in an HttpOnly cookie, payload = base64url JSON
 * {op, sid, exp, kv}. The MAC is HMAC-SHA256 under the `console-session/v1` HKDF subkey of
 * SECRET_KEYS version `kv` (the newest at sign-in), over the payload AND the current
 * ADMIN_TOKEN. Why both: a dedicated subkey keeps the session key apart from every other use
 * of the key material (sealing, tickets) and never makes the admin token itself a key; mixing
 * the admin token into the MAC makes rotating it a revocation of every session signed with
 * the old one, and dropping a SECRET_KEYS version does the same. Sessions are short (30 min):
 * there is no server-side session store to revoke from.
 */
export const SESSION_TTL_MS = 30 * 60_000;
/** The session payload's shape version (workers/lib/shape-version.ts): 1 writes no `_v`. */
export const SESSION_SHAPE_VERSION = 1;
export const SESSION_COOKIE = 'rl_console';

export interface Session {
  /** The operator named at sign-in (recorded with every action; not a secret). */
  operator: string;
  /** Random per sign-in; the CSRF token is bound to it. */
  sid: string;
  /** Expiry, epoch ms. */
  exp: number;
  /** The SECRET_KEYS version that signed it. */
  kv: string;
}

type Keys = Pick<Config, 'SECRET_KEYS' | 'ADMIN_TOKEN'>;
const enc = new TextEncoder();

function newestVersion(keys: Keys['SECRET_KEYS']): string {
  return Object.keys(keys).sort((a, b) => Number(b) - Number(a))[0]!;
}

async function mac(config: Keys, kv: string, message: string): Promise<string> {
  const material = config.SECRET_KEYS[kv];
  if (!material) throw new Error('unknown key version');
  const key = await subkey(material, SUBKEY.consoleSession);
  const data = enc.encode(`${message}\u0000${config.ADMIN_TOKEN}`);
  return toBase64Url(new Uint8Array(await crypto.subtle.sign('HMAC', key, data)));
}

export async function issueSession(config: Keys, operator: string, now: number): Promise<string> {
  const sid = toBase64Url(crypto.getRandomValues(new Uint8Array(16)));
  const session: Session = {
    operator,
    sid,
    exp: now + SESSION_TTL_MS,
    kv: newestVersion(config.SECRET_KEYS),
  };
  const payload = toBase64Url(enc.encode(JSON.stringify(session)));
  return `${payload}.${await mac(config, session.kv, `session\u0000${payload}`)}`;
}

/** The session a cookie value carries, or null: malformed, forged, another key, expired. */
export async function readSession(
  config: Keys,
  value: string | undefined,
  now: number,
): Promise<Session | null> {
  const m = /^([A-Za-z0-9_-]{1,2000})\.([A-Za-z0-9_-]{43})$/.exec(value ?? '');
  if (!m) return null;
  const [, payload, given] = m as unknown as [string, string, string];
  let session: Session;
  try {
    session = JSON.parse(new TextDecoder().decode(fromBase64Url(payload))) as Session;
  } catch {
    // By design: a cookie that does not decode is simply no session (the caller answers 401).
    return null;
  }
  if (typeof session?.kv !== 'string' || !config.SECRET_KEYS[session.kv]) return null;
  if (!constantTimeEqual(given, await mac(config, session.kv, `session\u0000${payload}`))) return null;
  if (typeof session.exp !== 'number' || session.exp <= now) return null;
  if (typeof session.operator !== 'string' || typeof session.sid !== 'string') return null;
  // Signed by a newer release in a shape this one does not read: no session here (the operator
  // signs in again), logged, never misread.
  if (isNewerShape('console session', session, SESSION_SHAPE_VERSION, { sid: session.sid })) return null;
  return session;
}

/** The CSRF token of one session: a MAC of its random id, so it is valid for that session only. */
export function csrfToken(config: Keys, session: Session): Promise<string> {
  return mac(config, session.kv, `csrf\u0000${session.sid}`);
}

export async function csrfValid(config: Keys, session: Session, given: unknown): Promise<boolean> {
  if (typeof given !== 'string' || given.length === 0) return false;
  return constantTimeEqual(given, await csrfToken(config, session));
}

/**
 * The cookie's attributes. Secure everywhere but plain-http loopback (`npm run dev` on
 * 127.0.0.1), where a Secure cookie would never come back; Path=/console keeps it off the API.
 */
export function cookieOptions(url: string, maxAgeSeconds: number) {
  const u = new URL(url);
  const loopback = u.protocol === 'http:' && /^(127\.\d+\.\d+\.\d+|localhost|\[::1\])$/.test(u.hostname);
  return {
    httpOnly: true,
    sameSite: 'Strict' as const,
    secure: !loopback,
    path: '/console',
    maxAge: maxAgeSeconds,
  };
}
