import type { Pool, PoolClient } from '@neondatabase/serverless';
import { ACTOR_COMMIT_BUDGET_MS } from '../effects/types';

/** Anything that runs one statement: a pool, or a client inside a transaction. */
export type Q = Pick<PoolClient, 'query'> | Pick<Pool, 'query'>;

export const TYPING_EMOJI = 'Typing';
/** Pending ledger slots per workspace (spec: an increase needs a capacity review). */
export const QUOTA_SLOTS = 1000;
/** A message older than this when it arrives is a replay: no Add. */
export const STALE_MESSAGE_MS = 2 * 60_000;
/** Budget of the Add, of the revalidation after it, and of one remote withdrawal. */
export const ADD_BUDGET_MS = 2000;
export const REVALIDATE_BUDGET_MS = 1000;
export const WITHDRAW_BUDGET_MS = 2000;
/** Budget of each write the Add path makes (statement and lock timeout): a stuck row or a
 *  slow database fails the write, and the badge is then withdrawn with the credentials in hand
 *  instead of being left unrecorded. It covers the longest the input's own flush can hold the
 *  row (markInputsTasked inside the actor's fenced commit, ACTOR_COMMIT_BUDGET_MS) plus a
 *  second: a live badge is never withdrawn because of our own commit (issue 28 hole 8). */
export const RECORD_BUDGET_MS = ACTOR_COMMIT_BUDGET_MS + 1000;
/** An Add still unfinished this long after registration may be resolved by a sweep. */
export const UNCERTAIN_SWEEP_AFTER_MS = 60_000;
/** Seven-day maximum lifetime from registration. */
export const MAX_LIFETIME_MS = 7 * 86_400_000;
/** First retry of a failed withdrawal (the maintenance pass backs off from here to 1 h). */
export const FIRST_RETRY_MS = 30_000;

export type AddState = 'pending' | 'uncertain' | 'added' | 'not_added';

/** A ledger row as stored; `credential_snapshot` is sealed and never logged. */
export interface TypingRow {
  id: string;
  workspace_id: string;
  installation_id: string;
  app_id: string;
  session_id: string;
  source_message_id: string;
  chat_id: string | null;
  input_position: string;
  context_revision: string;
  message_created_at: Date | null;
  credential_snapshot: string | null;
  quota_slot: number | null;
  add_state: AddState;
  reaction_id: string | null;
  add_finished_at: Date | null;
  taskless: boolean;
  settled_at: Date | null;
  settled_by: string | null;
  settle_outcome: string | null;
  cleaned_at: Date | null;
  abandoned_at: Date | null;
  attempts: number;
  next_attempt_at: Date | null;
  last_error: string | null;
  /** The last answered withdrawal was refused for the app's credentials (10014/10015; migration 0120). */
  credentials_refused: boolean;
  /** The retry pass's last claim (migration 0082). */
  last_attempt_at: Date | null;
  /** The last operator-requested removal and its result (manual-removal.ts, migration 0082). */
  manual_removal_at: Date | null;
  manual_removal_outcome: string | null;
  manual_removal_code: number | null;
  expires_at: Date;
  created_at: Date;
  updated_at: Date;
}

/** The columns a withdrawal needs; `uncertain_sweep_ok` is computed in SQL from app_now(). */
export interface WithdrawTarget {
  id: string;
  /** Where the current credentials are looked up when the snapshot's are refused. */
  installation_id: string;
  app_id: string;
  source_message_id: string;
  credential_snapshot: string | null;
  add_state: AddState;
  reaction_id: string | null;
  settled_at: Date | null;
  /** true once the retention deadline (expires_at) has passed: an empty sweep may acknowledge. */
  past_retention?: boolean;
}

/** Columns selected for a WithdrawTarget (aliases match the interface). */
export const TARGET_COLUMNS = `id, installation_id, app_id, source_message_id, credential_snapshot, add_state, reaction_id,
  settled_at, expires_at <= app_now() as past_retention`;
