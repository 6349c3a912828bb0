/**
 * The journal's storage adapter: the four calls of React Native's AsyncStorage, so
 * AsyncStorage is an adapter as is. A SQLite table `(key text primary key, value text)` maps
 * onto it with one statement per call (see docs/mobile-client.md). Each setItem must be
 * durable when its promise resolves: the journal writes before any network call.
 */
export interface KeyValueStore {
  getItem(key: string): Promise<string | null>;
  setItem(key: string, value: string): Promise<void>;
  removeItem(key: string): Promise<void>;
  getAllKeys(): Promise<readonly string[]>;
}

/**
 * In-memory store. Two client instances over one MemoryStore behave like an app restart
 * over the same disk: the second sees exactly what the first had persisted. Values are
 * copied as strings, so nothing in memory is shared by reference.
 */
export class MemoryStore implements KeyValueStore {
  private readonly data = new Map<string, string>();

  async getItem(key: string): Promise<string | null> {
    return this.data.get(key) ?? null;
  }

  async setItem(key: string, value: string): Promise<void> {
    this.data.set(key, String(value));
  }

  async removeItem(key: string): Promise<void> {
    this.data.delete(key);
  }

  async getAllKeys(): Promise<readonly string[]> {
    return [...this.data.keys()];
  }
}
