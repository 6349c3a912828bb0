import { AppError } from '../errors';
import { newEffectId } from './ids';
import type { EffectHandle } from './types';

/** Longest per-effect grace accepted at emit (matches the column check). */
export const MAX_EFFECT_TIMEOUT_MS = 7 * 86_400_000;
/**
 * Longest delay accepted at emit. A pending effect keeps its binding alive (it must outlive
 * its effect), so an unbounded delay would pin a binding forever.
 */
export const MAX_EFFECT_DELAY_MS = 7 * 86_400_000;

export interface EmitOptions {
  /** Opt in to retirement: on a stale owner the runtime retires the effect and sends `effect:<id>:recovery`. */
  recovery?: { operation: string; statusOperation?: string; timeoutMs?: number };
  /** Status-only binding: checks can report on the effect; it is never retired. */
  status?: { operation: string; timeoutMs?: number };
  /** Run no earlier than this many milliseconds after commit (database time). */
  delayMs?: number;
  maxAttempts?: number;
  /** Also send `effect:<id>:completed` (with the result) to the origin on success. */
  notifyOnComplete?: boolean;
}

export interface StagedEffect {
  id: string;
  kind: string;
  args: unknown;
  delayMs: number;
  maxAttempts: number;
  notifyOnComplete: boolean;
  binding: {
    recoveryOperation: string | null;
    statusOperation: string | null;
    timeoutMs: number | null;
  } | null;
}

function checkTimeout(timeoutMs: number | undefined): number | null {
  if (timeoutMs === undefined) return null;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_EFFECT_TIMEOUT_MS)
    throw new AppError(
      'validation_failed',
      `effect timeoutMs must be an integer in 1..${MAX_EFFECT_TIMEOUT_MS}`,
    );
  return timeoutMs;
}

/**
 * The one emit API. Staging allocates the effect's stable ID and returns its JSON handle
 * at once; nothing reaches the database until the fenced actor commit persists the staged
 * effects together with the actor's new state.
 */
export class EffectStage {
  readonly staged: StagedEffect[] = [];
  constructor(readonly instanceId: string) {}

  emit(kind: string, args: unknown, opts: EmitOptions = {}): EffectHandle {
    if (!kind || kind.length > 100)
      throw new AppError('validation_failed', 'effect kind must be 1..100 characters');
    if (opts.recovery && opts.status)
      throw new AppError(
        'validation_failed',
        'pass recovery (optionally with statusOperation) or status, not both',
      );
    const maxAttempts = opts.maxAttempts ?? 5;
    if (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > 100)
      throw new AppError('validation_failed', 'maxAttempts must be an integer in 1..100');
    const delayMs = opts.delayMs ?? 0;
    if (!Number.isInteger(delayMs) || delayMs < 0 || delayMs > MAX_EFFECT_DELAY_MS)
      throw new AppError('validation_failed', `delayMs must be an integer in 0..${MAX_EFFECT_DELAY_MS}`);
    let binding: StagedEffect['binding'] = null;
    if (opts.recovery) {
      if (!opts.recovery.operation) throw new AppError('validation_failed', 'recovery.operation is required');
      binding = {
        recoveryOperation: opts.recovery.operation,
        statusOperation: opts.recovery.statusOperation ?? null,
        timeoutMs: checkTimeout(opts.recovery.timeoutMs),
      };
    } else if (opts.status) {
      if (!opts.status.operation) throw new AppError('validation_failed', 'status.operation is required');
      binding = {
        recoveryOperation: null,
        statusOperation: opts.status.operation,
        timeoutMs: checkTimeout(opts.status.timeoutMs),
      };
    }
    const id = newEffectId();
    this.staged.push({
      id,
      kind,
      args: args ?? null,
      delayMs,
      maxAttempts,
      notifyOnComplete: opts.notifyOnComplete ?? false,
      binding,
    });
    return { effectId: id, instanceId: this.instanceId, kind };
  }
}
