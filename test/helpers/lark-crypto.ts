import { sha256 } from '../../workers/lark/crypto';
import { toBase64 } from '../../workers/lib/base64';

/**
 * Encrypts an event the way Lark does (random IV, key = sha256(encryptKey), AES-256-CBC), with
 * WebCrypto so workerd tests can build encrypted bodies. The Worker only decrypts; the Node
 * oracle test checks this against Lark's own SDK.
 */
export async function encryptEvent(plaintext: string, encryptKey: string): Promise<string> {
  const raw = await sha256(new TextEncoder().encode(encryptKey));
  const key = await crypto.subtle.importKey('raw', raw, 'AES-CBC', false, ['encrypt']);
  const iv = crypto.getRandomValues(new Uint8Array(16));
  const ct = new Uint8Array(
    await crypto.subtle.encrypt({ name: 'AES-CBC', iv }, key, new TextEncoder().encode(plaintext)),
  );
  const out = new Uint8Array(16 + ct.length);
  out.set(iv, 0);
  out.set(ct, 16);
  return toBase64(out);
}
