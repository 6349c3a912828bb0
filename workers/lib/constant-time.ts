const enc = new TextEncoder();

/**
 * Equality whose running time depends only on the lengths, never on where the inputs first
 * differ: for secrets (admin token, Lark verification token, signatures). Strings compare as
 * UTF-8. Plain JS rather than workerd's crypto.subtle.timingSafeEqual, so it also runs in Node.
 */
export function constantTimeEqual(a: string | Uint8Array, b: string | Uint8Array): boolean {
  const x = typeof a === 'string' ? enc.encode(a) : a;
  const y = typeof b === 'string' ? enc.encode(b) : b;
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}
