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
  private readonly cache = new Map<string, Promise<Map<string, JournalEntry>>>();
  /** Highest seq handed out per actor in this process (a dismissed entry's seq is never reused). */
  private readonly lastSeq = new Map<string, number>();

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

  /**
   * Reserves the seq of a new choice: strictly above every seq of the actor, handed out in
   * call order. Concurrent calls all wait on the one load of the actor and resume in the
   * order they called (promise reactions run in registration order), and the reservation
   * after that wait is synchronous, so two quick choices never share a seq and the one
   * chosen later is always the newer one.
   */
  async nextSeq(actorId: string): Promise<number> {
    const entries = await this.load(actorId);
    let max = this.lastSeq.get(actorId) ?? 0;
    for (const e of entries.values()) max = Math.max(max, e.seq);
    this.lastSeq.set(actorId, max + 1);
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

  /** One load per actor: concurrent callers share it, so all see the same entry objects. */
  private load(actorId: string): Promise<Map<string, JournalEntry>> {
    let loading = this.cache.get(actorId);
    if (!loading) {
      loading = this.read(actorId);
      this.cache.set(actorId, loading);
      // By design: a failed read is not cached (its callers get the error through `loading`),
      // so the next call reads the store again.
      loading.catch(() => {
        if (this.cache.get(actorId) === loading) this.cache.delete(actorId);
      });
    }
    return loading;
  }

  private async read(actorId: string): Promise<Map<string, JournalEntry>> {
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
    return entries;
  }
}
