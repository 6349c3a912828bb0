import type { ErrorCode } from '../errors';

/**
 * The reaction contract's SQL refusals (migrations/functions/reaction_tickets.sql): each raises
 * SQLSTATE RLT01 with one of these keys as its message and its details as JSON in DETAIL.
 * This table is the one place a key becomes an API answer (code and text), for the ticketed
 * write (ticket-call.ts) and for admission on every other route (directory.ts `admit`);
 * test/node/reaction-tickets/contract-keys.unit.test.ts fails when the SQL raises a key this
 * table lacks, or this table keeps one the SQL no longer raises.
 */
export const CONTRACT_ERROR = 'RLT01';

export const expiredMessage =
  'This operation expired; stop replaying it. The reactions shown are the current truth; ' +
  'whether it applied earlier is reflected there. A new reaction needs a new operation ID.';

export const CONTRACT_ANSWERS: Record<string, [ErrorCode, string]> = {
  'unauthorized/unknown_actor': ['unauthorized', 'Unknown actor'],
  'unauthorized/signed_out': ['unauthorized', 'Session ended by sign-out'],
  not_found: ['not_found', 'Message not found'],
  ticket_invalid: ['ticket_invalid', 'The ticket is not valid for this actor and operation'],
  intent_mismatch: ['intent_mismatch', 'The request does not match the intent bound to this ticket'],
  operation_retired: ['operation_retired', 'This operation was retired and can never apply'],
  // A ticket whose MAC verifies was issued by this server; if its row is gone, housekeeping
  // deleted it (long after its expiry) or its message went away. Whether it applied is no
  // longer known: a terminal answer that says so, never 403 (issue 15 item 5).
  operation_outcome_unknown: [
    'operation_outcome_unknown',
    'This operation is no longer known to the server; stop replaying it. Whether it applied is ' +
      'reflected in the current reactions. A new reaction needs a new operation ID.',
  ],
  operation_expired: ['operation_expired', expiredMessage],
};
