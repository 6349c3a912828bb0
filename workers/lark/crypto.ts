import { fromBase64 } from '../lib/base64';
import { constantTimeEqual } from '../lib/constant-time';

/**
 * Lark event crypto with WebCrypto only, so it runs unchanged in workerd and Node.
 *
 * - Signature: hex(sha256(utf8(timestamp + nonce + encryptKey) ‖ raw body bytes)). The
 *   body is hashed exactly as received, never re-serialised (a pretty-printed body is valid).
 * - Encryption: base64(IV(16) ‖ AES-256-CBC-PKCS7(plaintext)), key = sha256(utf8(encryptKey)).
 */
const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });
const cbcKeys = new Map<string, Promise<CryptoKey>>();

export function toHex(bytes: ArrayBuffer | Uint8Array): string {
  const view = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  let out = '';
  for (const b of view) out += b.toString(16).padStart(2, '0');
  return out;
}

export async function sha256(bytes: Uint8Array): Promise<Uint8Array<ArrayBuffer>> {
  const own =
    bytes.buffer instanceof ArrayBuffer ? (bytes as Uint8Array<ArrayBuffer>) : new Uint8Array(bytes);
  return new Uint8Array(await crypto.subtle.digest('SHA-256', own));
}

export async function computeSignature(
  timestamp: string,
  nonce: string,
  encryptKey: string,
  rawBody: Uint8Array,
): Promise<string> {
  const prefix = enc.encode(timestamp + nonce + encryptKey);
  const all = new Uint8Array(prefix.length + rawBody.length);
  all.set(prefix, 0);
  all.set(rawBody, prefix.length);
  return toHex(await sha256(all));
}

/** Compares the hex signature in constant time; a malformed header simply fails. */
export async function signatureMatches(
  given: string,
  timestamp: string,
  nonce: string,
  encryptKey: string,
  rawBody: Uint8Array,
): Promise<boolean> {
  const expected = await computeSignature(timestamp, nonce, encryptKey, rawBody);
  return constantTimeEqual(given.toLowerCase(), expected);
}

/**
 * Lark sends the timestamp in seconds (the Go SDK and node-sdk both treat it as an opaque
 * string); a 13-digit value is read as milliseconds so either unit is bounded.
 */
export function timestampSkewMs(timestamp: string, nowMs: number): number | undefined {
  if (!/^\d{1,16}$/.test(timestamp)) return undefined;
  const n = Number(timestamp);
  const ms = timestamp.length >= 13 ? n : n * 1000;
  return Math.abs(nowMs - ms);
}

function cbcKey(encryptKey: string): Promise<CryptoKey> {
  let key = cbcKeys.get(encryptKey);
  if (!key) {
    key = sha256(enc.encode(encryptKey)).then((raw) =>
      crypto.subtle.importKey('raw', raw, 'AES-CBC', false, ['encrypt', 'decrypt']),
    );
    if (cbcKeys.size > 256) cbcKeys.clear();
    cbcKeys.set(encryptKey, key);
  }
  return key;
}

export class DecryptError extends Error {}

/** Decrypts an `encrypt` field. Any failure (base64, padding, UTF-8) is a DecryptError. */
export async function decryptEvent(encrypted: string, encryptKey: string): Promise<string> {
  try {
    const bytes = fromBase64(encrypted);
    if (bytes.length < 32 || bytes.length % 16 !== 0) throw new Error('bad length');
    const pt = await crypto.subtle.decrypt(
      { name: 'AES-CBC', iv: bytes.slice(0, 16) },
      await cbcKey(encryptKey),
      bytes.slice(16),
    );
    return dec.decode(pt);
  } catch {
    throw new DecryptError('encrypted payload does not decrypt with this installation key');
  }
}
