/**
 * Per-route fault injection. Routes: token, reactions.create, reactions.delete,
 * reactions.list, reply, messages.delete, bot.info, the CardKit routes (cardkit.create, cardkit.content, cardkit.settings,
 * cardkit.update, cardkit.batch_update), `cardkit.*` for the five of them, or `*` for all.
 * A fault applies to the next `times` calls.
 * - latency: waits `latencyMs`, then the call proceeds (combines with the others);
 * - 5xx: HTTP `status` (default 500) with a non-JSON body, nothing applied;
 * - 429: HTTP 429, code 99991400, `x-ogw-ratelimit-reset: resetSeconds`, nothing applied;
 * - expired_token: the presented token is revoked and the call answers 99991663;
 * - lost_response: the call is applied, then the connection is dropped unanswered;
 * - hold: the call waits unanswered (after any latency) until `release()` lets it proceed or
 *   `clear()` drops it unanswered with nothing applied. Tests use it instead of a latency
 *   window: a held call is in flight for exactly as long as the test says, and `untilHeld`
 *   tells the test when it arrived.
 */
export const ROUTES = [
  'token',
  'reactions.create',
  'reactions.delete',
  'reactions.list',
  'reply',
  'messages.delete',
  'bot.info',
  'cardkit.create',
  'cardkit.content',
  'cardkit.settings',
  'cardkit.update',
  'cardkit.batch_update',
] as const;
export type RouteName = (typeof ROUTES)[number];
/** What a fault (or a wait for held calls) may name: one route, the CardKit routes, or all. */
export type RouteTarget = RouteName | 'cardkit.*' | '*';

export function isRouteTarget(v: unknown): v is RouteTarget {
  return v === '*' || v === 'cardkit.*' || ROUTES.includes(v as RouteName);
}
export type FaultKind = 'latency' | '5xx' | '429' | 'expired_token' | 'lost_response' | 'hold';

export interface Fault {
  route: RouteTarget;
  kind: FaultKind;
  times: number;
  latencyMs?: number;
  status?: number;
  resetSeconds?: number;
}

interface HeldCall {
  route: RouteName;
  /** true: proceed as if never held; false: drop unanswered. */
  resume: (proceed: boolean) => void;
}

export class FaultBook {
  private faults: Fault[] = [];
  private held: HeldCall[] = [];
  private heldWaiters: (() => void)[] = [];

  add(fault: Fault): void {
    this.faults.push({ ...fault, times: fault.times > 0 ? fault.times : 1 });
  }

  /** Removes every fault; held calls are dropped unanswered. */
  clear(): void {
    this.faults = [];
    for (const h of this.held.splice(0)) h.resume(false);
  }

  /** Lets every held call proceed; returns how many there were. */
  release(): number {
    const released = this.held.splice(0);
    for (const h of released) h.resume(true);
    return released.length;
  }

  heldCalls(): { route: RouteName }[] {
    return this.held.map((h) => ({ route: h.route }));
  }

  /**
   * Consumes a matching hold fault: the promise settles when the call is released (true) or
   * the faults are cleared (false). Null when this call is not held.
   */
  takeHold(route: RouteName): Promise<boolean> | null {
    const f = this.faults.find((x) => x.kind === 'hold' && matches(x, route));
    if (!f) return null;
    f.times--;
    this.sweep();
    const held = new Promise<boolean>((resume) => this.held.push({ route, resume }));
    for (const wake of this.heldWaiters.splice(0)) wake();
    return held;
  }

  /** Resolves once `count` calls of `route` are held; false when `timeoutMs` passes first. */
  async untilHeld(route: RouteTarget, count: number, timeoutMs: number): Promise<boolean> {
    const enough = () => this.held.filter((h) => targets(route, h.route)).length >= count;
    const giveUpAt = Date.now() + timeoutMs;
    while (!enough()) {
      const left = giveUpAt - Date.now();
      if (left <= 0) return false;
      await new Promise<void>((wake) => {
        const timer = setTimeout(wake, left);
        this.heldWaiters.push(() => {
          clearTimeout(timer);
          wake();
        });
      });
    }
    return true;
  }

  list(): Fault[] {
    return this.faults.map((f) => ({ ...f }));
  }

  /** Total latency owed by this call; consumes the latency faults it used. */
  takeLatency(route: RouteName): number {
    let ms = 0;
    for (const f of this.faults)
      if (f.kind === 'latency' && matches(f, route)) {
        ms += f.latencyMs ?? 0;
        f.times--;
      }
    this.sweep();
    return ms;
  }

  /** The first outcome-changing fault for this call, consumed. */
  takeOutcome(route: RouteName): Fault | undefined {
    const f = this.faults.find((x) => x.kind !== 'latency' && x.kind !== 'hold' && matches(x, route));
    if (!f) return undefined;
    f.times--;
    this.sweep();
    return { ...f };
  }

  private sweep(): void {
    this.faults = this.faults.filter((f) => f.times > 0);
  }
}

function matches(f: Fault, route: RouteName): boolean {
  return targets(f.route, route);
}

function targets(target: RouteTarget, route: RouteName): boolean {
  return target === '*' || target === route || (target === 'cardkit.*' && route.startsWith('cardkit.'));
}
