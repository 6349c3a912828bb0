import { DurableObject } from 'cloudflare:workers';
import { type Admitted, admit, emptyGate, type GateConfig, type GateState } from './gate';

const STATE_KEY = 'gate';

/**
 * The one place that decides which alert lines are sent (`idFromName('global')`): Tail Worker
 * invocations run in many isolates and locations at once, and only a single, serialised owner
 * makes "one notification per key per window" and the rate limit exact. (The Cache API was the
 * other choice: it is per location, has no atomic read-modify-write, and may evict at any time,
 * so a burst seen in two locations, or two isolates of one, would notify twice.) It is asked
 * once per tail batch that holds an alert line, never for ordinary traffic. Its state is one
 * small bounded object (gate.ts) in its storage; it makes no outside call.
 */
export class AlertGate extends DurableObject {
  private state: GateState | undefined;

  async admit(keys: string[], config: GateConfig): Promise<Admitted[]> {
    this.state ??= (await this.ctx.storage.get<GateState>(STATE_KEY)) ?? emptyGate();
    const admitted = admit(this.state, keys, Date.now(), config);
    await this.ctx.storage.put(STATE_KEY, this.state);
    return admitted;
  }

  /** The windows and the rate counter as stored (for an operator or a test; nothing secret). */
  async peek(): Promise<GateState> {
    return (await this.ctx.storage.get<GateState>(STATE_KEY)) ?? emptyGate();
  }
}
