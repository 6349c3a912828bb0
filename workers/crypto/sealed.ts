import { fromBase64, toBase64 } from '../lib/base64';

/**
 * Secrets at rest: AES-256-GCM under versioned keys from the SECRET_KEYS binding.
 *
 * A sealed value is `v<version>.<iv b64>.<ciphertext b64>`. The caller passes the row it
 * belongs to as associated data (for example `lark_installation:<id>:app_secret`), so a
 * ciphertext copied onto another row fails to open. The highest key version seals; any
 * listed version opens, which is how keys rotate.
 */
export type KeyRing = Record<string, string>;

const enc = new TextEncoder();
const dec = new TextDecoder();
const keyCache = new Map<string, Promise<CryptoKey>>();

function importKey(material: string): Promise<CryptoKey> {
  let key = keyCache.get(material);
  if (!key) {
    const bytes = fromBase64(material);
    if (bytes.length !== 32) throw new Error('secret key must be 32 bytes of base64');
    key = crypto.subtle.importKey('raw', bytes, 'AES-GCM', false, ['encrypt', 'decrypt']);
    keyCache.set(material, key);
  }
  return key;
}

export function currentKeyVersion(keys: KeyRing): string {
  const versions = Object.keys(keys).map(Number);
  if (versions.length === 0) throw new Error('no secret keys configured');
  return String(Math.max(...versions));
}

export async function seal(keys: KeyRing, plaintext: string, boundTo: string): Promise<string> {
  const version = currentKeyVersion(keys);
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const key = await importKey(keys[version]!);
  const ct = await crypto.subtle.encrypt(
    { name: 'AES-GCM', iv, additionalData: enc.encode(boundTo) },
    key,
    enc.encode(plaintext),
  );
  return `v${version}.${toBase64(iv)}.${toBase64(new Uint8Array(ct))}`;
}

export class SealedValueError extends Error {}

export async function unseal(keys: KeyRing, sealed: string, boundTo: string): Promise<string> {
  const [tag, ivText, ctText] = sealed.split('.');
  const version = tag?.startsWith('v') ? tag.slice(1) : undefined;
  const material = version ? keys[version] : undefined;
  if (!material || !ivText || !ctText) throw new SealedValueError('sealed value uses an unknown key version');
  try {
    const pt = await crypto.subtle.decrypt(
      { name: 'AES-GCM', iv: fromBase64(ivText), additionalData: enc.encode(boundTo) },
      await importKey(material),
      fromBase64(ctText),
    );
    return dec.decode(pt);
  } catch {
    throw new SealedValueError('sealed value does not open for this row');
  }
}
