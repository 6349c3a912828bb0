import { fromBase64 } from '../lib/base64';

/**
 * One SECRET_KEYS version is one key material; every use of it goes through its own subkey,
 * HKDF-SHA256 (empty salt) with a distinct info label, so no two purposes ever share a key and
 * the material itself keys nothing. A label is never reused for another purpose; a new
 * derivation for a purpose gets a new label (…/v2).
 */
export const SUBKEY = {
  /** AES-256-GCM for sealed secrets at rest (workers/crypto/sealed.ts, `sk1.` values). */
  sealedSecret: 'sealed-secret/v1',
  /** HMAC-SHA256 of reaction-ticket bearer tokens (workers/reaction-tickets/ticket-token.ts). */
  reactionTicket: 'reaction-ticket/v1',
  /** HMAC-SHA256 of operator console sessions and their CSRF tokens (workers/console/session.ts). */
  consoleSession: 'console-session/v1',
} as const;
export type SubkeyPurpose = (typeof SUBKEY)[keyof typeof SUBKEY];

const cache = new Map<string, Promise<CryptoKey>>();

async function deriveBits(material: string, purpose: SubkeyPurpose): Promise<ArrayBuffer> {
  const base = await crypto.subtle.importKey('raw', fromBase64(material), 'HKDF', false, ['deriveBits']);
  return crypto.subtle.deriveBits(
    { name: 'HKDF', hash: 'SHA-256', salt: new Uint8Array(0), info: new TextEncoder().encode(purpose) },
    base,
    256,
  );
}

/** The purpose's subkey of one key material, imported for its one algorithm (cached). */
export function subkey(material: string, purpose: SubkeyPurpose): Promise<CryptoKey> {
  const id = `${purpose}\u0000${material}`;
  let key = cache.get(id);
  if (!key) {
    key = deriveBits(material, purpose).then((bits) =>
      purpose === SUBKEY.sealedSecret
        ? crypto.subtle.importKey('raw', bits, 'AES-GCM', false, ['encrypt', 'decrypt'])
        : crypto.subtle.importKey('raw', bits, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign', 'verify']),
    );
    // A failed derivation (bad material) must not stay cached as a rejected promise.
    key.catch(() => cache.delete(id));
    cache.set(id, key);
  }
  return key;
}
