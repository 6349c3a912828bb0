import type { Scheduler } from './scheduler';
import type { KeyValueStore } from './storage';

/**
 * The device's estimate of server (database) time, used for one thing: the creation stamp of
 * new operation IDs (UUIDv7), which the server judges against its own clock. The offset
 * (server minus device) is learned from answers that carry server time (a new ticket's
 * `issuedAt`, `details.serverTime` of a stamp refusal or an expiry) and persisted, so a device
 * whose clock is off stamps correctly after its first answer, across restarts.
 */
const KEY = 'reaction-clock/v1';
// Smaller corrections are network latency, not clock error: not worth a storage write.
const MIN_CORRECTION_MS = 1000;

export class ServerClock {
  private offsetMs: number | null = null;

  constructor(
    private readonly store: KeyValueStore,
    private readonly scheduler: Scheduler,
  ) {}

  /** Server minus device time, as last learned (0 before any answer). */
  async offset(): Promise<number> {
    if (this.offsetMs === null) {
      const raw = await this.store.getItem(KEY);
      const saved = raw ? (JSON.parse(raw) as { offsetMs?: unknown }).offsetMs : undefined;
      // A concurrent learn() may have set it while the read was pending; it is newer.
      this.offsetMs ??= typeof saved === 'number' && Number.isFinite(saved) ? saved : 0;
    }
    return this.offsetMs;
  }

  /** The estimated server time now. */
  async now(): Promise<number> {
    return this.scheduler.now() + (await this.offset());
  }

  /** An answer said the server's time was `serverTime` (ISO 8601) about now. */
  async learn(serverTime: unknown): Promise<void> {
    if (typeof serverTime !== 'string') return;
    const at = Date.parse(serverTime);
    if (!Number.isFinite(at)) return;
    const offset = at - this.scheduler.now();
    if (Math.abs(offset - (await this.offset())) < MIN_CORRECTION_MS) return;
    this.offsetMs = offset;
    await this.store.setItem(KEY, JSON.stringify({ offsetMs: offset }));
  }
}
