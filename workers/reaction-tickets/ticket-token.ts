import { currentKeyVersion, type KeyRing } from '../crypto/sealed';
import { SUBKEY, subkey } from '../crypto/subkeys';
import { fromBase64Url, toBase64Url } from '../lib/base64';

/**
 * The bearer form of a server-stored ticket: `rt1.<key version>.<ticket id>.<mac>`, where
 * mac = HMAC-SHA256 over the ticket ID under the version's ticket subkey (HKDF label
 * `reaction-ticket/v1`, workers/crypto/subkeys.ts; the seal key is another subkey). The row
 * holds the binding (actor, operation, intent, expiry); the MAC makes IDs unguessable and
 * lets a retried issuance hand back the same token without storing it.
 */
const enc = new TextEncoder();
const TOKEN = /^rt1\.(\d{1,6})\.([0-9a-f-]{36})\.([A-Za-z0-9_-]{43})$/;

// The same derivation as before workers/crypto/subkeys.ts existed, so issued tickets verify.
const macKey = (material: string) => subkey(material, SUBKEY.reactionTicket);

export function ticketKeyVersion(keys: KeyRing): string {
  return currentKeyVersion(keys);
}

export async function signTicket(keys: KeyRing, version: string, ticketId: string): Promise<string> {
  const material = keys[version];
  if (!material) throw new Error('ticket key version is not configured');
  const mac = await crypto.subtle.sign('HMAC', await macKey(material), enc.encode(ticketId));
  return `rt1.${version}.${ticketId}.${toBase64Url(new Uint8Array(mac))}`;
}

/** Returns the ticket ID when the MAC verifies (constant time), else null. */
export async function verifyTicket(keys: KeyRing, token: string): Promise<string | null> {
  const m = TOKEN.exec(token);
  if (!m) return null;
  const [, version, ticketId, mac] = m;
  const material = keys[version!];
  if (!material) return null;
  const ok = await crypto.subtle.verify(
    'HMAC',
    await macKey(material),
    fromBase64Url(mac!),
    enc.encode(ticketId!),
  );
  return ok ? ticketId! : null;
}
