import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import type { KeyValueStore } from '../../clients/mobile/src';

/**
 * A KeyValueStore over one JSON file, written atomically (temp file + rename) on every
 * setItem: the demo's stand-in for AsyncStorage, so the journal survives between runs.
 */
export class FileStore implements KeyValueStore {
  private data: Record<string, string>;

  constructor(private readonly path: string) {
    this.data = existsSync(path) ? JSON.parse(readFileSync(path, 'utf8')) : {};
  }

  async getItem(key: string): Promise<string | null> {
    return this.data[key] ?? null;
  }

  async setItem(key: string, value: string): Promise<void> {
    this.data[key] = value;
    this.flush();
  }

  async removeItem(key: string): Promise<void> {
    delete this.data[key];
    this.flush();
  }

  async getAllKeys(): Promise<readonly string[]> {
    return Object.keys(this.data);
  }

  private flush(): void {
    writeFileSync(`${this.path}.tmp`, JSON.stringify(this.data));
    renameSync(`${this.path}.tmp`, this.path);
  }
}
