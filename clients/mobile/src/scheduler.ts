/**
 * Time for the client: `now()` and one-shot timers. Backoff, request timeouts and the next
 * replay all go through it, so tests move a ManualScheduler instead of sleeping.
 */
export interface Scheduler {
  now(): number;
  /** Runs `fn` at or after `atMs`; returns a cancel function. */
  at(atMs: number, fn: () => void): () => void;
}

export const systemScheduler: Scheduler = {
  now: () => Date.now(),
  at(atMs, fn) {
    const handle = setTimeout(fn, Math.max(0, atMs - Date.now()));
    return () => clearTimeout(handle);
  },
};

interface Timer {
  id: number;
  atMs: number;
  fn: () => void;
}

/** A scheduler whose time moves only when a test says so. */
export class ManualScheduler implements Scheduler {
  private timers: Timer[] = [];
  private nextId = 1;

  constructor(private nowMs = Date.UTC(2030, 0, 1)) {}

  now(): number {
    return this.nowMs;
  }

  at(atMs: number, fn: () => void): () => void {
    const id = this.nextId++;
    this.timers.push({ id, atMs, fn });
    return () => {
      this.timers = this.timers.filter((t) => t.id !== id);
    };
  }

  /** Moves time forward by `ms`, running due timers in time order. */
  advance(ms: number): void {
    const target = this.nowMs + ms;
    for (;;) {
      const due = this.timers.filter((t) => t.atMs <= target).sort((a, b) => a.atMs - b.atMs || a.id - b.id);
      const first = due[0];
      if (!first) break;
      this.timers = this.timers.filter((t) => t.id !== first.id);
      this.nowMs = Math.max(this.nowMs, first.atMs);
      first.fn();
    }
    this.nowMs = target;
  }

  pending(): number {
    return this.timers.length;
  }
}
