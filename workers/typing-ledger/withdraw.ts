import type { Pool } from '@neondatabase/serverless';
import { Deadline } from '../clock';
import type { KeyRing } from '../crypto/sealed';
import { CREDENTIAL_CODES } from '../lark/errors';
import { log } from '../log';
import { withRowCredentials } from './credentials';
import { deleteExact, deleteFound, findOurTyping, type RemoteOutcome, sweepOurTyping } from './remote';
import { abandonExpired, adoptReaction, loadTargets, recordCleaned, scheduleRetry } from './store';
import { type Q, WITHDRAW_BUDGET_MS, type WithdrawTarget } from './types';

/**
 * - cleaned: a badge of ours was deleted now (row cleaned, snapshot erased).
 * - already_gone: Lark says the reaction/message is gone (row cleaned, snapshot erased).
 * - adopted: an unsettled row's unknown reaction id was found by a sweep and recorded.
 * - unconfirmed: the sweep found nothing of ours but the Add is unfinished (pending or
 *   uncertain) and the retention deadline has not passed: nothing acknowledged, retry later.
 * - retryable: try later, not before `retryAfterSeconds` (x-ogw-ratelimit-reset) when given.
 * - permanent: this request cannot succeed (revoked app, snapshot gone or unopenable).
 * - expired: the row's seven-day deadline had passed: no remote call, the row is abandoned
 *   (the spec's failed terminal), exactly as the expiry pass would have written it.
 */
export type WithdrawResult =
  | { outcome: 'cleaned' | 'already_gone' | 'adopted' | 'unconfirmed' | 'expired' }
  | { outcome: 'retryable'; code: number; retryAfterSeconds?: number }
  | { outcome: 'permanent'; code: number };

export interface WithdrawOptions {
  /** The budget of this row's remote work (the maintenance pass gives each row 2 s). */
  deadline: Deadline;
  /**
   * `withdraw` (default for settled rows): the badge must go. `resolve` (default for
   * unsettled rows): only learn an unknown reaction id, leaving the badge on a live turn.
   */
  mode?: 'withdraw' | 'resolve';
  fetch?: typeof fetch;
}

/**
 * Withdraws one row's badge with the row's own credential snapshot (or, once Lark refuses
 * its secret, the installation's current credentials for the same app). Makes no database lock
 * across the remote calls; writes back only confirmed outcomes (cleanup or adoption). Retry
 * bookkeeping stays with the caller (the maintenance retry pass advances it at claim time).
 */
export async function withdrawRow(
  q: Q,
  keys: KeyRing,
  row: WithdrawTarget,
  opts: WithdrawOptions,
): Promise<WithdrawResult> {
  // Spec: no remote retry after the seven-day deadline, and an empty sweep never acknowledges
  // an unfinished Add: past the deadline the outcome is `abandoned`, never `cleaned`.
  if (row.past_retention) {
    await abandonExpired(q, row.id);
    return { outcome: 'expired' };
  }
  const result = await remoteWithdraw(q, keys, row, opts);
  if (result.kind === 'adopted') return { outcome: 'adopted' } satisfies WithdrawResult;
  if (result.kind === 'gone') {
    await recordCleaned(q, row.id);
    return {
      outcome: result.kind === 'gone' && result.deleted > 0 ? 'cleaned' : 'already_gone',
    } as WithdrawResult;
  }
  if (result.kind === 'not_found' || result.kind === 'found')
    return { outcome: 'unconfirmed' } as WithdrawResult;
  if (result.kind === 'retryable')
    return {
      outcome: 'retryable',
      code: result.code,
      retryAfterSeconds: result.retryAfterSeconds,
    } as WithdrawResult;
  return { outcome: 'permanent', code: result.code } as WithdrawResult;
}

async function remoteWithdraw(
  q: Q,
  keys: KeyRing,
  row: WithdrawTarget,
  opts: WithdrawOptions,
): Promise<RemoteOutcome | { kind: 'adopted' }> {
  // The snapshot first; the installation's current credentials (same App ID) when Lark
  // refuses the snapshot's secret after a rotation (credentials.ts).
  return withRowCredentials(q, keys, row, opts.fetch, async (client) => {
    if (row.reaction_id) return deleteExact(client, row.source_message_id, row.reaction_id, opts.deadline);
    const mode = opts.mode ?? (row.settled_at ? 'withdraw' : 'resolve');
    if (mode === 'withdraw') return sweepOurTyping(client, row.source_message_id, row.app_id, opts.deadline);
    const found = await findOurTyping(client, row.source_message_id, row.app_id, opts.deadline);
    if (found.kind !== 'found') return found;
    // The mode was chosen from the row as claimed; the turn may have settled since (issue 28
    // hole 1). Only a row still unsettled is adopted; a settled one is withdrawn now.
    const adopted = await adoptReaction(q, row.id, found.reactionIds[0]!);
    if (adopted === 'adopted') return { kind: 'adopted' as const };
    // 'none': an Add recorded its own id meanwhile (or the row ended): nothing confirmed.
    if (adopted === 'none') return found;
    return deleteFound(client, row.source_message_id, found.reactionIds, opts.deadline);
  });
}

/** How many rows of one settlement are withdrawn at once after commit. */
const WITHDRAW_CONCURRENCY = 8;

/**
 * What `withdrawAfterCommit` did with one row: a `WithdrawResult` outcome, or
 * - left_to_add: an Add still in flight (pending, under a minute old) owns the row;
 * - rate_limited: Lark's 429 reset (just answered, or recorded by any isolate) holds the
 *   route; nothing more was sent and the row is scheduled for the retry pass at the reset,
 *   so re-running this before then cannot help (the turn-settled effect does not retry it);
 * - error: a failure that is not Lark's (our database, a bug).
 */
export type AfterCommitOutcome = WithdrawResult['outcome'] | 'left_to_add' | 'rate_limited' | 'error';

/**
 * After the terminal transaction COMMITS: withdraws the badges of the rows it settled. An Add
 * still in flight (pending, under a minute old) is left to the Add itself, which sees the
 * settlement when it records its result. Failures are scheduled for the retry pass (at
 * Lark's reset when it gave one); `error` is logged as `typing_withdraw_error`.
 */
export async function withdrawAfterCommit(
  pool: Pool,
  keys: KeyRing,
  ids: string[],
  opts: { fetch?: typeof fetch; budgetMs?: number } = {},
): Promise<Record<string, AfterCommitOutcome>> {
  const targets = await loadTargets(pool, ids);
  const out: Record<string, AfterCommitOutcome> = {};
  const queue = [...targets];
  const worker = async () => {
    for (let row = queue.shift(); row; row = queue.shift()) {
      if (row.young_pending) {
        out[row.id] = 'left_to_add';
        continue;
      }
      const deadline = new Deadline(opts.budgetMs ?? WITHDRAW_BUDGET_MS);
      let r: WithdrawResult;
      try {
        r = await withdrawRow(pool, keys, row, { deadline, mode: 'withdraw', fetch: opts.fetch });
      } catch (err) {
        // Not a Lark answer: never counted as a Lark failure. The row is already due for the
        // retry pass (settlement made it so); the rest of the settlement goes on.
        out[row.id] = 'error';
        log.error('typing_withdraw_error', { rowId: row.id, stage: 'after_commit', error: err });
        await retryLater(pool, row.id, 0, `withdraw:error:${errorName(err)}`);
        continue;
      }
      out[row.id] = r.outcome;
      if (r.outcome === 'retryable' || r.outcome === 'permanent' || r.outcome === 'unconfirmed') {
        const code = 'code' in r ? r.code : 0;
        log.warn('typing_withdraw_failed', { rowId: row.id, outcome: r.outcome, code });
        const wait = 'retryAfterSeconds' in r && r.retryAfterSeconds ? r.retryAfterSeconds * 1000 : 0;
        if (wait > 0) out[row.id] = 'rate_limited';
        await retryLater(pool, row.id, wait, `withdraw:${r.outcome}:${code}`, CREDENTIAL_CODES.has(code));
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(WITHDRAW_CONCURRENCY, targets.length) }, worker));
  return out;
}

/**
 * Pushes the row's next attempt back and records why. Its failure only means the retry pass
 * may try the row sooner (settlement already made it due), so it is logged, not thrown.
 */
async function retryLater(
  pool: Pool,
  rowId: string,
  waitMs: number,
  why: string,
  credentialsRefused?: boolean,
): Promise<void> {
  await scheduleRetry(pool, rowId, { delayMs: waitMs, error: why, credentialsRefused }).catch(
    (err: unknown) => log.warn('typing_retry_schedule_failed', { rowId, error: err }),
  );
}

/** The class of a thrown value, for `last_error` (never its message: it may carry data). */
export function errorName(err: unknown): string {
  return err instanceof Error ? err.name : typeof err;
}

/**
 * The rows THIS turn settled that still owe a withdrawal (for the after-commit effect, which
 * knows the turn, not the ids). Bounded to the turn's own inputs by `settled_by = turn:<n>`
 * (what `settleTurnInputs` wrote for exactly these rows): an earlier turn's row that stays
 * open (an uncertain Add that never landed) belongs to the retry pass and its backoff, and a
 * later turn never lists it again (issue 28 hole 2).
 */
export async function settledRowIds(
  q: Q,
  cut: {
    sessionId: string;
    contextRevision: number | bigint;
    cutoffPosition: number | bigint;
    turnNo: number;
    /** What the settlement wrote when it was not a turn's (`backlog:<cutoff>`, a dropped backlog). */
    settledBy?: string;
  },
): Promise<string[]> {
  const { rows } = await q.query<{ id: string }>(
    `select id from channel_typing_reaction
     where session_id = $1 and context_revision = $2 and input_position <= $3 and settled_by = $4
       and settled_at is not null and cleaned_at is null and abandoned_at is null
     order by input_position limit 1000`,
    [
      cut.sessionId,
      String(cut.contextRevision),
      String(cut.cutoffPosition),
      cut.settledBy ?? `turn:${cut.turnNo}`,
    ],
  );
  return rows.map((r) => r.id);
}
