import type { Pool, PoolClient } from '@neondatabase/serverless';
import { Deadline } from '../clock';
import { withTx } from '../db/tx';
import { LarkClient } from '../lark/client';
import { LarkApiError } from '../lark/errors';
import { log } from '../log';
import type { Registration } from './register';
import { deleteExact } from './remote';
import { recordAdded, recordAddFailed, recordCleaned } from './store';
import { ADD_BUDGET_MS, REVALIDATE_BUDGET_MS, TYPING_EMOJI } from './types';

/** The engine's view of one input: is its turn still running and its conversation active? */
export type InputLiveCheck = (
  tx: PoolClient,
  input: { rowId: string; sessionId: string },
) => Promise<boolean>;

export interface AddOptions {
  fetch?: typeof fetch;
  /** Engine-specific part of the revalidation; the ledger checks its own part regardless. */
  isInputLive?: InputLiveCheck;
  addBudgetMs?: number;
  revalidateBudgetMs?: number;
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
 * Sends `Typing` once (two-second budget), records the result monotonically, then
 * revalidates the exact input on its own budget; if the input has ended or the check fails,
 * the badge is withdrawn at once by its reaction id. Lark and database failures are recorded
 * or logged here and never thrown; anything else (a bug) is recorded as `uncertain`, so the
 * sweeps resolve the badge, and then thrown for the caller to log as an error.
 */
export async function addTypingBadge(
  pool: Pool,
  reg: Registration,
  opts: AddOptions = {},
): Promise<AddOutcome> {
  if (reg.kind !== 'registered') return 'skipped';
  const inst = reg.installation;
  const client = new LarkClient(
    { baseUrl: inst.apiBase, appId: inst.appId, appSecret: inst.appSecret },
    { fetch: opts.fetch },
  );
  let reactionId: string;
  try {
    const r = await client.createReaction(reg.messageId, TYPING_EMOJI, {
      deadline: new Deadline(opts.addBudgetMs ?? ADD_BUDGET_MS),
    });
    reactionId = r.reaction_id;
  } catch (err) {
    const e = err instanceof LarkApiError ? err : undefined;
    const state = e && e.kind !== 'retryable' ? 'not_added' : 'uncertain';
    await recordAddFailed(pool, reg.id, state, e?.code || e?.httpStatus || 0).catch((dbErr) =>
      log.warn('typing_add_record_failed', { rowId: reg.id, error: dbErr }),
    );
    if (!e) throw err;
    log.warn('typing_add_failed', { rowId: reg.id, kind: e.kind, code: e.code, httpStatus: e.httpStatus });
    return state;
  }
  let rec: Awaited<ReturnType<typeof recordAdded>>;
  try {
    rec = await recordAdded(pool, reg.id, reactionId);
  } catch (err) {
    // The badge exists but its id is not recorded: the row stays pending and a sweep
    // resolves it from one minute after registration.
    log.warn('typing_add_record_failed', { rowId: reg.id, error: err });
    return 'record_failed';
  }
  const ended = !rec || rec.ended || !(await stillLive(pool, reg, opts));
  if (!ended) return 'added';
  // Withdraw at once with the credentials in hand (the row's snapshot may already be erased).
  const gone = await deleteExact(client, reg.messageId, reactionId, new Deadline(ADD_BUDGET_MS));
  if (gone.kind === 'gone' && !rec?.terminal)
    // Unrecorded, the row stays settled-but-uncleaned and the retry pass confirms it is gone.
    await recordCleaned(pool, reg.id).catch((err: unknown) =>
      log.warn('typing_add_record_failed', { rowId: reg.id, stage: 'cleaned', error: err }),
    );
  if (gone.kind !== 'gone')
    log.warn('typing_withdraw_failed', { rowId: reg.id, outcome: gone.kind, stage: 'add' });
  return 'withdrawn_after_add';
}

/**
 * Revalidation of the exact input on its own budget: not settled, the installation still
 * present with the same App ID, and the engine's check (turn not terminal, conversation
 * active). A failing check counts as "ended": a stray badge is worse than a missing one.
 */
async function stillLive(pool: Pool, reg: Extract<Registration, { kind: 'registered' }>, opts: AddOptions) {
  try {
    return await withTx(
      pool,
      { budgetMs: opts.revalidateBudgetMs ?? REVALIDATE_BUDGET_MS, maxAttempts: 1 },
      async (tx) => {
        const { rows } = await tx.query<{ live: boolean; session_id: string }>(
          `select r.session_id,
           (r.settled_at is null and r.cleaned_at is null and r.abandoned_at is null
            and exists (select 1 from lark_installations i where i.id = r.installation_id and i.app_id = r.app_id)) as live
         from channel_typing_reaction r where r.id = $1`,
          [reg.id],
        );
        const row = rows[0];
        if (!row?.live) return false;
        return opts.isInputLive
          ? await opts.isInputLive(tx, { rowId: reg.id, sessionId: row.session_id })
          : true;
      },
    );
  } catch (err) {
    log.warn('typing_revalidation_failed', { rowId: reg.id, error: err });
    return false;
  }
}
