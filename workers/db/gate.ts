import { log } from '../log';
import { metric } from '../metrics';

/**
 * Who is asking for a connection. `answer`: a request someone is waiting on (the Lark
 * webhook, whose 3 s Lark enforces; the HTTP API). `background`: work nobody is waiting on
 * this instant (Durable Object pumps and passes, crons, housekeeping), which retries from its
 * alarm or the next tick when it cannot connect.
 */
export type ConnectionPriority = 'answer' | 'background';

/**
 * Thrown when no connection of the isolate's budget freed up in time. Reads as a refusal
 * (db/refusal.ts): the webhook answers its retryable 503, a Durable Object retries from its
 * alarm, exactly as when the server itself refuses.
 */
export class ConnectionBudgetSpent extends Error {
  override readonly name = 'ConnectionBudgetSpent';
}

export interface Permit {
  /** Gives the connection's place back; idempotent. */
  release(): void;
}

export interface GateSnapshot {
  capacity: number;
  /** Places background work may hold at most: the rest is kept for answers. */
  backgroundCapacity: number;
  held: number;
  heldBackground: number;
  waitingAnswer: number;
  waitingBackground: number;
}

interface Held {
  priority: ConnectionPriority;
  since: number;
}

interface Waiter {
  /** Set by whoever frees the place; the waiter picks it up from its own I/O context. */
  permit?: Permit;
  /** When it stops waiting (Date.now ms). */
  until: number;
}

/**
 * A waiter still queued this long after its wait ended is gone (its request was cancelled, so
 * its timers never ran to withdraw it): it is dropped, never given a place nobody would take.
 */
const GONE_AFTER_MS = 1000;

/**
 * How often, at most, a waiter looks whether it was given a place (it starts at 1 ms and
 * doubles up to this). A waiter is never resolved by the code that frees the place: that code
 * runs in another request's (or Durable Object's) I/O context, and in workerd the waiter's
 * continuation then ran there. Its connection was opened on behalf of the other request, and
 * the first use from its own failed with "Cannot perform I/O on behalf of a different request"
 * (an unhandled rejection in the driver), its request hung ("Promise will never complete"),
 * and its place was never given back (issue 35 hole 11, test gate.handoff_across_requests).
 */
export const WAITER_POLL_MAX_MS = 8;

/**
 * A permit older than this is taken back (and logged): no pass, wake or request of this
 * service holds a connection anywhere near as long (their own deadlines are seconds to a
 * minute), so one this old belongs to a pool that was never ended, and leaving it would
 * shrink the budget for the isolate's whole life.
 */
export const PERMIT_MAX_HOLD_MS = 10 * 60_000;

/**
 * The isolate's budget of Postgres connections: at most `capacity` open at once, of which
 * background work holds at most half, and waiting answers are served before
 * waiting background work. Without it every request, post-answer Add and actor pump opens its
 * own connection, so a burst turns into backends until the server refuses ("too many clients")
 * and the answers, which Lark times out at 3 s, compete with pumps nobody waits on. With it a
 * burst waits here, in the isolate, for milliseconds, instead of failing at the server.
 *
 * One per isolate (module state): in workerd, requests and Durable Objects of one Worker share
 * it. A place freed by one request goes to a waiter of another, which picks it up from its own
 * I/O context (WAITER_POLL_MAX_MS): resolved from the freeing request's, the waiter's connect
 * ran in that one, which workerd forbids.
 */
export class ConnectionGate {
  private capacity: number;
  private reserve: number;
  private readonly held = new Map<number, Held>();
  private heldBackground = 0;
  private nextId = 0;
  private readonly waiting: Record<ConnectionPriority, Waiter[]> = { answer: [], background: [] };

  constructor(
    capacity = DEFAULT_CAPACITY,
    private readonly now: () => number = Date.now,
  ) {
    this.capacity = capacity;
    this.reserve = reserveFor(capacity);
  }

  /** Follows the configuration (every pool's settings carry it); waiters are served if it grew. */
  configure(capacity: number): void {
    if (capacity === this.capacity) return;
    this.capacity = capacity;
    this.reserve = reserveFor(capacity);
    this.serve();
  }

  /**
   * A place for one connection, now if there is one, else the first freed within `waitMs`
   * (answers first); else ConnectionBudgetSpent. FIFO within a priority.
   */
  acquire(priority: ConnectionPriority, waitMs: number): Promise<Permit> {
    if (!this.grantsNow(priority)) this.reclaimExpired();
    if (this.grantsNow(priority)) return Promise.resolve(this.grant(priority));
    const queued = this.now();
    return new Promise<Permit>((resolve, reject) => {
      const queue = this.waiting[priority];
      const waiter: Waiter = { until: queued + waitMs };
      queue.push(waiter);
      // Every step of the wait runs in the waiter's own I/O context: its own timers (above).
      let delay = 1;
      const look = () => {
        const waited = this.now() - queued;
        if (waiter.permit) {
          // Only waits are measured (a place granted at once costs nothing to graph).
          metric('db_gate_wait_ms', waited, 'granted', priority);
          resolve(waiter.permit);
          return;
        }
        if (waited >= waitMs) {
          const at = queue.indexOf(waiter);
          if (at >= 0) queue.splice(at, 1);
          metric('db_gate_wait_ms', waited, 'refused', priority);
          reject(
            new ConnectionBudgetSpent(
              `timeout exceeded when trying to connect: this isolate's ${this.capacity} database connections stayed in use for ${waitMs} ms`,
            ),
          );
          return;
        }
        setTimeout(look, Math.min(delay, waitMs - waited));
        delay = Math.min(delay * 2, WAITER_POLL_MAX_MS);
      };
      setTimeout(look, Math.min(delay, waitMs));
    });
  }

  snapshot(): GateSnapshot {
    return {
      capacity: this.capacity,
      backgroundCapacity: this.capacity - this.reserve,
      held: this.held.size,
      heldBackground: this.heldBackground,
      waitingAnswer: this.waiting.answer.length,
      waitingBackground: this.waiting.background.length,
    };
  }

  /** Nobody it must queue behind (an answer passes waiting background work) and a place it may take. */
  private grantsNow(priority: ConnectionPriority): boolean {
    if (this.waiting.answer.length > 0) return false;
    if (priority === 'background' && this.waiting.background.length > 0) return false;
    return this.fits(priority);
  }

  private fits(priority: ConnectionPriority): boolean {
    if (this.held.size >= this.capacity) return false;
    return priority === 'answer' || this.heldBackground < this.capacity - this.reserve;
  }

  private grant(priority: ConnectionPriority): Permit {
    const id = this.nextId++;
    this.held.set(id, { priority, since: this.now() });
    if (priority === 'background') this.heldBackground++;
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        if (this.forget(id)) this.serve();
      },
    };
  }

  /** False when the permit was already taken back (reclaimExpired). */
  private forget(id: number): boolean {
    const h = this.held.get(id);
    if (!h) return false;
    this.held.delete(id);
    if (h.priority === 'background') this.heldBackground--;
    return true;
  }

  /** Hands freed places to waiters: every answer that fits first, then background work. */
  private serve(): void {
    for (const priority of ['answer', 'background'] as const) {
      const queue = this.waiting[priority];
      while (queue.length > 0 && this.fits(priority)) {
        const waiter = queue.shift()!;
        if (this.now() > waiter.until + GONE_AFTER_MS) continue;
        waiter.permit = this.grant(priority);
      }
    }
  }

  private reclaimExpired(): void {
    const now = this.now();
    let reclaimed = false;
    // Oldest first: `held` iterates in grant order, so the first place held for less than the
    // limit ends the scan. Every refused acquire runs this; scanning all 256 places each time
    // was 3% of the isolate's CPU at 64 concurrent webhook events (bench 50's profile).
    for (const [id, h] of this.held) {
      if (now - h.since < PERMIT_MAX_HOLD_MS) break;
      this.forget(id);
      reclaimed = true;
      log.error('db_gate_permit_expired', { priority: h.priority, heldMs: now - h.since });
    }
    if (reclaimed) this.serve();
  }
}

/** Default of DB_ISOLATE_MAX_CONNECTIONS (workers/env.ts). */
export const DEFAULT_CAPACITY = 256;

/**
 * Half the budget (at least one place) is kept for answers: background work nobody waits on
 * (an actor pump holds its connection through the agent's and Lark's calls) can never crowd
 * out the answers Lark times out. Measured (bench 50, 64 concurrent events, one chat each):
 * with 64 places of which a quarter kept, 76 of 128 answers found no place within their 1.2 s.
 */
function reserveFor(capacity: number): number {
  return capacity > 1 ? Math.max(1, Math.floor(capacity / 2)) : 0;
}

/** This isolate's gate: every pool opened with a Worker's configuration goes through it. */
export const isolateGate = new ConnectionGate();
