import type { Pool, PoolClient } from '@neondatabase/serverless';
import { Deadline } from '../clock';
import { oneShots } from '../db/pool';
import { withTx } from '../db/tx';
import { CREDENTIAL_CODES, LarkApiError, provesNothingApplied } from '../lark/errors';
import { log } from '../log';
import { ledgerClient } from './client';
import type { Registration } from './register';
import { deleteExact, type RemoteOutcome } from './remote';
import {
  recordAdded,
  recordAddFailed,
  recordCleaned,
  scheduleRetry,
  scheduleWithdrawal,
  type WithdrawFailure,
} from './store';
import { ADD_BUDGET_MS, type Q, RECORD_BUDGET_MS, REVALIDATE_BUDGET_MS, TYPING_EMOJI } from './types';
import { errorName } from './withdraw';

/** The engine's view of one input: is its turn still running and its conversation active? */
export type InputLiveCheck = (
  q: Pick<PoolClient, 'query'>,
  input: { rowId: string; sessionId: string },
) => Promise<boolean>;

export interface AddOptions {
  fetch?: typeof fetch;
  /** Engine-specific part of the revalidation; the ledger checks its own part regardless. */
  isInputLive?: InputLiveCheck;
  addBudgetMs?: number;
  revalidateBudgetMs?: number;
  /** Budget of each ledger write of the Add path (RECORD_BUDGET_MS). */
  recordBudgetMs?: number;
}

export type AddOutcome =
  | 'added'
  | 'withdrawn_after_add'
  | 'uncertain'
  | 'not_added'
  | 'skipped'
  | 'record_failed';

/**
 * The cosmetic Add, after the webhook answered (waitUntil), for a COMMITTED registration.
 * Sends `Typing` once (two-second budget, not at all while a recorded 429 reset holds the
 * route), records the result monotonically, then revalidates the exact input on its own
 * budget; if the input has ended or the check fails, the badge is withdrawn at once by its
 * reaction id. Lark and database failures are recorded or logged here and never thrown;
 * anything else (a bug) is recorded as `uncertain`, so the sweeps resolve the badge, and then
 * thrown for the caller to log as an error.
 *
 * - An Add Lark definitely refused (lark/errors.ts `provesNothingApplied`) is `not_added`:
 *   the row is closed at once and its quota slot freed. An ambiguous failure is `uncertain`.
 * - An Add whose recording fails (`record_failed`) is withdrawn at once with the credentials
 *   in hand; if that fails too, the reaction id is recorded with a retry for the next pass.
 * - A withdrawal after the Add that fails is scheduled for the retry pass with backoff (not
 *   before Lark's reset), whether or not the turn has settled.
 */
export async function addTypingBadge(
  pool: Pool,
  reg: Registration,
  opts: AddOptions = {},
): Promise<AddOutcome> {
  if (reg.kind !== 'registered') return 'skipped';
  const inst = reg.installation;
  // Every write of this path is bounded: a locked row or a slow database fails it fast.
  const recordBudgetMs = opts.recordBudgetMs ?? RECORD_BUDGET_MS;
  const add: AddRun = {
    pool,
    reg,
    recordBudgetMs,
    client: ledgerClient(
      pool,
      { baseUrl: inst.apiBase, appId: inst.appId, appSecret: inst.appSecret },
      opts.fetch,
    ),
    // Every write here is ONE statement (recordAdded, recordCleaned, scheduleRetry,
    // scheduleWithdrawal): a one-shot under the record budget, one round trip where a
    // transaction took three (begin, statement, commit) on the webhook's connection.
    write: (fn) => fn(oneShots(pool, { statementMs: recordBudgetMs, lockMs: recordBudgetMs })),
  };
  const sent = await sendAdd(add, opts);
  if ('outcome' in sent) return sent.outcome;
  const { reactionId } = sent;
  let rec: Awaited<ReturnType<typeof recordAdded>>;
  try {
    rec = await add.write((tx) => recordAdded(tx, reg.id, reactionId));
  } catch (err) {
    log.warn('typing_add_record_failed', { rowId: reg.id, stage: 'added', error: err });
    await withdrawUnrecorded(add, reactionId);
    return 'record_failed';
  }
  const ended = !rec || rec.ended || !(await stillLive(pool, reg, opts));
  if (!ended) return 'added';
  await withdrawEnded(add, reactionId, rec);
  return 'withdrawn_after_add';
}

/** One Add's shared parts: its row, its client (the credentials in hand), its bounded writes. */
interface AddRun {
  pool: Pool;
  reg: Extract<Registration, { kind: 'registered' }>;
  recordBudgetMs: number;
  client: ReturnType<typeof ledgerClient>;
  /** Runs `fn`'s ONE statement under the record budget (each query is its own transaction). */
  write: <T>(fn: (q: Q) => Promise<T>) => Promise<T>;
}

/**
 * Sends `Typing` within its budget: the new reaction's id, or the outcome of a failed Add
 * (recorded, and warned; anything but a Lark error is thrown after it is recorded).
 */
async function sendAdd(
  add: AddRun,
  opts: AddOptions,
): Promise<{ reactionId: string } | { outcome: 'not_added' | 'uncertain' }> {
  const { reg } = add;
  try {
    const r = await add.client.createReaction(reg.messageId, TYPING_EMOJI, {
      deadline: new Deadline(opts.addBudgetMs ?? ADD_BUDGET_MS),
    });
    return { reactionId: r.reaction_id };
  } catch (err) {
    const e = err instanceof LarkApiError ? err : undefined;
    const refused = e !== undefined && provesNothingApplied(e);
    const state = refused ? 'not_added' : 'uncertain';
    const why = refused ? (e.notSent ? 'not_sent' : 'refused') : 'uncertain';
    await recordFailure(
      add.pool,
      reg.id,
      state,
      `${why}:${e?.code || e?.httpStatus || 0}`,
      add.recordBudgetMs,
    );
    if (!e) throw err;
    log.warn('typing_add_failed', {
      rowId: reg.id,
      kind: e.kind,
      code: e.code,
      httpStatus: e.httpStatus,
      notSent: e.notSent,
      outcome: state,
    });
    return { outcome: state };
  }
}

/**
 * The badge exists but its id is not recorded. Nothing would resolve it soon: the row is
 * pending with no next attempt, so the retry pass does not claim it until its turn settles or
 * its two-minute taskless expiry, and even then an empty sweep cannot acknowledge a pending
 * Add. So it is withdrawn now, with the credentials in hand.
 */
async function withdrawUnrecorded(add: AddRun, reactionId: string): Promise<void> {
  const { reg } = add;
  const gone = await withdrawNow(add.client, reg, reactionId);
  if (gone.kind === 'gone')
    await add
      .write((tx) => recordCleaned(tx, reg.id))
      .catch((dbErr: unknown) =>
        // Still unrecorded: the row waits for its settlement or taskless expiry and then
        // its seven-day deadline (an empty sweep never acknowledges a pending Add); the
        // badge itself is gone.
        log.warn('typing_add_record_failed', { rowId: reg.id, stage: 'cleaned', error: dbErr }),
      );
  else
    await add
      .write((tx) => scheduleWithdrawal(tx, reg.id, reactionId, failureOf(gone)))
      .catch((dbErr: unknown) => log.warn('typing_retry_schedule_failed', { rowId: reg.id, error: dbErr }));
}

/** The input ended (or its check failed): withdraw at once (the row's snapshot may be erased). */
async function withdrawEnded(
  add: AddRun,
  reactionId: string,
  rec: Awaited<ReturnType<typeof recordAdded>>,
): Promise<void> {
  const { reg } = add;
  const gone = await withdrawNow(add.client, reg, reactionId);
  if (gone.kind === 'gone' && rec && !rec.terminal)
    // If this write fails the row stays uncleaned: once due (settled rows already are,
    // others at settlement or taskless expiry) the retry pass finds the reaction gone.
    await add
      .write((tx) => recordCleaned(tx, reg.id))
      .catch((err: unknown) =>
        log.warn('typing_add_record_failed', { rowId: reg.id, stage: 'cleaned', error: err }),
      );
  // A terminal row has no snapshot and no retries left; a live one is due for the retry
  // pass now, settled or not, not before Lark's reset.
  if (gone.kind !== 'gone' && rec && !rec.terminal)
    await add
      .write((tx) => scheduleRetry(tx, reg.id, failureOf(gone)))
      .catch((err: unknown) => log.warn('typing_retry_schedule_failed', { rowId: reg.id, error: err }));
}

/**
 * Records a failed Add, retried (at most three attempts) within twice the record budget
 * (issue 28 hole 6). Nothing else
 * ever learns what this Add's answer was: a refused Add left `pending` keeps its quota slot
 * and is swept `unconfirmed` until the seven-day expiry (an empty sweep never acknowledges a
 * pending Add), so under a database brownout refused Adds would fill the 1,000-slot quota.
 * Each failed attempt is logged once (`typing_add_record_failed` with its attempt); after the
 * last, the row is left to its settlement, taskless expiry and seven-day deadline.
 */
async function recordFailure(
  pool: Pool,
  rowId: string,
  state: 'uncertain' | 'not_added',
  why: string,
  budgetMs: number,
): Promise<void> {
  const total = new Deadline(budgetMs * RECORD_FAILURE_BUDGETS);
  for (let attempt = 1; ; attempt++) {
    try {
      await withTx(pool, { budgetMs: Math.min(budgetMs, total.remaining()), maxAttempts: 1 }, (tx) =>
        recordAddFailed(tx, rowId, state, why),
      );
      return;
    } catch (dbErr) {
      log.warn('typing_add_record_failed', { rowId, stage: state, attempt, error: dbErr });
      if (attempt >= RECORD_FAILURE_ATTEMPTS || total.remaining() < MIN_RECORD_ATTEMPT_MS) return;
    }
  }
}

/** The failed-Add record gets this many record budgets in all (its retries included). */
const RECORD_FAILURE_BUDGETS = 2;
/** At most this many attempts (a database that refuses at once must not be hammered). */
const RECORD_FAILURE_ATTEMPTS = 3;
/** A retry needs at least this much of the budget left to be worth sending. */
const MIN_RECORD_ATTEMPT_MS = 50;

type NowOutcome = RemoteOutcome | { kind: 'error'; code: 0; error: string };

/**
 * The immediate withdrawal of a badge this Add just placed. A failure that is not Lark's (the
 * rate-limit gate's read failed, a bug) is logged as an error and handled like a failed
 * withdrawal: the row is left for the retry pass.
 */
async function withdrawNow(
  client: ReturnType<typeof ledgerClient>,
  reg: Extract<Registration, { kind: 'registered' }>,
  reactionId: string,
): Promise<NowOutcome> {
  let gone: NowOutcome;
  try {
    gone = await deleteExact(client, reg.messageId, reactionId, new Deadline(ADD_BUDGET_MS));
  } catch (err) {
    log.error('typing_withdraw_error', { rowId: reg.id, stage: 'add', error: err });
    return { kind: 'error', code: 0, error: errorName(err) };
  }
  if (gone.kind !== 'gone')
    log.warn('typing_withdraw_failed', {
      rowId: reg.id,
      outcome: gone.kind,
      code: 'code' in gone ? gone.code : 0,
      stage: 'add',
    });
  return gone;
}

/** The failed withdrawal as the row records it for the retry pass. */
const failureOf = (o: NowOutcome): WithdrawFailure => ({
  delayMs: waitOf(o),
  error: withdrawError(o),
  credentialsRefused: refusedOf(o),
});

/** Not before Lark's reset; 0 leaves the first-retry delay (scheduleRetry's minimum). */
const waitOf = (o: NowOutcome) =>
  o.kind === 'retryable' && o.retryAfterSeconds ? o.retryAfterSeconds * 1000 : 0;

/** Lark refused the credentials themselves (the rotation's classification, migration 0120). */
const refusedOf = (o: NowOutcome) =>
  'code' in o && o.kind !== 'error' ? CREDENTIAL_CODES.has(o.code) : undefined;

const withdrawError = (o: NowOutcome) =>
  o.kind === 'error' ? `withdraw:error:${o.error}` : `withdraw:${o.kind}:${'code' in o ? o.code : 0}`;

/**
 * Revalidation of the exact input on its own budget: not settled, the installation still
 * present with the same App ID, and the engine's check (turn not terminal, conversation
 * active). A failing check counts as "ended": a stray badge is worse than a missing one.
 */
async function stillLive(pool: Pool, reg: Extract<Registration, { kind: 'registered' }>, opts: AddOptions) {
  // Two reads, each its own one-shot, both within the one budget: under read committed a
  // transaction around them gave no common snapshot (each statement takes its own) and cost
  // two more round trips (begin, commit). Neither read locks anything.
  const deadline = new Deadline(opts.revalidateBudgetMs ?? REVALIDATE_BUDGET_MS);
  const q = oneShots(pool, () => ({ statementMs: deadline.remaining(), lockMs: deadline.remaining() }));
  try {
    const { rows } = await q.query<{ live: boolean; session_id: string }>(
      `select r.session_id,
       (r.settled_at is null and r.cleaned_at is null and r.abandoned_at is null
        and exists (select 1 from lark_installations i where i.id = r.installation_id and i.app_id = r.app_id)) as live
     from channel_typing_reaction r where r.id = $1`,
      [reg.id],
    );
    const row = rows[0];
    if (!row?.live) return false;
    return opts.isInputLive ? await opts.isInputLive(q, { rowId: reg.id, sessionId: row.session_id }) : true;
  } catch (err) {
    log.warn('typing_revalidation_failed', { rowId: reg.id, error: err });
    return false;
  }
}
