/**
 * Per-route fault injection. Routes: token, reactions.create, reactions.delete,
 * reactions.list, reply, or `*` for all of them. A fault applies to the next `times` calls.
 * - latency: waits `latencyMs`, then the call proceeds (combines with the others);
 * - 5xx: HTTP `status` (default 500) with a non-JSON body, nothing applied;
 * - 429: HTTP 429, code 99991400, `x-ogw-ratelimit-reset: resetSeconds`, nothing applied;
 * - expired_token: the presented token is revoked and the call answers 99991663;
 * - lost_response: the call is applied, then the connection is dropped unanswered.
 */
export const ROUTES = ['token', 'reactions.create', 'reactions.delete', 'reactions.list', 'reply'] as const;
export type RouteName = (typeof ROUTES)[number];
export type FaultKind = 'latency' | '5xx' | '429' | 'expired_token' | 'lost_response';

export interface Fault {
  route: RouteName | '*';
  kind: FaultKind;
  times: number;
  latencyMs?: number;
  status?: number;
  resetSeconds?: number;
}

export class FaultBook {
  private faults: Fault[] = [];

  add(fault: Fault): void {
    this.faults.push({ ...fault, times: fault.times > 0 ? fault.times : 1 });
  }

  clear(): void {
    this.faults = [];
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
    const f = this.faults.find((x) => x.kind !== 'latency' && matches(x, route));
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
  return f.route === '*' || f.route === route;
}
