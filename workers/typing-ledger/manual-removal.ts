import type { Pool } from '@neondatabase/serverless';
import { z } from 'zod';
import { Deadline } from '../clock';
import type { KeyRing } from '../crypto/sealed';
import { withTx } from '../db/tx';
import { currentClient, snapshotClient } from './credentials';
import { deleteExact, type RemoteOutcome, sweepOurTyping } from './remote';
import { recordCleaned } from './store';
import { WITHDRAW_BUDGET_MS } from './types';

export const RowId = z.string().regex(/^[A-Za-z0-9_-]{1,100}$/, 'a ledger row id');

/** The answer to each refusal of `removeManually`, for the admin route and the console. */
export const REFUSED = {
  unknown_row: ['not_found', 'No such typing-reaction row'],
  cleaned: ['typing_row_cleaned', 'The badge was already confirmed gone'],
  active: [
    'typing_row_active',
    'The row is pending inside its lifetime: its turn and the maintenance passes own it',
  ],
  no_credentials: [
    'typing_no_credentials',
    'The installation is gone (or names another app) and no snapshot is left: remove the badge in Lark',
  ],
} as const;

export type ManualOutcome = 'removed' | 'already_gone' | 'none_found' | 'retryable' | 'permanent';

/**
 * - unknown_row: no such row (never registered, or pruned).
 * - cleaned: the badge was confirmed gone already; nothing to remove.
 * - active: pending and inside its lifetime: the turn and the maintenance passes own it.
 * - no_credentials: the installation is gone (or names another app) and no snapshot is left.
 * - done: Lark was asked; the result is recorded on the row.
 */
export type ManualRemoval =
  | { kind: 'unknown_row' | 'cleaned' | 'active' | 'no_credentials' }
  | {
      kind: 'done';
      outcome: ManualOutcome;
      /** Lark's code (or the HTTP status) of a failure; null on success. */
      code: number | null;
      retryAfterSeconds?: number;
      /** Whose credentials spoke: the installation's current ones, or the row's snapshot. */
      via: 'installation' | 'snapshot';
    };

interface Target {
  id: string;
  installation_id: string;
  app_id: string;
  source_message_id: string;
  reaction_id: string | null;
  credential_snapshot: string | null;
  cleaned: boolean;
  abandoned: boolean;
  overdue: boolean;
}

/**
 * Removes one given-up row's badge NOW, for an operator (given-up.ts lists the candidates):
 * abandoned rows, and pending rows past their seven-day deadline. Credentials: the
 * installation's current ones for the row's App ID; the snapshot only when that installation
 * is gone and a snapshot is still there (a pending row). A known reaction id is deleted
 * precisely, otherwise a sweep deletes only this app's own `Typing` (humans' and other apps'
 * badges are kept). No lock is held across the remote call. The result is recorded on the
 * row; an abandoned row stays abandoned (terminal rows are never revived), and an overdue
 * pending row whose badge is confirmed gone is cleaned through recordCleaned like any other.
 */
export async function removeManually(
  pool: Pool,
  keys: KeyRing,
  rowId: string,
  opts: { fetch?: typeof fetch; budgetMs?: number } = {},
): Promise<ManualRemoval> {
  const { rows } = await pool.query<Target>(
    `select id, installation_id, app_id, source_message_id, reaction_id, credential_snapshot,
       cleaned_at is not null as cleaned, abandoned_at is not null as abandoned,
       expires_at <= app_now() as overdue
     from channel_typing_reaction where id = $1`,
    [rowId],
  );
  const row = rows[0];
  if (!row) return { kind: 'unknown_row' };
  if (row.cleaned) return { kind: 'cleaned' };
  if (!row.abandoned && !row.overdue) return { kind: 'active' };
  let via: 'installation' | 'snapshot' = 'installation';
  let client = await currentClient(pool, keys, row, opts.fetch);
  if (!client) {
    via = 'snapshot';
    client = await snapshotClient(pool, keys, row, opts.fetch);
  }
  if (!client) return { kind: 'no_credentials' };

  const deadline = new Deadline(opts.budgetMs ?? WITHDRAW_BUDGET_MS);
  const r = row.reaction_id
    ? await deleteExact(client, row.source_message_id, row.reaction_id, deadline)
    : await sweepOurTyping(client, row.source_message_id, row.app_id, deadline);
  const { outcome, code, retryAfterSeconds } = judge(r);
  const gone = outcome === 'removed' || outcome === 'already_gone' || outcome === 'none_found';
  await withTx(pool, { budgetMs: 2000 }, async (tx) => {
    // Past its deadline, an empty sweep acknowledges (as withdrawRow does past retention).
    if (gone && !row.abandoned) await recordCleaned(tx, row.id);
    await tx.query(
      `update channel_typing_reaction
       set manual_removal_at = app_now(), manual_removal_outcome = $2, manual_removal_code = $3,
           updated_at = app_now()
       where id = $1`,
      [row.id, outcome, code],
    );
  });
  return { kind: 'done', outcome, code, retryAfterSeconds, via };
}

function judge(r: RemoteOutcome): {
  outcome: ManualOutcome;
  code: number | null;
  retryAfterSeconds?: number;
} {
  switch (r.kind) {
    case 'gone':
      return { outcome: r.deleted > 0 ? 'removed' : 'already_gone', code: null };
    case 'not_found':
      return { outcome: 'none_found', code: null };
    case 'retryable':
      return { outcome: 'retryable', code: r.code, retryAfterSeconds: r.retryAfterSeconds };
    case 'permanent':
      return { outcome: 'permanent', code: r.code };
    case 'found':
      // sweepOurTyping deletes what it finds; `found` never leaves it.
      throw new Error('sweep returned found');
  }
}
