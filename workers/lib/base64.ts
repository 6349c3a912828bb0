/**
 * Bytes ⇄ base64 (RFC 4648 §4, padded) and base64url (§5, unpadded), with atob/btoa so the
 * same code runs in workerd and Node. Decoding throws on characters outside the alphabet.
 */
export function toBase64(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}

export function fromBase64(text: string): Uint8Array<ArrayBuffer> {
  const raw = atob(text);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

export function toBase64Url(bytes: Uint8Array): string {
  return toBase64(bytes).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
}

export function fromBase64Url(text: string): Uint8Array<ArrayBuffer> {
  // atob alone would also take '+', '/' and '=': a token in the other alphabet is malformed.
  if (!/^[A-Za-z0-9_-]*$/.test(text)) throw new SyntaxError('not base64url');
  return fromBase64(text.replaceAll('-', '+').replaceAll('_', '/'));
}
