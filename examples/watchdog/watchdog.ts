import type { ActorEvent, ActorType, EffectExecutor } from '../../workers/effects/registry';
import type { EffectHandle } from '../../workers/effects/types';

/**
 * The watchdog: runs one job as an effect with a recovery binding. When the process that
 * ran it goes stale, the runtime retires the effect and sends `effect:<id>:recovery`; the
 * watchdog then decides on a replacement generation (up to MAX_GENERATIONS). Success (the
 * completion callback) and completed-status repair (a check answering "completed") go
 * through the same guard, `settle`. A status answer never starts a replacement.
 */
export const MAX_GENERATIONS = 3;
export const JOB_KIND = 'watchdog.job';

export interface WatchdogState {
  jobKey: string | null;
  generation: number;
  current: EffectHandle | null;
  status: 'idle' | 'running' | 'done' | 'failed';
  result: unknown;
  /** Every decision, for operators and tests. */
  log: string[];
}

const initial = (): WatchdogState => ({
  jobKey: null,
  generation: 0,
  current: null,
  status: 'idle',
  result: null,
  log: [],
});

/** The one application guard: only the current generation's effect may settle the job, once. */
function settle(s: WatchdogState, effectId: string, result: unknown, via: string): WatchdogState {
  if (s.status !== 'running' || s.current?.effectId !== effectId)
    return { ...s, log: [...s.log, `ignored ${via} for ${effectId}`] };
  return { ...s, status: 'done', result, log: [...s.log, `done via ${via} at generation ${s.generation}`] };
}

function launch(
  s: WatchdogState,
  ctx: Parameters<ActorType<WatchdogState>['handle']>[2],
  reason: string,
): WatchdogState {
  const generation = s.generation + 1;
  // The job key is stable across generations: the external system dedupes on it, because
  // stale heartbeat evidence does not prove the previous generation stopped.
  const current = ctx.emit(
    JOB_KIND,
    { jobKey: s.jobKey, generation },
    { recovery: { operation: 'replace', statusOperation: 'probe' }, notifyOnComplete: true, maxAttempts: 1 },
  );
  return {
    ...s,
    generation,
    current,
    status: 'running',
    log: [...s.log, `generation ${generation} (${reason})`],
  };
}

/** Splits `effect:<id>:<rest>` runtime keys. */
function runtimeKey(key: string): { effectId: string; what: string } | null {
  const m = /^effect:([0-9a-f-]{36}):(recovery|completed|failed|check:\d+)$/.exec(key);
  return m ? { effectId: m[1]!, what: m[2]! } : null;
}

export const watchdogActor: ActorType<WatchdogState> = {
  type: 'watchdog',
  initialState: initial,
  handle(event: ActorEvent, state: WatchdogState, ctx) {
    const s = { ...initial(), ...state };
    if (event.type === 'timer') return s;
    if (event.key.startsWith('start:')) {
      if (s.status !== 'idle') return s;
      return launch({ ...s, jobKey: event.key.slice('start:'.length) }, ctx, 'start');
    }
    if (event.key.startsWith('probe:')) {
      if (s.status === 'running' && s.current) ctx.requestRecovery(s.current);
      return s;
    }
    const rk = runtimeKey(event.key);
    if (!rk) return s;
    const payload = event.payload as { outcome?: string; result?: unknown };
    if (rk.what === 'completed') return settle(s, rk.effectId, payload.result, 'success');
    if (rk.what.startsWith('check:')) {
      // Status repair: only a "completed" answer may settle, through the same guard.
      if (payload.outcome === 'completed') return settle(s, rk.effectId, payload.result, 'status repair');
      return { ...s, log: [...s.log, `status ${payload.outcome}`] };
    }
    // recovery or failed: the current generation is over without a result.
    if (s.status !== 'running' || s.current?.effectId !== rk.effectId) return s;
    if (s.generation >= MAX_GENERATIONS)
      return { ...s, status: 'failed', log: [...s.log, `gave up after ${s.generation} generations`] };
    return launch(s, ctx, rk.what);
  },
};

/** A stand-in job: echoes its arguments. Real jobs call out with the stable job key. */
export const watchdogJob: EffectExecutor = {
  kind: JOB_KIND,
  timeoutMs: 10_000,
  async run(effect) {
    return { ran: effect.args };
  },
};
