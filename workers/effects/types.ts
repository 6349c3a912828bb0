import type { PoolClient } from '@neondatabase/serverless';

/** Anything that runs one statement: a pool, a client, or a transaction's connection. */
export type Queryable = Pick<PoolClient, 'query'>;

/**
 * Lock protocol version written by every process at registration (effect claimers, and each
 * retention pass for its duration). Version 2 honours persisted recovery bindings and the
 * lock order in docs/effects.md; version 3 adds the binding-lifetime rule (migration 0013: a
 * binding lives while its effect is pending or processing, so retention never deletes one a
 * live effect keeps). Recovery-enabled effects are refused while a live process reports
 * anything older (docs/effects.md "Upgrading").
 */
export const EFFECT_PROTOCOL_VERSION = 3;

/** The JSON handle the emit API returns; safe to store in actor state or send anywhere. */
export interface EffectHandle {
  effectId: string;
  instanceId: string;
  kind: string;
}

export type EffectStatus = 'pending' | 'processing' | 'completed' | 'dead';

export interface EffectRow {
  id: string;
  origin_instance_id: string;
  kind: string;
  args: unknown;
  status: EffectStatus;
  locked_by: string | null;
  attempts: number;
  max_attempts: number;
  run_at_ms: string;
  result: unknown;
  last_error: string | null;
}

export interface RecoveryBindingRow {
  effect_id: string;
  origin_instance_id: string;
  recovery_operation: string | null;
  status_operation: string | null;
  timeout_ms: string | null;
  retired_at_ms: string | null;
  expires_at_ms: string;
}

export interface InstanceRow {
  id: string;
  actor_type: string;
  actor_key: string;
  state: unknown;
  revision: string;
  wake_at_ms: string | null;
}

export interface MailboxRow {
  id: string;
  instance_id: string;
  message_key: string;
  payload: unknown;
  /** Failed deliveries so far (0 on the first delivery). */
  attempts?: number;
}

/** Runtime settings; every field has a production default (see `effectConfig`). */
export interface EffectRuntimeConfig {
  /** Runtime liveness floor: an owner silent this long is stale (per-effect overrides only lengthen it). */
  staleAfterMs: number;
  /** At most this many stale candidates per automatic recovery pass. */
  claimScanLimit: number;
  /** How long a recovery binding (and so a check) stays answerable. */
  bindingRetentionMs: number;
  /** Delivered mailbox messages (and their idempotency keys) are kept this long. */
  mailboxRetentionMs: number;
  /** Terminal effects are pruned after this long; bindings survive them. */
  effectRetentionMs: number;
  /** Stopped or silent processes that own nothing are pruned after this long. */
  processPruneAfterMs: number;
  /**
   * Failed deliveries (the handler threw, or its commit failed) a mailbox message gets before
   * it is marked dead and the mailbox moves on. Optional for compatibility; default 5.
   */
  mailboxMaxAttempts?: number;
  /** Resolved explicit checks are kept this long. Optional for compatibility; default 1 day. */
  checkRetentionMs?: number;
  /**
   * Effect kinds idempotent by key (EffectExecutor.idempotentByKey): a claim of one by a
   * superseded process (an ActorHost's previous incarnation) is recovered at once. Default none.
   */
  takeoverKinds?: readonly string[];
}

export const DEFAULT_EFFECT_CONFIG: EffectRuntimeConfig = {
  staleAfterMs: 30_000,
  claimScanLimit: 100,
  bindingRetentionMs: 7 * 86_400_000,
  mailboxRetentionMs: 86_400_000,
  effectRetentionMs: 86_400_000,
  processPruneAfterMs: 86_400_000,
  mailboxMaxAttempts: 5,
  checkRetentionMs: 86_400_000,
};

/**
 * Budget of an actor's fenced commit (runner.ts): every statement of it, the engine's flush
 * writes included, ends within this. The typing ledger's Add path waits this long for a row
 * lock its own flush holds (typing-ledger/types.ts RECORD_BUDGET_MS).
 */
export const ACTOR_COMMIT_BUDGET_MS = 5000;

/** Default for `mailboxMaxAttempts`: a poison message is dead after this many failed deliveries. */
export const DEFAULT_MAILBOX_MAX_ATTEMPTS = 5;

export function effectConfig(overrides: Partial<EffectRuntimeConfig> = {}): EffectRuntimeConfig {
  return { ...DEFAULT_EFFECT_CONFIG, ...overrides };
}

/** Mailbox keys the runtime writes; applications are refused any key with this prefix. */
export const RESERVED_KEY_PREFIX = 'effect:';
export const recoveryKey = (effectId: string) => `effect:${effectId}:recovery`;
export const checkKey = (effectId: string, requestId: string) => `effect:${effectId}:check:${requestId}`;
export const failedKey = (effectId: string) => `effect:${effectId}:failed`;
export const completedKey = (effectId: string) => `effect:${effectId}:completed`;
