import type { Pool, PoolClient } from '@neondatabase/serverless';
import type { EmitOptions } from './emit';
import type { InstanceRetention, InstanceRetentionRule } from './instance-retention';
import type { EffectHandle } from './types';

/** One input to an actor's handler: a mailbox message, or its own timer coming due. */
export type ActorEvent =
  | { type: 'message'; key: string; payload: unknown; messageId: string }
  | { type: 'timer'; atMs: number };

export interface ActorContext {
  instanceId: string;
  actorType: string;
  actorKey: string;
  /** The revision this handler read; its commit is fenced on it. */
  revision: string;
  /** Database time (app_now_ms) when the state was read. */
  nowMs: number;
  /** The emit API: stages an effect, returns its handle; persisted by the fenced commit. */
  emit(kind: string, args: unknown, opts?: EmitOptions): EffectHandle;
  /** Ask for a timer event at `atMs` (database epoch ms; replaces any earlier one), or clear it. */
  setTimer(atMs: number | null): void;
  /**
   * Stage an explicit recovery check; it is written on the commit's own transaction. Throws
   * `forbidden` at once for another actor's handle; the returned promise rejects with `gone`
   * when the effect has no live binding on this instance (never bound, or past its lifetime).
   * Await it to handle that; a handler that does not still commits its turn (the refused check
   * is not staged, and is logged `actor_recovery_check_refused`).
   */
  requestRecovery(handle: EffectHandle): Promise<void>;
  /**
   * Stage a write to the application's own tables on the commit's transaction, run right
   * after the fenced commit (rolled back with it; re-run if the commit is retried). No
   * remote calls: locks are held.
   */
  inCommit(write: (tx: PoolClient) => Promise<void>): void;
  /**
   * A read on the runner's pool while the handler decides (autocommit, no lock held). The
   * value may change before the commit: what the commit depends on is checked again inside it
   * (`inCommit`), which throws `revision_conflict` to have the event handled again.
   */
  read<T>(query: (db: Pick<Pool, 'query'>) => Promise<T>): Promise<T>;
}

export interface ActorType<S = unknown> {
  type: string;
  initialState(): S;
  /**
   * Returns the new state. Throwing writes nothing and counts a failed delivery: the message
   * stays pending (retried later) until `mailboxMaxAttempts`, then it is dead and skipped.
   */
  handle(event: ActorEvent, state: S, ctx: ActorContext): S | Promise<S>;
  /**
   * Opt-in retention of this type's instances (issue 35 hole 9; `instance-retention.ts`):
   * the minute retention deletes an instance idle for `idleMs` with nothing left in flight.
   * Without it, instances are kept forever.
   */
  retention?: InstanceRetention;
  /**
   * The newest shape version this release's handler reads of the type's state and of its
   * mailbox payloads (workers/lib/shape-version.ts; default 1). A state or payload written at a
   * newer version is refused before the handler runs: never misread, never counted as a failed
   * delivery (the host retries; the newer release reads it).
   */
  stateVersion?: number;
  messageVersion?: number;
}

export interface ClaimedEffect {
  id: string;
  kind: string;
  args: unknown;
  attempts: number;
  instanceId: string;
}

export interface EffectExecutor {
  kind: string;
  /** Per-run budget; the signal aborts after it. Defaults to 30 s. */
  timeoutMs?: number;
  /**
   * Running it again while an earlier run may still be in flight is harmless: the external
   * system deduplicates by a key the effect derives from durable state (the Lark reply's
   * `uuid`, a badge withdrawal the typing ledger serializes by row). A restarted ActorHost
   * takes such claims over from its previous incarnation at once instead of waiting for the
   * staleness floor; the old incarnation's late write-back is fenced away by owner
   * (docs/effects.md "Restarts and deploys"). Every other kind keeps the staleness rule.
   */
  idempotentByKey?: boolean;
  /**
   * The newest shape version of this kind's arguments this release's executor reads
   * (workers/lib/shape-version.ts; default 1). Arguments written at a newer version are never
   * run here: the attempt fails as `shape_version_unsupported` (retried with its backoff).
   */
  argsVersion?: number;
  /**
   * Resolves with the result (stored, JSON) or throws (retry with backoff, then dead).
   * `ctx.pool` is the runner's own pool (the actor host's, in its I/O context): an executor
   * that needs the database uses it for autocommit statements instead of opening another
   * connection. Never hold a transaction on it across a remote call.
   */
  run(effect: ClaimedEffect, signal: AbortSignal, ctx?: EffectRunContext): Promise<unknown>;
}

export interface EffectRunContext {
  pool: Pool;
}

/** Actor types and effect executors by name; code, not I/O, so module scope is fine. */
export class EffectRegistry {
  private readonly actors = new Map<string, ActorType<never>>();
  private readonly executors = new Map<string, EffectExecutor>();

  registerActor<S>(actor: ActorType<S>): this {
    if (this.actors.has(actor.type)) throw new Error(`actor type ${actor.type} registered twice`);
    this.actors.set(actor.type, actor as unknown as ActorType<never>);
    return this;
  }

  registerEffect(executor: EffectExecutor): this {
    if (this.executors.has(executor.kind)) throw new Error(`effect kind ${executor.kind} registered twice`);
    this.executors.set(executor.kind, executor);
    return this;
  }

  actor(type: string): ActorType<unknown> | undefined {
    return this.actors.get(type) as ActorType<unknown> | undefined;
  }

  /** Registered actor types (the minute poll wakes only instances of these). */
  actorTypes(): string[] {
    return [...this.actors.keys()];
  }

  /** The retention rules of the registered actor types that declare one. */
  retentionRules(): InstanceRetentionRule[] {
    return [...this.actors.values()].flatMap((a) =>
      a.retention ? [{ actorType: a.type, ...a.retention }] : [],
    );
  }

  executor(kind: string): EffectExecutor | undefined {
    return this.executors.get(kind);
  }

  /** The kinds a restarted host may take over from its previous incarnation at once. */
  takeoverKinds(): string[] {
    return [...this.executors.values()].filter((e) => e.idempotentByKey).map((e) => e.kind);
  }
}

/**
 * The registry the Worker's ActorHost, webhook and cron use; the Worker's entry
 * (workers/index.ts) registers the features into it explicitly.
 */
export const effectRegistry = new EffectRegistry();
