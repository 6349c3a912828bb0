/**
 * Effect IDs are allocated by the emitter at staging, before any database round trip, so
 * the handle exists the moment `emit` returns. UUIDv7 layout: 48 bits of milliseconds then
 * random bits, so IDs sort roughly by creation and the primary key index stays append-mostly.
 */
export function newEffectId(nowMs = Date.now()): string {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  let ms = nowMs;
  for (let i = 5; i >= 0; i--) {
    bytes[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  bytes[6] = (bytes[6]! & 0x0f) | 0x70;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Actor instance IDs are `<type>:<key>`; the ActorHost is `idFromName` of this string. */
export function instanceIdOf(actorType: string, actorKey: string): string {
  return `${actorType}:${actorKey}`;
}
