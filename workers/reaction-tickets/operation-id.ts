/**
 * Operation IDs of the ticket contract carry their creation time: they are UUIDv7 (RFC 9562
 * §5.7), whose first 48 bits are Unix milliseconds. The client stamps the ID when the user
 * makes the choice (with its estimate of server time) and never changes an ID afterwards, so
 * the age of an operation is part of the ID itself: no deleted row is needed to know that an
 * operation is too old to be admitted, and no ID can be presented with a fresher time.
 *
 * Dependency-free: the mobile client imports it at runtime to mint IDs.
 */
const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i;

/** The creation time (Unix ms) stamped in a UUIDv7 operation ID, or null for any other ID. */
export function operationStampMs(operationId: string): number | null {
  if (!V7.test(operationId)) return null;
  return Number.parseInt(operationId.slice(0, 8) + operationId.slice(9, 13), 16);
}

/** A new UUIDv7 operation ID stamped `stampMs` (Unix ms; the rest is random). */
export function mintOperationId(stampMs: number): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  let ms = Math.min(Math.max(0, Math.floor(stampMs)), 2 ** 48 - 1);
  for (let i = 5; i >= 0; i--) {
    bytes[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  bytes[6] = 0x70 | (bytes[6]! & 0x0f); // version 7
  bytes[8] = 0x80 | (bytes[8]! & 0x3f); // RFC 9562 variant
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
