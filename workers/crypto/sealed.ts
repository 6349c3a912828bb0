import { fromBase64, toBase64 } from '../lib/base64';
import { registerSecret } from '../log';
import { SUBKEY, subkey } from './subkeys';

/**
 * Secrets at rest: AES-256-GCM under versioned keys from the SECRET_KEYS binding.
 *
 * A sealed value is `sk1.<version>.<iv b64>.<ciphertext b64>`, encrypted under the version's
 * seal subkey (workers/crypto/subkeys.ts: HKDF, label `sealed-secret/v1`), never under the key
 * material itself, which the ticket MAC also derives from. The caller passes the row it belongs
 * to as associated data (for example `lark_installation:<id>:app_secret`), so a ciphertext
 * copied onto another row fails to open. The highest key version seals; any listed version
 * opens, which is how keys rotate.
 *
 * Values sealed before subkeys, `v<version>.<iv>.<ciphertext>`, were encrypted under the raw
 * material. They still open (decrypt only: nothing is sealed that way any more) until they are
 * re-sealed; docs/lark.md "Secrets at rest" says how to find and re-seal them.
 */
export type KeyRing = Record<string, string>;

const enc = new TextEncoder();
const dec = new TextDecoder();
const legacyKeys = new Map<string, Promise<CryptoKey>>();
const FORMAT = 'sk1';

function checkMaterial(material: string): void {
  if (fromBase64(material).length !== 32) throw new Error('secret key must be 32 bytes of base64');
}

/** The raw material as the AES-GCM key: only to open `v<version>.` values sealed before subkeys. */
function legacyKey(material: string): Promise<CryptoKey> {
  let key = legacyKeys.get(material);
  if (!key) {
    checkMaterial(material);
    key = crypto.subtle.importKey('raw', fromBase64(material), 'AES-GCM', false, ['decrypt']);
    legacyKeys.set(material, key);
  }
  return key;
}

function sealKey(material: string): Promise<CryptoKey> {
  checkMaterial(material);
  return subkey(material, SUBKEY.sealedSecret);
}

export function currentKeyVersion(keys: KeyRing): string {
  const versions = Object.keys(keys).map(Number);
  if (versions.length === 0) throw new Error('no secret keys configured');
  return String(Math.max(...versions));
}

export async function seal(keys: KeyRing, plaintext: string, boundTo: string): Promise<string> {
  // What is sealed is a secret: never printed by log.ts, under any key.
  registerSecret(plaintext);
  const version = currentKeyVersion(keys);
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const key = await sealKey(keys[version]!);
  const ct = await crypto.subtle.encrypt(
    { name: 'AES-GCM', iv, additionalData: enc.encode(boundTo) },
    key,
    enc.encode(plaintext),
  );
  return `${FORMAT}.${version}.${toBase64(iv)}.${toBase64(new Uint8Array(ct))}`;
}

export class SealedValueError extends Error {}

export async function unseal(keys: KeyRing, sealed: string, boundTo: string): Promise<string> {
  const parts = sealed.split('.');
  // `sk1.<version>.<iv>.<ct>` (seal subkey), or `v<version>.<iv>.<ct>` from before subkeys (raw key).
  const legacy = parts.length === 3 && /^v\d+$/.test(parts[0]!);
  const current = parts.length === 4 && parts[0] === FORMAT && /^\d+$/.test(parts[1]!);
  const version = legacy ? parts[0]!.slice(1) : current ? parts[1] : undefined;
  const [ivText, ctText] = parts.slice(-2);
  const material = version ? keys[version] : undefined;
  if (!material || !ivText || !ctText) throw new SealedValueError('sealed value uses an unknown key version');
  try {
    const pt = await crypto.subtle.decrypt(
      { name: 'AES-GCM', iv: fromBase64(ivText), additionalData: enc.encode(boundTo) },
      await (legacy ? legacyKey(material) : sealKey(material)),
      fromBase64(ctText),
    );
    const plaintext = dec.decode(pt);
    registerSecret(plaintext);
    return plaintext;
  } catch {
    throw new SealedValueError('sealed value does not open for this row');
  }
}
