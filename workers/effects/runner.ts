import type { Pool, PoolClient } from '@neondatabase/serverless';
import { withTx } from '../db/tx';
import { AppError } from '../errors';
import { refuseNewerShape } from '../lib/shape-version';
import { withTimeout } from '../lib/timeout';
import { log } from '../log';
import { commitActor } from './commit';
import { EffectStage } from './emit';
import { nextDelivery, recordFailedDelivery } from './mailbox';
import { ownHandle, requestEffectRecovery } from './recovery';
import type { ActorEvent, ActorType, EffectRegistry } from './registry';
import { claimEffects, completeEffects, failEffects } from './scheduler';
import {
  ACTOR_COMMIT_BUDGET_MS,
  DEFAULT_MAILBOX_MAX_ATTEMPTS,
  type EffectHandle,
  type EffectRow,
  type EffectRuntimeConfig,
  type InstanceRow,
  type MailboxRow,
} from './types';

export interface DrainStepResult {
  handled: boolean;
  event?: ActorEvent;
  effects: EffectHandle[];
  checkRequestIds: string[];
  /** The message's handler (or commit) failed for the last allowed time: it is now dead. */
  deadLettered?: boolean;
}

const MAX_FENCE_RETRIES = 3;
/** An executor's run budget when it names none (`EffectExecutor.timeoutMs`). */
export const DEFAULT_EXECUTOR_TIMEOUT_MS = 30_000;

/** An executor run that outlived its timeout (whether or not it honoured its signal). */
export class EffectRunTimedOut extends Error {
  override readonly name = 'EffectRunTimedOut';
}

/**
 * Delivers one event (the oldest available message, else a due timer) to the instance's
 * handler and persists the outcome with one fenced commit. A concurrent commit moves the
 * revision: the step re-reads and runs the handler again, writing nothing for the loser.
 * A message whose handler throws (or whose commit fails) counts a failed delivery and the
 * error is rethrown: the message stays first in line and the host retries it later. After
 * `mailboxMaxAttempts` failures it is dead instead: logged, never redelivered, and the step
 * reports it handled so the drain moves on to the next message.
 */
export async function drainStep(
  pool: Pool,
  registry: EffectRegistry,
  instanceId: string,
  config: EffectRuntimeConfig,
): Promise<DrainStepResult> {
  for (let attempt = 1; ; attempt++) {
    // One round trip: the instance, its oldest available message and the database's now.
    const next = await nextDelivery(pool, instanceId);
    if (!next) return { handled: false, effects: [], checkRequestIds: [] };
    const { inst, msg, nowMs } = next;
    const actor = registry.actor(inst.actor_type);
    if (!actor) throw new AppError('internal_error', `no actor type registered for ${inst.actor_type}`);
    const event = nextEvent(msg, inst, nowMs);
    if (!event) return { handled: false, effects: [], checkRequestIds: [] };
    // Written by a newer release than this one reads: refused before the handler sees it (never
    // misread), outside the try below so it is not counted as a failed delivery; the pump fails
    // and retries, and the newer release, serving this object within the rollout, reads it.
    refuseNewerShape(`${inst.actor_type} state`, inst.state, actor.stateVersion ?? 1, { instanceId });
    if (msg) {
      const where = { instanceId, messageId: msg.id };
      refuseNewerShape(`${inst.actor_type} message`, msg.payload, actor.messageVersion ?? 1, where);
      // An effect's result reaches its actor inside the runtime's `:completed` callback
      // ({effectId, result}): the result is a shape the actor reads, under the same version.
      if (COMPLETED_CALLBACK_KEY.test(msg.message_key))
        refuseNewerShape(
          `${inst.actor_type} effect result`,
          (msg.payload as { result?: unknown } | null)?.result,
          actor.messageVersion ?? 1,
          where,
        );
    }
    try {
      const turn = await runHandler(pool, actor, inst, event, nowMs);
      const checkRequestIds = await commitTurn(pool, inst, msg, turn, config);
      return {
        handled: true,
        event,
        effects: turn.stage.staged.map((e) => ({ effectId: e.id, instanceId, kind: e.kind })),
        checkRequestIds,
      };
    } catch (err) {
      if (err instanceof AppError && err.code === 'revision_conflict') {
        // Contention, not the message's fault: never counted as a failed delivery.
        if (attempt < MAX_FENCE_RETRIES) continue;
        throw err;
      }
      // No message to blame (a timer), or refused until older processes are upgraded.
      if (!msg || (err instanceof AppError && err.code === 'precondition_failed')) throw err;
      const dead = await deliveryFailed(pool, instanceId, msg, err, config);
      if (!dead) throw err;
      return { handled: true, event, effects: [], checkRequestIds: [], deadLettered: true };
    }
  }
}

type Instance = InstanceRow;
type PendingMessage = MailboxRow;

/** The oldest available message, else a due timer, else nothing to deliver. */
function nextEvent(msg: PendingMessage | undefined, inst: Instance, nowMs: number): ActorEvent | null {
  if (msg) return { type: 'message', key: msg.message_key, payload: msg.payload, messageId: msg.id };
  if (inst.wake_at_ms !== null && Number(inst.wake_at_ms) <= nowMs)
    return { type: 'timer', atMs: Number(inst.wake_at_ms) };
  return null;
}

/** What a handler run leaves for its commit. */
interface HandledTurn {
  state: unknown;
  stage: EffectStage;
  /** Recovery checks the handler asked for whose binding was live (staged in the commit). */
  checks: EffectHandle[];
  writes: ((tx: PoolClient) => Promise<void>)[];
  wakeAtMs: number | null | undefined;
}

/**
 * Runs the actor's handler for `event`, then answers every recovery check it asked for,
 * awaited or not: a refused one (`gone`) is not staged and is logged once; any other failure
 * fails the turn.
 */
async function runHandler(
  pool: Pool,
  actor: ActorType<unknown>,
  inst: Instance,
  event: ActorEvent,
  nowMs: number,
): Promise<HandledTurn> {
  const instanceId = inst.id;
  const stage = new EffectStage(instanceId);
  const checks: EffectHandle[] = [];
  const checking: { handle: EffectHandle; answer: Promise<void> }[] = [];
  const writes: ((tx: PoolClient) => Promise<void>)[] = [];
  // A timer event consumes the timer unless the handler sets a new one.
  let wakeAtMs: number | null | undefined = event.type === 'timer' ? null : undefined;
  const state = await actor.handle(event, inst.state ?? actor.initialState(), {
    instanceId,
    actorType: inst.actor_type,
    actorKey: inst.actor_key,
    revision: inst.revision,
    nowMs,
    emit: (kind, args, opts) => stage.emit(kind, args, opts),
    setTimer: (at) => {
      wakeAtMs = at;
    },
    // Refused in the handler, where it can catch them: at once for another actor's handle
    // (`forbidden`), and in the answer it may await for a handle with no live binding
    // (`gone`: never bound, or past its lifetime). Never in the commit, where a refusal
    // rolled the whole turn back and counted it as a failed delivery.
    requestRecovery: (h) => {
      const handle = ownHandle(instanceId, h);
      const answer = refuseUnlessBound(pool, instanceId, handle).then(() => {
        checks.push(handle);
      });
      // Handled by design: the drain reads every answer below (a handler may not wait).
      answer.catch(() => undefined);
      checking.push({ handle, answer });
      return answer;
    },
    inCommit: (w) => {
      writes.push(w);
    },
    read: (query) => query(pool),
  });
  for (const c of checking) {
    const refused = await c.answer.then(
      () => null,
      (err: unknown) => err,
    );
    if (refused === null) continue;
    if (!(refused instanceof AppError && refused.code === 'gone')) throw refused;
    log.warn('actor_recovery_check_refused', { instanceId, effectId: c.handle.effectId, code: refused.code });
  }
  return { state, stage, checks, writes, wakeAtMs };
}

/**
 * The turn's one fenced commit: state, staged effects, the delivered message, the timer, the
 * handler's own writes and its recovery checks. Returns the checks' request ids.
 */
async function commitTurn(
  pool: Pool,
  inst: Instance,
  msg: PendingMessage | undefined,
  turn: HandledTurn,
  config: EffectRuntimeConfig,
): Promise<string[]> {
  const instanceId = inst.id;
  return withTx(pool, { budgetMs: ACTOR_COMMIT_BUDGET_MS }, async (tx) => {
    await commitActor(
      tx,
      {
        instanceId,
        expectedRevision: inst.revision,
        state: turn.state,
        effects: turn.stage.staged,
        deliveredMessageIds: msg ? [msg.id] : [],
        wakeAtMs: turn.wakeAtMs,
      },
      config,
    );
    for (const w of turn.writes) await w(tx);
    const ids: string[] = [];
    for (const h of turn.checks) {
      const staged = await requestEffectRecovery(tx, instanceId, h).catch((err: unknown) => {
        // The binding's lifetime ended between the handler's answer and this commit: the
        // turn is re-run like a fence conflict (not a failed delivery), and its handler then
        // sees the refusal itself.
        if (err instanceof AppError && err.code === 'gone')
          throw new AppError('revision_conflict', 'a recovery binding expired before the commit', {
            instanceId,
            effectId: h.effectId,
          });
        throw err;
      });
      ids.push(staged.requestId);
    }
    return ids;
  });
}

/**
 * Throws `gone` unless `handle` has a live binding on this instance (never bound, or past its
 * lifetime: `effect_binding_live`, migrations/0010_baseline_effects.sql). Read-only: the commit stages the check.
 */
async function refuseUnlessBound(pool: Pool, instanceId: string, handle: EffectHandle): Promise<void> {
  const { rows } = await pool.query(
    `select 1 from effect_recoveries r
      where r.effect_id = $1 and r.origin_instance_id = $2 and effect_binding_live(r, (select app_now_ms()))`,
    [handle.effectId, instanceId],
  );
  if (rows.length === 0)
    throw new AppError(
      'gone',
      'no recovery binding for this effect on this instance (never bound, or past its retention)',
      { effectId: handle.effectId },
    );
}

/** `effect:<id>:completed`, the runtime's completion callback (effects_complete). */
const COMPLETED_CALLBACK_KEY = /^effect:[0-9a-f-]{36}:completed$/;

/** `effect:<id>:recovery`, the runtime's retirement callback (types.ts `recoveryKey`). */
const RECOVERY_CALLBACK_KEY = /^effect:([0-9a-f-]{36}):recovery$/;

/** Counts the failed delivery; true when the message is now dead (logged as an error). */
async function deliveryFailed(
  pool: Pool,
  instanceId: string,
  msg: { id: string; message_key: string },
  err: unknown,
  config: EffectRuntimeConfig,
): Promise<boolean> {
  const error =
    err instanceof AppError
      ? `${err.code}: ${err.message}`
      : err instanceof Error
        ? err.message
        : String(err);
  const maxAttempts = config.mailboxMaxAttempts ?? DEFAULT_MAILBOX_MAX_ATTEMPTS;
  let counted: Awaited<ReturnType<typeof recordFailedDelivery>>;
  try {
    counted = await recordFailedDelivery(pool, instanceId, msg.id, error, maxAttempts);
  } catch (recordErr) {
    // The database is likely unreachable: the attempt goes uncounted, the original error stands.
    log.warn('actor_message_attempt_not_recorded', { instanceId, messageId: msg.id, error: recordErr });
    return false;
  }
  if (!counted) return false;
  const fields = {
    instanceId,
    messageKey: msg.message_key,
    messageId: msg.id,
    attempts: counted.attempts,
    error,
  };
  // A dead recovery callback means the actor never learns its effect was retired (no reply,
  // no replacement): its own alert event, one line per incident instead of actor_message_dead.
  // Still an ordinary dead letter otherwise (requeue or discard from the console).
  const recoveryOf = RECOVERY_CALLBACK_KEY.exec(msg.message_key)?.[1];
  if (counted.dead && recoveryOf)
    log.error('actor_recovery_callback_dead', { ...fields, effectId: recoveryOf, maxAttempts });
  else if (counted.dead) log.error('actor_message_dead', { ...fields, maxAttempts });
  else log.warn('actor_message_failed', { ...fields, maxAttempts });
  return counted.dead;
}

/** Drains up to `max` events; returns how many were handled. */
export async function drainInstance(
  pool: Pool,
  registry: EffectRegistry,
  instanceId: string,
  config: EffectRuntimeConfig,
  max = 100,
): Promise<number> {
  let n = 0;
  while (n < max && (await drainStep(pool, registry, instanceId, config)).handled) n++;
  return n;
}

interface BatchCounts {
  claimed: number;
  completed: number;
  failed: number;
  rejected: number;
  lost: number;
}

/**
 * Claims up to `limit` due effects (optionally of one instance) for `processId`, runs them
 * concurrently, and writes results back in two batches (complete, fail), independently: one
 * that fails (a lock timeout is not retried) never costs the other its write. A lost batch is
 * logged once, `effect_write_back_lost` with its effect ids, and counted in `lost`; those
 * effects stay this process's claims, settled by the recovery rules (the caller releases the
 * process: ordinary ones go back to pending, opted-in ones are retired after their grace).
 */
export async function runClaimedEffects(
  pool: Pool,
  registry: EffectRegistry,
  processId: string,
  opts: { limit: number; instanceId?: string; writeBackBudgetMs?: number },
): Promise<BatchCounts> {
  const claimed = await claimEffects(pool, processId, opts);
  const { next, ...counts } = await runEffectBatch(pool, registry, processId, claimed, opts);
  return counts;
}

/**
 * Runs due effects batch after batch until a batch comes back short (the ActorHost's drain of
 * its instance). Each completion claims the next batch in its own statement when the batch was
 * full (`completeEffects`' `claimNext`: one commit per batch instead of two; issue 35).
 * `beforeClaim` runs before every statement that may claim (the host's heartbeat alarm).
 */
export async function runEffectsUntilShort(
  pool: Pool,
  registry: EffectRegistry,
  processId: string,
  opts: { limit: number; instanceId?: string; writeBackBudgetMs?: number; beforeClaim: () => Promise<void> },
): Promise<BatchCounts> {
  const total: BatchCounts = { claimed: 0, completed: 0, failed: 0, rejected: 0, lost: 0 };
  await opts.beforeClaim();
  let claimed = await claimEffects(pool, processId, opts);
  while (claimed.length > 0) {
    const full = claimed.length >= opts.limit;
    if (full) await opts.beforeClaim();
    const r = await runEffectBatch(pool, registry, processId, claimed, { ...opts, claimNext: full });
    for (const k of Object.keys(total) as (keyof BatchCounts)[]) total[k] += r[k];
    if (!full) break;
    // A completion that was lost claimed nothing (its statement rolled back): claim alone.
    claimed = r.next ?? (await claimEffects(pool, processId, opts));
  }
  return total;
}

/**
 * Runs claimed effects and writes both outcomes back. With `claimNext`, the completion's
 * statement claims the next batch (`next`; undefined when that write-back was lost).
 */
async function runEffectBatch(
  pool: Pool,
  registry: EffectRegistry,
  processId: string,
  claimed: EffectRow[],
  opts: { limit: number; instanceId?: string; writeBackBudgetMs?: number; claimNext?: boolean },
): Promise<BatchCounts & { next: EffectRow[] | undefined }> {
  if (claimed.length === 0) return { claimed: 0, completed: 0, failed: 0, rejected: 0, lost: 0, next: [] };
  const { done, failed } = await runExecutors(registry, pool, claimed);
  const budgetMs = opts.writeBackBudgetMs;
  const claimNext = opts.claimNext ? { limit: opts.limit, instanceId: opts.instanceId } : undefined;
  const [c, f] = await Promise.all([
    writeBack('complete', processId, done, () => completeEffects(pool, processId, done, budgetMs, claimNext)),
    writeBack('fail', processId, failed, () => failEffects(pool, processId, failed, budgetMs)),
  ]);
  const dead = f && 'dead' in f ? f.dead : [];
  if (dead.length > 0) log.warn('effects_dead', { processId, count: dead.length });
  return {
    claimed: claimed.length,
    completed: c?.accepted.length ?? 0,
    failed: f?.accepted.length ?? 0,
    rejected: (c?.rejected.length ?? 0) + (f?.rejected.length ?? 0),
    lost: (c ? 0 : done.length) + (f ? 0 : failed.length),
    next: c?.next,
  };
}

/** Each claimed effect's executor, concurrently, each bounded by its timeout. */
async function runExecutors(registry: EffectRegistry, pool: Pool, claimed: EffectRow[]) {
  const done: { id: string; result: unknown }[] = [];
  const failed: { id: string; error: string }[] = [];
  await Promise.all(
    claimed.map(async (e) => {
      const exec = registry.executor(e.kind);
      if (!exec) {
        failed.push({ id: e.id, error: `no executor registered for kind ${e.kind}` });
        return;
      }
      try {
        // Arguments a newer release wrote are never run by code that would misread them.
        refuseNewerShape(`${e.kind} arguments`, e.args, exec.argsVersion ?? 1, { effectId: e.id });
        const timeoutMs = exec.timeoutMs ?? DEFAULT_EXECUTOR_TIMEOUT_MS;
        const signal = AbortSignal.timeout(timeoutMs);
        // Bounded whether or not the executor honours its signal: past its timeout the effect
        // fails as timed out (its ordinary retry), the pump moves on, and whatever the run
        // resolves to later is dropped here: it is never written (the claim is gone).
        const run = Promise.resolve().then(() =>
          exec.run(
            { id: e.id, kind: e.kind, args: e.args, attempts: e.attempts, instanceId: e.origin_instance_id },
            signal,
            { pool },
          ),
        );
        // Handled by design: a late failure of a run already failed as timed out changes nothing.
        run.catch(() => undefined);
        const result = await withTimeout(
          run,
          timeoutMs,
          () => new EffectRunTimedOut(`executor for ${e.kind} timed out after ${timeoutMs} ms`),
        );
        done.push({ id: e.id, result });
      } catch (err) {
        // Recorded on the effect (retried on its backoff, dead after its attempts) and logged
        // once here with its class, so a bug in an executor is visible as one.
        log.warn('effect_attempt_failed', { effectId: e.id, kind: e.kind, attempts: e.attempts, error: err });
        failed.push({ id: e.id, error: err instanceof Error ? err.message : String(err) });
      }
    }),
  );
  return { done, failed };
}

/** One write-back batch; null when it failed, logged once with the ids it could not write. */
async function writeBack<T>(
  op: 'complete' | 'fail',
  processId: string,
  batch: { id: string }[],
  write: () => Promise<T>,
): Promise<T | null> {
  try {
    return await write();
  } catch (err) {
    const effectIds = batch.map((b) => b.id);
    log.error('effect_write_back_lost', {
      op,
      processId,
      effectIds: effectIds.slice(0, 100),
      count: effectIds.length,
      error: err,
    });
    return null;
  }
}
