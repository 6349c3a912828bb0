import type { RouteName } from '../emulator/faults';
import { DB_MARKERS, type RESTART_POINTS, type Step } from './schedule';
import type { World } from './world';

/** The Lark call a restart point holds: the runtime is disposed while it is in flight. */
const RESTART_ROUTES: Record<Exclude<(typeof RESTART_POINTS)[number], 'now'>, RouteName> = {
  typing_add: 'reactions.create',
  reply: 'reply',
  card_create: 'cardkit.create',
  card_push: 'cardkit.content',
  // The generation's finish replaces the card whole (cardkit.update).
  card_finish: 'cardkit.update',
};

/**
 * The fault steps of a schedule. Each counts under its kind for the report. A restart at a
 * named point (`typing_add`, `reply`) holds the next such Lark call in the emulator, disposes
 * the runtime while the call is in flight, then lets the call apply: the change is made at
 * Lark and its answer has nowhere to go.
 */
export class FaultRunner {
  private readonly watchers: Promise<void>[] = [];
  private stopped = false;

  constructor(private readonly world: World) {}

  async run(step: Step): Promise<boolean> {
    const w = this.world;
    switch (step.op) {
      case 'lark_fault': {
        const kind = step.kind === 'timeout' ? 'hold' : step.kind;
        w.lark.faults.add({
          route: step.route,
          kind,
          times: step.times,
          ...(step.kind === 'latency' ? { latencyMs: 1500 } : {}),
          ...(step.kind === '429' ? { resetSeconds: 2 } : {}),
          ...(step.kind === '5xx' ? { status: 503 } : {}),
        });
        w.count(`lark ${step.kind}`);
        return true;
      }
      case 'db_cut':
        w.count('db cut (all connections)');
        w.disruptions++;
        w.trace.add(`db cut: ${w.dbFaults.cutAll()} connection(s)`);
        return true;
      case 'db_cut_at':
        w.count(`db cut at statement (${step.phase})`);
        w.dbFaults.armCut({ marker: DB_MARKERS[step.marker], phase: step.phase });
        return true;
      case 'db_lock':
        w.count('db lock held (lock/statement timeouts)');
        w.dbFaults.holdLock(step.table, step.ms);
        return true;
      case 'restart':
        w.count(step.at === 'now' ? 'runtime restart' : `runtime restart at ${step.at}`);
        if (step.at === 'now') await w.restart();
        else this.restartAt(RESTART_ROUTES[step.at]);
        return true;
      case 'do_storage_lost':
        w.count('durable object storage lost');
        await w.restart({ loseStorage: true });
        return true;
      case 'replica':
        if (step.on === (w.replica !== null)) return false;
        w.count(step.on ? 'second replica started' : 'second replica stopped');
        await w.setReplica(step.on);
        return true;
      case 'mixed_versions': {
        const to = w.version === 'new' ? 'old' : 'new';
        w.count(`mixed versions: restarted as the ${to} release`);
        w.trace.add(`mixed versions: the runtime restarts as the ${to} release`);
        await w.restart({ version: to });
        return true;
      }
      case 'clock':
        w.count('clock jump');
        await w.advanceClock(step.ms);
        return true;
      default:
        return false;
    }
  }

  private restartAt(route: RouteName): void {
    const w = this.world;
    w.lark.faults.add({ route, kind: 'hold', times: 1 });
    this.watchers.push(
      (async () => {
        const giveUpAt = Date.now() + 10_000;
        // Short waits, so the quiesce can call the watch off at once.
        while (!(await w.lark.faults.untilHeld(route, 1, 200)))
          if (this.stopped || Date.now() > giveUpAt) return;
        w.trace.add(`${route} call held: restarting the runtime under it`);
        await w.restart();
        w.lark.faults.release();
      })(),
    );
  }

  /** Calls off armed restarts whose call has not come, and waits for those under way. */
  async settle(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.watchers.splice(0));
  }
}
