import type { Pool } from '@neondatabase/serverless';
import { z } from 'zod';
import { type Clock, Deadline, systemClock } from '../clock';
import { withTx } from '../db/tx';
import { AppError } from '../errors';
import { withTimeout } from '../lib/timeout';
import { log } from '../log';
import { decideRecovery, type RecoveryOutcome } from './recovery-decide';
import type { EffectHandle, EffectRuntimeConfig, Queryable } from './types';

/** Wakes the origin's ActorHost after a commit; failures are logged, polling still delivers. */
export type WakeFn = (instanceId: string) => Promise<unknown>;

const TX_BUDGET_MS = 5000;
/**
 * The longest a pass waits for one wake-up. A wake only schedules the host's pump (the cron's
 * wake is `ActorHost.schedule`, one storage write), so this is generous; a host that does not
 * answer in it is logged, and mailbox polling delivers its work at the next minute.
 */
export const WAKE_BUDGET_MS = 2000;

/**
 * Wakes after the pass's commits, at most once per instance per pass: `after()` only notes the
 * instance, and `settle()`, once every decision of the pass has committed, starts the wakes and
 * waits for them, each bounded by WAKE_BUDGET_MS and the pass's own deadline. Waking at the
 * first commit instead could run a host's pump between two retirements of its effects and leave
 * the second recovery message to the next minute's poll. A decision never waits for a host; a
 * failure (or a wake past its bound) is logged once as `effect_wake_failed` and changes nothing
 * committed.
 */
class Wakes {
  private readonly noted = new Set<string>();
  constructor(
    private readonly wake: WakeFn | undefined,
    private readonly deadline: Deadline,
  ) {}

  after(instanceId: string): void {
    if (this.wake) this.noted.add(instanceId);
  }

  settle(): Promise<unknown> {
    const wake = this.wake;
    if (!wake) return Promise.resolve();
    const started = [...this.noted].map((instanceId) => {
      const ms = Math.max(1, this.deadline.slice(WAKE_BUDGET_MS));
      return withTimeout(
        Promise.resolve().then(() => wake(instanceId)),
        ms,
        () => new Error(`wake-up did not answer within ${ms} ms`),
      ).then(
        () => undefined,
        (err: unknown) => log.warn('effect_wake_failed', { instanceId, error: err }),
      );
    });
    this.noted.clear();
    return Promise.all(started);
  }
}

/**
 * $1 = runtime threshold (ms), $2 = scan limit, $3 = the kinds a superseded owner loses at once
 * (`takeoverKinds`). Exported so tests can EXPLAIN the exact text.
 */
export const STALE_CANDIDATES_SQL = `select e.id, e.origin_instance_id
       from effects e
       left join effect_processes p on p.id = e.locked_by
       left join effect_recoveries r on r.effect_id = e.id
      where e.status = 'processing'
        and (p.id is null
             or p.heartbeat_at_ms < (select app_now_ms()) - greatest($1::bigint, coalesce(r.timeout_ms, 0))
             or (p.superseded_at_ms is not null and e.kind = any($3::text[])))
      order by e.id
      limit $2`;

/**
 * Candidates for automatic recovery: processing effects whose owner is missing or whose
 * heartbeat is older than the effective timeout, by database time. Reads only the partial
 * `effects_processing` index (work in flight), never the table. Unlocked: a hint only,
 * re-decided under locks; fresh owners never appear here, so they are never locked.
 */
export async function staleCandidates(
  q: Queryable,
  config: Pick<EffectRuntimeConfig, 'staleAfterMs' | 'claimScanLimit' | 'takeoverKinds'>,
): Promise<{ id: string; origin_instance_id: string }[]> {
  const { rows } = await q.query<{ id: string; origin_instance_id: string }>(STALE_CANDIDATES_SQL, [
    config.staleAfterMs,
    config.claimScanLimit,
    config.takeoverKinds ?? [],
  ]);
  return rows;
}

/**
 * The same prefilter for one origin instance ($4): what its own actor host recovers when its
 * recovery alarm fires. Reads one instance's processing range (`effects_origin_status`).
 */
export const STALE_CANDIDATES_OF_INSTANCE_SQL = STALE_CANDIDATES_SQL.replace(
  "where e.status = 'processing'",
  "where e.status = 'processing' and e.origin_instance_id = $4",
);

/**
 * When this instance's oldest claim becomes a recovery candidate, in database ms: the owner's
 * heartbeat plus its effective timeout (the floor or the binding's longer override), or now
 * when the owner is gone. Null when nothing of the instance is in flight under an owner
 * other than `excludeOwner`. The actor host arms its alarm here, so a claim whose process
 * died is recovered at the staleness floor, not at the next minute cron; a claim of a kind in
 * $3 held by a superseded process (the host's previous incarnation) is due now.
 */
export const RECOVERY_DUE_SQL = `select min(case when p.superseded_at_ms is not null and e.kind = any($3::text[])
                             then (select app_now_ms())
                             else coalesce(p.heartbeat_at_ms + greatest($2::bigint, coalesce(r.timeout_ms, 0)),
                                           (select app_now_ms())) end) as due
       from effects e
       left join effect_processes p on p.id = e.locked_by
       left join effect_recoveries r on r.effect_id = e.id
      where e.status = 'processing' and e.origin_instance_id = $1`;

export interface RecoveryPassReport {
  candidates: number;
  retired: number;
  requeued: number;
  deferred: number;
  errors: number;
  checks: number;
}

/**
 * One automatic pass: at most `claimScanLimit` candidates, each decided in its own
 * transaction, within `budgetMs`. Then open explicit checks, a bounded batch.
 */
export async function runRecoveryPass(
  pool: Pool,
  config: EffectRuntimeConfig,
  opts: {
    budgetMs?: number;
    wake?: WakeFn;
    clock?: Clock;
    /**
     * Only this origin instance's candidates, and no explicit-check scan: the instance's
     * own host runs its checks itself (processRecoveryChecks) right after.
     */
    instanceId?: string;
  } = {},
): Promise<RecoveryPassReport> {
  const deadline = new Deadline(opts.budgetMs ?? 20_000, opts.clock ?? systemClock);
  const pass: Pass = {
    pool,
    config,
    deadline,
    wakes: new Wakes(opts.wake, deadline),
    report: { candidates: 0, retired: 0, requeued: 0, deferred: 0, errors: 0, checks: 0 },
  };
  const candidates = await recoveryCandidates(pool, config, opts.instanceId);
  pass.report.candidates = candidates.length;
  for (const c of candidates) {
    if (deadline.expired()) break;
    const out = await decideCandidate(pass, c);
    if (out === 'retired') pass.report.retired++;
    else if (out === 'pending' || out === 'dead') pass.report.requeued++;
    else if (out === 'deferred') pass.report.deferred++;
    // Retired: the recovery message; dead: the failure callback; pending: the host reclaims it.
    if (out === 'retired' || out === 'dead' || out === 'pending') pass.wakes.after(c.origin_instance_id);
  }
  if (!opts.instanceId && !deadline.expired()) await answerOpenChecks(pass);
  // Every wake was bounded when it started (its budget, the pass's deadline): this ends in time.
  await pass.wakes.settle();
  return pass.report;
}

/** What one recovery pass shares between its steps. */
interface Pass {
  pool: Pool;
  config: EffectRuntimeConfig;
  deadline: Deadline;
  wakes: Wakes;
  report: RecoveryPassReport;
}

/** The pass's candidates: every stale claim, or one origin instance's. */
async function recoveryCandidates(
  pool: Pool,
  config: EffectRuntimeConfig,
  instanceId: string | undefined,
): Promise<{ id: string; origin_instance_id: string }[]> {
  if (!instanceId) return staleCandidates(pool, config);
  const { rows } = await pool.query<{ id: string; origin_instance_id: string }>(
    STALE_CANDIDATES_OF_INSTANCE_SQL,
    [config.staleAfterMs, config.claimScanLimit, config.takeoverKinds ?? [], instanceId],
  );
  return rows;
}

/**
 * One candidate decided under locks in its own transaction: its outcome, or undefined when
 * the decision failed (counted and logged).
 */
async function decideCandidate(
  pass: Pass,
  c: { id: string; origin_instance_id: string },
): Promise<RecoveryOutcome['outcome'] | undefined> {
  try {
    const decided = await withTx(pass.pool, { budgetMs: pass.deadline.slice(TX_BUDGET_MS) }, (tx) =>
      decideRecovery(tx, c.origin_instance_id, [c.id], [], pass.config),
    );
    return decided.outcomes.get(c.id)?.outcome;
  } catch (err) {
    // A query error is an error, never a verdict of "stale".
    pass.report.errors++;
    log.error('effect_recovery_failed', { effectId: c.id, error: err });
    return undefined;
  }
}

/** Open explicit checks, one bounded batch per origin instance, while the deadline lasts. */
async function answerOpenChecks(pass: Pass): Promise<void> {
  const { pool, config, deadline, report } = pass;
  const { rows } = await pool.query<{ origin_instance_id: string }>(
    `select distinct origin_instance_id from effect_recovery_checks where outcome is null limit $1`,
    [config.claimScanLimit],
  );
  for (const r of rows) {
    if (deadline.expired()) break;
    try {
      const batch = await checkBatch(pool, r.origin_instance_id, config, {
        budgetMs: deadline.slice(TX_BUDGET_MS),
      });
      report.checks += batch.outcomes.size;
      if (batch.wake) pass.wakes.after(r.origin_instance_id);
    } catch (err) {
      report.errors++;
      log.error('effect_recovery_check_failed', { instanceId: r.origin_instance_id, error: err });
    }
  }
}

const HandleSchema = z.object({
  effectId: z.string().uuid(),
  instanceId: z.string().min(1).max(400),
  kind: z.string().optional(),
});

/**
 * The handle, if it belongs to `callerInstanceId`. Bindings do not authorize cross-actor
 * access (effect-recovery.md): a check on another instance's effect could retire it and
 * write into that instance's mailbox, so it is refused with `forbidden`.
 */
export function ownHandle(callerInstanceId: string, handle: EffectHandle): EffectHandle {
  const h = HandleSchema.parse(handle);
  if (h.instanceId !== callerInstanceId)
    throw new AppError('forbidden', 'an actor can request recovery checks only for its own effects', {
      effectId: h.effectId,
    });
  return handle;
}

/**
 * Stages an explicit recovery check on the caller's transaction connection: one insert,
 * no other transaction, whatever locks the caller holds. The check runs after the caller
 * commits (ActorHost wake, or the minute pass) and its answer arrives in the origin's
 * mailbox as `effect:<id>:check:<requestId>`. The request id is internal.
 * Throws `forbidden` for another instance's handle, and `gone` when the effect has no live
 * binding on this instance (never bound, or past its retention).
 */
export async function requestEffectRecovery(
  tx: Queryable,
  callerInstanceId: string,
  handle: EffectHandle,
): Promise<{ requestId: string }> {
  const h = ownHandle(callerInstanceId, handle);
  const { rows } = await tx.query<{ id: string }>(
    `insert into effect_recovery_checks (effect_id, origin_instance_id)
     select r.effect_id, r.origin_instance_id from effect_recoveries r
      where r.effect_id = $1 and r.origin_instance_id = $2 and effect_binding_live(r, (select app_now_ms()))
     returning id`,
    [h.effectId, h.instanceId],
  );
  if (rows.length !== 1)
    throw new AppError(
      'gone',
      'no recovery binding for this effect on this instance (never bound, or past its retention)',
      {
        effectId: h.effectId,
      },
    );
  return { requestId: rows[0]!.id };
}

/**
 * The explicit batch for one origin instance: every open check, in one transaction, all
 * effect and binding locks before any process lock. Returns each request's outcome.
 */
export async function processRecoveryChecks(
  pool: Pool,
  instanceId: string,
  config: EffectRuntimeConfig,
  opts: { wake?: WakeFn; limit?: number; budgetMs?: number } = {},
): Promise<Map<string, RecoveryOutcome>> {
  const budgetMs = opts.budgetMs ?? TX_BUDGET_MS;
  const batch = await checkBatch(pool, instanceId, config, { limit: opts.limit, budgetMs });
  if (batch.wake) {
    const wakes = new Wakes(opts.wake, new Deadline(WAKE_BUDGET_MS));
    wakes.after(instanceId);
    await wakes.settle();
  }
  return batch.outcomes;
}

/** The explicit batch itself; `wake` when it answered or retired anything (wake after commit). */
async function checkBatch(
  pool: Pool,
  instanceId: string,
  config: EffectRuntimeConfig,
  opts: { limit?: number; budgetMs: number },
): Promise<{ outcomes: Map<string, RecoveryOutcome>; wake: boolean }> {
  // Unlocked hint first: most wakes have no open check and need no transaction at all.
  const open = await pool.query(
    'select 1 from effect_recovery_checks where origin_instance_id = $1 and outcome is null limit 1',
    [instanceId],
  );
  if ((open.rowCount ?? 0) === 0) return { outcomes: new Map(), wake: false };
  let retiredAny = false;
  const outcomes = await withTx(pool, { budgetMs: Math.max(1, opts.budgetMs) }, async (tx) => {
    // The instance lock (taken again, first, inside decideRecovery) serializes batches.
    await tx.query('select id from actor_instances where id = $1 for no key update', [instanceId]);
    const { rows } = await tx.query<{ id: string; effect_id: string }>(
      `select id, effect_id from effect_recovery_checks
        where origin_instance_id = $1 and outcome is null order by id limit $2`,
      [instanceId, opts.limit ?? config.claimScanLimit],
    );
    if (rows.length === 0) return new Map<string, RecoveryOutcome>();
    const checks = rows.map((r) => ({ requestId: r.id, effectId: r.effect_id }));
    const decided = await decideRecovery(
      tx,
      instanceId,
      checks.map((c) => c.effectId),
      checks,
      config,
    );
    await tx.query(
      `update effect_recovery_checks c set outcome = o.outcome, resolved_at_ms = app_now_ms()
         from unnest($1::bigint[], $2::text[]) as o(id, outcome) where c.id = o.id`,
      [[...decided.checkOutcomes.keys()], [...decided.checkOutcomes.values()].map((o) => o.outcome)],
    );
    retiredAny = decided.retired.length > 0;
    return decided.checkOutcomes;
  });
  return { outcomes, wake: outcomes.size > 0 || retiredAny };
}

/** Resolved explicit checks past `retentionMs` (default 1 day), one bounded batch. */
export async function pruneRecoveryChecks(
  q: Queryable,
  batch = 1000,
  retentionMs = 86_400_000,
): Promise<number> {
  const res = await q.query(
    `delete from effect_recovery_checks where id in (
       select id from effect_recovery_checks where outcome is not null
          and resolved_at_ms < (select app_now_ms()) - $2::bigint limit $1)`,
    [batch, retentionMs],
  );
  return res.rowCount ?? 0;
}

/**
 * Bindings past their lifetime, one bounded batch; returns how many. A binding lives while its
 * effect is pending or processing, and one lifetime past the later of emit and the effect's
 * end (`effect_binding_live`, migrations/0010_baseline_effects.sql); the expiry index narrows the candidates.
 * `locked` takes the picked bindings in effect-ID order, the order a check batch locks them
 * in (effect-recovery.md), and re-reads liveness on the row version it locked.
 */
export async function pruneExpiredBindings(q: Queryable, batch = 1000): Promise<number> {
  const res = await q.query(
    `with picked as (
       select r.effect_id from effect_recoveries r
        where r.expires_at_ms < (select app_now_ms())
          and not effect_binding_live(r, (select app_now_ms()))
        limit $1),
     locked as (
       select r.effect_id from effect_recoveries r
        where r.effect_id = any(array(select effect_id from picked))
          and not effect_binding_live(r, (select app_now_ms()))
        order by r.effect_id for update)
     delete from effect_recoveries r using locked where r.effect_id = locked.effect_id`,
    [batch],
  );
  return res.rowCount ?? 0;
}

/**
 * How far an ID's staging time (the emitting Worker's clock, workers/effects/ids.ts) may run
 * ahead of the database clock that stamps `finished_at_ms`. An effect staged that far ahead is
 * pruned later by the difference, never early: the bound only narrows the scan.
 */
export const PRUNE_ID_CLOCK_MARGIN_MS = 60_000;

/**
 * Deletes terminal effects past retention (bindings stay), one bounded batch, $1 retention ms,
 * $2 batch, $3 the clock margin. It reads the primary key in ID order, which is the order every
 * other effect lock uses (effect-recovery.md), and locks as it reads. No index follows
 * `finished_at_ms` (migrations/0260): an effect finishes after it is staged, so one finished
 * before the cutoff has an ID below the cutoff's (UUIDv7: 48 bits of staging milliseconds
 * first, `effects_id_v7`), and the scan stops there. What it reads and keeps are the effects
 * staged before the cutoff that are not done yet (delayed up to a week, or retrying) or
 * finished since: a backlog, not the table. Terminal states are final, so no re-check.
 */
export const PRUNE_EFFECTS_SQL = `with locked as (
       select id from effects
        where id < (select encode(substring(int8send(app_now_ms() - $1::bigint + $3::bigint) from 3)
                                  || '\\x00000000000000000000'::bytea, 'hex')::uuid)
          and status in ('completed', 'dead') and finished_at_ms < (select app_now_ms()) - $1::bigint
        order by id limit $2 for update)
     delete from effects where id = any(array(select id from locked))`;

export async function pruneEffects(q: Queryable, retentionMs: number, batch = 1000): Promise<number> {
  const res = await q.query(PRUNE_EFFECTS_SQL, [retentionMs, batch, PRUNE_ID_CLOCK_MARGIN_MS]);
  return res.rowCount ?? 0;
}
