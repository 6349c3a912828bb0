import type { ErrorCode } from './api-types';

/**
 * What the client does with each server error code. Typed as a Record over the server's
 * ErrorCode, so a code added in workers/errors.ts fails `tsc` here until it is classified.
 *
 * - `retry`: transient; the operation stays in the journal and is replayed with backoff (at
 *   least Retry-After when the answer has one). `rate_limited` is the request limiter of every
 *   /v1 route (writes and retirements too): never terminal, so a retirement the client owes is
 *   retried for as long as it takes, and the newer choice waits behind it.
 * - `quota`: the ticket-issuance quota refused a new ticket (429 `quota_exceeded`, details.reason
 *   `rate` or `outstanding`); waits Retry-After, terminal after a few refusals of an issuance
 *   (replay.ts: never for an entry that holds a ticket, whose write or retirement is owed).
 * - `session`: the token is refused (expired, signed out); the journal waits for sign-in.
 * - `restamp`: the operation ID's creation stamp is ahead of server time (device clock fast);
 *   nothing was issued under it, so the choice gets a new ID stamped on server time.
 * - the rest are terminal for the operation: stop replaying and reconcile.
 *   `unknown`: the server no longer knows the operation (its ticket was deleted long after
 *   expiry); whether it applied shows only in the current state, which the entry records.
 */
export type TerminalKind = 'expired' | 'unknown' | 'retired' | 'permission_lost' | 'quota' | 'rejected';
export type Disposition = 'retry' | 'quota' | 'session' | 'restamp' | Exclude<TerminalKind, 'quota'>;

export const DISPOSITION: Record<ErrorCode, Disposition> = {
  operation_expired: 'expired',
  operation_outcome_unknown: 'unknown',
  operation_clock_skew: 'restamp',
  gone: 'expired',
  operation_retired: 'retired',
  not_found: 'permission_lost',
  forbidden: 'permission_lost',
  ticket_invalid: 'rejected',
  intent_mismatch: 'rejected',
  conflict: 'rejected',
  ticket_required: 'rejected',
  legacy_contract_closed: 'rejected',
  revision_conflict: 'rejected',
  precondition_failed: 'rejected',
  bad_request: 'rejected',
  validation_failed: 'rejected',
  payload_too_large: 'rejected',
  unsupported_media_type: 'rejected',
  unknown_reference: 'rejected',
  method_not_allowed: 'rejected',
  lark_unknown_installation: 'rejected',
  lark_bad_signature: 'rejected',
  lark_stale_timestamp: 'rejected',
  lark_bad_token: 'rejected',
  lark_bad_event: 'rejected',
  // Operator (admin) routes only; the app never meets them.
  typing_row_active: 'rejected',
  typing_row_cleaned: 'rejected',
  typing_no_credentials: 'rejected',
  // Admin-only codes (turn re-run, pause): never an answer to the mobile client's calls.
  turn_not_failed: 'rejected',
  turn_already_rerun: 'rejected',
  turn_running: 'rejected',
  installation_paused: 'rejected',
  turn_inputs_gone: 'rejected',
  // Admin-only codes (bulk dead letters): never an answer to the mobile client's calls.
  range_invalid: 'rejected',
  cursor_invalid: 'rejected',
  preview_required: 'rejected',
  // The operator console (/console) only.
  csrf_invalid: 'rejected',
  confirmation_required: 'rejected',
  unauthorized: 'session',
  rate_limited: 'retry',
  quota_exceeded: 'quota',
  internal_error: 'retry',
  bad_environment: 'retry',
  service_unavailable: 'retry',
  timeout: 'retry',
  agent_failed: 'retry',
  agent_timeout: 'retry',
  agent_stream_invalid: 'retry',
};

/**
 * Unknown codes (a newer server) are treated by status: 5xx and 429 retry (a 429 is a "later",
 * never an end), 401 session, else rejected.
 */
export function dispositionOf(code: string, status: number): Disposition {
  const known = (DISPOSITION as Record<string, Disposition>)[code];
  if (known) return known;
  if (status >= 500 || status === 429) return 'retry';
  if (status === 401) return 'session';
  return 'rejected';
}
