import type { JournalEntry } from './entry';
import type { KeyValueStore } from './storage';

/**
 * The journal of one device: entries keyed by actor and operation ID in a KeyValueStore.
 * Loaded once per actor into memory; every change is the same object written back, so a
 * step in flight and a newer choice never overwrite each other's fields.
 */
const PREFIX = 'reaction-journal/v1/';

const keyOf = (actorId: string, operationId: string) =>
  `${PREFIX}${encodeURIComponent(actorId)}/${encodeURIComponent(operationId)}`;

export class Journal {
  private readonly cache = new Map<string, Map<string, JournalEntry>>();

  constructor(private readonly store: KeyValueStore) {}

  /** Every entry of `actorId`, oldest choice first. */
  async list(actorId: string): Promise<JournalEntry[]> {
    const entries = await this.load(actorId);
    return [...entries.values()].sort((a, b) => a.seq - b.seq);
  }

  async get(actorId: string, operationId: string): Promise<JournalEntry | null> {
    return (await this.load(actorId)).get(operationId) ?? null;
  }

  /** Persists `entry` (durable when this resolves). */
  async save(entry: JournalEntry): Promise<void> {
    (await this.load(entry.actorId)).set(entry.operationId, entry);
    await this.store.setItem(keyOf(entry.actorId, entry.operationId), JSON.stringify(entry));
  }

  /**
   * Persists `entry` under its new operation ID, then drops the key of `fromId`. A crash in
   * between leaves both; the next load keeps only the re-stamped one (`restampedFrom`).
   */
  async rename(entry: JournalEntry, fromId: string): Promise<void> {
    const entries = await this.load(entry.actorId);
    entries.delete(fromId);
    entries.set(entry.operationId, entry);
    await this.store.setItem(keyOf(entry.actorId, entry.operationId), JSON.stringify(entry));
    await this.store.removeItem(keyOf(entry.actorId, fromId));
  }

  async remove(actorId: string, operationId: string): Promise<void> {
    (await this.load(actorId)).delete(operationId);
    await this.store.removeItem(keyOf(actorId, operationId));
  }

  async nextSeq(actorId: string): Promise<number> {
    let max = 0;
    for (const e of (await this.load(actorId)).values()) max = Math.max(max, e.seq);
    return max + 1;
  }

  /** Actors with entries on this device that still wait for a terminal answer. */
  async actorsWithPending(): Promise<string[]> {
    const actors = new Set<string>();
    for (const key of await this.store.getAllKeys()) {
      if (!key.startsWith(PREFIX)) continue;
      const actorId = decodeURIComponent(key.slice(PREFIX.length).split('/')[0]!);
      const entry = await this.get(actorId, decodeURIComponent(key.split('/').pop()!));
      if (entry && !entry.terminal) actors.add(actorId);
    }
    return [...actors];
  }

  private async load(actorId: string): Promise<Map<string, JournalEntry>> {
    const cached = this.cache.get(actorId);
    if (cached) return cached;
    const prefix = `${PREFIX}${encodeURIComponent(actorId)}/`;
    const entries = new Map<string, JournalEntry>();
    for (const key of await this.store.getAllKeys()) {
      if (!key.startsWith(prefix)) continue;
      const raw = await this.store.getItem(key);
      if (!raw) continue;
      const entry = JSON.parse(raw) as JournalEntry;
      if (entry.v === 1) entries.set(entry.operationId, entry);
    }
    // A re-stamp interrupted between its two writes: the old copy was never issued; drop it.
    for (const entry of [...entries.values()]) {
      if (!entry.restampedFrom || !entries.has(entry.restampedFrom)) continue;
      entries.delete(entry.restampedFrom);
      await this.store.removeItem(keyOf(actorId, entry.restampedFrom));
    }
    // A concurrent load may have finished first; keep the one already handed out.
    const again = this.cache.get(actorId);
    if (again) return again;
    this.cache.set(actorId, entries);
    return entries;
  }
}
