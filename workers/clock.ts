/**
 * Application time. Deadlines that decide data live in SQL (`app_now()`, see
 * migrations/0001_baseline_clock.sql); this clock is for budgets and timers inside one process, and tests
 * replace it instead of sleeping.
 */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** A clock tests move by hand. */
export class ManualClock implements Clock {
  constructor(private ms = Date.UTC(2026, 0, 1)) {}
  now(): number {
    return this.ms;
  }
  advance(ms: number): void {
    this.ms += ms;
  }
  set(ms: number): void {
    this.ms = ms;
  }
}

/** A budget: the time left until a fixed deadline, for timeouts that must nest. */
export class Deadline {
  readonly at: number;
  constructor(
    budgetMs: number,
    private readonly clock: Clock = systemClock,
  ) {
    this.at = clock.now() + budgetMs;
  }
  remaining(): number {
    return Math.max(0, this.at - this.clock.now());
  }
  expired(): boolean {
    return this.remaining() <= 0;
  }
  /** The smaller of `capMs` and what is left, for one nested operation. */
  slice(capMs: number): number {
    return Math.min(capMs, this.remaining());
  }
}
